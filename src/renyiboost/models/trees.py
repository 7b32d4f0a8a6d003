"""Random complete trees whose splits use only the public schema (S-GBDT Sec. 4).

A tree of depth ``d`` has ``2^d − 1`` internal nodes in heap order (children of node ``i``
are ``2i+1`` and ``2i+2``) and ``2^d`` leaves. A node tests one feature:

* numeric: go left when ``x < threshold``;
* categorical: go left when the category code equals ``threshold``;
* a missing value (NaN) fails both tests and always goes right (the fixed branch).

Splits are drawn without looking at any record, so growing a tree costs no privacy.
The :class:`Ensemble` stacks trees of one depth into arrays. Prediction and the training
router run compiled kernels (:mod:`renyiboost.models.predict_kernels`: blocks of rows walked
level by level, branch-free); the numpy routing (:meth:`Ensemble._route_block`, which loops
over the ``d`` levels, never over trees or records) stays as their reference
(:meth:`Ensemble.leaf_sum_reference`, :meth:`Ensemble.route_one_tree`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from renyiboost.models.grid import QuantileMap
from renyiboost.models.predict_kernels import (
    grow_thresholds,
    leaf_sum_one,
    leaf_sum_one_shifted,
    sum_leaves,
    sum_leaves_shifted,
)
from renyiboost.randomness import NoiseSource
from renyiboost.schema import PublicSchema

#: Rows × trees that :meth:`Ensemble._routed_blocks` (the numpy reference) walks per pass:
#: small enough that its working arrays stay in a 512 KiB L2 cache. A/B on this machine,
#: quiet: 200 trees of depth 6 predict 10⁵ rows at 97–117k rows/s (48–58k in one pass over
#: 5 × 10⁵-element chunks), one tree routes 10⁶ rows in 38–49 ms (89–98 ms in one pass).
#: The compiled kernels do 1.0 million rows/s and 7 ms there (:mod:`.predict_kernels`).
ROUTE_BLOCK = 1 << 15

FeatureSelection = Literal["random", "cyclic", "pairs", "mains_then_pairs"]
FEATURE_SELECTIONS: tuple[str, ...] = get_args(FeatureSelection)

#: ``feature_selection="mains_then_pairs"``: the share of a learner's nominal rounds grown as
#: one-feature trees before the pair trees (``RandomTreeGrower.mains_trees``). The main
#: effects first, as an EBM (Lou et al., KDD 2013); half, so that on an additive concept the
#: pairs refine shapes that are mostly in place, and on one that needs pairs half the trees
#: can still learn them. Measured on the development suite (``models.defaults``).
MAINS_SHARE = 0.5


def mains_tree_count(rounds: int, n_features: int, mains_cycles: int | None) -> int:
    """The one-feature trees a ``"mains_then_pairs"`` learner of ``rounds`` nominal rounds
    grows before its pair trees: :data:`MAINS_SHARE` of the rounds, and with
    ``mains_cycles`` at most that many trees for each of the ``n_features`` features.

    >>> mains_tree_count(200, 14, None), mains_tree_count(200, 14, 20)
    (100, 100)
    >>> mains_tree_count(200, 2, 20)
    40
    """
    share = round(MAINS_SHARE * rounds)
    return share if mains_cycles is None else min(share, mains_cycles * n_features)


#: Shifted copies of a row that a smoothed ensemble averages (:func:`input_shifts`). Eight
#: and sixteen gave the same held-out AUC / R² (± 0.003) on Covertype, California, Friedman
#: and Hyperplane at ε = 1; four lost up to 0.003. Prediction costs this many tree walks.
SMOOTHING_SHIFTS = 8


def input_shifts(schema: PublicSchema, smoothing: float,
                 n_shifts: int = SMOOTHING_SHIFTS,
                 spans: Sequence[float] | np.ndarray | None = None) -> np.ndarray | None:
    """The offsets a smoothed ensemble adds to a row before each of its ``n_shifts`` walks:
    shape ``(n_shifts, n_features)``, ``None`` when ``smoothing`` is 0.

    Numeric feature ``j`` of walk ``k`` moves by ``(((k · (2j + 1)) mod K) + ½) / K − ½``
    times ``smoothing · (upper − lower)``: every feature visits the ``K`` midpoints of a
    window ``smoothing`` wide (as a share of its public range) once, in an order that
    differs between features (a rank-1 lattice, Korobov's construction; Sloan & Joe,
    *Lattice Methods for Multiple Integration*, 1994), so a tree that tests several
    features sees the window's corners as well as its diagonal. Categorical codes do not
    move. The offsets read only the public bounds; the average over them is a function of
    the released trees, so smoothing is free post-processing. ``spans`` replaces the public
    ranges (a private split grid's, :meth:`~renyiboost.models.grid.QuantileMap.
    smoothing_spans`: post-processing of its release).

    >>> from renyiboost.schema import PublicSchema
    >>> input_shifts(PublicSchema(features={"a": (0, 8)}), 0.5, 4)[:, 0].tolist()
    [-1.5, -0.5, 0.5, 1.5]
    """
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing!r}")
    if smoothing == 0:
        return None
    k = np.arange(n_shifts)[:, None]
    odd = 2 * np.arange(schema.n_features)[None, :] + 1
    unit = ((k * odd) % n_shifts + 0.5) / n_shifts - 0.5
    span = schema.upper - schema.lower if spans is None else np.asarray(spans, dtype=float)
    width = np.where(schema.is_categorical, 0.0, smoothing * span)
    return np.ascontiguousarray(unit * width[None, :], dtype=np.float64)


def tree_pair(tree_index: int, n_features: int) -> tuple[int, int]:
    """The two features of tree ``tree_index`` under ``feature_selection="pairs"``: the
    first is ``t mod k``, as one-feature trees cycle; the second runs through the other
    ``k − 1`` features, one step each time the first comes round again. A public function of
    the tree's index (one feature alone twice if ``k = 1``).

    >>> [tree_pair(t, 3) for t in range(6)]
    [(0, 1), (1, 2), (2, 0), (0, 2), (1, 0), (2, 1)]
    """
    first = tree_index % n_features
    if n_features == 1:
        return first, first
    step = 1 + (tree_index // n_features) % (n_features - 1)
    return first, (first + step) % n_features


@dataclass(frozen=True)
class RandomTreeGrower:
    """Draws the split structure of random complete trees from the public schema.

    Parameters
    ----------
    schema
        Public bounds and domains.
    depth
        Depth of every tree (``2^depth`` leaves).
    feature_selection
        ``"random"``: every node picks a feature uniformly. ``"cyclic"``: all nodes of tree
        ``t`` use feature ``t mod k`` (one feature per tree in turn, as S-BDT and DP-EBM).
        ``"pairs"``: tree ``t`` owns two features (:func:`tree_pair`), and every node picks
        one of them with probability 1/2: every feature in turn, each time with another
        partner, so that ``k(k − 1)`` trees see every ordered pair once. A one-feature
        tree can only learn a sum of shape functions; a two-feature tree also learns how
        two features act together (Bananas' two clusters, SEA's x₁ + x₂ > 8) while its
        splits stay on fewer features than a random tree's. ``"mains_then_pairs"``: the
        first ``mains_trees`` trees are one-feature trees in turn, the later ones pairs
        (counted from the first pair tree), as an EBM fits its main effects before its pairs
        (Lou et al., "Accurate intelligible models with pairwise interactions", KDD 2013):
        the shape of each feature alone, which one-feature trees estimate with the fewest
        leaves a feature, is in place before the trees that spend leaves on pairs.
    mains_trees
        ``"mains_then_pairs"``: how many one-feature trees come first (the learner sets it
        from its nominal rounds and the number of features, :func:`mains_tree_count`).
    split_candidates
        ``None``: a numeric threshold is uniform inside the node's still open interval.
        ``m``: it is drawn among ``m`` equidistant candidates of the public range that lie
        inside that interval (among all ``m`` if none does: one child then stays empty).
    quantile_map
        A private split grid (:class:`~renyiboost.models.grid.QuantileMap`): the numeric
        thresholds are drawn by the same rules on [0, 1] and stored as the map's quantiles.
        ``None``: on the public range.

    A categorical node tests a code drawn uniformly among the feature's codes that no node
    above it on its path tested on that feature (among all codes if none is left).
    """

    schema: PublicSchema
    depth: int
    feature_selection: FeatureSelection = "random"
    split_candidates: int | None = None
    mains_trees: int = 0
    quantile_map: QuantileMap | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not 0 <= self.depth <= 20:
            raise ValueError(f"depth must be in [0, 20], got {self.depth}")
        if self.feature_selection not in FEATURE_SELECTIONS:
            raise ValueError(f"feature_selection must be one of {FEATURE_SELECTIONS}, "
                             f"got {self.feature_selection!r}")
        if self.split_candidates is not None and self.split_candidates < 1:
            raise ValueError(f"split_candidates must be >= 1, got {self.split_candidates}")
        if self.mains_trees < 0:
            raise ValueError(f"mains_trees must be >= 0, got {self.mains_trees}")

    def tree_features(self, tree_index: int) -> tuple[str, int, int]:
        """How tree ``tree_index`` picks its features: ``("random", 0, 0)``, ``("one", f,
        f)`` (every node tests ``f``) or ``("pair", f, g)`` (each node one of the two)."""
        k = self.schema.n_features
        selection = self.feature_selection
        if selection == "mains_then_pairs":
            if tree_index < self.mains_trees:
                selection = "cyclic"
            else:
                selection, tree_index = "pairs", tree_index - self.mains_trees
        if selection == "cyclic":
            return "one", tree_index % k, tree_index % k
        if selection == "pairs":
            return ("pair", *tree_pair(tree_index, k))
        return "random", 0, 0

    def grow(self, tree_index: int, rng: NoiseSource) -> tuple[np.ndarray, np.ndarray]:
        """``(features, thresholds)`` of one tree, each of length ``2^depth − 1``.

        All randomness comes from one ``rng.uniform`` call: with random features ``2n``
        uniforms for ``n`` internal nodes, node ``i`` taking ``u[2i]`` for its feature
        (``⌊u·k⌋``, or the tree's first feature of a pair if ``u < 1/2``) and ``u[2i+1]``
        for its threshold; one-feature trees draw only the ``n``
        threshold uniforms. That is the order in which the per-node Python loop this
        replaces drew them. The thresholds are then computed node by node in
        :func:`~renyiboost.models.predict_kernels.grow_thresholds`, which states the rules.
        """
        schema = self.schema
        n_internal = 2**self.depth - 1
        features = np.zeros(n_internal, dtype=np.int64)
        thresholds = np.zeros(n_internal, dtype=np.float64)
        if n_internal == 0:
            return features, thresholds
        k = schema.n_features
        kind, first, second = self.tree_features(tree_index)
        if kind == "one":
            features[:] = first
            u_threshold = rng.uniform(n_internal)
        else:
            u = rng.uniform(2 * n_internal)
            features[:] = (np.where(u[0::2] < 0.5, first, second) if kind == "pair" else
                           np.minimum((u[0::2] * k).astype(np.int64), k - 1))
            u_threshold = u[1::2]
        lower = np.asarray(schema.lower, dtype=np.float64)
        upper = np.asarray(schema.upper, dtype=np.float64)
        if self.quantile_map is not None:
            lower, upper = self.quantile_map.unit_bounds(lower, upper)
        grow_thresholds(
            features, np.ascontiguousarray(u_threshold, dtype=np.float64),
            np.ascontiguousarray(lower), np.ascontiguousarray(upper),
            np.ascontiguousarray(schema.is_categorical, dtype=np.bool_),
            np.ascontiguousarray(schema.n_categories, dtype=np.int64),
            self.split_candidates or 0, thresholds,
        )
        if self.quantile_map is not None:
            thresholds = self.quantile_map.values(features, thresholds)
        return features, thresholds


def _first_row(view: np.ndarray, buffer: np.ndarray) -> int | None:
    """The row of ``buffer`` at which ``view`` starts, if ``view`` is a run of its rows
    (:meth:`Ensemble.keep_last` leaves a later run), else ``None`` (another array)."""
    if view.base is not buffer or not view.flags.c_contiguous:
        return None
    row, rest = divmod(view.ctypes.data - buffer.ctypes.data, buffer.strides[0])
    return row if rest == 0 else None


@dataclass
class Ensemble:
    """Stacked complete trees of one depth, an additive initial score, compiled routing.

    ``features``/``thresholds`` have shape ``(n_trees, 2^d − 1)``, ``leaves`` shape
    ``(n_trees, 2^d)``; ``is_categorical`` is the schema's column mask. A multiclass model
    has ``n_outputs`` = C > 1: vector leaves of shape ``(n_trees, 2^d, C)``, an initial
    score of shape ``(C,)`` and margins of shape ``(n, C)``.

    ``shifts`` (:func:`input_shifts`, ``None``: none) makes the ensemble *smoothed*: a margin
    is the initial score plus the mean, over the shifted copies ``x + shifts[k]`` of a row,
    of the leaf sum. A random tree's leaf values carry independent noise and its thresholds
    cut a smooth shape into steps; averaging each step over a small window of inputs (an
    averaged shifted histogram, Scott 1985, in each tree) trades a little resolution for
    less noise. Training never reads it (the booster's margins are the unsmoothed
    :meth:`leaf_sum`); only answers do.

    ``answer_map`` ``(a, b)`` (a binary stream's answer recalibration,
    :mod:`renyiboost.models.recalibration`; ``None``: the identity) maps every answer's
    margin ``m`` to ``a · m + b``; training never reads it either.
    """

    depth: int
    is_categorical: np.ndarray
    init_score: float | np.ndarray = 0.0
    features: np.ndarray = field(default=None)  # type: ignore[assignment]
    thresholds: np.ndarray = field(default=None)  # type: ignore[assignment]
    leaves: np.ndarray = field(default=None)  # type: ignore[assignment]
    n_outputs: int = 1
    shifts: np.ndarray | None = None
    answer_map: tuple[float, float] | None = None
    #: Buffers the three arrays are views of (:meth:`extend`), or ``None``.
    _buffers: tuple[np.ndarray, ...] | None = field(default=None, init=False, repr=False,
                                                    compare=False)

    @classmethod
    def for_schema(cls, schema: PublicSchema, depth: int, smoothing: float = 0.0,
                   init_score: float | np.ndarray = 0.0,
                   spans: Sequence[float] | None = None) -> Ensemble:
        """An empty ensemble of depth-``depth`` trees over ``schema``'s features and
        outputs, smoothed over a window ``smoothing`` wide (:func:`input_shifts`; of
        ``spans``, or of the public ranges)."""
        return cls(depth=depth, is_categorical=schema.is_categorical, init_score=init_score,
                   n_outputs=schema.n_outputs,
                   shifts=input_shifts(schema, smoothing, spans=spans))

    def __post_init__(self) -> None:
        n_internal = 2**self.depth - 1
        self.is_categorical = np.ascontiguousarray(self.is_categorical, dtype=np.bool_)
        if self.shifts is not None:
            self.shifts = np.ascontiguousarray(self.shifts, dtype=np.float64)
            if self.shifts.ndim != 2 or self.shifts.shape[1] != self.is_categorical.shape[0]:
                raise ValueError(f"shifts must have one column a feature "
                                 f"({self.is_categorical.shape[0]}), got {self.shifts.shape}")
        if self.n_outputs < 1:
            raise ValueError(f"n_outputs must be >= 1, got {self.n_outputs}")
        if self.n_outputs > 1 and np.ndim(self.init_score) == 0:
            self.init_score = np.full(self.n_outputs, float(self.init_score))
        if self.features is None:
            self.features = np.zeros((0, n_internal), dtype=np.int64)
            self.thresholds = np.zeros((0, n_internal), dtype=float)
            self.leaves = np.zeros((0, *self.leaf_shape), dtype=float)

    @property
    def leaf_shape(self) -> tuple[int, ...]:
        """One tree's leaves: ``(2^d,)``, or ``(2^d, C)`` for vector leaves."""
        return (2**self.depth,) if self.n_outputs == 1 else (2**self.depth, self.n_outputs)

    @property
    def n_trees(self) -> int:
        return int(self.leaves.shape[0])

    def append(self, features: np.ndarray, thresholds: np.ndarray, leaves: np.ndarray) -> None:
        self.extend(np.asarray(features)[None, :], np.asarray(thresholds)[None, :],
                    np.asarray(leaves, dtype=float)[None])

    def extend(self, features: Any, thresholds: Any, leaves: Any) -> None:
        """Add ``k`` trees at once (``(k, 2^d − 1)`` features and thresholds, ``k`` trees'
        leaves). Every array is built before any is assigned, so trees of the wrong shape
        raise ``ValueError`` and leave the ensemble as it was.

        The arrays are views of buffers with room to spare, which grow by doubling: a tree a
        call cost a copy of every tree held (a follower catching up 1,000 versions over
        15,000 trees copied 23 GB). The newest trees :meth:`keep_last` kept stay where they
        are, and the next trees follow them while the buffer has room. Rows of a view are
        never written again, so an earlier view of the arrays keeps its values."""
        n, k = self.n_trees, len(leaves)
        added = (np.asarray(features, dtype=np.int64).reshape(k, self.features.shape[1]),
                 np.asarray(thresholds, dtype=float).reshape(k, self.thresholds.shape[1]),
                 np.asarray(leaves, dtype=float).reshape(k, *self.leaf_shape))
        held = (self.features, self.thresholds, self.leaves)
        buffers = self._buffers
        starts = {None} if buffers is None else {  # rows of no width (depth 0) say nothing
            _first_row(view, buffer) for view, buffer in zip(held, buffers, strict=True)
            if buffer.strides[0]}
        start = starts.pop() if len(starts) == 1 else None
        if buffers is None or start is None or start + n + k > buffers[0].shape[0]:
            capacity, start = max(2 * (n + k), 8), 0
            buffers = tuple(np.empty((capacity, *a.shape[1:]), dtype=a.dtype) for a in held)
            for buffer, view in zip(buffers, held, strict=True):
                buffer[:n] = view
        for buffer, rows in zip(buffers, added, strict=True):
            buffer[start + n:start + n + k] = rows
        self._buffers = buffers
        self.features, self.thresholds, self.leaves = (
            b[start:start + n + k] for b in buffers)

    def __getstate__(self) -> dict[str, Any]:
        """The trees without the spare rows (a pickle carries what is held)."""
        state = dict(self.__dict__)
        state["_buffers"] = None
        for name in ("features", "thresholds", "leaves"):
            state[name] = np.ascontiguousarray(state[name]).copy()
        return state

    def keep_last(self, n_trees: int) -> None:
        """Drop all but the newest ``n_trees`` trees (free post-processing). ``n_trees`` of
        0 keeps none (``[-0:]`` kept them all) and a negative one is refused (review B)."""
        if n_trees < 0:
            raise ValueError(f"n_trees must be >= 0, got {n_trees}")
        if self.n_trees > n_trees:
            first = self.n_trees - n_trees
            self.features = self.features[first:]
            self.thresholds = self.thresholds[first:]
            self.leaves = self.leaves[first:]

    def _routed_blocks(
        self, X: np.ndarray, features: np.ndarray, thresholds: np.ndarray
    ) -> Iterator[tuple[slice, np.ndarray]]:
        """``(rows, leaf index of those rows in every given tree)`` over blocks of
        :data:`ROUTE_BLOCK` rows × trees (see there)."""
        step = max(1, ROUTE_BLOCK // max(features.shape[0], 1))
        for start in range(0, X.shape[0], step):
            rows = slice(start, start + step)
            yield rows, self._route_block(X[rows], features, thresholds)

    def _route_block(self, X: np.ndarray, features: np.ndarray,
                     thresholds: np.ndarray) -> np.ndarray:
        """One block of :meth:`route`: gathers from flattened arrays (one ``np.take`` per
        level) instead of 2-D fancy indexing; categorical tests only when the schema has
        such columns."""
        n_rows, n_trees = X.shape[0], features.shape[0]
        n_internal = features.shape[1]
        flat_features, flat_thresholds = features.ravel(), thresholds.ravel()
        flat_X = np.ascontiguousarray(X).ravel()
        tree_offset = (np.arange(n_trees, dtype=np.intp) * n_internal)[None, :]
        row_offset = (np.arange(n_rows, dtype=np.intp) * X.shape[1])[:, None]
        any_categorical = bool(self.is_categorical.any())
        node = np.zeros((n_rows, n_trees), dtype=np.intp)
        for _ in range(self.depth):
            slot = node + tree_offset
            f = np.take(flat_features, slot)
            t = np.take(flat_thresholds, slot)
            x = np.take(flat_X, row_offset + f)
            if any_categorical:
                go_left = np.where(np.take(self.is_categorical, f), x == t, x < t)
            else:
                go_left = x < t
            node = 2 * node + 2 - go_left
        return node - n_internal

    def route_one_tree(self, X: np.ndarray, features: np.ndarray,
                       thresholds: np.ndarray) -> np.ndarray:
        """Leaf index (``np.intp``) of every row in a single tree, by the numpy routing: the
        reference round's router (``SGBDTBooster(compiled=False)``) and the tests' oracle of
        the compiled :func:`~renyiboost.models.predict_kernels.route_tree`, which the
        compiled round calls."""
        out = np.empty(X.shape[0], dtype=np.intp)
        for rows, leaf in self._routed_blocks(X, features[None, :], thresholds[None, :]):
            out[rows] = leaf[:, 0]
        return out

    def leaf_sum(self, X: np.ndarray, trees: slice = slice(None),
                 smoothed: bool = False) -> np.ndarray:
        """Per row, the sum of its leaf values over the trees ``trees`` (all by default);
        with ``smoothed`` (and :attr:`shifts`), its mean over the shifted copies of the row.

        Compiled: blocks of rows walk every tree level by level (see
        :mod:`~renyiboost.models.predict_kernels`); the leaf values are added in tree order,
        so the result is the sequential sum of :meth:`leaf_sum_reference`'s leaves. Training
        reads the unsmoothed sum; only answers are smoothed."""
        features = np.ascontiguousarray(self.features[trees], dtype=np.int64)
        thresholds = np.ascontiguousarray(self.thresholds[trees], dtype=np.float64)
        leaves = np.ascontiguousarray(self.leaves[trees], dtype=np.float64)
        X = self._rows(X)
        out = np.zeros((X.shape[0], *self.leaf_shape[1:]), dtype=np.float64)
        if leaves.shape[0] == 0 or X.shape[0] == 0:
            return out
        self._check_trees(features, thresholds, leaves)
        shifts = self.shifts if smoothed else None
        columns = [leaves] if self.n_outputs == 1 else [  # one walk per class: C x the routing
            np.ascontiguousarray(leaves[..., k]) for k in range(self.n_outputs)]
        column = np.empty(X.shape[0])
        for k, values in enumerate(columns):
            if shifts is None:
                sum_leaves(X, features, thresholds, values, self.is_categorical, self.depth,
                           column)
            else:
                sum_leaves_shifted(X, shifts, features, thresholds, values,
                                   self.is_categorical, self.depth, column)
            if self.n_outputs == 1:
                out[:] = column
            else:
                out[:, k] = column
        return out

    def leaf_sum_reference(self, X: np.ndarray, trees: slice = slice(None)) -> np.ndarray:
        """:meth:`leaf_sum` by the numpy routing (the tests' oracle), block by block so the
        ``(rows, trees)`` leaf matrix never exists whole; sums are numpy's (pairwise)."""
        features, thresholds = self.features[trees], self.thresholds[trees]
        leaves = self.leaves[trees]
        n_trees = leaves.shape[0]
        out = np.zeros((X.shape[0], *self.leaf_shape[1:]), dtype=float)
        if n_trees == 0:
            return out
        tree = np.arange(n_trees)[None, :]
        for rows, leaf in self._routed_blocks(X, features, thresholds):
            out[rows] = leaves[tree, leaf].sum(axis=1)
        return out

    def raw_margin(self, X: np.ndarray) -> np.ndarray:
        """Initial score plus every tree's leaf value for the rows of ``X``, never smoothed:
        the margin training keeps for a record (a stream's pool), which each round's leaves
        then move."""
        return self.init_score + self.leaf_sum(X)

    def predict_margin(self, X: np.ndarray) -> np.ndarray:
        """Initial score plus the sum of every tree's leaf value, per row (its mean over the
        shifted copies of the row when the ensemble is smoothed).

        A 1-D ``X`` is one row: the answer is :meth:`predict_margin_one`'s, as an array of
        shape ``(1,)``."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1:
            return np.asarray(self.predict_margin_one(X))[None]
        return self._recalibrated(self.init_score + self.leaf_sum(X, smoothed=True))

    def _recalibrated(self, margin: Any) -> Any:
        if self.answer_map is None:
            return margin
        scale, offset = self.answer_map
        return scale * margin + offset

    def predict_margin_one(self, x: np.ndarray) -> float | np.ndarray:
        """Initial score plus the sum of every tree's leaf value for one row ``x`` (1-D).

        One compiled call (:func:`~renyiboost.models.predict_kernels.leaf_sum_one`; one a
        shifted copy when smoothed) and no other numpy work when ``x`` is already a float64
        array."""
        if type(x) is not np.ndarray or x.dtype != np.float64:
            x = np.asarray(x, dtype=np.float64)
        if x.ndim != 1 or x.shape[0] < self.is_categorical.shape[0]:
            raise ValueError(
                f"expected one row of {self.is_categorical.shape[0]} features, got shape "
                f"{x.shape}"
            )
        if self.n_outputs == 1:
            return self._recalibrated(self.init_score + self._leaf_sum_one(x, self.leaves))
        return self.init_score + np.array([
            self._leaf_sum_one(x, np.ascontiguousarray(self.leaves[..., k]))
            for k in range(self.n_outputs)])

    def _leaf_sum_one(self, x: np.ndarray, leaves: np.ndarray) -> float:
        """One compiled walk of one float64 row (over every shifted copy when smoothed)."""
        if self.shifts is None:
            return leaf_sum_one(x, self.features, self.thresholds, leaves,  # type: ignore[no-any-return]
                                self.is_categorical, self.depth)
        return leaf_sum_one_shifted(x, self.shifts, self.features,  # type: ignore[no-any-return]
                                    self.thresholds, leaves, self.is_categorical, self.depth)

    def _rows(self, X: np.ndarray) -> np.ndarray:
        """``X`` as the C-contiguous float64 matrix the kernels read, at least as wide as
        the schema unless it has no rows (the kernels do not check bounds)."""
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2 or (X.shape[0] and X.shape[1] < self.is_categorical.shape[0]):
            raise ValueError(
                f"expected rows of {self.is_categorical.shape[0]} features, got shape {X.shape}"
            )
        return X

    def _check_trees(self, features: np.ndarray, thresholds: np.ndarray,
                     leaves: np.ndarray | None = None) -> None:
        """Shapes of depth-``d`` trees and feature indices inside the schema: the kernels
        index by them unchecked."""
        n_trees, n_internal = features.shape[0], 2**self.depth - 1
        shapes = [(features.shape, (n_trees, n_internal)),
                  (thresholds.shape, (n_trees, n_internal))]
        if leaves is not None:
            shapes.append((leaves.shape, (n_trees, *self.leaf_shape)))
        for got, expected in shapes:
            if got != expected:
                raise ValueError(f"trees of depth {self.depth}: expected arrays of shape "
                                 f"{expected}, got {got}")
        k = self.is_categorical.shape[0]
        if features.size and not (0 <= features.min() and features.max() < k):
            raise ValueError(f"feature indices must lie in [0, {k}), got "
                             f"[{features.min()}, {features.max()}]")

    def to_dict(self) -> dict:
        return {
            "depth": self.depth,
            "is_categorical": self.is_categorical.tolist(),
            "init_score": np.asarray(self.init_score).tolist(),
            "n_outputs": self.n_outputs,
            "features": self.features.tolist(),
            "thresholds": self.thresholds.tolist(),
            "leaves": self.leaves.tolist(),
            "shifts": None if self.shifts is None else self.shifts.tolist(),
            **({"answer_map": list(self.answer_map)} if self.answer_map is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Ensemble:
        depth = int(data["depth"])
        n_internal = 2**depth - 1
        n_outputs = int(data.get("n_outputs", 1))
        init = np.asarray(data["init_score"], dtype=float)
        leaf_shape = (2**depth,) if n_outputs == 1 else (2**depth, n_outputs)
        n_trees = len(data["leaves"])  # not -1: a depth-0 tree has no splits to count by
        return cls(
            depth=depth,
            is_categorical=np.asarray(data["is_categorical"], dtype=bool),
            init_score=float(init) if n_outputs == 1 else init,
            features=np.asarray(data["features"], dtype=np.int64).reshape(n_trees, n_internal),
            thresholds=np.asarray(data["thresholds"], dtype=float).reshape(n_trees, n_internal),
            leaves=np.asarray(data["leaves"], dtype=float).reshape(n_trees, *leaf_shape),
            n_outputs=n_outputs,
            shifts=None if data.get("shifts") is None else np.asarray(data["shifts"]),
            answer_map=None if data.get("answer_map") is None
            else (float(data["answer_map"][0]), float(data["answer_map"][1])),
        )
