"""State stores: where the engine's ledger, pool, model and source offsets live.

One small interface, two implementations:

* :class:`MemoryStore` keeps nothing (the engine's own arrays are the state): the default
  for River use in a notebook.
* :class:`SQLiteStore` (stdlib ``sqlite3``, WAL mode, ``synchronous=FULL`` by default) is
  the durable default for the CLI and the Kafka service. Everything a restart needs is in
  one file.

The engine hands the store one :class:`Commit` per released output (the initial score or a
round) and makes the output visible only after :meth:`StateStore.commit` returned: the
commit is one SQLite transaction holding the round's charges, retirements, the new tree and
the source offsets it covers (DEVELOPERS invariant 2). A crash before the commit loses the
round, never its charges; a crash after it loses nothing.

Layout in SQLite (columnar blobs, written only when they change):

* ``segments``: append-only blobs of records' keys (uids), encoded features and targets,
  written when records join the pool; the newest row of a uid wins (upserts). When dead
  rows outnumber live ones, the live pool is rewritten as one segment in the same commit.
* ``pool``: one row with the active pool's uids, cached margins and spent RDP.
* ``trees``: one row per released tree; ``max_trees`` deletes the oldest.
* ``keys``: user-given keys and their uids. ``retirements``: blobs of retired uids and
  their final spent RDP. ``meta``: JSON (config, counters, offsets, seeded RNG state).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np


@dataclass
class Commit:
    """What one released output changes in the durable state."""

    meta: dict[str, Any]
    pool_uids: np.ndarray
    pool_X: np.ndarray
    pool_target: np.ndarray
    pool_margin: np.ndarray
    pool_spent: np.ndarray
    new_rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # uids, X, target
    new_keys: list[tuple[int, str]] = field(default_factory=list)
    retired: tuple[np.ndarray, np.ndarray] | None = None  # uids, final spent
    tree: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None  # round, f, t, leaves
    first_kept_round: int | None = None  # trees of earlier rounds were dropped (max_trees)


@dataclass
class Snapshot:
    """Everything :meth:`StateStore.load` restores."""

    config: str
    meta: dict[str, Any]
    tree_rounds: np.ndarray
    features: np.ndarray
    thresholds: np.ndarray
    leaves: np.ndarray
    pool_uids: np.ndarray
    pool_X: np.ndarray
    pool_target: np.ndarray
    pool_margin: np.ndarray
    pool_spent: np.ndarray
    keys: dict[str, int]
    retired_uids: np.ndarray
    retired_spent: np.ndarray


class StateStore:
    """Interface of a state store (see the module docstring)."""

    durable: bool = False

    def load(self, config: str) -> Snapshot | None:
        """The committed state, or None for a new store; refuses a different ``config``."""
        raise NotImplementedError

    def commit(self, change: Commit) -> None:
        """Make ``change`` durable atomically; return only once it is."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the store's resources."""


