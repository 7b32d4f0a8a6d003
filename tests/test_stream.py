"""The streaming engine and the River estimators: budgets, keys, stores, bad input."""

from __future__ import annotations

import _thread
import contextlib
import copy
import dataclasses
import json
import sqlite3
import threading
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from river import checks

from renyiboost import SGBDTClassifier, SGBDTRegressor
from renyiboost.exceptions import (
    EngineClosed,
    InvalidRecord,
    LedgerConflict,
    SchemaMismatchWarning,
    StateStoreError,
    TestingOnlyWarning,
)
from renyiboost.models import kernels
from renyiboost.models.booster import SGBDTParams
from renyiboost.models.defaults import finish_trees
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import EngineConfig, StreamEngine
from renyiboost.stream.positions import PositionRuns, latest_offsets, offset_positions
from renyiboost.stream.store import SQLiteStore

warnings.simplefilter("ignore", TestingOnlyWarning)

FEATURES = {"a": (0.0, 1.0), "b": (-5.0, 5.0), "c": ["x", "y", "z"]}


def _stream(n: int, seed: int = 0) -> list[tuple[dict, float]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = {"a": float(rng.uniform()), "b": float(rng.uniform(-5, 5)),
             "c": ["x", "y", "z"][rng.integers(3)]}
        y = float(np.clip(2 * x["a"] + (x["c"] == "y") + rng.normal(0, 0.1), 0, 3))
        out.append((x, y))
    return out


def _regressor(**kwargs) -> SGBDTRegressor:
    params = {"features": FEATURES, "target_bounds": (0.0, 3.0), "epsilon": 1.0, "rounds": 6, "depth": 2,
                  "sampling_rate": 0.5, "learning_rate": 0.5, "grad_clip": 0.5, "train_every": 25,
                  "warmup": 25, "seed": 7}
    return SGBDTRegressor(**(params | kwargs))


# --------------------------------------------------------------------- River's own checks


def _river_checks():
    for cls in (SGBDTRegressor, SGBDTClassifier):
        for i, params in enumerate(cls._unit_test_params()):
            model = cls(**params)
            for check in checks.yield_checks(model):
                yield pytest.param(model, check, id=f"{cls.__name__}{i}-{check.__name__}")


@pytest.mark.parametrize(("model", "check"), list(_river_checks()))
def test_river_check_estimator(model, check) -> None:
    if check.__name__ in model._unit_test_skips():
        pytest.skip("declared in _unit_test_skips")
    check(model.clone())


# --------------------------------------------------------------------- budgets and keys


@settings(max_examples=25, deadline=None)
@given(
    keys=st.lists(st.integers(0, 40), min_size=50, max_size=400),
    seed=st.integers(0, 10_000),
    individual=st.booleans(),
)
def test_no_key_ever_spends_more_than_its_budget(keys: list[int], seed: int, individual) -> None:
    model = _regressor(rounds=3, train_every=10, warmup=10, seed=seed,
                       individual_filter=individual)
    engine = model.engine
    budget = engine.booster.calibration.budget_rdp
    seen_retired: set[int] = set()
    for (x, y), key in zip(_stream(len(keys), seed), keys, strict=True):
        model.learn_one(x, y, key=key)
        assert np.all(engine.pool.spent <= budget)
        # a retired key never comes back into the active pool
        active = {int(k) for k, uid in engine._keys.items() if engine._status[uid] == 1}
        assert not (active & seen_retired)
        seen_retired |= {int(k) for k in keys if model.operator_budget_of(k).status == "retired"}
    report = model.operator_telemetry()
    assert report.max_spent_rdp <= budget
    assert report.n_retired == len(seen_retired)


def test_upsert_replaces_features_and_keeps_the_spent_budget() -> None:
    model = _regressor(train_every=30, warmup=30)
    for i, (x, y) in enumerate(_stream(60)):
        model.learn_one(x, y, key=i % 30)
    before = model.operator_budget_of(3)
    assert before.status == "active" and before.spent_rdp > 0
    engine = model.engine
    n_active = len(engine.pool)
    model.learn_one({"a": 0.99, "b": 4.0, "c": "z"}, 2.5, key=3)
    engine._merge_pending()
    assert len(engine.pool) == n_active  # replaced, not appended
    row = engine.pool.X[engine._slot[engine._keys["3"]]]
    assert row.tolist() == [0.99, 4.0, 2.0]
    assert model.operator_budget_of(3).spent_rdp == before.spent_rdp


def test_retired_keys_are_dropped_and_counted() -> None:
    model = _regressor(rounds=2, sampling_rate=1.0, train_every=20, warmup=20)
    data = _stream(400)
    for i, (x, y) in enumerate(data[:200]):
        model.learn_one(x, y, key=i % 20)
    retired = [k for k in range(20) if model.operator_budget_of(k).status == "retired"]
    assert retired, "with T = 2 and γ = 1 keys must retire"
    dropped = model.operator_telemetry().n_dropped
    for x, y in data[200:240]:
        model.learn_one(x, y, key=retired[0])
    assert model.operator_telemetry().n_dropped == dropped + 40
    assert engine_has_no(model, retired[0])
    # a retired key's records still count as stream positions (the schedule must not learn
    # who retired), one at a time and in a batch
    assert model.engine.positions == 240
    import pandas as pd

    frame = pd.DataFrame([x for x, _ in data[240:300]])
    model.learn_many(frame, pd.Series([y for _, y in data[240:300]]), keys=[retired[0]] * 60)
    assert model.engine.positions == 300
    assert model.operator_telemetry().n_dropped == dropped + 100


def engine_has_no(model: SGBDTRegressor, key: int) -> bool:
    engine = model.engine
    return engine._keys[str(key)] not in set(engine.active_pool().uids.tolist())


def test_cached_margins_stay_equal_to_the_model_with_upserts_and_max_trees() -> None:
    model = _regressor(max_trees=4, rounds=20, train_every=20, warmup=20)
    for i, (x, y) in enumerate(_stream(600)):
        model.learn_one(x, y, key=i % 150)
    engine = model.engine
    assert engine.ensemble.n_trees == 4 and engine.booster.rounds_done > 4
    active = engine.active_pool()  # retired rows keep their last margin until compacted
    # training's margins are the trees' unsmoothed sum; answers average it over shifts
    np.testing.assert_allclose(active.margin, engine.ensemble.raw_margin(active.X), atol=1e-12)
    assert not np.allclose(active.margin, engine.predict_margin(active.X), atol=1e-6)


def test_learns_a_signal_on_a_long_stream() -> None:
    model = _regressor(rounds=20, depth=3, epsilon=2.0, train_every=200, warmup=200,
                       trees_per_trigger=2)
    data = _stream(6000, seed=3)
    for x, y in data[:5000]:
        model.learn_one(x, y)
    pred = np.array([model.predict_one(x) for x, _ in data[5000:]])
    y = np.array([y for _, y in data[5000:]])
    r2 = 1 - ((y - pred) ** 2).sum() / ((y - y.mean()) ** 2).sum()
    assert r2 > 0.5


# --------------------------------------------------------------------- the SQLite store


def _fill(model, data, keys) -> None:
    for (x, y), key in zip(data, keys, strict=True):
        model.learn_one(x, y, key=key)


@pytest.mark.parametrize("snapshot_ratio", [0.0, 0.3, 1e9], ids=["every", "some", "never"])
def test_retired_rows_wait_for_compaction_and_a_restart_continues_the_same_run(
    tmp_path, snapshot_ratio: float
) -> None:
    """Retired keys' rows stay in the pool's arrays until they are a quarter of it; round
    events charge the active rows only, so a restart (whose pool starts compacted) replays
    the same charges and then trains exactly as the run that never stopped."""
    data, keys = _stream(1200, seed=3), [i % 120 for i in range(1200)]
    settings = {"rounds": 3, "sampling_rate": 1.0, "train_every": 20, "warmup": 20}
    straight = _regressor(**settings)
    lazy_rows_seen = compactions = 0
    for (x, y), key in zip(data, keys, strict=True):
        before = len(straight.engine.pool)
        straight.learn_one(x, y, key=key)
        engine = straight.engine
        lazy_rows_seen += bool(engine.pool.retired.any())
        compactions += len(engine.pool) < before
        assert engine.n_active == int((~engine.pool.retired).sum())
    assert lazy_rows_seen and compactions  # both happened along the way
    path = tmp_path / "state.db"
    first = _regressor(store=SQLiteStore(path, create=True, snapshot_ratio=snapshot_ratio),
                       **settings)
    stop = 0
    while stop < 600 or not first.engine.pool.retired.any():  # stop with retired rows held
        _fill(first, data[stop:stop + 20], keys[stop:stop + 20])  # up to a trigger: committed
        stop += 20
    first.engine.store.close()  # a crash: the restore replays the rounds since the snapshot
    again = _regressor(store=SQLiteStore(path, snapshot_ratio=snapshot_ratio), **settings)
    _fill(again, data[stop:], keys[stop:])
    np.testing.assert_array_equal(again.engine.ensemble.leaves, straight.engine.ensemble.leaves)
    for name in ("uids", "X", "margin", "spent"):
        np.testing.assert_array_equal(getattr(again.engine.active_pool(), name),
                                      getattr(straight.engine.active_pool(), name))
    assert again.engine.spent_rdp().tolist() == straight.engine.spent_rdp().tolist()


def test_a_replay_that_computes_other_charges_is_refused(tmp_path, monkeypatch) -> None:
    """A round's charges are stored as a digest and computed again on restore; a restore
    whose computation differs (here: one code changed) must refuse, not restore budgets
    that are not the committed ones."""
    from renyiboost.models.booster import SGBDTBooster

    path = tmp_path / "state.db"
    first = _regressor(store=SQLiteStore(path, create=True, snapshot_ratio=1e9))
    _fill(first, _stream(300), [i % 50 for i in range(300)])
    first.engine.store.close()  # a crash: every round is replayed
    assert _regressor(store=SQLiteStore(path)).engine.booster.rounds_done > 3  # replays fine
    replay = SGBDTBooster.replay_outcome

    def other_machine(self, pool, features, thresholds, leaves, stage=None):
        outcome = replay(self, pool, features, thresholds, leaves, stage)
        codes = outcome.codes.copy()
        active = np.flatnonzero(~pool.retired)
        codes[active[0]] ^= 1  # one key charged one grid step differently
        digest = int(kernels.codes_digest(codes[active]))
        return dataclasses.replace(outcome, codes=codes, codes_digest=digest)

    monkeypatch.setattr(SGBDTBooster, "replay_outcome", other_machine)
    with pytest.raises(StateStoreError, match="does not reproduce the charges"):
        _regressor(store=SQLiteStore(path))


def test_a_clean_close_leaves_nothing_to_replay(tmp_path) -> None:
    path = tmp_path / "state.db"
    first = _regressor(store=SQLiteStore(path, create=True, snapshot_ratio=1e9))
    _fill(first, _stream(300), [i % 50 for i in range(300)])
    ledger = {k: first.operator_budget_of(k) for k in range(50)}
    first.engine.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0
    db.close()
    again = _regressor(store=SQLiteStore(path))
    assert {k: again.operator_budget_of(k) for k in range(50)} == ledger


def test_a_dataframe_marks_missing_values_as_pandas_does() -> None:
    """``pd.DataFrame(dicts)`` puts NaN where a dict lacked a key, stores integer categories
    with a gap as floats, and extension columns hold ``pd.NA``: learn_many refused all of
    these (the integer categories on every row that had a value) while the learn_one loop
    over the same dicts learned them. Both now build the same model and answer alike."""
    features = {"a": (0.0, 1.0), "grade": [1, 2, 3], "c": ["x", "y"]}
    rows = [{"a": 0.2, "grade": 1, "c": "x"}, {"grade": 2, "c": "y"}, {"a": 0.7, "c": "x"},
            {"a": 0.9, "grade": 3}] * 30
    labels = [0.1, 0.5, 0.3, 0.9] * 30
    keys = [str(i) for i in range(len(rows))]

    def model() -> SGBDTRegressor:
        return SGBDTRegressor(features, target_bounds=(0.0, 1.0), epsilon=1.0, seed=4,
                              warmup=20, train_every=20)

    one, many = model(), model()
    for x, y, key in zip(rows, labels, keys, strict=True):
        one.learn_one(x, y, key=key)
    frame = pd.DataFrame(rows)
    assert frame["a"].isna().any() and frame["grade"].dtype == float
    many.learn_many(frame, pd.Series(labels), keys=keys)
    assert one.release().trees == many.release().trees and one.release().trees
    expected = [one.predict_one(x) for x in rows[:4]]
    assert list(many.predict_many(frame[:4])) == expected
    extension = frame[:4].astype({"a": "Float64", "grade": "Int64"})  # pd.NA
    assert list(many.predict_many(extension)) == expected
    with pytest.raises(InvalidRecord, match="'a' is inf"):
        many.learn_many(pd.DataFrame({"a": [np.inf]}), [0.5])


def test_learn_one_takes_key_and_no_other_keyword() -> None:
    """A weight or a misspelt key once vanished into ``**kwargs``: ``w=100`` was ignored and
    ``user_id="alice"`` left the record keyless (a fresh budget per record, not per
    person). River's Pipeline routes by the signature, so ``key`` still reaches the model."""
    from river import compose

    model = _regressor()
    x, y = _stream(1)[0]
    for keyword in ({"w": 100.0}, {"user_id": "alice"}, {"keys": "bob"}):
        with pytest.raises(TypeError, match="unexpected keyword"):
            model.learn_one(x, y, **keyword)
    assert model.engine.positions == 0
    pipeline = compose.Select("a", "b") | model
    pipeline.learn_one(x, y, key="alice")
    assert model.operator_budget_of("alice").status != "unknown"


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "sqlite"])
def test_a_closed_model_answers_but_learns_no_more(tmp_path, durable: bool) -> None:
    """``close()`` releases the store and its lock; a closed model once went on accepting
    records (in memory it kept training; on SQLite it lost them and then failed with
    "cannot schedule new futures after shutdown"). Now it refuses at once, and answers."""
    store = SQLiteStore(tmp_path / "state.db", create=True) if durable else None
    model = _regressor(store=store)
    data = _stream(300)
    _fill(model, data, list(range(300)))
    answer = model.predict_one(data[0][0])
    model.close()
    for learn in (lambda: model.learn_one(*data[0], key=1),
                  lambda: model.learn_many(pd.DataFrame([data[0][0]]), [data[0][1]]),
                  model.train, model.finish):
        with pytest.raises(EngineClosed, match="closed"):
            learn()
    assert model.predict_one(data[0][0]) == answer
    if durable:  # the store is free for the next engine, which holds all 300 records
        again = _regressor(store=SQLiteStore(tmp_path / "state.db"))
        assert again.engine.positions == 300
        again.close()


