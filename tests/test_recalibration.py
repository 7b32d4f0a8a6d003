"""A binary stream's answer recalibration (Platt's map refitted on windows of new keys):
its price, its noise, its step, and every path that answers or keeps it."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from conftest import read_topic

from renyiboost.accounting import gaussian_rdp
from renyiboost.accounting.platt import platt_sensitivities
from renyiboost.exceptions import TestingOnlyWarning
from renyiboost.models.defaults import RECALIBRATION_EVERY, RECALIBRATION_SHARE
from renyiboost.models.recalibration import (
    RecalibrationPolicy,
    RecalibrationState,
    platt_step,
    platt_sums,
    refit_due,
    sums_release,
)
from renyiboost.randomness import noise_source
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import EngineConfig, StreamEngine
from renyiboost.stream.sharded import ShardedEngine
from renyiboost.stream.store import SQLiteStore

warnings.simplefilter("ignore", TestingOnlyWarning)

SCHEMA = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)})
EVERY = 500  # a short window, so a test stream refits after 1,000 positions
POLICY = RecalibrationPolicy(every=EVERY, share=RECALIBRATION_SHARE)


def _rows(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """An imbalanced label (rate about 0.25) that depends on ``a``."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(4 * X[:, 0] - 3.5)))).astype(float)
    return X, y


def _config(epsilon: float | None = 1.0, **overrides) -> EngineConfig:
    overrides.setdefault("recalibration", POLICY if epsilon is not None else None)
    return EngineConfig.from_defaults(SCHEMA, "classification", epsilon, **overrides)


def _engine(store=None, seed: int = 0, **overrides) -> StreamEngine:
    return StreamEngine(_config(**overrides), store=store, seed=seed)


def _keys(start: int, stop: int) -> list[str]:
    return [str(i) for i in range(start, stop)]


# ---------------------------------------------------------------------- the mechanism
def test_the_five_sums_noise_is_the_gaussian_their_charge_pays_for() -> None:
    """Dividing each sum by its sensitivity leaves spherical noise of std z on a vector of
    L2 sensitivity √5; its RDP at α̂ is exactly the charge a key pays (share · B). Would
    fail if any sum's noise were smaller than its share of the charge allows."""
    cal = _engine().booster.calibration
    release = sums_release(POLICY, cal)
    assert release.charge == pytest.approx(RECALIBRATION_SHARE * cal.budget_rdp, rel=1e-12)
    stds = release.noise_stds
    multipliers = stds / platt_sensitivities(POLICY.margin_clip)
    np.testing.assert_allclose(multipliers, multipliers[0], rtol=1e-12)
    rdp = gaussian_rdp(multipliers[0] / math.sqrt(5), [cal.order])[0]
    assert rdp == pytest.approx(release.charge, rel=1e-9)
    assert sums_release(POLICY, None) is None  # without privacy: exact sums, no charge


def test_one_key_moves_each_sum_by_at_most_its_sensitivity() -> None:
    """Over extreme margins, labels and maps, adding one key moves every sum by at most
    ``c``, which the noise is scaled to. Would fail if the margins were not clipped."""
    rng = np.random.default_rng(3)
    c = platt_sensitivities(16.0)
    worst = np.zeros(5)
    for _ in range(2000):
        margin = rng.normal(0, 40, 1)
        y = rng.integers(0, 2, 1).astype(float)
        scale, offset = rng.uniform(0.05, 2.0), rng.uniform(-5, 5)
        worst = np.maximum(worst, np.abs(platt_sums(margin, y, scale, offset, 16.0)))
    assert np.all(worst <= c * (1 + 1e-12))
    assert np.all(worst >= 0.5 * c)  # the bounds are not loose by more than 2×


