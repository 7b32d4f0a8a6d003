"""The S-GBDT learner: random trees, DP leaves, the filter in the loop, I/O."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest

from renyiboost.exceptions import PrivacyLeakWarning, TestingOnlyWarning
from renyiboost.models.batch import SGBDT
from renyiboost.models.booster import RecordPool, SGBDTBooster, SGBDTParams
from renyiboost.models.losses import LogisticLoss
from renyiboost.models.trees import Ensemble, RandomTreeGrower, tree_pair
from renyiboost.randomness import SecureNoise, SeededNoise, noise_source
from renyiboost.release import ModelRelease
from renyiboost.schema import PublicSchema

SCHEMA = PublicSchema(
    features={"a": (0.0, 1.0), "b": (-5.0, 5.0), "c": ["x", "y", "z"]}, target_bounds=(0.0, 3.0)
)


def _data(n: int = 4000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(0, 1, n), rng.uniform(-5, 5, n), rng.integers(0, 3, n)])
    y = 2.0 * X[:, 0] + 0.5 * (X[:, 2] == 1) + rng.normal(0, 0.05, n)
    return X, np.clip(y, 0, 3)


def _naive_predict(ens: Ensemble, X: np.ndarray) -> np.ndarray:
    out = np.full(X.shape[0], ens.init_score)
    for t in range(ens.n_trees):
        for i, row in enumerate(X):
            node = 0
            for _ in range(ens.depth):
                f, thr = ens.features[t, node], ens.thresholds[t, node]
                left = row[f] == thr if ens.is_categorical[f] else row[f] < thr
                node = 2 * node + (1 if left else 2)
            out[i] += ens.leaves[t, node - (2**ens.depth - 1)]
    return out


# --------------------------------------------------------------------- trees


def test_splits_stay_inside_the_open_public_interval() -> None:
    depth = 5
    features, thresholds = RandomTreeGrower(SCHEMA, depth=depth).grow(0, SeededNoise(3))
    # Walk the heap, narrowing each numeric feature's interval along the path.
    bounds: dict[int, dict[int, tuple[float, float]]] = {0: {0: (0.0, 1.0), 1: (-5.0, 5.0)}}
    for node in range(2**depth - 1):
        f, t = int(features[node]), float(thresholds[node])
        left, right = dict(bounds[node]), dict(bounds[node])
        if f == 2:
            assert t in (0.0, 1.0, 2.0)
        else:
            lo, hi = bounds[node][f]
            assert lo < t < hi
            left[f], right[f] = (lo, t), (t, hi)
        bounds[2 * node + 1], bounds[2 * node + 2] = left, right


def test_cyclic_trees_use_one_feature_each_and_candidates_come_from_the_grid() -> None:
    grower = RandomTreeGrower(SCHEMA, depth=3, feature_selection="cyclic", split_candidates=4)
    for t in range(6):
        features, thresholds = grower.grow(t, SeededNoise(t))
        assert np.all(features == t % 3)
        if t % 3 == 0:
            assert set(np.round(thresholds, 12)) <= {0.2, 0.4, 0.6, 0.8}


def test_pair_trees_cycle_through_every_ordered_pair_after_the_main_effects() -> None:
    """``pairs``: tree t tests only its two features, and k(k − 1) trees see every ordered
    pair once; ``mains_then_pairs``: the learner's first half of its nominal rounds are
    one-feature trees in turn, at most ``mains_cycles`` a feature, the rest pair trees
    counted from the first of them."""
    schema = PublicSchema(features={f"x{j}": (0.0, 1.0) for j in range(4)})
    pairs = RandomTreeGrower(schema, depth=4, feature_selection="pairs")
    seen = set()
    for t in range(12):
        features, _ = pairs.grow(t, SeededNoise(t))
        first, second = tree_pair(t, 4)
        assert first == t % 4 and first != second
        assert set(features.tolist()) == {first, second}  # 15 nodes: both appear here
        seen.add((first, second))
    assert len(seen) == 12
    booster = SGBDTBooster(SGBDTParams(task="classification", epsilon=None, rounds=10,
                                       depth=3, feature_selection="mains_then_pairs"),
                           schema, seed=0)
    assert booster.grower.mains_trees == 5
    used = [set(booster.grower.grow(t, SeededNoise(t))[0].tolist()) for t in range(9)]
    assert used[:5] == [{0}, {1}, {2}, {3}, {0}]
    assert used[5:] == [set(tree_pair(t, 4)) for t in range(4)]
    # at most one one-feature tree a feature: 4 of them, not half the 10 rounds
    booster = SGBDTBooster(SGBDTParams(task="classification", epsilon=None, rounds=10,
                                       depth=3, feature_selection="mains_then_pairs",
                                       mains_cycles=1), schema, seed=0)
    assert booster.grower.mains_trees == 4
    used = [set(booster.grower.grow(t, SeededNoise(t))[0].tolist()) for t in range(8)]
    assert used == [{0}, {1}, {2}, {3}, *(set(tree_pair(t, 4)) for t in range(4))]


def test_pair_trees_learn_an_interaction_that_one_feature_trees_cannot() -> None:
    """An XOR of two features has no main effects: a sum of shape functions (one-feature
    trees) stays at AUC 0.5, two-feature trees learn it. Without noise, so that only the
    feature choice differs; the mains-first default gets there with half its trees."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(4)
    X = rng.uniform(0, 1, (6000, 3))
    y = ((X[:, 0] > 0.5) ^ (X[:, 1] > 0.5)).astype(float)
    schema = PublicSchema(features={f"x{j}": (0.0, 1.0) for j in range(3)})
    auc = {}
    for selection in ("cyclic", "pairs", "mains_then_pairs"):
        model = SGBDT(schema, task="classification", epsilon=None, seed=1, rounds=60, depth=3,
                      feature_selection=selection, split_candidates=8, learning_rate=0.3,
                      sampling_rate=1.0).fit(X[:4000], y[:4000])
        auc[selection] = roc_auc_score(y[4000:], model.predict_proba(X[4000:])[:, 1])
    assert auc["cyclic"] < 0.6  # measured 0.50
    assert auc["pairs"] > 0.95 and auc["mains_then_pairs"] > 0.95  # measured 1.00, 1.00


