"""The streaming engine: an active pool of keyed records, triggers, retirement, durable rounds.

The engine owns the public schema, the calibration, the model (initial score and trees) and
the *active pool*: the records that still have budget, stored columnar in numpy (features,
target, cached margin, spent RDP). Data flows one way::

    add() → pending buffer → merge into the pool → initial score / round → commit → visible

**Privacy unit = key.** Every record has a key (given, or a generated sequence id). A key
has one lifetime budget B (S-GBDT Alg. 8 with Feldman & Zrnic's individual filter). A new
record with a known active key replaces that key's features and label and keeps its spent
budget (an upsert, like a compacted topic). Once a key is retired its later records are
dropped and counted, never trained on. Keys are compared as strings (``1`` and ``"1"`` are
one key, which can only merge budgets, never split one).

**Rounds.** A stream has no nominal end: rounds go on while any key has budget left, unless
``params.max_rounds`` caps them (what global, non-individual accounting would have to do).

**Triggers.** ``train_every`` new records since the last trigger run ``trees_per_trigger``
rounds; :meth:`StreamEngine.train` runs rounds explicitly (a batch boundary). Before the
first round the DP initial score is released over the pool (at least ``warmup`` records).

**Durability.** Every released output is committed to the store (charges, retirements, the
tree, the source offsets it covers) before it becomes visible to :meth:`predict_margin`
(DEVELOPERS invariant 2). Restarting from the same store restores the exact ledger, model
and pool; records that arrived after the last commit are re-read from the source offsets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from renyiboost.models.booster import RecordPool, RoundOutcome, SGBDTBooster, SGBDTParams
from renyiboost.models.trees import Ensemble
from renyiboost.schema import PublicSchema
from renyiboost.stream.store import (
    Commit,
    InitEvent,
    MergeEvent,
    PoolState,
    RoundEvent,
    Snapshot,
    StateStore,
    open_store,
)

SEEN, ACTIVE, RETIRED = 0, 1, 2
KEY_STATUS = {SEEN: "pending", ACTIVE: "active", RETIRED: "retired"}


class EngineConfig(BaseModel):
    """Everything that fixes the meaning of a budget; a store refuses a different one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    public_schema: PublicSchema
    params: SGBDTParams
    train_every: int = Field(100, ge=1, description="new records per trigger")
    trees_per_trigger: int = Field(1, ge=1, description="rounds run by one trigger")
    warmup: int = Field(100, ge=1, description="records needed before the initial score")
    max_trees: int | None = Field(None, ge=1, description="keep only the newest trees")


class PrivacyReport(BaseModel):
    """What the engine has released and spent; every number comes from the accounting."""

    private: bool
    epsilon: float
    delta: float | None
    order: int | None
    sigma: float | None
    budget_rdp: float | None
    max_spent_rdp: float
    spent_fraction_quantiles: dict[str, float]
    n_trees: int
    rounds_done: int
    n_active: int
    n_retired: int
    n_dropped: int
    n_pending: int
    n_unknown_features: int
    seeded_for_testing: bool


class KeyBudget(BaseModel):
    """One key's standing in the ledger."""

    key: str
    status: str  # "unknown", "pending", "active" or "retired"
    spent_rdp: float
    budget_rdp: float | None


