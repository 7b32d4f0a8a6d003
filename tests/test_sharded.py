"""The sharded engine: a coordinator over key shards gives the single engine's model and
ledgers; a crash between two shards' commits is reconciled without under-charging anybody;
stores keep their place in the shard map.

Tolerances: with γ = 1 (no Poisson draw to differ) and the same seed, the coordinator draws
the single engine's trees and noise, so features and thresholds are equal, and leaves,
margins and spent budgets agree to 1e-9 relative (only the order in which the shards' leaf
sums are added differs).
"""

from __future__ import annotations

import json
import sqlite3
import warnings
import zlib

import numpy as np
import pytest

from renyiboost.exceptions import InvalidRecord, LedgerConflict, StateStoreError, TestingOnlyWarning
from renyiboost.models.defaults import finish_trees
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import EngineConfig, StreamEngine, end_grid_charge, noise_stage_at
from renyiboost.stream.sharded import (
    LocalShards,
    ShardedEngine,
    ShardWorker,
    check_one_shard_a_key,
    create_shard_stores,
    default_partition_map,
    shard_locations,
    shard_of,
)
from renyiboost.stream.store import SQLiteStore

warnings.simplefilter("ignore", TestingOnlyWarning)

SCHEMA = PublicSchema(features={"a": (0.0, 1.0), "b": (-2.0, 2.0), "c": ["x", "y", "z"]},
                      target_bounds=(0.0, 3.0))
N_KEYS = 300


def _config(task: str, noise_stages: tuple = ()) -> EngineConfig:
    return EngineConfig.from_defaults(SCHEMA, task, 1.0, sampling_rate=1.0, depth=3, rounds=20,
                                      train_every=40, warmup=40, trees_per_trigger=2,
                                      noise_stages=noise_stages)


def _records(task: str, n: int, seed: int = 0) -> list[tuple[np.ndarray, float, str]]:
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.uniform(size=n), rng.uniform(-2, 2, n),
                         rng.integers(0, 3, n).astype(float)])
    signal = X[:, 0] + 0.3 * X[:, 1] + 0.5 * (X[:, 2] == 1)
    y = ((signal + rng.normal(0, 0.3, n)) > 0.8).astype(float) if task == "classification" \
        else np.clip(signal + 1 + rng.normal(0, 0.2, n), 0, 3)
    keys = rng.integers(0, N_KEYS, n)  # keys come back: upserts
    return [(X[i], float(y[i]), f"person-{keys[i]}") for i in range(n)]


def _feed(engine, records) -> None:
    for row, label, key in records:
        engine.add_one(row, label, key)


def _budgets(engine) -> dict[str, tuple[float, str]]:
    out = {}
    for k in range(N_KEYS):
        budget = engine.operator_budget_of(f"person-{k}")
        out[f"person-{k}"] = (budget.spent_rdp, budget.status)
    return out


def _assert_same(sharded: ShardedEngine, single: StreamEngine) -> None:
    assert sharded.release_version == single.release_version
    ours, theirs = sharded.booster.ensemble, single.ensemble
    np.testing.assert_array_equal(ours.features, theirs.features)
    np.testing.assert_array_equal(ours.thresholds, theirs.thresholds)
    np.testing.assert_allclose(ours.leaves, theirs.leaves, rtol=1e-9, atol=1e-12)
    assert ours.init_score == pytest.approx(theirs.init_score, rel=1e-12)
    a, b = _budgets(sharded), _budgets(single)
    assert {k: s for k, (_, s) in a.items()} == {k: s for k, (_, s) in b.items()}
    np.testing.assert_allclose([v for v, _ in a.values()], [v for v, _ in b.values()],
                               rtol=1e-9)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_three_shards_train_the_single_engine_model_and_ledgers(task: str) -> None:
    config = _config(task)
    records = _records(task, 1500)
    single = StreamEngine(config, seed=5)
    sharded = ShardedEngine(config, [None, None, None], seed=5)
    _feed(single, records)
    _feed(sharded, records)
    assert sharded.release_version > 40
    owners = np.bincount([shard_of(key, 3) for key in {key for _, _, key in records}])
    assert owners.min() > 80  # every shard holds many keys
    assert any(b[1] == "retired" for b in _budgets(single).values())  # budgets ran out
    _assert_same(sharded, single)
    X = np.array([row for row, _, _ in records[:200]])
    np.testing.assert_allclose(sharded.predict_margin(X), single.predict_margin(X),
                               rtol=1e-9, atol=1e-12)


def test_without_privacy_the_shards_train_the_single_engine_model() -> None:
    config = EngineConfig.from_defaults(SCHEMA, "regression", None, sampling_rate=1.0, depth=3,
                                        rounds=20, train_every=40, warmup=40, noise_stages=())
    records = _records("regression", 600, seed=3)
    single, sharded = StreamEngine(config, seed=2), ShardedEngine(config, [None] * 3, seed=2)
    _feed(single, records)
    _feed(sharded, records)
    _assert_same(sharded, single)


def test_a_key_lives_on_one_shard() -> None:
    owners = {shard_of(f"k{i}", 4) for i in range(400)}
    assert owners == {0, 1, 2, 3}
    assert shard_of("Zoe\u0308", 4) == shard_of("Zo\u00eb", 4)  # one key, one spelling
    assert shard_of(7, 4) == shard_of("7", 4)


class _CrashingStore(SQLiteStore):
    """A store whose ``fail_at``-th commit raises (the process dies before it lands)."""

    fail_at: int | None = None

    def __init__(self, path, **kw) -> None:
        super().__init__(path, **kw)
        self.calls = 0

    def commit(self, change) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            raise OSError("power cut (injected)")
        super().commit(change)


def _crashed_at_commit(tmp_path, config, records) -> tuple[ShardedEngine, list, list]:
    """Three SQLite shards fed ``records`` until shard 2's 25th commit fails (after the
    others committed that round)."""
    paths = [tmp_path / f"shard{k}.db" for k in range(3)]
    stores = [_CrashingStore(path, create=True) for path in paths]
    stores[2].fail_at = 25
    sharded = ShardedEngine(config, stores, seed=9)
    with pytest.raises(OSError, match="power cut"):
        _feed(sharded, records)
    return sharded, stores, paths


