"""Compiled prediction, routing and tree growth against their numpy / pure-Python references.

The numpy routing (``Ensemble._route_block``) is the oracle for the compiled kernels: same
leaf index for every row and tree, and leaf sums equal to the bit to a sequential sum of the
oracle's leaf values in tree order (the kernels' order). The vectorised grower must give the
trees of the per-node loop it replaced (kept below as :func:`_grow_reference`) from the same
seeded stream, and its splits must have the stated distributions.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from renyiboost.models.predict_kernels import BLOCK, route_tree
from renyiboost.models.trees import Ensemble, RandomTreeGrower, tree_pair
from renyiboost.randomness import NoiseSource, SeededNoise
from renyiboost.schema import PublicSchema

#: Numeric thresholds and row values come from this grid, so rows often sit exactly at a
#: threshold (x == t goes right for a numeric test).
GRID = np.linspace(-1.0, 1.0, 9)


def _random_ensemble(seed: int, depth: int, n_trees: int, n_features: int = 5,
                     categorical: tuple[int, ...] = (1, 3)) -> Ensemble:
    rng = np.random.default_rng(seed)
    is_cat = np.zeros(n_features, dtype=bool)
    is_cat[list(categorical)] = True
    n_internal = 2**depth - 1
    features = rng.integers(0, n_features, (n_trees, n_internal))
    thresholds = rng.choice(GRID, (n_trees, n_internal))
    codes = rng.integers(0, 4, (n_trees, n_internal)).astype(float)
    thresholds = np.where(is_cat[features], codes, thresholds)
    leaves = rng.normal(0.0, 1.0, (n_trees, 2**depth)) * 10.0 ** rng.integers(-3, 3, n_trees)[
        :, None]
    return Ensemble(depth=depth, is_categorical=is_cat, init_score=float(rng.normal()),
                    features=features, thresholds=thresholds, leaves=leaves)


def _random_rows(seed: int, n_rows: int, is_cat: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(seed + 1000)
    X = rng.choice(GRID, (n_rows, is_cat.size))
    X += np.where(rng.uniform(size=X.shape) < 0.3, rng.uniform(-0.2, 0.2, X.shape), 0.0)
    X[:, is_cat] = rng.integers(0, 5, (n_rows, int(is_cat.sum())))  # code 4: never a threshold
    X[rng.uniform(size=X.shape) < 0.1] = np.nan
    return X


def _oracle(ens: Ensemble, X: np.ndarray, trees: slice) -> tuple[np.ndarray, np.ndarray]:
    """Leaf index per (row, tree) from the numpy routing and their sum in tree order."""
    features, thresholds, leaves = ens.features[trees], ens.thresholds[trees], ens.leaves[trees]
    leaf = ens._route_block(X, features, thresholds)
    total = np.zeros(X.shape[0])
    for t in range(leaves.shape[0]):
        total += leaves[t, leaf[:, t]]
    return leaf, total


def _check(ens: Ensemble, X: np.ndarray, trees: slice = slice(None)) -> None:
    leaf, total = _oracle(ens, X, trees)
    compiled = ens.leaf_sum(X, trees)
    np.testing.assert_array_equal(compiled, total)  # same order of additions: to the bit
    scale = np.abs(ens.leaves[trees]).sum() + 1e-300
    np.testing.assert_allclose(compiled, ens.leaf_sum_reference(X, trees), rtol=0,
                               atol=1e-12 * scale)
    if trees == slice(None):
        margin = ens.predict_margin(X)
        np.testing.assert_array_equal(margin, ens.init_score + total)
        for i in range(min(X.shape[0], 150)):
            one = ens.predict_margin(X[i])
            assert one.shape == (1,)
            assert one[0] == margin[i] == ens.predict_margin_one(X[i])
            assert ens.predict_margin_one(list(X[i])) == margin[i]
    for t in range(ens.features[trees].shape[0]):
        f, th = ens.features[trees][t], ens.thresholds[trees][t]
        routed = _compiled_route(ens, X, f, th)
        np.testing.assert_array_equal(routed, leaf[:, t])
        np.testing.assert_array_equal(routed, ens.route_one_tree(X, f, th))


def _compiled_route(ens: Ensemble, X: np.ndarray, features: np.ndarray,
                    thresholds: np.ndarray) -> np.ndarray:
    """The compiled training router (the compiled round's), on validated inputs."""
    out = np.empty(X.shape[0], dtype=np.uint16)
    route_tree(np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(features),
               np.ascontiguousarray(thresholds, dtype=np.float64), ens.is_categorical,
               ens.depth, out)
    return out


# --------------------------------------------------------------------- prediction


@pytest.mark.parametrize("depth", range(8))
@pytest.mark.parametrize("categorical", [(), (1, 3)])
def test_compiled_prediction_equals_the_numpy_routing(depth: int,
                                                      categorical: tuple[int, ...]) -> None:
    for seed, n_trees in enumerate((0, 1, 3, 17)):
        ens = _random_ensemble(seed, depth, n_trees, categorical=categorical)
        for n_rows in (0, 1, BLOCK - 1, BLOCK, 3 * BLOCK + 5):
            _check(ens, _random_rows(seed, n_rows, ens.is_categorical))


@pytest.mark.parametrize("trees", [slice(0, 0), slice(2, 5), slice(None, None, 2),
                                   slice(-4, None), slice(None, None, -3), slice(7, 100)])
@pytest.mark.parametrize("categorical", [(), (0, 4)])
def test_tree_slices(trees: slice, categorical: tuple[int, ...]) -> None:
    ens = _random_ensemble(5, 4, 11, categorical=categorical)
    _check(ens, _random_rows(5, 300, ens.is_categorical), trees)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), depth=st.integers(0, 7), n_trees=st.integers(0, 40),
       n_rows=st.integers(0, 300), categorical=st.sampled_from([(), (2,), (0, 1, 2, 3, 4)]))