def test_tree_structure_never_depends_on_data() -> None:
    """Growing takes no records at all: the same noise gives the same tree."""
    a = RandomTreeGrower(SCHEMA, depth=4).grow(7, SeededNoise(11))
    b = RandomTreeGrower(SCHEMA, depth=4).grow(7, SeededNoise(11))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_vectorised_prediction_equals_the_naive_walk() -> None:
    X, _y = _data(300)
    X[::7, 0] = np.nan  # missing values take the fixed right branch
    X[::11, 2] = np.nan
    model = SGBDT(SCHEMA, seed=0, epsilon=None, rounds=12, depth=3, sampling_rate=1.0,
                  smoothing=0.0)  # the walk itself (tests/test_smoothing.py: the mean)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TestingOnlyWarning)
        model.fit(*_data(500))
    np.testing.assert_allclose(model.ensemble.predict_margin(X), _naive_predict(model.ensemble, X))


def test_routing_in_small_blocks_equals_one_pass(monkeypatch) -> None:
    """Blocks that split the rows unevenly (7 rows × trees per pass) change no leaf."""
    from renyiboost.models import trees

    X, _y = _data(300)
    model = SGBDT(SCHEMA, seed=0, epsilon=None, rounds=5, depth=3, sampling_rate=1.0,
                  smoothing=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TestingOnlyWarning)
        model.fit(*_data(500))
    ens = model.ensemble
    whole = ens.predict_margin(X), ens.route_one_tree(X, ens.features[2], ens.thresholds[2])
    monkeypatch.setattr(trees, "ROUTE_BLOCK", 7)
    np.testing.assert_allclose(ens.predict_margin(X), whole[0])
    np.testing.assert_array_equal(ens.route_one_tree(X, ens.features[2], ens.thresholds[2]),
                                  whole[1])
    np.testing.assert_allclose(whole[0], _naive_predict(ens, X))