@pytest.mark.parametrize("stages", [(), ((1_000, 8),)], ids=["one stage", "noise stages"])
def test_a_crash_between_two_shards_commits_is_reconciled_without_under_charging(
        tmp_path, stages) -> None:
    """Shard 2's commit of a round fails after shards 0 and 1 committed it: the round was
    never visible. Reopened, shard 2 replays it from the tree the others committed, with
    the charges it computed from its own committed records; every ledger then equals a run
    that never crashed, and training goes on."""
    config = _config("regression", stages)
    records = _records("regression", 1500, seed=1)
    sharded, stores, paths = _crashed_at_commit(tmp_path, config, records)
    fed = sharded.positions
    crashed_version = sharded.release_version
    if stages:  # the lost round ran in the early stage, whose rounds charge more
        assert noise_stage_at(config, fed) == 0
    rounds = sharded.booster.rounds_done  # the model never showed the round
    for store in stores:
        store.close()  # the process is gone: no clean close, nothing more committed
    committed = []
    for path in paths:
        with sqlite3.connect(path) as db:
            (state,) = db.execute("SELECT value FROM meta WHERE name = 'state'").fetchone()
            committed.append(json.loads(state)["rounds_done"])
    assert committed == [rounds + 1, rounds + 1, rounds]  # shards 0 and 1 committed it
    again = ShardedEngine(config, [SQLiteStore(path) for path in paths], seed=9)
    rounds = [state.rounds_done for state in again.shards.all("state")]
    assert len(set(rounds)) == 1  # reconciled
    assert again.release_version == crashed_version + 1  # the round shards 0 and 1 committed
    reference = ShardedEngine(config, [None, None, None], seed=9)
    _feed(reference, records[:fed])
    assert reference.release_version == again.release_version
    np.testing.assert_allclose(again.booster.ensemble.leaves,
                               reference.booster.ensemble.leaves, rtol=1e-9, atol=1e-12)
    a, b = _budgets(again), _budgets(reference)
    assert {k: s for k, (_, s) in a.items()} == {k: s for k, (_, s) in b.items()}
    np.testing.assert_allclose([v for v, _ in a.values()], [v for v, _ in b.values()],
                               rtol=1e-9)
    _feed(again, records[fed:])  # and training goes on
    assert again.release_version > crashed_version + 10
    assert again.spent_rdp().max() <= again.booster.calibration.budget_rdp
    again.close()


def test_a_crash_between_two_shards_initial_scores_installs_it_once(tmp_path) -> None:
    """Shards commit in parallel (Ray), so the initial score can be durable on shard 1 and
    not on shard 0. Reopened, the deployment takes the score shard 1 committed: shard 0
    installs it, no second one is released, every key pays for one score, and every
    shard's cached margins are the model's."""
    config = _config("regression")
    records = _records("regression", 39, seed=4)  # the warmup is 40: one short of the score
    paths = [tmp_path / f"s{k}.db" for k in range(2)]
    sharded = ShardedEngine(config, [SQLiteStore(path, create=True) for path in paths], seed=3)
    _feed(sharded, records)
    sharded.shards.all("flush")
    total = sum(sharded.shards.all("initial_sum"))
    score = sharded.booster.score_over_public_count(total, 40)  # the score's own draw
    sharded.shards.one(1, "install_initial", score)  # shard 1 committed it, shard 0 died
    sharded.shards.one(1, "wait_durable")
    sharded.close()
    again = ShardedEngine(config, [SQLiteStore(path) for path in paths], seed=3)
    assert again._initialized and again.booster.ensemble.init_score == score
    init_charge = again.booster.calibration.init_charge
    arrived = {key for _, _, key in records}
    assert {shard_of(key, 2) for key in arrived} == {0, 1}
    for key in arrived:  # one score's charge on both shards
        assert again.operator_budget_of(key).spent_rdp == pytest.approx(init_charge, rel=1e-12)
    reference = ShardedEngine(config, [None, None], seed=3)
    more = _records("regression", 200, seed=5)
    _feed(reference, records + more)
    _feed(again, more)
    assert again.release_version == reference.release_version  # no second score
    assert again.booster.ensemble.init_score == score
    for worker in again.shards.workers:  # every cached margin is the model's
        pool = worker.engine.active_pool()
        trees = worker.engine.ensemble  # training margins are the unsmoothed trees'
        np.testing.assert_allclose(pool.margin,
                                   trees.init_score + trees.leaf_sum(pool.X, smoothed=False),
                                   rtol=1e-9, atol=1e-12)
    again.close()
    unseeded = ShardedEngine(config, [SQLiteStore(path) for path in paths])  # its past is
    assert unseeded.privacy_guarantee().seeded_for_testing  # seeded, whatever it draws now
    unseeded.close()
    # a seeded coordinator over shards opened without a seed marks their stores too
    fresh = [tmp_path / f"f{k}.db" for k in range(2)]
    group = LocalShards.open(config, [SQLiteStore(path, create=True) for path in fresh], None)
    ShardedEngine(config, group, seed=5).close()
    reopened = ShardedEngine(config, [SQLiteStore(path) for path in fresh])
    assert reopened.privacy_guarantee().seeded_for_testing
    reopened.close()


def _two_shards_that_learned(tmp_path) -> tuple[EngineConfig, list]:
    """A closed deployment of two SQLite shards that learned 100 records, and its paths."""
    config = _config("regression")
    paths = [tmp_path / f"s{k}.db" for k in range(2)]
    sharded = ShardedEngine(config, [SQLiteStore(path, create=True) for path in paths])
    _feed(sharded, _records("regression", 100))
    sharded.close()
    return config, paths


def test_stores_keep_their_place_in_the_shard_map(tmp_path) -> None:
    config, paths = _two_shards_that_learned(tmp_path)
    with pytest.raises(LedgerConflict, match="holds shard 1 of 2, not shard 0 of 2"):
        ShardedEngine(config, [SQLiteStore(path) for path in reversed(paths)])
    with pytest.raises(LedgerConflict, match="not shard 0 of 3|holds shard 0 of 2"):
        ShardedEngine(config, [SQLiteStore(path) for path in paths]
                      + [SQLiteStore(tmp_path / "new.db", create=True)])