@pytest.mark.parametrize("snapshot_ratio", [0.0, 0.3, 1e9], ids=["every", "some", "never"])
def test_restart_from_sqlite_restores_ledger_trees_and_predictions(
    tmp_path, snapshot_ratio: float
) -> None:
    """Snapshots at every commit, now and then, or never (restore replays every event)."""
    path = tmp_path / "state.db"
    data = _stream(900, seed=1)
    keys = [i % 300 for i in range(900)]
    first = _regressor(store=SQLiteStore(path, create=True, snapshot_ratio=snapshot_ratio),
                       max_trees=8)
    _fill(first, data[:500], keys[:500])
    first.train(1)  # a batch boundary: the pending records are merged and committed
    probe = [x for x, _ in data[:50]]
    expected = [first.predict_one(x) for x in probe]
    ledger = {k: first.operator_budget_of(k) for k in range(300)}
    report = first.operator_telemetry()
    first.engine.store.close()  # a crash (a clean close would leave nothing to replay)

    again = _regressor(store=f"sqlite:///{path}", max_trees=8)
    assert [again.predict_one(x) for x in probe] == expected
    assert {k: again.operator_budget_of(k) for k in range(300)} == ledger
    got = again.operator_telemetry()
    # pending records are re-read on restart; the outside-domain counts are per process
    changed = {"n_pending", "epoch", "positions", "outside_domain"}
    assert got.model_dump(exclude=changed) == report.model_dump(exclude=changed)
    assert got.epoch == report.epoch + 1
    restored, live = again.engine.active_pool(), first.engine.active_pool()
    np.testing.assert_array_equal(restored.margin, live.margin)
    np.testing.assert_array_equal(restored.spent, live.spent)
    np.testing.assert_array_equal(restored.uids, live.uids)
    np.testing.assert_array_equal(again.engine.ensemble.leaves, first.engine.ensemble.leaves)
    assert again.engine.offsets == first.engine.offsets

    # Resuming continues exactly like an uninterrupted run (seeded noise state is stored).
    uninterrupted = _regressor(max_trees=8)
    _fill(uninterrupted, data[:500], keys[:500])
    uninterrupted.train(1)
    _fill(uninterrupted, data[500:], keys[500:])
    _fill(again, data[500:], keys[500:])
    np.testing.assert_array_equal(again.engine.ensemble.leaves,
                                  uninterrupted.engine.ensemble.leaves)
    assert again.operator_budget_of(5) == uninterrupted.operator_budget_of(5)


def test_a_store_refuses_a_different_configuration(tmp_path) -> None:
    path = tmp_path / "s.db"
    model = _regressor(store=SQLiteStore(path, create=True))
    _fill(model, _stream(60), list(range(60)))
    model.engine.close()
    with pytest.raises(LedgerConflict, match="different config") as refused:
        _regressor(store=str(path), epsilon=2.0)
    # the refusal names what differs, so an operator knows which argument to pass; the
    # whole values (3 KB on the command's one line) are notes, for a traceback
    assert "config.params.epsilon: 1.0 stored, 2.0 given" in str(refused.value)
    assert len(str(refused.value)) < 400
    assert [note[:8] for note in refused.value.__notes__] == ["stored: ", "given:  "]


