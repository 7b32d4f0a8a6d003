"""Compiled prediction, routing and tree-growth kernels (numba, one core).

The numpy routing of :class:`~renyiboost.models.trees.Ensemble` (``_route_block``) stays the
reference: the tests route random ensembles (numeric and categorical columns, NaNs, depths
0…7, tree slices) through both and require the same leaf indices.

**Why interleaved blocks.** Walking one row through one tree is a chain of dependent loads:
the node index decides which feature and threshold to load, whose comparison decides the
next node. Walked row after row (or tree after tree for one row), the CPU waits on that
chain at every level and mispredicts about half of the left/right branches. The kernels
here instead take a block of :data:`BLOCK` rows and, for each tree and each level, advance
all rows of the block by one level before going deeper:

* the ``BLOCK`` walks are independent, so the out-of-order core overlaps their loads instead
  of waiting on one chain;
* the step is branch-free (``node = 2·node + 2 − go_left``: the comparison becomes a 0/1
  value, never a jump), so there is nothing to mispredict;
* one tree's nodes (``2^d − 1`` features and thresholds, 1 KiB at depth 6) stay in L1 while
  the block walks through them, the block's rows (``BLOCK × k`` floats) stay in L1 across
  all trees, and the whole ensemble (200 trees of depth 6: 200 KiB) in L2.

Row-major is the layout the caller already has, so no transposed copy of ``X`` is made.
:func:`leaf_sum_one` (a single row) interleaves trees instead of rows, for the same reason.

The block kernels index without bounds checks (numba's default): their caller,
:class:`~renyiboost.models.trees.Ensemble`, checks the shapes, the width of ``X`` and the
feature indices first. :func:`leaf_sum_one` checks them itself, to keep a call to one
dispatch.

A node tests ``x < t`` (numeric) or ``x == t`` (categorical); NaN fails both and goes right.
Leaf sums are accumulated tree by tree in tree order, starting from 0.0, so they equal a
sequential sum of the reference's leaf values to the bit (numpy's ``sum`` is pairwise, and
so agrees only to rounding).
"""

from __future__ import annotations

import numba
import numpy as np

#: Rows walked together through one tree. 64 rows × 10 features of float64 is 5 KiB: the block,
#: its node indices and its partial sums stay in L1 across all trees. (A/B on this machine,
#: 200 trees of depth 6, 10⁵ rows: 32, 64 and 128 rows within 2 % of each other, 256 4 % slower.)
BLOCK = 64

#: Trees walked together by :func:`leaf_sum_one` (one row): 16 and 32 within 15 % here.
TREE_GROUP = 32

#: Node and feature indices are unsigned in the loops: numba wraps a negative signed index
#: around (one compare and add per access), which nearly halved the block walk's speed
#: (0.48 vs 0.98 million rows/s above). The callers check feature indices beforehand.
U = np.uint64


@numba.njit(cache=True, nogil=True, inline="always")
def _goes_left(x: float, threshold: float, categorical: bool) -> np.uint64:  # pragma: no cover
    """1 if the row goes left (``x == t`` for a categorical feature, else ``x < t``), else 0.

    Integer arithmetic on both comparisons, not ``a if categorical else b``: numba turns that
    conditional into a jump, mispredicted whenever the trees mix numeric and categorical
    nodes (a depth-6 tree routed 2·10⁶ rows in 93 ms with it, 19 ms with this).
    """
    c = U(categorical)
    return (c & U(x == threshold)) | ((U(1) - c) & U(x < threshold))