def test_a_shards_store_and_a_single_engines_store_keep_to_their_kind(tmp_path) -> None:
    """A shard's store opened by a single engine would give the keys whose ledgers live on
    the other shards a second budget, and so would a single engine's store joining shards
    beside a new store: both are refused, the latter also for a store written before a
    single engine recorded its place (its ledger with no place at all)."""
    config, paths = _two_shards_that_learned(tmp_path)
    with pytest.raises(LedgerConflict, match="holds shard 0 of 2 of a sharded deployment"):
        StreamEngine(config, store=SQLiteStore(paths[0]))
    single = StreamEngine(config, store=SQLiteStore(tmp_path / "one.db", create=True))
    _feed(single, _records("regression", 100))
    single.close()
    with pytest.raises(LedgerConflict, match="holds shard 0 of 1, not shard 0 of 2"):
        ShardedEngine(config, [SQLiteStore(tmp_path / "one.db"),
                               SQLiteStore(tmp_path / "new.db", create=True)])
    with sqlite3.connect(tmp_path / "one.db") as db:  # as an older single engine left it
        db.execute("DELETE FROM meta WHERE name = 'side:shard_map'")
    with pytest.raises(LedgerConflict, match="holds a ledger .* but no place in a shard map"):
        ShardedEngine(config, [SQLiteStore(tmp_path / "one.db"),
                               SQLiteStore(tmp_path / "new2.db", create=True)])
    StreamEngine(config, store=SQLiteStore(tmp_path / "one.db")).close()  # still its own


def test_a_new_deployments_stores_hold_their_places_before_their_first_open(tmp_path) -> None:
    """``state init --shards 2`` created its stores without their places, which only the
    first sharded open recorded: a single engine that opened one before (``state info``
    without ``--shards``) claimed it as shard 0 of 1 and the deployment was refused for
    good, and two single engines, one on each store, gave every key two budgets."""
    config = _config("regression")
    locations = [str(tmp_path / f"shard-{k}.db") for k in range(2)]
    create_shard_stores(config, locations)
    for k, location in enumerate(locations):
        with pytest.raises(LedgerConflict, match=f"holds shard {k} of 2 of a sharded"):
            StreamEngine(config, store=SQLiteStore(location))
    sharded = ShardedEngine(config, [SQLiteStore(location) for location in locations])
    _feed(sharded, _records("regression", 50))
    assert sharded.positions == 50
    sharded.close()

def test_keyed_records_are_refused_on_stores_a_kafka_deployment_fed(tmp_path) -> None:
    """On stores a Kafka deployment fed, a key's shard is its message key's partition's;
    a keyed record handed to the engine goes to its hash's shard, which for about half of
    the keys of two shards is the other one: a second ledger. Refused before any shard
    learns it; keyless records (each its own person) still count."""
    config = _config("regression")
    paths = [tmp_path / f"k{k}.db" for k in range(2)]
    sharded = ShardedEngine(config, [SQLiteStore(path, create=True) for path in paths])
    sharded.shards.all("set_meta", "partition_map", {"events": [0, 1]})  # as a Kafka shard
    rows = np.array([[0.5, 0.0, 1.0]])
    with pytest.raises(LedgerConflict, match="fed from Kafka"):
        sharded.add(rows, [1.0], ["person-1"])
    assert sharded.positions == 0
    assert sum(budget.status != "unknown" for budget in
               sharded.shards.all("operator_budget_of", "person-1")) == 0
    sharded.add(rows, [1.0])
    assert sharded.positions == 1
    sharded.close()
    # and the other way: a keyed record marks every store, one that holds none too
    fresh = ShardedEngine(config, [SQLiteStore(tmp_path / f"h{k}.db", create=True)
                                   for k in range(2)])
    assert fresh.shards.all("get_meta", "key_routing") == [None, None]
    fresh.add(rows, [1.0], ["person-1"])
    assert fresh.shards.all("get_meta", "key_routing") == ["hash", "hash"]
    fresh.close()


def test_a_bad_label_keeps_its_position_and_a_bad_shape_changes_no_shard() -> None:
    """A label outside the public bounds (it would widen the initial score's sensitivity)
    is not learned, but its row keeps its position, as an empty event: the call once raised
    with no position counted, so one record's label moved the public schedule of every other
    row in the call (neighbouring streams then released 6 and 7 versions). A bad key
    likewise. The other rows are learned, single or sharded. A row of the wrong width
    changes no shard."""
    rows = np.array([[0.5, 0.0, 1.0], [0.2, 1.0, 0.0], [0.7, 0.5, 2.0]])
    for engine in (ShardedEngine(_config("regression"), [None, None]),
                   StreamEngine(_config("regression"))):
        with pytest.raises(ValueError, match="shape"):
            engine.add(rows[:, :2], [1.0, 2.0, 1.5], ["a", "b", "c"])
        assert engine.positions == 0
        with pytest.raises(InvalidRecord, match="1 of 3 rows were not learned; row 1"):
            engine.add(rows, [1.0, 30.0, 1.5], ["a", "b", "c"])
        assert engine.positions == 3
        assert [engine.operator_budget_of(k).status for k in "abc"] == [
            "pending", "unknown", "pending"]
        with pytest.raises(InvalidRecord, match="2 of 3 rows were not learned; row 0: keys "
                                                "must be str"):  # and a bad key likewise
            engine.add(rows, [1.0, 1.0, 1.5], [1.5, "d", ""])
        assert engine.positions == 6
        assert engine.operator_budget_of("d").status == "pending"
    sharded = ShardedEngine(_config("regression"), [None, None])
    assert [state.positions for state in sharded.shards.all("state")] == [0, 0]

    def versions(engine, bad: bool) -> tuple[int, int]:
        records = _records("regression", 400, seed=2)
        for start in range(0, 400, 100):
            X = np.array([r[0] for r in records[start:start + 100]])
            y = [r[1] for r in records[start:start + 100]]
            keys = [r[2] for r in records[start:start + 100]]
            if bad and start == 100:
                y[7] = 30.0  # neighbouring stream: one label out of bounds
            if bad and start == 200:
                keys[3] = ""  # and one key that is no key
            try:
                engine.add(X, y, keys)
            except InvalidRecord:
                pass
        return engine.positions, engine.release_version

    for make in (lambda: StreamEngine(_config("regression"), seed=1),
                 lambda: ShardedEngine(_config("regression"), [None, None], seed=1)):
        assert versions(make(), True) == versions(make(), False)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_finish_over_shards_runs_the_single_engine_burst(task: str) -> None:
    """finish() on a coordinator runs the end burst a single engine runs at the same
    position (the same trees, leaves and ledgers), and none a second time there."""
    config = _config(task)
    records = _records(task, 500, seed=4)
    single = StreamEngine(config, seed=5)
    sharded = ShardedEngine(config, [None, None, None], seed=5)
    _feed(single, records)
    _feed(sharded, records)
    burst = finish_trees(task, config.params.rounds)
    assert single.finish() == sharded.finish() == burst
    grid = sharded.booster.grower.quantile_map  # bought from the unspent budget, as one
    assert grid is not None
    np.testing.assert_array_equal(grid.cdf, single.booster.grower.quantile_map.cdf)
    _assert_same(sharded, single)
    assert sharded.finish() == 0