def test_a_store_from_before_a_learner_field_resumes_with_the_value_it_ran_with(
    tmp_path,
) -> None:
    """A store written before ``smoothing``, ``logistic_gradient``,
    ``reg_lambda_noise_stds`` and ``mains_cycles`` existed holds a config without them; it
    ran as with 0, "clipped", 0 and None, so passing those resumes it with the same trees,
    and anything else (the policy's smoothing, proper gradients, a λ raised by the noise,
    pair trees after 20 a feature) is refused. A field a store does hold is never
    overridden by the older default."""
    path = tmp_path / "old.db"
    old = {"smoothing": 0, "logistic_gradient": "clipped", "reg_lambda_noise_stds": 0.0,
           "mains_cycles": None, "epsilon": 4.0, "expected_records": 10_000}
    model = SGBDTClassifier({"a": (0.0, 1.0)}, store=SQLiteStore(path, create=True), seed=3,
                            **old)
    rng = np.random.default_rng(5)
    for i in range(300):
        x = float(rng.uniform())
        model.learn_one({"a": x}, bool(rng.uniform() < x), key=i)
    trees = model.engine.ensemble.n_trees
    model.engine.close()
    with sqlite3.connect(path) as db:  # what an earlier version wrote: none of them
        (stored,) = db.execute("SELECT value FROM meta WHERE name = 'config'").fetchone()
        config = json.loads(stored)
        for field in ("smoothing", "logistic_gradient", "reg_lambda_noise_stds",
                      "mains_cycles"):
            del config["params"][field]
        db.execute("UPDATE meta SET value = ? WHERE name = 'config'", (json.dumps(config),))
    again = SGBDTClassifier({"a": (0.0, 1.0)}, store=str(path), seed=3, **old)
    assert again.engine.ensemble.n_trees == trees
    again.engine.close()
    for changed in ({"smoothing": 1 / 32}, {"logistic_gradient": "proper"},
                    {"reg_lambda_noise_stds": 0.8}, {"mains_cycles": 20}):
        with pytest.raises(LedgerConflict, match="different config"):
            SGBDTClassifier({"a": (0.0, 1.0)}, store=str(path), seed=3, **(old | changed))
    fresh = tmp_path / "new.db"
    SGBDTClassifier({"a": (0.0, 1.0)}, store=SQLiteStore(fresh, create=True),
                    **(old | {"smoothing": 1 / 32})).engine.close()
    with pytest.raises(LedgerConflict, match="different config"):
        SGBDTClassifier({"a": (0.0, 1.0)}, store=str(fresh), **old)



