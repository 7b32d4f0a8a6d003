"""The default policy (issue 12): parameters from public inputs only, the growing stream
schedule, leaves as deep as the positions support, and the batch fit's DP size estimate."""

from __future__ import annotations

import itertools
import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from renyiboost import SGBDTClassifier, SGBDTRegressor
from renyiboost.accounting import SizeEstimate, calibrate
from renyiboost.exceptions import TestingOnlyWarning
from renyiboost.models.batch import SGBDT
from renyiboost.models.booster import RecordPool, SGBDTBooster, SGBDTParams
from renyiboost.models.defaults import (
    POLICY_FIELDS,
    PRIOR_RECORDS,
    STREAM_WARMUP,
    default_depth,
    default_params,
    default_rounds,
    stream_rounds,
    supported_depth,
)
from renyiboost.randomness import SeededNoise
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import (
    EngineConfig,
    StreamEngine,
    rounds_due_by,
    trigger_schedule,
)
from renyiboost.stream.schedule import TriggerSchedule

SCHEMA = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)}, target_bounds=(0.0, 1.0))


# --------------------------------------------------------------------------- the policy
def test_the_policy_gives_its_documented_values() -> None:
    """Exact values of the rule in the module docstring (a change of the policy must show
    here and in README's table)."""
    assert [default_depth(m) for m in (2, 70, 1_500, 15_000, 1e9)] == [1, 1, 3, 5, 6]
    assert [default_rounds(m, 1000) for m in (10, 1_500, 14_000, 1e9)] == [20, 77, 237, 1000]
    adult = default_params("classification", 0.5, 30_000)
    assert adult == {
        "learning_rate": 0.3, "leaf_clip": 0.4, "grad_clip": 0.3, "negative_count": "clamp",
        "depth": 5, "rounds": 200, "hess_clip": 0.1, "reg_lambda": 5.0, "count_share": 0.04,
        "sampling_rate": 1.0, "init_share": 0.0, "split_candidates": 32,
        "feature_selection": "mains_then_pairs", "smoothing": 1 / 32,
        "logistic_gradient": "clipped", "reg_lambda_noise_stds": 0.8, "mains_cycles": 20,
        "grid_share": 0.05,
    }
    # the split grid: batch fits and hinted streams over numeric features only
    assert default_params("classification", 0.5, 30_000, unhinted_stream=True)[
        "grid_share"] == 0.0
    assert default_params("regression", 0.5, 3_000, n_numeric=0)["grid_share"] == 0.0
    assert default_params("classification", 1.0, 30_000)["logistic_gradient"] == "proper"
    assert [default_params("classification", 1.0, n)["feature_selection"]
            for n in (999, 1_000)] == ["cyclic", "mains_then_pairs"]
    assert default_params("classification", 4.0, 10_000, n_classes=7)[
        "feature_selection"] == "random"
    assert default_params("classification", 4.0, 10_000, n_classes=7)[
        "logistic_gradient"] == "clipped"  # multiclass gradients are clipped in L2 norm
    assert default_params("classification", 4.0, 10_000, n_classes=7)[
        "reg_lambda_noise_stds"] == 0.8  # count leaves: λ follows the count's noise
    abalone = default_params("regression", 0.5, 2_900)
    assert (abalone["depth"], abalone["rounds"], abalone["sampling_rate"]) == (3, 76, 0.2)
    assert "hess_clip" not in abalone and abalone["learning_rate"] == 0.2
    assert "reg_lambda_noise_stds" not in abalone  # regression keeps its fixed λ = 100
    assert "mains_cycles" not in abalone  # and its random trees
    assert default_params("classification", 1.0, 2_000, n_classes=7)["learning_rate"] == 0.4
    # every size-dependent field, the smoothing, λ's noise multiple, the mains' cycles and
    # the grid's share, which do not depend on the size, and the logistic gradient, which a
    # configuration that gives all the others leaves clipped
    assert set(adult) | set(abalone) == POLICY_FIELDS | {
        "smoothing", "logistic_gradient", "reg_lambda_noise_stds", "mains_cycles",
        "grid_share"}
    # without privacy the effective size is unbounded: the largest rule values
    assert default_params("regression", None, 10)["rounds"] == 1000
    with pytest.raises(ValueError, match="task"):
        default_params("ranking", 1.0, 100)


@pytest.mark.parametrize("epsilon", [None, 4.0])
def test_proper_gradients_settle_at_the_base_rate_where_clipped_ones_do_not(epsilon) -> None:
    """An imbalanced label whose classes overlap everywhere (P(y = 1 | a) = 0.1 + 0.3 a,
    rate 0.25): clipped gradients settle every leaf below its rate (the clip's link, at
    p = 0.3 q / (1 − q) for q < 0.5), so the mean prediction is far below the base rate even
    without noise (at the link's own value); proper gradients put it on the rate. Seeded;
    40,000 rows, so the rate's sampling error (0.002) and, at ε = 4, the noise leave the
    0.015 and 0.01 tolerances wide."""
    rng = np.random.default_rng(11)
    X = rng.uniform(size=(40_000, 2))
    y = (rng.uniform(size=40_000) < 0.1 + 0.3 * X[:, 0]).astype(float)
    means = {}
    for gradient in ("clipped", "proper"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TestingOnlyWarning)
            model = SGBDT(PublicSchema(features=SCHEMA.features), task="classification",
                          epsilon=epsilon, seed=4, expected_records=40_000,
                          logistic_gradient=gradient).fit(X, y)
        means[gradient] = float(model.predict_proba(X)[:, 1].mean())
    assert abs(means["proper"] - y.mean()) < 0.015
    # the clip's link at q = 0.1 + 0.3 a: the mean over a of 0.3 q / (1 − q) is
    # 0.3 (ln(0.9 / 0.6) / 0.3 − 1) = 0.1055 (measured 0.105 and 0.104)
    assert abs(means["clipped"] - 0.3 * (math.log(0.9 / 0.6) / 0.3 - 1)) < 0.01


def test_the_policy_reads_only_public_inputs() -> None:
    """Same task, ε and size → same parameters, whatever the rows hold: the estimators
    never look at the data to set a default (two different data sets, equal configs)."""
    features = {"a": (0.0, 1.0), "b": (0.0, 1.0)}
    one = SGBDTClassifier(features, epsilon=1.0, seed=1)
    two = SGBDTClassifier(features, epsilon=1.0, seed=2)
    for model, rate in ((one, 0.1), (two, 0.9)):
        rng = np.random.default_rng(0)
        for i in range(300):
            model.learn_one({"a": rng.random(), "b": rng.random()}, bool(rng.random() < rate),
                            key=i)
    assert one.engine.config.model_dump_json() == two.engine.config.model_dump_json()


