"""The answer recalibration's release: five noisy sums over a window of new keys.

On an unbounded binary stream the individual filter keeps the keys the model fits well
longer than the others (they pay less a round), so in a region where the model is
confident the pool's label rate is more extreme than the stream's, and the margins become
overconfident: on Adult drawn i.i.d., the answers' mean probability was 0.185 for a base
rate of 0.246. A stream corrects its answers with Platt's map ``p = σ(a·m + b)`` (Platt,
"Probabilistic outputs for support vector machines", 1999), fitted on keys that the pool
has not yet filtered: the keys that arrive in a window of stream positions, each scored
by the model's margin ``m`` when it is merged, before any round has read it.

One Newton step on the logistic log-likelihood of ``(a, b)`` needs five sums over the
window, with ``p = σ(a·m + b)``, ``r = y − p`` and ``w = p(1 − p)``::

    Σ r·m,   Σ r,   Σ w·m²,   Σ w·m,   Σ w

**Cost.** The margin is clipped to ``[−M, M]`` (a public bound) and ``y`` is 0 or 1, so one
key moves the sums by at most ``c = (M, 1, M²/4, M/4, 1/4)`` in absolute value. Each sum
gets Gaussian noise of std ``z·c_i``: dividing every sum by its ``c_i`` gives a vector with
spherical noise of std ``z`` whose L2 sensitivity is at most √5, one Gaussian mechanism of
RDP ``α·5/(2z²)`` (Mironov 2017, Prop. 7). A key pays it once, in full, when it is merged
(whatever its values), as the split grid's payers do (:mod:`renyiboost.accounting.grid`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: The number of sums a Newton step of Platt's two parameters reads.
N_PLATT_SUMS = 5
#: The largest margin clip: σ(36) is already 1 − 2·10⁻¹⁶, so a margin past it says nothing
#: more; up to 300 the sums' sensitivities (M²/4) and ``exp(a·m + b)`` (a ≤ 2, |b| ≤ 5: at
#: most e⁶⁰⁵) stay finite, and every clip a store could have pinned and refitted with before
#: is still taken. An infinite clip passed the config and failed the first refit, at every
#: restart of the pinned store (review U #1).
MAX_MARGIN_CLIP = 300.0


def platt_sensitivities(margin_clip: float) -> np.ndarray:
    """``c``: how far one key with a margin in ``[−margin_clip, margin_clip]`` can move
    each of the five sums (module docstring), in their order."""
    m = float(margin_clip)
    return np.array([m, 1.0, m * m / 4.0, m / 4.0, 0.25])


@dataclass(frozen=True)
class PlattSumsRelease:
    """The five noisy sums of one recalibration window, priced at ``charge`` (RDP at
    ``order``, the filter's α̂) for every key of the window."""

    charge: float
    order: int
    margin_clip: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.charge) and self.charge > 0):
            raise ValueError(f"charge must be a finite number > 0, got {self.charge!r}")
        if not 0 < self.margin_clip <= MAX_MARGIN_CLIP:
            raise ValueError(f"margin_clip must be in (0, {MAX_MARGIN_CLIP:g}], got "
                             f"{self.margin_clip!r}")

    @property
    def noise_multiplier(self) -> float:
        """z with ``α·5/(2z²) = charge``: every sum's noise std over its sensitivity."""
        return math.sqrt(N_PLATT_SUMS * self.order / (2.0 * self.charge))

    @property
    def noise_stds(self) -> np.ndarray:
        """The std ``z·c_i`` of the noise on each sum.

        >>> release = PlattSumsRelease(charge=0.5, order=10, margin_clip=4.0)
        >>> release.noise_stds.round(6).tolist()
        [28.284271, 7.071068, 28.284271, 7.071068, 1.767767]
        >>> from renyiboost.accounting.rdp import gaussian_rdp
        >>> # the five sums scaled by 1/c: spherical noise z, sensitivity √5
        >>> round(float(gaussian_rdp(release.noise_multiplier / math.sqrt(5), [10])[0]), 9)
        0.5
        """
        return self.noise_multiplier * platt_sensitivities(self.margin_clip)


__all__ = ["N_PLATT_SUMS", "PlattSumsRelease", "platt_sensitivities"]
