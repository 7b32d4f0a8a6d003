"""``renyiboost reshard``: every key's ledger moves to its new owner exactly (spent budget,
retirement, row, margin), the model and the stream position stay, the old stores are refused
for good, an interrupted reshard is redone or finished, and a Kafka deployment (real broker,
SQLite and a real PostgreSQL server) goes on training from where it stopped with its keys on
the shards of their partitions and its model topic's versions unbroken.

Exactness: ledgers move as stored bytes, so spent budgets compare with ``==``.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
import warnings
import zlib
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from conftest import read_topic
from test_kafka import _abalone_events, _produce, _service_config, create_topic
from test_sharded import _budgets, _config, _feed, _records

from renyiboost.cli import main as cli
from renyiboost.exceptions import (
    LedgerConflict,
    StoreNotFound,
    StoreResharded,
    TestingOnlyWarning,
)
from renyiboost.release import ModelRelease
from renyiboost.stream.engine import KeyLedgers, StreamEngine
from renyiboost.stream.reshard import _check_places, _owners, reshard
from renyiboost.stream.sharded import (
    ShardedEngine,
    create_shard_stores,
    shard_locations,
    shard_of,
)
from renyiboost.stream.store import (
    KEY_SOURCE_META,
    PARTITIONER_META,
    SEEDED_META,
    TOPIC_IDS_META,
    WENT_BACK_META,
    SQLiteStore,
    SQLStateStore,
    store_at,
)

warnings.simplefilter("ignore", TestingOnlyWarning)


def _deployment(tmp_path, n: int) -> tuple[list[str], dict, dict]:
    """A deployment of ``n`` hash-routed shards after 1,500 records (some keys retired);
    returns its stores, every key's (spent, status) and its model and positions."""
    config = _config("classification")
    locations = shard_locations(str(tmp_path), n)
    create_shard_stores(config, locations)
    engine = ShardedEngine(config, locations, seed=1)
    _feed(engine, _records("classification", 1500))
    engine.shards.all("flush")
    ens = engine.booster.ensemble
    state = {"version": engine.release_version, "positions": engine.positions,
             "leaves": ens.leaves.copy(), "init": ens.init_score, "identity": engine.identity}
    budgets = _budgets(engine)
    engine.close()
    assert {"active", "retired"} <= {status for _, status in budgets.values()}
    return locations, budgets, state


def test_every_ledger_moves_to_its_new_shard_exactly(tmp_path) -> None:
    config = _config("classification")
    old, budgets, state = _deployment(tmp_path, 2)
    report = reshard(config, old, shard_locations(str(tmp_path), 3, alone=False))
    known = sum(status != "unknown" for _, status in budgets.values())
    assert report.moved > 0 and sum(report.n_active) + sum(report.n_retired) == known
    engine = ShardedEngine(config, shard_locations(str(tmp_path), 3), seed=2)
    assert _budgets(engine) == budgets  # bit for bit, retirements included
    for k, worker in enumerate(engine.shards.workers):
        assert worker.engine.n_active + worker.engine.spent_rdp().size > 0
        assert all(shard_of(name, 3) == k for name in worker.engine._keys)
    assert engine.release_version == state["version"]
    assert engine.positions == state["positions"]
    np.testing.assert_array_equal(engine.booster.ensemble.leaves, state["leaves"])
    assert engine.booster.ensemble.init_score == state["init"]
    # The deployment keeps its identity (the model topic names it), at a later epoch.
    assert engine.identity.store_id == state["identity"].store_id
    assert engine.identity.epoch > state["identity"].epoch
    # Training goes on; a retired key stays retired and is charged nothing more.
    retired = [key for key, (_, status) in budgets.items() if status == "retired"]
    _feed(engine, _records("classification", 600, seed=4))
    assert engine.release_version > state["version"]
    after = _budgets(engine)
    assert all(after[key] == budgets[key] for key in retired)
    assert any(after[key][0] > budgets[key][0] for key in budgets if key not in retired)
    engine.close()