def test_estimators_take_the_policy_and_explicit_values_win() -> None:
    model = SGBDTRegressor({"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0), epsilon=1.0)
    config = model.engine.config
    policy = default_params("regression", 1.0, PRIOR_RECORDS)
    schedule = TriggerSchedule(config.train_every, config.warmup, config.trigger_growth,
                               config.max_train_every)
    assert config.params.depth == policy["depth"]
    assert config.params.reg_lambda == policy["reg_lambda"]
    assert config.params.rounds == stream_rounds(PRIOR_RECORDS, schedule, 1)
    assert config.max_train_every == (PRIOR_RECORDS - STREAM_WARMUP) // policy["rounds"]
    assert (config.trigger_growth, config.leaf_depth) == (0.05, "from_positions")
    mine = SGBDTRegressor({"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0), epsilon=1.0,
                          depth=2, rounds=7, train_every=30)
    assert (mine.engine.config.params.depth, mine.engine.config.params.rounds) == (2, 7)
    # an explicit interval is a fixed one
    assert (mine.engine.config.train_every, mine.engine.config.trigger_growth) == (30, 0.0)
    hinted = SGBDTClassifier({"a": (0.0, 1.0)}, epsilon=1.0, expected_records=500)
    assert hinted.engine.config.params.depth == default_depth(500)
    with pytest.raises(ValueError, match="expected_records"):
        SGBDTClassifier({"a": (0.0, 1.0)}, expected_records=0)


def test_the_service_config_takes_the_policy_too() -> None:
    from renyiboost.connectors.service import ModelConfig, engine_config

    table = ModelConfig(task="classification", features={"a": [0, 1]}, expected_records=2_000,
                        depth=3)
    config = engine_config(table)
    assert config.params.depth == 3
    assert config.params.hess_clip == default_params("classification", 1.0, 2_000)["hess_clip"]
    with pytest.raises(ValueError, match="bogus"):
        ModelConfig(features={"a": [0, 1]}, bogus=1)


# --------------------------------------------------------------------------- the schedule
@settings(max_examples=120, deadline=None)
@given(every=st.integers(1, 20), warmup=st.integers(1, 200),
       growth=st.sampled_from([0.0, 0.05, 0.3]), cap=st.integers(1, 80),
       positions=st.lists(st.integers(0, 3_000), min_size=1, max_size=4),
       beyond=st.one_of(st.none(), st.tuples(st.integers(1, 2_000), st.integers(1, 400))))
def test_next_trigger_agrees_with_walking_the_recurrence(every, warmup, growth, cap, positions,
                                                         beyond):
    """The schedule's positions are the recurrence's, walked trigger by trigger; from
    ``end`` on (``beyond``: the end and its cap) with the cap beyond the end. One schedule
    is asked about several positions in any order: its walk resumes from the furthest
    trigger it reached (review Y #5)."""
    end, cap_beyond = beyond or (None, None)
    schedule = TriggerSchedule(every, warmup, growth, cap, end=end,
                               max_every_beyond_end=cap_beyond)
    triggers, t = [], every
    while t < schedule.first:
        triggers.append(t)
        t += every
    t = schedule.first
    while t <= max(positions) + 10 * max(cap, every, cap_beyond or 0):
        triggers.append(t)
        most = (max(every, cap_beyond) if end is not None and t >= end
                else schedule.max_train_every)
        t += min(most, max(every, math.ceil(growth * t) if growth else 0))
    for position in positions:
        expected = next(x for x in triggers if x > position)
        assert schedule.next_after(position) == expected
        assert schedule.releases_until(position) == sum(schedule.first <= x <= position
                                                        for x in triggers)


def test_a_schedule_refuses_growths_it_cannot_walk_and_never_overflows() -> None:
    """A growth past 10 overflowed ``ceil(growth · t)`` (an ``OverflowError`` at
    construction, or at every trigger after a jump of positions), and one below 0.001 made
    a single call walk 10⁷ triggers (review Y #4, #5): both are refused everywhere, and the
    largest growth reaches huge positions."""
    from renyiboost.stream.schedule import MAX_TRIGGER_GROWTH, MIN_TRIGGER_GROWTH

    for growth in (1e-4, MIN_TRIGGER_GROWTH / 2, MAX_TRIGGER_GROWTH * 1.5, 1e308):
        with pytest.raises(ValueError, match=r"trigger_growth must be 0 .* or in \[0.001, 10\]"):
            TriggerSchedule(10, 100, growth, 1000)
        with pytest.raises(ValueError, match="trigger_growth"):
            SGBDTRegressor(features={"a": (0, 1)}, target_bounds=(0, 1), trigger_growth=growth)
        config = EngineConfig.from_defaults(PublicSchema(features={"a": (0.0, 1.0)},
                                                         target_bounds=(0, 1)),
                                            "regression", 1.0, 1e-6, 500)
        with pytest.raises(ValidationError, match="trigger_growth"):
            EngineConfig(**config.model_dump() | {"trigger_growth": growth})
    widest = TriggerSchedule(10, 100, MAX_TRIGGER_GROWTH, 10**9)
    assert widest.next_after(10**18) == widest.regular_after(10**18) > 10**18
    slowest = TriggerSchedule(1, 1, MIN_TRIGGER_GROWTH, 1000)
    assert slowest.releases_until(10**7) > slowest.releases_until(10**6) > 0


def test_a_growing_schedule_releases_trees_at_its_positions_only() -> None:
    """The engine fires triggers exactly at the schedule's positions, chunked adds and
    single adds alike (the schedule is public: positions only)."""
    config = EngineConfig(public_schema=SCHEMA, params=SGBDTParams(epsilon=1.0, rounds=5),
                          train_every=5, warmup=20, trigger_growth=0.25, max_train_every=40)
    schedule = TriggerSchedule(5, 20, 0.25, 40)
    expected = [t for t in range(1, 401) if t >= 20 and schedule.next_after(t - 1) == t]
    rng = np.random.default_rng(3)
    one = StreamEngine(config, seed=1)
    seen = []
    for position in range(1, 401):
        before = one.release_version
        one.add_one(rng.random(2), rng.random(), key=str(position))
        if one.release_version > before:
            seen.append(position)
    assert seen == expected
    many = StreamEngine(config, seed=1)
    rows, labels = rng.random((400, 2)), rng.random(400)
    for start in range(0, 400, 37):
        many.add(rows[start:start + 37], labels[start:start + 37],
                 [f"k{i}" for i in range(start, min(start + 37, 400))])
    # the initial score and one tree at the first trigger, one tree at each later one
    assert many.release_version == one.release_version == len(expected) + 1
    assert many.ensemble.n_trees == len(expected)


# --------------------------------------------------------------------------- leaf depth
def test_supported_depth_follows_the_leaf_signal_to_noise() -> None:
    assert supported_depth(100, 1.0, 30.0, 0.1, 6) == 0  # 100 · 0.1 / 30 < 2
    assert supported_depth(600, 1.0, 30.0, 0.1, 6) == 1  # 2 ≤ 2 < 4
    assert supported_depth(10**9, 1.0, 30.0, 0.1, 6) == 6
    assert supported_depth(6_000, 1.0, 30.0, 0.1, 6, snr=0.25) == 7 - 1  # capped at 6
    assert supported_depth(50, 1.0, 0.0, 1.0, 4) == 4  # no noise: any depth


def test_merged_leaves_release_one_noisy_value_per_group() -> None:
    """leaf_depth 1 of a depth-3 tree: the 8 leaves carry 2 values, each the DP leaf of the
    records below that level-1 node, with the noise of one leaf (not of four)."""
    params = SGBDTParams(task="regression", epsilon=1.0, depth=3, rounds=10,
                         sampling_rate=1.0, learning_rate=1.0, reg_lambda=0.0, grad_clip=1.0)
    booster = SGBDTBooster(params, SCHEMA, seed=4)
    rng = np.random.default_rng(0)
    X = rng.random((4_000, 2))
    pool = RecordPool.from_arrays(X, booster.loss.scale(rng.random(4_000)))
    sums, counts = [], []
    for _ in range(200):
        outcome = booster.plan_round(pool, leaf_depth=1)
        assert outcome.leaves.shape == (8,)
        np.testing.assert_array_equal(outcome.leaves[:4], outcome.leaves[0])
        np.testing.assert_array_equal(outcome.leaves[4:], outcome.leaves[4])
        group = outcome.leaf_of_record >> 2
        stats = booster.loss.statistics(pool.margin, pool.target)
        true_sum = np.bincount(group, stats.grad, 2)
        sums.append(outcome.noisy_grad_sum - true_sum)
        counts.append(outcome.noisy_count - np.bincount(group, minlength=2))
    release = booster.release
    # the noise std of one leaf (σ·g*/√(2 r2), σ/√(2 r1)); 400 draws: ±15 % at ~4 sd
    assert np.std(sums) == pytest.approx(release.sum_noise_std(1.0), rel=0.15)
    assert np.std(counts) == pytest.approx(release.count_noise_std(1.0), rel=0.15)
    with pytest.raises(ValueError, match="leaf_depth"):
        booster.plan_round(pool, leaf_depth=4)


def test_a_stream_grows_its_leaves_with_its_positions() -> None:
    """Early trees of a from_positions stream have fewer distinct leaf values than late
    ones, at the depths supported_depth gives for the positions (public)."""
    config = EngineConfig.from_defaults(SCHEMA, "regression", 1.0, train_every=50)
    engine = StreamEngine(config, seed=2)
    rng = np.random.default_rng(1)
    X = rng.random((20_000, 2))
    y = (X[:, 0] > 0.5).astype(float)
    engine.add(X, y, [str(i) for i in range(20_000)])
    leaves = engine.ensemble.leaves
    distinct = [len(np.unique(row)) for row in leaves]
    assert distinct[0] < distinct[-1] == 2**config.params.depth
    release = engine.booster.release
    first = supported_depth(100, config.params.sampling_rate, release.count_noise_std(1.0),
                            1.0, config.params.depth)
    assert distinct[0] <= 2**first


# --------------------------------------------------------------------------- size estimate
def test_a_batch_fit_buys_its_size_and_reports_the_total_epsilon() -> None:
    rng = np.random.default_rng(0)
    X, y = rng.random((3_000, 2)), rng.random(3_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TestingOnlyWarning)
        model = SGBDT(SCHEMA, seed=3, epsilon=1.0).fit(X, y)
    guarantee = model.privacy_guarantee()
    split = SizeEstimate.split(1.0)
    assert guarantee.size_estimate_epsilon == pytest.approx(split.epsilon)
    assert model.params.epsilon == pytest.approx(split.rest_epsilon)
    # the trees were calibrated to the rest, and the reported total is ε (not 0.95 ε)
    assert calibrate(split.rest_epsilon, 1e-6, model.params.rounds,
                     model.params.sampling_rate, model.params.count_share,
                     model.params.init_share, grid_share=model.params.grid_share
                     ).sigma == pytest.approx(guarantee.sigma)
    assert guarantee.epsilon == pytest.approx(1.0, rel=1e-6)
    assert guarantee.epsilon <= 1.0 + 1e-9
    assert model.params.depth == default_depth(model.size_estimate_ * split.rest_epsilon)
    # a public hint, or every policy field given: no count is bought
    hinted = SGBDT(SCHEMA, seed=3, epsilon=1.0, expected_records=3_000).fit(X, y)
    assert hinted.privacy_guarantee().size_estimate_epsilon is None
    assert hinted.params.epsilon == 1.0
    explicit = SGBDT(SCHEMA, seed=3, **(default_params("regression", 1.0, 3_000)
                                        | {"epsilon": 1.0, "hess_clip": None})).fit(X, y)
    assert explicit.size_estimate_ is None
    # depth and rounds given, the rest left to the policy: its other fields are constants,
    # and 5 % of ε bought a count that changed nothing (review R); the classifier's size
    # also chooses its feature selection and gradient
    sized = SGBDT(SCHEMA, seed=3, epsilon=1.0, depth=4, rounds=60).fit(X, y)
    assert sized.size_estimate_ is None and sized.params.epsilon == 1.0
    assert sized.params.leaf_clip == default_params("regression", 1.0, 3_000)["leaf_clip"]
    labels = (X[:, 0] > 0.5).astype(int)
    classes = PublicSchema(features=SCHEMA.features, labels=[0, 1])
    assert SGBDT(classes, seed=3, epsilon=1.0, depth=4, rounds=60).fit(
        X, labels).size_estimate_ is not None
    assert SGBDT(classes, seed=3, epsilon=1.0, depth=4, rounds=60, feature_selection="cyclic",
                 logistic_gradient="clipped").fit(X, labels).size_estimate_ is None


def test_a_batch_fit_adds_laplace_noise_to_the_row_count() -> None:
    """The count a fit releases is n + Laplace(1/ε_size) (30 tiny fits: std √2/ε_size =
    28.3 at ε = 1, within ±45 %); an exact count would leak the data set's size."""
    rng = np.random.default_rng(1)
    X, y = rng.random((40, 2)), rng.random(40)
    errors = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TestingOnlyWarning)
        for seed in range(30):
            model = SGBDT(SCHEMA, seed=seed, epsilon=1.0, rounds=1).fit(X, y)  # its depth
            errors.append(model.size_estimate_ - 40)  # from the policy: a count is bought
    expected = math.sqrt(2) / SizeEstimate.split(1.0).epsilon
    assert 0.55 * expected < np.std(errors) < 1.45 * expected


def test_the_size_estimate_has_the_laplace_noise_it_is_accounted_for() -> None:
    """The released count's noise is Laplace with scale 1/ε_size: std √2/ε_size (2,000
    draws, ±8 %); a smaller noise would under-state ε."""
    split = SizeEstimate.split(1.0)
    draws = SeededNoise(7).laplace(2_000, split.laplace_scale)
    assert np.std(draws) == pytest.approx(math.sqrt(2) / split.epsilon, rel=0.08)
    assert abs(np.median(draws)) < 0.15 * split.laplace_scale * 3
    with pytest.raises(ValueError, match="share"):
        SizeEstimate.split(1.0, share=1.0)


# --------------------------------------------------------------------------- private tuning
@pytest.mark.parametrize(("run_rdp", "order", "mean_runs"),
                         [(0.08, 22, 9.0), (0.5, 7, 3.0), (1e-3, 200, 30.0), (0.2, 40, 1.5)])
def test_selection_rdp_matches_dp_accounting(run_rdp, order, mean_runs) -> None:
    """Papernot & Steinke's Thm. 2 with geometric runs at one order, against Google's
    implementation (shape 1 = geometric)."""
    from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_repeat_and_select

    from renyiboost.accounting.selection import selection_rdp

    reference = _compute_rdp_repeat_and_select([order], [run_rdp], mean_runs, 1)[0]
    assert selection_rdp(run_rdp, order, mean_runs) == pytest.approx(reference, rel=1e-12)


def test_a_selection_of_one_run_costs_one_run() -> None:
    """μ = 1 means K = 1 always: the output is one run's, B at α̂ (the theorem's bound,
    (3 − 2/α̂)·B, charged it about three times over). Just above 1 the theorem holds again."""
    from renyiboost.accounting.selection import SelectionBudget, selection_rdp

    assert selection_rdp(0.2, 40, 1.0) == 0.2
    assert selection_rdp(0.2, 40, 1.0 + 1e-9) > 0.58
    one = SelectionBudget.split(1.0, 1e-6, 22, 1.0)
    assert one.run_rdp == pytest.approx(one.total_rdp)
    assert one.run_epsilon == pytest.approx(1.0, rel=1e-9) and one.epsilon <= 1.0 + 1e-9


def test_the_selection_budget_spends_exactly_the_target() -> None:
    from renyiboost.accounting import dp_epsilon_at_orders
    from renyiboost.accounting.selection import SelectionBudget, selection_rdp

    budget = SelectionBudget.split(1.0, 1e-6, 22, 9.0)
    total = selection_rdp(budget.run_rdp, 22, 9.0)
    assert budget.total_rdp == pytest.approx(total)
    assert float(dp_epsilon_at_orders(22, total, 1e-6)[0]) <= 1.0 + 1e-12
    assert budget.epsilon == pytest.approx(1.0, abs=1e-9)
    # the per-run budget is what the run converts to alone, and far below the total
    assert float(dp_epsilon_at_orders(22, budget.run_rdp, 1e-6)[0]) == pytest.approx(
        budget.run_epsilon)
    assert budget.run_rdp < total / 3
    with pytest.raises(ValueError, match="fewer runs"):
        SelectionBudget.split(0.2, 1e-6, 22, 1e6)
    # never above the target, not even by an ulp (63 of these 480 were, by one to three)
    for epsilon, delta, order, mean_runs in itertools.product(
            [0.05, 0.1, 0.3, 0.5, 1, 2, 4, 8], [1e-6, 1e-5, 1e-3], [8, 22, 35, 66, 130],
            [1.5, 3, 9, 30]):
        try:
            assert SelectionBudget.split(epsilon, delta, order, mean_runs).epsilon <= epsilon
        except ValueError:  # nothing left for the runs at that order
            continue
    # where B is tiny beside the fixed cost, stepping B down an ulp at a time to get there
    # took 12.7 s and, for the second ε, about 10⁹ steps
    for epsilon in (0.9353309549372747, 0.9353304842468942):
        assert SelectionBudget.split(epsilon, 1e-6, 22, 30.0).epsilon <= epsilon


def test_geometric_runs_have_the_accounted_mean() -> None:
    """E[K] = μ enters ε' through log μ: more runs than accounted would under-state ε
    (4,000 draws, μ = 9: mean within ±6 %, and K ≥ 1 always)."""
    from renyiboost.models.tuning import geometric_runs

    noise = SeededNoise(11)
    draws = np.array([geometric_runs(noise, 9.0) for _ in range(4_000)])
    assert draws.min() >= 1
    assert draws.mean() == pytest.approx(9.0, rel=0.06)
    assert geometric_runs(noise, 1.0) == 1


def test_a_private_selection_releases_one_run_at_the_accounted_budget() -> None:
    """Every run is calibrated at the selection's order within the per-run budget, buys no
    size estimate, and the score noise costs a validation row the same budget."""
    from renyiboost.accounting.selection import SelectionBudget
    from renyiboost.models.tuning import private_tune, score_noise_std

    rng = np.random.default_rng(2)
    X = rng.random((1_500, 2))
    y = (X[:, 0] + 0.3 * rng.random(1_500) > 0.6).astype(float)
    schema = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)})
    candidates = [default_params("classification", 1.0, n) | {"rounds": 20}
                  for n in (500, 5_000)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TestingOnlyWarning)
        result = private_tune(schema, X, y, "classification", 1.0, candidates=candidates,
                              mean_runs=3.0, seed=5)
    budget = result.budget
    assert budget.epsilon <= 1.0 + 1e-9 and result.seeded_for_testing
    calibration = result.model.booster.calibration
    assert calibration.order == budget.order
    assert calibration.budget_rdp <= budget.run_rdp * (1 + 1e-9)
    assert result.model.size_estimate_ is None
    assert result.params == candidates[result.candidate]
    assert budget.order / (2 * score_noise_std(budget) ** 2) == pytest.approx(budget.run_rdp)
    assert SelectionBudget.split(1.0, 1e-6, budget.order, 3.0) == budget
    # the chosen model's release and export state the selection's total, not its run's ε
    # alone (0.596 of a total 1.0 before), and keep it through a JSON round trip
    stated = result.model.release().guarantee
    assert (stated.epsilon, stated.delta) == (budget.epsilon, budget.delta)
    assert budget.run_epsilon < 0.7 * budget.epsilon
    assert SGBDT.from_json(result.model.to_json()).privacy_guarantee() == stated
    with pytest.raises(ValueError, match="leaves"):
        private_tune(schema, X, y, "classification", 1.0, candidates=[{"depth": 2}])