# --------------------------------------------------------------------- learning


def test_non_private_learner_fits_a_simple_function() -> None:
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TestingOnlyWarning)
        model = SGBDT(SCHEMA, seed=1, epsilon=None, rounds=150, depth=4, learning_rate=0.3,
                      sampling_rate=0.5, grad_clip=1.0, reg_lambda=1.0).fit(X, y)
    pred = model.predict(X)
    r2 = 1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    assert r2 > 0.9


def test_private_learner_learns_and_stays_within_budget() -> None:
    X, y = _data(20000)
    with pytest.warns(TestingOnlyWarning):
        model = SGBDT(SCHEMA, seed=2, epsilon=1.0, rounds=40, max_rounds=80, depth=2,
                      learning_rate=0.3, sampling_rate=0.2, grad_clip=0.3, reg_lambda=10.0).fit(X, y)
    guarantee = model.privacy_guarantee()
    assert guarantee.epsilon <= 1.0 and guarantee.seeded_for_testing
    assert len(model.operator_history_) == 80  # max_rounds trees, whoever was eligible
    assert model.ensemble.n_trees == 80
    pred = model.predict(X)
    r2 = 1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    assert r2 > 0.5


def test_cached_margins_equal_a_full_prediction() -> None:
    X, y = _data(2000)
    params = SGBDTParams(epsilon=2.0, rounds=10, depth=3, sampling_rate=0.5)
    booster = SGBDTBooster(params, SCHEMA, seed=5)
    pool = RecordPool.from_arrays(SCHEMA.clip_encoded(X), booster.loss.scale(y))
    score, pool.spent = booster.initial_score(pool)
    booster.ensemble.init_score = score
    pool.margin[:] = score
    for _ in range(10):
        booster.apply_round(pool, booster.plan_round(pool))
    active = ~pool.retired
    np.testing.assert_allclose(pool.margin[active], booster.ensemble.predict_margin(pool.X)[active])


def test_filter_gives_small_gradient_records_extra_rounds() -> None:
    """With the filter a record with |g| < g* takes part in more than T rounds; without,
    everyone pays full price and no one passes T."""
    X, y = _data(3000)
    counts = {}
    for individual in (True, False):
        params = SGBDTParams(epsilon=1.0, rounds=10, max_rounds=60, depth=2, sampling_rate=1.0,
                             grad_clip=0.5, count_share=0.2, individual_filter=individual)
        booster = SGBDTBooster(params, SCHEMA, seed=9)
        pool = RecordPool.from_arrays(SCHEMA.clip_encoded(X), booster.loss.scale(y))
        taken = np.zeros(len(pool), dtype=int)
        for _ in range(60):
            outcome = booster.plan_round(pool)
            if outcome.n_eligible == 0:
                break
            before = pool.spent.copy()
            booster.apply_round(pool, outcome)
            taken += pool.spent > before
        assert pool.spent.max() <= booster.calibration.budget_rdp
        counts[individual] = taken
    assert counts[False].max() == 10
    assert counts[True].max() > 10


def test_leaf_noise_has_the_calibrated_standard_deviation() -> None:
    """Empty leaves release pure noise: its std must be g*·σ/√(2 r2) (3 % tolerance)."""
    params = SGBDTParams(epsilon=1.0, rounds=5, depth=6, learning_rate=1.0, reg_lambda=0.0,
                         count_share=0.3, grad_clip=0.5, sampling_rate=1.0)
    booster = SGBDTBooster(params, SCHEMA, seed=0)
    sums = booster.noise.normal(200_000, booster.release.sum_noise_std(0.5))
    expected = 0.5 * booster.calibration.sigma / np.sqrt(2 * 0.7)
    assert np.std(sums) == pytest.approx(expected, rel=0.03)
    # and the release uses that same number
    assert booster.release.sum_noise_std(params.grad_clip) == pytest.approx(expected)