def test_one_unsharded_store_splits_into_shards(tmp_path) -> None:
    """A single engine's store becomes shard 0's identity of a 2-shard deployment."""
    config = _config("regression")
    engine = StreamEngine(config, store=store_at(tmp_path / "one.db", create=True), seed=1)
    _feed(engine, _records("regression", 800))
    engine.flush()
    budgets, identity, version = _budgets(engine), engine.store.identity, engine.release_version
    engine.close()
    new = shard_locations(str(tmp_path / "two"), 2)
    (tmp_path / "two").mkdir()
    reshard(config, [str(tmp_path / "one.db")], new)
    sharded = ShardedEngine(config, new, seed=1)
    assert _budgets(sharded) == budgets and sharded.release_version == version
    assert sharded.identity.store_id == identity.store_id
    # its keys are placed by their hash now: every new store says so, for a Kafka shard to
    # refuse (a store that received no key too)
    assert sharded.shards.all("get_meta", "key_routing") == ["hash", "hash"]
    sharded.close()
    # a deployment that holds nothing yet is not marked: Kafka may still feed it
    empty = StreamEngine(config, store=store_at(tmp_path / "empty.db", create=True))
    empty.close()
    (tmp_path / "fresh").mkdir()
    fresh = shard_locations(str(tmp_path / "fresh"), 2)
    reshard(config, [str(tmp_path / "empty.db")], fresh)
    stores = [store_at(location) for location in fresh]
    assert [store.get_meta("key_routing") for store in stores] == [None, None]
    for store in stores:
        store.close()
    with pytest.raises(StoreResharded):
        StreamEngine(config, store=str(tmp_path / "one.db"))
    # resharding it again, elsewhere, names where it went (it said "no state store at …",
    # as if one should be created there)
    (tmp_path / "three").mkdir()
    with pytest.raises(LedgerConflict, match="already resharded into .*two"):
        reshard(config, [str(tmp_path / "one.db")], shard_locations(str(tmp_path / "three"), 3))


def test_the_old_stores_are_refused_for_good(tmp_path) -> None:
    config = _config("classification")
    old, _, _ = _deployment(tmp_path, 2)
    reshard(config, old, shard_locations(str(tmp_path), 1, alone=False))
    archived = sorted(tmp_path.glob("resharded-from-2-*/shard-*-of-2.db"))
    assert len(archived) == 2 and not any(tmp_path.glob("shard-*-of-2.db"))
    for path in archived:
        with pytest.raises(StoreResharded, match="must never train again"):
            StreamEngine(config, store=str(path))
    with pytest.raises(LedgerConflict, match="deployment of 1 shards"):
        shard_locations(str(tmp_path), 2)
    with pytest.raises(StoreResharded):  # moved back by hand: still refused
        for path in archived:
            path.rename(tmp_path / path.name)
        ShardedEngine(config, shard_locations(str(tmp_path), 2, alone=False))


def test_a_backup_of_the_old_stores_restored_in_place_is_refused(tmp_path) -> None:
    """The reshard moves the old files away with their ``.epoch`` records, which refuse an
    older copy restored in place: a nightly backup of the old deployment put back in the
    directory once opened and trained beside the new one, each key with a second budget
    (review S, 29 November). A mark left at each old path refuses that store there (its id
    and creation time) without its tombstone; a reshard back to that number of shards puts
    stores there that continue the old ids, and they open (a mark that refused any store
    once refused them, review D2)."""
    import shutil

    config = _config("classification")
    old, _, _ = _deployment(tmp_path / "d", 2)
    shutil.copytree(tmp_path / "d", tmp_path / "backup")
    (tmp_path / "new").mkdir()
    reshard(config, old, shard_locations(str(tmp_path / "new"), 3))
    for path in map(Path, old):
        shutil.copy(tmp_path / "backup" / path.name, path)
        with pytest.raises(LedgerConflict, match="restored from a backup"):
            SQLiteStore(path)
    with pytest.raises(LedgerConflict, match="restored from a backup"):
        ShardedEngine(config, old)
    for path in map(Path, old):
        path.unlink()
        with pytest.raises(StoreNotFound, match="resharded into .*new"):
            SQLiteStore(path)
    back = reshard(config, shard_locations(str(tmp_path / "new"), 3),
                   shard_locations(str(tmp_path / "d"), 2, alone=False))
    assert back.into == old and len(list((tmp_path / "d").glob("*.resharded"))) == 2
    ShardedEngine(config, old).close()
    # run again with other targets, the finished reshard says where it went
    with pytest.raises(LedgerConflict, match="already resharded into"):
        reshard(config, shard_locations(str(tmp_path / "new"), 3),
                shard_locations(str(tmp_path / "other"), 4))