def _tuning_rows(n: int = 1_500) -> tuple[PublicSchema, np.ndarray, np.ndarray]:
    """Rows whose second feature is the row's index / n (each row recognisable)."""
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.random(n), np.arange(n) / n])
    y = (X[:, 0] + 0.3 * rng.random(n) > 0.6).astype(float)
    return PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)}), X, y


def test_a_private_selection_draws_what_it_accounts(monkeypatch) -> None:
    """Would fail if a run's score noise were smaller than accounted, a validation row were
    also trained on (it would pay B twice), K were drawn with a larger mean than the
    μ in ε', the scores read rows the split did not give them, or a run's seed were the
    selection's: the noise each score gets, the rows each fit and each score read, the
    runs' seeds and K's mean are recorded."""
    from renyiboost.models import tuning

    schema, X, y = _tuning_rows()
    stds: list[float] = []
    means: list[float] = []
    fitted: list[np.ndarray] = []
    scored: list[np.ndarray] = []
    run_seeds: list[int] = []

    class Recording(SeededNoise):
        def normal(self, size, std=1.0):
            stds.append(float(std))
            return super().normal(size, std)

    def geometric(noise, mean_runs):
        means.append(mean_runs)
        return original_runs(noise, mean_runs)

    def fit(model, X_part, y_part):
        fitted.append(np.rint(X_part[:, 1] * len(y)).astype(int))
        run_seeds.append(model.seed)
        return original_fit(model, X_part, y_part)

    def score(task, model, X_part, y_part, target_range):
        scored.append(np.rint(X_part[:, 1] * len(y)).astype(int))
        return original_score(task, model, X_part, y_part, target_range)

    original_runs, original_fit = tuning.geometric_runs, SGBDT.fit
    original_score = tuning._validation_score
    monkeypatch.setattr(tuning, "noise_source", lambda seed: Recording(seed))
    monkeypatch.setattr(tuning, "geometric_runs", geometric)
    monkeypatch.setattr(SGBDT, "fit", fit)
    monkeypatch.setattr(tuning, "_validation_score", score)
    candidates = [default_params("classification", 1.0, n) | {"rounds": 10}
                  for n in (500, 5_000)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TestingOnlyWarning)
        result = tuning.private_tune(schema, X, y, "classification", 1.0,
                                     candidates=candidates, mean_runs=3.0, seed=0)
    runs = result.operator_runs
    # a seeded selection (testing only) never gives a run its own seed: seed 0's run 0
    # had seed 0 and drew the selection's noise
    assert 0 not in run_seeds and len(set(run_seeds)) == runs
    assert means == [3.0] and len(fitted) == len(scored) == runs
    assert stds == [tuning.score_noise_std(result.budget)] * runs  # the tuner's own draws
    train, validation = fitted[0], scored[0]
    assert all(np.array_equal(rows, train) for rows in fitted)
    assert all(np.array_equal(rows, validation) for rows in scored)
    assert np.intersect1d(train, validation).size == 0
    assert np.union1d(train, validation).size == len(y)
    assert 0.1 < validation.size / len(y) < 0.3  # the share's coin