def test_exact_steps_find_the_map_of_an_overconfident_model() -> None:
    """Margins three times too large (truth σ(m/3 − 0.5)): exact Newton steps from the
    identity reach a ≈ 1/3 and b ≈ −0.5. Seeded; 20,000 keys a window."""
    rng = np.random.default_rng(5)
    scale, offset = 1.0, 0.0
    for _ in range(12):
        m = rng.normal(-1.5, 6.0, 20_000)
        y = (rng.uniform(size=m.size) < 1 / (1 + np.exp(-(m / 3 - 0.5)))).astype(float)
        scale, offset = platt_step(platt_sums(m, y, scale, offset, 16.0), np.zeros(5),
                                   scale, offset)
    assert abs(scale - 1 / 3) < 0.03 and abs(offset + 0.5) < 0.1


def test_noisy_steps_at_the_default_price_still_find_it() -> None:
    """The same at ε = 1's price for a key (5 % of its B) with the stream's noise on every
    window's sums: the ridge keeps noisy Hessians from throwing the step off. Seeded;
    tolerances 0.06 in a and 0.2 in b over the last four windows' mean."""
    cal = _engine().booster.calibration
    release = sums_release(RecalibrationPolicy(every=RECALIBRATION_EVERY,
                                               share=RECALIBRATION_SHARE), cal)
    rng, noise = np.random.default_rng(6), noise_source(6, warn=False)
    scale, offset, late = 1.0, 0.0, []
    for window in range(12):
        m = rng.normal(-1.5, 6.0, RECALIBRATION_EVERY)
        y = (rng.uniform(size=m.size) < 1 / (1 + np.exp(-(m / 3 - 0.5)))).astype(float)
        sums = platt_sums(m, y, scale, offset, 16.0) + noise.normal(5, release.noise_stds)
        scale, offset = platt_step(sums, release.noise_stds, scale, offset)
        if window >= 8:
            late.append((scale, offset))
    mean_scale, mean_offset = np.mean(late, axis=0)
    assert abs(mean_scale - 1 / 3) < 0.06 and abs(mean_offset + 0.5) < 0.2


def test_a_step_is_bounded_and_skipped_on_a_hessian_that_is_not_positive() -> None:
    assert platt_step(np.array([1e6, -1e6, 1.0, 0.0, 1.0]), np.zeros(5), 1.0, 0.0) == (
        1.5, -1.0)
    assert platt_step(np.array([1e6, 0.0, 1.0, 0.0, 1.0]), np.zeros(5), 1.9, 0.0)[0] == 2.0
    assert platt_step(np.array([5.0, 1.0, -3.0, 0.0, 1.0]), np.zeros(5), 0.7, 0.2) == (
        0.7, 0.2)