def test_scaling_back_and_forth_in_one_directory_keeps_every_ledger(tmp_path) -> None:
    """2 → 3 → 2 → 3 shards in one directory (the command's default ``--into``). The second
    reshard put live stores on paths the first had marked; the third took that old mark for
    its own, "finished" the first reshard by moving the live stores into the first archive
    (over its tombstoned files), and a ``state init`` there then gave every key a fresh
    budget (review H). A mark now counts only while no other store lives at its path, marks
    at one path are kept one after another, and a move never overwrites."""
    import time

    config = _config("classification")
    d = tmp_path / "d"
    two, budgets, _ = _deployment(d, 2)
    three = shard_locations(str(d), 3, alone=False)
    for sources, targets in ((two, three), (three, two), (two, three)):
        report = reshard(config, sources, targets)
        assert not report.finished_only
        time.sleep(1.1)  # an archive folder a second
    engine = ShardedEngine(config, three)
    assert _budgets(engine) == budgets
    engine.close()
    with pytest.raises(StoreNotFound, match="resharded into"):
        ShardedEngine(config, two)
    archives = sorted(d.glob("resharded-from-*"))
    assert len(archives) == 3
    for folder in archives:  # every archived store is the tombstoned one it was (read
        for path in folder.glob("*.db"):  # as a file: opened, shard 0 continues a live id)
            with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
                assert db.execute("SELECT value FROM meta WHERE name = 'side:resharded'"
                                  ).fetchone() is not None, path
    marks = json.loads((d / "shard-0-of-2.db.resharded").read_text())
    assert isinstance(marks, list) and len(marks) == 2  # both reshards of that path


def test_a_backup_from_before_a_reshard_restored_elsewhere_is_refused(tmp_path) -> None:
    """The reshard moved the old files away, so a byte copy of one opened at another path
    was taken for the moved store: it opened with no tombstone and the ledgers the new
    deployment also held, each key with a second budget (review H). The mark at its home
    names it, so it is refused as a copy from before the reshard."""
    import shutil

    config = _config("classification")
    old, _, _ = _deployment(tmp_path / "d", 2)
    shutil.copytree(tmp_path / "d", tmp_path / "backup")
    reshard(config, old, shard_locations(str(tmp_path / "d"), 3, alone=False))
    shutil.copytree(tmp_path / "backup", tmp_path / "restored")
    for path in shard_locations(str(tmp_path / "restored"), 2, alone=False):
        with pytest.raises(LedgerConflict, match="before `renyiboost reshard` moved"):
            SQLiteStore(path)
    with pytest.raises(LedgerConflict, match="before `renyiboost reshard` moved"):
        ShardedEngine(config, shard_locations(str(tmp_path / "restored"), 2))


def test_a_reshard_that_crashed_moving_the_old_files_finishes_when_run_again(
        tmp_path, monkeypatch) -> None:
    """A crash among the old files' moves left some in the archive folder and some in
    place: running the reshard again said "no state store at …" (as if a ledger was lost)
    and the new deployment refused the directory as one of two deployments (review S). Now
    the reshard run again moves the rest into the same folder."""
    import renyiboost.stream.reshard as module

    config = _config("classification")
    old, budgets, _ = _deployment(tmp_path, 2)
    new = shard_locations(str(tmp_path), 3, alone=False)
    move, moves = module.shutil.move, []

    def crashes(source, target):
        moves.append(source)
        if len(moves) == 3:
            raise OSError("killed (injected)")
        return move(source, target)

    monkeypatch.setattr(module.shutil, "move", crashes)
    with pytest.raises(OSError, match="injected"):
        reshard(config, old, new)
    monkeypatch.undo()
    with pytest.raises(LedgerConflict, match="deployment of 2 shards"):
        ShardedEngine(config, shard_locations(str(tmp_path), 3))
    report = reshard(config, old, new)
    assert report.finished_only and report.into == new
    (archive,) = tmp_path.glob("resharded-from-2-*")
    assert sorted(p.name for p in archive.glob("*.db")) == [Path(p).name for p in old]
    engine = ShardedEngine(config, shard_locations(str(tmp_path), 3))
    assert _budgets(engine) == budgets
    engine.close()