def test_a_hinted_store_from_before_the_schedule_beyond_its_end_resumes(tmp_path) -> None:
    """A hinted store written before the schedule beyond the hinted end holds no
    ``max_train_every_beyond_end``; it ran as with ``None``, which resumes it with the
    hint's trees a trigger, from the estimators and from a ``[model]`` table (``false``:
    TOML has no null). The keyword was neither an estimator's nor left the hint's trees a
    trigger (given alone it counted as a schedule of one's own), so such a store could not
    resume; the policy's value is refused."""
    from renyiboost.connectors.service import ModelConfig, engine_config

    path = tmp_path / "old.db"
    old = {"features": {"a": (0.0, 1.0)}, "target_bounds": (0.0, 1.0), "epsilon": 1.0,
           "expected_records": 50, "seed": 3}
    model = SGBDTRegressor(**old, store=SQLiteStore(path, create=True),
                           max_train_every_beyond_end=None)
    assert model.engine.config.trees_per_trigger == 20
    rng = np.random.default_rng(5)
    for i in range(120):
        x = float(rng.uniform())
        model.learn_one({"a": x}, x, key=i)
    trees = model.engine.ensemble.n_trees
    model.engine.close()
    with sqlite3.connect(path) as db:  # what an earlier version wrote: no such field
        (stored,) = db.execute("SELECT value FROM meta WHERE name = 'config'").fetchone()
        config = json.loads(stored)
        del config["max_train_every_beyond_end"]
        db.execute("UPDATE meta SET value = ? WHERE name = 'config'", (json.dumps(config),))
    with pytest.raises(LedgerConflict, match="max_train_every_beyond_end: None stored, 49"):
        SGBDTRegressor(**old, store=str(path))
    again = SGBDTRegressor(**old, store=str(path), max_train_every_beyond_end=None)
    assert again.engine.ensemble.n_trees == trees
    again.engine.close()
    table = ModelConfig(features={"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0),
                        expected_records=50, max_train_every_beyond_end=False)
    assert engine_config(table) == again.engine.config
    with pytest.raises(ValueError, match="max_train_every_beyond_end"):  # true is not 1
        ModelConfig(features={"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0),
                    expected_records=50, max_train_every_beyond_end=True)

class _FailingStore(SQLiteStore):
    def __init__(self, path, fail_at: int, create: bool = True) -> None:
        super().__init__(path, create=create)
        self.calls, self.fail_at = 0, fail_at

    def commit(self, change) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            raise OSError("disk full (injected)")
        super().commit(change)


def test_a_restart_resumes_an_interrupted_finish_and_never_runs_a_finished_one_again(
    tmp_path,
) -> None:
    """finish()'s position and first round are in every commit's state: after a crash in
    the middle of its burst the restored stream runs only the rounds the burst had not
    committed, and after a finished burst a call at the same position runs none, so a
    restart never spends the budget of a second burst on the same end."""
    path = tmp_path / "finish.db"
    model = _regressor(store=SQLiteStore(path, create=True))
    _fill(model, _stream(110), list(range(110)))
    model.engine.close()
    burst = finish_trees("regression", model.engine.config.params.rounds)
    assert burst == 3
    crashed = _regressor(store=_FailingStore(path, fail_at=3, create=False))
    before = crashed.engine.booster.rounds_done
    with pytest.raises(OSError, match="injected"):
        crashed.finish()  # the end's split grid and the burst's first round are committed
    crashed.engine.close()
    again = _regressor(store=SQLiteStore(path))
    assert again.engine.booster.rounds_done == before + 1
    grid = again.engine.released_grid
    assert grid is not None  # and finishing again buys no second one:
    assert again.finish() == burst - 1
    assert again.engine.released_grid is grid
    assert again.engine.booster.rounds_done == before + burst
    spent = again.engine.active_pool().spent.copy()
    again.engine.close()
    finished = _regressor(store=SQLiteStore(path))
    assert finished.finish() == 0
    assert finished.engine.booster.rounds_done == before + burst
    np.testing.assert_array_equal(finished.engine.active_pool().spent, spent)
    finished.learn_one(*_stream(1, seed=9)[0], key="late")
    assert finished.finish() == burst  # a later end is a new burst


def test_a_tree_cap_bounds_the_end_burst_and_warns_of_triggers_larger_than_it() -> None:
    """Under ``max_trees`` a ``finish()`` burst larger than the cap charged every key in
    its first trees and then dropped them as its last ones came (review M: a burst of 25
    rounds kept 5). The burst now runs at most ``max_trees`` rounds, so each key is charged
    for kept trees only; the policy's own trigger and hinted burst fit under the cap too,
    and an explicit one larger than it is warned about."""
    capped, uncapped = _regressor(rounds=40, max_trees=4), _regressor(rounds=40)
    data = _stream(100)
    for model in (capped, uncapped):
        _fill(model, data, list(range(100)))
    before = capped.engine.booster.rounds_done
    assert before == uncapped.engine.booster.rounds_done
    spent = capped.engine.active_pool().spent.copy()
    assert finish_trees("regression", 40) == 20
    assert uncapped.finish(split_grid=False) == 20
    assert capped.finish(split_grid=False) == 4
    assert capped.engine.booster.rounds_done == before + 4
    assert capped.engine.booster.ensemble.n_trees == 4
    charge = capped.engine.booster.calibration.round_charge  # a full-gradient round's
    grown = capped.engine.active_pool().spent - spent
    assert 0 < grown.max() <= 4 * charge * (1 + 1e-9)
    schema = PublicSchema.model_validate({"features": FEATURES, "target_bounds": (0.0, 3.0)})
    hinted = EngineConfig.from_defaults(schema, "regression", 1.0,
                                        expected_records=5_000, max_trees=3)
    assert hinted.final_trees == 3 and hinted.trees_per_trigger <= 3
    with pytest.warns(UserWarning, match="max_trees=3 keeps fewer trees than one trigger"):
        EngineConfig.from_defaults(schema, "regression", 1.0, expected_records=5_000,
                                   max_trees=3, final_trees=6)


def test_an_install_that_fails_after_its_commit_stops_the_engine() -> None:
    """A round committed and then not installed (a depth-0 ensemble once failed to take its
    second tree) left the engine with the pool before the round: the next trigger released
    the same round again, charged as if it were the only one, 18 times over in one run.
    The engine now stops, as after a failed commit."""
    model = _regressor()
    engine = model.engine
    announced: list[int] = []
    engine.listeners.append(lambda event: announced.append(getattr(event, "round", -1)))
    data = _stream(400)
    original = type(engine.booster.ensemble).append
    calls = {"n": 0}

    def append_once_failing(ensemble, *args):
        calls["n"] += 1
        if calls["n"] == 2:
            raise ZeroDivisionError("injected")
        original(ensemble, *args)

    engine.booster.ensemble.append = append_once_failing.__get__(engine.booster.ensemble)
    with pytest.raises(ZeroDivisionError, match="injected"):
        _fill(model, data, list(range(400)))
    with pytest.raises(StateStoreError, match="failed commit or install"):
        model.learn_one(data[0][0], data[0][1], key="more")
    assert engine.booster.rounds_done == 1 and announced.count(1) <= 1


@pytest.mark.parametrize("write_behind", [True, False], ids=["write-behind", "in-line"])
def test_a_failed_commit_releases_nothing(tmp_path, write_behind: bool) -> None:
    """Invariant 4: the tree of a round whose commit failed is never visible, nor announced;
    the store keeps exactly what was announced."""
    store = _FailingStore(tmp_path / "f.db", fail_at=3)
    model = _regressor(store=store)
    engine = model.engine
    engine.write_behind = write_behind
    announced: list[tuple[int, np.ndarray]] = []
    engine.listeners.append(lambda event: announced.append(
        (engine.booster.ensemble.n_trees, engine.pool.spent[~engine.pool.retired].copy())))
    data = _stream(200)
    with pytest.raises(OSError, match="injected"):
        _fill(model, data, list(range(200)))
    # commit 1: initial score, commit 2: tree 1, commit 3 (tree 2) failed
    assert [n for n, _ in announced] == [0, 1]
    for output in (lambda: engine.ensemble, lambda: model.predict_one(data[0][0]),
                   lambda: engine.release(), lambda: engine.release_version,
                   lambda: model.learn_one(data[0][0], data[0][1])):
        with pytest.raises(StateStoreError, match="failed commit"):  # stopped for good
            output()
    engine.close()
    again = _regressor(store=SQLiteStore(tmp_path / "f.db"))
    assert again.engine.ensemble.n_trees == 1
    spent = announced[-1][1]
    committed = again.engine.n_active
    np.testing.assert_array_equal(again.engine.active_pool().spent, spent[:committed])
    # records merged after the last commit were never charged; the source re-reads them
    assert np.all(spent[committed:] == 0.0)
    again.engine.close()


class _GatedStore(SQLiteStore):
    """A store whose commits wait for the test to open the gate (a slow disk)."""

    def __init__(self, path) -> None:
        super().__init__(path, create=True)
        self.gate, self.entered = threading.Event(), threading.Event()
        self.committed = 0

    def commit(self, change) -> None:
        self.entered.set()
        assert self.gate.wait(10), "the test never opened the gate"
        super().commit(change)
        self.committed += 1


def test_write_behind_keeps_a_round_invisible_until_its_commit_returns(tmp_path) -> None:
    """Invariant 4 with write-behind: while a round's commit is in flight the round is
    computed (the next one can start) but no reader sees it: predictions, releases, the
    version and the listeners all wait for the commit."""
    store = _GatedStore(tmp_path / "w.db")
    model = _regressor(store=store, train_every=10**6, warmup=1)
    engine = model.engine
    assert engine.write_behind  # the default for a durable store
    announced: list[int] = []
    engine.listeners.append(lambda event: announced.append(store.committed))
    data = _stream(60)
    for i, (x, y) in enumerate(data[:59]):
        model.learn_one(x, y, key=i)
    store.gate.set()
    engine.train(1)  # the initial score and a first tree, committed
    assert engine.release_version == 2 and announced == [1, 2]
    before = model.predict_one(data[0][0])
    store.gate.clear()
    store.entered.clear()
    engine.train(1)  # returns with its commit in flight
    assert store.entered.wait(10) and engine.booster.rounds_done == 2
    seen: dict[str, object] = {}
    reads = {"version": lambda: engine.release_version,
             "prediction": lambda: model.predict_one(data[0][0]),
             "trees": lambda: len(engine.release().trees),
             "offsets": lambda: engine.offsets}
    readers = [threading.Thread(target=lambda n=name, f=read: seen.update({n: f()}))
               for name, read in reads.items()]
    for reader in readers:
        reader.start()
    readers[-1].join(0.3)
    assert all(r.is_alive() for r in readers) and not seen and announced == [1, 2]
    store.gate.set()
    for reader in readers:
        reader.join(10)
    assert seen["version"] == 3 and seen["trees"] == 2 and announced == [1, 2, 3]
    assert seen["prediction"] != before
    engine.close()
    again = _regressor(store=SQLiteStore(tmp_path / "w.db"), train_every=10**6, warmup=1)
    assert again.engine.release_version == 3
    assert again.predict_one(data[0][0]) == seen["prediction"]
    again.engine.close()


def test_a_reader_on_another_thread_never_sees_a_round_installed_after_its_wait(
        tmp_path) -> None:
    """A reader that had waited for the commit in flight then read the model while a
    learning call on another thread handed its round to the write-behind committer and
    installed it: it answered with a tree not yet durable, whose commit could still fail
    (review E, 29 November). The round is now committed and installed under the lock the
    reader holds from its wait to its read: the learning call waits for the read."""
    store = _GatedStore(tmp_path / "r.db")
    store.gate.set()
    model = _regressor(store=store, train_every=10**6, warmup=1)
    engine = model.engine
    for i, (x, y) in enumerate(_stream(40)):
        model.learn_one(x, y, key=i)
    engine.train(1)
    rows = np.random.default_rng(3).uniform(0, 1, (5, 3))
    committed = engine.predict_margin(rows)
    waited, go = threading.Event(), threading.Event()
    real_check = engine._refuse_in_group

    def wait_then_pause(what: str) -> None:  # a reader preempted after its wait, before
        real_check(what)  # its read (the check runs between them)
        waited.set()
        assert go.wait(10)

    engine._refuse_in_group = wait_then_pause
    seen: dict[str, np.ndarray] = {}
    reader = threading.Thread(target=lambda: seen.update(p=engine.predict_margin(rows)))
    reader.start()
    assert waited.wait(10)
    store.gate.clear()
    learner = threading.Thread(target=engine.train, args=(1,))
    learner.start()
    learner.join(0.3)
    assert learner.is_alive()  # its round waits for the read
    go.set()
    reader.join(10)
    del engine._refuse_in_group
    np.testing.assert_array_equal(seen["p"], committed)
    store.gate.set()
    learner.join(10)
    assert engine.release_version == 3
    assert not np.array_equal(engine.predict_margin(rows), committed)
    engine.close()


def test_a_listener_error_is_raised_after_the_call_whose_rounds_all_ran(tmp_path) -> None:
    """Raised where the next commit waited, a listener's error stopped a batch between its
    trigger and its rounds and dropped the rest of the batch (10 positions of 60 counted, 2
    rounds of 18; the owed round ran only after a restart): review E. It is raised once the
    call has done all its work, which is what a call without the error does."""
    def run(flaky: bool) -> tuple[int, int, int]:
        engine = StreamEngine(EngineConfig(
            public_schema=PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)},
                                       target_bounds=(0.0, 3.0)),
            params=SGBDTParams(epsilon=1.0, rounds=30, depth=2, sampling_rate=0.5,
                               learning_rate=0.5, grad_clip=0.5),
            train_every=10, warmup=10, trees_per_trigger=3),
            store=SQLiteStore(tmp_path / f"{flaky}.db", create=True), seed=1)
        heard: list[object] = []

        def listener(event) -> None:
            heard.append(event)
            if flaky and len(heard) == 3:
                raise RuntimeError("listener failed (injected)")

        engine.listeners.append(listener)
        rows = np.random.default_rng(0).uniform(size=(60, 2))
        if flaky:
            with pytest.raises(RuntimeError, match="injected"):
                engine.add(rows, np.ones(60), [f"k{i}" for i in range(60)])
        else:
            engine.add(rows, np.ones(60), [f"k{i}" for i in range(60)])
        engine.wait_durable()  # the error was raised once: nothing more here
        result = (engine.positions, engine.rounds_done, len(heard))
        engine.close()
        return result

    assert run(True) == run(False) == (60, 18, 19)
    # a shard's refit is installed outside a learning call: a failure before its commit
    # reached the store leaves the map the engine answers with and releases as it was
    engine = _regressor().engine
    before = engine.recalibration

    def refused(*args, **kwargs) -> None:
        raise RuntimeError("a listener raised while the commit waited (injected)")

    engine._commit = refused
    with pytest.raises(RuntimeError, match="injected"):
        engine.install_recalibration(dataclasses.replace(before, refits=before.refits + 1))
    assert engine.recalibration is before


def test_a_listeners_error_met_by_a_reader_goes_to_the_next_learning_call(tmp_path) -> None:
    """A prediction that announced the last commit's outputs raised the listener's error (a
    publisher's, on a serving thread) while the learner never heard of it (review D4 #7),
    and so did operator telemetry (review D5). The reader now answers, and the next learning
    call (or ``close()``) raises the error once it is done."""
    engine = StreamEngine(EngineConfig(
        public_schema=PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)},
                                   target_bounds=(0.0, 3.0)),
        params=SGBDTParams(epsilon=1.0, rounds=30, depth=2, learning_rate=0.5,
                           grad_clip=0.5),
        train_every=10, warmup=10), store=SQLiteStore(tmp_path / "l.db", create=True), seed=1)
    armed = threading.Event()

    def listener(event) -> None:
        if armed.is_set():
            armed.clear()
            raise RuntimeError("the publisher failed (injected)")

    engine.listeners.append(listener)
    rows = np.random.default_rng(0).uniform(size=(80, 2))
    engine.add(rows[:60], np.ones(60), [f"k{i}" for i in range(60)])  # a round at 60
    armed.set()
    engine.predict_margin(rows[:5])  # announces that round: the reader answers
    assert not armed.is_set()  # the listener did raise
    with pytest.raises(RuntimeError, match="injected"):
        engine.add(rows[60:], np.ones(20), [f"k{i}" for i in range(60, 80)])
    assert engine.positions == 80
    armed.set()  # operator telemetry (a metrics thread) announces the round at 80 likewise
    assert engine.operator_telemetry().positions == 80
    assert not armed.is_set()
    with pytest.raises(RuntimeError, match="injected"):
        engine.close()  # the store is released, then the kept error is raised


