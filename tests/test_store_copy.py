"""A durable state store holds one ledger and cannot be copied: ``pickle``, ``copy.copy``,
``copy.deepcopy`` and River's ``clone()`` (which deep-copies an estimator's parameters) are
refused with :class:`~renyiboost.exceptions.LedgerConflict` and a message that says what to
do instead, never with the ``TypeError`` of an open file, and never by a silent shallow copy
that shares the ledger. The memory store copies as before."""

from __future__ import annotations

import copy
import os
import pickle
import shutil
import signal
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from renyiboost import SGBDTClassifier
from renyiboost.exceptions import LedgerConflict, StoreLocked, TestingOnlyWarning
from renyiboost.stream.postgres import PostgresStore
from renyiboost.stream.store import MemoryStore, SQLiteStore

warnings.simplefilter("ignore", TestingOnlyWarning)

COPIES: dict[str, Callable[[Any], Any]] = {
    "deepcopy": copy.deepcopy, "copy": copy.copy, "pickle": pickle.dumps}


def _refused(store: SQLiteStore | PostgresStore, how: str) -> None:
    with pytest.raises(LedgerConflict, match="cannot be copied") as refused:
        COPIES[how](store)
    message = str(refused.value)
    assert store.location in message
    assert "new path" in message and "lock" in message  # what to do instead
    store.set_meta("still_mine", 1)  # the store itself is untouched and still usable
    assert store.get_meta("still_mine") == 1


@pytest.mark.parametrize("how", COPIES)
def test_a_sqlite_store_cannot_be_copied(tmp_path, how) -> None:
    store = SQLiteStore(tmp_path / "state.db", create=True)
    try:
        _refused(store, how)
    finally:
        store.close()


@pytest.mark.parametrize("how", COPIES)
def test_a_postgres_store_cannot_be_copied(postgres_server, how) -> None:
    store = PostgresStore(postgres_server.url, schema=f"c_{uuid.uuid4().hex[:12]}",
                          create=True)
    try:
        _refused(store, how)
    finally:
        store.close()


def test_an_estimator_on_a_durable_store_refuses_clone_and_says_why(tmp_path) -> None:
    """River's ``clone()`` deep-copies the ``store`` parameter: a clone on a copy of the
    store would be a second ledger of the same keys."""
    model = SGBDTClassifier({"a": (0.0, 1.0)}, store=SQLiteStore(tmp_path / "s.db",
                                                                 create=True))
    with pytest.raises(LedgerConflict, match="cannot be copied"):
        model.clone()
    model.learn_one({"a": 0.5}, True, key="k0")  # the original goes on
    model.engine.close()


def test_a_clone_of_a_model_opened_by_path_says_this_process_holds_the_store(tmp_path) -> None:
    """A model given ``store="s.db"`` clones by opening that path again, and the lock then
    blamed "pid <this process> … stop that one first", as if another program held it."""
    SQLiteStore(tmp_path / "s.db", create=True).close()
    model = SGBDTClassifier({"a": (0.0, 1.0)}, store=str(tmp_path / "s.db"))
    with pytest.raises(StoreLocked, match="this process: another model") as refused:
        model.clone()
    assert "one ledger" in str(refused.value) and "stop that one" not in str(refused.value)
    model.learn_one({"a": 0.5}, True, key="k0")  # the original goes on
    model.engine.close()


def test_the_memory_store_and_its_estimator_copy_as_before() -> None:
    store = MemoryStore()
    store.set_meta("published", 3)
    for how in ("deepcopy", "copy"):
        copied = COPIES[how](store)
        assert copied is not store and copied.get_meta("published") == 3
        assert copied.identity == store.identity
    assert pickle.loads(pickle.dumps(store)).get_meta("published") == 3
    model = SGBDTClassifier({"a": (0.0, 1.0)})
    assert isinstance(model.clone(), SGBDTClassifier)