def test_a_regression_selection_counts_errors_in_quarters_of_the_target_range(
        monkeypatch) -> None:
    """Each run's score counts a validation row's error in units of a quarter of the
    public target range (capped at one unit: sensitivity 1 still). In units of the whole
    range, a small validation part's scores barely differed under the noise (ChickWeights:
    a selection chose R² −2.2 on average where its best candidate had 0.38)."""
    from renyiboost.models import tuning

    scales: list[float] = []
    original = tuning._validation_score

    def score(task, model, X_part, y_part, error_scale):
        scales.append(error_scale)
        return original(task, model, X_part, y_part, error_scale)

    monkeypatch.setattr(tuning, "_validation_score", score)
    schema = PublicSchema(features={"a": (0.0, 1.0)}, target_bounds=(-3.0, 5.0))
    rng = np.random.default_rng(0)
    X = rng.random((600, 1))
    candidates = [default_params("regression", 1.0, 600) | {"rounds": 5}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TestingOnlyWarning)
        tuning.private_tune(schema, X, 4 * X[:, 0], "regression", 1.0,
                            candidates=candidates, mean_runs=2.0, seed=1)
    assert scales and set(scales) == {2.0}  # (5 − (−3)) / 4

    class Fixed:
        def predict(self, X_part):
            return np.zeros(len(X_part))

    errors = np.array([0.5, 1.0, 2.0, 3.0])
    assert original("regression", Fixed(), errors[:, None], errors, 2.0) == -2.75


@given(st.lists(st.tuples(st.floats(-1e3, 1e3), st.floats(-1e3, 1e3)), min_size=1,
                max_size=30), st.sampled_from(["classification", "regression"]))
@settings(max_examples=60, deadline=None)
def test_one_validation_row_moves_a_score_by_at_most_one(pairs, task) -> None:
    """The score noise is calibrated for sensitivity 1: removing any one row moves a run's
    score by at most 1, whatever the predictions and labels."""
    from renyiboost.models.tuning import _validation_score

    predictions = np.array([p for p, _ in pairs])
    labels = np.array([t for _, t in pairs])
    if task == "classification":
        predictions, labels = (predictions > 0).astype(float), (labels > 0).astype(float)

    class Fixed:
        def __init__(self, rows: np.ndarray) -> None:
            self.rows = rows

        def predict(self, X: np.ndarray) -> np.ndarray:
            return self.rows[X[:, 0].astype(int)]

    rows = np.arange(len(pairs), dtype=float)[:, None]
    full = _validation_score(task, Fixed(predictions), rows, labels, 7.0)
    for i in range(len(pairs)):
        keep = np.arange(len(pairs)) != i
        less = _validation_score(task, Fixed(predictions), rows[keep], labels[keep], 7.0)
        assert abs(full - less) <= 1.0 + 1e-12


def test_a_private_selection_checks_every_row_and_states_its_rdp() -> None:
    """A label a fit refuses is refused in the validation part too (a NaN there made every
    score NaN, and the NaN was released); the chosen model's stated RDP at the order
    converts to the stated ε (it once kept the run's B, which converts to 0.596 of 1.0);
    and the order is the one that gives the candidates the least leaf noise."""
    from renyiboost.accounting import dp_epsilon_at_orders
    from renyiboost.accounting.selection import SelectionBudget
    from renyiboost.models.tuning import (
        _run_params,
        default_candidates,
        private_tune,
        selection_budget,
    )

    schema, X, y = _tuning_rows(600)
    regression = PublicSchema(features=schema.features, target_bounds=(0.0, 1.0))
    bad = y.copy()
    bad[0] = np.nan  # in the validation part for some of these seeds (seeded coins)
    for seed in range(10):
        with pytest.raises(ValueError, match="labels a stream would refuse"):
            private_tune(regression, X, bad, "regression", 1.0, mean_runs=2.0, seed=seed)
    for runs in (math.inf, 1001.0):  # 10¹⁵ expected fits ran without end and without a word
        with pytest.raises(ValueError, match="mean_runs must be a number from 1 to 1000"):
            private_tune(schema, X, y, "classification", 1.0, mean_runs=runs)
    candidates = [default_params("classification", 1.0, 600) | {"rounds": 10}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TestingOnlyWarning)
        result = private_tune(schema, X, y, "classification", 1.0, candidates=candidates,
                              mean_runs=2.0, seed=1)
    stated, budget = result.model.release().guarantee, result.budget
    assert stated.budget_rdp == pytest.approx(budget.total_rdp)
    assert float(dp_epsilon_at_orders(stated.order, stated.budget_rdp, stated.delta)[0]) == (
        pytest.approx(stated.epsilon, rel=1e-9))
    # Adult's first default candidate at ε = 1, μ = 9 (the helper's review figures)
    first = default_candidates("classification", 1.0, 6)[0]
    chosen = selection_budget(first, "classification", 1.0, 1e-6, 9.0)

    def sigma(budget: SelectionBudget) -> float:
        run = _run_params(first, "classification", budget, 1e-6)
        return calibrate(run.epsilon, 1e-6, run.rounds, run.sampling_rate, run.count_share,
                         run.init_share, run.max_order, budget.order, run.grid_share).sigma

    single = SelectionBudget.split(1.0, 1e-6, 22, 9.0)
    assert sigma(chosen) < 0.9 * sigma(single) and chosen.epsilon == pytest.approx(1.0)


