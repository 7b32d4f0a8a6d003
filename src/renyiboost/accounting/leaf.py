"""The DP leaf release of S-GBDT (Kirschte et al., Alg. 4, Thm. 10, Cor. 22).

A leaf releases two numbers with independent Gaussian noise: the sum of the records'
clipped gradients and their count (or, for Newton leaves, their clipped hessian sum).
With noise scale σ and count share ``r1`` (``r2 = 1 − r1``):

* the count (sensitivity ``Δc``: 1, or the hessian bound H) gets std ``Δc·σ/√(2·r1)``;
* the gradient sum (sensitivity ``g*``, the gradient clip) gets std ``g*·σ/√(2·r2)``.

Whitening the 2-D non-spherical Gaussian (dividing each coordinate by its std) turns it
into a spherical Gaussian with unit variance whose sensitivity for a record contributing
``a·Δc`` to the count and ``b·g*`` to the sum is ``√(2(r1·a² + r2·b²))/σ``. So the release
is *exactly* a 1-D Gaussian mechanism with noise multiplier

    z(a, b) = σ / √(2·s²),   s² = r1·a² + r2·b² ∈ [0, 1],

and per tree, before subsampling, ``ρ(α) = α·s²/σ²``. A record falls in one leaf only, so
all leaves of a tree together cost the same (parallel composition). ``s²`` is the record's
*individual* squared sensitivity that the Rényi filter charges for.

The ablation baseline, *static* leaf noise (SLN, the DPBoost-style release that S-GBDT's
dynamic leaf noise scaling improves on): the count is not released; the leaf value
``Σg/(n + λ)`` itself gets Gaussian noise scaled to its worst-case sensitivity
``g*/(1 + λ)`` (Li et al. 2020, DPBoost, Lemma 2; it holds for every n ≥ 0), so its noise
does not shrink as leaves fill up. Giving it std ``g*/(1 + λ)·σ/√2`` makes one static tree
cost exactly what one dynamic tree costs a full-sensitivity record (s² = 1), so the two
compare at equal ε and the same calibration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np

from renyiboost.accounting.events import GaussianEvent, PoissonSampledEvent


@numba.njit(cache=True, nogil=True, inline="always")
def squared_sensitivity(count_share: float, grad_share: float, count_ratio: float,
                        grad_ratio: float) -> float:  # pragma: no cover - compiled
    """Compiled twin of :meth:`LeafRelease.sensitivity2` for one record (same operation order:
    ``(r1·a)·a + (r2·b)·b``), for the compiled training round."""
    return count_share * count_ratio * count_ratio + grad_share * grad_ratio * grad_ratio


def full_price(count_ratio: float | np.ndarray, grad_ratio: float | np.ndarray) -> np.ndarray:
    """s² = 1 for every record that pays the full price (static leaves, no individual
    filter), but NaN for a record whose gradient or denominator is not a finite number: the
    filter refuses it (:func:`~renyiboost.accounting.filter.check_sensitivity2`) where a 1
    had let its NaN into a released leaf (review G2 #3). Its inputs are the record's; that
    it pays 1 is not."""
    a = np.asarray(count_ratio, dtype=float)
    b = np.asarray(grad_ratio, dtype=float)
    return np.where(np.isfinite(a) & np.isfinite(b), 1.0, np.nan)


@dataclass(frozen=True)
class LeafRelease:
    """Noise of one DP leaf: scale ``sigma`` split with count share ``count_share`` (r1);
    ``static=True`` is the SLN baseline (noise on the leaf value, see the module docstring)."""

    sigma: float
    count_share: float
    static: bool = False

    def __post_init__(self) -> None:
        if not self.sigma > 0:
            raise ValueError(f"sigma must be > 0, got {self.sigma!r}")
        if not 0.0 < self.count_share < 1.0:
            raise ValueError(f"count_share must be in (0, 1), got {self.count_share!r}")

    @property
    def grad_share(self) -> float:
        """r2 = 1 − r1."""
        return 1.0 - self.count_share

    def count_noise_std(self, count_sensitivity: float = 1.0) -> float:
        """Std of the noise on the count (or on the hessian sum, sensitivity H)."""
        return count_sensitivity * self.sigma / math.sqrt(2.0 * self.count_share)

    def sum_noise_std(self, grad_clip: float) -> float:
        """Std of the noise on the clipped-gradient sum (sensitivity ``grad_clip``)."""
        return grad_clip * self.sigma / math.sqrt(2.0 * self.grad_share)

    def lone_sum_noise_std(self, grad_clip: float) -> float:
        """Std of the noise on the sum when the count is not released (its denominator is
        public): the whole squared sensitivity is the sum's, ``s² = b²``, so a record with
        |g| at the clip meets noise multiplier ``σ/√2`` — what the release costs it anyway —
        and the sum gets std ``g*·σ/√2`` instead of ``g*·σ/√(2·r2)``."""
        return grad_clip * self.sigma / math.sqrt(2.0)

    def static_value_noise_std(self, grad_clip: float, reg_lambda: float) -> float:
        """Std of the noise on a static (SLN) leaf value ``Σg/(n + λ)``: sensitivity
        ``grad_clip/(1 + λ)`` times ``σ/√2``, the noise multiplier of s² = 1."""
        return grad_clip / (1.0 + reg_lambda) * self.sigma / math.sqrt(2.0)

    def sensitivity2(
        self, count_ratio: float | np.ndarray, grad_ratio: float | np.ndarray
    ) -> np.ndarray:
        """Individual squared sensitivity ``s² = r1·a² + r2·b²`` (a, b ∈ [0, 1]); 1 for every
        record of a static leaf, whose value's sensitivity does not shrink with |g|."""
        a = np.asarray(count_ratio, dtype=float)
        b = np.asarray(grad_ratio, dtype=float)
        if self.static:
            return full_price(a, b)
        return self.count_share * a * a + self.grad_share * b * b

    def noise_multiplier(self, sensitivity2: float | np.ndarray) -> np.ndarray:
        """``z = σ/√(2 s²)``; infinite for a record that contributes nothing."""
        s2 = np.asarray(sensitivity2, dtype=float)
        with np.errstate(divide="ignore"):
            return self.sigma / np.sqrt(2.0 * s2)

    def event(self, sensitivity2: float = 1.0, sampling_rate: float = 1.0) -> PoissonSampledEvent:
        """The event one tree is, for a record of squared sensitivity ``sensitivity2``."""
        z = float(self.noise_multiplier(sensitivity2))
        return PoissonSampledEvent(sampling_rate, GaussianEvent(z))