# ---------------------------------------------------------------------- the stream
def test_keys_pay_on_arrival_once_the_first_window_opens_and_the_refit_draws_its_noise(
) -> None:
    """Keys merged before one window pay nothing; new keys merged after it start with
    exactly share · B spent and add their sums (at the margins the merge computes for the
    pool); an upsert pays nothing
    more. At the second window the map is refitted from those sums with one draw of the
    noise they paid for (recomputed here from the same seeded state), and the window's
    sums are spent. Would fail if a key were under-charged, a sum left out, or the noise
    smaller."""
    X, y = _rows(1100, 1)
    engine = _engine(train_every=100_000)  # no trigger: merges by train(0), refits by train(1)
    engine.add(X[:300], y[:300], _keys(0, 300))
    engine.train(0)  # the initial score at position 300; no window yet
    assert not engine.recalibration.open
    engine.add(X[300:600], y[300:600], _keys(300, 600))
    margin = engine.ensemble.raw_margin(X[300:600])
    engine.train(0)  # merged at 600: the first window is open
    charge = RECALIBRATION_SHARE * engine.booster.calibration.budget_rdp
    spent = engine.active_pool().spent
    np.testing.assert_array_equal(spent[:300], 0.0)
    np.testing.assert_array_equal(spent[300:], charge)
    expected = platt_sums(margin, y[300:600], 1.0, 0.0, POLICY.margin_clip)
    np.testing.assert_allclose(engine.recalibration.sums, expected, rtol=1e-12)
    engine.add(X[:50], y[:50], _keys(0, 50))  # upserts: no charge, no sums
    engine.add(X[650:950], y[650:950], _keys(650, 950))  # position 950
    expected += platt_sums(engine.ensemble.raw_margin(X[650:950]), y[650:950], 1.0, 0.0,
                           POLICY.margin_clip)
    engine.train(0)
    assert engine.operator_budget_of("10").spent_rdp == 0.0
    sums = engine.recalibration.sums
    np.testing.assert_allclose(sums, expected, rtol=1e-12)
    assert engine.recalibration.refitted_at == 1 and engine.ensemble.answer_map is None
    engine.add(X[950:1000], y[950:1000], _keys(950, 1000))  # position 1,000: the refit
    state = engine.booster.noise.get_state()
    margin = engine.ensemble.raw_margin(X[950:1000])
    sums = sums + platt_sums(margin, y[950:1000], 1.0, 0.0, POLICY.margin_clip)
    engine.train(1)  # the refit comes with a tree, which carries it (train(0) refits nothing)
    release = sums_release(POLICY, engine.booster.calibration)
    twin = noise_source(0, warn=False)
    twin.set_state(state)
    noisy = twin.add_gaussian(sums, release.noise_stds)
    scale, offset = platt_step(noisy, release.noise_stds, 1.0, 0.0)
    assert engine.ensemble.answer_map == pytest.approx((scale, offset), rel=1e-12)
    assert engine.recalibration.refitted_at == 2
    np.testing.assert_array_equal(engine.recalibration.sums, 0.0)
    assert engine.operator_telemetry().recalibration == {
        "open": True, "refits": 1, "answer_map": [scale, offset]}
    ens = engine.ensemble
    plain = ens.init_score + ens.leaf_sum(X[:5], smoothed=True)
    np.testing.assert_allclose(engine.predict_margin(X[:5]), scale * plain + offset)