def test_the_default_candidates_fit_the_schemas_labels_and_features() -> None:
    """A multiclass schema's candidates are the multiclass policy (they once were the
    binary one, whose Newton leaves and proper gradients a multiclass learner refuses);
    a schema without numeric features gets no split grid."""
    from renyiboost.models.tuning import default_candidates

    three = PublicSchema(features={"a": (0.0, 1.0), "c": ["u", "v"]}, labels=["x", "y", "z"])
    for params in default_candidates("classification", 1.0, n_numeric=1, n_classes=3):
        assert params["hess_clip"] is None and params["logistic_gradient"] == "clipped"
        SGBDTBooster(SGBDTParams(task="classification", epsilon=1.0, **params), three)
    assert {params["grid_share"] for params in default_candidates("regression", 1.0, 0)} == {
        0.0}
    # a wide schema's candidates cover its features as the policy's fits do (explicit, a
    # candidate's cyclic trees were kept and split on the first columns only)
    wide = default_candidates("classification", 1.0, n_numeric=300, n_features=300)
    assert {params["feature_selection"] for params in wide} == {"random"}
    assert {params["feature_selection"] for params in default_candidates(
        "classification", 1.0, n_numeric=6, n_features=6)} == {"mains_then_pairs"}


def test_the_cli_runs_a_private_selection(capsys) -> None:
    import json

    from renyiboost.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TestingOnlyWarning)
        assert main(["tune", "--private", "--dataset", "breast_cancer", "--epsilon", "1",
                     "--mean-runs", "2", "--seed", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["guarantee"]["epsilon"] <= 1.0 + 1e-9 and report["seeded_for_testing"]
    # the whole selection's ε, not one run's
    assert report["guarantee"]["epsilon"] == pytest.approx(1.0, abs=1e-6)
    assert report["guarantee"]["run_epsilon"] < 0.8
    assert 0 <= report["candidate"] < 9 and "runs" not in report  # K stays hidden
    assert 0.5 < report["held_out"]["auc"] <= 1.0


# --------------------------------------------------------------------------- learner options
def test_batched_boosting_shares_gradients_and_divides_its_leaves() -> None:
    """trees_per_gradient = b: a tree's leaves are 1/b of the same tree's leaves without
    batching (same seed, same draws), and the gradients — hence the charges — come from
    the margins at the start of the batch, not the current ones."""
    base = {"task": "regression", "epsilon": 1.0, "depth": 2, "rounds": 10,
            "sampling_rate": 1.0, "leaf_clip": None}
    rng = np.random.default_rng(4)
    X, y = rng.random((2_000, 2)), rng.random(2_000)
    plain = SGBDTBooster(SGBDTParams(**base), SCHEMA, seed=9)
    batched = SGBDTBooster(SGBDTParams(**base, trees_per_gradient=4), SCHEMA, seed=9)
    pool = RecordPool.from_arrays(X, plain.loss.scale(y))
    one, four = plain.plan_round(pool), batched.plan_round(pool)
    np.testing.assert_allclose(four.leaves, one.leaves / 4)
    moved = RecordPool(pool.X, pool.target, pool.margin + 0.5, pool.spent, pool.retired)
    stale = batched.plan_round(moved, gradient_margin=pool.margin)
    fresh = batched.plan_round(moved)
    charge_stale, charge_fresh = stale.spent - pool.spent, fresh.spent - pool.spent
    np.testing.assert_allclose(charge_stale, four.spent - pool.spent)
    assert not np.allclose(charge_stale, charge_fresh)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TestingOnlyWarning)
        model = SGBDT(SCHEMA, seed=1, **base, trees_per_gradient=3).fit(X, y)
    assert model.ensemble.n_trees == 10
    with pytest.raises(ValueError, match="batch fits"):
        EngineConfig(public_schema=SCHEMA, params=SGBDTParams(**base, trees_per_gradient=2))


def test_a_size_hint_adds_a_burst_at_the_expected_end() -> None:
    """With expected_records = N the stream runs `rounds // 2` extra rounds at position N
    (public; a multiclass stream all `rounds`), once, for one position at a time and
    chunked adds alike; without a hint there is none."""
    config = EngineConfig.from_defaults(SCHEMA, "regression", 1.0, expected_records=600)
    assert (config.final_at, config.final_trees) == (600, config.params.rounds // 2)
    assert EngineConfig.from_defaults(SCHEMA, "regression", 1.0).final_trees == 0
    for labels, share in (([0, 1], 0.5), (["a", "b", "c"], 1.0)):
        classes = PublicSchema(features=SCHEMA.features, labels=labels)
        hinted = EngineConfig.from_defaults(classes, "classification", 1.0,
                                            expected_records=5_000)
        assert hinted.final_trees == int(hinted.params.rounds * share) > 0
    rng = np.random.default_rng(5)
    rows, labels = rng.random((900, 2)), rng.random(900)
    one = StreamEngine(config, seed=1)
    trees_at = {}
    for i in range(900):
        one.add_one(rows[i], labels[i], key=str(i))
        trees_at[i + 1] = one.ensemble.n_trees
    schedule = TriggerSchedule(config.train_every, config.warmup, config.trigger_growth,
                               config.max_train_every)
    regular_at_600 = int(schedule.next_after(599) == 600)
    assert trees_at[600] - trees_at[599] == config.final_trees + regular_at_600
    assert all(trees_at[p] - trees_at[p - 1] <= 1 for p in range(601, 901))
    many = StreamEngine(config, seed=1)
    many.add(rows, labels, [str(i) for i in range(900)])
    assert many.ensemble.n_trees == one.ensemble.n_trees
    # A hint up to the warmup puts the warmup at the hint, whose trigger runs every nominal
    # round: a burst there came after every key had spent its budget (noise alone).
    for hint in (50, 100):
        small = EngineConfig.from_defaults(SCHEMA, "regression", 1.0, expected_records=hint)
        assert small.final_trees == 0 and small.warmup == hint
        short = StreamEngine(small, seed=1)
        short.add(rows[:hint], labels[:hint], [str(i) for i in range(hint)])
        assert short.ensemble.n_trees == small.trees_per_trigger == small.params.rounds
    own = EngineConfig.from_defaults(SCHEMA, "regression", 1.0, expected_records=60,
                                     warmup=20, train_every=10)  # triggers before the end
    assert own.final_trees == own.params.rounds // 2 > 0


def test_a_stream_that_outgrows_a_small_hint_gets_an_unhinted_streams_rate_of_trees() -> None:
    """A hint of 50 records schedules 20 trees at every position up to its end; kept
    forever, 2,000 records grew 39,030 trees, each from a pool the filter had thinned to
    the last few records. Beyond the end the schedule is an unhinted stream's (one tree a
    trigger, intervals growing to its cap); up to and with the end's trigger it is the
    hint's, and the rounds a restart counts as due are those run, added one at a time or
    all at once."""
    config = EngineConfig.from_defaults(SCHEMA, "regression", 1.0, expected_records=50)
    unhinted = EngineConfig.from_defaults(SCHEMA, "regression", 1.0)
    assert (config.max_train_every, config.trees_per_trigger) == (1, 20)
    assert config.max_train_every_beyond_end == unhinted.max_train_every == 49
    hinted_only = TriggerSchedule(config.train_every, config.warmup, config.trigger_growth,
                                  config.max_train_every)
    rng = np.random.default_rng(2)
    rows, labels = rng.random((3000, 2)), rng.random(3000)
    one = StreamEngine(config, seed=1)
    trees_at = [0]
    for i in range(3000):
        one.add_one(rows[i], labels[i], key=str(i))
        trees_at.append(one.booster.rounds_done)
    assert trees_at[50] == 20 * hinted_only.releases_until(50) + config.final_trees
    assert max(np.diff(trees_at[50:])) == 1
    schedule = trigger_schedule(config)
    assert trees_at[-1] - trees_at[50] == schedule.releases_until(3000) - \
        schedule.releases_until(50) < 100
    for position in (49, 50, 51, 777, 3000):
        assert rounds_due_by(config, schedule, position) == trees_at[position]
    many = StreamEngine(config, seed=1)
    many.add(rows, labels, [str(i) for i in range(3000)])
    assert many.booster.rounds_done == trees_at[-1]
    with pytest.raises(ValueError, match="max_train_every_beyond_end sets the schedule"):
        EngineConfig(public_schema=SCHEMA, params=unhinted.params, max_train_every_beyond_end=9)

def test_finish_runs_an_end_burst_and_charges_every_round() -> None:
    """finish() after 600 positions without a hint: `rounds // 2` more rounds for regression
    (a quarter for classification), each charged to every active key (spent grows, never
    past the budget); none for a second call at the same position, nor at a hinted
    stream's own burst; a later end runs another."""
    rng = np.random.default_rng(8)
    rows, labels = rng.random((700, 2)), rng.random(700)
    engine = StreamEngine(EngineConfig.from_defaults(SCHEMA, "regression", 1.0), seed=4)
    assert engine.finish() == 0  # before the warmup: nothing can be released yet
    engine.add(rows[:600], labels[:600], [str(i) for i in range(600)])
    burst = engine.config.params.rounds // 2
    before = engine.booster.rounds_done
    active = [k for k in map(str, range(600)) if engine.operator_budget_of(k).status == "active"]
    spent = {k: engine.operator_budget_of(k).spent_rdp for k in active}
    assert engine.finish() == burst and engine.booster.rounds_done == before + burst
    for key in active:
        after = engine.operator_budget_of(key)
        assert after.spent_rdp > spent[key] and after.spent_rdp <= after.budget_rdp * (1 + 1e-9)
    assert engine.finish() == 0  # the same end twice
    engine.add(rows[600:], labels[600:], [str(i) for i in range(600, 700)])
    assert engine.finish() == burst  # more records: a new end
    hinted = StreamEngine(EngineConfig.from_defaults(SCHEMA, "regression", 1.0,
                                                     expected_records=600), seed=4)
    hinted.add(rows[:600], labels[:600], [str(i) for i in range(600)])
    assert hinted.finish() == 0  # its own burst ran at 600
    hinted.add(rows[600:650], labels[600:650], [str(i) for i in range(600, 650)])
    assert hinted.finish() == hinted.config.params.rounds // 2
    model = SGBDTRegressor({"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0), epsilon=1.0, seed=4)
    for i in range(300):
        model.learn_one({"a": float(rows[i, 0])}, float(labels[i]), key=i)
    n_trees = model.engine.ensemble.n_trees
    assert model.finish() == model.engine.config.params.rounds // 2
    assert model.engine.ensemble.n_trees == n_trees + model.engine.config.params.rounds // 2
    classifier = SGBDTClassifier({"a": (0.0, 1.0)}, epsilon=1.0, seed=4)
    for i in range(300):
        classifier.learn_one({"a": float(rows[i, 0])}, bool(labels[i] > 0.5), key=i)
    assert classifier.finish() == classifier.engine.config.params.rounds // 4
    with pytest.raises(RuntimeError, match="coordinator"):
        StreamEngine(EngineConfig.from_defaults(SCHEMA, "regression", 1.0),
                     coordinated=True).finish()


def test_a_short_stream_at_a_large_epsilon_grows_as_many_trees_as_the_batch_fit() -> None:
    """A 405-record stream (ChickWeights' training rows): at ε = 4 the batch fit wants 80
    rounds, and the 305 positions after the warmup give one tree every 3 positions, so the
    nominal rounds, which set each tree's noise, are the 101 trees a real engine releases
    before the burst; at ε = 1, 40 rounds, one every 7 (ten positions gave 31 trees). Only
    a stream with fewer positions than wanted trees grows several a trigger. Without a hint
    (10,000 records assumed) the schedule starts at 10 and grows."""
    assert default_params("regression", 4.0, 405)["rounds"] == 80
    config = EngineConfig.from_defaults(SCHEMA, "regression", 4.0, expected_records=405)
    schedule = TriggerSchedule(config.train_every, config.warmup, config.trigger_growth,
                               config.max_train_every)
    assert (config.train_every, config.max_train_every, config.trees_per_trigger) == (3, 3, 1)
    assert schedule.releases_until(405) == config.params.rounds == 102
    rng = np.random.default_rng(3)
    engine = StreamEngine(config, seed=2)
    engine.add(rng.random((404, 2)), rng.random(404), [str(i) for i in range(404)])
    assert engine.ensemble.n_trees == schedule.releases_until(404) >= 80
    at_one = EngineConfig.from_defaults(SCHEMA, "regression", 1.0, expected_records=405)
    assert default_params("regression", 1.0, 405)["rounds"] == 40
    assert (at_one.train_every, at_one.trees_per_trigger, at_one.params.rounds) == (7, 1, 43)
    few = EngineConfig.from_defaults(SCHEMA, "regression", 100.0, expected_records=130)
    assert (few.train_every, few.trees_per_trigger, few.params.rounds) == (1, 7, 7 * 31)
    prior = EngineConfig.from_defaults(SCHEMA, "regression", 4.0)
    assert (prior.train_every, prior.trees_per_trigger) == (10, 1)
    assert prior.max_train_every == (PRIOR_RECORDS - STREAM_WARMUP) // 400
    # your own interval (7 triggers to 405) keeps one tree a trigger
    fixed = EngineConfig.from_defaults(SCHEMA, "regression", 100.0, expected_records=130,
                                       train_every=50)
    assert (fixed.trees_per_trigger, fixed.params.rounds) == (1, 1)
    mine = EngineConfig.from_defaults(SCHEMA, "regression", 100.0, expected_records=130,
                                      trees_per_trigger=2)
    assert (mine.trees_per_trigger, mine.params.rounds) == (2, 62)  # an explicit value wins


def test_a_short_stream_without_a_hint_reaches_its_pair_trees() -> None:
    """A stream without a hint calibrates for 10,000 records; one of 3,000 releases 84 of
    its 226 nominal rounds. With half of those as one-feature trees it never grew a pair
    tree and could not learn an XOR of its two features (AUC 0.49–0.56 over three seeds);
    at most 20 one-feature trees a feature (40 here) leave it 44 pair trees, which learn it
    (0.98–0.995). ε = 1, seeded noise; each seed must show the gap."""
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(8)
    X = rng.uniform(0, 1, (5000, 2))
    y = (X[:, 0] > 0.5) ^ (X[:, 1] > 0.5)
    train, test = ({"a": X[rows, 0], "b": X[rows, 1]}
                   for rows in (slice(3000), slice(3000, None)))

    def auc(seed: int, **learner) -> float:
        model = SGBDTClassifier({"a": (0.0, 1.0), "b": (0.0, 1.0)}, epsilon=1.0, seed=seed,
                                **learner)
        model.learn_many(pd.DataFrame(train), pd.Series(y[:3000]), keys=list(range(3000)))
        assert (model.engine.config.params.rounds, model.engine.ensemble.n_trees) == (226, 84)
        assert model.engine.booster.grower.mains_trees == (113 if learner else 40)
        return roc_auc_score(y[3000:], model.predict_proba_many(pd.DataFrame(test))[True])

    for seed in range(3):
        assert auc(seed) > 0.95 and auc(seed, mains_cycles=None) < 0.6


def test_none_keeps_its_meaning_and_left_out_keywords_take_the_policy() -> None:
    """hess_clip=None is count leaves and leaf_clip=None no clipping, not "choose for me";
    a River clone keeps both the explicit None and the left-out policy values."""
    plain = SGBDTClassifier({"a": (0.0, 1.0)}, epsilon=1.0)
    chosen = SGBDTClassifier({"a": (0.0, 1.0)}, epsilon=1.0, hess_clip=None, leaf_clip=None)
    policy = default_params("classification", 1.0, PRIOR_RECORDS)
    assert plain.engine.config.params.hess_clip == policy["hess_clip"]
    for model in (chosen, chosen.clone()):
        params = model.engine.config.params
        assert (params.hess_clip, params.leaf_clip) == (None, None)
        assert params.depth == policy["depth"]
    assert plain.clone().engine.config.params.hess_clip == policy["hess_clip"]


# --------------------------------------------------------------------------- the benchmark
def _defaults_benchmark():
    """``benchmarks/defaults.py`` as a module (it is a script, not part of the package),
    registered under its name so that its process pool can pickle its cell functions."""
    import importlib.util
    import sys
    from pathlib import Path

    if "defaults_benchmark" in sys.modules:
        return sys.modules["defaults_benchmark"]
    path = Path(__file__).parents[1] / "benchmarks" / "defaults.py"
    spec = importlib.util.spec_from_file_location("defaults_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_defaults_table_names_every_missed_target_on_paired_differences() -> None:
    """The verdicts of ``make defaults``: a column below the better of DP-EBM and the trivial
    baseline, or a hinted stream more than 0.01 below the batch fit, is named with its mean
    paired difference and standard error, as missed beyond noise or level with the target
    (within t s.e., t Student's 95 % value at k − 1 degrees of freedom; a tie once counted as
    a win, and 2 s.e. in place of t called 2.2 s.e. beyond noise); a cell that meets every target beyond
    noise is not named."""
    bench = _defaults_benchmark()

    def shuffle(seed: int, hint: float, dpebm: float) -> dict:
        return {"protocol": "held-out", "set": "s", "epsilon": 1.0, "seed": seed,
                "task": "classification", "batch": 0.90 + seed / 100,
                "learn_one": 0.95, "learn_one_finish": 0.96, "learn_one_hint": hint + seed / 100,
                "dpebm": dpebm, "prior": 0.5}

    met = [shuffle(seed, 0.895, 0.80) for seed in range(3)]
    assert "5 of 5 met beyond noise, 0 level" in bench._verdicts(met)
    assert "4 of 4 met beyond noise" in bench._verdicts(  # a run without the finish() column
        [{k: v for k, v in row.items() if k != "learn_one_finish"} for row in met])
    # hint 0.02 below batch on every shuffle (paired: no noise); DP-EBM above the batch fit
    # and the hinted stream, below learn_one
    missed = [shuffle(seed, 0.88, 0.91 + seed / 100)
              | {"learn_one": 0.95 + seed / 100, "learn_one_finish": 0.96 + seed / 100}
              for seed in range(3)]
    text = bench._verdicts(missed)
    assert "2 of 5 met beyond noise, 0 level (within t s.e. of the target" in text
    assert "3 missed" in text
    assert "s ε = 1, learn_one −" not in text and "s ε = 1, learn_one_finish −" not in text
    assert "s ε = 1, batch − max(DP-EBM, trivial): -0.010 ± 0.000\n" in text
    assert "learn_one_hint − batch (tolerance 0.01): -0.020 ± 0.000\n\nLevel:\n\n- none" in text
    # with the batch fit told the same size measured, the hinted stream is judged against it
    # (like for like; it was judged against the fit that bought its size: review X)
    told = [row | {"batch_hint": row["batch"] + 0.02} for row in met]
    assert ("- s ε = 1, learn_one_hint − batch_hint (tolerance 0.01): -0.025 ± 0.000"
            in text_after(bench._verdicts(told), "Missed beyond noise:"))
    # independent noise runs: s / √k; -1 and 0 → -0.5 ± 0.5, level with the baseline
    stream = [{"protocol": "prequential", "set": "p", "epsilon": 4.0, "seed": seed,
               "task": "regression", "learn_one": -1.5 + seed, "prior": -0.5}
              for seed in range(2)]
    assert text_after(bench._verdicts(stream), "Level:") == \
        "- p ε = 4, prequential − running baseline: -0.500 ± 0.500"
    # overlapping 70 / 30 shuffles: s · √(1/k + 3/7) (Nadeau and Bengio), not s / √k
    varied = [shuffle(seed, 0.895, 0.80) | {"learn_one": 0.95 + 0.01 * (-1) ** seed}
              for seed in range(4)]
    mean, error, critical = bench._paired(varied, "learn_one", "dpebm", "prior")
    spread = np.std([0.01 * (-1) ** seed for seed in range(4)], ddof=1)
    assert mean == pytest.approx(0.15) and error == pytest.approx(spread * np.sqrt(1 / 4 + 3 / 7))
    assert critical == pytest.approx(3.182, abs=1e-3)  # Student's t, 3 degrees of freedom
    # 2.2 standard errors above the baseline over 6 shuffles: level (t = 2.571 at 5 degrees
    # of freedom), where a fixed 2 called it met beyond noise (review X)
    steps = np.array([1, -1, 1, -1, 1, -1]) * 0.01
    close = [shuffle(seed, 0.895, 0.80) for seed in range(6)]
    se = np.std(steps, ddof=1) * np.sqrt(1 / 6 + 3 / 7)
    for row, step in zip(close, steps, strict=True):
        row["learn_one"] = 0.80 + 2.2 * se + step
    assert "learn_one − max(DP-EBM, trivial): +" in text_after(bench._verdicts(close),
                                                                 "Level:")
    # one run has no standard error: far below DP-EBM it is level, not met (it was met)
    one = [shuffle(0, 0.895, 0.80) | {"learn_one": 0.6, "dpebm": 0.9}]
    assert "- s ε = 1, learn_one − max(DP-EBM, trivial): -0.300 ± nan" in text_after(
        bench._verdicts(one), "Level:")


def test_the_ablation_table_reads_its_references_from_the_same_shuffles() -> None:
    """The ablation rows' reference columns (defaults, finish(), batch with the hint) are the
    held-out cells' figures for the same set and shuffle at ε = 1 (the ablation cell had fitted
    each again), and every "± sd" of the tables is the sample one (ddof 1, review F #4)."""
    bench = _defaults_benchmark()

    def held_out(seed: int, epsilon: float) -> dict:
        return {"protocol": "held-out", "set": "s", "epsilon": epsilon, "seed": seed,
                "task": "classification", "batch": 0.5, "batch_hint": 0.70 + seed / 100,
                "learn_one": 0.60 + seed / 100, "learn_one_finish": 0.80 + seed / 100,
                "learn_one_hint": 0.5, "dpebm": 0.5, "prior": 0.5}

    ablation = {k: 0.9 for k in [*bench.ABLATIONS, *bench.FINISH_ABLATIONS,
                                 *bench.BATCH_ABLATIONS]}
    rows = [held_out(seed, epsilon) for seed in (1, 2, 3) for epsilon in (1.0, 4.0)]
    rows[1]["learn_one"] = 0.0  # ε = 4: never a reference
    rows += [{"protocol": "ablation", "set": "s", "epsilon": 1.0, "seed": seed, **ablation}
             for seed in (1, 3)]
    line = text_after(bench._extras(rows), "| s |").split("\n")[0]
    columns = [c.strip() for c in line.strip(" |").split("|")]
    header = text_after(bench._extras(rows), "| set |").split("\n")[0]
    names = [c.strip() for c in header.strip(" |").split("|")]
    assert len(names) == len(columns) == 3 + len(ablation)
    cell = dict(zip(names, columns, strict=True))
    spread = f"{np.std([0.01, 0.03], ddof=1):.3f}"  # 0.014; the population sd was 0.010
    assert cell["defaults"] == f"0.620 ± {spread}"
    assert cell["finish()"] == f"0.820 ± {spread}"
    assert cell["batch, size hint"] == f"0.720 ± {spread}"
    assert cell["no leaf clip"] == "0.900 ± 0.000"
    assert names.index("defaults") == 0 and names.index("finish()") == len(bench.ABLATIONS) + 1


def text_after(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].strip()


def test_the_validation_table_measures_sets_that_chose_no_constant(tmp_path) -> None:
    """``make defaults``' second table: the validation sets only (a development set is
    refused), the held-out protocol with every column, no extras, its own results file."""
    pytest.importorskip("interpret")
    bench = _defaults_benchmark()
    with pytest.raises(SystemExit):  # argparse's error: abalone chose constants
        bench.main(["--validation", "--sets", "abalone"])
    out = tmp_path / "validation"
    assert bench.main(["--validation", "--sets", "mixed", "--epsilons", "4", "--seeds", "2",
                       "--workers", "1", "--out", str(out)]) == 0
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert [(r["set"], r["protocol"], r["seed"]) for r in rows] == \
        [("mixed", "held-out", 10_000), ("mixed", "held-out", 10_001)]  # no choice's seeds
    assert all({"batch", "learn_one", "learn_one_finish", "learn_one_hint", "dpebm",
                "prior"} <= set(r) for r in rows)
    text = out.with_suffix(".md").read_text()
    assert "| held-out | mixed | AUC | 4 |" in text and "Ablations" not in text


def test_the_recalibration_rerun_pairs_each_candidate_with_the_current_constants(
        monkeypatch) -> None:
    """``make recalibration``: every candidate's held-out log loss is compared with the
    current constants' on the same set and seed (paired), and a real stream runs with a
    candidate's window and share."""
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "benchmarks"))
    sys.modules.pop("recalibration", None)
    import recalibration

    current, wider = (20_000, 0.05), (40_000, 0.025)
    rows = [{"set": name, "seed": seed, "policy": policy, "base_rate": 0.25,
             "mean_p": 0.25 + shift, "auc": 0.9,
             "log_loss": 0.3 + seed / 100 + (0.01 if policy == wider else 0.0)}
            for name in ("a", "b") for seed in range(3)
            for policy, shift in ((None, -0.06), (current, 0.0), (wider, -0.01))]
    table = recalibration._table(rows, current).splitlines()
    assert table[2].startswith("| none | -0.060, 0.9000, 0.3100 |")
    assert table[3].endswith("| 0.3100 (+0.0000 ± 0.0000) |")
    assert table[4].startswith("| 40,000, 0.025 | -0.010,")
    assert table[4].endswith("| 0.3200 (+0.0100 ± 0.0000) |")
    monkeypatch.setattr(recalibration.defaults, "IID_POSITIONS", 3_000)
    row = recalibration.window_cell("sea", 1.0, 0, (1_000, 0.05))
    assert row["policy"] == (1_000, 0.05) and 0.5 < row["auc"] <= 1.0
    assert 0.0 < row["mean_p"] < 1.0 and row["log_loss"] > 0.0


def test_a_private_selection_does_not_count_its_runs_into_warnings() -> None:
    """K is hidden by the guarantee: one warning a run (values outside the bounds, the
    seed's) once told K to any log that keeps repeats (2K + 1 lines). Would fail if the
    warnings' number varied with K: eight selections of K from 1 to 18 give the same."""
    from renyiboost.models.tuning import private_tune

    schema, X, y = _tuning_rows(600)
    X[:5, 0] = 3.0  # outside the public bounds: every fit warns of it
    counts: dict[int, set[int]] = {}
    for seed in range(8):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = private_tune(schema, X, y, "classification", 1.0, mean_runs=4.0,
                                  seed=seed)
        counts.setdefault(result.operator_runs, set()).add(len(caught))
    assert len(counts) >= 4  # K varied
    assert len(set().union(*counts.values())) == 1, counts


def test_a_private_selection_checks_its_candidates_and_orders_first() -> None:
    """A candidate no run could fit is refused before any run reads a row, drawn or not
    (it failed only when drawn); an order whose per-run budget converts to ε = 0 alone
    (δ = 0.01 at a high order) is skipped (it stopped the selection); mean_runs=True is
    not a number of runs."""
    from renyiboost.models.tuning import private_tune

    schema, X, y = _tuning_rows(600)
    good = default_params("classification", 1.0, 600) | {"rounds": 10}
    fits: list[int] = []
    original = SGBDT.fit

    def counted(model, *args):
        fits.append(1)
        return original(model, *args)

    for bad in ({"depth": -1}, {"seed": 3}, {"no_such_parameter": 1}):
        with pytest.raises(ValueError, match="candidate 1 is not a configuration"), \
                pytest.MonkeyPatch.context() as patch:
            patch.setattr(SGBDT, "fit", counted)
            private_tune(schema, X, y, "classification", 1.0,
                         candidates=[good, good | bad], mean_runs=2.0)
    assert fits == []
    with pytest.raises(ValueError, match="candidate 0 is not a configuration"):
        private_tune(schema, X, y, "classification", 1.0, candidates=[good | {"depth": -1}])
    # a binary candidate on a three-class schema (Newton leaves, proper gradients): refused
    # before any run, where it failed after a number of runs the hidden draws set (W #1)
    three = PublicSchema(features=schema.features, labels=[0, 1, 2])
    binary = default_params("classification", 1.0, 100_000) | {"rounds": 10}
    assert binary["hess_clip"] is not None
    with pytest.raises(ValueError, match="candidate 1 is not a configuration.*binary labels"), \
            pytest.MonkeyPatch.context() as patch:
        patch.setattr(SGBDT, "fit", counted)
        private_tune(three, X, y % 3, "classification", 1.0,
                     candidates=[default_params("classification", 1.0, 600, n_classes=3),
                                 binary], mean_runs=2.0)
    assert fits == []
    result = private_tune(schema, X, y, "classification", 0.05, delta=0.01, mean_runs=9.0)
    assert 0 < result.budget.run_epsilon and result.budget.epsilon <= 0.05 + 1e-12
    with pytest.raises(ValueError, match="mean_runs"):
        private_tune(schema, X, y, "classification", 1.0, mean_runs=True)


def _wide_classification(k: int, n: int, signal: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, k))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-8 * (X[:, signal] - 0.5)))).astype(int)
    return PublicSchema(features={f"x{j}": (0.0, 1.0) for j in range(k)}), X, y


