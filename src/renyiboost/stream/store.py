"""State stores: where the engine's ledger, pool, model and source offsets live.

One small interface, three implementations:

* :class:`MemoryStore` keeps nothing (the engine's own arrays are the state): the default
  for River use in a notebook. Its ledger dies with the process, so nothing that outlives
  the process (the Kafka trainer, a published model) may use it.
* :class:`SQLiteStore` (stdlib ``sqlite3``, WAL mode, ``synchronous=FULL`` by default) is
  the durable default for the CLI and the Kafka service. Everything a restart needs is in
  one file.
* :class:`~renyiboost.stream.postgres.PostgresStore` keeps the same layout in a schema of a
  PostgreSQL database (:class:`SQLStateStore` holds what the two share), for a trainer
  that must resume on another host.

**One key, one ledger, forever** (DEVELOPERS invariant 5). A durable store is never created
implicitly: opening a path that does not exist, is empty (0 bytes) or holds no store
identity is an error (:class:`~renyiboost.exceptions.StoreNotFound`), because treating a lost
file as a new store would hand every key a fresh budget. Creating one is an explicit act
(``SQLiteStore(path, create=True)``, ``renyiboost state init``, ``train --new-state``), and
refuses a path that already exists. A store has an **identity**: a random ``store_id`` fixed
at creation and an ``epoch`` that grows by one every time a process opens it; every public
release carries both, so a trainer can tell its own releases from another store's. One
process at a time holds a store (an exclusive ``flock`` on ``<file>.lock``; the error names
the holder). The configuration, the calibration (σ, α̂, B, the initial score's noise) and a
SHA-256 of the filter's charge grid are stored at the first load, and a later load that
would change any of them is refused (:class:`~renyiboost.exceptions.LedgerConflict`): a
budget spent at one σ cannot be re-based to another. Every blob carries a CRC-32 that is
checked when it is read back.

The engine hands the store one :class:`Commit` per released output (the initial score or a
round) and makes the output visible only after :meth:`StateStore.commit` returned. The
commit is one SQLite transaction holding the output's *events* — records merged into the
pool, the initial score, the round's tree and the digest of its charges — the keys first
seen, the retirements and the source offsets (DEVELOPERS invariant 4). A crash before the
commit loses the round, never its charges; a crash after it loses nothing. A commit that
fails (e.g. ``database or disk is full``) is rolled back as a whole and reported as a
:class:`~renyiboost.exceptions.StateStoreError` naming the file and the cause.

The store is event-sourced so that a round writes little: its tree and an 8-byte digest of
its charges, not the spent budgets and margins (16 bytes per active key). A round's charges
are a function of the committed state before it (margins, targets, spent budgets) and its
tree, so restoring replays the events after the last *snapshot* with the code the live
engine used — the charges are computed again — and compares each round's digest: a replay
that computes one charge differently (another renyiboost, numba or libm that rounds
otherwise) is refused (:class:`~renyiboost.exceptions.StateStoreError`), never restored
under-charged. Spent budgets and margins so come back bit for bit or not at all, with one
exception: a store whose last rounds were written before spent budgets added their
charges rounded up (:func:`~renyiboost.accounting.filter.charged`, the 37th session)
replays them with each sum rounded up, a few ulp higher a key (21 at most in the review's
run), the same charge codes, and so never lower. (Format 2
stored the 2-byte charge code of every active key with every round: 2 MB a round at 10⁶
keys, which made the commit 0.37 of a compiled round.) A snapshot (uids, margins, spent) is
written when the events since the last one would cost ``snapshot_ratio`` times its size to
replay (a round counts 2 bytes per active key); old events, dead feature rows and trees
outside ``max_trees`` are deleted then. Only a restart after a crash replays (a clean close
writes a snapshot), so the default ratio, 32, favours the steady state: at 10⁵ keys a snapshot
costs 10–20 ms, 5–10 rounds' time, and with ratio 8 it took 0.1–0.2 ms of every round's
commit; a crash restart replays up to ~380 rounds instead of ~90 (0.7 s at 10⁵ keys, 7 s at
10⁶).

Tables: ``meta`` (JSON), ``keys`` (per commit, the user keys first seen, their uids and the
source partition of each one's first record, which ``renyiboost reshard`` moves it by: one
row a commit, not a row a key; the ``origins`` column was added within format 3 and is
added to an older store when it is opened), ``retirements`` (blobs of
retired uids and final spent), ``segments`` (append-only blobs of merged rows: uids, features,
targets; the newest row of a uid wins), ``trees``, ``events`` and ``snapshot``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import math
import os
import socket
import sqlite3
import sys
import time
import uuid
import weakref
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

import numpy as np

from renyiboost.exceptions import LedgerConflict, StateStoreError, StoreLocked, StoreNotFound

log = logging.getLogger("renyiboost.store")

#: Version of the SQLite layout; a store of another version is refused, never migrated silently.
STORE_FORMAT = 3

#: Page size of a new store. Merges and snapshots write blobs of 8–80 bytes per key, and a
#: snapshot deletes old ones; SQLite keeps a blob as a chain of overflow pages that a delete
#: must walk page by page, so larger pages make both cheaper (a 2 MB blob committed with
#: synchronous=FULL here: 8.4 ms at 4 KiB pages, 3.3–4.0 ms at 16 KiB).
PAGE_SIZE = 16_384

#: What a replayed round costs, in the bytes the snapshot policy weighs against a snapshot's
#: size: per active key, as much as storing its charge code did.
REPLAY_BYTES_PER_KEY = 2

#: Default ``snapshot_ratio`` of :class:`SQLiteStore` (see the module docstring).
SNAPSHOT_RATIO = 32.0

#: Why a missing store is an error, said by every store that refuses one.
NEVER_IMPLICIT = (
    "A store is never created implicitly: if it was lost, so were its keys' budgets, and a "
    "new one would hand them fresh ones. Create a store with `renyiboost state init` (or "
    "create=True) only for a model that was never published.")


@dataclass(frozen=True)
class MergeEvent:
    """Records joined the pool (new keys appended, known keys replaced)."""

    uids: np.ndarray
    X: np.ndarray
    target: np.ndarray
    margin: np.ndarray  # margin of each record under the model at merge time
    #: The spent budget each *new* key starts with: the answers' recalibration charge
    #: (:mod:`renyiboost.models.recalibration`) while a window is open, else 0.
    charge: float = 0.0


@dataclass(frozen=True)
class InitEvent:
    """The DP initial score was released, charging every pool record ``charge`` (a score
    a class for a multiclass model)."""

    score: float | np.ndarray
    charge: float


@dataclass(frozen=True)
class RoundEvent:
    """A round released tree ``round``; its charges have the digest ``codes_digest``."""

    round: int
    features: np.ndarray
    thresholds: np.ndarray
    leaves: np.ndarray
    codes_digest: int | None  # kernels.codes_digest of the active keys' codes; None: no privacy
    n_charged: int  # active keys the round charged (what a replay recomputes)
    dropped: int  # oldest trees dropped from the model with this round (max_trees)
    stage: int | None = None  # the noise stage the round ran at (None: the only one)


@dataclass(frozen=True)
class GridEvent:
    """The private split grid was released from the active records that could afford
    ``charge``, each of them charged it (:class:`~renyiboost.models.grid.QuantileMap`: its
    ``cdf`` rows and the features it moves). A replay charges the same records: which
    could afford it is a function of the pool's spent budgets at that point.

    ``version`` is the first model version released with the grid's smoothing spans (the
    next tree's): a lagging publisher's earlier versions go out without them, as they were
    answered. ``None`` in a store kept before it was recorded."""

    charge: float
    cdf: np.ndarray
    mapped: np.ndarray
    version: int | None = None

    def as_json(self) -> dict[str, Any]:
        """The event as a store keeps it (its event row, and the :data:`GRID_META` entry)."""
        return {"charge": self.charge, "cdf": self.cdf.tolist(), "mapped": self.mapped.tolist(),
                **({"version": self.version} if self.version is not None else {})}

    @classmethod
    def from_json(cls, info: Mapping[str, Any]) -> GridEvent:
        """The event :meth:`as_json` kept. A meta entry written before the charge was kept
        with it (a single engine's) gives NaN, which no shard may be charged."""
        return cls(float(info.get("charge", math.nan)),
                   np.asarray(info["cdf"], dtype=np.float64),
                   np.asarray(info["mapped"], dtype=bool),
                   None if info.get("version") is None else int(info["version"]))


Event = MergeEvent | InitEvent | RoundEvent | GridEvent
#: The meta entry that keeps a stream's split grid (:class:`GridEvent`'s ``cdf`` and
#: ``mapped``), written once in the grid's commit: a snapshot drops the event itself.
GRID_META = "grid"
#: A SQLite file's header (https://www.sqlite.org/fileformat.html, section 1.3): the magic
#: string, and at offsets 18 and 19 the write and read versions, 2 in WAL mode.
_SQLITE_MAGIC = b"SQLite format 3\x00"
_WAL_VERSION_AT = 18
_SQLITE_HEADER_BYTES = 20
#: The side value that pins where a store's keys come from for the ledger's life: a Kafka
#: trainer's message key or payload field, or the row numbers of a ``memory:`` replay
#: (:func:`key_source_name`); ``renyiboost reshard`` carries it to the new stores.
KEY_SOURCE_META = "key_source"
#: Kafka side values: per partition (``topic:p``), the offset it last went back from (a
#: re-created topic; a consumer group offset up to it is the store's own, told before); each
#: event topic's id as last read; and, for a shard of several, the producers' partitioner
#: its events were checked against (a key's partition, so its shard, follows from it).
WENT_BACK_META = "went_back_from"
TOPIC_IDS_META = "topic_ids"
PARTITIONER_META = "partitioner"
#: The side value that marks a shard store whose keys reached it by their hash (records
#: handed to the sharded engine): a Kafka shard, which places a key by its partition,
#: refuses it; ``renyiboost reshard`` writes it into the new stores of such a deployment.
KEY_ROUTING_META = "key_routing"
#: The side value that marks, for good, a store once opened by an engine with seeded
#: (test-only) noise; ``renyiboost reshard`` carries it to the new stores.
SEEDED_META = "seeded_noise"


@dataclass
class PoolState:
    """The active pool after a commit: what a snapshot stores.

    ``live`` marks the rows still active when the engine keeps retired rows in its arrays
    until it compacts them (``None``: every row is). A store that writes the state writes
    :meth:`compacted`, so compaction costs only when a snapshot is taken."""

    uids: np.ndarray
    X: np.ndarray
    target: np.ndarray
    margin: np.ndarray
    spent: np.ndarray
    live: np.ndarray | None = None

    @property
    def n_live(self) -> int:
        return int(self.uids.size if self.live is None else np.count_nonzero(self.live))

    def compacted(self) -> PoolState:
        """The state without its retired rows (itself when it has none)."""
        if self.live is None or self.live.all():
            return PoolState(self.uids, self.X, self.target, self.margin, self.spent)
        keep = self.live
        return PoolState(self.uids[keep], self.X[keep], self.target[keep], self.margin[keep],
                         self.spent[keep])


@dataclass
class Commit:
    """What one released output changes in the durable state."""

    events: list[Event]
    meta: dict[str, Any]
    after: PoolState
    #: (uid, name, origin) of the keys first seen: the origin is the source partition of the
    #: key's first record (``None`` without one), what ``renyiboost reshard`` moves it by.
    new_keys: list[tuple[int, str, str | None]] = field(default_factory=list)
    retired: tuple[np.ndarray, np.ndarray] | None = None  # uids, final spent
    first_kept_round: int = 0  # trees of earlier rounds are no longer in the model
    snapshot: bool = False  # write a snapshot with it (a clean close: nothing left to replay)


@dataclass
class Snapshot:
    """Everything :meth:`StateStore.load` restores: a pool snapshot and the events after it."""

    meta: dict[str, Any]
    trees: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]  # round -> f, t, leaves
    pool: PoolState
    events: list[Event]
    keys: dict[str, int]
    retired_uids: np.ndarray
    retired_spent: np.ndarray
    #: The split grid a stream released (:data:`GRID_META`), if it did.
    grid: GridEvent | None = None