def test_shards_release_the_single_engines_split_grid_at_the_hinted_end() -> None:
    """The shards' exact histograms are summed and the coordinator adds the noise once: a
    hinted stream's grid, the trees after it and every ledger are a single engine's. (A
    large ε, so that 300 keys' counts rise above the noise and the map moves features:
    noise added per shard would then show.)"""
    config = EngineConfig.from_defaults(SCHEMA, "classification", 16, expected_records=600,
                                        sampling_rate=1.0, depth=3, rounds=20, train_every=40,
                                        warmup=40, trees_per_trigger=2)
    assert config.params.grid_share > 0
    records = _records("classification", 700, seed=7)
    single = StreamEngine(config, seed=5)
    sharded = ShardedEngine(config, [None, None, None], seed=5)
    _feed(single, records)
    _feed(sharded, records)
    grid = sharded.booster.grower.quantile_map
    assert grid is not None and grid.mapped.any()
    np.testing.assert_array_equal(grid.cdf, single.booster.grower.quantile_map.cdf)
    _assert_same(sharded, single)
    np.testing.assert_array_equal(sharded.booster.ensemble.shifts, single.ensemble.shifts)


def test_a_crash_between_two_shards_grid_commits_is_reconciled_without_under_charging(
        tmp_path) -> None:
    """Shard 2's commit of the end's grid fails after shards 0 and 1 committed it (nothing
    was visible). Reopened, shard 2 commits the same grid with the charges of its own
    records; every ledger equals a run that never crashed, and finish() buys no second
    grid."""
    config = _config("regression")
    records = _records("regression", 600, seed=8)
    paths = [tmp_path / f"shard{k}.db" for k in range(3)]
    stores = [_CrashingStore(path, create=True) for path in paths]
    sharded = ShardedEngine(config, stores, seed=9)
    _feed(sharded, records)
    sharded.shards.all("flush")
    stores[2].fail_at = stores[2].calls + 1
    with pytest.raises(Exception, match="power cut"):
        sharded.finish()
    for store in stores:
        store.close()
    held = []
    for path in paths:
        with sqlite3.connect(path) as db:
            held.append(db.execute("SELECT 1 FROM meta WHERE name = 'grid'").fetchone())
    assert held == [(1,), (1,), None]  # shards 0 and 1 committed it
    again = ShardedEngine(config, [SQLiteStore(path) for path in paths], seed=9)
    reference = ShardedEngine(config, [None, None, None], seed=9)
    _feed(reference, records)
    reference._release_split_grid(end_grid_charge(config, reference.booster, None, 1))
    cdf = reference.booster.grower.quantile_map.cdf
    np.testing.assert_array_equal(again.booster.grower.quantile_map.cdf, cdf)
    a, b = _budgets(again), _budgets(reference)
    np.testing.assert_allclose([v for v, _ in a.values()], [v for v, _ in b.values()],
                               rtol=1e-9)
    assert again.finish() > 0  # the burst, on the committed grid: none bought again
    assert [grid.cdf.tolist() for grid in again.shards.all("released_grid")] == \
        [cdf.tolist()] * 3
    again.close()


def test_a_restarted_deployment_resumes_its_finish_and_never_repeats_it(tmp_path) -> None:
    """A shard whose commit fails in the middle of the end burst stops the deployment;
    reopened, finish() at the same position runs only the rounds the burst had not
    released, and after it a third opening runs none: one end, one burst's budget."""
    config = _config("regression")
    paths = [tmp_path / f"shard{k}.db" for k in range(3)]
    first = ShardedEngine(config, [SQLiteStore(path, create=True) for path in paths], seed=3)
    _feed(first, _records("regression", 500, seed=6))
    before = first.booster.rounds_done
    first.close()
    burst = finish_trees("regression", config.params.rounds)
    stores = [_CrashingStore(path) for path in paths]
    stores[2].fail_at = 4
    crashed = ShardedEngine(config, stores, seed=3)
    with pytest.raises(Exception, match="power cut"):
        crashed.finish()
    for store in stores:
        store.close()
    again = ShardedEngine(config, [SQLiteStore(path) for path in paths], seed=3)
    done = again.booster.rounds_done - before
    assert 0 < done < burst  # the burst had released some of its rounds
    assert again.finish() == burst - done
    assert again.booster.rounds_done == before + burst
    spent = again.spent_rdp().copy()
    again.close()
    finished = ShardedEngine(config, [SQLiteStore(path) for path in paths], seed=3)
    assert finished.finish() == 0
    np.testing.assert_array_equal(finished.spent_rdp(), spent)
    finished.close()


def test_a_shard_store_lost_and_created_again_is_refused(tmp_path) -> None:
    """Shard 0's store is lost after the initial score and one round, and a new one is
    created at its path. It looked like a shard one round behind and was reconciled: its
    keys, fed again, got fresh budgets for what the lost store had charged them. Every store
    now records the deployment's store ids, and a store they do not name is refused."""
    config = EngineConfig.from_defaults(SCHEMA, "regression", 1.0, sampling_rate=1.0, depth=3,
                                        rounds=20, train_every=40, warmup=40,
                                        trees_per_trigger=1)
    paths = [tmp_path / f"s{k}.db" for k in range(2)]
    sharded = ShardedEngine(config, [SQLiteStore(path, create=True) for path in paths])
    _feed(sharded, _records("regression", 50))
    assert [state.rounds_done for state in sharded.shards.all("state")] == [1, 1]
    sharded.close()
    for lost in tmp_path.glob("s0.db*"):
        lost.unlink()
    with pytest.raises(LedgerConflict, match=r"shard 1's store records .* shard 0 \("):
        ShardedEngine(config, [SQLiteStore(paths[0], create=True), SQLiteStore(paths[1])])
    # a record missing on some shards (a crash during the first one) is completed
    fresh = [tmp_path / f"f{k}.db" for k in range(2)]
    ShardedEngine(config, [SQLiteStore(path, create=True) for path in fresh]).close()
    with sqlite3.connect(fresh[1]) as db:
        db.execute("DELETE FROM meta WHERE name = 'side:deployment_stores'")
    again = ShardedEngine(config, [SQLiteStore(path) for path in fresh])
    assert again.shards.one(1, "get_meta", "deployment_stores") == [
        identity.store_id for identity in again.shards.all("identity")]
    again.close()