def test_a_listener_may_hand_a_read_to_another_thread_and_a_group_refuses_other_readers(
        tmp_path) -> None:
    """Review D3 (29 November): listeners ran under the lock a reader now holds, so one that
    handed ``release()`` to another thread and waited for it hung for good; a reader on
    another thread that came between two rounds of a group commit read a round the group
    had not committed; a listener's error held back by a call that raised its own reached
    a later, unrelated caller. Now listeners run outside the lock (a reader announces only
    when no other thread does), a group refuses readers of every thread once a round of it
    is installed (the check and the install share the lock), and the held error goes with
    the call's own."""
    from concurrent.futures import ThreadPoolExecutor

    for store in (None, SQLiteStore(tmp_path / "l.db", create=True)):
        engine = _regressor(store=store, train_every=10**6, warmup=1).engine
        pool, versions = ThreadPoolExecutor(1), []
        engine.listeners.append(
            lambda event, engine=engine, pool=pool, versions=versions: versions.append(
                pool.submit(engine.release, "m").result(10).version))
        rows = np.random.default_rng(2).uniform(0, 1, (40, 3))
        engine.add(rows, np.ones(40), [f"k{i}" for i in range(40)])
        engine.train(2)
        engine.wait_durable()
        assert versions == [1, 2, 3]
        pool.shutdown()
        engine.close()
    engine = _regressor(store=_GatedStore(tmp_path / "g.db"), train_every=10**6,
                        warmup=1).engine
    engine.store.gate.set()
    engine.add(np.random.default_rng(3).uniform(0, 1, (40, 3)), np.ones(40),
               [f"k{i}" for i in range(40)])
    engine.train(1)
    seen: dict[str, object] = {}

    def read() -> None:
        try:
            seen["v"] = engine.release_version
        except RuntimeError as refused:
            seen["v"] = refused

    reader = threading.Thread(target=read)
    with engine.group_commit():
        engine.train(1)
        reader.start()
        reader.join(10)  # refused on another thread too, never answered with the round
        with pytest.raises(RuntimeError, match="group commit"):
            engine.release_version  # noqa: B018 - as on the group's own thread
    assert isinstance(seen["v"], RuntimeError) and "group commit" in str(seen["v"])
    assert engine.release_version == 3
    engine.close()
    # a listener's error in a call that raised its own goes with it, and only with it
    engine = _regressor(train_every=10, warmup=10).engine
    heard: list[object] = []

    def failing(event) -> None:
        heard.append(event)
        raise RuntimeError("listener failed (injected)")

    engine.listeners.append(failing)
    labels = np.ones(30)
    labels[-1] = np.nan
    with pytest.raises(InvalidRecord, match="1 of 30 rows") as raised:
        engine.add(np.random.default_rng(4).uniform(0, 1, (30, 3)), labels,
                   [f"n{i}" for i in range(30)])
    assert heard and any("listener failed" in note for note in raised.value.__notes__)
    engine.wait_durable()  # nothing left for another caller
    assert engine.release_version >= 2
    # a listener's error owed at close: raised, and the store is released all the same (the
    # estimator's flush raised it and its close never ran: the store stayed locked, D4)
    model = _regressor(store=SQLiteStore(tmp_path / "c.db", create=True),
                       train_every=10**6, warmup=1)
    for i, (x, y) in enumerate(_stream(40)):
        model.learn_one(x, y, key=i)
    model.engine.train(1)
    model.engine.wait_durable()
    model.engine.listeners.append(failing)
    model.engine.train(1)  # its announcement is still owed (write-behind)
    with pytest.raises(RuntimeError, match="injected"):
        model.close()
    assert model.engine.closed
    _regressor(store=SQLiteStore(tmp_path / "c.db"), train_every=10**6,
               warmup=1).engine.close()  # not locked


def test_the_engines_add_one_refuses_bad_input_whole_and_counts_its_position() -> None:
    """``add_one`` registered the key before its row or label failed to convert: the next
    record then joined the previous key's ledger and the buffers went out of step; a NaN
    label made every later release fail; a bad key lost the position (review E). Now a
    refused record changes nothing but its position, which counts as an empty one."""
    model = _regressor(train_every=10, warmup=10)
    engine = model.engine
    engine.add_one(np.array([0.1, 0.1, 0.0]), 0.5, "alice")
    for row, label, key in ((["x", 0.5, 0.0], 2.0, "bob"),
                            ([0.5, 0.5, 0.0], float("nan"), "bob"),
                            ([0.5], 2.0, "bob"), ([0.5, 0.5, 0.0], 2.0, 1.5)):
        with pytest.raises((ValueError, TypeError)):
            engine.add_one(row, label, key)
    # the NaN label and the float key count their positions; the malformed rows (the
    # caller's error, as add() treats a wrong shape) do not
    assert engine.positions == 3 and engine.n_pending == 1 and "bob" not in engine._keys
    engine.add_one(np.array([0.9, 0.9, 1.0]), 3.0, "carol")
    for i in range(20):
        engine.add_one(np.array([0.5, 0.5, 2.0]), 1.0, f"k{i}")
    engine.wait_durable()
    carol = engine._slot[engine._keys["carol"]]
    np.testing.assert_array_equal(engine.pool.X[carol], [0.9, 0.9, 1.0])
    assert np.all(np.isfinite(engine.predict_margin(np.array([[0.5, 0.5, 0.0]]))))


def test_a_bad_key_in_a_batch_with_checked_labels_keeps_its_position() -> None:
    """``add(..., labels_checked=True)`` checked no key: one the key's normalisation refused
    lost every position of the call (review E); its row is an empty position now, the
    others are learned, and the error names it. An integer key of 5,000 digits raised
    ``str()``'s ``ValueError`` past the refusal that counts the position."""
    engine = _regressor(train_every=10**6, warmup=10**6).engine
    rows = np.random.default_rng(1).uniform(size=(5, 3))
    with pytest.raises(InvalidRecord, match="1 of 5 rows were not learned; row 2"):
        engine.add(rows, np.ones(5), ["a", "b", 2.5, "d", "e"], labels_checked=True)
    assert engine.positions == 5 and engine.n_pending == 4
    model = _regressor()
    with pytest.raises(InvalidRecord, match="more than 256 digits"):
        model.learn_one({"a": 0.5, "b": 0.5, "c": "x"}, 1.0, key=10**5000)
    with pytest.raises(InvalidRecord, match="1 of 2 rows"):
        model.learn_many(pd.DataFrame({"a": [0.1, 0.2], "b": [0.3, 0.4], "c": ["x", "y"]}),
                         [1.0, 2.0], keys=[1, 10**5000])
    assert model.engine.positions == 3


def test_a_listener_that_raises_leaves_the_ledger_whole(tmp_path) -> None:
    """A listener's exception reaches the caller, but nothing the pool holds is missing from
    the store (every record a new key, so a lost merge would leave keys the store never
    saw): a restart replays to the very same ledger."""
    path = tmp_path / "listener.db"
    model = _regressor(store=SQLiteStore(path, create=True, snapshot_ratio=1e9))
    calls = []

    def flaky(event) -> None:
        calls.append(event)
        if len(calls) == 3:
            raise RuntimeError("listener failed (injected)")

    model.engine.listeners.append(flaky)
    failed = 0
    for i, (x, y) in enumerate(_stream(300)):
        try:
            model.learn_one(x, y, key=i)
        except RuntimeError:
            failed += 1
    assert failed == 1 and len(calls) > 5
    ledger = {k: model.operator_budget_of(k) for k in range(300)}
    model.engine.store.close()  # a crash: every round is replayed
    again = _regressor(store=SQLiteStore(path))
    assert {k: again.operator_budget_of(k) for k in range(300)} == ledger
    again.engine.close()


# --------------------------------------------------------------------- bad input