def test_a_wide_schema_reaches_its_last_column() -> None:
    """One-feature trees took the features in schema order and stopped after ``rounds``
    (or 100) of them, so a signal in column 99 of 100 was never split on: AUC 0.50 against
    0.66 or more in column 0 (review X, 29 November). The policy now draws random features
    per node when its one-feature trees cannot visit every feature once, in batch and on a
    hinted stream, and keeps what a caller chose."""
    from sklearn.metrics import roc_auc_score

    schema, X, y = _wide_classification(100, 3_000, signal=99, seed=4)
    model = SGBDT(schema, task="classification", epsilon=4.0, delta=1e-6, seed=2)
    assert model.fit(X[:2_100], y[:2_100]).params.feature_selection == "random"
    # at seeds 2..7: 0.50 to 0.54 with the pair policy's trees, 0.69 to 0.81 with random
    # features (the column itself scores 0.89); seeded at 0.77
    assert roc_auc_score(y[2_100:], model.predict_proba(X[2_100:])[:, 1]) > 0.65
    assert EngineConfig.from_defaults(schema, "classification", 1.0, 1e-6,
                                      2_100).params.feature_selection == "random"
    assert EngineConfig.from_defaults(schema, "classification", 1.0, 1e-6, 2_100,
                                      feature_selection="cyclic").params.feature_selection == (
        "cyclic")
    # a tree cap keeps the last trees only: 10 of 54 cyclic rounds split on 10 of 30 columns
    thirty, _, _ = _wide_classification(30, 10, signal=29, seed=4)
    assert EngineConfig.from_defaults(thirty, "classification", 0.5, 1e-6,
                                      1_000).params.feature_selection == "cyclic"
    assert EngineConfig.from_defaults(thirty, "classification", 0.5, 1e-6, 1_000,
                                      max_trees=10).params.feature_selection == "random"
    narrow, _, _ = _wide_classification(10, 10, signal=9, seed=4)
    assert EngineConfig.from_defaults(narrow, "classification", 1.0, 1e-6,
                                      2_100).params.feature_selection == "mains_then_pairs"