class _ScriptedNoise(SeededNoise):
    """Seeded draws, except that Gaussian releases add scripted arrays in turn (and are not
    rounded to their grid: the values below are the releases themselves)."""

    def __init__(self, *normals: np.ndarray) -> None:
        super().__init__(0)
        self.normals = list(normals)

    def add_gaussian(self, values: np.ndarray, std: float | np.ndarray = 1.0) -> np.ndarray:
        return values + self.normals.pop(0)


def test_a_negative_noisy_count_zeroes_the_leaf_or_is_clamped_to_zero() -> None:
    """'zero_leaf': leaf = 0 when n + noise <= 0; 'clamp': −lr·(Σg + noise)/(max(n + noise,
    0) + λ), so the noisy gradient sum survives; a zero denominator (λ = 0) gives 0."""
    from renyiboost.models.losses import LeafStatistics

    grad = np.array([0.1, 0.2, -0.3, 0.3])
    stats = LeafStatistics(grad=grad, denominator=np.ones(4), count_ratio=1.0,
                           grad_ratio=np.abs(grad) / 0.3)
    leaf_index, sampled = np.array([0, 0, 1, 1]), np.ones(4, dtype=bool)
    right = -0.5 * -1.0  # leaf 1: noisy sum 0.0 − 1.0, noisy count 2 + 1.5 = 3.5
    for rule, reg_lambda, expected in (("clamp", 10.0, [-0.5 * 1.3 / 10.0, right / 13.5]),
                                       ("clamp", 0.0, [0.0, right / 3.5]),
                                       ("zero_leaf", 10.0, [0.0, right / 13.5])):
        params = SGBDTParams(epsilon=1.0, depth=1, learning_rate=0.5, grad_clip=0.3,
                             reg_lambda=reg_lambda, negative_count=rule)
        booster = SGBDTBooster(params, SCHEMA, seed=0)
        # sum noise (+1.0, −1.0), count noise (−5.0: noisy count −3; +1.5)
        booster.noise = _ScriptedNoise(np.array([1.0, -1.0]), np.array([-5.0, 1.5]))
        grad_sum = np.bincount(leaf_index[sampled], stats.grad[sampled], 2)
        den_sum = np.bincount(leaf_index[sampled], stats.denominator[sampled], 2)
        leaves, noisy_sum, noisy_count = booster._leaf_values(grad_sum, den_sum, 1,
                                                                booster.release)
        np.testing.assert_allclose(noisy_sum, [1.3, -1.0])  # the two releases themselves
        np.testing.assert_allclose(noisy_count, [-3.0, 3.5])
        np.testing.assert_allclose(leaves, expected, err_msg=f"{rule}, lambda {reg_lambda}")