class MemoryStore(StateStore):
    """Keeps no copy: the engine's arrays are the only state (lost with the process)."""

    def load(self, config: str) -> Snapshot | None:
        return None

    def commit(self, change: Commit) -> None:
        return None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trees(round INTEGER PRIMARY KEY, features BLOB NOT NULL,
                                 thresholds BLOB NOT NULL, leaves BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS segments(seg INTEGER PRIMARY KEY AUTOINCREMENT, uids BLOB NOT NULL,
                                    X BLOB NOT NULL, target BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS pool(id INTEGER PRIMARY KEY CHECK (id = 0), uids BLOB NOT NULL,
                                margin BLOB NOT NULL, spent BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS keys(uid INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS retirements(batch INTEGER PRIMARY KEY AUTOINCREMENT,
                                       uids BLOB NOT NULL, spent BLOB NOT NULL);
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
    """

    durable = True

    def __init__(self, path: str | Path, synchronous: Literal["FULL", "NORMAL"] = "FULL") -> None:
        text = str(path)
        if text.startswith("sqlite:///"):
            text = text[len("sqlite:///") :]
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        self.path = Path(text)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        self._db.executescript(_SCHEMA)
        self._segment_rows = int(
            self._db.execute("SELECT COALESCE(SUM(LENGTH(uids)), 0) / 8 FROM segments").fetchone()[0]
        )

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # ------------------------------------------------------------------ reading
    def _meta(self, name: str) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        return None if row is None else json.loads(row[0])

    def load(self, config: str) -> Snapshot | None:
        stored = self._meta("config")
        if stored is None:
            return None
        if stored != json.loads(config):
            raise ValueError(
                f"the store {self.path} was created with a different configuration; a key's "
                "budget cannot be re-based. Use the same arguments or a new store.\n"
                f"stored: {json.dumps(stored, sort_keys=True)}\n"
                f"given:  {json.dumps(json.loads(config), sort_keys=True)}"
            )
        meta = self._meta("state")
        n_features = int(meta["n_features"])
        n_internal, n_leaves = 2 ** int(meta["depth"]) - 1, 2 ** int(meta["depth"])
        rows = self._db.execute(
            "SELECT round, features, thresholds, leaves FROM trees ORDER BY round"
        ).fetchall()
        rounds = np.array([r[0] for r in rows], dtype=np.int64)
        features = np.array([_array(r[1], "<i8") for r in rows], dtype=np.int64).reshape(-1, n_internal)
        thresholds = np.array([_array(r[2], "<f8") for r in rows]).reshape(-1, n_internal)
        leaves = np.array([_array(r[3], "<f8") for r in rows]).reshape(-1, n_leaves)

        pool = self._db.execute("SELECT uids, margin, spent FROM pool WHERE id = 0").fetchone()
        uids = _array(pool[0], "<i8") if pool else np.zeros(0, np.int64)
        margin = _array(pool[1], "<f8") if pool else np.zeros(0)
        spent = _array(pool[2], "<f8") if pool else np.zeros(0)
        X, target = self._gather_rows(uids, n_features)

        keys = {key: int(uid) for uid, key in self._db.execute("SELECT uid, key FROM keys")}
        batches = self._db.execute("SELECT uids, spent FROM retirements ORDER BY batch").fetchall()
        retired_uids = np.concatenate([_array(b[0], "<i8") for b in batches] or [np.zeros(0, np.int64)])
        retired_spent = np.concatenate([_array(b[1], "<f8") for b in batches] or [np.zeros(0)])
        return Snapshot(
            config=config, meta=meta, tree_rounds=rounds, features=features,
            thresholds=thresholds, leaves=leaves, pool_uids=uids, pool_X=X, pool_target=target,
            pool_margin=margin, pool_spent=spent, keys=keys, retired_uids=retired_uids,
            retired_spent=retired_spent,
        )

    def _gather_rows(self, uids: np.ndarray, n_features: int) -> tuple[np.ndarray, np.ndarray]:
        """Features and targets of ``uids``: the newest segment row of each uid wins."""
        segs = self._db.execute("SELECT uids, X, target FROM segments ORDER BY seg").fetchall()
        if not segs or uids.size == 0:
            return np.zeros((0, n_features)), np.zeros(0)
        all_uids = np.concatenate([_array(s[0], "<i8") for s in segs])
        all_X = np.concatenate([_array(s[1], "<f8").reshape(-1, n_features) for s in segs])
        all_target = np.concatenate([_array(s[2], "<f8") for s in segs])
        # Last occurrence of each uid: unique over the reversed order.
        unique, first_in_reversed = np.unique(all_uids[::-1], return_index=True)
        last = all_uids.size - 1 - first_in_reversed
        where = np.searchsorted(unique, uids)
        if np.any(where >= unique.size) or np.any(unique[np.minimum(where, unique.size - 1)] != uids):
            raise RuntimeError(f"the store {self.path} is inconsistent: pool rows without data")
        rows = last[where]
        return all_X[rows], all_target[rows]

    # ------------------------------------------------------------------ writing
    def commit(self, change: Commit) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            if change.new_keys:
                db.executemany("INSERT INTO keys(uid, key) VALUES (?, ?)", change.new_keys)
            n_pool = change.pool_uids.size
            if change.new_rows is not None and change.new_rows[0].size:
                uids, X, target = change.new_rows
                self._insert_segment(uids, X, target)
            if self._segment_rows > 2 * n_pool + 10_000:
                # Garbage-collect dead rows: the live pool becomes the only segment.
                db.execute("DELETE FROM segments")
                self._segment_rows = 0
                self._insert_segment(change.pool_uids, change.pool_X, change.pool_target)
            db.execute(
                "INSERT OR REPLACE INTO pool(id, uids, margin, spent) VALUES (0, ?, ?, ?)",
                (_blob(change.pool_uids, "<i8"), _blob(change.pool_margin, "<f8"),
                 _blob(change.pool_spent, "<f8")),
            )
            if change.retired is not None and change.retired[0].size:
                db.execute(
                    "INSERT INTO retirements(uids, spent) VALUES (?, ?)",
                    (_blob(change.retired[0], "<i8"), _blob(change.retired[1], "<f8")),
                )
            if change.tree is not None:
                round_, f, t, leaves = change.tree
                db.execute(
                    "INSERT INTO trees(round, features, thresholds, leaves) VALUES (?, ?, ?, ?)",
                    (int(round_), _blob(f, "<i8"), _blob(t, "<f8"), _blob(leaves, "<f8")),
                )
            if change.first_kept_round is not None:
                db.execute("DELETE FROM trees WHERE round < ?", (int(change.first_kept_round),))
            db.executemany(
                "INSERT OR REPLACE INTO meta(name, value) VALUES (?, ?)",
                [(name, json.dumps(value)) for name, value in change.meta.items()],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _insert_segment(self, uids: np.ndarray, X: np.ndarray, target: np.ndarray) -> None:
        self._db.execute(
            "INSERT INTO segments(uids, X, target) VALUES (?, ?, ?)",
            (_blob(uids, "<i8"), _blob(X, "<f8"), _blob(target, "<f8")),
        )
        self._segment_rows += int(uids.size)

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