def test_a_selection_says_nothing_about_which_candidate_a_run_drew() -> None:
    """A candidate's settings warning (``mains_cycles`` with one-feature trees) was given by
    the up-front check and again by the first run's model when it drew that candidate, so
    the log told the draw (review W #2): it is given once, whatever the runs draw. The
    default candidates no longer carry ``mains_cycles`` where it is unread."""
    import warnings

    from renyiboost.models.tuning import default_candidates, private_tune

    for candidate in default_candidates("classification", 0.5, n_numeric=2):
        if candidate["feature_selection"] != "mains_then_pairs":
            assert "mains_cycles" not in candidate
    schema, X, y = _tuning_rows(600)
    pairs = {k: v for k, v in default_params("classification", 1.0, 600).items()
             if k != "mains_cycles"} | {"rounds": 10, "feature_selection": "pairs"}
    unread = pairs | {"mains_cycles": 20}  # warns: pairs read no mains_cycles
    counts = set()
    for seed in range(6):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            private_tune(schema, X, y, "classification", 1.0, candidates=[pairs, unread],
                         mean_runs=2.0, seed=seed)
        counts.add(sum("mains_cycles=20" in str(w.message) for w in caught))
    assert counts == {1}


def test_a_selection_at_a_small_epsilon_reaches_the_large_orders() -> None:
    """The selection's orders stopped at 1,024, below the calibration's 4,096: ε = 0.005 with
    nine expected runs was refused although order 3,072 pays for it (review W #3)."""
    from renyiboost.models.tuning import selection_budget

    params = default_params("classification", 0.005, 10_000) | {"rounds": 10}
    budget = selection_budget(params, "classification", 0.005, 1e-6, 9.0)
    assert budget.order > 1024 and budget.epsilon <= 0.005 + 1e-12