def _wait_for_child(child: int, what: str, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while (done := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        pytest.fail(f"the forked child hung: {what}")
    return os.waitstatus_to_exitcode(done[1])


def test_a_forked_child_neither_learns_nor_writes_on_its_parents_ledger(tmp_path) -> None:
    """``multiprocessing``'s default start on Linux forks: the child inherits the open
    engine, its store's connection and its lock, and no copy guard runs. A forked child
    learned and released version 6 on the parent's ledger, and the parent's clean close then
    overwrote it with its own snapshot (the store fell back to version 0). Now the child is
    refused at once, and its close leaves the parent's store alone."""
    import os

    import numpy as np

    path = tmp_path / "state.db"
    model = SGBDTClassifier({"a": (0.0, 1.0)}, store=SQLiteStore(path, create=True),
                            train_every=20, warmup=20, seed=1)
    rng = np.random.default_rng(0)
    for i in range(60):
        model.learn_one({"a": float(rng.random())}, bool(i % 2), key=f"k{i}")
    released = model.engine.release_version
    child = os.fork()
    if child == 0:  # the child: report through the exit status only
        status = 0
        try:
            model.learn_one({"a": 0.5}, True, key="k0")
            status = 1  # learned: wrong
        except LedgerConflict:
            pass
        except BaseException:  # noqa: BLE001 - the child reports through its status
            status = 2
        try:
            model.engine.store.commit([])
            status = status or 3  # wrote: wrong
        except LedgerConflict:
            pass
        except BaseException:  # noqa: BLE001 - the child reports through its status
            status = status or 4
        model.close()  # must not commit, nor unlock the parent's store
        os._exit(status)
    # a child that learned may hang on its dead committer
    assert _wait_for_child(child, "it went on learning on its parent's store") == 0
    for i in range(60, 100):  # the parent goes on, still holding its lock
        model.learn_one({"a": float(rng.random())}, bool(i % 2), key=f"k{i}")
    with pytest.raises(StoreLocked, match="this process: another model"):
        SQLiteStore(path)
    version = model.engine.release_version
    assert version > released
    model.close()
    again = SGBDTClassifier({"a": (0.0, 1.0)}, store=SQLiteStore(path), train_every=20,
                            warmup=20, seed=1)
    assert again.engine.release_version == version
    again.close()


def test_a_child_forked_while_a_commit_is_in_flight_is_told_not_left_waiting(tmp_path):
    """A child forked while the parent's write-behind commit was in flight waited for it
    for good on its first read: the committer thread stayed in the parent, and so did a lock
    it might hold (review D4 #6, 29 November). The child's read is now refused at once; the
    parent's commit lands and the parent reads on."""
    import threading

    import numpy as np

    class Gated(SQLiteStore):
        def __init__(self, path: Path) -> None:
            super().__init__(path, create=True)
            self.gate, self.entered = threading.Event(), threading.Event()

        def commit(self, change) -> None:
            self.entered.set()
            assert self.gate.wait(30)
            super().commit(change)

    store = Gated(tmp_path / "state.db")
    store.gate.set()
    model = SGBDTClassifier({"a": (0.0, 1.0)}, store=store, train_every=10**6, warmup=1,
                            seed=1)
    rng = np.random.default_rng(0)
    for i in range(40):
        model.learn_one({"a": float(rng.random())}, bool(i % 2), key=f"k{i}")
    model.engine.wait_durable()
    store.gate.clear()
    store.entered.clear()
    learner = threading.Thread(target=model.engine.train, args=(1,))
    learner.start()  # its commits wait at the gate, the learner inside the engine's locks
    assert store.entered.wait(10)
    child = os.fork()
    if child == 0:
        status = 1
        try:
            model.predict_proba_one({"a": 0.5})
        except LedgerConflict:
            status = 0
        except BaseException:  # noqa: BLE001 - the child reports through its status
            status = 2
        os._exit(status)
    assert _wait_for_child(child, "it waited for its parent's commit", timeout=15) == 0
    store.gate.set()
    learner.join(30)
    assert model.engine.release_version == 2
    model.close()


def test_a_byte_copy_of_a_store_beside_its_original_is_refused(tmp_path) -> None:
    """``cp state.db other.db`` opened as the same store with a new record beside it, and
    trained beside the original every key had two budgets (review B, 28 November). A store
    records its home; a copy opened while the home holds the same store is refused, live or
    closed, with or without the record beside the original, before the copy changes. A hard
    link is the same store; a store moved away from its home takes its new place as home."""
    original = tmp_path / "state.db"
    model = SGBDTClassifier({"a": (0.0, 1.0)}, store=SQLiteStore(original, create=True))
    model.learn_one({"a": 0.5}, True, key="k0")
    model.engine.close()
    shutil.copy(original, tmp_path / "copy.db")  # closed: everything is in the main file
    copy_bytes = (tmp_path / "copy.db").read_bytes()
    with pytest.raises(LedgerConflict, match="is a copy of the state store") as refused:
        SQLiteStore(tmp_path / "copy.db")
    assert str(original) in str(refused.value) and "two budgets" in str(refused.value)
    assert (tmp_path / "copy.db").read_bytes() == copy_bytes
    assert not (tmp_path / "copy.db-wal").exists()  # the refusal closed what it opened
    assert not (tmp_path / "state.db-wal").exists()  # the original was read, not opened
    live = SQLiteStore(original)  # live, its newest commits in its -wal
    with pytest.raises(LedgerConflict, match="is a copy"):
        SQLiteStore(tmp_path / "copy.db")
    live.close()
    (tmp_path / "state.db.epoch").rename(tmp_path / "record")  # the record lost: the
    with pytest.raises(LedgerConflict, match="is a copy"):     # identity says it
        SQLiteStore(tmp_path / "copy.db")
    (tmp_path / "record").rename(tmp_path / "state.db.epoch")
    os.link(original, tmp_path / "link.db")  # the same file under another name
    SQLiteStore(tmp_path / "link.db").close()
    live = SQLiteStore(original)
    live.set_meta("last", 1)  # a commit in state.db-wal, as a crash leaves it
    shutil.copy(f"{original}-wal", tmp_path / "wal")
    live.close()
    shutil.copy(tmp_path / "wal", f"{original}-wal")
    with pytest.raises(LedgerConflict, match="under another name"):  # not its -wal
        SQLiteStore(tmp_path / "link.db")
    again = SQLiteStore(original)  # under its own name: the commit is there
    assert again.get_meta("last") == 1
    again.close()
    (tmp_path / "link.db").unlink()
    moved = tmp_path / "moved" / "state.db"
    moved.parent.mkdir()
    for suffix in ("", ".epoch"):
        Path(f"{original}{suffix}").rename(f"{moved}{suffix}")
    SQLiteStore(moved).close()  # the home is gone: moved, and the new place is home
    shutil.copy(moved, tmp_path / "second.db")
    with pytest.raises(LedgerConflict, match=f"at {moved} "):
        SQLiteStore(tmp_path / "second.db")


def test_a_copy_of_a_postgres_store_in_another_schema_is_refused(postgres_server) -> None:
    """A schema copied into another of the same database (a ``pg_dump`` restored under
    another name) is the same store; refused while the original schema holds it, and once
    that schema is gone the copy is the store, moved."""
    import psycopg

    original, copied = (f"c_{uuid.uuid4().hex[:12]}" for _ in range(2))
    PostgresStore(postgres_server.url, schema=original, create=True).close()
    with psycopg.connect(postgres_server.url, autocommit=True) as db:
        db.execute(f'CREATE SCHEMA "{copied}"')
        for (table,) in db.execute("SELECT table_name FROM information_schema.tables "
                                   "WHERE table_schema = %s", (original,)).fetchall():
            db.execute(f'CREATE TABLE "{copied}"."{table}" '
                       f'(LIKE "{original}"."{table}" INCLUDING ALL)')
            db.execute(f'INSERT INTO "{copied}"."{table}" OVERRIDING SYSTEM VALUE '
                       f'SELECT * FROM "{original}"."{table}"')
    with pytest.raises(LedgerConflict, match=f"a copy of the state store at database .* "
                                             f"schema {original}"):
        PostgresStore(postgres_server.url, schema=copied)
    PostgresStore(postgres_server.url, schema=original)._remove()
    PostgresStore(postgres_server.url, schema=copied)._remove()