def test_compiled_prediction_equals_the_numpy_routing_random(
        seed: int, depth: int, n_trees: int, n_rows: int, categorical: tuple[int, ...]) -> None:
    ens = _random_ensemble(seed, depth, n_trees, categorical=categorical)
    _check(ens, _random_rows(seed, n_rows, ens.is_categorical))


def test_rows_at_thresholds_and_nan() -> None:
    """Numeric: x == t goes right; categorical: x == t goes left; NaN always right."""
    ens = Ensemble(depth=1, is_categorical=np.array([False, True]),
                   features=np.array([[0], [1]]), thresholds=np.array([[0.5], [2.0]]),
                   leaves=np.array([[1.0, 10.0], [100.0, 1000.0]]))
    X = np.array([[0.5, 2.0], [np.nextafter(0.5, 0.0), 1.0], [np.nan, np.nan], [0.7, 3.0],
                  [-np.inf, np.inf]])
    for route in (ens.route_one_tree, partial(_compiled_route, ens)):
        np.testing.assert_array_equal(route(X, ens.features[0], ens.thresholds[0]),
                                      [1, 0, 1, 1, 0])
        np.testing.assert_array_equal(route(X, ens.features[1], ens.thresholds[1]),
                                      [0, 1, 1, 1, 1])
    expected = [10.0 + 100.0, 1.0 + 1000.0, 10.0 + 1000.0, 10.0 + 1000.0, 1.0 + 1000.0]
    np.testing.assert_array_equal(ens.predict_margin(X), expected)
    assert [ens.predict_margin_one(row) for row in X] == expected
    _check(ens, X)


def test_inputs_other_than_float64_rows() -> None:
    ens = _random_ensemble(3, 3, 5)
    X = _random_rows(3, 100, ens.is_categorical)
    X = np.nan_to_num(X, nan=0.25)
    expected = ens.predict_margin(X)
    np.testing.assert_array_equal(ens.predict_margin(np.asfortranarray(X)), expected)
    np.testing.assert_array_equal(ens.predict_margin(X.astype(np.float32)),
                                  ens.predict_margin(X.astype(np.float32).astype(float)))
    np.testing.assert_array_equal(ens.predict_margin(X.tolist()), expected)
    wide = np.column_stack([X, np.full(len(X), 7.0)])  # extra columns are ignored
    np.testing.assert_array_equal(ens.predict_margin(wide), expected)
    np.testing.assert_array_equal(ens.predict_margin(X[::2]), expected[::2])