@dataclass(frozen=True)
class StoreIdentity:
    """Who a store is: ``store_id`` (fixed at creation) and ``epoch`` (opens so far)."""

    store_id: str
    epoch: int


def score_value(stored: Any) -> float | np.ndarray:
    """An initial score as stored in JSON: a number, or a list (one a class)."""
    return np.asarray(stored, dtype=float) if isinstance(stored, list) else float(stored)


def grid_digest(grid: np.ndarray | None) -> str | None:
    """SHA-256 of a charge grid's float64 bytes (what a store pins at its first load)."""
    if grid is None:
        return None
    return hashlib.sha256(np.ascontiguousarray(grid, dtype="<f8").tobytes()).hexdigest()


class StateStore:
    """Interface of a state store (see the module docstring)."""

    durable: bool = False
    identity: StoreIdentity

    def load(self, fingerprint: dict[str, Any],
             absent: Mapping[str, Any] | None = None) -> Snapshot | None:
        """The committed state, or None for a store that has committed nothing yet.

        ``fingerprint`` holds what fixes the meaning of a budget (``config``,
        ``calibration``, ``charge_grid_sha256``); the first load records it and every later
        load must bring the same, or :class:`LedgerConflict` is raised. ``absent`` (nested
        like the fingerprint) gives the value of a field that a store written before the
        field existed does not hold: the learner ran as with that value, so a stored
        fingerprint without the field matches a given one that has it (see
        :func:`with_absent`).
        """
        raise NotImplementedError

    def commit(self, change: Commit | list[Commit]) -> None:
        """Make ``change`` (or several, in order) durable atomically; return once it is."""
        raise NotImplementedError

    def get_meta(self, name: str) -> Any:
        """A small value kept beside the state (e.g. the last published model version)."""
        raise NotImplementedError

    def set_meta(self, name: str, value: Any) -> None:
        """Durably record a small value outside any round (its own transaction)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the store's resources (and its lock)."""

    def claim(self, engine: object) -> None:
        """Make ``engine`` the one engine of this store object until :meth:`unclaim`, or
        until the engine is gone. A store's lock keeps out other processes and other store
        objects on the same file; two engines handed the same object would both load its
        ledger and each spend it (invariant 5), so the second is refused."""
        holder = getattr(self, "_claimed_by", None)
        if holder is not None and holder() is not None and holder() is not engine:
            raise LedgerConflict(
                f"the store {self!r} already serves another engine in this process: two "
                "engines on one store would each spend its keys' budgets. Close the first "
                "(its model's close()) before opening another on the store, or give the "
                "new model its own store.")
        self._claimed_by = weakref.ref(engine)

    def __getstate__(self) -> dict[str, Any]:
        """A copy of a store (an in-memory one: durable ones refuse) is claimed by the copy
        of its engine, not by the original's engine."""
        state = self.__dict__.copy()
        state.pop("_claimed_by", None)
        return state

    def unclaim(self, engine: object) -> None:
        """End ``engine``'s claim (:meth:`claim`), if it holds it."""
        holder = getattr(self, "_claimed_by", None)
        if holder is not None and holder() is engine:
            self._claimed_by = None


class MemoryStore(StateStore):
    """Keeps no copy: the engine's arrays are the only state (lost with the process)."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self.identity = StoreIdentity(f"memory-{uuid.uuid4()}", 1)

    def __repr__(self) -> str:
        return "MemoryStore()"

    def load(self, fingerprint: dict[str, Any],
             absent: Mapping[str, Any] | None = None) -> Snapshot | None:
        return None

    def commit(self, change: Commit | list[Commit]) -> None:
        return None

    def get_meta(self, name: str) -> Any:
        return self._values.get(name)

    def set_meta(self, name: str, value: Any) -> None:
        self._values[name] = value


_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS keys(batch INTEGER PRIMARY KEY AUTOINCREMENT, uids BLOB NOT NULL,
                                names TEXT NOT NULL, crc INTEGER NOT NULL, origins TEXT);
CREATE TABLE IF NOT EXISTS retirements(batch INTEGER PRIMARY KEY AUTOINCREMENT,
                                       uids BLOB NOT NULL, spent BLOB NOT NULL,
                                       crc INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS segments(seg INTEGER PRIMARY KEY AUTOINCREMENT, uids BLOB NOT NULL,
                                    X BLOB NOT NULL, target BLOB NOT NULL, crc INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS trees(round INTEGER PRIMARY KEY, features BLOB NOT NULL,
                                 thresholds BLOB NOT NULL, leaves BLOB NOT NULL,
                                 crc INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS events(seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,
                                  info TEXT NOT NULL, data BLOB, crc INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS snapshot(id INTEGER PRIMARY KEY CHECK (id = 0), seq INTEGER NOT NULL,
                                    last_seg INTEGER NOT NULL, uids BLOB NOT NULL,
                                    margin BLOB NOT NULL, spent BLOB NOT NULL,
                                    crc INTEGER NOT NULL);
"""