def test_stores_lost_beside_a_surviving_record_are_refused_before_any_is_created(
        tmp_path) -> None:
    """Both stores are lost but shard 1's record of its store (``.epoch``) survives: the
    creation of the deployment once made shard 0's store and then refused shard 1's, leaving
    a new store behind. The record counts as a store present, so nothing is created."""
    from renyiboost.stream.sharded import create_shard_stores

    config = _config("regression")
    paths = [str(tmp_path / f"s{k}.db") for k in range(2)]
    create_shard_stores(config, paths)
    for lost in tmp_path.iterdir():
        if lost.name != "s1.db.epoch":
            lost.unlink()
    with pytest.raises(LedgerConflict, match="already exist at .*s1.db"):
        create_shard_stores(config, paths)
    assert [p.name for p in tmp_path.iterdir()] == ["s1.db.epoch"]


class _LosesARound(SQLiteStore):
    """A shard store whose commit of round ``lose_round`` fails (the power goes first)."""

    lose_round: int | None = None

    def commit(self, change) -> None:
        for one in change if isinstance(change, list) else [change]:
            if (one.meta.get("state") or {}).get("rounds_done") == self.lose_round:
                raise OSError("power cut (injected)")
        super().commit(change)


def test_a_crash_inside_a_trigger_owes_its_rounds_to_the_reopened_deployment(tmp_path) -> None:
    """Round 3, the first of the second trigger's two, is lost on every shard: the reopened
    coordinator took the next trigger after the committed position and never ran the
    trigger's two rounds, so the deployment ended two versions short of a run that never
    crashed. It now owes them and runs them before the next records."""
    config = _config("regression")
    assert config.trees_per_trigger == 2
    records = _records("regression", 400, seed=2)
    reference = ShardedEngine(config, [None, None], seed=9)
    _feed(reference, records)
    paths = [tmp_path / f"s{k}.db" for k in range(2)]
    stores = [_LosesARound(path, create=True) for path in paths]
    for store in stores:
        store.lose_round = 3
    sharded = ShardedEngine(config, stores, seed=9)
    with pytest.raises(Exception, match="power cut"):
        _feed(sharded, records)
    fed = sharded.positions
    for store in stores:
        store.close()
    again = ShardedEngine(config, [SQLiteStore(path) for path in paths], seed=9)
    assert again.booster.rounds_done == 2
    assert again.catch_up() == 2 and again.catch_up() == 0
    _feed(again, records[fed:])
    assert again.release_version == reference.release_version
    assert again.spent_rdp().max() <= again.booster.calibration.budget_rdp * (1 + 1e-9)
    again.close()


def test_a_crash_inside_a_trigger_after_an_end_owes_its_rounds_too(tmp_path) -> None:
    """As above, after a ``finish()``: the end's record in the shards' stores counts its
    burst, so the first trigger after it that loses a round still owes both of its rounds
    (before, the burst's ten rounds hid the two lost ones)."""
    config = _config("regression")
    records = _records("regression", 400, seed=3)
    reference = ShardedEngine(config, [None, None], seed=8)
    _feed(reference, records[:120])
    reference.finish()
    after_end = reference.booster.rounds_done
    _feed(reference, records[120:])
    paths = [tmp_path / f"s{k}.db" for k in range(2)]
    stores = [_LosesARound(path, create=True) for path in paths]
    for store in stores:
        store.lose_round = after_end + 1  # the first of the next trigger's two rounds
    sharded = ShardedEngine(config, stores, seed=8)
    _feed(sharded, records[:120])
    sharded.finish()
    with pytest.raises(Exception, match="power cut"):
        _feed(sharded, records[120:])
    fed = sharded.positions
    for store in stores:
        store.close()
    again = ShardedEngine(config, [SQLiteStore(path) for path in paths], seed=8)
    assert again.booster.rounds_done == after_end
    assert again.catch_up() == 2
    _feed(again, records[fed:])
    assert again.release_version == reference.release_version
    again.close()


@pytest.mark.parametrize(("counts", "n_shards", "safe"), [
    ({"a": 2, "b": 3}, 2, False),  # the reviewer's case: 12 of 20 keys on both shards
    ({"a": 4, "b": 6}, 2, True), ({"a": 4, "b": 6}, 3, False), ({"a": 6, "b": 9}, 3, True),
    ({"a": 5}, 2, True),  # one topic: one partition a key, whatever the counts
])
def test_a_partition_map_that_would_give_a_key_two_shards_is_refused(counts, n_shards,
                                                                      safe) -> None:
    """A producer puts a key in partition h mod P of each topic (h its message key's
    hash); the map must give every h one shard across the topics, or the key keeps a
    ledger, and a budget, on each. Checked against the keys themselves: CRC-32 (the
    librdkafka partitioner's hash) of 2,000 names."""
    hashes = [zlib.crc32(f"person{i}".encode()) for i in range(2000)]
    mapping = {topic: [p % n_shards for p in range(count)] for topic, count in counts.items()}
    shards_of_a_key = [{mapping[t][h % len(mapping[t])] for t in mapping} for h in hashes]
    two = sum(len(shards) > 1 for shards in shards_of_a_key)
    assert (two == 0) == safe, two
    if safe:
        assert default_partition_map(counts, n_shards) == mapping
        check_one_shard_a_key(mapping)
    else:
        with pytest.raises(LedgerConflict, match="sends one key to several shards"):
            default_partition_map(counts, n_shards)
        with pytest.raises(LedgerConflict, match="sends one key to several shards"):
            check_one_shard_a_key(mapping)


def test_a_failed_commit_stops_the_coordinator_until_a_restart_reconciles(tmp_path) -> None:
    """A shard's commit that fails with a store error (not a shard's death) may come after
    other shards committed the round. The coordinator once carried on: with the failed
    shard restarted from its store under it, it ran 50 more rounds, the shards' trees and
    the released model differed at 58 places and 128 keys were charged less than in a run
    that never failed. Every later call now refuses; reopened, the stores reconcile and
    every ledger equals the run that never failed."""
    config = _config("regression")
    records = _records("regression", 1500, seed=1)
    sharded, stores, paths = _crashed_at_commit(tmp_path, config, records)
    fed = sharded.positions
    for call in (lambda: sharded.add_one(*records[fed]), sharded.empty_event,
                 lambda: sharded.train(1), sharded.finish, sharded.poll):
        with pytest.raises(StateStoreError, match="stopped after a failed commit"):
            call()
    assert sharded.positions == fed
    for store in stores:
        store.close()
    again = ShardedEngine(config, [SQLiteStore(path) for path in paths], seed=9)
    reference = ShardedEngine(config, [None, None, None], seed=9)
    _feed(reference, records[:fed])
    a, b = _budgets(again), _budgets(reference)
    np.testing.assert_allclose([v for v, _ in a.values()], [v for v, _ in b.values()],
                               rtol=1e-9)
    again.close()


