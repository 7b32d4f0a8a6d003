"""Noise stages of a stream without a size hint: accounting, charges, noise, schedule, replay."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from renyiboost.accounting import NOT_ELIGIBLE, calibrate, dp_epsilon_at_orders, stage_calibrations
from renyiboost.exceptions import TestingOnlyWarning
from renyiboost.models.booster import RecordPool, SGBDTBooster, SGBDTParams
from renyiboost.models.defaults import NOISE_STAGE_ENDS
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import EngineConfig, NoiseStageSpec, StreamEngine
from renyiboost.stream.store import SQLiteStore

warnings.simplefilter("ignore", TestingOnlyWarning)

SCHEMA = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)}, target_bounds=(0.0, 1.0))
SCHEMA_CLASSIFICATION = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)})


def test_stage_calibrations_share_the_order_and_the_budget() -> None:
    """Every stage is calibrated at the main order, converts to the same ε, and lets a
    full-sensitivity record pay for exactly its nominal rounds within the main budget B."""
    main = calibrate(epsilon=1.0, delta=1e-6, rounds=200, sampling_rate=1.0, count_share=0.04,
                     init_share=0.0)
    stages = stage_calibrations(main, (20, 60))
    assert [s.order for s in stages] == [main.order, main.order]
    assert stages[0].sigma < stages[1].sigma < main.sigma
    for stage in stages:
        assert stage.budget_rdp == pytest.approx(main.budget_rdp, rel=1e-6)
        assert dp_epsilon_at_orders(main.order, stage.budget_rdp, 1e-6)[0] <= 1.0
        assert stage.rounds * stage.round_charge <= main.budget_rdp
        assert (stage.rounds + 1) * stage.round_charge > main.budget_rdp


def _stage_booster(depth: int) -> SGBDTBooster:
    """Regression, count leaves, everyone charged in full (no individual filter), γ = 1,
    20 nominal rounds in stage 0 and 200 in the main stage."""
    params = SGBDTParams(epsilon=1.0, rounds=200, depth=depth, sampling_rate=1.0,
                         init_share=0.0, individual_filter=False, learning_rate=0.5)
    return SGBDTBooster(params, SCHEMA, seed=4, stage_rounds=(20,))


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_a_round_charges_the_price_of_its_stage(compiled: bool) -> None:
    """A stage-0 round is less noisy, so it must charge more: every record pays stage 0's
    full round charge (charging it at the main stage's table would under-charge it 3×)."""
    booster = _stage_booster(2)
    booster.compiled = compiled
    rng = np.random.default_rng(0)
    pool = RecordPool.from_arrays(rng.random((500, 2)), rng.uniform(-1, 1, 500))
    early, main = booster.stages
    for index, stage in ((0, early), (None, main)):
        outcome = booster.plan_round(pool, stage=index)
        np.testing.assert_allclose(outcome.spent - pool.spent, stage.calibration.round_charge,
                                   rtol=1e-9)
    assert early.calibration.round_charge > 2.5 * main.calibration.round_charge


def test_a_round_is_noised_at_its_stage() -> None:
    """With nobody in the pool every leaf's two sums are pure noise: their std over 1,024
    leaves must match the stage's (std of an estimated std from 1,024 draws: 2.2 %; the
    tolerance, 10 %, is 4.5 of them; the two stages differ by a factor of about 3)."""
    booster = _stage_booster(10)
    empty = RecordPool.from_arrays(np.zeros((0, 2)), np.zeros(0))
    for index, stage in ((0, booster.stages[0]), (None, booster.stages[1])):
        outcome = booster.plan_round(empty, stage=index)
        release, clip = stage.release, booster.params.grad_clip
        assert np.std(outcome.noisy_count) == pytest.approx(release.count_noise_std(1.0),
                                                            rel=0.10)
        assert np.std(outcome.noisy_grad_sum) == pytest.approx(release.sum_noise_std(clip),
                                                               rel=0.10)
    assert booster.stages[1].calibration.sigma > 2.5 * booster.stages[0].calibration.sigma


def test_stages_are_public_configuration() -> None:
    no_hint = EngineConfig.from_defaults(SCHEMA, "regression", 1.0)
    assert [s.until for s in no_hint.noise_stages] == list(NOISE_STAGE_ENDS["regression"])
    classifier = EngineConfig.from_defaults(SCHEMA_CLASSIFICATION, "classification", 1.0)
    assert [s.until for s in classifier.noise_stages] == [250, 500, 1_000, 2_000, 4_000]
    assert no_hint.noise_stages[0].rounds < no_hint.noise_stages[1].rounds < no_hint.params.rounds
    hinted = EngineConfig.from_defaults(SCHEMA, "regression", 1.0, expected_records=5_000)
    assert [s.until for s in hinted.noise_stages] == [1_000, 4_000]  # the ends before 5,000
    assert EngineConfig.from_defaults(SCHEMA, "regression", 1.0,
                                      expected_records=900).noise_stages == ()
    short = EngineConfig.from_defaults(SCHEMA_CLASSIFICATION, "classification", 1.0,
                                       expected_records=1_250)
    assert [s.until for s in short.noise_stages] == [250, 500, 1_000]
    assert EngineConfig.from_defaults(SCHEMA, "regression", None).noise_stages == ()
    with pytest.raises(ValueError, match="increasing"):
        EngineConfig(public_schema=SCHEMA, params=SGBDTParams(epsilon=1.0),
                     noise_stages=(NoiseStageSpec(until=50, rounds=5),
                                   NoiseStageSpec(until=10, rounds=9)))
    with pytest.raises(ValueError, match="private"):
        EngineConfig(public_schema=SCHEMA, params=SGBDTParams(epsilon=None),
                     noise_stages=(NoiseStageSpec(until=50, rounds=5),))


def test_a_hintless_stream_runs_each_round_at_the_stage_of_its_position(tmp_path) -> None:
    """Rounds up to position 1,000 run at stage 0, up to 4,000 at stage 1 (never a function
    of the pool: 60 keys upsert throughout); the stages' σ are in the public guarantee; a
    restart replays every round at its own stage and restores the ledger bit for bit."""
    config = EngineConfig.from_defaults(SCHEMA, "regression", 1.0)
    path = tmp_path / "stages.db"
    engine = StreamEngine(config, store=SQLiteStore(path, create=True, snapshot_ratio=1e9),
                          seed=6, write_behind=False)  # announced at the round's position
    stages: list[tuple[int, int | None]] = []
    engine.listeners.append(lambda event: stages.append((engine.positions,
                                                         getattr(event, "stage", -1))))
    rng = np.random.default_rng(1)
    n = 1_500
    X, y = rng.random((n, 2)), rng.random(n)
    for i in range(n):
        engine.add_one(X[i], y[i], key=f"k{i % 60}")
    engine.wait_durable()
    rounds = [(p, s) for p, s in stages if s != -1]
    assert {s for p, s in rounds if p <= 1_000} == {0}
    assert {s for p, s in rounds if p > 1_000} == {1}
    sigmas = [stage.calibration.sigma for stage in engine.booster.stages]
    guarantee = engine.privacy_guarantee()
    assert guarantee.stage_sigmas == [(1_000, sigmas[0]), (4_000, sigmas[1])]
    assert guarantee.sigma == sigmas[2] and engine.release().guarantee == guarantee
    spent = engine.spent_rdp()
    engine.store.close()  # a crash: every round is replayed, each at its stage
    again = StreamEngine(config, store=SQLiteStore(path), seed=6)
    assert again.booster.rounds_done == len(rounds)
    np.testing.assert_array_equal(again.spent_rdp(), spent)
    again.close()


def test_the_estimators_take_stages_or_none() -> None:
    """``noise_stages=()`` switches them off (a store written before stages existed pins a
    config without them); explicit pairs replace the policy's."""
    from renyiboost import SGBDTRegressor

    features = dict(SCHEMA.features)
    default = SGBDTRegressor(features, target_bounds=(0.0, 1.0), seed=1)
    assert [s.until for s in default.engine.config.noise_stages] == list(
        NOISE_STAGE_ENDS["regression"])
    off = SGBDTRegressor(features, target_bounds=(0.0, 1.0), seed=1, noise_stages=())
    assert off.engine.config.noise_stages == () and len(off.engine.booster.stages) == 1
    mine = SGBDTRegressor(features, target_bounds=(0.0, 1.0), seed=1, noise_stages=((500, 20),))
    assert mine.engine.config.noise_stages == (NoiseStageSpec(until=500, rounds=20),)
    assert mine.engine.privacy_guarantee().stage_sigmas[0][0] == 500


# ------------------------------------------------------------------- retirement across stages
def _staged_filters(floor: float = 0.5, sampling_rate: float = 1.0):
    """The filters of a stream with two earlier stages (20 and 60 nominal rounds) before a
    main stage of 200, all at the main order and budget (built as a booster builds them)."""
    from renyiboost.accounting import ChargeTable, IndividualRenyiFilter

    main = calibrate(epsilon=1.0, delta=1e-6, rounds=200, sampling_rate=sampling_rate)
    cals = (*stage_calibrations(main, (20, 60)), main)
    tables = [ChargeTable(cal.sigma, sampling_rate, main.order) for cal in cals]
    return main.budget_rdp, IndividualRenyiFilter.staged(main.budget_rdp, tables, floor)


def test_a_key_the_early_stage_cannot_afford_waits_for_the_main_stage() -> None:
    """An early stage is less noisy, so its smallest charge is larger (10× and 3.3× the main
    one's here: 20 and 60 nominal rounds against 200). A key with three main-stage charges left cannot pay an early round: it is
    ineligible there (charged nothing) but not retired, and the main stage admits it three
    times; then it retires, within B. Retiring against the early stage's own smallest
    charge dropped it for good."""
    budget, (early, middle, main) = _staged_filters()
    assert early.stage_min_charge > 9 * main.stage_min_charge
    assert middle.stage_min_charge > 3 * main.stage_min_charge
    assert early.min_charge == middle.min_charge == main.min_charge == main.stage_min_charge
    spent = np.array([budget - 3 * main.stage_min_charge * (1 + 1e-9)])
    floor = np.array([0.5])
    for flt in (early, middle):
        step = flt.step(spent, floor)
        assert not step.eligible[0] and not step.retired[0]
        assert step.charges[0] == 0.0 and step.spent[0] == spent[0]
        assert step.codes[0] == NOT_ELIGIBLE
    admitted = 0
    while True:
        step = main.step(spent, floor)
        admitted += int(step.eligible[0])
        spent = step.spent
        assert spent[0] <= budget
        if step.retired[0]:
            break
    assert admitted == 3
    for flt in (early, middle, main):  # retired for good: no stage could admit it
        assert not flt.step(spent, floor).eligible[0]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.lists(st.floats(0.0, 1.0), min_size=5,
                                                    max_size=5)), min_size=1, max_size=80))