@numba.njit(cache=True, nogil=True, inline="always")
def _walk_block(X: np.ndarray, start: int, m: int, feature: np.ndarray, threshold: np.ndarray,
                is_categorical: np.ndarray, any_categorical: bool, depth: int,
                node: np.ndarray) -> None:  # pragma: no cover - compiled
    """Walk rows ``start .. start + m`` of ``X`` through one tree, level by level: afterwards
    ``node[r]`` is row ``start + r``'s leaf node (heap index). Without a categorical column
    the plain ``x < t`` test runs (the branch on ``any_categorical`` is the same for the
    whole walk, so it is predicted), and the root's feature and threshold are loaded once."""
    if depth > 0:
        f0 = U(feature[0])
        t0 = threshold[0]
        for r in range(m):
            node[r] = U(2) - _goes_left(X[U(start + r), f0], t0, is_categorical[f0])
    else:
        for r in range(m):
            node[r] = U(0)
    for _ in range(1, depth):
        if any_categorical:
            for r in range(m):
                nd = node[U(r)]
                f = U(feature[nd])
                node[U(r)] = (U(2) * nd + U(2)
                              - _goes_left(X[U(start + r), f], threshold[nd], is_categorical[f]))
        else:
            for r in range(m):
                nd = node[U(r)]
                go_left = X[U(start + r), U(feature[nd])] < threshold[nd]
                node[U(r)] = U(2) * nd + U(2) - U(1 if go_left else 0)