def test_rows_narrower_than_the_schema_or_bad_features_raise() -> None:
    ens = _random_ensemble(4, 3, 5)
    X = _random_rows(4, 10, ens.is_categorical)
    with pytest.raises(ValueError, match="features"):
        ens.predict_margin(X[:, :-1])
    with pytest.raises(ValueError, match="features"):
        ens.predict_margin(X[0, :-1])
    assert ens.predict_margin(np.empty((0, 0))).shape == (0,)
    short = Ensemble(depth=3, is_categorical=ens.is_categorical, features=ens.features[:, :6],
                     thresholds=ens.thresholds[:, :6], leaves=ens.leaves[:, :7])
    for predict in (short.predict_margin, short.predict_margin_one):
        with pytest.raises(ValueError, match="depth"):
            predict(X[0])
    with pytest.raises(ValueError, match="depth"):
        short.predict_margin(X)
    bad = Ensemble(depth=2, is_categorical=ens.is_categorical, features=ens.features[:, :3] + 9,
                   thresholds=ens.thresholds[:, :3], leaves=ens.leaves[:, :4])
    with pytest.raises(ValueError, match="feature ind"):
        bad.predict_margin(X)
    with pytest.raises(ValueError, match="feature ind"):
        bad.predict_margin_one(X[0])


def test_extend_grows_by_doubling_and_keeps_earlier_views() -> None:
    """Trees added one at a time land in buffers that double (a follower catching up copied
    every tree held for each version); an earlier view keeps its values, a copy of the
    ensemble shares nothing, and a pickle carries no spare rows."""
    import copy
    import pickle
    ens = _random_ensemble(5, 3, 0)
    source = _random_ensemble(6, 3, 300)
    buffers, views = set(), []
    for t in range(300):
        ens.append(source.features[t], source.thresholds[t], source.leaves[t])
        buffers.add(id(ens._buffers[2]))
        views.append(ens.leaves)
    assert len(buffers) <= 7  # 8, 16, …, 512 rows: log₂ of the trees, not one a tree
    for t, view in enumerate(views):  # each view is still the first t + 1 trees
        np.testing.assert_array_equal(view, source.leaves[:t + 1])
    np.testing.assert_array_equal(ens.features, source.features)
    X = _random_rows(5, 50, ens.is_categorical)
    np.testing.assert_array_equal(ens.leaf_sum(X), source.leaf_sum(X))
    twins = (copy.copy(ens), copy.deepcopy(ens), pickle.loads(pickle.dumps(ens)))
    ens.append(source.features[0], source.thresholds[0], source.leaves[0] + 1.0)
    for twin in twins:  # the original's new tree reaches none of its copies
        twin.append(source.features[1], source.thresholds[1], source.leaves[1])
        np.testing.assert_array_equal(twin.leaves[-1], source.leaves[1])
        assert twin.n_trees == 301 and twin.leaves.base is not ens.leaves.base
    np.testing.assert_array_equal(ens.leaves[-1], source.leaves[0] + 1.0)
    assert len(pickle.dumps(ens)) < 1.2 * len(pickle.dumps(source))  # no spare rows
    ens.keep_last(10)  # a later run of rows: the next tree follows it in the buffer
    ens.append(source.features[2], source.thresholds[2], source.leaves[2])
    np.testing.assert_array_equal(ens.leaves, np.vstack([
        source.leaves[-9:], source.leaves[:1] + 1.0, source.leaves[2:3]]))
    capped, last, grown = _random_ensemble(5, 3, 0), None, 0
    for t in range(2000):  # a tree cap of 100 (max_trees): each append once copied 100 trees
        capped.append(source.features[t % 300], source.thresholds[t % 300],
                      source.leaves[t % 300])
        capped.keep_last(100)
        grown, last = grown + (capped._buffers is not last), capped._buffers
    assert grown <= 25  # a new buffer about every 100 trees, not every tree
    stump = Ensemble(depth=0, is_categorical=np.zeros(2, bool))  # rows of no width
    for t in range(5):
        stump.append(np.zeros(0, int), np.zeros(0), np.full(1, float(t)))
        stump.keep_last(3)
    assert stump.leaves[:, 0].tolist() == [2.0, 3.0, 4.0] and stump.features.shape == (3, 0)
    np.testing.assert_array_equal(capped.leaves, source.leaves[np.arange(1900, 2000) % 300])

# --------------------------------------------------------------------- growth