def test_a_store_named_twice_or_as_source_and_target_is_refused_first(tmp_path,
                                                                      monkeypatch) -> None:
    """Whatever the spelling (relative, absolute, ``sqlite:///``), a store given as both
    a source and a target, or twice as either, is refused by name before any store opens
    (it was refused later as "in use by this process" or as one that "already exists"),
    and the deployment still reshards after."""
    config = _config("classification")
    old, budgets, _ = _deployment(tmp_path, 2)
    monkeypatch.chdir(tmp_path)
    relative = Path(old[0]).name
    new = [str(tmp_path / "new-0.db"), str(tmp_path / "new-1.db")]
    cases = [(old, [f"sqlite:///{old[0]}", new[1]], "both a source and a target"),
             (old, [new[0], "new-0.db"], "target store .* is named twice"),
             ([old[0], relative], new, "source store .* is named twice")]
    for sources, targets, message in cases:
        with pytest.raises(LedgerConflict, match=message):
            reshard(config, sources, targets)
        assert not any(Path(t.removeprefix("sqlite:///")).exists() for t in targets[1:])
    reshard(config, old, new)
    sharded = ShardedEngine(config, new)
    assert _budgets(sharded) == budgets
    sharded.close()


def test_postgres_urls_naming_one_store_are_one_place() -> None:
    """Two spellings of one PostgreSQL store (scheme alias, host case, default port, user
    and password, other parameters) are one source or target; reshard compared them as
    text and found the second spelling later, as a store in use (review H #7). A different
    schema, database, host or port is another store."""
    pytest.importorskip("psycopg")
    one = "postgresql://u:pw@DB/state?schema=shard_0"
    same = ["postgres://v@db:5432/state?schema=shard_0&sslmode=require",
            "postgresql://db/state?application_name=x&schema=shard_0"]
    for spelling in same:
        with pytest.raises(LedgerConflict, match="both a source and a target"):
            _check_places([one], [spelling])
        with pytest.raises(LedgerConflict, match="source store .* is named twice"):
            _check_places([one, spelling], [])
    for other in ("postgresql://u@db/state?schema=shard_1", "postgresql://u@db/other?schema=shard_0",
                  "postgresql://u@db2/state?schema=shard_0",
                  "postgresql://u@db:5433/state?schema=shard_0"):
        _check_places([one], [other])
    # a service or host address names its own server; a socket directory keeps its case
    # (they were taken for one store: review D7 #8)
    _check_places(["postgresql:///state?service=prod&schema=s"],
                  ["postgresql:///state?service=staging&schema=s"])
    _check_places(["postgresql:///state?host=/run/PG&schema=s"],
                  ["postgresql:///state?host=/run/pg&schema=s"])
    _check_places(["postgresql://db/state?hostaddr=10.0.0.1&schema=s"],
                  ["postgresql://db/state?hostaddr=10.0.0.2&schema=s"])


def _one_store_reading_keys_from(tmp_path, name: str, key_source: dict) -> str:
    """A single engine's store that learned 200 records, its keys pinned to ``key_source``
    as the Kafka trainer pins them."""
    config = _config("regression")
    path = str(tmp_path / f"{name}.db")
    engine = StreamEngine(config, store=store_at(path, create=True), seed=1)
    _feed(engine, _records("regression", 200))
    engine.store.set_meta(KEY_SOURCE_META, key_source)
    engine.close()
    return path