class _QueueSource:
    """A shard's source over a queue of records; ``cap``: at most this many a poll (its
    client has fetched no more)."""

    def __init__(self, engine, records, cap=None) -> None:
        self.engine, self.queue, self.cap = engine, list(records), cap

    def poll_once(self, max_messages=None, timeout=None) -> int:
        take = max_messages if self.cap is None else min(max_messages, self.cap)
        batch, self.queue = self.queue[:take], self.queue[take:]
        for row, label, key in batch:
            self.engine.add_one(row, label, key)
        return len(batch)

    def telemetry(self) -> dict:
        return {}

    def close(self) -> None:
        pass


def test_polled_rounds_run_at_their_triggers_whoever_has_events_ready(monkeypatch) -> None:
    """Each shard once read its share rounded up, so a round ran up to n − 1 positions past
    its trigger, how far depending on which shards had events ready (whose keys are where):
    at a noise-stage boundary that is also a trigger (1,000) the round ran in stage 1 at
    1,001 or 1,002 and in stage 0 at 1,000. Every round now runs at its trigger, as a
    single engine's, whatever the shards had fetched."""
    config = _config("regression", ((1_000, 8),))
    records = _records("regression", 1100, seed=1)
    per_shard = [[r for r in records if shard_of(r[2], 3) == k] for k in range(3)]
    single = StreamEngine(config, seed=9)
    triggers = []
    monkeypatch.setattr(StreamEngine, "_round", lambda self, *a, original=StreamEngine._round:
                        (triggers.append(self.positions), original(self, *a))[1])
    _feed(single, records[:1060])
    monkeypatch.undo()
    for cap in (None, 5, 11, 13):
        seen: list[tuple[int, int | None]] = []

        def spy(self, original=ShardedEngine._round, seen=seen) -> None:
            seen.append((self.positions, noise_stage_at(self.config, self.positions)))
            original(self)

        def source(engine, k, n, cap=cap) -> _QueueSource:
            return _QueueSource(engine, per_shard[k], cap if k == 2 else None)

        monkeypatch.setattr(ShardedEngine, "_round", spy)
        sharded = ShardedEngine(config, LocalShards.open(config, [None] * 3, 9, source), seed=9)
        for _ in range(5_000):  # a poll may find nothing: a shard's queue ran dry first
            if sharded.positions >= 1060:
                break
            sharded.poll()
        monkeypatch.undo()
        assert [p for p, _ in seen if p <= 1060] == triggers, cap
        assert (1000, 0) in seen, cap
        sharded.close()


def test_a_recovery_that_fails_stops_the_coordinator(monkeypatch) -> None:
    """A shard dies in a commit phase and its recovery fails (it stays down past the
    timeout, or the stores refuse to reconcile): the shards may stay a round apart, and the
    coordinator once trained on over them. It now stops as after a failed commit."""
    from renyiboost.exceptions import ShardUnavailable

    config = _config("regression")
    records = _records("regression", 600, seed=1)
    sharded = ShardedEngine(config, [None, None, None], seed=9)
    commit = ShardWorker.commit_round

    def dies(self, tree, stage):
        raise ShardUnavailable(1, "died (injected)")

    def refused(self):
        raise LedgerConflict("the stores disagree (injected)")

    _feed(sharded, records[:300])
    monkeypatch.setattr(ShardWorker, "commit_round", dies)
    monkeypatch.setattr(ShardedEngine, "_reconcile", refused)
    with pytest.raises(LedgerConflict, match="injected"):
        _feed(sharded, records[300:])
    monkeypatch.setattr(ShardWorker, "commit_round", commit)
    with pytest.raises(StateStoreError, match="stopped after a failed commit"):
        sharded.add_one(*records[-1])