@numba.njit(cache=True, nogil=True)
def sum_leaves(X: np.ndarray, features: np.ndarray, thresholds: np.ndarray,
               leaves: np.ndarray, is_categorical: np.ndarray, depth: int,
               out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[i] = Σ_t leaves[t, leaf(X[i], t)]``, in interleaved blocks of :data:`BLOCK`
    rows (see the module docstring), the leaf values added in tree order."""
    n_rows = X.shape[0]
    n_internal = U(2**depth - 1)
    any_categorical = is_categorical.any()
    node = np.zeros(BLOCK, dtype=np.uint64)
    acc = np.zeros(BLOCK, dtype=np.float64)
    for start in range(0, n_rows, BLOCK):
        m = min(BLOCK, n_rows - start)
        for r in range(m):
            acc[r] = 0.0
        for t in range(features.shape[0]):
            _walk_block(X, start, m, features[t], thresholds[t], is_categorical,
                        any_categorical, depth, node)
            leaf = leaves[t]
            for r in range(m):
                acc[r] += leaf[node[U(r)] - n_internal]
        for r in range(m):
            out[start + r] = acc[r]


@numba.njit(cache=True, nogil=True)
def leaf_sum_one(x: np.ndarray, features: np.ndarray, thresholds: np.ndarray,
                 leaves: np.ndarray, is_categorical: np.ndarray,
                 depth: int) -> float:  # pragma: no cover - compiled
    """``Σ_t leaves[t, leaf(x, t)]`` for one row ``x`` (1-D): the single-prediction path.

    The same interleaving turned around: one row, :data:`TREE_GROUP` trees advanced level by
    level together, so their independent load chains overlap (tree after tree, the walk
    waits on one chain at a time: 11 µs for 200 trees of depth 6 here, 2 µs in groups of 32).
    The leaf values are still added in tree order. What a caller would otherwise check in
    numpy on every call is checked here (shapes; a feature index outside ``x`` raises), so
    a call costs one dispatch.
    """
    n_trees = features.shape[0]
    n_internal = U(2**depth - 1)
    n_cols = U(min(x.shape[0], is_categorical.shape[0]))  # what f may index
    if (U(features.shape[1]) != n_internal or thresholds.shape[0] != n_trees
            or U(thresholds.shape[1]) != n_internal or leaves.shape[0] != n_trees
            or leaves.shape[1] != 2**depth):
        raise ValueError("trees of depth d need (n, 2^d - 1) features and thresholds and "
                         "(n, 2^d) leaves")
    node = np.zeros(TREE_GROUP, dtype=np.uint64)
    total = 0.0
    for start in range(0, n_trees, TREE_GROUP):
        m = min(TREE_GROUP, n_trees - start)
        for j in range(m):
            node[j] = U(0)
        for _ in range(depth):
            for j in range(m):
                nd = node[U(j)]
                f = U(features[U(start + j), nd])
                if f >= n_cols:  # also a negative index, wrapped around; never taken
                    raise ValueError("a tree tests a feature index outside the row or schema")
                v = x[f]
                th = thresholds[U(start + j), nd]
                node[U(j)] = U(2) * nd + U(2) - _goes_left(v, th, is_categorical[f])
        for j in range(m):
            total += leaves[U(start + j), node[U(j)] - n_internal]
    return total


@numba.njit(cache=True, nogil=True)
def sum_leaves_shifted(X: np.ndarray, shifts: np.ndarray, features: np.ndarray,
                       thresholds: np.ndarray, leaves: np.ndarray, is_categorical: np.ndarray,
                       depth: int, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[i] = (Σ_k Σ_t leaves[t, leaf(X[i] + shifts[k], t)]) / K``: a smoothed
    ensemble's leaf sum (:func:`~renyiboost.models.trees.input_shifts`) in the blocks of
    :func:`sum_leaves`. Each block's rows are copied shifted into a buffer (``BLOCK`` × k
    floats, in L1) once a shift, so ``X`` is never copied whole; the sum over trees of one
    shift is formed first and the shifts' sums are then added in order, as the numpy
    reference does."""
    n_rows, n_cols = X.shape[0], X.shape[1]
    n_shift_cols = shifts.shape[1]
    n_internal = U(2**depth - 1)
    any_categorical = is_categorical.any()
    node = np.zeros(BLOCK, dtype=np.uint64)
    part = np.zeros(BLOCK, dtype=np.float64)
    acc = np.zeros(BLOCK, dtype=np.float64)
    moved = np.empty((BLOCK, n_cols), dtype=np.float64)
    for start in range(0, n_rows, BLOCK):
        m = min(BLOCK, n_rows - start)
        for r in range(m):
            acc[r] = 0.0
        for k in range(shifts.shape[0]):
            for r in range(m):
                for j in range(n_cols):
                    moved[r, j] = X[start + r, j] + (shifts[k, j] if j < n_shift_cols else 0.0)
                part[r] = 0.0
            for t in range(features.shape[0]):
                _walk_block(moved, 0, m, features[t], thresholds[t], is_categorical,
                            any_categorical, depth, node)
                leaf = leaves[t]
                for r in range(m):
                    part[r] += leaf[node[U(r)] - n_internal]
            for r in range(m):
                acc[r] += part[r]
        for r in range(m):
            out[start + r] = acc[r] / shifts.shape[0]


@numba.njit(cache=True, nogil=True)
def leaf_sum_one_shifted(x: np.ndarray, shifts: np.ndarray, features: np.ndarray,
                         thresholds: np.ndarray, leaves: np.ndarray, is_categorical: np.ndarray,
                         depth: int) -> float:  # pragma: no cover - compiled
    """:func:`leaf_sum_one` of a smoothed ensemble: the mean over ``k`` of the leaf sum of
    ``x + shifts[k]`` (the first ``shifts.shape[1]`` features move), in one dispatch."""
    moved = x.copy()
    total = 0.0
    for k in range(shifts.shape[0]):
        for j in range(min(x.shape[0], shifts.shape[1])):
            moved[j] = x[j] + shifts[k, j]
        total += leaf_sum_one(moved, features, thresholds, leaves, is_categorical, depth)
    return total / shifts.shape[0]


@numba.njit(cache=True, nogil=True)
def route_tree(X: np.ndarray, features: np.ndarray, thresholds: np.ndarray,
               is_categorical: np.ndarray, depth: int,
               out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out[i]`` = leaf index of row ``i`` in the one tree ``(features, thresholds)``.

    The training path (one tree per round over up to 10⁷ rows), in the blocks of
    :func:`sum_leaves`.
    """
    n_internal = U(2**depth - 1)
    any_categorical = is_categorical.any()
    node = np.zeros(BLOCK, dtype=np.uint64)
    for start in range(0, X.shape[0], BLOCK):
        m = min(BLOCK, X.shape[0] - start)
        _walk_block(X, start, m, features, thresholds, is_categorical, any_categorical, depth,
                    node)
        for r in range(m):
            out[start + r] = node[U(r)] - n_internal


@numba.njit(cache=True, nogil=True)
def grow_thresholds(features: np.ndarray, uniforms: np.ndarray, lower: np.ndarray,
                    upper: np.ndarray, is_categorical: np.ndarray, n_categories: np.ndarray,
                    split_candidates: int,
                    thresholds: np.ndarray) -> None:  # pragma: no cover - compiled
    """Thresholds of one random tree in heap order, one uniform ``uniforms[node]`` each.

    ``features`` are already drawn. A node's open interval for a numeric feature ``f`` is the
    public ``(lower[f], upper[f])`` narrowed by its ancestors on ``f``: the deepest ancestor
    it lies left of sets the upper end, the deepest it lies right of the lower end (the
    parent's interval is copied and one end overwritten, as the per-node loop this replaced
    did). The
    threshold is ``lo + (hi − lo)·u`` inside it, or with ``split_candidates = m > 0`` the
    ``⌊u·c⌋``-th of the ``c`` grid points ``lower + (upper − lower)·j/(m+1)`` strictly inside
    (of all ``m`` if none is). A categorical node takes the ``⌊u·c⌋``-th of the ``c`` codes of
    ``range(n_categories[f])`` that no ancestor on its path tested on ``f`` (of all codes if
    none is left). Every ``⌊u·c⌋`` is capped at ``c − 1``, as ``NoiseSource.choice`` does.
    A node walks its ``≤ depth`` ancestors, so nothing of size nodes × features is stored.
    """
    n_internal = features.shape[0]
    path = np.empty(64, dtype=np.int64)  # depth <= 20
    codes = np.empty(64, dtype=np.float64)
    for node in range(n_internal):
        f = features[node]
        u = uniforms[node]
        # path[p]: the node and its ancestors below the root, deepest first; the parent of
        # each is an ancestor, and which child of it path[p] is says on which side we lie.
        n_path = 0
        child = node
        while child > 0:
            path[n_path] = child
            n_path += 1
            child = (child - 1) // 2
        if is_categorical[f]:
            n_codes = n_categories[f]
            # Distinct codes of f that ancestors tested, kept sorted (insertion sort).
            n_tested = 0
            for p in range(n_path):
                parent = (path[p] - 1) // 2
                if features[parent] != f:
                    continue
                c = thresholds[parent]
                seen = False
                for q in range(n_tested):
                    if codes[q] == c:
                        seen = True
                if seen:
                    continue
                q = n_tested
                while q > 0 and codes[q - 1] > c:
                    codes[q] = codes[q - 1]
                    q -= 1
                codes[q] = c
                n_tested += 1
            n_free = n_codes - n_tested
            if n_free > 0:
                code = float(min(int(u * n_free), n_free - 1))
                for q in range(n_tested):  # the code-th free code: skip tested ones below
                    if codes[q] <= code:
                        code += 1.0
            else:
                code = float(min(int(u * n_codes), n_codes - 1))
            thresholds[node] = code
            continue
        lo = lower[f]
        hi = upper[f]
        found_lo = False
        found_hi = False
        for p in range(n_path):
            if found_lo and found_hi:
                break
            below = path[p]
            parent = (below - 1) // 2
            if features[parent] != f:
                continue
            if below == 2 * parent + 1:  # left child: x < threshold
                if not found_hi:
                    hi = thresholds[parent]
                    found_hi = True
            elif not found_lo:
                lo = thresholds[parent]
                found_lo = True
        if split_candidates <= 0:
            thresholds[node] = lo + (hi - lo) * u
            continue
        m = split_candidates
        first = 0
        count = 0
        for j in range(1, m + 1):
            candidate = lower[f] + (upper[f] - lower[f]) * (j / (m + 1))
            if candidate > lo and candidate < hi:
                if count == 0:
                    first = j
                count += 1
        if count == 0:
            first, count = 1, m
        j = first + min(int(u * count), count - 1)
        thresholds[node] = lower[f] + (upper[f] - lower[f]) * (j / (m + 1))