def test_lambda_rises_to_a_multiple_of_the_denominator_noise_and_charges_do_not_change(
) -> None:
    """``reg_lambda_noise_stds`` = k: a Newton leaf is −lr·Σ̃g/(max(Σ̃h, 0) + max(λ, k·σ_h)),
    σ_h the hessian sum's noise std of the round's noise stage (an early stage's smaller σ
    gives a smaller λ); k = 0 is λ itself. Post-processing of the two releases: the same
    noise draws give the same noisy sums and the same charges, only the values differ."""
    from renyiboost.schema import PublicSchema

    rng = np.random.default_rng(4)
    X = rng.uniform(0, 1, (3000, 2))
    y = (X[:, 0] + 0.3 * rng.normal(size=3000) > 0.5).astype(float)
    schema = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)})
    common = {"task": "classification", "epsilon": 2.0, "rounds": 100, "depth": 3,
              "hess_clip": 0.1, "learning_rate": 0.3, "sampling_rate": 1.0,
              "reg_lambda": 5.0, "init_share": 0.0, "count_share": 0.04,
              "negative_count": "clamp"}
    outcomes, boosters = {}, {}
    for k in (0.0, 0.8):
        booster = SGBDTBooster(SGBDTParams(**common, reg_lambda_noise_stds=k), schema,
                               seed=9, stage_rounds=(5,))
        pool = RecordPool.from_arrays(X, booster.loss.scale(y))
        boosters[k] = booster
        outcomes[k] = [booster.plan_round(pool, stage=stage) for stage in (0, None)]
    booster = boosters[0.8]
    sigmas = [booster.stage(stage).release.count_noise_std(0.1) for stage in (0, None)]
    assert sigmas[0] < 5.0 / 0.8 < sigmas[1]  # the early stage keeps λ = 5, the main one not
    for (plain, raised), sigma in zip(zip(outcomes[0.0], outcomes[0.8]), sigmas):
        np.testing.assert_array_equal(plain.spent, raised.spent)  # the same charges
        np.testing.assert_array_equal(plain.noisy_count, raised.noisy_count)
        den = np.maximum(raised.noisy_count, 0.0)
        for outcome, lam in ((plain, 5.0), (raised, max(5.0, 0.8 * sigma))):
            expected = -0.3 * outcome.noisy_grad_sum / (den + lam)
            np.testing.assert_allclose(outcome.leaves, expected, rtol=1e-12)
    assert booster.leaf_lambda(booster.stage(None).release) == pytest.approx(0.8 * sigmas[1])
    assert not np.allclose(outcomes[0.0][1].leaves, outcomes[0.8][1].leaves)
    assert boosters[0.8].leaf_lambda(None) == 5.0  # without noise, λ itself
    with pytest.raises(ValueError, match="leaf_noise='dynamic'"):
        SGBDTParams(leaf_noise="static", reg_lambda_noise_stds=0.8)


def test_static_leaf_noise_releases_the_noisy_mean_and_charges_everyone_in_full() -> None:
    """SLN (the ablation baseline): leaf = −lr·(Σg/(n + λ) + N(0, (g*/(1 + λ)·σ/√2)²)),
    and each record pays the full-sensitivity price whatever its gradient."""
    X, y = _data(3000)
    exact = SGBDTBooster(SGBDTParams(epsilon=None, rounds=1, depth=0, sampling_rate=1.0,
                                     leaf_noise="static", reg_lambda=4.0), SCHEMA, seed=0)
    pool = RecordPool.from_arrays(SCHEMA.clip_encoded(X), exact.loss.scale(y))
    grad = exact.loss.statistics(pool.margin, pool.target).grad
    leaves = exact.plan_round(pool).leaves
    assert leaves[0] == pytest.approx(-0.1 * grad.sum() / (grad.size + 4.0))

    params = SGBDTParams(epsilon=1.0, rounds=30, depth=6, learning_rate=1.0, reg_lambda=2.0,
                         grad_clip=0.5, sampling_rate=1.0, leaf_noise="static", init_share=0.0)
    booster = SGBDTBooster(params, SCHEMA, seed=1)
    pool = RecordPool.from_arrays(SCHEMA.clip_encoded(X), booster.loss.scale(y))
    pool.margin = pool.target.copy()  # zero gradients: the leaves are pure noise
    values = []
    for _ in range(30):
        outcome = booster.plan_round(pool)
        values.append(outcome.leaves)
        booster.apply_round(pool, outcome)
        pool.margin = pool.target.copy()
    expected = 0.5 / 3.0 * booster.calibration.sigma / np.sqrt(2.0)
    assert np.std(np.concatenate(values)) == pytest.approx(expected, rel=0.05)
    assert np.ptp(pool.spent) == 0.0  # zero gradients, yet everyone paid the same full price
    assert booster.plan_round(pool).n_eligible == 0  # T = 30 full-price rounds, no more
    with pytest.raises(ValueError, match="count leaves"):
        SGBDTParams(task="classification", hess_clip=0.25, leaf_noise="static")