def test_bad_input_raises_clear_errors_and_leaves_the_pool_untouched() -> None:
    model = _regressor()
    _fill(model, _stream(30), list(range(30)))
    engine = model.engine
    state = (len(engine.pool), engine.n_pending, engine.pool.spent.copy())
    with pytest.raises(ValueError, match="'a' is inf"):
        model.learn_one({"a": float("inf"), "b": 0.0}, 1.0)
    with pytest.raises(ValueError, match="'b' is numeric"):
        model.learn_one({"a": 0.5, "b": "high"}, 1.0)
    with pytest.raises(ValueError, match="outside the public target_bounds"):
        model.learn_one({"a": 0.5}, 7.0)
    with pytest.raises(ValueError, match="finite"):
        model.learn_one({"a": 0.5}, float("inf"))
    assert (len(engine.pool), engine.n_pending) == state[:2]
    np.testing.assert_array_equal(engine.pool.spent, state[2])
    with pytest.raises(InvalidRecord, match="unknown feature 'zzz'") as caught:
        model.learn_one({"a": 0.5, "zzz": 1, "www": 2}, 1.0)  # never silently ignored
    assert caught.value.reason == "schema"
    with pytest.raises(InvalidRecord, match="must be a number, got str") as caught:
        model.learn_one({"a": 0.5}, "2")  # a numeric string is not a label here either
    assert caught.value.reason == "label"
    with pytest.raises(InvalidRecord, match="mapping") as caught:
        model.learn_one([0.5, 1.0], 1.0)  # type: ignore[arg-type]
    with pytest.raises(InvalidRecord, match="finite"):
        model.learn_one({"a": float("inf")}, 1.0)
    with pytest.raises(InvalidRecord, match="empty") as caught:
        model.learn_one({"a": 0.5}, 1.0, key="")
    assert caught.value.reason == "key"
    assert (len(engine.pool), engine.n_pending) == state[:2]
    assert engine.positions == 30 + 9  # every call is a stream position, valid or not
    model.learn_one({}, 1.0)  # all features missing: the fixed branch
    assert engine.n_pending == state[1] + 1


def test_classifier_labels_and_probabilities() -> None:
    model = SGBDTClassifier({"a": (0.0, 1.0)}, epsilon=1.0, rounds=3, train_every=10, warmup=10)
    assert model.predict_proba_one({"a": 0.3}) == {False: 0.5, True: 0.5}
    with pytest.raises(ValueError, match="0/1"):
        model.learn_one({"a": 0.3}, 2)
    with pytest.raises(ValueError, match="target_bounds"):
        SGBDTClassifier({"a": (0.0, 1.0)}, target_bounds=(0, 1))


def test_learn_one_copies_its_input() -> None:
    model = _regressor()
    x = {"a": 0.1, "b": 1.0, "c": "x"}
    model.learn_one(x, 1.0)
    snapshot = copy.deepcopy(x)
    x["a"] = 0.9
    assert model.engine._pending_rows[-1].ravel()[0] == snapshot["a"]


def test_engine_config_validation_names_the_field() -> None:
    schema = PublicSchema(features=FEATURES, target_bounds=(0.0, 3.0))
    with pytest.raises(ValueError, match="train_every"):
        EngineConfig(public_schema=schema, params=SGBDTParams(), train_every=0)
    engine = StreamEngine(EngineConfig(public_schema=schema, params=SGBDTParams(epsilon=1.0)))
    assert engine.operator_telemetry().n_trees == 0


def test_a_group_commit_is_all_or_nothing(tmp_path) -> None:
    """Rounds inside group_commit() become durable together, and only then are announced."""
    store = _FailingStore(tmp_path / "g.db", fail_at=2)
    model = _regressor(store=store, train_every=20, warmup=20)
    engine, announced = model.engine, []
    engine.listeners.append(announced.append)
    data = _stream(200)
    with engine.group_commit():
        _fill(model, data[:60], list(range(60)))  # initial score and three rounds: one commit
        with pytest.raises(RuntimeError, match="group commit"):
            model.predict_one(data[0][0])
        # the version and the trees inside were the engine's, ahead of the store
        for read in (lambda: engine.release_version, lambda: engine.ensemble):
            with pytest.raises(RuntimeError, match="group commit is durable"):
                read()
    assert store.calls == 1 and len(announced) == 4
    held = engine.ensemble  # a copy: a failed round later does not show in it
    assert held is not engine.booster.ensemble and held.n_trees == 3
    with pytest.raises(OSError, match="injected"), engine.group_commit():
        _fill(model, data[60:120], list(range(60, 120)))
    assert len(announced) == 4  # the failed group announced nothing
    assert held.n_trees == 3
    engine.close()
    again = _regressor(store=SQLiteStore(tmp_path / "g.db"), train_every=20, warmup=20)
    assert again.engine.booster.rounds_done == 3 and again.engine.ensemble.n_trees == 3


def test_an_exception_inside_a_group_after_its_rounds_stops_the_engine(tmp_path) -> None:
    """The group's rounds ran in memory and will never commit; continuing (or a closing
    snapshot) would build on state the store does not have."""
    path = tmp_path / "raise.db"
    model = _regressor(store=SQLiteStore(path, create=True), train_every=20, warmup=20)
    engine = model.engine
    data = _stream(200)
    _fill(model, data[:60], list(range(60)))
    committed = engine.release_version
    with pytest.raises(KeyError, match="the caller's own failure"), engine.group_commit():
        _fill(model, data[60:120], list(range(60, 120)))  # three more rounds
        raise KeyError("the caller's own failure")
    with pytest.raises(StateStoreError, match="stopped"):
        model.learn_one(data[0][0], data[0][1])
    with pytest.raises(StateStoreError, match="stopped"):
        model.predict_one(data[0][0])
    engine.close()
    again = _regressor(store=SQLiteStore(path), train_every=20, warmup=20)
    assert again.engine.release_version == committed
    again.engine.close()


# --------------------------------------------------------------------- schema guardrails


def test_values_outside_the_public_bounds_warn_once_per_feature_and_are_counted() -> None:
    model = _regressor(train_every=1000, warmup=1000)
    with pytest.warns(SchemaMismatchWarning, match="'a'.*outside its public bounds"):
        model.learn_one({"a": 100.0, "b": 0.0, "c": "x"}, 1.0, key="k1")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SchemaMismatchWarning)
        model.learn_one({"a": -3.0}, 1.0, key="k2")  # 'a' again: counted, no second warning
    with pytest.warns(SchemaMismatchWarning, match="'c'.*'other' branch"):
        model.learn_one({"c": "w"}, 1.0, key="k3")
    with pytest.raises(InvalidRecord):
        model.learn_one({"b": 99.0}, 7.0, key="k4")  # refused: its clipping is not counted
    assert model.operator_telemetry().outside_domain == {"a": 2, "c": 1}


def test_the_kafka_batch_counts_what_learn_one_counts() -> None:
    import json

    from renyiboost.connectors.events import EventParser

    rng = np.random.default_rng(4)
    records = [({"a": float(rng.uniform(-1, 2)), "b": float(rng.uniform(-9, 9)),
                 "c": str(rng.choice(["x", "y", "w"]))}, float(rng.uniform(-1, 4)))
               for _ in range(300)]
    one, batch = _regressor(), _regressor()
    for x, y in records:
        with contextlib.suppress(InvalidRecord):
            one.learn_one(x, y, key="k")
    EventParser(batch.engine.validator).parse_batch(
        [json.dumps({"x": x, "y": y}).encode() for x, y in records], [b"k"] * len(records))
    counts = one.operator_telemetry().outside_domain
    assert counts == batch.operator_telemetry().outside_domain and sum(counts.values()) > 100


def test_a_schema_whose_names_match_no_record_fails_loudly() -> None:
    from river.datasets import synth

    stream = synth.Friedman(seed=1)  # integer feature names 0..9
    model = SGBDTRegressor({f"x{i}": (0.0, 1.0) for i in range(10)}, target_bounds=(-5, 35),
                           seed=1)
    x, y = next(iter(stream.take(1)))
    with pytest.raises(InvalidRecord, match="unknown feature 0"):
        model.learn_one(x, y, key="k")


def test_a_schema_feature_that_never_arrives_warns_or_with_strict_is_refused() -> None:
    import json

    import pandas as pd

    from renyiboost.connectors.events import EventParser

    data = [({"a": x["a"], "b": x["b"]}, y) for x, y in _stream(60)]  # 'c' never comes
    lenient = _regressor(train_every=20, warmup=20)
    with pytest.warns(SchemaMismatchWarning, match=r"\['c'\].*first 20 stream positions"):
        _fill(lenient, data, list(range(60)))
    assert lenient.operator_telemetry().features_not_arrived == ["c"]
    with warnings.catch_warnings():  # made an error, the warning stops no release
        warnings.simplefilter("error", SchemaMismatchWarning)
        erring = _regressor(train_every=20, warmup=20)
        with pytest.raises(SchemaMismatchWarning):
            _fill(erring, data[:20], list(range(20)))
        _fill(erring, data[20:], list(range(20, 60)))
    assert erring.engine.release_version == lenient.engine.release_version > 1
    strict = _regressor(train_every=20, warmup=20, strict=True)
    for i, (x, y) in enumerate(data):
        with pytest.raises(InvalidRecord, match="'c' is absent"):
            strict.learn_one(x, y, key=i)
    # refused records are empty events: the schedule is the lenient model's, position for position
    assert strict.engine.release_version == lenient.engine.release_version > 0
    strict.learn_one({**data[0][0], "c": None}, data[0][1], key=0)  # None: explicitly missing
    with pytest.raises(InvalidRecord, match="2 of 2 rows"):
        strict.learn_many(pd.DataFrame([data[0][0], data[1][0]]), pd.Series([1.0, 2.0]))
    parser = EventParser(strict.engine.validator)
    batch = parser.parse_batch([json.dumps({"x": data[0][0], "y": 1.0}).encode()], [b"k"])
    assert batch.rejected[0][1].reason == "schema" and "absent" in batch.rejected[0][1].detail