def test_a_selection_refuses_candidates_it_would_change_or_repeat() -> None:
    """A candidate's epsilon, delta, task and order were overwritten without a word (its
    public report showed epsilon=50 beside a guarantee of 1.0), a repeated candidate ran as
    a choice, and one dict or epsilon=None got errors about something else (review W #6)."""
    from renyiboost.models.tuning import private_tune

    schema, X, y = _tuning_rows(300)
    good = default_params("classification", 1.0, 300) | {"rounds": 5}
    for candidates, message in (([good, good | {"epsilon": 50}], "candidate 1 sets"),
                                ([good, good | {"rdp_order": 8}], "candidate 1 sets"),
                                ([good, dict(good)], "candidate 1 repeats candidate 0"),
                                (good, "one dict"), ([good, 3], "candidate 1 is a int")):
        with pytest.raises((ValueError, TypeError), match=message):
            private_tune(schema, X, y, "classification", 1.0, candidates=candidates)
    with pytest.raises(ValueError, match="needs a finite epsilon"):
        private_tune(schema, X, y, "classification", None, candidates=[good])


@pytest.mark.parametrize(("task", "epsilon"), [("classification", 4.0),
                                               ("regression", 0.005)])
def test_the_default_candidates_are_distinct_and_a_selection_takes_them(task, epsilon) -> None:
    """At ε = 4 (classification) and ε ≤ 0.01 the policy at 1,000, 10,000 and 100,000 records
    coincides, so the default candidates repeated one another, and the repeat check refused
    the tuner's own defaults (review D7 #1)."""
    from renyiboost.models.tuning import default_candidates, private_tune

    candidates = default_candidates(task, epsilon, n_numeric=2)
    assert all(c not in candidates[:i] for i, c in enumerate(candidates))
    schema, X, y = _tuning_rows(400)
    if task == "regression":
        schema = PublicSchema(features=schema.features, target_bounds=(0.0, 1.0))
        y = X[:, 0]
    result = private_tune(schema, X, y, task, epsilon, mean_runs=2.0, seed=1)
    assert 0 <= result.candidate < len(candidates)


def test_a_fit_that_buys_its_size_warns_only_about_what_it_uses() -> None:
    """The check that ε calibrates before the size is bought resolved the policy at the prior
    size, and warned about ``mains_cycles`` for that provisional choice, not the fit's
    (review D7 #4)."""
    import warnings

    schema, X, y = _tuning_rows(40_000)  # pairs at this size, one-feature trees at the prior
    model = SGBDT(schema, task="classification", epsilon=0.05, mains_cycles=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(X, y)
    said = [str(w.message) for w in caught if "mains_cycles" in str(w.message)]
    assert model.params.feature_selection == "mains_then_pairs" and said == [], said