def test_the_policy_recalibrates_private_binary_streams_only() -> None:
    config = EngineConfig.from_defaults(SCHEMA, "classification", 1.0)
    assert config.recalibration == RecalibrationPolicy(every=RECALIBRATION_EVERY,
                                                       share=RECALIBRATION_SHARE)
    assert EngineConfig.from_defaults(SCHEMA, "classification", None).recalibration is None
    regression = PublicSchema(features={"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0))
    assert EngineConfig.from_defaults(regression, "regression", 1.0).recalibration is None
    three = PublicSchema(features={"a": (0.0, 1.0)}, labels=["x", "y", "z"])
    assert EngineConfig.from_defaults(three, "classification", 1.0).recalibration is None
    with pytest.raises(ValueError, match="private binary"):
        EngineConfig.from_defaults(regression, "regression", 1.0, recalibration=POLICY)
    with pytest.raises(ValueError, match="private binary"):
        EngineConfig.from_defaults(SCHEMA, "classification", None, recalibration=POLICY)


def test_a_short_stream_pays_nothing_and_answers_as_without_it() -> None:
    """Under one window the policy changes nothing: the same trees and answers as a stream
    without recalibration."""
    X, y = _rows(450, 2)
    with_it, without = _engine(), _engine(recalibration=None)
    for engine in (with_it, without):
        engine.add(X, y, _keys(0, 450))
        engine.finish()
    np.testing.assert_array_equal(with_it.ensemble.leaves, without.ensemble.leaves)
    assert with_it.operator_telemetry().recalibration == {
        "open": False, "refits": 0, "answer_map": [1.0, 0.0]}
    assert without.operator_telemetry().recalibration is None
    np.testing.assert_array_equal(with_it.predict_margin(X), without.predict_margin(X))


def test_a_hinted_stream_that_ends_before_the_first_refit_pays_nothing() -> None:
    """A size hint before two windows: no key pays up to the hint (the refit it would pay
    for comes after its expected end); a stream that outruns it opens its window then. A
    hint at two windows opens the first window after one."""
    X, y = _rows(2000, 10)
    short = _engine(expected_records=900)
    short.add(X[:900], y[:900], _keys(0, 900))
    short.flush()
    assert not short.recalibration.open and not short.recalibration.sums.any()
    short.add(X[900:], y[900:], _keys(900, 2000))
    assert short.recalibration.open and short.ensemble.answer_map is not None  # refit at 1,000 or later
    reaching = _engine(expected_records=2 * EVERY)
    reaching.add(X[:600], y[:600], _keys(0, 600))
    assert reaching.recalibration.open


def test_a_late_opening_waits_a_whole_window_for_its_first_refit() -> None:
    """A hinted stream that outruns its hint just before a window ends opens there but
    refits only when the next window ends: its first refit reads at least half a window
    of keys, never the handful merged since the opening. The telemetry counts refits."""
    X, y = _rows(1600, 10)
    late = _engine(expected_records=995)
    added = 0
    for stop in (995, 1010, 1500, 1600):
        late.add(X[added:stop], y[added:stop], _keys(added, stop))
        late.flush()
        added = stop
        state = late.recalibration
        if stop == 1010:  # opened at 996 or later, in window 1
            assert state.open and state.refits == 0 and late.ensemble.answer_map is None
            assert state.refitted_at == 2
    assert late.recalibration.refits == 1 and late.recalibration.refitted_at == 3
    assert late.operator_telemetry().recalibration["refits"] == 1



def test_the_opening_reads_positions_not_who_is_in_the_merge() -> None:
    """Neighbouring streams: one key's only record, in a stretch of positions that carry
    nothing usable, against an empty event at its position. The window opens, and the map
    is refitted, at the same positions in both (invariant 3): the opening once waited for
    a merge that carried records, so the stream without the key showed no map at a version
    where its neighbour showed one."""
    X, y = _rows(300, 10)
    policy = RecalibrationPolicy(every=100, share=RECALIBRATION_SHARE)
    seen = []
    for with_key in (True, False):
        engine = _engine(train_every=50, warmup=50, recalibration=policy)
        states = []
        for position in range(300):
            if 50 <= position < 100 and not (with_key and position == 75):
                engine.empty_event()
            else:
                engine.add(X[position:position + 1], y[position:position + 1], [str(position)])
            if (position + 1) % 50 == 0:
                state = engine.recalibration
                states.append((engine.positions, engine.release_version, state.open,
                               state.refits, engine.ensemble.answer_map is None))
        seen.append(states)
    assert seen[0] == seen[1]
    assert seen[0][-1][3] >= 1  # both refitted within the stream


@pytest.mark.parametrize("sharded", [False, True], ids=["single", "sharded"])
def test_no_refit_and_no_charge_after_the_last_round(sharded: bool) -> None:
    """The map reaches the model topic with the next version's tree; after ``max_rounds``
    there is none, so a refit then answered here and nowhere else (the engine's version 7
    and the topic's version 7 were two models), and keys paid for it. Once the rounds are
    spent nothing opens, refits or charges."""
    X, y = _rows(1400, 6)
    policy = RecalibrationPolicy(every=200, share=RECALIBRATION_SHARE)
    config = _config(rounds=6, max_rounds=6, train_every=50, warmup=50, recalibration=policy)
    engine = (ShardedEngine(config, [None, None], seed=0) if sharded
              else StreamEngine(config, seed=0))
    engine.add(X, y, _keys(0, 1400))
    release = engine.release()
    assert len(release.trees) == 6  # the last round at position 300
    assert release.answer_map is None and engine.recalibration.refits == 0  # 400, 600, …
    assert engine.operator_budget_of("1300").spent_rdp == 0.0

@pytest.mark.parametrize("sharded", [False, True], ids=["single", "sharded"])
def test_a_call_that_grows_no_tree_refits_nothing(sharded: bool) -> None:
    """``train(0)`` ("merge now") past a window's end refitted the map with no tree to carry
    it: the engine answered with the new map while the release of the same version held
    the old one (review U #6). The refit waits for the next call that grows a tree."""
    from renyiboost.models.batch import SGBDT

    X, y = _rows(1200, 7)
    policy = RecalibrationPolicy(every=200, share=RECALIBRATION_SHARE)
    config = _config(train_every=10**6, warmup=50, recalibration=policy)
    engine = (ShardedEngine(config, [None, None], seed=0) if sharded
              else StreamEngine(config, seed=0))
    engine.add(X, y, _keys(0, 1200))
    engine.train(1)  # the initial score and one tree
    engine.add(X, y, _keys(1200, 2400))
    engine.train(1)  # the window opens
    engine.add(X[:600], y[:600], _keys(2400, 3000))
    refits = engine.recalibration.refits
    assert refit_due(policy, engine.recalibration, engine.positions)
    version = engine.release().version
    engine.train(0)
    release = engine.release()
    assert engine.recalibration.refits == refits and release.version == version
    model = SGBDT.from_json(release.model_dump_json())
    np.testing.assert_allclose(model.predict_proba(X[:50])[:, 1],
                               1 / (1 + np.exp(-engine.predict_margin(X[:50]))), rtol=1e-9)
    engine.train(1)
    assert engine.recalibration.refits == refits + 1 and engine.release().answer_map is not None


def test_a_margin_clip_the_sums_cannot_hold_is_refused_by_the_config() -> None:
    """An infinite or huge ``margin_clip`` passed the config and a store pinned it; the first
    refit then failed on infinite noise, at every restart, and the pinned config refused a
    corrected one (review U #1). It is refused up front; the largest accepted refits."""
    from renyiboost.accounting.platt import MAX_MARGIN_CLIP
    from renyiboost.connectors.service import ModelConfig, engine_config

    table = {"task": "classification", "features": {"a": [0.0, 1.0], "b": [0.0, 1.0]}}
    for clip in (math.inf, math.nan, 1e200, MAX_MARGIN_CLIP * 1.01):
        with pytest.raises(ValueError, match="margin_clip"):
            engine_config(ModelConfig(**table, recalibration={
                "every": 200, "share": 0.05, "margin_clip": clip}))
    widest = RecalibrationPolicy(every=200, share=RECALIBRATION_SHARE,
                                 margin_clip=MAX_MARGIN_CLIP)
    X, y = _rows(1400, 8)
    engine = _engine(train_every=50, warmup=50, recalibration=widest)
    engine.add(X, y, _keys(0, 1400))
    assert engine.recalibration.refits >= 1
    assert np.isfinite(engine.predict_margin(X[:10])).all()


@pytest.mark.parametrize("snapshot_ratio", [0.0, 1e9], ids=["every", "never"])
def test_a_restart_keeps_the_map_the_open_windows_sums_and_the_charges(
        tmp_path, snapshot_ratio: float) -> None:
    """After a refit and in the middle of the next window, a crash and a restart give back
    the map, the window's exact sums and every key's charge, and the run then goes on
    exactly as one that never stopped (the next refit included)."""
    X, y = _rows(1700, 3)
    path = tmp_path / "state.db"
    first = _engine(SQLiteStore(path, create=True, snapshot_ratio=snapshot_ratio))
    straight = _engine()
    for engine in (first, straight):
        engine.add(X[:1300], y[:1300], _keys(0, 1300))
    first.flush()
    assert first.ensemble.answer_map is not None and first.recalibration.sums.any()
    first.store.close()  # a crash
    again = _engine(SQLiteStore(path, snapshot_ratio=snapshot_ratio))
    straight.flush()
    assert again.recalibration.as_json() == straight.recalibration.as_json()
    np.testing.assert_array_equal(again.active_pool().spent, straight.active_pool().spent)
    for engine in (again, straight):
        engine.add(X[1300:], y[1300:], _keys(1300, 1700))
    assert again.recalibration.refitted_at == 3
    assert again.recalibration.as_json() == straight.recalibration.as_json()
    np.testing.assert_array_equal(again.predict_margin(X[:100]), straight.predict_margin(X[:100]))


def test_every_release_path_answers_with_the_map() -> None:
    """The public release carries ``(a, b)`` and no count; a follower, a batch model read
    from the release and the ONNX export answer as the engine."""
    from renyiboost.connectors.kafka import ModelFollower
    from renyiboost.models.batch import SGBDT

    X, y = _rows(1200, 4)
    engine = _engine()
    engine.add(X, y, _keys(0, 1200))
    release = engine.release()
    ens = engine.ensemble
    assert release.answer_map == ens.answer_map is not None
    dumped = release.model_dump()
    assert "sums" not in str(dumped) and "recalibration" not in dumped
    follower = ModelFollower.without_consumer()  # no broker: the releases are applied directly
    follower._apply(release)
    np.testing.assert_allclose(follower.ensemble.predict_margin(X[:200]),
                               engine.predict_margin(X[:200]), rtol=1e-12)
    batch = SGBDT.from_json(release.model_dump_json())
    np.testing.assert_allclose(batch.predict_proba(X[:200])[:, 1],
                               1 / (1 + np.exp(-engine.predict_margin(X[:200]))), rtol=1e-9)
    one = engine.ensemble.predict_margin_one(X[0])
    assert one == pytest.approx(engine.predict_margin(X[:1])[0], rel=1e-12)


@pytest.mark.parametrize("sharded", [False, True], ids=["single", "sharded"])
def test_a_version_is_released_as_it_was_answered_however_late_it_is_published(
        tmp_path, sharded: bool) -> None:
    """Every version's release, asked for at any time later (a publisher behind after a
    failed publish, across a restart from the stores), is the one asked for when it was
    new: the map it was answered with, not a later refit's, and the hinted grid's spans
    only from the grid's first tree on. Before, 50 of 53 versions went out with the
    newest map."""
    X, y = _rows(2600, 3)
    config = _config(warmup=50, train_every=50, expected_records=2600)
    paths = [tmp_path / f"s{k}.db" for k in range(2 if sharded else 1)]

    def opened(create: bool) -> StreamEngine | ShardedEngine:
        stores = [SQLiteStore(path, create=create) for path in paths]
        return (ShardedEngine(config, stores, seed=0) if sharded
                else StreamEngine(config, store=stores[0], seed=0))

    def released(engine: StreamEngine | ShardedEngine, version: int) -> dict:
        message = json.loads(engine.release(after=version - 1, upto=version).model_dump_json())
        del message["epoch"]  # the process's, not the version's
        return message

    engine = opened(create=True)
    live: dict[int, dict] = {}
    for start in range(0, 2600, 50):
        engine.add(X[start:start + 50], y[start:start + 50], _keys(start, start + 50))
        for version in range(len(live) + 1, engine.release_version + 1):
            live[version] = released(engine, version)
    maps = [message.get("answer_map") for message in live.values()]
    spans = [message.get("smoothing_spans") for message in live.values()]
    assert maps[0] is None and len({tuple(m) for m in maps if m is not None}) >= 3
    assert spans[0] is None and spans[-1] is not None
    engine.close()
    again = opened(create=False)
    assert [v for v in live if released(again, v) != live[v]] == []
    again.close()


def test_the_onnx_export_folds_the_map_into_its_trees() -> None:
    ort = pytest.importorskip("onnxruntime")
    from renyiboost.export import to_onnx

    X, y = _rows(1200, 5)
    engine = _engine()
    engine.add(X, y, _keys(0, 1200))
    model = to_onnx(engine.release())
    session = ort.InferenceSession(model.SerializeToString())
    _, proba = session.run(None, {"X": X[:300]})
    expected = 1 / (1 + np.exp(-engine.predict_margin(X[:300])))
    np.testing.assert_allclose(np.asarray(proba)[:, 1], expected, atol=1e-5)


# ---------------------------------------------------------------------- shards
def test_a_sharded_stream_refits_as_one_engine_does() -> None:
    """Two shards' exact sums add up to the single engine's, get the noise once, and give
    the same map and the same charges (seeded; γ = 1, so the rounds are the same too)."""
    X, y = _rows(1300, 6)
    keys = _keys(0, 1300)
    single = _engine(seed=3)
    sharded = ShardedEngine(_config(), [None, None], seed=3)
    single.add(X, y, keys)
    sharded.add(X, y, keys)
    single.flush()
    sharded.shards.all("flush")
    assert single.ensemble.answer_map is not None
    assert sharded.booster.ensemble.answer_map == pytest.approx(single.ensemble.answer_map,
                                                                rel=1e-9)
    for key in ("5", "700", "1299"):
        assert sharded.operator_budget_of(key).spent_rdp == pytest.approx(
            single.operator_budget_of(key).spent_rdp, rel=1e-9)
    total = sum(state.sums for state in sharded.shards.all("recalibration_state"))
    np.testing.assert_allclose(total, single.recalibration.sums, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(sharded.predict_margin(X[:50]), single.predict_margin(X[:50]),
                               rtol=1e-9)


def test_a_shard_that_missed_a_refits_commit_takes_it_when_reopened(tmp_path) -> None:
    """A crash between the shards' commits of a refit: reopened, the shard that missed it
    commits the same map with its window's sums spent, and both answer with it."""
    X, y = _rows(900, 7)
    paths = [tmp_path / "s0.db", tmp_path / "s1.db"]
    stores = [SQLiteStore(p, create=True) for p in paths]
    sharded = ShardedEngine(_config(), stores, seed=1)
    sharded.add(X, y, _keys(0, 900))
    total = sum(sharded.shards.all("recalibration_sums"))
    assert total.any()
    done = RecalibrationState(True, 2, np.zeros(5), 0.6, -0.3)
    sharded.shards.one(0, "commit_recalibration", done)  # shard 1 crashes before its commit
    sharded.close()
    again = ShardedEngine(_config(), [SQLiteStore(p) for p in paths], seed=1)
    for state in again.shards.all("recalibration_state"):
        assert state.as_json() == done.as_json()
    ens = again.booster.ensemble
    assert ens.answer_map == (0.6, -0.3)
    again.close()


def test_a_reshard_moves_the_map_and_the_open_windows_sums(tmp_path) -> None:
    """``renyiboost reshard`` gives the new shards the map, and the open window's sums
    split among them with nothing lost or counted twice."""
    from renyiboost.stream.reshard import reshard
    from renyiboost.stream.sharded import create_shard_stores, shard_locations

    X, y = _rows(1300, 8)
    config = _config()
    old = shard_locations(str(tmp_path), 2)
    create_shard_stores(config, old)
    engine = ShardedEngine(config, old, seed=2)
    engine.add(X, y, _keys(0, 1300))
    engine.shards.all("flush")
    ens = engine.booster.ensemble
    answer = ens.answer_map
    sums = sum(state.sums for state in engine.shards.all("recalibration_state"))
    assert answer is not None and sums.any()
    engine.close()
    new = shard_locations(str(tmp_path), 3, alone=False)
    reshard(config, old, new)
    after = ShardedEngine(config, new, seed=2)
    states = after.shards.all("recalibration_state")
    np.testing.assert_allclose(sum(state.sums for state in states), sums, rtol=1e-12)
    assert {(state.scale, state.offset, state.refitted_at) for state in states} == {
        (*answer, 2)}
    ens = after.booster.ensemble
    assert ens.answer_map == answer
    after.close()


def test_a_store_written_before_the_recalibration_resumes_without_it(tmp_path) -> None:
    """A store whose pinned configuration predates the field opens with
    ``recalibration=None`` (what it ran with), and the default is refused naming the
    field: the keys' budgets were never meant to pay for a refit."""
    import sqlite3

    from renyiboost import SGBDTClassifier
    from renyiboost.exceptions import LedgerConflict

    path = tmp_path / "old.db"
    X, y = _rows(300, 9)
    engine = _engine(SQLiteStore(path, create=True), recalibration=None)
    engine.add(X, y, _keys(0, 300))
    engine.close()
    with sqlite3.connect(path) as db:  # the fingerprint as a version before it wrote it
        (text,) = db.execute("SELECT value FROM meta WHERE name = 'config'").fetchone()
        config = json.loads(text)
        del config["recalibration"]
        db.execute("UPDATE meta SET value = ? WHERE name = 'config'", (json.dumps(config),))
    again = _engine(SQLiteStore(path), recalibration=None)
    assert again.positions == 300
    again.close()
    refused = SQLiteStore(path)
    with pytest.raises(LedgerConflict, match="recalibration"):
        _engine(refused)
    # the refusing engine released the store (and its lock): the right arguments open it
    model = SGBDTClassifier(dict(SCHEMA.features), store=str(path), recalibration=None,
                            seed=0)
    assert model.engine.config.recalibration is None
    model.engine.close()
    with pytest.raises(LedgerConflict, match="recalibration"):
        SGBDTClassifier(dict(SCHEMA.features), store=str(path), seed=0)


def test_a_model_table_sets_or_switches_off_the_recalibration() -> None:
    """``renyiboost train``'s ``[model]`` table: left out, the policy's; a table of its
    own, that; ``false`` (TOML has no null), none."""
    from renyiboost.connectors.service import ModelConfig, engine_config

    table = {"task": "classification", "features": {"a": [0.0, 1.0]}}
    assert engine_config(ModelConfig(**table)).recalibration.every == RECALIBRATION_EVERY
    mine = engine_config(ModelConfig(**table, recalibration={"every": 5000, "share": 0.1}))
    assert (mine.recalibration.every, mine.recalibration.share) == (5000, 0.1)
    assert engine_config(ModelConfig(**table, recalibration=False)).recalibration is None


def test_the_model_topic_carries_the_map_and_a_follower_answers_with_it(
        kafka_bootstrap, tmp_path) -> None:
    """End to end on a real broker: the versions released after the first refit carry
    ``answer_map`` (the ones before it none), and a follower of the model topic answers
    each probe with the engine's recalibrated probability."""
    from test_kafka import _produce, _settings, _topic

    from renyiboost.connectors.kafka import KafkaTrainer, ModelFollower, event_json

    X, y = _rows(1300, 11)
    topic = _topic("recalibrated")
    _produce(kafka_bootstrap, topic, [
        (f"k{i}".encode(), event_json(f"k{i}", {"a": float(a), "b": float(b)}, float(label)))
        for i, ((a, b), label) in enumerate(zip(X, y, strict=True))], partition=0)
    engine = _engine(SQLiteStore(tmp_path / "s.db", create=True))
    trainer = KafkaTrainer(engine, _settings(kafka_bootstrap, topic))
    trainer.run(max_idle=3.0)
    assert trainer.consumed == 1300 and engine.ensemble.answer_map is not None
    follower = ModelFollower(kafka_bootstrap, f"{topic}.models", "abalone")
    follower.wait_for(engine.release_version)
    probes = [{"a": float(a), "b": float(b)} for a, b in X[:100]]
    expected = 1 / (1 + np.exp(-engine.predict_margin(X[:100])))
    got = [follower.predict_proba_one(x)[1] for x in probes]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    follower.close()
    messages = [json.loads(m.value()) for m in
                read_topic(kafka_bootstrap, f"{topic}.models", engine.release_version)]
    maps = [message.get("answer_map") for message in messages]
    first = next(i for i, value in enumerate(maps) if value is not None)
    assert 0 < first and all(value is not None for value in maps[first:])
    assert tuple(maps[-1]) == engine.ensemble.answer_map
    # each version with the map it was answered with, though a poll published many at once
    assert len({tuple(value) for value in maps[first:]}) == engine.recalibration.refits
    assert [None if value is None else tuple(value) for value in maps] == [
        engine.recalibration.answer_map_at(message["version"]) for message in messages]