def _blob(array: np.ndarray, dtype: str) -> bytes:
    return np.ascontiguousarray(array, dtype=dtype).tobytes()


def _array(blob: bytes, dtype: str) -> np.ndarray:
    return np.frombuffer(blob, dtype=dtype).copy()


def _crc(*parts: bytes | str | None) -> int:
    """CRC-32 over the parts of one row (corruption detection, not authentication)."""
    value = 0
    for part in parts:
        if part is not None:
            value = zlib.crc32(part.encode() if isinstance(part, str) else part, value)
    return value


def check_forked(opened_by: int, what: str) -> None:
    """Refuse to write from a process forked from ``opened_by`` (``multiprocessing``'s
    default start on Linux copies an open engine, its store's connection and its lock into
    every worker). No pickling happens, so the copy guard never ran: a forked child learned
    and released on the parent's one ledger, and the parent's clean close then overwrote the
    child's commits with its own snapshot (a released version vanished from the store)."""
    if os.getpid() != opened_by:
        raise LedgerConflict(
            f"{what} was opened by process {opened_by} and this process ({os.getpid()}) was "
            "forked from it: the store's one ledger stays with that process. Open a store of "
            "its own here, or start workers with the 'spawn' method and pass them releases.")


class _FileLock:
    """An exclusive ``flock`` on ``<store>.lock`` that records who holds it.

    The kernel drops the lock when its holder dies (``kill -9`` included), so a crashed
    trainer never blocks its successor. ``flock`` is not reliable on every network file
    system: keep state files on a local disk (or use one store per host).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "a+")  # noqa: SIM115 - held for the store's lifetime
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "an unknown process"
            self._file.close()
            store = str(path).removesuffix(".lock")
            if holder.startswith(f"pid {os.getpid()} on {socket.gethostname()} "):
                raise StoreLocked(
                    f"the state store {store} is in use by pid {os.getpid()}, this process: "
                    "another model or engine here holds it (e.g. the one this model was "
                    "cloned from). A store is one ledger, so one model at a time may hold it: "
                    "close() the other model first, or give this one a store of its own"
                ) from None
            raise StoreLocked(
                f"the state store {store} is in use by {holder}; "
                "one process at a time may hold a store (stop that one first)") from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"pid {os.getpid()} on {socket.gethostname()} since "
                         f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} "
                         f"({' '.join(sys.argv[:2]) or 'python'})")
        self._file.flush()

    def hold_inode(self, database: Path) -> None:
        """Also ``flock`` the database file itself, which every name of it shares: the lock
        file is found by name, and a hard link (or a lock file deleted as stale) once let a
        second process open the same database under another name, with a WAL of its own.
        (``flock`` and SQLite's POSIX locks do not interact; this descriptor is closed only
        after SQLite's connection, since closing one drops the process's POSIX locks.)"""
        self._inode = open(database, "rb")  # noqa: SIM115 - held for the store's lifetime
        try:
            fcntl.flock(self._inode, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._inode.close()
            raise StoreLocked(
                f"the state store {database} is in use by another process under another name "
                "(a hard link to its file, or a lock file removed by hand); one process at a "
                "time may hold a store") from None

    def release(self) -> None:
        inode = getattr(self, "_inode", None)
        if inode is not None and not inode.closed:
            inode.close()
        if not self._file.closed:
            self._file.close()  # closing drops the flock


class SQLStateStore(StateStore):
    """The event-sourced layout of the module docstring on a SQL database: everything but
    the connection, the lock and the dialect, which :class:`SQLiteStore` and
    :class:`~renyiboost.stream.postgres.PostgresStore` supply.

    Statements are written once, with ``?`` placeholders and SQL that both SQLite (≥ 3.35)
    and PostgreSQL accept (``INSERT … ON CONFLICT … DO UPDATE``, ``RETURNING``); a subclass
    translates the placeholders (:meth:`_sql`) and says how to begin a transaction, whether
    one is open, which errors are the database's, and whether a table exists.
    """

    durable = True
    snapshot_ratio: float
    _db: Any
    #: The database driver's error class (wrapped into :class:`StateStoreError` on commit).
    _database_error: type[BaseException] = sqlite3.Error
    #: ``CREATE TABLE`` statements of the layout in this dialect.
    _schema: str = ""
    #: Side values :meth:`get_meta` answers ``None`` for, in this process (:meth:`hiding_meta`).
    _hidden_meta: frozenset[str] = frozenset()

    def __reduce__(self) -> NoReturn:
        """A durable store holds one ledger: a copy would be a second handle on it without its
        lock, or, restored elsewhere, a second ledger for the same keys (invariant 5). So
        ``pickle``, ``copy.copy``, ``copy.deepcopy`` and River's ``clone()`` (which deep-copies
        an estimator's parameters) are refused with a message that says what to do instead,
        not with the ``TypeError`` of the open file or connection inside."""
        raise self._not_copyable()

    def __deepcopy__(self, memo: dict[int, Any]) -> NoReturn:
        raise self._not_copyable()  # copy.deepcopy asks here before it asks __reduce__

    def _not_copyable(self) -> LedgerConflict:
        return LedgerConflict(
            f"the state store {self.location} cannot be copied (pickle, copy.deepcopy, River's "
            "clone()): it holds one ledger, and a copy would be a second ledger of the same "
            "keys. For a new model, open a new store at a new path (SQLiteStore(new_path, "
            "create=True) or PostgresStore(url, schema=new_schema, create=True)); to reopen "
            "this one, pass its path or URL (store='state.db'), so that a second engine on it "
            "is refused by the store's lock.")

    @property
    def location(self) -> str:
        """Where the store is, for messages (a path, or a URL without its password)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ dialect
    def _sql(self, statement: str) -> str:
        return statement

    def _begin(self) -> None:
        self._db.execute("BEGIN")

    def _in_transaction(self) -> bool:
        raise NotImplementedError

    def _has_table(self, name: str) -> bool:
        raise NotImplementedError

    def _has_column(self, table: str, column: str) -> bool:
        raise NotImplementedError

    def _execute(self, statement: str, params: tuple = ()) -> Any:
        return self._db.execute(self._sql(statement), params)

    def _rollback(self) -> None:
        if self._in_transaction():
            self._db.execute("ROLLBACK")

    # ------------------------------------------------------------------ identity
    def _start(self, create: bool, continues: StoreIdentity | None = None,
               meta: Mapping[str, Any] | None = None) -> None:
        """After connecting and locking: check (or create) the identity, count what the
        snapshot policy weighs."""
        self._opened_by = os.getpid()
        self.identity = self._open(create, continues, meta)
        self._event_bytes = 0
        for kind, info, length in self._execute("SELECT kind, info, LENGTH(data) FROM events"):
            self._event_bytes += (REPLAY_BYTES_PER_KEY * int(json.loads(info)["charged"])
                                  if kind == "round" else int(length or 0))
        self._segment_rows = int(self._execute(
            "SELECT COALESCE(SUM(LENGTH(uids)), 0) / 8 FROM segments").fetchone()[0])

    def _open(self, create: bool, continues: StoreIdentity | None,
              meta: Mapping[str, Any] | None = None) -> StoreIdentity:
        """Create or check the identity, then move to the next epoch (one transaction).

        A new store normally gets a fresh random id; ``continues`` gives it an existing
        store's id and epoch instead (``renyiboost reshard``: the deployment's releases keep
        naming one store, at epochs that only grow). ``meta`` (side values, as
        :meth:`set_meta` writes them) is written in the same transaction as the identity:
        ``renyiboost reshard`` creates its stores ``reshard_pending`` so, and no crash can
        leave one trainable beside the store it continues."""
        if (continues is not None or meta) and not create:
            raise ValueError("only a new store can continue another store's identity or be "
                             "created with side values")
        self._begin()
        try:
            if create:
                for statement in filter(str.strip, self._schema.split(";")):
                    self._execute(statement)
                self._write_meta({"identity": {
                    "store_id": str(uuid.uuid4()) if continues is None else continues.store_id,
                    "format": STORE_FORMAT, "created": time.time()},
                    "epoch": 0 if continues is None else continues.epoch,
                    **{f"side:{name}": value for name, value in (meta or {}).items()}})
            try:
                identity = self._meta("identity") if self._has_table("meta") else None
            except self._database_error as error:  # another program's table named meta
                raise StoreNotFound(f"{self.location} is not a renyiboost state store: its "
                                    f"meta table is not a store's ({error})") from error
            if identity is None:
                raise StoreNotFound(
                    f"{self.location} is not an initialised renyiboost state store (no "
                    "identity; an empty database, or its write-ahead log was lost). Refusing to "
                    "start a new ledger in its place.")
            if identity.get("format") != STORE_FORMAT:
                raise StateStoreError(
                    f"{self.location} has store format {identity.get('format')}, this "
                    f"renyiboost reads format {STORE_FORMAT}")
            if not self._has_column("keys", "origins"):
                # Added within format 3: a store written before keeps its rows (no origins);
                # older renyiboost versions ignore the column.
                self._execute("ALTER TABLE keys ADD COLUMN origins TEXT")
            commits = int(self._meta("commits") or 0)
            if not create:
                self._check_not_behind(identity["store_id"], int(self._meta("epoch")), commits)
            self._settle_home(str(identity["store_id"]))
            epoch = int(self._meta("epoch")) + 1
            self._write_meta({"epoch": epoch})
            self._db.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        self._commits = commits
        self._record_epoch(identity["store_id"], epoch, commits)
        log.info("%s the state store %s (store %s, epoch %d)",
                 "created" if create else "opened", self.location, identity["store_id"], epoch)
        return StoreIdentity(str(identity["store_id"]), epoch)

    # ------------------------------------------------------------------ reading
    def _meta(self, name: str) -> Any:
        row = self._execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else json.loads(row[0])

    def _checked(self, table: str, row: tuple, *parts: bytes | str | None) -> None:
        if _crc(*parts) != row[-1]:
            raise StateStoreError(
                f"the state store {self.location} is corrupt: a row of table {table!r} fails its "
                "checksum. Restore the file from a backup taken after its last commit.")

    def load(self, fingerprint: dict[str, Any],
             absent: Mapping[str, Any] | None = None) -> Snapshot | None:
        stored = {name: self._meta(name) for name in fingerprint}
        if all(value is None for value in stored.values()):
            # one transaction: a crash between two rows left a store that refused its own
            # arguments for good ("created with a different calibration")
            pinned = json.loads(json.dumps(fingerprint))
            self._transaction(lambda: self._write_meta(pinned))
            return None
        for name, given in json.loads(json.dumps(fingerprint)).items():
            held = with_absent(stored[name], (absent or {}).get(name))
            if held != given:
                refused = LedgerConflict(
                    f"the store {self.location} was created with a different {name}; a key's "
                    "budget cannot be re-based. Use the same arguments (and renyiboost "
                    "version) or a new store for a new model. Differs in: "
                    f"{'; '.join(config_differences(held, given, name))}")
                # the whole values (kilobytes) for a traceback, not for the one-line error
                refused.add_note(f"stored: {json.dumps(stored[name], sort_keys=True)}")
                refused.add_note(f"given:  {json.dumps(given, sort_keys=True)}")
                raise refused
        meta = self._meta("state")
        if meta is None:
            return None
        k = int(meta["n_features"])
        depth = int(meta["depth"])
        trees = {}
        for row in self._execute(
                "SELECT round, features, thresholds, leaves, crc FROM trees ORDER BY round"):
            self._checked("trees", row, *row[1:4])
            trees[int(row[0])] = (_array(row[1], "<i8"), _array(row[2], "<f8"),
                                  _array(row[3], "<f8"))
        snap = self._execute(
            "SELECT seq, last_seg, uids, margin, spent, crc FROM snapshot WHERE id = 0").fetchone()
        if snap:
            self._checked("snapshot", snap, *snap[2:5])
        seq, last_seg = (snap[0], snap[1]) if snap else (0, 0)
        uids = _array(snap[2], "<i8") if snap else np.zeros(0, np.int64)
        X, target = self._rows(uids, k, max_seg=last_seg)
        pool = PoolState(uids, X, target,
                         _array(snap[3], "<f8") if snap else np.zeros(0),
                         _array(snap[4], "<f8") if snap else np.zeros(0))
        events = []
        for row in self._execute(
                "SELECT kind, info, data, crc FROM events WHERE seq > ? ORDER BY seq", (seq,)):
            self._checked("events", row, row[0], row[1], row[2])
            events.append(self._event(row[0], json.loads(row[1]), row[2], k, 2**depth - 1))
        keys: dict[str, int] = {}
        for uids_blob, names, _ in self._key_batches():
            keys.update(zip(json.loads(names), _array(uids_blob, "<i8").tolist(), strict=True))
        batches = self._execute(
            "SELECT uids, spent, crc FROM retirements ORDER BY batch").fetchall()
        for row in batches:
            self._checked("retirements", row, row[0], row[1])
        log.info("restoring from %s: %d stored trees, a snapshot of %d records, %d events to "
                 "replay", self.location, len(trees), uids.size, len(events))
        return Snapshot(
            meta=meta, trees=trees, pool=pool, events=events, keys=keys,
            retired_uids=np.concatenate([_array(b[0], "<i8") for b in batches]
                                        or [np.zeros(0, np.int64)]),
            retired_spent=np.concatenate([_array(b[1], "<f8") for b in batches] or [np.zeros(0)]),
            grid=None if (grid := self._meta(GRID_META)) is None
            else GridEvent.from_json(grid),
        )

    def _key_batches(self) -> list[tuple[bytes, str, str | None]]:
        """The rows of ``keys`` (uids, names, origins), checked."""
        rows = self._execute("SELECT uids, names, origins, crc FROM keys ORDER BY batch").fetchall()
        for row in rows:
            self._checked("keys", row, row[0], row[1], row[2])
        return [tuple(row[:3]) for row in rows]

    def key_origins(self) -> dict[str, str | None]:
        """Every key's origin: the source partition of its first record, ``None`` if it
        came without one (or before origins were recorded)."""
        origins: dict[str, str | None] = {}
        for _, names, text in self._key_batches():
            listed = json.loads(names)
            origins.update(zip(listed, json.loads(text) if text else [None] * len(listed),
                               strict=True))
        return origins

    def has_committed(self) -> bool:
        """Whether any output or merge was ever committed here (a store without can hold
        no ledger)."""
        return self._meta("state") is not None

    def _event(self, kind: str, info: dict, data: bytes | None, k: int, n_internal: int) -> Event:
        if kind == "merge":
            seg = self._execute("SELECT uids, X, target, crc FROM segments WHERE seg = ?",
                                   (info["seg"],)).fetchone()
            self._checked("segments", seg, *seg[:3])
            return MergeEvent(_array(seg[0], "<i8"), _array(seg[1], "<f8").reshape(-1, k),
                              _array(seg[2], "<f8"), _array(data, "<f8"),
                              float(info.get("charge", 0.0)))
        if kind == "init":
            return InitEvent(score_value(info["score"]), float(info["charge"]))
        if kind == "grid":
            return GridEvent.from_json(info)
        row = self._execute("SELECT features, thresholds, leaves FROM trees WHERE round = ?",
                               (info["round"],)).fetchone()
        return RoundEvent(int(info["round"]), _array(row[0], "<i8").reshape(n_internal),
                          _array(row[1], "<f8"), _array(row[2], "<f8"),
                          None if data is None else int(_array(data, "<u8")[0]),
                          int(info["charged"]), int(info["dropped"]), info.get("stage"))

    def _rows(self, uids: np.ndarray, k: int, max_seg: int) -> tuple[np.ndarray, np.ndarray]:
        """Features and targets of ``uids``: each uid's newest row in segments ≤ ``max_seg``."""
        if uids.size == 0:
            return np.zeros((0, k)), np.zeros(0)
        segs = self._execute(
            "SELECT uids, X, target, crc FROM segments WHERE seg <= ? ORDER BY seg", (max_seg,)
        ).fetchall()
        for seg in segs:
            self._checked("segments", seg, *seg[:3])
        all_uids = np.concatenate([_array(s[0], "<i8") for s in segs])
        all_X = np.concatenate([_array(s[1], "<f8").reshape(-1, k) for s in segs])
        all_target = np.concatenate([_array(s[2], "<f8") for s in segs])
        unique, first_in_reversed = np.unique(all_uids[::-1], return_index=True)
        last = all_uids.size - 1 - first_in_reversed
        where = np.minimum(np.searchsorted(unique, uids), unique.size - 1)
        if np.any(unique[where] != uids):
            raise StateStoreError(f"the state store {self.location} is inconsistent: pool rows "
                                  "without data")
        return all_X[last[where]], all_target[last[where]]

    # ------------------------------------------------------------------ writing
    def get_meta(self, name: str) -> Any:
        return None if name in self._hidden_meta else self._meta(f"side:{name}")

    @contextmanager
    def hiding_meta(self, name: str) -> Iterator[None]:
        """Let :meth:`get_meta` answer ``None`` for ``name`` inside the block, in this
        process only; the stored value stays, durably. ``renyiboost reshard`` loads an
        engine on a store it has just created *pending* and still holds (its lock keeps every
        other process out): the engine refuses a pending store, and the mark must not be
        lifted, even for a moment, to let it in (a crash then would leave a trainable store
        beside the old one)."""
        hidden = self._hidden_meta
        self._hidden_meta = hidden | {name}
        try:
            yield
        finally:
            self._hidden_meta = hidden

    def set_meta(self, name: str, value: Any) -> None:
        self._transaction(lambda: self._write_meta({f"side:{name}": value}))

    def created(self) -> float | None:
        """When the store was created (its identity's time): with its id, it tells the
        store from another that continues its identity (``renyiboost reshard``)."""
        return (self._meta("identity") or {}).get("created")

    def _settle_home(self, store_id: str) -> None:
        """Refuse a copy of a store whose original still holds it; otherwise record where
        the store lives (its *home*), so that a later copy is known as one.

        Nothing inside a byte copy (``cp state.db other.db``, a ``pg_dump`` of the schema
        restored into another) tells it from the original: the same identity, epochs and
        ledger. Trained beside the original, every key had two budgets (invariant 5; the
        28 November review B). Opened away from its home while the home still holds a
        store of the same identity, a store is a copy and is refused, before this open
        changes anything. Where the home holds no such store any more, the store was moved
        (``mv``, a new mount point, the original deleted) and its new place becomes its
        home. A copy on another host, or in another PostgreSQL database, has no witness
        here (README, "Limits, stated")."""
        here = self._home()
        home = self._meta("home")
        if home == here:
            return
        if home is not None and self._meta("side:resharded") is None and (
                mark := self._resharded_away(home, store_id)) is not None:
            raise LedgerConflict(
                f"{self.location} is a copy of the state store that was at "
                f"{self._home_name(home)} (store {store_id}) before `renyiboost reshard` moved "
                f"its ledgers into {mark.get('into_locations')}: without the reshard's "
                "tombstone it is from before the reshard, restored from a backup, and its "
                "keys' budgets went back (review H: it opened as the moved store and trained "
                "beside the new deployment). It never trains again.")
        if home is not None and self._holds_store(home, store_id):
            raise LedgerConflict(
                f"{self.location} is a copy of the state store at {self._home_name(home)} "
                f"(store {store_id}), which is still there: trained beside it, every key "
                "would have two budgets. Open the store where it is; to move a store, move "
                "its files (or remove the original first).")
        self._write_meta({"home": here})

    def _home(self) -> Any:
        """Where this store lives, as JSON (a file's real path, a database and schema)."""
        raise NotImplementedError

    def _home_name(self, home: Any) -> str:
        """A recorded home, as a refusal names it."""
        return str(home)

    def _holds_store(self, home: Any, store_id: str) -> bool:
        """Whether ``home``, another place than this store's, holds a store with this id."""
        raise NotImplementedError

    def _resharded_away(self, home: Any, store_id: str) -> dict[str, Any] | None:
        """The mark a reshard left at ``home`` when it moved this very store away (its id
        and creation time), if any; a PostgreSQL reshard leaves its stores in place."""
        return None

    def _check_not_behind(self, store_id: str, epoch: int, commits: int) -> None:
        """Refuse a store that is behind an epoch, or a commit of it, that it once reached
        (a store with a record of them outside the database: :class:`SQLiteStore`)."""

    def _record_epoch(self, store_id: str, epoch: int, commits: int) -> None:
        """Record, outside the database, the epoch the store just moved to."""

    def _record_commits(self, store_id: str, epoch: int, commits: int) -> None:
        """Record, outside the database, the commits the store has made (after each)."""

    def _record_in_transaction(self, store_id: str, epoch: int, commits: int) -> None:
        """Record, in the commit's own transaction but outside the store's tables, the
        commits the store has made (:class:`~renyiboost.stream.postgres.PostgresStore`)."""

    def _write_meta(self, values: dict[str, Any]) -> None:
        for name, value in values.items():
            self._execute("INSERT INTO meta(name, value) VALUES (?, ?) ON CONFLICT (name) "
                          "DO UPDATE SET value = excluded.value", (name, json.dumps(value)))

    def _transaction(self, write: Any) -> None:
        """Run ``write()`` in one transaction; a failure rolls all of it back and is
        reported with its cause (SQLite may already have rolled back, e.g. when full).
        Refused in a process forked from the one that opened the store (:func:`check_forked`)."""
        check_forked(self._opened_by, f"the state store {self.location}")
        try:
            self._begin()
            write()
            self._db.execute("COMMIT")
        except self._database_error as error:
            self._rollback()
            written = ("Whether it was written is unknown (the connection was lost while it "
                       "ran); a restart resumes from what the store holds"
                       if self._connection_lost() else
                       "Nothing of this commit was written; fix the cause and restart from "
                       "the store")
            raise StateStoreError(f"could not commit to the state store {self.location}: "
                                  f"{error}. {written}.") from error
        except BaseException:
            self._rollback()
            raise

    def _connection_lost(self) -> bool:
        """Whether the database connection is gone, so a failed ``COMMIT`` may still have
        been applied by the server (never for SQLite, which is in this process)."""
        return False

    def commit(self, change: Commit | list[Commit]) -> None:
        changes = change if isinstance(change, list) else [change]
        event_bytes = self._event_bytes

        count = self._commits + 1

        def write() -> None:
            meta: dict[str, Any] = {}
            for one in changes:
                self._apply(one)
                meta |= one.meta  # a later change's entry replaces an earlier one's
            # Every change's entries are written: a group commit's split grid is an earlier
            # change than its rounds, and writing the last change's meta alone lost the
            # grid's entry, so a restore released, and charged, a second grid.
            self._write_meta(meta | {"commits": count})
            self._record_in_transaction(self.identity.store_id, self.identity.epoch, count)

        try:
            self._transaction(write)
        except BaseException:
            self._event_bytes = event_bytes
            raise
        self._commits = count
        self._record_commits(self.identity.store_id, self.identity.epoch, count)

    def _apply(self, change: Commit) -> None:
        if change.new_keys:
            uids, names, origins = zip(*change.new_keys, strict=True)
            blob, text = _blob(np.asarray(uids), "<i8"), json.dumps(names)
            where = None if all(o is None for o in origins) else json.dumps(origins)
            self._execute("INSERT INTO keys(uids, names, origins, crc) VALUES (?, ?, ?, ?)",
                          (blob, text, where, _crc(blob, text, where)))
        for event in change.events:
            self._append(event)
        if change.retired is not None and change.retired[0].size:
            uids_blob = _blob(change.retired[0], "<i8")
            spent_blob = _blob(change.retired[1], "<f8")
            self._execute("INSERT INTO retirements(uids, spent, crc) VALUES (?, ?, ?)",
                       (uids_blob, spent_blob, _crc(uids_blob, spent_blob)))
        after = change.after
        due = self._event_bytes > self.snapshot_ratio * 24 * max(after.n_live, 1_000)
        if due or (change.snapshot and (self._event_bytes > 0 or change.events)):
            self._snapshot(after.compacted(), change.first_kept_round)

    def _insert_event(self, kind: str, info: dict[str, Any], data: bytes | None,
                      weight: int | None = None) -> None:
        """One event row; ``weight`` (default: the data's length) counts towards a snapshot."""
        text = json.dumps(info)
        self._execute("INSERT INTO events(kind, info, data, crc) VALUES (?, ?, ?, ?)",
                         (kind, text, data, _crc(kind, text, data)))
        self._event_bytes += (0 if data is None else len(data)) if weight is None else weight

    def _append(self, event: Event) -> None:
        if isinstance(event, MergeEvent):
            seg = self._insert_segment(event.uids, event.X, event.target)
            info = {"seg": seg, **({"charge": event.charge} if event.charge else {})}
            self._insert_event("merge", info, _blob(event.margin, "<f8"))
        elif isinstance(event, InitEvent):
            self._insert_event("init", {"score": np.asarray(event.score).tolist(),
                                        "charge": event.charge}, None)
        elif isinstance(event, GridEvent):
            self._insert_event("grid", event.as_json(), None)
        else:
            blobs = (_blob(event.features, "<i8"), _blob(event.thresholds, "<f8"),
                     _blob(event.leaves, "<f8"))
            self._execute(
                "INSERT INTO trees(round, features, thresholds, leaves, crc) "
                "VALUES (?, ?, ?, ?, ?)", (event.round, *blobs, _crc(*blobs)))
            digest = (None if event.codes_digest is None
                      else _blob(np.array([event.codes_digest], dtype=np.uint64), "<u8"))
            info = {"round": event.round, "dropped": event.dropped, "charged": event.n_charged}
            if event.stage is not None:  # which σ and charge table a replay must use
                info["stage"] = event.stage
            self._insert_event("round", info, digest, REPLAY_BYTES_PER_KEY * event.n_charged)

    def _insert_segment(self, uids: np.ndarray, X: np.ndarray, target: np.ndarray) -> int:
        blobs = (_blob(uids, "<i8"), _blob(X, "<f8"), _blob(target, "<f8"))
        (seg,) = self._execute(
            "INSERT INTO segments(uids, X, target, crc) VALUES (?, ?, ?, ?) RETURNING seg",
            (*blobs, _crc(*blobs))).fetchone()
        self._segment_rows += int(uids.size)
        return int(seg)

    def _snapshot(self, after: PoolState, first_kept_round: int) -> None:
        """Write the pool as of this commit; drop what no restore will need again."""
        if self._segment_rows > 2 * after.uids.size + 10_000:
            # Most stored rows are dead (retired or replaced): keep only the live ones.
            self._execute("DELETE FROM segments")
            self._segment_rows = 0
            self._insert_segment(after.uids, after.X, after.target)
        last_seg = int(self._execute("SELECT COALESCE(MAX(seg), 0) FROM segments").fetchone()[0])
        seq = int(self._execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0])
        blobs = (_blob(after.uids, "<i8"), _blob(after.margin, "<f8"), _blob(after.spent, "<f8"))
        self._execute(
            "INSERT INTO snapshot(id, seq, last_seg, uids, margin, spent, crc) "
            "VALUES (0, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, "
            "last_seg = excluded.last_seg, uids = excluded.uids, margin = excluded.margin, "
            "spent = excluded.spent, crc = excluded.crc", (seq, last_seg, *blobs, _crc(*blobs)))
        self._execute("DELETE FROM events WHERE seq <= ?", (seq,))
        self._execute("DELETE FROM trees WHERE round < ?", (first_kept_round,))
        self._event_bytes = 0
        log.debug("snapshot of %d live records written to %s", after.uids.size, self.location)

    def close(self) -> None:
        raise NotImplementedError

    def discard(self) -> None:
        """Delete this store and close it: only a store that never committed anything, or
        one an interrupted ``renyiboost reshard`` was filling (it never held a usable
        ledger); anything else is refused."""
        if self.has_committed() and self.get_meta("reshard_pending") is None:
            raise LedgerConflict(f"refusing to delete the state store {self.location}: it "
                                 "holds a ledger")
        log.warning("deleting the state store %s (it holds no usable ledger)", self.location)
        self._remove()

    def _remove(self) -> None:
        raise NotImplementedError


