"""State stores: where the engine's ledger, pool, model and source offsets live.

One small interface, two implementations:

* :class:`MemoryStore` keeps nothing (the engine's own arrays are the state): the default
  for River use in a notebook.
* :class:`SQLiteStore` (stdlib ``sqlite3``, WAL mode, ``synchronous=FULL`` by default) is
  the durable default for the CLI and the Kafka service. Everything a restart needs is in
  one file.

The engine hands the store one :class:`Commit` per released output (the initial score or a
round) and makes the output visible only after :meth:`StateStore.commit` returned. The
commit is one SQLite transaction holding the output's *events* — records merged into the
pool, the initial score, the round's tree and every record's charge code — the keys first
seen, the retirements and the source offsets (DEVELOPERS invariant 2). A crash before the
commit loses the round, never its charges; a crash after it loses nothing.

The store is event-sourced so that a round writes little: the charge codes (2 bytes per
active record) instead of the spent budgets and margins (16 bytes). Restoring replays the
events after the last *snapshot* with the same code paths the live engine used, so spent
budgets and margins come back bit for bit. A snapshot (uids, margins, spent) is written when
the events since the last one outweigh it four times; old events, dead feature rows and
trees outside ``max_trees`` are deleted then.

Tables: ``meta`` (JSON), ``keys`` (per commit, the user keys first seen and their uids: one
row a commit, not a row a key), ``retirements`` (blobs of
retired uids and final spent), ``segments`` (append-only blobs of merged rows: uids, features,
targets; the newest row of a uid wins), ``trees``, ``events`` and ``snapshot``.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np


@dataclass(frozen=True)
class MergeEvent:
    """Records joined the pool (new keys appended, known keys replaced)."""

    uids: np.ndarray
    X: np.ndarray
    target: np.ndarray
    margin: np.ndarray  # margin of each record under the model at merge time


@dataclass(frozen=True)
class InitEvent:
    """The DP initial score was released, charging every pool record ``charge``."""

    score: float
    charge: float


@dataclass(frozen=True)
class RoundEvent:
    """A round released tree ``round`` and charged the pool by ``codes``."""

    round: int
    features: np.ndarray
    thresholds: np.ndarray
    leaves: np.ndarray
    codes: np.ndarray | None  # uint16 per pool record; None without privacy
    dropped: int  # oldest trees dropped from the model with this round (max_trees)


Event = MergeEvent | InitEvent | RoundEvent


@dataclass
class PoolState:
    """The active pool after a commit: what a snapshot stores."""

    uids: np.ndarray
    X: np.ndarray
    target: np.ndarray
    margin: np.ndarray
    spent: np.ndarray


@dataclass
class Commit:
    """What one released output changes in the durable state."""

    events: list[Event]
    meta: dict[str, Any]
    after: PoolState
    new_keys: list[tuple[int, str]] = field(default_factory=list)
    retired: tuple[np.ndarray, np.ndarray] | None = None  # uids, final spent
    first_kept_round: int = 0  # trees of earlier rounds are no longer in the model


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
    charge_grid: np.ndarray | None


class StateStore:
    """Interface of a state store (see the module docstring)."""

    durable: bool = False

    def load(self, config: str) -> Snapshot | None:
        """The committed state, or None for a new store; refuses a different ``config``."""
        raise NotImplementedError

    def commit(self, change: Commit | list[Commit]) -> None:
        """Make ``change`` (or several, in order) durable atomically; return once it is."""
        raise NotImplementedError

    def save_charge_grid(self, grid: np.ndarray) -> None:
        """Keep the filter's charge table, so a restore replays the very same charges."""

    def get_meta(self, name: str) -> Any:
        """A small value kept beside the state (e.g. the last published model version)."""
        raise NotImplementedError

    def set_meta(self, name: str, value: Any) -> None:
        """Durably record a small value outside any round (its own transaction)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the store's resources."""