def test_where_keys_came_from_moves_with_the_ledgers(tmp_path) -> None:
    """The Kafka trainer's pin of the keys' source (message key or a payload field) is
    copied to the new stores: without it a new store would take its keys from wherever its
    first start says, and a person whose payload field differs from the message key would
    get a second ledger. A payload field cannot place keys on several shards, so resharding
    such a store into several is refused, and old stores that disagree are refused. The
    mark of a seeded past moves too."""
    config = _config("regression")
    field = {"key_field": "user"}
    one = _one_store_reading_keys_from(tmp_path, "field", field)
    with pytest.raises(LedgerConflict, match="payload field 'user'"):
        reshard(config, [one], shard_locations(str(tmp_path / "two"), 2))
    into = str(tmp_path / "moved.db")
    reshard(config, [one], [into])
    store = store_at(into)
    assert store.get_meta(KEY_SOURCE_META) == field
    assert store.get_meta(SEEDED_META) is True  # and so does the model's seeded past
    store.close()
    moved = StreamEngine(config, store=into)  # resumed without a seed, it still says so
    assert moved.privacy_guarantee().seeded_for_testing
    moved.close()
    old, _, _ = _deployment(tmp_path / "shards", 2)
    for location in old:
        store = store_at(location)
        store.set_meta(KEY_SOURCE_META, {"message_key": True})
        store.close()
    reshard(_config("classification"), old, shard_locations(str(tmp_path / "three"), 3))
    for location in shard_locations(str(tmp_path / "three"), 3, alone=False):
        store = store_at(location)
        assert store.get_meta(KEY_SOURCE_META) == {"message_key": True}
        store.close()
    mixed = shard_locations(str(tmp_path / "mixed"), 2)
    create_shard_stores(config, mixed)
    for location, source in zip(mixed, [field, {"message_key": True}], strict=True):
        store = store_at(location)
        store.set_meta(KEY_SOURCE_META, source)
        store.close()
    with pytest.raises(LedgerConflict, match="different key sources"):
        reshard(config, mixed, [str(tmp_path / "joined.db")])