def test_newton_statistics_are_functions_of_the_gradient() -> None:
    loss = LogisticLoss(grad_clip=1.0, hess_clip=0.25)
    margin = np.linspace(-4, 4, 41)
    stats1 = loss.statistics(margin, np.ones_like(margin))
    g = np.abs(stats1.grad)
    np.testing.assert_allclose(stats1.denominator, g * (1 - g))


# --------------------------------------------------------------------- public inputs, randomness


def test_regression_without_public_target_bounds_raises() -> None:
    schema = PublicSchema(features={"a": (0.0, 1.0)})
    with pytest.raises(ValueError, match="target_bounds"):
        SGBDT(schema, epsilon=1.0).fit(np.zeros((10, 1)), np.zeros(10))


def test_reading_bounds_from_data_warns_and_every_release_says_so() -> None:
    """Catches: a model trained on bounds read from the data whose release looks like any
    other (ε = 1 and nothing more), while it holds the data's exact extremes."""
    X = np.array([[1.0, 2.0], [3.0, 5.0]] * 50)
    with pytest.warns(PrivacyLeakWarning):
        schema = PublicSchema.from_data(X, ["u", "v"], np.tile([0.0, 1.0], 50))
    assert schema.features["v"] == (2.0, 5.0)
    model = SGBDT(schema, seed=0, epsilon=1.0, rounds=2, depth=1).fit(X, np.tile([0.0, 1.0], 50))
    released = json.loads(model.to_json())["public_schema"]
    assert released["bounds_read_from_data"] is True
    assert SGBDT.from_json(model.to_json()).schema.bounds_read_from_data
    public = PublicSchema(features=schema.features, target_bounds=schema.target_bounds)
    assert "bounds_read_from_data" not in public.model_dump()  # fingerprints unchanged


def test_default_noise_is_the_csprng_and_a_seed_warns() -> None:
    assert isinstance(noise_source(None), SecureNoise)
    with pytest.warns(TestingOnlyWarning):
        assert noise_source(3).seeded
    u = SecureNoise().uniform(100_000)
    assert 0 < u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    z = SecureNoise().normal(100_000, 2.0)
    assert abs(z.std() - 2.0) < 0.05


def test_schema_validation_messages_name_the_feature() -> None:
    with pytest.raises(ValueError, match="'a'"):
        PublicSchema(features={"a": (1.0, 0.0)})
    assert SCHEMA.encode_columns({"a": [7.0], "c": ["w"]})[0].tolist()[0::2] == [1.0, 3.0]


def test_json_round_trip_predicts_identically() -> None:
    X, y = _data(1000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TestingOnlyWarning)
        model = SGBDT(SCHEMA, seed=4, epsilon=1.0, rounds=10, depth=3).fit(X, y)
        again = SGBDT.from_json(model.to_json())
    np.testing.assert_array_equal(model.predict(X), again.predict(X))
    assert again.stated_guarantee == model.privacy_guarantee()
    assert again.privacy_guarantee() == model.privacy_guarantee()
    assert again.to_json() == model.to_json()  # a re-export is the same release
    exported = json.loads(model.to_json())
    # the public release, nothing else (the policy's split grid adds its smoothing spans;
    # a batch fit has no answer map)
    assert set(exported) == set(ModelRelease.model_fields) - {"answer_map", "part"}


