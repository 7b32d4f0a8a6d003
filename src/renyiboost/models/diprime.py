"""DiPriMe forests (Consul & Williamson, "Balance is key: Private median splits yield
high-utility random trees", arXiv 2006.08795): random trees split at differentially
private medians, so that leaves stay balanced and their noise small.

Each tree of the forest trains on its own rows (a row draws its tree uniformly, on its own:
parallel composition). A tree is complete, of depth ``depth``; at every node:

1. ``candidates`` (K) features are drawn uniformly (public randomness);
2. each gets a **DP median** on the node's rows: the continuous exponential mechanism over
   the feature's public range with utility ``−|n_left − n_right|`` (sensitivity 1; the
   threshold falls uniformly inside the chosen gap between row values, see
   :mod:`renyiboost.models.splits`); a categorical feature's candidates are its codes
   ("this code" left, the rest right), with the same utility;
3. one more mechanism picks among the K splits by the between-children sum of squares of
   the labels scaled to [−1, 1], ``S_L² / (n_L + λ) + S_R² / (n_R + λ)`` (sensitivity 3, as
   for DPBoost's gain: :func:`~renyiboost.accounting.dpboost.gain_sensitivity`), by the
   exponential mechanism or by **permute-and-flip** (McKenna & Sheldon 2020: never worse in
   expectation).

Leaves: regression, a noisy sum over a noisy count of the scaled labels (Laplace, each at half
the leaf budget), clipped to [−1, 1]; classification, noisy counts of the two classes and
their ratio. The forest averages its trees.

Budget and its corrections: :mod:`renyiboost.accounting.diprime`. Further corrections of the
authors' code, each a privacy gap there:

* **Public ranges.** The code takes each feature's range from the data (test rows included);
  here it is the schema's public range.
* **No public counts.** The code scales its selection by ``4 B² / n`` and its regression
  leaves by ``B / n_leaf`` with the exact node counts; here the selection score has a
  count-free sensitivity and the leaf count is noised.
* **Ranges narrow down the tree only when asked** (``narrow_ranges=True``, as in the
  code: a node's median of a numeric feature is drawn over the part of the public range
  its ancestors' splits leave it; free, the thresholds are released). The code pairs it
  with its depth from the row count; at the fixed depth 5 every split then divides its
  rows, and small data sets get leaves too small for their noise: the field table's
  Abalone R² at ε = 0.5 / 1 / 4 fell from 0.255 / 0.262 / 0.337 to 0.138 / 0.243 / 0.337
  (2 seeds), while the 37th session's review measured a gain at 20,000 rows (a 4-feature
  XOR-like task at ε = 1: error 4.1 ± 1.1 % against 2.9 ± 0.6 %; none at 3,000 rows) and
  the other field sets moved by −0.003 to +0.011. So the default draws over the whole
  public range.
* **A public depth.** The code derives the depth from the number of training rows
  (``log2(n / (25 T))``); here it is a parameter.
* **Rows draw their tree.** The code slices the rows by count; here each row draws its tree
  on its own, so no count decides who trains where.

The authors' permute-and-flip for the continuous median adds a data-dependent log-width to
the score with sensitivity 1, which is not valid; here permute-and-flip is used only for the
choice among the K candidates, a finite set.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, Field
from sklearn.utils.metaestimators import available_if

from renyiboost.accounting.diprime import DiPriMeBudget
from renyiboost.accounting.dpboost import gain_sensitivity
from renyiboost.accounting.inputs import Epsilon
from renyiboost.models.batch import PureDPModel, is_classifier
from renyiboost.models.splits import gap_intervals, gumbel_argmax, log_lengths
from renyiboost.models.trees import Ensemble
from renyiboost.randomness import NoiseSource, noise_source
from renyiboost.schema import PublicSchema
from renyiboost.settings import Settings

#: The regulariser of the selection score (the score's sensitivity is 3 for any λ > 0).
SELECT_LAMBDA = 1.0


class DiPriMeParams(Settings):
    """DiPriMe's parameters; defaults are the authors' experiments (10 trees on disjoint
    rows, K = 5 candidates, half the budget for splits) and depth 5 (theirs depends on the
    private row count)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: Literal["regression", "classification"]
    epsilon: Epsilon
    trees: int = Field(10, ge=1)
    depth: int = Field(5, ge=1, le=12)
    candidates: int = Field(5, ge=1)
    split_share: float = Field(0.5, gt=0, lt=1)
    selection: Literal["exponential", "permute_and_flip"] = "permute_and_flip"
    narrow_ranges: bool = Field(
        False, description="draw a node's median over the range its ancestors' splits leave "
        "(the authors' code) instead of the whole public range (module docstring)")