def test_a_shard_that_refuses_its_part_is_recovered_and_given_it_again(monkeypatch):
    """``add`` called directly (not through a poll, which recovers) lost a shard part-way:
    the other shards held their rows, and the coordinator's count stayed as before the
    call, so triggers followed positions that no store held (review S, 29 November). Then
    the call raised and that shard's part was dropped, its keyless rows impossible to give
    again without a second budget (review D6). A shard that took nothing and lost nothing
    (a restarted Ray actor refuses a call before doing anything) is recovered and given its
    part again, and the count is every shard's."""
    from renyiboost.exceptions import ShardUnavailable

    config = _config("regression")
    records = _records("regression", 300, seed=1)
    sharded = ShardedEngine(config, [None, None, None], seed=9)
    _feed(sharded, records[:100])
    add, calls = ShardWorker.add, []

    def dies_once(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the second shard of the call
            raise ShardUnavailable(1, "died (injected)")
        return add(self, *args, **kwargs)

    monkeypatch.setattr(ShardWorker, "add", dies_once)
    rows, labels, keys = (list(x) for x in zip(*records[100:160], strict=True))
    sharded.add(np.array(rows), np.array(labels), keys)
    assert sharded.aborted_rounds == 1  # recovered once, and shard 1 took its part again
    monkeypatch.undo()
    _feed(sharded, records[160:161])
    held = sum(state.positions for state in sharded.shards.all("state"))
    assert held == 161 == sharded.positions
    sharded.close()


def test_a_shard_with_events_is_not_kept_waiting_behind_idle_ones() -> None:
    """In a trigger's last ``left < n`` positions only ``left`` shards may read a step. After
    one empty step every shard allowed to read once waited its poll timeout while the events
    sat on a shard that was not: about n timeouts a trigger (15 s at n = 32). Idle, one step
    of each turn of the shards waits: never while events are queued from the start, and at
    most once for an event that arrives after the stream went idle."""
    config = _config("regression")
    records = _records("regression", 300, seed=2)
    mine = [r for r in records if shard_of(r[2], 4) == 0]  # events on shard 0 only
    late = next(r for r in records if shard_of(r[2], 4) == 1)
    queues = [list(mine), [], [], []]
    step = [0]
    waited_with_events: set[int] = set()  # the steps (shards wait in parallel in a step)

    class Recording(_QueueSource):
        def poll_once(self, max_messages=None, timeout=None) -> int:
            if timeout is None and any(queues):
                waited_with_events.add(step[0])
            batch = queues[self.k][:max_messages]
            del queues[self.k][:max_messages]
            for row, label, key in batch:
                self.engine.add_one(row, label, key)
            return len(batch)

    def source(engine, k, n) -> _QueueSource:
        recording = Recording(engine, [])
        recording.k = k
        return recording

    sharded = ShardedEngine(config, LocalShards.open(config, [None] * 4, 9, source), seed=9)
    for step[0] in range(2_000):
        if not any(queues):
            break
        sharded.poll()
    assert sharded.positions == len(mine) and waited_with_events == set()
    for step[0] in range(2_000, 2_010):  # idle
        sharded.poll()
    queues[1].append(late)
    for step[0] in range(3_000, 3_050):
        if not queues[1]:
            break
        sharded.poll()
    assert sharded.positions == len(mine) + 1 and len(waited_with_events) <= 1
    sharded.close()


def test_a_poll_that_failed_part_way_is_counted_before_the_next(monkeypatch) -> None:
    """A shard's source fails after other shards took their events: the coordinator once
    kept its old count (80 where the shards held 90), capped the next poll from it and ran
    the trigger of 120 at 130. The shards' positions are read again first, and the rounds
    still run at their triggers."""
    config = _config("regression")
    records = _records("regression", 400, seed=3)
    per_shard = [[r for r in records if shard_of(r[2], 3) == k] for k in range(3)]
    calls = [0]

    class Failing(_QueueSource):
        def poll_once(self, max_messages=None, timeout=None) -> int:
            taken = super().poll_once(max_messages, timeout)
            if self.k == 2:
                calls[0] += 1
                if calls[0] == 6:
                    raise RuntimeError("the client failed (injected)")
            return taken

    def source(engine, k, n) -> _QueueSource:
        failing = Failing(engine, per_shard[k])
        failing.k = k
        return failing

    seen: list[int] = []
    monkeypatch.setattr(ShardedEngine, "_round", lambda self, original=ShardedEngine._round:
                        (seen.append(self.positions), original(self))[1])
    sharded = ShardedEngine(config, LocalShards.open(config, [None] * 3, 9, source), seed=9)
    failed = 0
    for _ in range(2_000):
        if sharded.positions >= 300:
            break
        try:
            sharded.poll()
        except RuntimeError:
            failed += 1
    assert failed == 1
    schedule = sharded.schedule
    triggers, at = set(), schedule.first
    while at <= sharded.positions:
        triggers.add(at)
        at = schedule.next_after(at)
    per = seen.count(seen[0])  # the rounds of a trigger
    assert seen == [t for t in sorted(triggers) for _ in range(per)][:len(seen)], seen
    sharded.close()


def test_a_seed_on_a_production_deployment_is_refused(tmp_path) -> None:
    """A seeded coordinator marked every shard's store seeded for good, so one stray seed
    on a production deployment made all its later releases say seeded_for_testing; it is
    refused now, and the deployment still opens without a seed, unseeded."""
    config = _config("regression")
    locations = shard_locations(str(tmp_path), 2)
    create_shard_stores(config, locations)
    engine = ShardedEngine(config, locations)
    _feed(engine, _records("regression", 300))
    engine.close()
    with pytest.raises(LedgerConflict, match="production ledger"):
        ShardedEngine(config, locations, seed=5)
    again = ShardedEngine(config, locations)
    assert not again.privacy_guarantee().seeded_for_testing
    again.close()


def _rows(records) -> tuple[np.ndarray, np.ndarray, list[str]]:
    rows, labels, keys = zip(*records, strict=True)
    return np.array(rows), np.array(labels), list(keys)


def test_a_reader_on_another_thread_waits_for_the_round_being_installed(monkeypatch) -> None:
    """A round becomes the model in several steps (its tree appended, the version counted,
    the oldest tree dropped under ``max_trees``); a reader on another thread between them
    got a torn release, a tree's splits with another round's leaves, that validated and
    would have been published (review S, 29 November). Readers now wait for the install."""
    import threading

    from renyiboost.models.trees import Ensemble

    config = EngineConfig.from_defaults(SCHEMA, "regression", 1.0, sampling_rate=1.0,
                                        depth=3, rounds=20, train_every=40, warmup=40,
                                        trees_per_trigger=2, noise_stages=(), max_trees=4)
    records = _records("regression", 200, seed=2)
    reference, released = ShardedEngine(config, [None, None], seed=3), {}
    reference.listeners.append(lambda version: released.update(
        {version: reference.release(after=2)}))  # read on the learner's thread: whole
    reference.add(*_rows(records[:160]))
    sharded = ShardedEngine(config, [None, None], seed=3)
    sharded.add(*_rows(records[:120]))
    append, seen = Ensemble.append, {}

    def read() -> None:
        seen["release"] = sharded.release(after=2)
        seen["margin"] = sharded.predict_margin(np.array([records[0][0]]))

    def append_then_look(self, *args) -> None:
        append(self, *args)
        if self is sharded.booster.ensemble and "reader" not in seen:
            seen["reader"] = reader = threading.Thread(target=read)
            reader.start()
            reader.join(0.5)
            seen["waited"] = reader.is_alive()  # blocked until the install is whole

    monkeypatch.setattr(Ensemble, "append", append_then_look)
    sharded.add(*_rows(records[120:160]))
    monkeypatch.undo()
    seen["reader"].join(10)
    assert seen["waited"]
    seen_release, whole = seen["release"], released[seen["release"].version]
    assert [tree.round for tree in seen_release.trees] == [tree.round for tree in whole.trees]
    assert [tree.leaves for tree in seen_release.trees] == [tree.leaves for tree in whole.trees]
    assert [tree.thresholds for tree in seen_release.trees] == [tree.thresholds for tree in whole.trees]
    sharded.close()
    reference.close()


def test_a_listeners_error_comes_after_the_call_and_stops_nothing() -> None:
    """A listener that raised once stopped the coordinator for good, as a failed commit
    does, in the middle of an ``add`` (40 of 100 positions counted, the trigger's other
    round dropped: review S, 29 November). Its error now comes when the call has counted
    every position and run every round, and the engine goes on."""
    records = _records("regression", 300, seed=2)
    reference = ShardedEngine(_config("regression"), [None, None], seed=3)
    reference.add(*_rows(records[:100]))
    sharded = ShardedEngine(_config("regression"), [None, None], seed=3)
    heard: list[int] = []

    def flaky(version: int) -> None:
        heard.append(version)
        if len(heard) == 2:
            raise ConnectionError("publisher hiccup (injected)")

    sharded.listeners.append(flaky)
    with pytest.raises(ConnectionError, match="injected"):
        sharded.add(*_rows(records[:100]))
    assert sharded.positions == 100
    assert sharded.release_version == reference.release_version
    assert heard == list(range(1, reference.release_version + 1))
    sharded.add(*_rows(records[100:101]))  # not stopped
    sharded.close()
    reference.close()


def test_a_refused_deployment_releases_the_stores_it_opened(tmp_path) -> None:
    """Shard 0 of one deployment beside shard 1 of another is refused when the shards are
    reconciled; the stores the refused coordinator had opened stayed locked while its
    exception was held (a notebook, a logger), so its own deployment was then refused too
    (review S, 29 November)."""
    config = _config("regression")
    deployments = []
    for name in ("a", "b"):
        locations = shard_locations(str(tmp_path / name), 2)
        create_shard_stores(config, locations)
        ShardedEngine(config, locations).close()
        deployments.append(locations)
    with pytest.raises(LedgerConflict, match="another store") as refused:
        ShardedEngine(config, [deployments[0][0], deployments[1][1]])
    assert refused.value is not None  # held, with its traceback
    ShardedEngine(config, deployments[0]).close()


class _DiesInRound(LocalShards):
    """Local shards whose shard 1 dies once at ``method`` (after the others ran it) and comes
    back from its store without what it had not committed, as a restarted actor does."""

    def __init__(self, config: EngineConfig, locations: list[str], method: str) -> None:
        super().__init__(LocalShards.open(config, locations).workers)
        self.config, self.locations, self.method = config, locations, method

    def all(self, method: str, *args):
        from renyiboost.exceptions import ShardUnavailable

        if method != self.method:
            return super().all(method, *args)
        self.method = None
        for worker in self.workers[:1]:
            getattr(worker, method)(*args)
        dead = self.workers[1].engine
        dead._broken = RuntimeError("killed")  # its close commits nothing
        dead.close()
        self.workers[1] = ShardWorker(self.config, self.locations[1], 1, 2)
        raise ShardUnavailable(1, "killed (injected)")


@pytest.mark.parametrize("method", ["round_sums", "commit_round"])
def test_a_shard_death_inside_add_is_told_and_a_replayed_round_announced(tmp_path,
                                                                        method) -> None:
    """Shard 1 dies inside a round that ``add`` triggered. Before its sums: it comes back
    without its uncommitted rows, and ``add`` returned as if they were learned (the count
    went back by the rows that hashed to it: review S, 29 November); it now raises, naming
    how many. Before its commit of a round shard 0 committed: the recovery replays the round
    and the listeners now hear of that version too."""
    from renyiboost.exceptions import ShardUnavailable

    config = _config("regression")
    locations = shard_locations(str(tmp_path), 2)
    create_shard_stores(config, locations)
    sharded = ShardedEngine(config, _DiesInRound(config, locations, "-"), seed=3,
                            recover_timeout=5)
    heard: list[int] = []
    sharded.listeners.append(heard.append)
    records = _records("regression", 200, seed=2)
    sharded.add(*_rows(records[:100]))
    sharded.shards.method = method
    if method == "round_sums":
        with pytest.raises(ShardUnavailable, match=r"without \d+ rows given to add\(\)"):
            sharded.add(*_rows(records[100:120]))
        assert sharded.positions < 120
    else:
        sharded.add(*_rows(records[100:120]))  # shard 1 replays the round shard 0 committed
        assert sharded.positions == 120
    assert heard == list(range(1, sharded.release_version + 1))
    sharded.close()


def test_flush_commits_the_rows_given_since_the_last_round(tmp_path) -> None:
    """A sharded engine had no ``flush()``, so rows given to ``add`` after the last round
    were lost at ``close()`` with no way to keep them (review S, 29 November); a single
    engine offers one."""
    config = _config("regression")
    locations = shard_locations(str(tmp_path), 2)
    create_shard_stores(config, locations)
    sharded = ShardedEngine(config, locations, seed=3)
    sharded.add(*_rows(_records("regression", 30, seed=2)))  # before the warmup's round
    sharded.flush()
    sharded.close()
    again = ShardedEngine(config, locations, seed=3)
    assert again.positions == 30
    again.close()


def test_a_shard_death_inside_flush_is_recovered_and_told(tmp_path) -> None:
    """``flush()`` called the shards without marking the count stale or recovering: a shard
    that died in it came back without its uncommitted rows, the coordinator went on
    counting them, and the next triggers fired at positions no store held (review D5). The
    death is now recovered and the lost rows are named."""
    from renyiboost.exceptions import ShardUnavailable

    config = _config("regression")
    locations = shard_locations(str(tmp_path), 2)
    create_shard_stores(config, locations)
    sharded = ShardedEngine(config, _DiesInRound(config, locations, "flush"), seed=3,
                            recover_timeout=5)
    sharded.add(*_rows(_records("regression", 30, seed=2)))  # before the warmup's round
    with pytest.raises(ShardUnavailable, match=r"without \d+ rows given to add\(\)"):
        sharded.flush()
    held = sum(state.positions for state in sharded.shards.all("state"))
    assert sharded.positions == held < 30
    sharded.close()


def test_a_forked_childs_coordinator_does_not_wait_for_a_lock_its_parent_held() -> None:
    """A child forked while the coordinator's thread held its view lock (a long
    reconciliation, an install) waited for it for good on its first read (review D5). The
    fork hook gives the coordinator a fresh lock, as it gives an engine (run here as the
    child would run it, with the parent's thread holding the old lock)."""
    import threading

    from renyiboost.stream import engine as engine_module

    sharded = ShardedEngine(_config("regression"), [None, None], seed=3)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with sharded._view_lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    assert sharded in engine_module._ENGINES  # what the fork hook renews in the child
    sharded._fresh_locks()  # the hook's call for it (the others' locks are left alone here)
    reader = threading.Thread(target=lambda: sharded.release_version)
    reader.start()
    reader.join(2)
    assert not reader.is_alive()
    release.set()
    holder.join(10)
    sharded.close()