#: The width of the record beside a SQLite store after a commit (JSON padded with spaces, which
#: a JSON reader skips): a store id, an epoch and a count of commits fit several times over,
#: and a fixed width is rewritten in place with no tail of a longer record left behind.
RECORD_BYTES = 256


class SQLiteStore(SQLStateStore):
    """The durable store in one SQLite file (see the module docstring).

    Parameters
    ----------
    path
        File path, or a ``sqlite:///path`` URL.
    create
        ``False`` (default): open an existing store and refuse anything else. ``True``:
        create a new store there and refuse if the file already exists.
    synchronous
        ``"FULL"`` (default) syncs every commit to disk: a power loss cannot undo a commit
        whose tree was already published. ``"NORMAL"`` survives process crashes only.
    snapshot_ratio
        Write a snapshot when the events since the last one outweigh it this many times (a
        replayed round weighs :data:`REPLAY_BYTES_PER_KEY` per active key): a restore then
        replays at most about ``12 · snapshot_ratio`` rounds.
    page_size
        SQLite page size of a new store (see :data:`PAGE_SIZE`); an existing store keeps its.
    continues
        With ``create``: the identity the new store continues (``renyiboost reshard``).
    meta
        With ``create``: side values (:meth:`get_meta`) written in the transaction that
        creates the store, so it never exists without them (``renyiboost reshard``'s
        ``reshard_pending``).
    """

    _schema = _SQLITE_SCHEMA

    def __init__(
        self,
        path: str | Path,
        *,
        create: bool = False,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        snapshot_ratio: float = SNAPSHOT_RATIO,
        page_size: int = PAGE_SIZE,
        continues: StoreIdentity | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        self.path = sqlite_path(path)
        self.snapshot_ratio = snapshot_ratio
        #: Whether a commit is durable when it returns (``synchronous=FULL``): only then may
        #: the record beside the database follow every commit (:meth:`_record_commits`).
        self._commits_durable = synchronous == "FULL"
        #: The record's file, open for :meth:`_record_commits` (``None``: not opened yet).
        self._record_fd: int | None = None
        if create:
            self._check_absent()
            self.path.parent.mkdir(parents=True, exist_ok=True)
        else:
            self._check_present()
        # The lock file of the real path: a symbolic link to the file once had a lock of
        # its own, and a second process trained on the same ledger through it.
        self._lock = _FileLock(Path(f"{os.path.realpath(self.path)}.lock"))
        try:
            if create:  # again under the lock: another process may have created it meanwhile
                self._check_absent()
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._lock.hold_inode(self.path)
            if create:  # before the first write; an existing store keeps its page size
                self._db.execute(f"PRAGMA page_size={int(page_size)}")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._start(create, continues, meta)
        except BaseException:
            if getattr(self, "_db", None) is not None:
                self._db.close()  # else its -wal and -shm stayed beside a refused file
            self._lock.release()
            raise

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    @property
    def location(self) -> str:
        return str(self.path)

    def _begin(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")  # take the write lock now, not at the first write

    def _in_transaction(self) -> bool:
        return bool(self._db.in_transaction)

    def _has_table(self, name: str) -> bool:
        return self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                (name,)).fetchone() is not None

    def _has_column(self, table: str, column: str) -> bool:
        return any(row[1] == column for row in self._db.execute(f"PRAGMA table_info({table})"))

    def _check_absent(self) -> None:
        for suffix in ("", "-wal"):
            if Path(f"{self.path}{suffix}").exists():
                raise LedgerConflict(
                    f"{self.path}{suffix} already exists; a new state store is never created "
                    "over an old one (its keys' budgets would restart). Open it instead, or "
                    "choose a new path.")
        if self._epoch_path.exists():
            raise LedgerConflict(
                f"{self._epoch_path} records a state store that was at {self.path} and is "
                "gone (a store discarded by renyiboost takes its record with it): a new store "
                "there would give its keys fresh budgets. Restore the lost store, or, if its "
                "keys will never come again, delete the record and create the store.")

    @property
    def _epoch_path(self) -> Path:
        return Path(f"{os.path.realpath(self.path)}.epoch")

    def _check_not_behind(self, store_id: str, epoch: int, commits: int) -> None:
        """Refuse the store if it is behind the epoch recorded beside it, or at that epoch
        behind the commits recorded there: the file was restored from an older copy (one
        taken before the last open, or while the trainer ran), or lost the write-ahead log
        that held its last commits (SQLite moves the log into the file at checkpoints, so a
        lost log can be a few commits or many). Either way its keys' spent budgets went back
        while what they paid for was already visible, so every key would spend them again.
        (A store copied to a new path has no record there: :meth:`_settle_home` refuses it
        while the original is in place.)"""
        mark = marked_as(resharded_marks(self.path), store_id, self.created())
        if mark is not None and self._meta("side:resharded") is None:
            raise LedgerConflict(
                f"{self.path} held a store whose ledgers `renyiboost reshard` moved into "
                f"{mark.get('into_locations')} (its files went to {mark.get('archive')}): "
                "this store, without the reshard's tombstone, is a copy from before it, "
                "restored from a backup, and its keys' budgets went back. It never trains "
                "again; open the resharded deployment.")
        recorded = read_json(self._epoch_path)
        if not isinstance(recorded, dict):
            return  # no record (a store from before it, or the record was lost): nothing known
        if recorded.get("store_id") != store_id:
            return
        seen_epoch, seen_commits = int(recorded.get("epoch", 0)), int(recorded.get("commits", 0))
        if seen_epoch > epoch or (seen_epoch == epoch and seen_commits > commits):
            raise LedgerConflict(
                f"the state store {self.path} is at epoch {epoch} after {commits} commits, "
                f"behind epoch {seen_epoch} after {seen_commits} commits that it reached "
                "before: it was restored from an older copy or lost its write-ahead log "
                "(-wal), so its keys' spent budgets went back while what they paid for was "
                "already released. Restore the newest copy with its -wal file; a store never "
                "resumes from an older one.")

    def _home(self) -> str:
        return os.path.realpath(self.path)

    def _holds_store(self, home: Any, store_id: str) -> bool:
        """Whether the file at ``home`` (not this file under another name: a hard link
        is the same store) is a store with this id, as the record beside it says or, without
        one, the identity in its main file (a live store's newest commits may be only in its
        -wal, but its identity is in the record, written at every open)."""
        original = Path(str(home))
        try:
            if not original.is_file():
                return False
            if os.path.samefile(original, self.path):
                wal = Path(f"{original}-wal")
                if wal.exists() and wal.stat().st_size > 0:
                    raise LedgerConflict(
                        f"{self.path} is {original} under another name (a hard link), and "
                        f"its last commits are in {wal}, which SQLite reads only under that "
                        "name: opened here they would be lost, and the spent budgets they "
                        f"hold with them. Open it as {original}.")
                return False
        except OSError:
            return False
        identity = read_json(Path(f"{original}.epoch"))
        if identity is None:
            identity = _stored_identity(original, main_file_only=True)
        return isinstance(identity, dict) and identity.get("store_id") == store_id

    def _resharded_away(self, home: Any, store_id: str) -> dict[str, Any] | None:
        return marked_as(resharded_marks(str(home)), store_id, self.created())

    def _record_epoch(self, store_id: str, epoch: int, commits: int) -> None:
        """Write ``{store_id, epoch, commits}`` beside the database, durably (a temporary
        file, fsync, rename, fsync of the directory), after the epoch's commit."""
        write_json_durably(self._epoch_path,
                           {"store_id": store_id, "epoch": epoch, "commits": commits})
        self._close_record()  # an open one is the replaced file's

    def _record_commits(self, store_id: str, epoch: int, commits: int) -> None:
        """Update the record beside the database after a commit, without fsync: it must
        never be ahead of the database, and with ``synchronous=NORMAL`` a power cut can undo
        the last commits, so such a store records its commits at its opens only. A record
        the power cut leaves behind only checks less (an older copy a few commits back
        passes), never refuses a store that is not behind.

        Written in place, :data:`RECORD_BYTES` padded with spaces, on a file kept open: a
        rewrite that truncated the file first cost 240 µs a commit here (ext4 starts
        writing a file back when it is truncated and rewritten), more than a small
        ``synchronous=FULL`` commit itself (195 µs); in place, 5 µs. Nor is there a moment
        when the record is empty."""
        if not self._commits_durable:
            return
        if self._record_fd is not None and os.fstat(self._record_fd).st_nlink == 0:
            self._close_record()  # the record was deleted: write a new one, as before
        if self._record_fd is None:
            self._record_fd = os.open(self._epoch_path, os.O_WRONLY | os.O_CREAT, 0o644)
        record = json.dumps({"store_id": store_id, "epoch": epoch, "commits": commits})
        os.pwrite(self._record_fd, record.ljust(RECORD_BYTES).encode(), 0)

    def _close_record(self) -> None:
        if self._record_fd is not None:
            os.close(self._record_fd)
            self._record_fd = None

    def _check_present(self) -> None:
        marks = resharded_marks(self.path)
        mark = marks[-1] if marks else None
        if mark is not None and not self.path.exists():
            raise StoreNotFound(
                f"no state store at {self.path}: its store's ledgers were resharded into "
                f"{mark.get('into_locations')}, and its files moved to {mark.get('archive')}")
        if self.path.is_dir():
            raise StoreNotFound(f"{self.path} is a directory, not a state store file; a sharded "
                                "deployment keeps one store a shard there: pass --shards N")
        if not self.path.exists():
            raise StoreNotFound(f"no state store at {self.path}. {NEVER_IMPLICIT}")
        if self.path.stat().st_size == 0:
            raise StoreNotFound(f"the state store {self.path} is empty (0 bytes). "
                                f"{NEVER_IMPLICIT}")
        # Read the header before SQLite opens the file: opening switches a database to WAL
        # mode, so another program's file would be changed before it was refused.
        header = sqlite_header(self.path)
        if not header.startswith(_SQLITE_MAGIC):
            raise StoreNotFound(f"{self.path} is not a SQLite database, so not a state store. "
                                f"{NEVER_IMPLICIT}")
        if header[_WAL_VERSION_AT:_WAL_VERSION_AT + 2] != b"\x02\x02" and not _has_identity(
                self.path):  # not in WAL mode: a store's copy by VACUUM INTO, or not a store
            raise StoreNotFound(f"{self.path} is a SQLite database but not a renyiboost state "
                                f"store (no store identity). {NEVER_IMPLICIT}")

    def close(self) -> None:
        self._close_record()
        self._db.close()
        self._lock.release()

    def _remove(self) -> None:
        """The record first: stopped after it, the empty store is still there to open or
        discard again; stopped after the database, the record left behind refused every
        new store at the path as one that "is gone" (review H #5)."""
        self.close()
        self._epoch_path.unlink(missing_ok=True)
        for suffix in ("", "-wal", "-shm", ".lock"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)


def resharded_mark(path: str | Path) -> Path:
    """The file that ``renyiboost reshard`` leaves where it moved a tombstoned SQLite store
    away (``DIR/shard-K-of-N.db.resharded``, JSON: the store's id and creation time, where
    the ledgers and the files went): that store opened there later without its tombstone
    is an older copy restored from a backup, and is refused (the ``.epoch`` record, which
    refuses such a copy, moved with its files); stores that continue its id open. A path
    that a later deployment's store took and that was resharded in turn holds a list of
    marks, oldest first (:func:`resharded_marks`)."""
    return Path(f"{os.path.realpath(path)}.resharded")


def resharded_marks(path: str | Path) -> list[dict[str, Any]]:
    """Every mark ``renyiboost reshard`` left at ``path``, oldest first: one written over
    another forgot the store it named, whose backups then opened as live (review H)."""
    value = read_json(resharded_mark(path))
    entries = value if isinstance(value, list) else [value]
    return [entry for entry in entries if isinstance(entry, dict)]


def add_resharded_mark(path: str | Path, mark: dict[str, Any]) -> None:
    """Add ``mark`` to those at ``path``, durably (a single mark is written as before)."""
    marks = [*resharded_marks(path), mark]
    write_json_durably(resharded_mark(path), marks if len(marks) > 1 else mark)


def marked_as(marks: list[dict[str, Any]], store_id: str, created: Any) -> dict[str, Any] | None:
    """The newest of ``marks`` that names the store ``(store_id, created)``, if any."""
    return next((mark for mark in reversed(marks)
                 if (mark.get("store_id"), mark.get("created")) == (store_id, created)), None)


def read_json(path: Path) -> Any:
    """A small JSON file's value (``None``: absent or unreadable)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json_durably(target: Path, value: Any) -> None:
    """Write a small JSON file whole or not at all, and durably: a temporary file, fsync,
    rename over the target, fsync of the directory."""
    temporary = target.with_name(f"{target.name}.tmp")
    with open(temporary, "w") as file:
        file.write(json.dumps(value))
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, target)
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def sqlite_header(path: str | Path) -> bytes:
    """The first bytes of a file: a SQLite database starts with :data:`_SQLITE_MAGIC`."""
    with open(path, "rb") as file:
        return file.read(_SQLITE_HEADER_BYTES)


def is_sqlite_database(path: str | Path) -> bool:
    """Whether the regular file at ``path`` is a SQLite database (a state store, perhaps)."""
    return sqlite_header(path).startswith(_SQLITE_MAGIC)


def _has_identity(path: Path) -> bool:
    """Whether the SQLite file at ``path`` (not in WAL mode) holds a store identity."""
    return _stored_identity(path) is not None


def stored_identity(path: Path) -> Any:
    """The identity of the SQLite store at ``path`` (``None``: none), read without opening
    the store (its lock may be held): the main file's, else through a read-only connection
    that also reads its -wal (a new store's identity may be only there)."""
    identity = _stored_identity(path, main_file_only=True)
    return identity if identity is not None else _stored_identity(path)


def _stored_identity(path: Path, *, main_file_only: bool = False) -> Any:
    """The store identity held by the SQLite file at ``path`` (``None``: none, or not
    readable), read through a read-only connection that changes nothing. With
    ``main_file_only`` the connection is ``immutable`` (no -wal or -shm read or left
    beside a WAL database: another store's, which a reading ``mode=ro`` left behind)."""
    flags = "immutable=1" if main_file_only else "mode=ro"
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?{flags}", uri=True)) as db:
            row = db.execute("SELECT value FROM meta WHERE name = 'identity'").fetchone()
        return None if row is None else json.loads(row[0])
    except (sqlite3.Error, ValueError):
        return None


def config_differences(stored: Any, given: Any, path: str) -> list[str]:
    """Where two stored-config values differ, as ``path.field: stored → given`` lines, so a
    refusal names the argument to pass (a policy default that moved since the store was
    created, say) instead of leaving two long dumps to compare.

    >>> config_differences({"a": 1, "b": {"c": "x"}}, {"a": 1, "b": {"c": "y"}}, "config")
    ["config.b.c: 'x' stored, 'y' given"]
    """
    if isinstance(stored, dict) and isinstance(given, dict):
        return [line for key in sorted(set(stored) | set(given))
                for line in config_differences(stored.get(key), given.get(key),
                                               f"{path}.{key}")]
    return [] if stored == given else [f"{path}: {stored!r} stored, {given!r} given"]


def with_absent(stored: Any, absent: Any) -> Any:
    """``stored`` with every field of ``absent`` that it lacks filled in, at any depth of
    nested dicts (a field it holds keeps its stored value).

    >>> with_absent({"params": {"depth": 4}}, {"params": {"smoothing": 0.0}})
    {'params': {'depth': 4, 'smoothing': 0.0}}
    """
    if not isinstance(stored, dict) or not isinstance(absent, Mapping):
        return stored
    filled = {key: with_absent(value, absent.get(key)) for key, value in stored.items()}
    return filled | {key: value for key, value in absent.items() if key not in filled}


def key_source_name(source: dict[str, Any]) -> str:
    """A pinned key source (:data:`KEY_SOURCE_META`) in words: ``[events] key_field`` as a
    Kafka trainer pins it (``{"message_key": True}`` without one), or a replay's rows."""
    if "memory_rows" in source:
        return f"the row numbers of {source['memory_rows']}"
    field = source.get("key_field")
    return "the message key" if field is None else f"the payload field {field!r}"


def pin_meta(store: StateStore, name: str, value: Any, refusal: Callable[[Any], str], *,
             record: bool = True) -> None:
    """Record ``value`` under ``name`` at the first call; later, a different value is
    refused with :class:`~renyiboost.exceptions.LedgerConflict` and the message
    ``refusal(recorded)`` (a shard's place, a partition map: what a ledger belongs to).
    With ``record=False`` only the refusal: a start pins its values once every check of it
    has passed (a first start that failed once pinned a store that had read nothing)."""
    recorded = store.get_meta(name)
    if recorded is None:
        if record:
            store.set_meta(name, value)
    elif recorded != value:
        raise LedgerConflict(refusal(recorded))


def is_postgres_location(location: str | Path) -> bool:
    """Whether a state location is a PostgreSQL URL (else a SQLite path or URL); a URL's
    scheme is matched in any case, as libpq matches it (``POSTGRESQL://…`` was taken for a
    file name and echoed whole, its password with it: review H)."""
    return str(location).lower().startswith(("postgresql://", "postgres://"))


def refuse_other_url_schemes(location: str) -> None:
    """Refuse a URL of a database driver's own scheme (SQLAlchemy's ``postgresql+psycopg://``)
    or another scheme: it was taken for a SQLite path and echoed whole, its password too."""
    scheme, sep, _ = location.partition("://")
    if sep and scheme.lower() != "sqlite" and not is_postgres_location(location):
        from renyiboost.stream.postgres import without_password

        raise ValueError(
            f"{without_password(location)} is a URL of the scheme {scheme!r}: a state store "
            "is a path, a sqlite:///path URL or a libpq postgresql://… URL (without a "
            "driver's +name)")


def sqlite_path(location: str | Path) -> Path:
    """The file a SQLite location names (a path, or a ``sqlite:///`` URL)."""
    return Path(str(location).removeprefix("sqlite:///"))


def store_at(location: str | Path, *, create: bool = False,
             continues: StoreIdentity | None = None,
             meta: Mapping[str, Any] | None = None) -> SQLStateStore:
    """The durable store a location names: a ``postgresql://…[?schema=name]`` URL →
    :class:`~renyiboost.stream.postgres.PostgresStore`; a path or ``sqlite:///…`` URL →
    :class:`SQLiteStore`. ``create``, ``continues`` and ``meta`` as for either (never
    implicit)."""
    text = str(location)
    if is_postgres_location(text):
        from renyiboost.stream.postgres import PostgresStore

        return PostgresStore(text, create=create, continues=continues, meta=meta)
    refuse_other_url_schemes(text)
    return SQLiteStore(location, create=create, continues=continues, meta=meta)


def open_store(store: StateStore | str | Path | None) -> StateStore:
    """``None`` → memory; a location (path, ``sqlite:///…`` or ``postgresql://…`` URL) → the
    existing store there (see :func:`store_at`; creating one is explicit); a store → itself."""
    if store is None:
        return MemoryStore()
    if isinstance(store, StateStore):
        return store
    if isinstance(store, str | Path):
        return store_at(store)
    raise TypeError("store must be None, a path, a sqlite:/// or postgresql:// URL or a "
                    f"StateStore, got {store!r}")