def _grow_reference(grower: RandomTreeGrower, tree_index: int,
                    rng: NoiseSource) -> tuple[np.ndarray, np.ndarray]:
    """The per-node loop that ``RandomTreeGrower.grow`` replaced, with the tested codes kept
    per feature along the whole path. (The old loop kept one set for all categorical
    features and lost it below any numeric node, so a code could be tested twice on a path.)
    """
    schema = grower.schema
    n_internal = 2**grower.depth - 1
    features = np.zeros(n_internal, dtype=np.int64)
    thresholds = np.zeros(n_internal, dtype=float)
    lower = np.tile(schema.lower, (max(n_internal, 1), 1))
    upper = np.tile(schema.upper, (max(n_internal, 1), 1))
    tested: list[dict[int, frozenset[int]]] = [{}] * max(n_internal, 1)
    k = schema.n_features
    selection, t = grower.feature_selection, tree_index
    if selection == "mains_then_pairs":
        selection = "cyclic" if t < grower.mains_trees else "pairs"
        t = t if t < grower.mains_trees else t - grower.mains_trees
    pair = (t % k, (t % k + 1 + (t // k) % (k - 1)) % k if k > 1 else t % k)
    for node in range(n_internal):
        if selection == "cyclic":
            f = t % k
        elif selection == "pairs":
            f = pair[0] if rng.uniform(1)[0] < 0.5 else pair[1]
        else:
            f = rng.choice(k)
        features[node] = f
        if schema.is_categorical[f]:
            done = tested[node].get(f, frozenset())
            free = [c for c in range(schema.n_categories[f]) if c not in done]
            pool = free or list(range(schema.n_categories[f]))
            thresholds[node] = pool[rng.choice(len(pool))]
        else:
            low, high = lower[node, f], upper[node, f]
            if grower.split_candidates is not None:
                lo, hi = schema.lower[f], schema.upper[f]
                steps = np.arange(1, grower.split_candidates + 1) / (grower.split_candidates + 1)
                candidates = lo + (hi - lo) * steps
                inside = candidates[(candidates > low) & (candidates < high)]
                pool_ = inside if inside.size else candidates
                thresholds[node] = float(pool_[rng.choice(pool_.size)])
            else:
                thresholds[node] = float(low + (high - low) * rng.uniform(1)[0])
        left, right = 2 * node + 1, 2 * node + 2
        if left < n_internal:
            lower[left], upper[left] = lower[node], upper[node]
            lower[right], upper[right] = lower[node], upper[node]
            tested[left] = tested[right] = tested[node]  # never mutated: shared
            if schema.is_categorical[f]:
                codes = tested[node].get(f, frozenset()) | {int(thresholds[node])}
                tested[left] = tested[right] = tested[node] | {f: codes}
            else:
                upper[left, f] = thresholds[node]
                lower[right, f] = thresholds[node]
    return features, thresholds


SCHEMAS = [
    PublicSchema(features={"a": (0.0, 1.0), "b": (-5.0, 5.0), "c": ["x", "y", "z"]}),
    PublicSchema(features={"a": (0.0, 1.0)}),
    PublicSchema(features={"c": ["x", "y"]}),
    PublicSchema(features={"c": list("abcdefg"), "d": [1, 2], "e": (-1.0, 3.0),
                           "f": list("pqrs"), "g": (10.0, 11.0)}),
]


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("selection", ["random", "cyclic", "pairs", "mains_then_pairs"])
@pytest.mark.parametrize("candidates", [None, 1, 3, 7])
def test_grower_gives_the_reference_loops_trees(schema: PublicSchema, selection: str,
                                                candidates: int | None) -> None:
    """Same seeded stream, same trees, to the bit; the same number of draws consumed."""
    for depth in range(8):
        grower = RandomTreeGrower(schema, depth, selection, candidates,  # type: ignore[arg-type]
                                  mains_trees=7)
        for seed in range(3):
            tree = 5 * seed + depth
            ours_rng, ref_rng = SeededNoise(seed), SeededNoise(seed)
            ours, ref = grower.grow(tree, ours_rng), _grow_reference(grower, tree, ref_rng)
            np.testing.assert_array_equal(ours[0], ref[0])
            np.testing.assert_array_equal(ours[1], ref[1])
            assert ours[0].dtype == np.int64 and ours[1].dtype == np.float64
            assert ours_rng.uniform(1)[0] == ref_rng.uniform(1)[0]  # same draws consumed


def test_grower_at_depth_twenty_and_zero() -> None:
    schema = SCHEMAS[3]
    features, thresholds = RandomTreeGrower(schema, 0).grow(0, SeededNoise(0))
    assert features.shape == thresholds.shape == (0,)
    features, thresholds = RandomTreeGrower(schema, 12, split_candidates=5).grow(3, SeededNoise(1))
    assert features.shape == (2**12 - 1,)
    _assert_paths_valid(schema, features, thresholds, 5)


def _assert_paths_valid(schema: PublicSchema, features: np.ndarray, thresholds: np.ndarray,
                        candidates: int | None) -> list[float]:
    """Walk the heap: numeric thresholds strictly inside the node's open interval (or on the
    grid), a categorical code not tested before on the path on that feature. Returns the
    numeric thresholds' relative positions ``(t − lo) / (hi − lo)`` in their intervals."""
    n_internal = features.size
    bounds = {0: {f: (schema.lower[f], schema.upper[f]) for f in range(schema.n_features)}}
    tested: dict[int, dict[int, set[float]]] = {0: {}}
    positions = []
    for node in range(n_internal):
        f, t = int(features[node]), float(thresholds[node])
        left, right = dict(bounds[node]), dict(bounds[node])
        codes = dict(tested[node])
        if schema.is_categorical[f]:
            n_codes = int(schema.n_categories[f])
            assert t in range(n_codes)
            done = codes.get(f, set())
            if len(done) < n_codes:
                assert t not in done
            codes[f] = done | {t}
        else:
            lo, hi = bounds[node][f]
            if candidates is None:
                assert lo < t < hi
                positions.append((t - lo) / (hi - lo))
            else:
                lo_f, hi_f = schema.lower[f], schema.upper[f]
                j = (t - lo_f) / (hi_f - lo_f) * (candidates + 1)
                assert abs(j - round(j)) < 1e-9 and 1 <= round(j) <= candidates
                grid = lo_f + (hi_f - lo_f) * np.arange(1, candidates + 1) / (candidates + 1)
                if ((grid > lo) & (grid < hi)).any():
                    assert lo < t < hi
            left[f], right[f] = (lo, t), (t, hi)
        if 2 * node + 1 < n_internal:
            bounds[2 * node + 1], bounds[2 * node + 2] = left, right
            tested[2 * node + 1] = tested[2 * node + 2] = codes
    return positions


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("candidates", [None, 3])
def test_grown_splits_stay_inside_open_intervals_and_codes_do_not_repeat(
        schema: PublicSchema, candidates: int | None) -> None:
    rng = SeededNoise(8)
    for tree in range(20):
        for selection in ("random", "cyclic", "pairs"):
            grower = RandomTreeGrower(schema, 6, selection, candidates)  # type: ignore[arg-type]
            features, thresholds = grower.grow(tree, rng)
            if selection == "cyclic":
                assert np.all(features == tree % schema.n_features)
            if selection == "pairs":
                assert set(features.tolist()) <= set(tree_pair(tree, schema.n_features))
            _assert_paths_valid(schema, features, thresholds, candidates)


#: Significance level of the distribution checks. The seeds are fixed, so the checks are
#: deterministic; the level only says how far off a broken grower would have to be.
ALPHA = 1e-3


def test_grown_features_and_thresholds_are_uniform() -> None:
    """χ² on the features (uniform over k), KS on the numeric thresholds' positions in
    their open intervals (uniform on (0, 1)), χ² on the categorical root codes."""
    schema = SCHEMAS[3]
    grower = RandomTreeGrower(schema, 5)
    rng = SeededNoise(2024)
    features, positions, root_codes = [], [], []
    for tree in range(400):
        f, t = grower.grow(tree, rng)
        features.append(f)
        positions += _assert_paths_valid(schema, f, t, None)
        if f[0] == 0:  # 7 codes, none tested yet
            root_codes.append(int(t[0]))
    counts = np.bincount(np.concatenate(features), minlength=schema.n_features)
    assert stats.chisquare(counts).pvalue > ALPHA
    assert len(positions) > 5000
    assert stats.kstest(positions, "uniform").pvalue > ALPHA
    assert stats.chisquare(np.bincount(root_codes, minlength=7)).pvalue > ALPHA


def test_grid_candidates_are_uniform_among_those_inside() -> None:
    """A depth-2 cyclic tree on one numeric feature with m = 7 grid points: the root picks
    any of the 7; the left child uniformly among the points below the root's."""
    schema = PublicSchema(features={"a": (0.0, 8.0)})
    grower = RandomTreeGrower(schema, 2, "cyclic", 7)
    rng = SeededNoise(99)
    root, left_given_5 = [], []
    for _ in range(4000):
        _f, t = grower.grow(0, rng)
        root.append(int(t[0]))  # the grid is 1, ..., 7
        if t[0] == 5.0:
            left_given_5.append(int(t[1]))
    assert stats.chisquare(np.bincount(root, minlength=8)[1:]).pvalue > ALPHA
    assert set(left_given_5) == {1, 2, 3, 4}
    assert stats.chisquare(np.bincount(left_given_5, minlength=5)[1:]).pvalue > ALPHA
