"""A private split grid: thresholds at quantiles of noisy histograms.

The random trees of S-GBDT draw their thresholds from the public bounds. Where those are
much wider than the data (documented ranges, top codes, standardised features bounded at
±5), most candidates cut empty space: a level whose split leaves one child empty costs what
any level costs and learns nothing. :class:`QuantileMap` moves the candidates to where
the records are, from one release of noisy histograms (its price and noise:
:class:`~renyiboost.accounting.grid.SplitGridRelease`); everything after is
post-processing, so the trees' own charges do not change.

How: per numeric feature, the noisy counts of :data:`GRID_BINS` equal bins of the public
range, counts below :data:`GRID_COUNT_CUTOFF` noise standard deviations taken as 0, make a
distribution, mixed with the uniform one (:data:`GRID_UNIFORM_SHARE`) so that no part of
the range loses every candidate (noise can hide a bin; a test row can land there). Its
cumulative distribution function F, piecewise linear and strictly increasing, maps the
public range onto [0, 1]. A tree is grown on that unit scale exactly as on the public one
(the grower's rules, its ``split_candidates`` equidistant points) and every numeric
threshold t is stored as F⁻¹(t) in the feature's own units. So equidistant candidates become quantiles of the
noisy distribution, and a prediction reads the thresholds as before.

**Features of a few values keep the public grid.** Where the records hold a few distinct
values (Phishing's −1 / 0 / 1, Adult's years of education, river's Planes2D), each sits in
a bin of its own with empty bins around it. Quantiles inside such a bin separate nothing,
and the thresholds that do separate its value from the next lie within a smoothing window
of it, so the averaged answers blur the very steps the trees found (Planes2D, batch at
ε = 1: R² −0.10 with the map against the public grid). A feature is mapped only where at
least half of its surviving mass (:data:`GRID_RUN_SHARE`) lies in bins with a surviving
neighbour, as a continuous distribution's does; the decision reads the noisy counts only,
so it is post-processing too. Where noise hides most bins (few records against the
noise) the survivors are scattered, and the feature keeps the public grid as well.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from renyiboost.randomness import NoiseSource
from renyiboost.schema import PublicSchema

#: Bins of each numeric feature's noisy histogram: twice the 32 split candidates of the
#: classification policy, so a candidate falls between bins' edges at most half a bin off
#: its quantile. More bins spread the same records over more noisy counts.
GRID_BINS = 64
#: The uniform distribution's share in each feature's grid distribution: a fifth of the
#: candidates stay spread over the whole public range.
GRID_UNIFORM_SHARE = 0.2
#: A noisy count at most this many standard deviations of its noise is taken as 0. Most
#: bins of a wide public range are empty, and their noise clamped at 0 alone would add
#: about 0.4 σ each: at ε = 1, σ ≈ 29 for two features and 3,000 records, whose 60 empty
#: bins then held a fifth as much mass as the records. Above 2 σ an empty bin survives
#: with probability 2.3 %. A feature whose every count is below it keeps the public grid.
GRID_COUNT_CUTOFF = 2.0
#: The least share of a feature's surviving mass in bins next to another surviving bin for
#: the feature to be mapped (module docstring): a continuous distribution's mass lies in
#: runs of bins, a few distinct values' in isolated ones.
GRID_RUN_SHARE = 0.5
#: A gridded ensemble's smoothing window is a share of each numeric feature's span
#: 2 · (F⁻¹(0.75) − F⁻¹(0.25)), twice the noisy interquartile range: the public range for
#: data spread evenly over it, and proportionally less where the data fill a small part of
#: it (:meth:`QuantileMap.smoothing_spans`).
SMOOTHING_SPAN_QUANTILE = 0.25


def histograms(schema: PublicSchema, X: np.ndarray, bins: int = GRID_BINS) -> np.ndarray:
    """The exact counts of ``X``'s numeric columns (encoded rows, inside the public bounds)
    over ``bins`` equal bins of each public range, shape ``(numeric features, bins)``: a row
    adds one count to one bin of each (a missing value to none), so a row's L2 norm over
    them is at most √(numeric features) (:class:`~renyiboost.accounting.grid.
    SplitGridRelease`)."""
    columns = np.flatnonzero(~np.asarray(schema.is_categorical, dtype=bool))
    lower = np.asarray(schema.lower, dtype=np.float64)[columns]
    width = np.asarray(schema.upper, dtype=np.float64)[columns] - lower
    unit = (X[:, columns] - lower) / np.where(width > 0, width, 1.0)
    present = ~np.isnan(unit)  # a missing value counts in no bin
    bin_of = np.clip((np.where(present, unit, 0.0) * bins).astype(np.int64), 0, bins - 1)
    flat = (bin_of + bins * np.arange(columns.size))[present]
    counts = np.bincount(flat, minlength=columns.size * bins).astype(np.float64)
    return counts.reshape(columns.size, bins)


@dataclass(frozen=True)
class QuantileMap:
    """Per feature, the piecewise-linear map F⁻¹ from [0, 1] to its public range.

    ``edges`` and ``cdf`` have shape ``(k, bins + 1)`` (one row per schema feature; rows
    of features that are not mapped are the identity, and unused); ``mapped`` marks the
    numeric features the map moves (module docstring: not those of a few values).
    """

    edges: np.ndarray
    cdf: np.ndarray
    mapped: np.ndarray

    @classmethod
    def release(cls, schema: PublicSchema, X: np.ndarray, noise_std: float,
                noise: NoiseSource, bins: int = GRID_BINS,
                uniform_share: float = GRID_UNIFORM_SHARE) -> QuantileMap:
        """The map from the histograms of ``X``'s numeric columns (encoded rows, inside the
        public bounds), every count with Gaussian noise of std ``noise_std`` (0: exact, for
        a learner without privacy).

        >>> from renyiboost.randomness import noise_source
        >>> schema = PublicSchema(features={"a": (0, 100), "c": ["x", "y"]})
        >>> X = np.column_stack([np.linspace(0, 10, 1000), np.zeros(1000)])
        >>> grid = QuantileMap.release(schema, X, 0.0, noise_source(0), bins=10)
        >>> round(float(grid.cdf[0, 1]), 4)  # F(10): the data's 0.8 and 0.02 of the uniform
        0.8192
        >>> round(float(grid.values(np.array([0]), np.array([0.4]))[0]), 3)  # 10 · 0.4 / F(10)
        4.883
        """
        return cls.from_counts(schema, histograms(schema, X, bins), noise_std, noise,
                               uniform_share)

    @classmethod
    def from_counts(cls, schema: PublicSchema, counts: np.ndarray, noise_std: float,
                    noise: NoiseSource, uniform_share: float = GRID_UNIFORM_SHARE
                    ) -> QuantileMap:
        """The map from exact :func:`histograms` (of one pool, or summed over a sharded
        stream's shards), every count with Gaussian noise of std ``noise_std`` added here,
        once."""
        counts = np.array(counts, dtype=np.float64)
        bins = counts.shape[1]
        k = schema.n_features
        cdf = np.broadcast_to(np.linspace(0.0, 1.0, bins + 1), (k, bins + 1)).copy()
        mapped = np.zeros(k, dtype=bool)
        columns = np.flatnonzero(~np.asarray(schema.is_categorical, dtype=bool))
        if columns.size == 0:
            return cls.from_cdf(schema, cdf, mapped)
        if noise_std > 0:
            counts = noise.add_gaussian(counts, noise_std)
        counts = np.where(counts > GRID_COUNT_CUTOFF * noise_std, counts, 0.0)
        survived = counts > 0
        beside = np.zeros_like(survived)
        beside[:, 1:] |= survived[:, :-1]
        beside[:, :-1] |= survived[:, 1:]
        totals = counts.sum(axis=1)
        in_runs = (counts * beside).sum(axis=1)
        runs = (totals > 0) & (in_runs >= GRID_RUN_SHARE * totals)
        shares = counts[runs] / totals[runs, None]
        shares = (1.0 - uniform_share) * shares + uniform_share / bins
        mapped[columns[runs]] = True
        cdf[mapped, 1:] = np.cumsum(shares, axis=1)
        cdf[mapped, -1] = 1.0
        return cls.from_cdf(schema, cdf, mapped)

    @classmethod
    def from_cdf(cls, schema: PublicSchema, cdf: np.ndarray, mapped: np.ndarray
                 ) -> QuantileMap:
        """The map of ``cdf`` rows over equal bins of the public ranges (a release's, or a
        stored one's) that moves the ``mapped`` features."""
        lower = np.asarray(schema.lower, dtype=np.float64)
        upper = np.asarray(schema.upper, dtype=np.float64)
        cdf = np.asarray(cdf, dtype=np.float64)
        edges = lower[:, None] + (upper - lower)[:, None] * np.linspace(0.0, 1.0, cdf.shape[1])
        return cls(edges, cdf, np.asarray(mapped, dtype=bool))

    def values(self, features: np.ndarray, unit_thresholds: np.ndarray) -> np.ndarray:
        """The thresholds in the features' own units: F⁻¹(t) for a numeric feature's node,
        ``t`` unchanged for a categorical one (a code)."""
        out = np.array(unit_thresholds, dtype=np.float64)
        for f in np.unique(features):
            if self.mapped[f]:
                nodes = features == f
                out[nodes] = np.interp(out[nodes], self.cdf[f], self.edges[f])
        return out

    def smoothing_spans(self, quantile: float = SMOOTHING_SPAN_QUANTILE) -> np.ndarray:
        """Per feature, the span a smoothing window is a share of
        (:func:`~renyiboost.models.trees.input_shifts`): ``(F⁻¹(1 − q) − F⁻¹(q)) / (1 − 2q)``
        for a mapped feature, at most its public range, which it is when the data are
        uniform over it; the public range otherwise (codes do not move).

        A window over the public range blurs a grid's fine splits: Elec2's prices fill a
        tenth of their range, and a window of 1/32 of it spans a third of the data.
        Development suite, batch fits at ε = 1 with the size hint and ``grid_share=0.05``,
        against the public grid (4 shuffles, paired): windows over the public range cost
        Elec2 −0.012 AUC, none −0.003 Covertype and −0.020 Friedman R², windows over this
        span gave Elec2 +0.008, Covertype −0.001 and Friedman +0.001 (the 5 %–95 % range
        instead: Elec2 −0.007); measured before the count cutoff and the rule for features
        of a few values.

        >>> from renyiboost.randomness import noise_source
        >>> schema = PublicSchema(features={"a": (0, 100)})
        >>> even = (np.arange(6400) + 0.5) / 64        # 100 records in each of 64 bins
        >>> grid = QuantileMap.release(schema, even[:, None], 0.0, noise_source(0))
        >>> round(float(grid.smoothing_spans()[0]), 6)
        100.0
        >>> low = grid.release(schema, even[:, None] / 10, 0.0, noise_source(0))
        >>> round(float(low.smoothing_spans()[0]), 1)  # data in a tenth: 10, and the uniform fifth
        12.2
        """
        every = np.arange(self.mapped.size)
        low = self.values(every, np.full(every.size, quantile))
        high = self.values(every, np.full(every.size, 1.0 - quantile))
        public = self.edges[:, -1] - self.edges[:, 0]
        return np.where(self.mapped, np.minimum((high - low) / (1.0 - 2.0 * quantile), public),
                        public)

    def unit_bounds(self, lower: np.ndarray, upper: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """The bounds a tree is grown within: [0, 1] for a mapped feature."""
        return np.where(self.mapped, 0.0, lower), np.where(self.mapped, 1.0, upper)


__all__ = ["GRID_BINS", "GRID_COUNT_CUTOFF", "GRID_RUN_SHARE", "GRID_UNIFORM_SHARE",
           "SMOOTHING_SPAN_QUANTILE", "QuantileMap", "histograms"]