def test_an_interrupted_reshard_is_redone_or_finished(tmp_path, monkeypatch) -> None:
    """A crash while the new stores fill: they are pending (refused), the old ones still
    train, and running it again starts over. A crash after the first tombstone: running it
    again finishes. Either way the ledgers end up moved exactly once."""
    config = _config("classification")
    old, budgets, _ = _deployment(tmp_path, 2)
    new = shard_locations(str(tmp_path), 3, alone=False)
    adopt = StreamEngine.adopt

    def crash_on_second(self, moved):
        if self.store.get_meta("shard_map")["shard"] == 1:
            raise KeyboardInterrupt("killed")
        adopt(self, moved)

    monkeypatch.setattr(StreamEngine, "adopt", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        reshard(config, old, new)
    monkeypatch.setattr(StreamEngine, "adopt", adopt)
    with pytest.raises(StoreResharded, match="did not finish"):
        StreamEngine(config, store=new[0])
    engine = ShardedEngine(config, old)  # the old deployment is intact
    assert _budgets(engine) == budgets
    engine.close()

    set_meta, tombs = SQLStateStore.set_meta, []

    def crash_after_one_tomb(self, name, value):
        if name == "resharded":
            tombs.append(self.location)
            if len(tombs) == 2:
                raise KeyboardInterrupt("killed")
        set_meta(self, name, value)

    monkeypatch.setattr(SQLStateStore, "set_meta", crash_after_one_tomb)
    with pytest.raises(KeyboardInterrupt):
        reshard(config, old, new)
    monkeypatch.setattr(SQLStateStore, "set_meta", set_meta)
    with pytest.raises(StoreResharded, match="must never train again"):
        ShardedEngine(config, old)
    with pytest.raises(StoreResharded, match="did not finish"):
        ShardedEngine(config, new)
    # finishing with part of the sources once tombstoned only those and called it done
    with pytest.raises(LedgerConflict, match="finish it with all of them as its sources"):
        reshard(config, old[:1], new)
    assert reshard(config, old, new).finished_only
    engine = ShardedEngine(config, shard_locations(str(tmp_path), 3))
    assert _budgets(engine) == budgets
    engine.close()
    for location in new:  # a reshard onto stores that hold ledgers is refused
        store_at(location).close()
    fresh = shard_locations(str(tmp_path / "again"), 2)
    (tmp_path / "again").mkdir()
    create_shard_stores(config, fresh)
    with pytest.raises(LedgerConflict):
        reshard(config, shard_locations(str(tmp_path), 3), fresh[:1] + new[:1])


def _single_store(location: str) -> dict:
    """One engine's new store at ``location`` after 800 records; returns every key's
    budget."""
    engine = StreamEngine(_config("regression"), store=store_at(location, create=True), seed=1)
    _feed(engine, _records("regression", 800))
    engine.flush()
    budgets = _budgets(engine)
    engine.close()
    return budgets


def _trainable(config, location: str) -> bool:
    """Whether an engine accepts the store at ``location`` (it exists and is not refused as
    resharded or pending)."""
    try:
        StreamEngine(config, store=location, coordinated=True).close()
    except (StoreResharded, StoreNotFound):
        return False
    return True


@pytest.mark.parametrize(("crash", "backend"), [
    ("while_an_engine_loads_it", "sqlite"), ("where_it_was_marked_pending", "sqlite"),
    ("while_it_adopts_its_keys", "sqlite"), ("while_an_engine_loads_it", "postgres")])
def test_no_crash_leaves_a_new_store_trainable_beside_the_old_one(tmp_path, monkeypatch,
                                                                  request, crash,
                                                                  backend) -> None:
    """A new store is created continuing the old store's identity; a crash at any moment
    after that (while an engine loads it, where the pending mark used to be written in a
    transaction of its own, while it adopts its keys) must leave it refused for as long as
    the old store trains, or the keys would start second ledgers under the same store id.
    Running the reshard again moves every ledger exactly once."""
    config = _config("regression")
    if backend == "postgres":
        url, name = request.getfixturevalue("postgres_server").url, uuid.uuid4().hex[:8]
        old, new = f"{url}?schema=o_{name}", shard_locations(f"{url}?schema=n_{name}", 2)
    else:
        (tmp_path / "two").mkdir()
        old, new = str(tmp_path / "one.db"), shard_locations(str(tmp_path / "two"), 2)
    budgets = _single_store(old)
    store = store_at(old)
    old_location = store.location
    store.close()
    load, set_meta = SQLStateStore.load, SQLStateStore.set_meta

    def killed_loading(self, *args):
        if self.location != old_location:
            raise KeyboardInterrupt("killed")
        return load(self, *args)

    def killed_marking(self, name, value):
        if self.location != old_location and name == "reshard_pending" and value is not None:
            raise KeyboardInterrupt("killed")
        set_meta(self, name, value)

    def killed_adopting(self, moved):
        raise KeyboardInterrupt("killed")

    patch = {"while_an_engine_loads_it": (SQLStateStore, "load", killed_loading),
             "where_it_was_marked_pending": (SQLStateStore, "set_meta", killed_marking),
             "while_it_adopts_its_keys": (StreamEngine, "adopt", killed_adopting)}[crash]
    monkeypatch.setattr(*patch)
    try:
        reshard(config, [old], new)
    except KeyboardInterrupt:
        pass
    monkeypatch.undo()
    if _trainable(config, old):
        trainable_new = [location for location in new if _trainable(config, location)]
        assert trainable_new == [], "a new store is trainable beside the untombstoned old one"
        with pytest.raises(StoreResharded, match="did not finish"):  # created, and pending
            StreamEngine(config, store=new[0], coordinated=True)
    reshard(config, [old], new)  # starts over, or finishes
    engine = ShardedEngine(config, new)
    assert _budgets(engine) == budgets
    engine.close()
    with pytest.raises(StoreResharded, match="must never train again"):
        StreamEngine(config, store=old)


def test_a_trained_store_left_unmarked_by_an_older_reshard_is_refused(tmp_path) -> None:
    """Before the pending mark came with the identity, a crash could leave a new store that
    continued the old one's identity unmarked, and it could be trained on: its keys may hold a
    second ledger. Running the reshard again refuses it and says so (it never deletes it)."""
    config = _config("regression")
    old = str(tmp_path / "one.db")
    _single_store(old)
    store = store_at(old)
    identity = store.identity
    store.close()
    (tmp_path / "two").mkdir()
    new = shard_locations(str(tmp_path / "two"), 2)
    engine = StreamEngine(config, store=store_at(new[0], create=True, continues=identity),
                          coordinated=True, seed=1)
    engine.add_one(np.zeros(3), 1.0, "person-0")
    engine.close()
    with pytest.raises(LedgerConflict, match="second ledger"):
        reshard(config, [old], new)
    assert Path(new[0]).exists() and _trainable(config, old)


def test_a_store_written_before_origins_opens_and_records_them_from_now_on(tmp_path) -> None:
    import sqlite3

    config = _config("regression")
    path = tmp_path / "old.db"
    engine = StreamEngine(config, store=store_at(path, create=True), seed=1)
    engine.add(np.zeros((2, 3)), [1.0, 2.0], ["a", "b"], [("t:0", 1), ("t:1", 1)])
    engine.close()
    with sqlite3.connect(path) as db:  # the layout before the column existed
        db.execute("UPDATE keys SET origins = NULL, crc = ?",
                   (zlib.crc32(b'["a", "b"]', zlib.crc32(db.execute(
                       "SELECT uids FROM keys").fetchone()[0])),))
        db.execute("ALTER TABLE keys DROP COLUMN origins")
    engine = StreamEngine(config, store=str(path), seed=1)
    engine.add(np.zeros((1, 3)), [1.0], ["c"], [("t:1", 2)])
    engine.flush()
    assert engine.store.key_origins() == {"a": None, "b": None, "c": "t:1"}
    engine.close()


def test_keys_without_a_recorded_partition_move_only_with_their_whole_shard() -> None:
    """Stores written before origins were recorded: a shard whose partitions all go to one
    new shard moves whole; one whose partitions split is refused (never guessed)."""
    keys = KeyLedgers(np.array(["a", "b", None], dtype=object),
                      np.array([None, "t:2", None], dtype=object), np.ones(3, bool),
                      np.zeros((3, 1)), np.zeros(3), np.zeros(3), np.zeros(3))
    old_map = {"t": [0, 1, 0, 1]}  # shard 0 holds partitions 0 and 2
    np.testing.assert_array_equal(_owners(0, keys, 2, 1, old_map, {"t": [0, 0, 0, 0]}),
                                  [0, 0, 0])
    with pytest.raises(LedgerConflict, match="no recorded source partition"):
        _owners(0, keys, 2, 4, old_map, {"t": [0, 1, 2, 3]})
    known = keys.take(np.array([1, 2]))
    np.testing.assert_array_equal(_owners(0, known, 2, 4, old_map, {"t": [0, 1, 2, 3]}),
                                  [2, 0])
    with pytest.raises(LedgerConflict, match="another shard"):
        _owners(1, known, 2, 4, old_map, {"t": [0, 1, 2, 3]})


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_kafka_deployment_reshards_and_trains_on(kafka_bootstrap, tmp_path, capsys, request,
                                                   backend) -> None:
    """2 shards read 600 events of a 4-partition topic; ``renyiboost reshard --to 3`` moves
    every key to the shard of its partition (partition ``p`` to shard ``p mod 3``: not the
    key's hash mod 3, which librdkafka's CRC-32 partitioner would make equal for 4 shards); 3
    shards read the other 400 events. Budgets at
    the reshard are unchanged, no event is read twice or skipped, and the model topic holds
    versions 1…v of one store, in order."""
    topic = f"reshard-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, topic, partitions=4)
    events = _abalone_events(limit=1000)
    _produce(kafka_bootstrap, topic, events[:600])
    if backend == "postgres":
        state = f"{request.getfixturevalue('postgres_server').url}?schema=r_{topic[8:]}"
    else:
        state = str(tmp_path / "shards")
    config = str(_service_config(tmp_path, kafka_bootstrap, topic))
    assert cli(["state", "init", "--config", config, "--state", state, "--shards", "2"]) == 0
    train = ["train", "--config", config, "--state", state, "--max-idle", "2", "--json"]
    assert cli([*train, "--shards", "2"]) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first["positions"] == 600

    from renyiboost.connectors.service import engine_config, load_config

    engine_cfg = engine_config(load_config(config).model)
    names = sorted({key.decode() for key, _ in events[:600]})

    def budgets(n: int) -> dict:
        engine = ShardedEngine(engine_cfg, shard_locations(state, n))
        try:
            return {name: engine.operator_budget_of(name) for name in names}
        finally:
            engine.close()

    before = budgets(2)
    ids = set()
    for k, location in enumerate(shard_locations(state, 2)):  # as if the topic went back
        store = store_at(location)
        owners = store.get_meta("partition_map")[topic]
        store.set_meta(WENT_BACK_META, {f"{topic}:{p}": 7 + p for p, owner in enumerate(owners)
                                        if owner == k})
        assert store.get_meta(PARTITIONER_META) == "consistent_random"
        ids.add(json.dumps(store.get_meta(TOPIC_IDS_META)))
        store.close()
    assert len(ids) == 1 and topic in json.loads(ids.pop())
    assert cli(["reshard", "--config", config, "--state", state, "--shards", "2",
                "--to", "3"]) == 0
    out = capsys.readouterr().out
    assert f"partition map: {{'{topic}': [0, 1, 2, 0]}}" in out
    assert budgets(3) == before
    partition_of = {m.key().decode(): m.partition() for m in read_topic(kafka_bootstrap, topic,
                                                                        600)}
    engine = ShardedEngine(engine_cfg, shard_locations(state, 3))
    for k, worker in enumerate(engine.shards.workers):
        keys = worker.engine._keys
        assert keys and all(partition_of[name] % 3 == k for name in keys)
        assert set(worker.engine.offsets) == {f"{topic}:{p}" for p in range(4) if p % 3 == k}
        store = worker.engine.store  # the Kafka side values follow (review S, 29 November)
        assert store.get_meta(WENT_BACK_META) == {f"{topic}:{p}": 7 + p for p in range(4)
                                                  if p % 3 == k}
        assert store.get_meta(PARTITIONER_META) == "consistent_random"
        assert topic in store.get_meta(TOPIC_IDS_META)
    engine.close()

    _produce(kafka_bootstrap, topic, events[600:])
    assert cli([*train, "--shards", "2"]) == 1
    assert "deployment of 3 shards" in capsys.readouterr().err  # either backend
    assert cli([*train, "--shards", "3"]) == 0
    second = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert second["positions"] == len(events) and second["consumed"] == 400
    version = second["release_version"]
    assert version > first["release_version"] and second["published_version"] == version
    releases = [ModelRelease.model_validate_json(m.value())
                for m in read_topic(kafka_bootstrap, f"{topic}.models", version)]
    assert [r.version for r in releases] == list(range(1, version + 1))
    assert len({r.store_id for r in releases}) == 1
    epochs = [r.epoch for r in releases]
    assert epochs == sorted(epochs) and epochs[0] < epochs[-1]


def test_a_finish_before_a_reshard_is_not_run_again_after_it(tmp_path) -> None:
    """The end burst's record moves with the ledgers: a finish() at the same position on the
    new shards runs no second burst (which would charge every key again), and the model and
    budgets are as the burst left them."""
    config = _config("classification")
    old, _, _ = _deployment(tmp_path, 2)
    engine = ShardedEngine(config, old, seed=3)
    assert engine.finish() > 0
    spent, rounds = _budgets(engine), engine.booster.rounds_done
    grid, released = engine.released_grid, engine.release()
    assert grid is not None and released.smoothing_spans is not None
    engine.close()
    new = shard_locations(str(tmp_path), 3, alone=False)
    reshard(config, old, new)
    after = ShardedEngine(config, new, seed=4)
    # the end's grid moved too: the new shards answer with its spans (and buy no second)
    np.testing.assert_array_equal(after.released_grid.cdf, grid.cdf)
    assert after.release().smoothing_spans == released.smoothing_spans
    assert after.finish() == 0
    assert after.booster.rounds_done == rounds and _budgets(after) == spent
    after.close()


def test_scaling_back_onto_retired_postgres_schemas_says_what_they_are(postgres_server
                                                                       ) -> None:
    """PostgreSQL keeps a reshard's retired stores in place, so scaling 2 → 3 → 2 at one
    URL met the old ``shard_0_of_2`` and refused it as a store that "may hold a second
    ledger", asking for budgets to be added up by hand (review H). It is named for what it
    is: a store an earlier reshard retired."""
    config = _config("classification")
    base = f"{postgres_server.url}?schema=r{uuid.uuid4().hex[:8]}"
    two, _, _ = _deployment(base, 2)
    three = shard_locations(base, 3, alone=False)
    reshard(config, two, three)
    with pytest.raises(LedgerConflict, match="an earlier reshard retired"):
        reshard(config, three, shard_locations(base, 2, alone=False))
    ShardedEngine(config, three).close()  # nothing changed
