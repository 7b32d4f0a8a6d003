"""The private split grid's release: a noisy histogram of every numeric feature.

A random tree's thresholds come from the public bounds, which on real data are often much
wider than where the records lie (the middle 90 % of a breast-cancer measurement fills a
fifth of its documented range; Elec2's prices a tenth of their [0, 1]), so many splits cut
empty space. A learner with a private split grid (``grid_share`` of the budget,
:class:`~renyiboost.models.grid.QuantileMap`) first releases, for each of the ``n``
numeric features, a histogram of the training records over equal bins of the public
range, each count with Gaussian noise; the trees then draw their thresholds at quantiles
of the noisy histograms. DP-EBM buys its bins the same way (Nori et al., "Accuracy,
interpretability, and differential privacy via explainable boosting", ICML 2021, Alg. 1,
with a share of its budget).

**Cost.** Values are clipped to the public bounds, so a record adds 1 to exactly one bin
of each histogram: adding or removing it changes the ``n`` histograms by a vector of L2
norm √n. Every count with Gaussian noise of std σ is one Gaussian mechanism with noise
multiplier σ/√n, of RDP ``α·n/(2σ²)`` (Mironov 2017, Prop. 7). Every record pays it in
full, whatever its values: the filter charges each active record this one fixed amount.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SplitGridRelease:
    """The noisy histograms of ``n_histograms`` numeric features, priced at ``charge`` (RDP
    at ``order``, the filter's α̂) for every record."""

    charge: float
    order: int
    n_histograms: int

    def __post_init__(self) -> None:
        if not self.charge > 0:
            raise ValueError(f"charge must be > 0, got {self.charge!r}")
        if not self.n_histograms >= 1:
            raise ValueError(f"n_histograms must be >= 1, got {self.n_histograms!r}")

    @property
    def noise_multiplier(self) -> float:
        """z with ``α/(2z²) = charge``: the Gaussian's std over the release's L2
        sensitivity √n."""
        return math.sqrt(self.order / (2.0 * self.charge))

    @property
    def count_noise_std(self) -> float:
        """Std σ = z·√n of the noise on every bin's count.

        >>> release = SplitGridRelease(charge=0.02, order=25, n_histograms=4)
        >>> round(release.count_noise_std, 6)
        50.0
        >>> from renyiboost.accounting.rdp import gaussian_rdp
        >>> float(gaussian_rdp(release.noise_multiplier, [25])[0])
        0.02
        """
        return self.noise_multiplier * math.sqrt(self.n_histograms)


__all__ = ["SplitGridRelease"]
