"""A DP estimate of the number of training rows, for choosing defaults in a batch fit.

The default hyper-parameters depend on the data set's size (:mod:`renyiboost.models.defaults`),
and under add/remove neighbours the size is private: reading ``len(X)`` would leak it
(DEVELOPERS invariant 1). So a batch fit without a public ``expected_records`` buys a noisy
count first: the Laplace mechanism on a count of sensitivity 1 (Dwork, McSherry, Nissim &
Smith 2006) is ``ε_size``-DP with scale ``1/ε_size``, δ = 0. Everything after it — the
calibration, the trees — is chosen from the released count and is (ε − ε_size, δ)-DP for
*every* value of it, so by (adaptive) basic composition (Dwork & Roth 2014, Thm. 3.16 and
the remark after it) the whole fit is (ε, δ)-DP. The defaults are read on a log scale, so
a few percent of ε is plenty: at ε = 1 the count's std is √2/0.05 ≈ 28 rows.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

#: Share of ε spent on the size estimate when a batch fit must buy one.
SIZE_ESTIMATE_SHARE = 0.05


class SizeEstimate(BaseModel):
    """The Laplace count and how it splits the target ε."""

    model_config = ConfigDict(frozen=True)

    epsilon: float = Field(gt=0, description="ε of the count (pure DP, δ = 0)")
    rest_epsilon: float = Field(gt=0, description="ε left for the model")

    @classmethod
    def split(cls, epsilon: float, share: float = SIZE_ESTIMATE_SHARE) -> SizeEstimate:
        """Spend ``share`` of ``epsilon`` on the count and leave the rest to the model.

        >>> SizeEstimate.split(1.0).rest_epsilon
        0.95
        """
        if not (epsilon > 0 and math.isfinite(epsilon)):
            raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
        if not 0 < share < 1:
            raise ValueError(f"share must be in (0, 1), got {share!r}")
        return cls(epsilon=share * epsilon, rest_epsilon=(1.0 - share) * epsilon)

    @property
    def laplace_scale(self) -> float:
        """Scale b = Δ/ε_size of the Laplace noise on the count (Δ = 1)."""
        return 1.0 / self.epsilon