def test_a_feature_that_stops_arriving_warns_once_but_a_sparse_one_does_not() -> None:
    """A producer that drops or renames a field mid-stream: the model reads it as missing
    from then on. 'b' arrives in every one of the first 400 records and then in none of 300:
    one warning, and the operator telemetry lists it until it comes back. 'c' arrives in
    every 20th record and then in none of 300: 16 values overdue at its rate, under the 20
    that call a feature stopped, so it is not named."""
    import warnings

    data = _stream(750, seed=4)
    rows = [{"a": x["a"], "b": x["b"]} | ({"c": x["c"]} if i % 20 == 0 else {})
            for i, (x, _) in enumerate(data[:400])]
    rows += [{"a": x["a"]} for x, _ in data[400:700]]
    model = _regressor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, (x, (_, y)) in enumerate(zip(rows, data, strict=False)):
            model.learn_one(x, y, key=i)
    said = [str(w.message) for w in caught if issubclass(w.category, SchemaMismatchWarning)]
    assert len(said) == 1, said
    assert said[0].startswith("feature 'b' had a value in 100% of the first 400 records")
    telemetry = model.engine.operator_telemetry()
    assert telemetry.features_stopped == ["b"] and telemetry.features_not_arrived == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", SchemaMismatchWarning)
        for i, (x, y) in enumerate(data[700:], start=700):
            model.learn_one(x, y, key=i)  # 'b' is back
    assert model.engine.operator_telemetry().features_stopped == []


def test_a_restarted_stream_judges_a_features_gaps_from_the_restart(tmp_path) -> None:
    """The pool a restart reads holds each key's latest record in the order keys first
    came, not the stream's order. 'b' is absent from every key's first event and present
    when the key returns 600 events later, so live it is in half the events to the end; read
    from the pool as a stream, the newest keys (not back yet) made a gap of 300, and the
    reopened engine called 'b' stopped."""
    import warnings

    rng = np.random.default_rng(0)
    events = []
    for k in range(1500):
        events.append((str(k), {"a": float(rng.uniform())}))  # a first visit, without 'b'
        if k >= 300:  # an older key returns, with 'b'
            events.append((str(k - 300), {"a": float(rng.uniform()), "b": 1.0}))
    path = tmp_path / "s.db"
    settings = {"train_every": 50, "warmup": 50}
    model = _regressor(store=SQLiteStore(path, create=True), **settings)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SchemaMismatchWarning)  # 'c' never comes
        warnings.filterwarnings("error", "feature 'b' had a value", SchemaMismatchWarning)
        for key, x in events:
            model.learn_one(x, x["a"], key=key)
        model.engine.flush()
    model.engine.store.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SchemaMismatchWarning)  # 'c' never comes
        warnings.filterwarnings("error", "feature 'b' had a value", SchemaMismatchWarning)
        again = _regressor(store=SQLiteStore(path), **settings)
        assert again.engine.operator_telemetry().features_stopped == []
        assert again.engine.operator_telemetry().features_not_arrived == ["c"]


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


_KEY_SCHEMA = PublicSchema(features={"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.text(min_size=1, max_size=6), st.integers(-5, 5),
                          st.binary(min_size=1, max_size=3).filter(_is_utf8)),
                min_size=1, max_size=40))
def test_a_batch_of_keys_gets_the_uids_of_one_key_at_a_time(keys: list) -> None:
    """The bulk admission of new keys allocates uids in first-arrival order, exactly as the
    one-by-one path does (the ledger's key table must not depend on how events arrived)."""
    params = SGBDTParams(epsilon=None, rounds=1, depth=1)
    batch, single = (StreamEngine(EngineConfig(public_schema=_KEY_SCHEMA, params=params))
                     for _ in range(2))
    try:
        expected = [single._uid_for(key) for key in keys]
    except InvalidRecord:
        with pytest.raises(InvalidRecord):
            batch._uids(keys, len(keys))
        return
    assert batch._uids(keys, len(keys)).tolist() == expected
    assert batch._keys == single._keys
    assert batch._uncommitted_keys == single._uncommitted_keys


@pytest.mark.parametrize("hint", [1000.5, True, float("inf"), "1000", 0, -3])
def test_a_size_hint_is_a_whole_number_of_records(hint) -> None:
    """A float hint was truncated without a word, ``True`` read as one record and ``inf``
    raised an OverflowError inside the policy."""
    with pytest.raises(ValueError, match="expected_records must be a whole number >= 1"):
        SGBDTRegressor({"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0), epsilon=1.0,
                       expected_records=hint)
    assert SGBDTRegressor({"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0), epsilon=1.0,
                          expected_records=np.int64(1000)).engine.config.final_at == 1000


def test_learn_one_as_a_threads_entry_point_counts_its_position() -> None:
    """The check for River's model selectors walks the caller's frames; called as a raw
    thread's entry point there is no caller, and it raised, losing the record."""
    model = SGBDTClassifier({"a": (0.0, 1.0)}, epsilon=1.0)
    done = threading.Event()

    def learn(x: dict, y: bool) -> None:
        try:
            model.learn_one(x, y)
        finally:
            done.set()

    _thread.start_new_thread(model.learn_one, ({"a": 0.5}, True))
    _thread.start_new_thread(learn, ({"a": 0.4}, False))
    assert done.wait(10)
    for _ in range(600):  # the raw thread may still be compiling the first call
        if model.engine.positions == 2:
            break
        threading.Event().wait(0.05)
    assert model.engine.positions == 2


@pytest.mark.parametrize("X", [np.zeros((3, 1)), [{"a": 0.5}] * 3], ids=["array", "dicts"])
def test_learn_many_names_what_it_takes_when_given_rows_without_names(X) -> None:
    """An array or a list of dicts reached numpy's indexing and failed with an IndexError
    or a TypeError about indices; nothing is learned and no position counts."""
    model = SGBDTRegressor({"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0), epsilon=1.0)
    with pytest.raises(TypeError, match="X must be a pandas DataFrame or a mapping"):
        model.learn_many(X, [0.5, 0.5, 0.5])
    with pytest.raises(TypeError, match="X must be a pandas DataFrame or a mapping"):
        model.predict_many(X)
    assert model.engine.positions == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["t:0", "t:1"]), st.integers(0, 5)), min_size=1,
                max_size=12), st.data())
def test_position_runs_read_as_the_list_of_positions_they_stand_for(runs, data) -> None:
    """A batch's positions as runs (a Kafka gap is one run, not a tuple per offset) must
    name every position as the spelled-out list does, and give a dict of each source's
    latest offset the same value over any stretch: else a restart would read on from
    another offset than the one committed."""
    positions, spelled, next_offset = PositionRuns(), [], {"t:0": 1, "t:1": 1}
    for source, length in runs:
        first = next_offset[source]
        positions.extend(source, first, length)
        spelled += [(source, first + i) for i in range(length)]
        next_offset[source] = first + length
    assert len(positions) == len(spelled)
    assert [positions[i] for i in range(len(spelled))] == spelled
    assert list(positions) == spelled and positions[-1:] == spelled[-1:]
    start = data.draw(st.integers(0, len(spelled)))
    stop = data.draw(st.integers(start, len(spelled)))
    assert dict(latest_offsets(positions, start, stop)) == dict(spelled[start:stop])
    assert dict(latest_offsets(spelled, start, stop)) == dict(spelled[start:stop])


def _offset_positions_one_by_one(messages, expected):
    """The per-message reading of a batch's offsets that :func:`offset_positions` does
    on whole arrays: the reference it must agree with."""
    spelled, at, skipped = [], [], 0
    for source, offset in messages:
        first = min(expected.get(source, offset), offset)  # a partition that went back
        spelled += [(source, next_offset) for next_offset in range(first + 1, offset + 2)]
        at.append(len(spelled) - 1)
        skipped += offset - first
        expected[source] = offset + 1
    return spelled, at, skipped


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["t:0", "t:1", "u:0"]), st.integers(0, 4)),
                min_size=1, max_size=20),
       st.dictionaries(st.sampled_from(["t:0", "t:1"]), st.integers(0, 30)))
def test_offset_positions_count_every_offset_as_the_one_by_one_reading_does(steps,
                                                                           expected) -> None:
    """A batch's positions from its messages' offsets, computed on whole arrays, must be
    the per-message reading's: every skipped offset an empty position, each message at
    its own, a partition that went back counted on from there, and each source's next
    expected offset carried to the next batch. Else the public clock, and so the
    schedule, would depend on how the messages were batched."""
    messages, last = [], dict(expected)
    for source, step in steps:  # mostly forward, now and then back (step 0 repeats one)
        offset = max(last.get(source, 5) + step - 1, 0)
        messages.append((source, offset))
        last[source] = offset + 1
    ours_expected, ref_expected = dict(expected), dict(expected)
    batch = offset_positions([s for s, _ in messages], np.array([o for _, o in messages]),
                             ours_expected)
    spelled, at, skipped = _offset_positions_one_by_one(messages, ref_expected)
    assert list(batch.positions) == spelled
    assert batch.at.tolist() == at and int(batch.skipped.sum()) == skipped
    assert ours_expected == ref_expected
    assert batch.positions.latest(0, len(spelled)) == [
        p for i, p in enumerate(spelled) if i + 1 == len(spelled) or spelled[i + 1][0] != p[0]
        or spelled[i + 1][1] != p[1] + 1]  # one run per stretch of consecutive offsets


