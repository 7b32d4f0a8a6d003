"""Tests that fail when privacy breaks: who is charged, how much noise is released, what the
public release holds, and whether the schedule reads the data.

Each test states the mutation it is there to catch; ``make mutants`` applies those mutations
and checks that the suite fails on every one (``tests/mutants.py``).
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from renyiboost import SGBDTClassifier, SGBDTRegressor
from renyiboost.accounting import calibrate
from renyiboost.accounting.rdp import gaussian_rdp, subsampled_gaussian_rdp_many
from renyiboost.exceptions import InvalidRecord, PrivacyLeakWarning, TestingOnlyWarning
from renyiboost.models.batch import SGBDT
from renyiboost.models.booster import RecordPool, SGBDTBooster, SGBDTParams
from renyiboost.models.defaults import LEAF_SNR, supported_depth
from renyiboost.release import OPTIONAL_RELEASE_FIELDS, ModelRelease
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import EngineConfig, StreamEngine

warnings.simplefilter("ignore", TestingOnlyWarning)

SCHEMA = PublicSchema(features={"a": (0.0, 1.0), "b": (-5.0, 5.0), "c": ["x", "y", "z"]},
                      target_bounds=(0.0, 3.0))


def _rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(0, 1, n), rng.uniform(-5, 5, n), rng.integers(0, 3, n)])
    y = np.clip(2 * X[:, 0] + (X[:, 2] == 1) + rng.normal(0, 0.2, n), 0, 3)
    return X, y


# --------------------------------------------------------------------- who is charged


def test_every_eligible_record_is_charged_for_its_own_gradient_sampled_or_not() -> None:
    """Catches: charging only the Poisson-sampled records; a charge below a record's own
    s² (rounding the table down, a smaller s², a lower floor); charging by a stale margin."""
    params = SGBDTParams(epsilon=1.0, rounds=20, depth=3, sampling_rate=0.1, grad_clip=0.3,
                         count_share=0.3, learning_rate=0.3)
    config = EngineConfig(public_schema=SCHEMA, params=params, train_every=10_000,
                          warmup=1)
    engine = StreamEngine(config, seed=11)
    X, y = _rows(3000, 1)
    engine.add(X, y, [f"k{i}" for i in range(3000)])
    engine.train(0)  # the initial score only: everybody pays its (worst-case) charge
    np.testing.assert_array_equal(engine.pool.spent, engine.booster.calibration.init_charge)
    for _ in range(3):
        before = engine.pool.spent.copy()
        margin, target = engine.pool.margin.copy(), engine.pool.target.copy()
        engine.train(1)
        charged = engine.pool.spent - before
        # each record's s² from its own clipped gradient, by hand (S-GBDT Cor. 22)
        b = np.minimum(np.abs(margin - target), 0.3) / 0.3
        s2 = np.maximum(0.3 + 0.7 * b * b, params.min_sensitivity2)
        cal = engine.booster.calibration
        z = cal.sigma / np.sqrt(2 * s2)
        exact = subsampled_gaussian_rdp_many(0.1, z, cal.order)
        z_up = cal.sigma / np.sqrt(2 * np.minimum(s2 + 1 / 1024, 1.0))
        ceiling = subsampled_gaussian_rdp_many(0.1, z_up, cal.order)
        assert np.all(charged >= exact * (1 - 1e-12))  # nobody pays less than its own RDP
        assert np.all(charged <= ceiling * (1 + 1e-12))  # the table rounds up by one step
        assert engine.booster.rounds_done and len(engine.pool) == 3000


def test_a_record_of_full_sensitivity_affords_exactly_the_nominal_rounds() -> None:
    """Catches: an eligibility test that lets a record overspend (e.g. ``<= 2 * budget``)
    or a budget larger than T full charges plus the initial score."""
    params = SGBDTParams(epsilon=1.0, rounds=7, depth=2, sampling_rate=0.5, grad_clip=0.01)
    booster = SGBDTBooster(params, SCHEMA, seed=3)
    X, y = _rows(500, 2)
    y[:] = 3.0  # far above every margin: every clipped gradient is at the clip, s² = 1
    pool = RecordPool.from_arrays(X, booster.loss.scale(y))
    _, pool.spent = booster.initial_score(pool)
    np.testing.assert_array_equal(pool.spent, booster.calibration.init_charge)
    eligible = []
    for _ in range(12):
        outcome = booster.plan_round(pool)
        eligible.append(outcome.n_eligible)
        booster.apply_round(pool, outcome)
    assert eligible == [500] * 7 + [0] * 5
    assert np.all(pool.spent <= booster.calibration.budget_rdp) and np.all(pool.retired)


def test_newton_leaves_retire_every_key_after_a_bounded_number_of_rounds() -> None:
    """Catches: a zero charge floor (Newton leaves charge well-fitted keys almost nothing,
    so without a floor no key ever retires and memory grows with every key ever seen)."""
    schema = PublicSchema(features={"a": (0.0, 1.0)})
    params = SGBDTParams(task="classification", epsilon=1.0, rounds=4, depth=1,
                         sampling_rate=1.0, hess_clip=0.25, count_share=0.1, grad_clip=0.5)
    booster = SGBDTBooster(params, schema, seed=4)
    assert booster.filter.min_charge > 0
    pool = RecordPool.from_arrays(np.full((50, 1), 0.5), np.ones(50), init_margin=12.0)
    rounds = 0
    while not pool.retired.all():  # p ≈ 1 for label 1: s² ≈ 0 without the floor
        booster.apply_round(pool, booster.plan_round(pool))
        rounds += 1
        assert rounds <= 4 / params.min_sensitivity2 * 1.5
    assert rounds >= 4  # and the floor is not a full charge


# --------------------------------------------------------------------- how much noise


def _noise_booster(hess_clip: float | None) -> tuple[SGBDTBooster, RecordPool]:
    task = "classification" if hess_clip else "regression"
    schema = SCHEMA if task == "regression" else SCHEMA.model_copy(update={"target_bounds": None})
    params = SGBDTParams(task=task, epsilon=0.5, rounds=30, depth=4, sampling_rate=1.0,
                         grad_clip=0.4, count_share=0.3, hess_clip=hess_clip, reg_lambda=5.0)
    booster = SGBDTBooster(params, schema, seed=17)
    X, _ = _rows(4000, 3)
    target = np.zeros(4000) if task == "classification" else np.full(4000, 0.25)
    margin = np.zeros(4000) if task == "classification" else np.full(4000, 0.25)
    pool = RecordPool.from_arrays(X, target)
    pool.margin = margin
    return booster, pool


@pytest.mark.parametrize("hess_clip", [None, 0.25], ids=["count-leaves", "newton-leaves"])
def test_the_released_leaf_noise_has_the_calibrated_std(hess_clip) -> None:
    """The two Gaussian releases of every leaf, measured through the real round path on a
    fixed pool (sampling rate 1, known sums): their noise std is the calibrated
    ``Δ·σ/√(2 r)`` within 6 % (7,680 draws each: the std's standard error is 0.8 %).

    Catches: smaller gradient-sum or count noise, a wrong share split, a σ that is not the
    calibrated one; and the leaf values must be the stated post-processing of the two."""
    booster, pool = _noise_booster(hess_clip)
    params = booster.params
    stats = booster.loss.statistics(pool.margin, pool.target)
    sum_noise, count_noise = [], []
    for _ in range(480):
        outcome = booster.plan_round(pool)
        leaf = outcome.leaf_of_record
        true_sum = np.bincount(leaf, stats.grad, 16)
        true_count = np.bincount(leaf, stats.denominator, 16)
        sum_noise.append(outcome.noisy_grad_sum - true_sum)
        count_noise.append(outcome.noisy_count - true_count)
        den = outcome.noisy_count
        expected = np.where(den > 0, -params.learning_rate * outcome.noisy_grad_sum
                            / np.where(den > 0, den + params.reg_lambda, 1.0), 0.0)
        np.testing.assert_allclose(outcome.leaves, expected, rtol=1e-12, atol=1e-15)
    cal = calibrate(0.5, 1e-6, 30, 1.0, count_share=0.3, init_share=params.init_share)
    count_sensitivity = 1.0 if hess_clip is None else hess_clip
    want_sum = 0.4 * cal.sigma / math.sqrt(2 * 0.7)
    want_count = count_sensitivity * cal.sigma / math.sqrt(2 * 0.3)
    assert np.std(sum_noise) == pytest.approx(want_sum, rel=0.06)
    assert np.std(count_noise) == pytest.approx(want_count, rel=0.06)
    assert abs(np.mean(sum_noise)) < 0.1 * want_sum  # centred


def test_the_initial_score_is_noisy_at_the_calibrated_std() -> None:
    """Catches: an initial score released without its noise (the mean of the labels)."""
    params = SGBDTParams(epsilon=0.5, rounds=30, init_share=0.1, count_share=0.3)
    booster = SGBDTBooster(params, SCHEMA, seed=21)
    X, y = _rows(2000, 5)
    pool = RecordPool.from_arrays(X, booster.loss.scale(y))
    scores = np.array([booster.initial_score(pool)[0] for _ in range(400)])
    cal = booster.calibration
    # score ≈ (Σy + n_s)/(n + n_c): std ≈ √(σ_s² + m²σ_c²)/n around the mean m
    m = float(pool.target.mean())
    sigma_s = cal.init_sigma / math.sqrt(2 * 0.7)
    sigma_c = cal.init_sigma / math.sqrt(2 * 0.3)
    want = math.sqrt(sigma_s**2 + (m * sigma_c) ** 2) / 2000
    assert np.std(scores) == pytest.approx(want, rel=0.15)


def test_a_streams_initial_score_over_its_public_positions_carries_the_whole_noise() -> None:
    """Catches: a stream's initial score (denominator: its public positions) released with
    less noise than the charge it costs — σ/√2 on the sum, the noise multiplier of the
    worst-case init charge — or without any."""
    params = SGBDTParams(epsilon=0.5, rounds=30, init_share=0.1, count_share=0.3)
    booster = SGBDTBooster(params, SCHEMA, seed=22)
    X, y = _rows(500, 6)
    pool = RecordPool.from_arrays(X, booster.loss.scale(y))
    positions = 650  # 150 positions held no record of the pool (dead letters, repeats)
    sums = np.array([booster.initial_score(pool, public_count=positions)[0] * positions
                     for _ in range(600)])
    cal = booster.calibration
    want = cal.init_sigma / math.sqrt(2)
    assert cal.init_charge == pytest.approx(
        float(gaussian_rdp(want, cal.order)[0]), rel=1e-12)  # what that noise costs a record
    assert np.std(sums) == pytest.approx(want, rel=0.08)
    assert np.mean(sums) == pytest.approx(pool.target.sum(), abs=0.15 * want)
    with pytest.raises(ValueError, match="below the pool"):
        booster.initial_score(pool, public_count=499)


# --------------------------------------------------------------------- neighbouring streams


def _events(n: int, seed: int, keys: int) -> list[tuple[dict, float, str]]:
    X, y = _rows(n, seed)
    rng = np.random.default_rng(seed + 1)
    names = ["x", "y", "z"]
    return [({"a": float(r[0]), "b": float(r[1]), "c": names[int(r[2])]}, float(t),
             f"user-{rng.integers(keys)}") for r, t in zip(X, y, strict=True)]


def _run(events: list[tuple[dict | None, float, str]], **config) -> tuple[list, list]:
    """Feed a stream to a regressor; returns the schedule (position of every release) and
    the releases (one per version, as published to a model topic)."""
    params = {"features": SCHEMA.features, "target_bounds": (0.0, 3.0), "epsilon": 1.0,
              "rounds": 3, "depth": 2, "sampling_rate": 0.5, "learning_rate": 0.5,
              "train_every": 40, "warmup": 90, "trees_per_trigger": 2, "seed": 5} | config
    model = SGBDTRegressor(**params)
    engine = model.engine
    schedule: list[tuple[int, str]] = []
    engine.listeners.append(lambda event: schedule.append((engine.positions,
                                                           type(event).__name__)))
    for x, y, key in events:
        try:
            model.learn_one(x, y, key=key)
        except InvalidRecord:
            pass
    published = [engine.release("m", after=v - 1, upto=v) for v in
                 range(1, engine.release_version + 1)]
    return schedule, published


def _public_shape(release: ModelRelease) -> dict:
    """Everything of a release except the DP values and the store's random identity."""
    data = json.loads(release.model_dump_json())
    data.pop("store_id")
    data["trees"] = [(t["round"], len(t["features"]), len(t["leaves"])) for t in data["trees"]]
    data.pop("init_score")
    return data


def _neighbour(events, victim: str, how: str):
    """The stream with all of ``victim``'s events replaced at the same positions: by an
    invalid event (``empty``), or by the same event without a usable value."""
    out = []
    for x, y, key in events:
        if key != victim:
            out.append((x, y, key))
        elif how == "invalid-label":
            out.append((x, 99.0, key))
        else:
            out.append(({"zzz": 1.0}, y, key))  # an unknown feature: refused, still a position
    return out


@settings(max_examples=20, deadline=None)
@example(seed=0, victim=3, how="invalid-features", rounds=2)
@given(seed=st.integers(0, 10_000), victim=st.integers(0, 29),
       how=st.sampled_from(["invalid-label", "invalid-features"]),
       rounds=st.integers(1, 4))
def test_neighbouring_streams_release_at_the_same_positions_in_the_same_shape(
    seed: int, victim: int, how: str, rounds: int
) -> None:
    """Two streams that differ in one key's events (replaced by empty events at the same
    positions): the same outputs at the same positions, and the same messages field for
    field except the DP values. With few rounds keys retire, so eligibility differs too.

    Catches: a round skipped when nobody is eligible, a warm-up counting distinct keys or
    valid records, a trigger counting records instead of positions, and any count (pool
    size, retirements, spent budgets) put into a public release."""
    events = _events(400, seed, keys=30)
    ours = _run(events, rounds=rounds)
    theirs = _run(_neighbour(events, f"user-{victim}", how), rounds=rounds)
    assert ours[0] == theirs[0]  # the schedule
    assert len(ours[1]) == len(theirs[1]) > 2
    for mine, other in zip(ours[1], theirs[1], strict=True):
        assert _public_shape(mine) == _public_shape(other)


def test_the_schedule_ignores_retirement_and_eligibility() -> None:
    """A stream where every key retires early (T = 1, γ = 1) still releases a tree at every
    trigger (noise-only leaves): the number of trees is a function of positions alone."""
    events = _events(600, 9, keys=5)
    schedule, _ = _run(events, rounds=1, sampling_rate=1.0)
    positions = [p for p, kind in schedule if kind == "RoundEvent"]
    assert positions == sorted(list(range(120, 601, 40)) * 2)
    assert [p for p, kind in schedule if kind == "InitEvent"] == [120]


def test_leaf_depth_and_the_end_burst_follow_positions_not_the_pool() -> None:
    """Each released tree has as many leaf groups as its positions support
    (models.defaults.supported_depth): leaves within a group share a value, and some pair
    of sibling groups differs (the values are noisy, rounded to a fine grid, so two groups
    may rarely coincide, but not every pair of siblings). The end burst of a size hint
    fires at that position. 30 keys upsert over 600 positions, so a rule reading the pool
    (≤ 30 records) instead of the positions would give shallower trees, whose sibling
    groups at the expected depth are all equal; leaf clipping is off."""
    events = _events(600, 4, keys=30)
    schedule, published = _run(events, rounds=4, depth=4, leaf_clip=None,
                               expected_records=500)
    model = SGBDTRegressor(features=SCHEMA.features, target_bounds=(0.0, 3.0), epsilon=1.0,
                           rounds=4, depth=4, sampling_rate=0.5, train_every=40, warmup=90,
                           trees_per_trigger=2, leaf_clip=None, expected_records=500)
    release, params = model.engine.booster.release, model.engine.config.params
    for (position, kind), message in zip(schedule, published, strict=True):
        if kind != "RoundEvent":
            continue
        expected = supported_depth(position, params.sampling_rate, release.count_noise_std(1.0),
                                   1.0, params.depth, LEAF_SNR["regression"])
        groups = np.array(message.trees[0].leaves).reshape(2**expected, -1)
        assert (groups == groups[:, :1]).all(), position  # one value a group
        if expected > 0:
            siblings = groups[:, 0].reshape(-1, 2)
            assert (siblings[:, 0] != siblings[:, 1]).any(), position  # not shallower
    burst = [p for p, kind in schedule if kind == "RoundEvent" and p == 500]
    assert len(burst) == params.rounds // 2  # 500 is no regular trigger (90 + 40 k)


def test_a_batch_fit_releases_the_same_number_of_trees_with_or_without_a_row() -> None:
    """Catches: a batch fit that stops when the filter admits nobody (20 vs 50 trees in
    the issue's reproduction)."""
    X, y = _rows(300, 6)
    fits = [SGBDT(SCHEMA, seed=1, epsilon=1.0, rounds=5, max_rounds=40, depth=2,
                  sampling_rate=1.0, grad_clip=0.3).fit(Xs, ys)
            for Xs, ys in ((X, y), (X[1:], y[1:]))]
    assert [f.ensemble.n_trees for f in fits] == [40, 40]
    assert fits[0].operator_history_[-1]["eligible"] == 0  # everyone retired long before


def test_public_exports_hold_only_the_release() -> None:
    """Catches: a count or a spent budget in an export (``to_json``, ``release``)."""
    X, y = _rows(500, 7)
    model = SGBDT(SCHEMA, seed=2, epsilon=1.0, rounds=5, depth=2).fit(X, y)
    exported = json.loads(model.to_json())
    # with the split grid's spans; a batch fit has no answer map
    assert set(exported) == set(ModelRelease.model_fields) - {"answer_map", "part"}
    text = model.to_json()
    for telemetry in ("n_active", "n_retired", "spent", "eligible", "sampled", "max_spent"):
        assert telemetry not in text
    stream = SGBDTRegressor(SCHEMA.features, target_bounds=(0.0, 3.0), rounds=3,
                            train_every=50, warmup=50, seed=1)
    for x, yv, key in _events(200, 1, keys=40):
        stream.learn_one(x, yv, key=key)
    assert set(json.loads(stream.release().model_dump_json())) == (
        set(ModelRelease.model_fields) - OPTIONAL_RELEASE_FIELDS)  # a stream has no grid
    assert "spent" not in stream.release().model_dump_json()


def test_a_copy_of_a_fitted_model_leaves_out_the_last_rounds_poisson_draws() -> None:
    """Catches: a pickle or copy of a fitted model that carries the last round's Poisson
    uniforms, which tell exactly which rows that round sampled (the amplification by
    subsampling assumes nobody knows)."""
    import copy
    import pickle

    X, y = _rows(800, 8)
    model = SGBDT(SCHEMA, epsilon=1.0, rounds=5, depth=2).fit(X, y)  # CSPRNG, compiled
    assert model.booster._uniforms.size >= 1  # the buffer the last round drew into
    for other in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert other.booster._uniforms.size == 0
        np.testing.assert_array_equal(other.predict(X[:50]), model.predict(X[:50]))


def test_records_without_keys_warn_once_that_one_record_is_the_unit() -> None:
    model = SGBDTClassifier({"a": (0.0, 1.0)}, epsilon=1.0, rounds=3, train_every=10,
                            warmup=10)
    with pytest.warns(PrivacyLeakWarning, match="one record, not one person"):
        model.learn_one({"a": 0.3}, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        model.learn_one({"a": 0.4}, False)  # once is enough
        model.learn_one({"a": 0.4}, False, key="k")


def test_a_fit_refused_for_its_settings_charges_no_budget() -> None:
    """A split grid on a schema with no numeric feature, Newton leaves or proper gradients
    on a multiclass schema: the fit charged its ε to the shared budget, then failed while
    building the booster (review G2 #2). These checks read public inputs only and now come
    before the charge."""
    import warnings

    from renyiboost.accounting.budget import PrivacyAccountant
    from renyiboost.models.batch import SGBDT

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    categorical = PublicSchema(features={"c": ["p", "q"]}, target_bounds=(0.0, 1.0))
    three = PublicSchema(features={"a": (0.0, 1.0)}, labels=["x", "y", "z"])
    X = rng.uniform(size=(200, 1))
    cases = [(SGBDT(categorical, task="regression", epsilon=0.5, grid_share=0.05, depth=2,
                    rounds=5), np.zeros((200, 1)), rng.uniform(size=200), "grid_share"),
             (SGBDT(three, task="classification", epsilon=0.5, hess_clip=0.1, depth=2,
                    rounds=5), X, rng.choice(["x", "y", "z"], 200), "hess_clip"),
             (SGBDT(three, task="classification", epsilon=0.5, logistic_gradient="proper",
                    depth=2, rounds=5), X, rng.choice(["x", "y", "z"], 200), "proper")]
    for model, rows, labels, message in cases:
        accountant = PrivacyAccountant(1.0, 1e-5)
        model.draw_from(accountant)
        with pytest.raises(ValueError, match=message):
            model.fit(rows, labels)
        assert accountant.remaining_epsilon == 1.0, message


def test_a_fit_whose_epsilon_no_calibration_reaches_charges_nothing_without_a_hint() -> None:
    """Without a size hint the fit bought its size, charging the shared budget, and only then
    found that ε = 1e-4 calibrates at no order (review W #5); with a hint it was refused
    first. Both are refused before any charge now."""
    import warnings

    from renyiboost.accounting.budget import PrivacyAccountant
    from renyiboost.models.batch import SGBDT

    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    schema = PublicSchema(features={"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0))
    for hint in (None, 300):
        accountant = PrivacyAccountant(1.0, 1e-5)
        model = SGBDT(schema, task="regression", epsilon=1e-4, expected_records=hint)
        model.draw_from(accountant)
        with pytest.raises(ValueError, match="no noise scale reaches"):
            model.fit(rng.uniform(size=(300, 1)), rng.uniform(size=300))
        assert accountant.charges == [] and model.size_estimate_ is None