def _narrowed(lo: np.ndarray, hi: np.ndarray, features: np.ndarray, thresholds: np.ndarray,
              categorical: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The children's ranges of every feature (rows ``2p`` and ``2p + 1`` for node ``p``'s
    left and right child) from the nodes' ``lo``/``hi`` and their numeric splits: the left
    child's values of the split feature lie below the threshold, the right child's at or
    above it. Thresholds are released, so this is post-processing."""
    lo, hi = np.repeat(lo, 2, axis=0), np.repeat(hi, 2, axis=0)
    node = np.flatnonzero(~categorical[features])
    f, t = features[node], thresholds[node]
    hi[2 * node, f] = np.minimum(hi[2 * node, f], t)
    lo[2 * node + 1, f] = np.maximum(lo[2 * node + 1, f], t)
    return lo, hi


class DiPriMe(PureDPModel):
    """A DiPriMe forest for arrays encoded by the schema (see the module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> from renyiboost.schema import PublicSchema
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 1, size=(4000, 2)); y = (X[:, 0] > 0.5).astype(float)
    >>> schema = PublicSchema(features={"a": (0, 1), "b": (0, 1)})
    >>> model = DiPriMe(schema, task="classification", epsilon=2.0, seed=0).fit(X, y)
    >>> float(np.mean(model.predict(X) == y)) > 0.9
    True
    """

    def __init__(self, schema: PublicSchema, seed: int | None = None, **params: Any) -> None:
        self._setup(schema, seed, DiPriMeParams, params)
        # a node draws no more candidates than there are features, and pays for those only
        # (charging for K with fewer features spent less than the guarantee said)
        self.budget = DiPriMeBudget(epsilon=self.params.epsilon, depth=self.params.depth,
                                    candidates=min(self.params.candidates, schema.n_features),
                                    split_share=self.params.split_share,
                                    selection=self.params.selection)

    # ------------------------------------------------------------------ training
    def fit(self, X: np.ndarray, y: np.ndarray) -> DiPriMe:
        X, y, target = self._training_data(X, y)
        signed = target if self.params.task == "regression" else 2.0 * y - 1.0
        params, noise = self.params, noise_source(self.seed)
        tree_of_row = np.minimum((noise.uniform(y.size) * params.trees).astype(np.int64),
                                 params.trees - 1)
        ensemble = Ensemble(params.depth, self.schema.is_categorical)
        for t in range(params.trees):
            mine = tree_of_row == t
            features, thresholds, leaf = self._grow(X[mine], signed[mine], noise)
            values = self._leaves(y[mine], signed[mine], leaf, noise)
            # The forest's mean as a sum of trees: regression in the scaled target, a
            # classifier's probability centred at 0 (so that the margin's sign decides).
            ensemble.append(features, thresholds, values / params.trees)
        self.ensemble = ensemble
        return self

    def _grow(self, X: np.ndarray, signed: np.ndarray, noise: NoiseSource
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        params, schema = self.params, self.schema
        k, depth, K = schema.n_features, params.depth, self.budget.candidates
        median_scale = self.budget.median_epsilon / 2.0  # utility sensitivity 1
        select_scale = self.budget.select_epsilon / (2.0 * gain_sensitivity(1.0))
        features = np.zeros(2**depth - 1, dtype=np.int64)
        thresholds = np.zeros(2**depth - 1)
        pos = np.zeros(signed.size, dtype=np.int64)
        # each node's range of each feature: the public one, narrowed by the splits above
        node_lo = schema.lower.astype(float)[None, :].copy()
        node_hi = schema.upper.astype(float)[None, :].copy()
        for level in range(depth):
            n_nodes = 2**level
            # K distinct features a node, uniformly (public randomness).
            chosen = np.argsort(noise.uniform(n_nodes * k).reshape(n_nodes, k), axis=1)[:, :K]
            total_s = np.bincount(pos, weights=signed, minlength=n_nodes)
            total_n = np.bincount(pos, minlength=n_nodes).astype(float)
            cand_threshold = np.zeros((n_nodes, K))
            cand_left_s = np.zeros((n_nodes, K))
            cand_left_n = np.zeros((n_nodes, K))
            for f in np.unique(chosen):
                node, slot = np.nonzero(chosen == f)
                median = self._median(f, X[:, f], signed, pos, n_nodes, median_scale, noise,
                                      node_lo[:, f], node_hi[:, f])
                cand_threshold[node, slot] = median[0][node]
                cand_left_s[node, slot] = median[1][node]
                cand_left_n[node, slot] = median[2][node]
            score = select_scale * (
                cand_left_s**2 / (cand_left_n + SELECT_LAMBDA)
                + (total_s[:, None] - cand_left_s) ** 2
                / (total_n[:, None] - cand_left_n + SELECT_LAMBDA))
            pick = self._select(score, noise)
            at = 2**level - 1 + np.arange(n_nodes)
            features[at] = chosen[np.arange(n_nodes), pick]
            thresholds[at] = cand_threshold[np.arange(n_nodes), pick]
            if params.narrow_ranges:  # else one row, the public ranges, serves every node
                node_lo, node_hi = _narrowed(node_lo, node_hi, features[at], thresholds[at],
                                             schema.is_categorical)
            slot = 2**level - 1 + pos
            x, t = X[np.arange(signed.size), features[slot]], thresholds[slot]
            go_left = np.where(schema.is_categorical[features[slot]], x == t, x < t)
            pos = 2 * pos + 1 - go_left
        return features, thresholds, pos

    def _median(self, f: int, x: np.ndarray, signed: np.ndarray, pos: np.ndarray,
                n_nodes: int, scale: float, noise: NoiseSource,
                lo: np.ndarray | None = None, hi: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every node's DP median of feature ``f`` (threshold, and the left label sum and
        count it gives, which only the selection reads), a numeric one over each node's
        range ``[lo, hi]`` (default: the public range)."""
        schema = self.schema
        total_n = np.bincount(pos, minlength=n_nodes).astype(float)
        if schema.is_categorical[f]:
            codes = np.arange(int(schema.n_categories[f]) + 1)
            # codes.size bins a node, then one for missing values (stride codes.size + 1)
            flat = pos * (codes.size + 1) + np.where(np.isnan(x), codes.size, np.nan_to_num(x))
            flat = flat.astype(np.int64)
            size = n_nodes * (codes.size + 1)
            left_s = np.bincount(flat, weights=signed, minlength=size).reshape(n_nodes, -1)
            left_n = np.bincount(flat, minlength=size).reshape(n_nodes, -1).astype(float)
            left_s, left_n = left_s[:, :-1].ravel(), left_n[:, :-1].ravel()
            node = np.repeat(np.arange(n_nodes), codes.size)
            low = high = np.tile(codes.astype(float), n_nodes)
            log_w = np.zeros(node.size)
        else:
            node, left_s, left_n, low, high = gap_intervals(
                x, signed, pos, n_nodes, schema.lower[f] if lo is None else lo,
                schema.upper[f] if hi is None else hi)
            log_w = log_lengths(low, high)
        utility = -np.abs(2.0 * left_n - total_n[node])
        best = gumbel_argmax(log_w + scale * utility, node, n_nodes, noise)
        threshold = low[best] + noise.uniform(n_nodes) * (high[best] - low[best])
        return threshold, left_s[best], left_n[best]

    def _select(self, score: np.ndarray, noise: NoiseSource) -> np.ndarray:
        """Per node (row of ``score``, already scaled by ε / 2Δ), the chosen candidate."""
        n_nodes, K = score.shape
        if self.params.selection == "exponential":
            return gumbel_argmax(score.ravel(), np.repeat(np.arange(n_nodes), K), n_nodes,
                                 noise) % K
        # Permute-and-flip: candidates in a random order, each accepted with probability
        # exp(score − max score); the first accepted wins (the best is always accepted).
        order = np.argsort(noise.uniform(n_nodes * K).reshape(n_nodes, K), axis=1)
        gap = np.take_along_axis(score - score.max(axis=1, keepdims=True), order, axis=1)
        accepted = noise.uniform(n_nodes * K).reshape(n_nodes, K) < np.exp(gap)
        first = np.argmax(accepted, axis=1)
        return order[np.arange(n_nodes), first]

    def _leaves(self, y: np.ndarray, signed: np.ndarray, leaf: np.ndarray,
                noise: NoiseSource) -> np.ndarray:
        n_leaves = 2**self.params.depth
        epsilon = self.budget.leaf_epsilon
        if self.params.task == "regression":
            sums = np.bincount(leaf, weights=signed, minlength=n_leaves)
            counts = np.bincount(leaf, minlength=n_leaves).astype(float)
            # (sum, count) moves by at most (1, 1): Laplace(2/ε) on each is ε-DP.
            sums = noise.add_laplace(sums, 2.0 / epsilon)
            counts = noise.add_laplace(counts, 2.0 / epsilon)
            return np.where(counts >= 1.0, np.clip(sums / np.maximum(counts, 1.0), -1, 1), 0.0)
        ones = np.bincount(leaf, weights=y, minlength=n_leaves)
        zeros = np.bincount(leaf, minlength=n_leaves) - ones
        # A row is in one of the two counts: Laplace(1/ε) on each is ε-DP.
        ones = np.maximum(noise.add_laplace(ones, 1.0 / epsilon), 0.0)
        zeros = np.maximum(noise.add_laplace(zeros, 1.0 / epsilon), 0.0)
        total = ones + zeros
        return np.where(total > 0, ones / np.where(total > 0, total, 1.0), 0.5) - 0.5

    # ------------------------------------------------------------------ prediction
    @available_if(is_classifier)
    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """The trees' mean probability of class 1 (not a log-odds: a forest's vote)."""
        p = np.clip(self.decision_function(X) + 0.5, 0.0, 1.0)
        return np.column_stack([1.0 - p, p])