class _LosesACommit(SQLiteStore):
    """A store whose commit of round ``lose_round`` fails (the power goes before it lands)."""

    lose_round: int | None = None

    def commit(self, change) -> None:
        for one in change if isinstance(change, list) else [change]:
            state = one.meta.get("state") or {}
            if state.get("rounds_done") == self.lose_round:
                raise OSError("power cut (injected)")
        super().commit(change)


@pytest.mark.parametrize("lost", ["a round of the hinted end burst",
                                  "the round after the initial score"])
def test_a_crash_inside_a_trigger_runs_its_other_rounds_after_the_restore(tmp_path,
                                                                         lost) -> None:
    """A trigger commits some outputs before its rounds (the initial score, the hinted grid,
    its earlier rounds). When a later round's commit was lost, the restore took the next
    trigger after the committed position, so the trigger's other rounds never ran: a hinted
    stream that crashed in its end burst lost 46 of its 157 versions. The restored engine
    now owes them and runs them before it learns again, and ends with the versions, trees
    and ledgers of a run that never crashed."""
    schema = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)}, target_bounds=(0, 3))
    config = EngineConfig.from_defaults(schema, "regression", 1.0, expected_records=400)
    rng = np.random.default_rng(5)
    X = rng.uniform(size=(600, 2))
    y = np.clip(X[:, 0] + 2 * X[:, 1] ** 2 + rng.normal(0, 0.1, 600), 0, 3)
    keys = [f"k{i % 250}" for i in range(600)]

    def feed(engine: StreamEngine, start: int, stop: int) -> None:
        for i in range(start, stop):
            engine.add_one(X[i], float(y[i]), keys[i])

    reference = StreamEngine(config, seed=3)
    feed(reference, 0, 400)
    at_end = reference.rounds_done
    feed(reference, 400, 600)
    store = _LosesACommit(tmp_path / "s.db", create=True)
    store.lose_round = (at_end - config.final_trees + 3 if lost.startswith("a round")
                        else 1)  # rounds_done after the round: the first is 1
    engine = StreamEngine(config, store=store, seed=3, write_behind=False)
    with pytest.raises(Exception, match="power cut"):
        feed(engine, 0, 400)
    crashed_at = engine.positions
    store.close()  # the process is gone
    again = StreamEngine(config, store=SQLiteStore(tmp_path / "s.db"), seed=3,
                         write_behind=False)
    assert again.rounds_done == store.lose_round - 1  # the lost round was never visible
    assert again.catch_up() == (at_end if lost.startswith("a round") else
                                config.trees_per_trigger) - store.lose_round + 1
    assert again.catch_up() == 0
    feed(again, crashed_at, 600)
    assert again.release_version == reference.release_version
    np.testing.assert_array_equal(again.ensemble.features, reference.ensemble.features)
    np.testing.assert_allclose(again.ensemble.leaves, reference.ensemble.leaves, rtol=1e-9)
    np.testing.assert_allclose(again.spent_rdp(), reference.spent_rdp(), rtol=1e-9)
    again.close()


def test_an_end_whose_position_was_not_committed_owes_no_burst(tmp_path) -> None:
    """``finish()`` records its end before its first round, whose commit also carries the
    merge of the records since the last trigger. When that commit is lost, the restored
    position lies before the end: the burst is not owed there (it ran on a pool without
    those records, at a position the uncrashed run never released at), and ``finish()``
    at the end, once the records came again, runs it as the uncrashed run did."""
    schema = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)}, target_bounds=(0, 3))
    config = EngineConfig.from_defaults(schema, "regression", 1.0)
    rng = np.random.default_rng(6)
    X = rng.uniform(size=(305, 2))
    y = np.clip(X[:, 0] + 2 * X[:, 1] ** 2 + rng.normal(0, 0.1, 305), 0, 3)

    def feed(engine: StreamEngine, start: int) -> None:
        for i in range(start, 305):
            engine.add_one(X[i], float(y[i]), f"k{i}")

    reference = StreamEngine(config, seed=4)
    feed(reference, 0)
    before = reference.rounds_done
    reference.finish(split_grid=False)
    store = _LosesACommit(tmp_path / "s.db", create=True)
    store.lose_round = before + 1  # the burst's first round, with the last merge
    engine = StreamEngine(config, store=store, seed=4, write_behind=False)
    feed(engine, 0)
    with pytest.raises(Exception, match="power cut"):
        engine.finish(split_grid=False)
    store.close()
    again = StreamEngine(config, store=SQLiteStore(tmp_path / "s.db"), seed=4,
                         write_behind=False)
    assert again.positions < 305 and again.catch_up() == 0
    feed(again, again.positions)
    assert again.finish(split_grid=False) == reference.rounds_done - before
    assert again.release_version == reference.release_version
    np.testing.assert_allclose(again.ensemble.leaves, reference.ensemble.leaves, rtol=1e-9)
    np.testing.assert_allclose(again.spent_rdp(), reference.spent_rdp(), rtol=1e-9)
    again.close()


def test_a_crash_inside_a_trigger_after_an_end_still_owes_its_rounds(tmp_path) -> None:
    """After a ``finish()``, the rounds a crash inside a later trigger left unrun are owed
    too (here the hinted end's burst, after an earlier end): the end's record counts its
    burst and the rounds beyond the schedule before it. Before, the earlier burst's rounds
    outnumbered the lost ones and nothing was owed, so the restored stream ended with
    fewer trees than one that never crashed."""
    schema = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)}, target_bounds=(0, 3))
    config = EngineConfig.from_defaults(schema, "regression", 1.0, expected_records=500)
    rng = np.random.default_rng(6)
    X = rng.uniform(size=(700, 2))
    y = np.clip(X[:, 0] + 2 * X[:, 1] ** 2 + rng.normal(0, 0.1, 700), 0, 3)

    def feed(engine: StreamEngine, start: int, stop: int) -> None:
        for i in range(start, stop):
            engine.add_one(X[i], float(y[i]), f"k{i}")

    reference = StreamEngine(config, seed=4)
    feed(reference, 0, 300)
    reference.finish()
    feed(reference, 300, 500)  # the hinted end's burst
    at_end = reference.rounds_done
    feed(reference, 500, 700)
    store = _LosesACommit(tmp_path / "s.db", create=True)
    store.lose_round = at_end - config.final_trees // 2  # inside the hinted burst
    engine = StreamEngine(config, store=store, seed=4, write_behind=False)
    feed(engine, 0, 300)
    engine.finish()
    with pytest.raises(Exception, match="power cut"):
        feed(engine, 300, 700)
    store.close()  # the process is gone
    again = StreamEngine(config, store=SQLiteStore(tmp_path / "s.db"), seed=4,
                         write_behind=False)
    assert again.rounds_done == store.lose_round - 1
    assert again.catch_up() == at_end - store.lose_round + 1
    feed(again, again.positions, 700)
    assert again.release_version == reference.release_version
    np.testing.assert_array_equal(again.ensemble.features, reference.ensemble.features)
    np.testing.assert_allclose(again.ensemble.leaves, reference.ensemble.leaves, rtol=1e-9)
    np.testing.assert_allclose(again.spent_rdp(), reference.spent_rdp(), rtol=1e-9)
    again.close()


def test_an_operator_reader_on_another_thread_waits_for_a_merge(monkeypatch) -> None:
    """A merge replaces the pool, its slots and statuses in several steps; an operator
    reader on another thread (a metrics endpoint) read ``pool.spent`` and ``pool.retired``
    of two different pools, or a status without its slot (review D4 #4, 29 November). The
    merge and the operator readers now hold the view lock."""
    from renyiboost.stream import engine as engine_module

    model = _regressor(train_every=10**6, warmup=10**6)
    engine = model.engine
    for i, (x, y) in enumerate(_stream(30)):
        model.learn_one(x, y, key=i)
    engine.flush()
    real_pool, seen = engine_module.RecordPool, {}

    def read() -> None:
        seen["spent"] = engine.spent_rdp()
        seen["telemetry"] = engine.operator_telemetry()
        seen["key"] = engine.operator_budget_of(35)

    def pool_then_look(*args, **kwargs):
        pool = real_pool(*args, **kwargs)
        if "reader" not in seen:
            seen["reader"] = reader = threading.Thread(target=read)
            reader.start()
            reader.join(0.5)
            seen["waited"] = reader.is_alive()  # blocked until the merge is whole
        return pool

    for i, (x, y) in enumerate(_stream(10, seed=1)):
        model.learn_one(x, y, key=30 + i)
    monkeypatch.setattr(engine_module, "RecordPool", pool_then_look)
    engine.flush()  # the merge of the ten new keys
    monkeypatch.undo()
    seen["reader"].join(10)
    assert seen["waited"]
    assert seen["spent"].size == seen["telemetry"].n_active == 40
    assert seen["key"].status == "active"
    engine.close()