@pytest.mark.parametrize("compiled", [True, False])
def test_a_round_refuses_arrays_that_do_not_fit_before_anything_changes(compiled) -> None:
    """Review B (29 November): a pool of one column for a three-feature schema was routed
    by the compiled round on its neighbours' values and on memory past its end; leaf sums
    of a shallower round than the one released, and a leaf depth past the tree's, were
    released; leaves of another shape changed the pool's margins before the ensemble
    refused them."""
    X, y = _data(300)
    params = SGBDTParams(epsilon=2.0, rounds=5, depth=3, sampling_rate=1.0)
    booster = SGBDTBooster(params, SCHEMA, seed=5, compiled=compiled)
    narrow = RecordPool.from_arrays(SCHEMA.clip_encoded(X)[:, :1], booster.loss.scale(y))
    features, thresholds = booster.grow_tree()
    with pytest.raises(ValueError, match=r"X must have shape \(300, 3\)"):
        booster.shard_round(narrow, features, thresholds)
    pool = RecordPool.from_arrays(SCHEMA.clip_encoded(X), booster.loss.scale(y))
    with pytest.raises(ValueError, match="leaf_depth must be in"):
        booster.shard_round(pool, features, thresholds, levels=4)
    sums, _ = booster.shard_round(pool, features, thresholds, levels=2)
    with pytest.raises(ValueError, match="leaf sums of 4 leaves for a round that releases 8"):
        booster.release_round(features, thresholds, sums, levels=3)
    outcome = booster.plan_round(pool)
    wrong = dataclasses.replace(outcome, leaves=outcome.leaves[:4])
    before = pool.margin.copy()
    with pytest.raises(ValueError, match="leaves have shape"):
        booster.apply_round(pool, wrong)
    np.testing.assert_array_equal(pool.margin, before)
    assert booster.ensemble.n_trees == 0


def test_a_depth_zero_ensemble_round_trips_and_keep_last_keeps_what_it_says() -> None:
    """Review B: ``from_dict`` reshaped to ``(-1, 0)``, which a depth-0 ensemble cannot
    give; ``keep_last(0)`` kept every tree (``[-0:]``) and ``keep_last(-1)`` dropped one."""
    booster = SGBDTBooster(SGBDTParams(epsilon=None, rounds=3, depth=0), SCHEMA, seed=1)
    X, y = _data(200)
    pool = RecordPool.from_arrays(SCHEMA.clip_encoded(X), booster.loss.scale(y))
    for _ in range(3):
        booster.apply_round(pool, booster.plan_round(pool))
    ens = booster.ensemble
    again = Ensemble.from_dict(json.loads(json.dumps(ens.to_dict())))
    np.testing.assert_array_equal(again.leaves, ens.leaves)
    assert again.n_trees == 3
    with pytest.raises(ValueError, match="n_trees must be >= 0"):
        ens.keep_last(-1)
    ens.keep_last(1)
    assert ens.n_trees == 1
    ens.keep_last(0)
    assert ens.n_trees == 0


@pytest.mark.parametrize("full_price", [{"individual_filter": False},
                                        {"leaf_noise": "static"}])
def test_records_charged_the_full_price_retire_when_they_cannot_afford_it(full_price):
    """Without individual charges (or with static leaves) every record pays the price of a
    full-sensitivity record, but retirement was judged against the price at the charge floor:
    a record that could no longer afford a round stayed in the pool for good, never
    eligible and never retired (review Q #4)."""
    from renyiboost.models.booster import SGBDTBooster, SGBDTParams

    schema = PublicSchema(features={"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0))
    params = SGBDTParams(task="regression", epsilon=1.0, rounds=20, depth=2,
                         sampling_rate=1.0, **full_price)
    flt = SGBDTBooster(params, schema, seed=0).stages[-1].filter
    full = float(flt.table.grid_charges[-1])
    # a budget with 0.6 of a round's price left: every later round would charge it whole
    spent = np.array([flt.budget_rdp - 0.6 * full, flt.budget_rdp - 1.6 * full])
    step = flt.step(spent, np.ones(2))
    assert step.eligible.tolist() == [False, True]
    assert step.retired.tolist() == [True, True]  # the second has 0.6 of a price left now