class MemoryStore(StateStore):
    """Keeps no copy: the engine's arrays are the only state (lost with the process)."""

    def load(self, config: str) -> Snapshot | None:
        return None

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}

    def commit(self, change: Commit | list[Commit]) -> None:
        return None

    def get_meta(self, name: str) -> Any:
        return self._values.get(name)

    def set_meta(self, name: str, value: Any) -> None:
        self._values[name] = value


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS keys(batch INTEGER PRIMARY KEY AUTOINCREMENT, uids BLOB NOT NULL,
                                names TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS retirements(batch INTEGER PRIMARY KEY AUTOINCREMENT,
                                       uids BLOB NOT NULL, spent BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS segments(seg INTEGER PRIMARY KEY AUTOINCREMENT, uids BLOB NOT NULL,
                                    X BLOB NOT NULL, target BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS trees(round INTEGER PRIMARY KEY, features BLOB NOT NULL,
                                 thresholds BLOB NOT NULL, leaves BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS events(seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,
                                  info TEXT NOT NULL, data BLOB);
CREATE TABLE IF NOT EXISTS snapshot(id INTEGER PRIMARY KEY CHECK (id = 0), seq INTEGER NOT NULL,
                                    last_seg INTEGER NOT NULL, uids BLOB NOT NULL,
                                    margin BLOB NOT NULL, spent BLOB NOT NULL);
"""


def _blob(array: np.ndarray, dtype: str) -> bytes:
    return np.ascontiguousarray(array, dtype=dtype).tobytes()


def _array(blob: bytes, dtype: str) -> np.ndarray:
    return np.frombuffer(blob, dtype=dtype).copy()


class SQLiteStore(StateStore):
    """The durable store in one SQLite file (see the module docstring).

    Parameters
    ----------
    path
        File path, or a ``sqlite:///path`` URL.
    synchronous
        ``"FULL"`` (default) syncs every commit to disk: a power loss cannot undo a commit
        whose tree was already published. ``"NORMAL"`` survives process crashes only.
    snapshot_ratio
        Write a snapshot when the bytes of events since the last one exceed this many times
        the snapshot's own size (a restore then replays at most that much).
    """

    durable = True

    def __init__(
        self,
        path: str | Path,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        snapshot_ratio: float = 4.0,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        self.path = Path(str(path).removeprefix("sqlite:///"))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.snapshot_ratio = snapshot_ratio
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.executescript(_SCHEMA)
        self._n_features: int | None = None
        self._event_bytes = int(self._db.execute(
            "SELECT COALESCE(SUM(LENGTH(data)), 0) FROM events").fetchone()[0])
        self._segment_rows = int(self._db.execute(
            "SELECT COALESCE(SUM(LENGTH(uids)), 0) / 8 FROM segments").fetchone()[0])

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # ------------------------------------------------------------------ reading
    def _meta(self, name: str) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else json.loads(row[0])

    def load(self, config: str) -> Snapshot | None:
        stored = self._meta("config")
        if stored is None:
            self._write_meta({"config": json.loads(config)})
            return None
        if stored != json.loads(config):
            raise ValueError(
                f"the store {self.path} was created with a different configuration; a key's "
                "budget cannot be re-based. Use the same arguments or a new store.\n"
                f"stored: {json.dumps(stored, sort_keys=True)}\n"
                f"given:  {json.dumps(json.loads(config), sort_keys=True)}"
            )
        meta = self._meta("state")
        if meta is None:
            return None
        k = self._n_features = int(meta["n_features"])
        depth = int(meta["depth"])
        trees = {
            int(r): (_array(f, "<i8"), _array(t, "<f8"), _array(v, "<f8"))
            for r, f, t, v in self._db.execute(
                "SELECT round, features, thresholds, leaves FROM trees ORDER BY round")
        }
        snap = self._db.execute(
            "SELECT seq, last_seg, uids, margin, spent FROM snapshot WHERE id = 0").fetchone()
        seq, last_seg = (snap[0], snap[1]) if snap else (0, 0)
        uids = _array(snap[2], "<i8") if snap else np.zeros(0, np.int64)
        X, target = self._rows(uids, k, max_seg=last_seg)
        pool = PoolState(uids, X, target,
                         _array(snap[3], "<f8") if snap else np.zeros(0),
                         _array(snap[4], "<f8") if snap else np.zeros(0))
        events = [self._event(kind, json.loads(info), data, k, 2**depth - 1)
                  for kind, info, data in self._db.execute(
                      "SELECT kind, info, data FROM events WHERE seq > ? ORDER BY seq", (seq,))]
        keys: dict[str, int] = {}
        for uids_blob, names in self._db.execute("SELECT uids, names FROM keys ORDER BY batch"):
            keys.update(zip(json.loads(names), _array(uids_blob, "<i8").tolist(), strict=True))
        batches = self._db.execute("SELECT uids, spent FROM retirements ORDER BY batch").fetchall()
        grid = self._meta("charge_grid")
        return Snapshot(
            meta=meta, trees=trees, pool=pool, events=events, keys=keys,
            retired_uids=np.concatenate([_array(b[0], "<i8") for b in batches]
                                        or [np.zeros(0, np.int64)]),
            retired_spent=np.concatenate([_array(b[1], "<f8") for b in batches] or [np.zeros(0)]),
            charge_grid=None if grid is None else np.asarray(grid, dtype=float),
        )

    def _event(self, kind: str, info: dict, data: bytes | None, k: int, n_internal: int) -> Event:
        if kind == "merge":
            seg = self._db.execute("SELECT uids, X, target FROM segments WHERE seg = ?",
                                   (info["seg"],)).fetchone()
            return MergeEvent(_array(seg[0], "<i8"), _array(seg[1], "<f8").reshape(-1, k),
                              _array(seg[2], "<f8"), _array(data, "<f8"))
        if kind == "init":
            return InitEvent(float(info["score"]), float(info["charge"]))
        row = self._db.execute("SELECT features, thresholds, leaves FROM trees WHERE round = ?",
                               (info["round"],)).fetchone()
        return RoundEvent(int(info["round"]), _array(row[0], "<i8").reshape(n_internal),
                          _array(row[1], "<f8"), _array(row[2], "<f8"),
                          None if data is None else _array(data, "<u2"), int(info["dropped"]))

    def _rows(self, uids: np.ndarray, k: int, max_seg: int) -> tuple[np.ndarray, np.ndarray]:
        """Features and targets of ``uids``: each uid's newest row in segments ≤ ``max_seg``."""
        if uids.size == 0:
            return np.zeros((0, k)), np.zeros(0)
        segs = self._db.execute(
            "SELECT uids, X, target FROM segments WHERE seg <= ? ORDER BY seg", (max_seg,)
        ).fetchall()
        all_uids = np.concatenate([_array(s[0], "<i8") for s in segs])
        all_X = np.concatenate([_array(s[1], "<f8").reshape(-1, k) for s in segs])
        all_target = np.concatenate([_array(s[2], "<f8") for s in segs])
        unique, first_in_reversed = np.unique(all_uids[::-1], return_index=True)
        last = all_uids.size - 1 - first_in_reversed
        where = np.minimum(np.searchsorted(unique, uids), unique.size - 1)
        if np.any(unique[where] != uids):
            raise RuntimeError(f"the store {self.path} is inconsistent: pool rows without data")
        return all_X[last[where]], all_target[last[where]]

    # ------------------------------------------------------------------ writing
    def get_meta(self, name: str) -> Any:
        return self._meta(f"side:{name}")

    def set_meta(self, name: str, value: Any) -> None:
        self._write_meta({f"side:{name}": value})

    def save_charge_grid(self, grid: np.ndarray) -> None:
        if self._meta("charge_grid") is None:
            self._write_meta({"charge_grid": np.asarray(grid, dtype=float).tolist()})

    def _write_meta(self, values: dict[str, Any]) -> None:
        self._db.executemany(
            "INSERT OR REPLACE INTO meta(name, value) VALUES (?, ?)",
            [(name, json.dumps(value)) for name, value in values.items()],
        )

    def commit(self, change: Commit | list[Commit]) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            changes = change if isinstance(change, list) else [change]
            for one in changes:
                self._apply(one)
            self._write_meta(changes[-1].meta)  # each change's meta replaces the one before
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _apply(self, change: Commit) -> None:
        db = self._db
        if change.new_keys:
            uids, names = zip(*change.new_keys, strict=True)
            db.execute("INSERT INTO keys(uids, names) VALUES (?, ?)",
                       (_blob(np.asarray(uids), "<i8"), json.dumps(names)))
        for event in change.events:
            self._append(event)
        if change.retired is not None and change.retired[0].size:
            db.execute("INSERT INTO retirements(uids, spent) VALUES (?, ?)",
                       (_blob(change.retired[0], "<i8"), _blob(change.retired[1], "<f8")))
        after = change.after
        if self._event_bytes > self.snapshot_ratio * 24 * max(after.uids.size, 1_000):
            self._snapshot(after, change.first_kept_round)

    def _append(self, event: Event) -> None:
        db = self._db
        if isinstance(event, MergeEvent):
            seg = self._insert_segment(event.uids, event.X, event.target)
            data = _blob(event.margin, "<f8")
            db.execute("INSERT INTO events(kind, info, data) VALUES ('merge', ?, ?)",
                       (json.dumps({"seg": seg}), data))
        elif isinstance(event, InitEvent):
            data = None
            db.execute("INSERT INTO events(kind, info, data) VALUES ('init', ?, NULL)",
                       (json.dumps({"score": event.score, "charge": event.charge}),))
        else:
            db.execute(
                "INSERT INTO trees(round, features, thresholds, leaves) VALUES (?, ?, ?, ?)",
                (event.round, _blob(event.features, "<i8"), _blob(event.thresholds, "<f8"),
                 _blob(event.leaves, "<f8")),
            )
            data = None if event.codes is None else _blob(event.codes, "<u2")
            db.execute("INSERT INTO events(kind, info, data) VALUES ('round', ?, ?)",
                       (json.dumps({"round": event.round, "dropped": event.dropped}), data))
        self._event_bytes += 0 if data is None else len(data)

    def _insert_segment(self, uids: np.ndarray, X: np.ndarray, target: np.ndarray) -> int:
        cursor = self._db.execute(
            "INSERT INTO segments(uids, X, target) VALUES (?, ?, ?)",
            (_blob(uids, "<i8"), _blob(X, "<f8"), _blob(target, "<f8")),
        )
        self._segment_rows += int(uids.size)
        return int(cursor.lastrowid)

    def _snapshot(self, after: PoolState, first_kept_round: int) -> None:
        """Write the pool as of this commit; drop what no restore will need again."""
        db = self._db
        if self._segment_rows > 2 * after.uids.size + 10_000:
            # Most stored rows are dead (retired or replaced): keep only the live ones.
            db.execute("DELETE FROM segments")
            self._segment_rows = 0
            self._insert_segment(after.uids, after.X, after.target)
        last_seg = int(db.execute("SELECT COALESCE(MAX(seg), 0) FROM segments").fetchone()[0])
        seq = int(db.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0])
        db.execute(
            "INSERT OR REPLACE INTO snapshot(id, seq, last_seg, uids, margin, spent) "
            "VALUES (0, ?, ?, ?, ?, ?)",
            (seq, last_seg, _blob(after.uids, "<i8"), _blob(after.margin, "<f8"),
             _blob(after.spent, "<f8")),
        )
        db.execute("DELETE FROM events WHERE seq <= ?", (seq,))
        db.execute("DELETE FROM trees WHERE round < ?", (first_kept_round,))
        self._event_bytes = 0

    def close(self) -> None:
        self._db.close()


def open_store(store: StateStore | str | Path | None) -> StateStore:
    """``None`` → memory; a path or ``sqlite:///…`` URL → SQLite; a store → itself."""
    if store is None:
        return MemoryStore()
    if isinstance(store, StateStore):
        return store
    if isinstance(store, str | Path):
        return SQLiteStore(store)
    raise TypeError(f"store must be None, a path, a sqlite:/// URL or a StateStore, got {store!r}")