class StreamEngine:
    """Online S-GBDT over keyed records with per-key Rényi budgets and a state store.

    Parameters
    ----------
    config
        The public schema, learner parameters and triggers (:class:`EngineConfig`).
    store
        ``None`` (memory), a path / ``sqlite:///`` URL (SQLite) or a :class:`StateStore`.
        An existing store with the same config is resumed.
    seed
        ``None`` (default) for CSPRNG noise; an integer for reproducible tests only.
    """

    def __init__(
        self, config: EngineConfig, store: StateStore | str | None = None, seed: int | None = None
    ) -> None:
        self.config = config
        self.schema = config.public_schema
        self.booster = SGBDTBooster(config.params, self.schema, seed)
        self.store = open_store(store)
        self._config_json = config.model_dump_json()
        k = self.schema.n_features
        self.pool = RecordPool.from_arrays(np.zeros((0, k)), np.zeros(0))
        self.pool_uids = np.zeros(0, dtype=np.int64)
        self._keys: dict[str, int] = {}
        self._status = np.zeros(0, dtype=np.int8)  # by uid
        self._slot = np.zeros(0, dtype=np.int64)  # by uid: row in the pool, or -1
        self._ledger_spent = np.zeros(0, dtype=float)  # by uid: final spent of retired keys
        self._next_uid = 0
        self._initialized = False
        self.counters: dict[str, int] = {
            "dropped": 0, "unknown_features": 0, "superseded": 0, "upserts": 0}
        self.offsets: dict[str, Any] = {}  # source position covered by the last commit
        self._pending_uids: list[int] = []
        self._pending_rows: list[np.ndarray] = []
        self._pending_targets: list[float] = []
        self._pending_position: dict[str, int] = {}
        self._since_trigger = 0
        self._uncommitted_keys: list[tuple[int, str]] = []
        self._pending_events: list[MergeEvent] = []
        #: Called with each output once it is committed and visible (e.g. to publish it).
        self.listeners: list[Callable[[InitEvent | RoundEvent], None]] = []
        self._deferred: list[Commit] | None = None
        self._deferred_outputs: list[InitEvent | RoundEvent] = []
        self._merged_position: dict[str, int] = {}
        snapshot = self.store.load(self._config_json)
        if snapshot is not None:
            self._restore(snapshot)
        if self.booster.filter is not None:
            self.store.save_charge_grid(self.booster.filter.table.grid_charges)

    # ------------------------------------------------------------------ properties
    @property
    def ensemble(self) -> Ensemble:
        return self.booster.ensemble

    @property
    def n_pending(self) -> int:
        return len(self._pending_uids)

    # ------------------------------------------------------------------ input
    def check_label(self, y: Any) -> float:
        """Validate one label at the boundary; returns it as a float.

        Regression labels must be finite and inside the public ``target_bounds``;
        classification labels must be 0/1 (or bools). Raises ``ValueError`` naming the value.
        """
        value = float(y)
        if not math.isfinite(value):
            raise ValueError(f"labels must be finite numbers, got {y!r}")
        if self.config.params.task == "classification":
            if value != 0.0 and value != 1.0:
                raise ValueError(f"binary labels must be 0/1 or False/True, got {y!r}")
        else:
            lo, hi = self.schema.target_bounds  # type: ignore[misc]
            if not lo <= value <= hi:
                raise ValueError(f"label {y!r} is outside the public target_bounds ({lo}, {hi})")
        return value

    def label_ok(self, values: np.ndarray) -> np.ndarray:
        """:meth:`check_label`'s rule on an array of float labels, as a boolean mask."""
        if self.config.params.task == "classification":
            return (values == 0.0) | (values == 1.0)
        lo, hi = self.schema.target_bounds  # type: ignore[misc]
        return (values >= lo) & (values <= hi)  # NaN fails both, ±inf one

    def check_labels(self, y: Any) -> np.ndarray:
        """:meth:`check_label` for a whole array at once (the first bad label is reported
        by :meth:`check_label` itself, so the reasons are the same)."""
        values = np.asarray(y, dtype=float).reshape(-1)
        ok = self.label_ok(values)
        if not ok.all():
            self.check_label(values[~ok][0])
        return values

    def _uid_for(self, key: Any | None) -> int:
        if key is None:
            uid = self._new_uid()
            return uid
        name = key.decode("utf-8", "backslashreplace") if isinstance(key, bytes) else str(key)
        uid = self._keys.get(name)
        if uid is None:
            uid = self._new_uid()
            self._keys[name] = uid
            self._uncommitted_keys.append((uid, name))
        return uid

    def _new_uid(self) -> int:
        uid = self._next_uid
        if uid < self._status.size:  # the common case, without numpy
            self._next_uid += 1
            return uid
        return int(self._new_uids(1)[0])

    def _new_uids(self, n: int) -> np.ndarray:
        """Allocate ``n`` fresh uids (generated keys never repeat), growing the ledger."""
        first = self._next_uid
        self._next_uid += n
        if self._next_uid > self._status.size:
            grow = max(1024, self._status.size, self._next_uid - self._status.size)
            self._status = np.concatenate([self._status, np.zeros(grow, np.int8)])
            self._slot = np.concatenate([self._slot, np.full(grow, -1, np.int64)])
            self._ledger_spent = np.concatenate([self._ledger_spent, np.zeros(grow)])
        return np.arange(first, self._next_uid, dtype=np.int64)

    def add(
        self,
        rows: np.ndarray,
        targets: Any,
        keys: list[Any] | None = None,
        positions: list[tuple[str, int]] | None = None,
        unknown_features: int = 0,
        *,
        labels_checked: bool = False,
    ) -> None:
        """Buffer encoded rows (validated by the caller) and fire triggers.

        ``targets`` are raw labels, all checked by :meth:`check_labels` before any row is
        buffered (``labels_checked=True``: the caller already did).
        ``positions`` gives, per record, ``(source partition, next offset)``; the
        position reached by the records merged into a round is committed with it. Rows are
        copied. Triggers fire at the same record counts whatever the batching, so
        ``learn_many`` equals a ``learn_one`` loop.
        """
        rows = np.array(rows, dtype=float, ndmin=2, copy=True)
        labels = (np.asarray(targets, dtype=float).reshape(-1) if labels_checked
                  else self.check_labels(targets))
        if rows.shape != (len(labels), self.schema.n_features):
            raise ValueError(
                f"rows must have shape ({len(labels)}, {self.schema.n_features}), got {rows.shape}"
            )
        for name, given in (("keys", keys), ("positions", positions)):
            if given is not None and len(given) != len(labels):
                raise ValueError(f"got {len(given)} {name} for {len(labels)} rows")
        self.counters["unknown_features"] += int(unknown_features)
        n = len(labels)
        if keys is None:
            uids = self._new_uids(n)
        else:
            get = self._keys.get
            found = [get(key) if type(key) is str else None for key in keys]
            if None in found:  # new or non-string keys: the slow path, in order
                found = [self._uid_for(key) if uid is None else uid
                         for key, uid in zip(keys, found, strict=True)]
            uids = np.array(found, dtype=np.int64)
        every, start = self.config.train_every, 0
        while start < n:
            # Up to the next trigger nothing can retire, so the chunk is buffered at once.
            stop = min(start + every - self._since_trigger, n)
            live = self._status[uids[start:stop]] != RETIRED
            self.counters["dropped"] += int(stop - start - live.sum())
            take = np.flatnonzero(live) + start
            self._pending_uids.extend(uids[take].tolist())
            self._pending_rows.append(rows[take])
            self._pending_targets.extend(labels[take].tolist())
            if positions is not None:
                self._pending_position.update(positions[start:stop])
            self._count_arrivals(stop - start)
            start = stop

    def _count_arrivals(self, n: int) -> None:
        """Count ``n`` arrived records (buffered or dropped) and fire the trigger they reach
        (callers never pass a trigger boundary inside ``n``)."""
        self._since_trigger += n
        if self._since_trigger >= self.config.train_every:
            self._since_trigger = 0
            self.train(self.config.trees_per_trigger)

    def add_one(
        self,
        row: np.ndarray,
        target: Any,
        key: Any = None,
        position: tuple[str, int] | None = None,
        unknown_features: int = 0,
    ) -> None:
        """:meth:`add` for one encoded row (the ``learn_one`` path, no batch overhead)."""
        label = self.check_label(target)
        if len(row) != self.schema.n_features:
            raise ValueError(f"row must have {self.schema.n_features} values, got {len(row)}")
        self.counters["unknown_features"] += unknown_features
        uid = self._uid_for(key)
        if position is not None:
            self._pending_position[position[0]] = position[1]
        if self._status[uid] == RETIRED:
            self.counters["dropped"] += 1
        else:
            self._pending_uids.append(uid)
            self._pending_rows.append(np.array(row, dtype=float, ndmin=2))
            self._pending_targets.append(label)
        self._count_arrivals(1)

    def _merge_pending(self) -> None:
        """Move pending records into the pool (upserts replace rows, keep spent).

        The merge is applied at once and committed with the next output; until then nothing
        visible depends on it, and after a crash the source re-reads these records.
        """
        self._merged_position.update(self._pending_position)
        self._pending_position = {}
        if not self._pending_uids:
            return
        uids = np.asarray(self._pending_uids, dtype=np.int64)
        X = np.vstack(self._pending_rows)
        y = self.booster.loss.scale(np.asarray(self._pending_targets, dtype=float))
        self._pending_uids, self._pending_rows, self._pending_targets = [], [], []
        # Last write wins within the buffer, arrival order kept.
        _, first_rev = np.unique(uids[::-1], return_index=True)
        last = np.sort(uids.size - 1 - first_rev)
        self.counters["superseded"] += int(uids.size - last.size)
        uids, X, y = uids[last], X[last], y[last]
        live = self._status[uids] != RETIRED
        self.counters["dropped"] += int((~live).sum())
        self.counters["upserts"] += int((self._slot[uids[live]] >= 0).sum())
        if live.any():
            event = MergeEvent(uids[live], X[live], y[live], self._predict(X[live]))
            self._apply_merge(event)
            self._pending_events.append(event)

    def _apply_merge(self, event: MergeEvent) -> None:
        slots = self._slot[event.uids]
        upsert = slots >= 0
        pool = self.pool
        if upsert.any():
            pool.X[slots[upsert]] = event.X[upsert]
            pool.target[slots[upsert]] = event.target[upsert]
            pool.margin[slots[upsert]] = event.margin[upsert]
        new = ~upsert
        n_old, n_new = len(pool), int(new.sum())
        if n_new:
            self.pool = RecordPool(
                X=np.concatenate([pool.X, event.X[new]]),
                target=np.concatenate([pool.target, event.target[new]]),
                margin=np.concatenate([pool.margin, event.margin[new]]),
                spent=np.concatenate([pool.spent, np.zeros(n_new)]),
                retired=np.concatenate([pool.retired, np.zeros(n_new, dtype=bool)]),
            )
            self.pool_uids = np.concatenate([self.pool_uids, event.uids[new]])
            self._slot[event.uids[new]] = np.arange(n_old, n_old + n_new)
            self._status[event.uids[new]] = ACTIVE

    # ------------------------------------------------------------------ training
    def train(self, rounds: int = 1) -> int:
        """Merge pending records and run up to ``rounds`` rounds; returns the trees added.

        The initial score is released first if it has not been (and enough records are
        present). A round in which no record is eligible releases nothing.
        """
        self._merge_pending()
        if not self._initialized:
            if len(self.pool) < self.config.warmup:
                return 0
            self._release_initial_score()
        added = 0
        for _ in range(rounds):
            if len(self.pool) == 0 or not self._round():
                break
            added += 1
        return added

    def flush(self) -> None:
        """Merge pending records and commit them with their source position, releasing
        nothing (a clean shutdown: a restart then re-reads no event)."""
        self._merge_pending()
        if self._pending_events or self._merged_position != self.offsets:
            self._commit(None, self.pool)

    def _release_initial_score(self) -> None:
        score, _ = self.booster.initial_score(self.pool)
        cal = self.booster.calibration
        charge = cal.init_charge if cal is not None and cal.init_sigma is not None else 0.0
        event = InitEvent(score, charge)
        after = self._init_state(event)
        self._commit(event, after)
        self._install(event, after)
        self._notify(event)

    def _init_state(self, event: InitEvent) -> RecordPool:
        pool = self.pool
        return RecordPool(pool.X, pool.target, pool.margin + event.score,
                          pool.spent + event.charge, pool.retired)

    def _round(self) -> bool:
        booster = self.booster
        cap = self.config.params.max_rounds
        if cap is not None and booster.rounds_done >= cap:
            return False
        outcome = booster.plan_round(self.pool)
        if outcome.n_eligible == 0:
            return False
        max_trees = self.config.max_trees
        dropped = 0 if max_trees is None else max(0, self.ensemble.n_trees + 1 - max_trees)
        event = RoundEvent(booster.rounds_done, outcome.features, outcome.thresholds,
                           outcome.leaves, outcome.codes, dropped)
        after = self._round_state(event, outcome)
        self._commit(event, after)
        self._install(event, after)
        self._notify(event)
        return True

    def _notify(self, event: InitEvent | RoundEvent) -> None:
        if self._deferred is not None:
            self._deferred_outputs.append(event)
            return
        for listener in self.listeners:
            listener(event)

    def skip(self, position: tuple[str, int]) -> None:
        """Advance the source position past a record that was not buffered (dead-lettered)."""
        self._pending_position[position[0]] = position[1]

    def _round_state(self, event: RoundEvent, outcome: RoundOutcome) -> RecordPool:
        """The pool after a round (pure); dropped trees leave the cached margins."""
        after = self.booster.advance(self.pool, outcome)
        if event.dropped:
            after.margin -= self.ensemble.leaf_sum(self.pool.X, slice(0, event.dropped))
        return after

    def _commit(self, event: InitEvent | RoundEvent | None, after: RecordPool) -> None:
        """Make the output and the merges before it durable (before anything is visible)."""
        retired = after.retired
        keep = ~retired
        rounds_done = self.booster.rounds_done + isinstance(event, RoundEvent)
        n_trees = self.ensemble.n_trees
        if isinstance(event, RoundEvent):
            n_trees += 1 - event.dropped
        change = Commit(
            events=[*self._pending_events, *([event] if event is not None else [])],
            meta={"state": self._state_meta(rounds_done, event)},
            after=PoolState(*_kept(keep, self.pool_uids, after.X, after.target, after.margin,
                                   after.spent)),
            new_keys=list(self._uncommitted_keys),
            retired=(self.pool_uids[retired], after.spent[retired]) if retired.any() else None,
            first_kept_round=rounds_done - n_trees,
        )
        self._pending_events, self._uncommitted_keys = [], []
        if self._deferred is not None:
            self._deferred.append(change)
            return
        self.store.commit(change)
        self.offsets = dict(self._merged_position)

    @contextmanager
    def group_commit(self) -> Iterator[None]:
        """Commit every output of the block in one transaction at its end (then notify).

        Rounds inside still run one after the other on the in-memory state, but nothing is
        published and :meth:`predict_margin` refuses to answer until the group is durable,
        so invariant 2 holds with one disk sync per block instead of one per round. A crash
        inside the block loses the whole group, and the source re-reads its records.
        """
        if self._deferred is not None:
            yield
            return
        self._deferred, self._deferred_outputs = [], []
        try:
            yield
            if self._deferred:
                self.store.commit(self._deferred)
                self.offsets = dict(self._merged_position)
        finally:
            outputs, self._deferred = self._deferred_outputs, None
            self._deferred_outputs = []
        for event in outputs:
            self._notify(event)

    def _install(self, event: InitEvent | RoundEvent, after: RecordPool) -> None:
        """Make a committed output visible and compact the pool (retired keys leave)."""
        if isinstance(event, InitEvent):
            self.ensemble.init_score = event.score
            self._initialized = True
        else:
            self.ensemble.append(event.features, event.thresholds, event.leaves)
            self.booster.rounds_done += 1
            if event.dropped:
                self.ensemble.keep_last(self.ensemble.n_trees - event.dropped)
        retired = after.retired
        keep = ~retired
        retired_uids = self.pool_uids[retired]
        self._slot[retired_uids] = -1
        self._status[retired_uids] = RETIRED
        self._ledger_spent[retired_uids] = after.spent[retired]
        uids, X, target, margin, spent = _kept(keep, self.pool_uids, after.X, after.target,
                                               after.margin, after.spent)
        self.pool = RecordPool(X, target, margin, spent, np.zeros(uids.size, dtype=bool))
        self.pool_uids = uids
        self._slot[self.pool_uids] = np.arange(self.pool_uids.size)

    def _state_meta(self, rounds_done: int, event: InitEvent | RoundEvent | None
                    ) -> dict[str, Any]:
        """The state as it will be once ``event`` is installed."""
        init = isinstance(event, InitEvent)
        return {
            "n_features": self.schema.n_features,
            "depth": self.config.params.depth,
            "rounds_done": rounds_done,
            "next_uid": self._next_uid,
            "counters": dict(self.counters),
            "offsets": self._merged_position,
            "init_score": event.score if init else self.ensemble.init_score,
            "initialized": self._initialized or init,
            "rng": self.booster.noise.get_state(),
        }

    def _restore(self, snap: Snapshot) -> None:
        """Load the last snapshot and replay the committed events after it."""
        meta = snap.meta
        if snap.charge_grid is not None and self.booster.filter is not None:
            self.booster.filter.use_grid(snap.charge_grid)
        self.counters.update(meta["counters"])
        self.booster.noise.set_state(meta["rng"])
        self._keys = dict(snap.keys)
        self._new_uids(int(meta["next_uid"]))  # grow the by-uid arrays
        self._status[snap.retired_uids] = RETIRED
        self._ledger_spent[snap.retired_uids] = snap.retired_spent
        pool = snap.pool
        self.pool = RecordPool(pool.X, pool.target, pool.margin, pool.spent,
                               np.zeros(pool.uids.size, dtype=bool))
        self.pool_uids = pool.uids
        self._status[pool.uids] = ACTIVE
        self._slot[pool.uids] = np.arange(pool.uids.size)
        # The model as of the snapshot: the stored trees before the first replayed round.
        first_replayed = next((e.round for e in snap.events if isinstance(e, RoundEvent)),
                              int(meta["rounds_done"]))
        ens = self.ensemble
        for round_ in sorted(r for r in snap.trees if r < first_replayed):
            ens.append(*snap.trees[round_])
        self.booster.rounds_done = first_replayed
        ens.init_score = float(meta.get("init_score", 0.0))
        self._initialized = bool(meta.get("initialized", False))
        for event in snap.events:
            if isinstance(event, MergeEvent):
                self._apply_merge(event)
            elif isinstance(event, InitEvent):
                self._install(event, self._init_state(event))
            else:
                outcome = self.booster.replay_outcome(self.pool, event.features,
                                                      event.thresholds, event.leaves, event.codes)
                self._install(event, self._round_state(event, outcome))
        self.offsets = dict(meta["offsets"] or {})
        self._merged_position = dict(self.offsets)

    # ------------------------------------------------------------------ prediction
    def predict_margin(self, X: np.ndarray) -> np.ndarray:
        """The committed model's margin for encoded rows (never an uncommitted tree)."""
        if self._deferred:
            raise RuntimeError("predictions wait until the group commit is durable")
        return self._predict(X)

    def _predict(self, X: np.ndarray) -> np.ndarray:
        return self.ensemble.predict_margin(X)

    # ------------------------------------------------------------------ reporting
    def budget_of(self, key: Any) -> KeyBudget:
        """Spent RDP and status of a user-given key."""
        name = key.decode("utf-8", "backslashreplace") if isinstance(key, bytes) else str(key)
        cal = self.booster.calibration
        budget = cal.budget_rdp if cal else None
        uid = self._keys.get(name)
        if uid is None:
            return KeyBudget(key=name, status="unknown", spent_rdp=0.0, budget_rdp=budget)
        status = int(self._status[uid])
        if status == ACTIVE:
            spent = float(self.pool.spent[self._slot[uid]])
        elif status == RETIRED:
            spent = float(self._ledger_spent[uid])
        else:
            spent = 0.0
        return KeyBudget(key=name, status=KEY_STATUS[status], spent_rdp=spent, budget_rdp=budget)

    def spent_rdp(self) -> np.ndarray:
        """Spent RDP of every key that ever trained: the active pool, then the retired."""
        retired = self._status[: self._next_uid] == RETIRED
        return np.concatenate([self.pool.spent, self._ledger_spent[: self._next_uid][retired]])

    def privacy_report(self) -> PrivacyReport:
        cal = self.booster.calibration
        spent = self.spent_rdp()
        quantiles: dict[str, float] = {}
        if cal is not None and spent.size:
            levels = (0.5, 0.9, 0.99, 1.0)
            values = np.quantile(spent, levels) / cal.budget_rdp  # one partition for all four
            quantiles = {f"q{int(q * 100)}": float(v) for q, v in zip(levels, values, strict=True)}
        return PrivacyReport(
            private=cal is not None,
            epsilon=cal.epsilon if cal else math.inf,
            delta=cal.delta if cal else None,
            order=cal.order if cal else None,
            sigma=cal.sigma if cal else None,
            budget_rdp=cal.budget_rdp if cal else None,
            max_spent_rdp=float(spent.max()) if spent.size else 0.0,
            spent_fraction_quantiles=quantiles,
            n_trees=self.ensemble.n_trees,
            rounds_done=self.booster.rounds_done,
            n_active=len(self.pool),
            n_retired=int(spent.size - len(self.pool)),
            n_dropped=self.counters["dropped"],
            n_pending=self.n_pending,
            n_unknown_features=self.counters["unknown_features"],
            seeded_for_testing=self.booster.noise.seeded,
        )

    def close(self) -> None:
        self.store.close()


def _kept(keep: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
    """The rows of ``arrays`` that ``keep`` selects; the arrays themselves when it keeps all
    (most rounds retire nobody, and copying the pool's features every round is the cost)."""
    if keep.all():
        return list(arrays)
    return [a[keep] for a in arrays]