def test_staged_filters_never_overspend_or_retire_a_key_a_later_stage_admits(
        rounds: list[tuple[int, list[float]]]) -> None:
    """Rounds run at stages in the order of the stream (never back). Spent stays within B;
    a key retires exactly when no round of its current or a later stage fits what is left
    (so every retired key is refused by every stage still to come); ineligible keys pay 0."""
    budget, filters = _staged_filters(floor=0.3, sampling_rate=0.5)
    spent = np.zeros(5)
    retired = np.zeros(5, dtype=bool)
    stage = 0
    for bump, s2 in sorted(rounds, key=lambda r: r[0]):
        stage = max(stage, bump)
        flt = filters[stage]
        active = ~retired
        step = flt.step(spent[active], np.array(s2)[active])
        assert np.all(step.charges[~step.eligible] == 0.0)
        spent[active], retired[active] = step.spent, step.retired
        assert np.all(spent <= budget)
        later_min = min(f.stage_min_charge for f in filters[stage:])
        assert np.array_equal(retired[active], budget - spent[active] < later_min)
        for later in filters[stage:]:
            assert not np.any(later.step(spent[retired], np.ones(int(retired.sum())))
                              .eligible)
            assert not np.any(later.affords(spent[retired], later.stage_min_charge))


def test_staged_filters_share_one_order() -> None:
    from renyiboost.accounting import ChargeTable, IndividualRenyiFilter

    with pytest.raises(ValueError, match="one order"):
        IndividualRenyiFilter.staged(1.0, (ChargeTable(5.0, 1.0, 20), ChargeTable(9.0, 1.0, 21)),
                                     0.5)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_a_boosters_early_stage_does_not_retire_what_its_main_stage_admits(
        compiled: bool) -> None:
    """The booster's stages retire against the main stage's smallest charge: a pool that
    can no longer afford stage 0 stays active through a stage-0 round (charged nothing, in
    no sum) and is admitted by the main stage's."""
    params = SGBDTParams(epsilon=1.0, rounds=200, depth=2, sampling_rate=1.0,
                         init_share=0.0, learning_rate=0.5)
    booster = SGBDTBooster(params, SCHEMA, seed=4, stage_rounds=(20,))
    booster.compiled = compiled
    early, main = booster.stages
    assert early.filter.min_charge == main.filter.stage_min_charge
    rng = np.random.default_rng(0)
    pool = RecordPool.from_arrays(rng.random((200, 2)), rng.uniform(-1, 1, 200))
    pool.spent[:] = early.filter.budget_rdp - 2 * main.filter.stage_min_charge * (1 + 1e-9)
    outcome = booster.plan_round(pool, stage=0)
    assert outcome.n_eligible == 0 and not outcome.retired.any()
    np.testing.assert_array_equal(outcome.spent, pool.spent)
    outcome = booster.plan_round(pool, stage=None)
    assert outcome.n_eligible == 200 and np.all(outcome.spent <= main.filter.budget_rdp)
