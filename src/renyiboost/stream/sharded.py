"""Key-sharded training: one coordinator, several shards, one global model.

S-GBDT needs the records of a round only through the per-leaf sums of its sample (Kirschte
et al., Sec. IX, Alg. 9: one aggregation per tree), so a round splits into

* the **coordinator**: the public schedule (from the total of the shards' positions), the
  round's noise stage and leaf depth, the random tree (public randomness), the noise added
  once to the summed leaf sums, and the model;
* the **shards**: each a :class:`~renyiboost.stream.engine.StreamEngine` in ``coordinated``
  mode holding the pool, ledger, keys and source offsets of its keys, in its own state
  store; per round it charges its active records, draws its own Poisson sample and returns
  its exact leaf sums (:meth:`~renyiboost.stream.engine.StreamEngine.shard_sums`).

A key lives on exactly one shard (:func:`shard_of`, a hash of its normalised name, for
records handed to :meth:`ShardedEngine.add`; the Kafka partition its message key chose,
for shards that read their own partitions), so it has one ledger. Stores fed one way refuse
the other (the two would place a key on different shards). Changing the number of shards or
the partition map moves ledgers: :mod:`renyiboost.stream.reshard`.

**The shard interface** is :class:`ShardWorker` (one shard's engine, store and optional
source) behind a :class:`ShardGroup`, which calls a method on one shard or on all of them:
:class:`LocalShards` in this process, :class:`~renyiboost.stream.ray_shards.RayShards` as
Ray actors on a cluster (the ``ray`` extra; nothing here imports Ray). A group raises
:class:`ShardUnavailable` when a shard died; the coordinator then aborts the round (nothing
is released; what shards committed stays spent), waits for the shard to come back, and
reconciles.

**Durable before visible** (invariant 4), per round:

1. every shard commits its merged records before it computes its sums (one call,
   :meth:`ShardWorker.round_sums`), so a shard can always recompute its charges of a round
   from its committed state and the round's tree: a round's charges are a function of both
   (the store's event sourcing);
2. the coordinator adds the noise once and hands the released tree to every shard, which
   commits its charges, retirements and the tree in one transaction and answers once it is
   durable (:meth:`ShardWorker.commit_round`);
3. only when every shard's commit returned does the tree join the coordinator's model.

Two calls to every shard a round: on a cluster each costs a round trip plus a per-shard
cost at the coordinator, which is what limits the number of shards (``benchmarks/
sharded_bench.py`` measures both).

A crash between two shards' commits leaves the shards at different rounds. Opening the
engine again **reconciles** them: a shard behind replays the missing rounds from the tree
another shard committed, computing its charges from its committed state exactly as the
round did (:meth:`~renyiboost.stream.engine.StreamEngine.replay_released`) — never a round
whose sums included records it does not hold, because step 1 committed them first. A crash
before any shard committed the round loses it: it was never visible.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from renyiboost.exceptions import (
    LedgerConflict,
    RenyiboostError,
    ShardUnavailable,
    StateStoreError,
    StoreNotFound,
)
from renyiboost.models.booster import LeafSums, ReleasedTree, SGBDTBooster
from renyiboost.models.grid import QuantileMap
from renyiboost.models.recalibration import (
    RecalibrationState,
    opening_window,
    opens,
    refit,
)
from renyiboost.models.trees import Ensemble
from renyiboost.release import ModelRelease, PrivacyGuarantee
from renyiboost.stream.engine import (
    FINISH_META,
    AnnouncesOutputs,
    EngineConfig,
    KeyBudget,
    OwesRounds,
    StreamEngine,
    check_call,
    end_grid_charge,
    finish_burst,
    hinted_grid_charge,
    leaf_depth_at,
    learning_call,
    model_release,
    noise_stage_at,
    note_one_over_delta,
    privacy_guarantee_of,
    recalibration_due,
    record_end,
    refit_versions,
    refuse_seeding_production,
    renew_locks_after_fork,
    rounds_left,
    rounds_owed,
    run_rounds,
    trees_due,
    trigger_schedule,
    warn_finished_early,
)
from renyiboost.stream.postgres import without_password
from renyiboost.stream.store import (
    KEY_ROUTING_META,
    SEEDED_META,
    GridEvent,
    StateStore,
    StoreIdentity,
    is_postgres_location,
    pin_meta,
    store_at,
)
from renyiboost.validation import (
    RecordValidator,
    normalise_key,
    normalise_keys,
    rows_not_learned,
    vector,
)


def shard_of(key: Any, n_shards: int) -> int:
    """The shard that owns ``key``: CRC-32 of its normalised name, modulo ``n_shards``
    (stable across processes and versions, unlike Python's salted ``hash``)."""
    return zlib.crc32(normalise_key(key).encode()) % n_shards


def shard_locations(state: str, n_shards: int, *, alone: bool = True) -> list[str]:
    """Where the shards of a deployment keep their stores: ``DIR`` (a directory) gives one
    SQLite file per shard, ``DIR/shard-K-of-N.db``; a ``postgresql://…[?schema=S]`` URL one
    schema per shard, ``S_shard_K_of_N`` (``renyiboost`` when no schema is named).

    A directory that also holds the stores of another number of shards is refused unless
    ``alone`` is false (``renyiboost reshard``, which moves them away when it is done)."""
    if is_postgres_location(state):
        from renyiboost.stream.postgres import split_url, stores_in

        base, schema = split_url(state)
        join = "&" if "?" in base else "?"
        if alone:  # a deployment of another size beside it: refused, as for a directory
            shapes = (re.fullmatch(rf"{re.escape(schema)}_shard_\d+_of_(\d+)", name)
                      for name in stores_in(state, f"{schema}_shard_", live=True))
            _refuse_other_counts(state, {m.group(1) for m in shapes if m}, n_shards)
        return [f"{base}{join}schema={schema}_shard_{k}_of_{n_shards}" for k in range(n_shards)]
    directory = Path(state)
    if directory.exists() and not directory.is_dir():
        raise StoreNotFound(f"{directory} is a file: a sharded deployment keeps its stores "
                            "in a directory, one a shard (a single store needs no --shards)")
    if alone:
        _refuse_other_counts(str(directory), {
            path.name.rsplit("-of-", 1)[1].removesuffix(".db")
            for path in directory.glob("shard-*-of-*.db")}, n_shards)
    return [str(directory / f"shard-{k}-of-{n_shards}.db") for k in range(n_shards)]


def _refuse_other_counts(state: str, counts: set[str], n_shards: int) -> None:
    """Refuse a deployment of ``n_shards`` where stores of other shard ``counts`` are (a
    second deployment of the same keys would give each a second ledger; PostgreSQL schemas
    were once not checked at all)."""
    others = sorted(counts - {str(n_shards)})
    if others:
        raise LedgerConflict(
            f"{without_password(state)} holds the stores of a deployment of "
            f"{' and '.join(others)} shards, not {n_shards}: changing the number of shards "
            "needs `renyiboost reshard`, which moves the affected ledgers")


def _store_present(location: str) -> bool:
    """Whether a state store is at ``location``, or its record (``.epoch``) of one that
    was there (read without opening it): a lost store whose record survived refuses to be
    created again, so it counts as present here, before any other store is created."""
    if is_postgres_location(location):
        from renyiboost.stream.postgres import split_url, stores_in

        schema = split_url(location)[1]
        return schema in stores_in(location, schema)
    return any(Path(f"{location}{suffix}").exists() for suffix in ("", "-wal")) or Path(
        f"{os.path.realpath(location)}.epoch").exists()


def default_partition_map(counts: dict[str, int], n_shards: int) -> dict[str, list[int]]:
    """Partition ``p`` of every topic to shard ``p mod n_shards`` (``counts``: partitions of
    each topic). Every shard gets whole partitions; a key's message key picks its partition,
    so a key lives on one shard.

    >>> default_partition_map({"events": 4}, 3)
    {'events': [0, 1, 2, 0]}
    """
    short = {topic: count for topic, count in counts.items() if count < n_shards}
    if short:
        raise RenyiboostError(f"the topics {short} have fewer partitions than the {n_shards} "
                              "shards: a shard without a partition would idle")
    mapping = {topic: [p % n_shards for p in range(count)] for topic, count in counts.items()}
    check_one_shard_a_key(mapping)
    return mapping


#: The longest cycle of key hashes :func:`check_one_shard_a_key` walks through.
MAP_CHECK_PERIOD = 1_000_000


def check_one_shard_a_key(mapping: dict[str, list[int]]) -> None:
    """Refuse a partition → shard map under which one key can reach two shards
    (:class:`~renyiboost.exceptions.LedgerConflict`). A producer puts a key in partition
    ``h mod P`` of a topic of ``P`` partitions, ``h`` the hash of its message key, so with
    several topics its shard ``map[t][h mod P_t]`` must be the same in every topic for every
    ``h``: it depends on ``h`` only modulo the least common multiple of the partition
    counts, which is walked through. Topics of 2 and 3 partitions on 2 shards (``p mod 2``)
    sent 12 of 20 keys to both shards, each with a budget of its own; a number of shards
    that divides every topic's partition count is safe.

    >>> check_one_shard_a_key({"a": [0, 1, 0, 1], "b": [0, 1]})
    >>> check_one_shard_a_key({"a": [0, 1], "b": [0, 1, 0]})
    Traceback (most recent call last):
    ...
    renyiboost.exceptions.LedgerConflict: the partition map {'a': [0, 1], 'b': [0, 1, 0]} ...
    """
    if len(mapping) < 2:
        return  # one topic: a key has one partition, so one shard
    counts = [len(shards) for shards in mapping.values()]
    period = math.lcm(*counts)
    if period > MAP_CHECK_PERIOD:
        raise LedgerConflict(
            f"cannot check that the partition map keeps each key on one shard: its topics' "
            f"partition counts {counts} repeat only every {period:,} key hashes. Give every "
            "event topic a number of partitions that the number of shards divides.")
    hashes = np.arange(period)
    owners = np.stack([np.asarray(shards)[hashes % len(shards)]
                       for shards in mapping.values()])
    split = np.flatnonzero((owners != owners[0]).any(axis=0))
    if split.size:
        h = int(split[0])
        where = ", ".join(f"shard {int(owners[i, h])} from {topic!r}"
                          for i, topic in enumerate(mapping))
        raise LedgerConflict(
            f"the partition map {mapping} sends one key to several shards, each with a budget "
            f"of its own: a key whose hash is {h} modulo {period} goes to {where}. With "
            "several event topics, give every topic a number of partitions that the number "
            "of shards divides (each key then has one shard in all of them).")


#: Store meta naming the ids of all the stores of a deployment, in shard order.
MEMBERS_META = "deployment_stores"


def create_shard_stores(config: EngineConfig, locations: Sequence[str]) -> list[StoreIdentity]:
    """Create the stores of a new deployment (each refused if it exists) and pin the
    configuration, calibration and place in the shard map in each: ``renyiboost state init
    --shards N``. All are checked absent first: a refusal at the second once left a new
    first behind, which a deployment whose first store was lost then opened with fresh
    budgets for its keys."""
    present = [location for location in locations if _store_present(location)]
    if present:
        raise LedgerConflict(
            f"state stores already exist at {', '.join(map(without_password, present))}; a "
            "deployment's stores are created together or not at all (a new store beside old "
            "ones would restart its keys' budgets). Open them instead, or choose a new "
            "location.")
    identities = []
    for k, location in enumerate(locations):
        # each records its place now: unmarked, an open without its deployment claimed it
        # as a single store (a second ledger of its keys, and the deployment refused)
        place = {"shard_map": {"shard": k, "of": len(locations)}}
        engine = StreamEngine(config, store=store_at(location, create=True, meta=place),
                              coordinated=True)
        identities.append(engine.store.identity)
        engine.close()
    return identities


class ShardState(NamedTuple):
    """What a coordinator needs to know of a shard to schedule and reconcile rounds."""

    rounds_done: int
    initialized: bool
    positions: int
    n_active: int


class ShardSource(Protocol):
    """A shard's own event source (e.g. the Kafka partitions it is assigned)."""

    def poll_once(self, max_messages: int | None = None,
                  timeout: float | None = None) -> int: ...
    def telemetry(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


class ShardWorker:
    """One shard: a coordinated :class:`StreamEngine` over its own store, at its fixed place
    ``k`` of ``n`` in the shard map, and optionally its own source.

    Everything a coordinator calls is a method here, with picklable arguments and results,
    so the worker runs in this process (:class:`LocalShards`) or as a remote actor alike.
    ``source`` builds the shard's source from its engine (a picklable callable, such as
    :meth:`~renyiboost.connectors.kafka.KafkaTrainer.for_shard` with its settings bound).
    """

    def __init__(self, config: EngineConfig, store: StateStore | str | None, k: int, n: int,
                 seed: int | None = None,
                 source: Callable[[StreamEngine, int, int], ShardSource] | None = None) -> None:
        self.engine = StreamEngine(config, store=store, coordinated=True, seed=seed)
        self.source: ShardSource | None = None
        try:
            self._claim_place(k, n)
            if source is not None:
                self.source = source(self.engine, k, n)
        except BaseException:
            self.engine.close()
            raise

    def _claim_place(self, k: int, n: int) -> None:
        """The store records its place in the shard map at the first open; a store in
        another place (reordered, or from another deployment) is refused, and so is a store
        that already holds a ledger but no place (written by a single engine before it
        recorded one): its keys' ledgers are not split as this deployment's are."""
        store, engine = self.engine.store, self.engine
        if n > 1 and store.get_meta("shard_map") is None and (
                engine.positions or engine.release_version):
            raise LedgerConflict(
                f"the store {store!r} holds a ledger ({engine.positions} positions) but no "
                f"place in a shard map, so it cannot join {n} shards as shard {k}: its keys' "
                "ledgers are not split as this deployment's. Changing the number of shards "
                "needs `renyiboost reshard`, which moves the affected ledgers.")
        pin_meta(store, "shard_map", {"shard": k, "of": n}, lambda stored: (
            f"the store {store!r} holds shard {stored['shard']} of {stored['of']}, not "
            f"shard {k} of {n}: its keys' ledgers belong there. Open the stores in their "
            "original order; changing the number of shards needs `renyiboost reshard`, "
            "which moves the affected ledgers."))

    # ------------------------------------------------------------------ state
    def state(self) -> ShardState:
        engine = self.engine
        return ShardState(engine.rounds_done, engine.initialized, engine.positions,
                          engine.n_active)

    def identity(self) -> StoreIdentity:
        return self.engine.store.identity

    def ensemble(self) -> Ensemble:
        """A copy of the committed model (the coordinator's own, never the engine's)."""
        return self.engine.ensemble  # a copy already

    def get_meta(self, name: str) -> Any:
        return self.engine.store.get_meta(name)

    def set_meta(self, name: str, value: Any) -> None:
        self.engine.store.set_meta(name, value)


    # ------------------------------------------------------------------ records
    def add(self, rows: np.ndarray, targets: np.ndarray, keys: list[Any] | None,
            n_events: int | None = None, event_index: np.ndarray | None = None) -> int:
        self.engine.add(rows, targets, keys, event_index=event_index, n_events=n_events,
                        labels_checked=True)
        return self.engine.positions

    def poll(self, max_messages: int | None = None, timeout: float | None = None) -> int:
        """One bounded batch (at most ``max_messages``, waiting at most ``timeout``
        seconds) from the shard's source; returns the shard's positions."""
        if self.source is None:
            raise RuntimeError("this shard has no source of its own")
        if max_messages is None or max_messages >= 1:  # 0: this shard reads nothing now
            self.source.poll_once(max_messages, timeout)
        return self.engine.positions

    # ------------------------------------------------------------------ rounds
    def flush(self) -> None:
        self.engine.flush()

    def initial_sum(self) -> float:
        return self.engine.initial_sum()

    def install_initial(self, score: float) -> None:
        self.engine.install_initial(score)

    def round_sums(self, features: np.ndarray, thresholds: np.ndarray, levels: int | None,
                   stage: int | None) -> LeafSums:
        """Steps 1 and 2 of a round in one call: commit the merged records, then this
        pool's exact sums (so a shard's sums never leave before the state they come from
        is durable)."""
        self.engine.flush()
        return self.engine.shard_sums(features, thresholds, levels, stage)

    def grid_counts(self, charge: float) -> np.ndarray:
        """Step 1 of the split grid: commit the merged records, then this pool's exact
        histograms of the records that afford ``charge``."""
        self.engine.flush()
        return self.engine.grid_counts(charge)

    def commit_grid(self, event: GridEvent) -> None:
        """Step 2: commit the released grid with its charges, durably."""
        self.engine.install_grid(event)
        self.engine.wait_durable()

    def released_grid(self) -> GridEvent | None:
        return self.engine.released_grid

    def open_recalibration(self, window: int) -> None:
        self.engine.open_recalibration(window)

    def recalibration_sums(self) -> np.ndarray:
        """Step 1 of a refit: commit the merged records (their keys' charges), then this
        pool's exact sums of the open window."""
        return self.engine.recalibration_sums()

    def commit_recalibration(self, state: RecalibrationState) -> None:
        """Step 2: commit the refitted map (this window's sums spent), durably."""
        self.engine.install_recalibration(state)

    def recalibration_state(self) -> RecalibrationState:
        return self.engine.recalibration

    def commit_round(self, tree: ReleasedTree, stage: int | None) -> None:
        """Commit the released round and return once the commit is durable."""
        self.engine.install_released(tree, stage)
        self.engine.wait_durable()

    def replay_released(self, features: np.ndarray, thresholds: np.ndarray,
                        leaves: np.ndarray, stage: int | None) -> None:
        self.engine.replay_released(features, thresholds, leaves, stage)

    def wait_durable(self) -> None:
        self.engine.wait_durable()

    # ------------------------------------------------------------------ operator telemetry
    def spent_rdp(self) -> np.ndarray:
        return self.engine.spent_rdp()

    def operator_budget_of(self, key: Any) -> KeyBudget:
        return self.engine.operator_budget_of(key)

    def telemetry(self) -> dict[str, Any]:
        """The shard's operator telemetry (and its source's, without the engine twice)."""
        status = {"engine": self.engine.operator_telemetry().model_dump()}
        if self.source is not None:
            status.update({k: v for k, v in self.source.telemetry().items() if k != "engine"})
        return status

    def close(self) -> None:
        try:
            if self.source is not None:
                self.source.close()
                self.engine.flush()  # what was read: committed with its offsets
        finally:
            self.engine.close()


class ShardGroup(Protocol):
    """How a coordinator reaches its shards: a method of one :class:`ShardWorker`, or of
    all of them at once (in parallel where the group can). A shard that died raises
    :class:`ShardUnavailable`."""

    n: int

    def all(self, method: str, *args: Any) -> list[Any]: ...
    def one(self, k: int, method: str, *args: Any) -> Any: ...
    def each(self, method: str, args: Sequence[tuple[Any, ...]]) -> list[Any]: ...
    def wait_available(self, timeout: float) -> None: ...
    def close(self) -> None: ...


class LocalShards:
    """Shards in this process (tests, one machine without Ray)."""

    def __init__(self, workers: Sequence[ShardWorker]) -> None:
        self.workers = list(workers)
        self.n = len(self.workers)

    @classmethod
    def open(cls, config: EngineConfig, stores: Sequence[StateStore | str | None],
             seed: int | None = None,
             source: Callable[[StreamEngine, int, int], ShardSource] | None = None,
             ) -> LocalShards:
        workers: list[ShardWorker] = []
        try:
            for k, store in enumerate(stores):
                workers.append(ShardWorker(config, store, k, len(stores),
                                           None if seed is None else seed + 1 + k, source))
        except BaseException:
            for worker in workers:
                worker.close()
            raise
        return cls(workers)

    def all(self, method: str, *args: Any) -> list[Any]:
        return [getattr(worker, method)(*args) for worker in self.workers]

    def one(self, k: int, method: str, *args: Any) -> Any:
        return getattr(self.workers[k], method)(*args)

    def each(self, method: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        return [getattr(worker, method)(*a) for worker, a in zip(self.workers, args,
                                                                 strict=True)]

    def wait_available(self, timeout: float) -> None:
        return None

    def close(self) -> None:
        errors = []
        for worker in self.workers:
            try:
                worker.close()
            except Exception as error:  # noqa: BLE001 - close every shard, then report
                errors.append(error)
        if errors:
            raise errors[0]


class ShardedEngine(OwesRounds, AnnouncesOutputs):
    """A coordinator over key shards, each with its own state store; one global model.

    Parameters
    ----------
    config
        As for :class:`~renyiboost.stream.engine.StreamEngine`; every shard gets the same
        (its store pins it).
    shards
        One store (or location, or ``None`` for memory) per shard, opened here in this
        process; or a :class:`ShardGroup` (e.g. :class:`~renyiboost.stream.ray_shards.
        RayShards`). Their order is the shard map and must stay the same for the life of
        the deployment.
    seed
        ``None`` (default): CSPRNG noise. An integer seeds the coordinator (trees and leaf
        noise, as a single engine with that seed) and each shard's Poisson draws (testing
        only).
    recover_timeout
        Seconds to wait for a shard that died to come back (a restarted actor) before the
        coordinator gives up with :class:`ShardUnavailable`.
    """

    def __init__(self, config: EngineConfig, shards: ShardGroup | Sequence[StateStore | str | None],
                 seed: int | None = None, recover_timeout: float = 120.0) -> None:
        self.config = config
        if config.public_schema.n_outputs > 1:
            raise ValueError("a multiclass model trains on one engine: the sharded initial "
                             "score sums one label a record, not a class histogram "
                             "(not built yet)")
        opened_here = isinstance(shards, Sequence)
        if not opened_here:
            self.shards: ShardGroup = shards
        elif len(shards) < 1:
            raise ValueError("a sharded engine needs at least one store")
        else:
            self.shards = LocalShards.open(config, shards, seed)
        self.recover_timeout = recover_timeout
        self.validator = RecordValidator(config.public_schema, config.params.task)
        self.booster = SGBDTBooster(config.params, config.public_schema, seed, stage_rounds=tuple(
            stage.rounds for stage in config.noise_stages))
        self.schedule = trigger_schedule(config)
        self.aborted_rounds = 0
        #: The error after which a shard's commit may have failed while others landed: the
        #: shards may be a round apart, so nothing more runs until a restart reconciles them.
        self._broken: BaseException | None = None
        self._keyless = 0
        self._hash_routing_checked = False  # :meth:`_check_hash_routing` found no conflict
        self._flowing = False  # the last poll found events
        self._stale = False  # a call to the shards failed: their positions are read again
        self._empty_steps = 0  # polls in a row that found nothing
        self._turn = 0  # the first shard to read one more than the others, in rotation
        #: The split grid the shards committed (:meth:`_reconcile_grid`), if any.
        self.released_grid: GridEvent | None = None
        #: Called after every version that became durable on all shards (e.g. to publish it).
        self.listeners: list[Callable[[int], None]] = []
        #: Held while an output becomes the model (its trees, version, grid and answer map
        #: change in several steps) and by every public reader: a reader on another thread
        #: once got a torn release, a tree's splits paired with another round's leaves, that
        #: validated and would have been published (review S, 29 November). Listeners run
        #: outside it.
        self._view_lock = threading.RLock()
        self._announced = 0  # the last version the listeners were told of
        #: Rows were given to :meth:`add` (no source of their own re-reads what a dead
        #: shard had not committed: :meth:`recover` says so).
        self._fed_by_add = False
        #: The positions each shard holds as far as this coordinator knows (its last answer,
        #: or the reconciliation's count): a recovery compares them shard by shard, since a
        #: total can hide one shard's loss behind another's new rows.
        self._held: list[int] = [0] * self.shards.n
        renew_locks_after_fork(self)  # a forked child gets a fresh lock (review D5)
        try:
            self._reconcile()
            self.identity: StoreIdentity = self.shards.one(0, "identity")
        except BaseException:
            if opened_here:  # refused: the stores it opened are released now, not at exit
                with contextlib.suppress(Exception):
                    self.shards.close()
            raise

    # ------------------------------------------------------------------ opening
    def _reconcile(self) -> None:
        """Bring every shard to the furthest shard's round (see the module docstring). A
        shard is at most one round behind: a round starts only after every shard committed
        the one before. Readers wait for it (:attr:`_view_lock`)."""
        with self._view_lock:
            self._reconcile_shards()
        if self.release_version > self._announced:  # the version the replay completed
            self._released()

    def _reconcile_shards(self) -> None:
        self._pin_members()
        states: list[ShardState] = self.shards.all("state")
        # The furthest shard: most rounds, then initialised. Shards commit in parallel
        # (Ray), so before the first round one may hold the initial score and another not;
        # reading only the rounds could pick the one without and release a second score.
        lead = max(range(len(states)),
                   key=lambda k: (states[k].rounds_done, states[k].initialized))
        leader = states[lead]
        ens: Ensemble = self.shards.one(lead, "ensemble")
        if leader.initialized:
            for k, state in enumerate(states):
                if not state.initialized:
                    self.shards.one(k, "install_initial", ens.init_score)
        # The round's public positions: every shard committed its records before the round.
        positions = sum(state.positions for state in states)
        stage = noise_stage_at(self.config, positions)
        for k, state in enumerate(states):
            behind = leader.rounds_done - state.rounds_done
            if behind > 1:
                raise LedgerConflict(
                    f"shard {k} is {behind} rounds behind shard {lead}; shards of one "
                    "deployment are never more than one round apart, so these stores were "
                    "not written together")
            if behind == 1:
                last = ens.n_trees - 1
                self.shards.one(k, "replay_released", ens.features[last], ens.thresholds[last],
                                ens.leaves[last], stage)
        self._reconcile_grid()
        self._reconcile_recalibration(ens, positions, leader.initialized)
        # the coordinator draws the noise, the shards' stores remember it: a seeded
        # coordinator marks them all (shards opened without a seed would not have)
        seeded_before = any(self.shards.all("get_meta", SEEDED_META))
        if self.booster.noise.seeded:
            if not seeded_before and (positions > 0 or leader.initialized):
                refuse_seeding_production("this deployment")
            self.shards.all("set_meta", SEEDED_META, True)
        self.booster.seeded_before = seeded_before or self.booster.noise.seeded
        self.shards.all("wait_durable")
        self.booster.ensemble = ens
        self.booster.rounds_done = leader.rounds_done
        self._initialized = leader.initialized
        self._positions = positions
        self._held = [state.positions for state in states]
        self._next_trigger = self.schedule.next_after(positions)
        # a crash (or a shard's death) inside a trigger: its other rounds are owed
        self._owed_rounds = rounds_owed(self.config, self.schedule, positions,
                                        leader.rounds_done,
                                        self.shards.one(0, "get_meta", FINISH_META))

    def _pin_members(self) -> None:
        """Every shard's store records the ids of all the deployment's stores at their first
        open together, and a store whose record names other stores is refused. A store lost
        and re-created beside the others (a new id, empty) would otherwise be reconciled as
        a shard one round behind: its keys, read again from the source, would get fresh
        budgets for the initial score and the round its lost store had charged. A shard
        without a record beside shards with one is a crash during the first record: it
        gets the record if the others name it."""
        ids = [identity.store_id for identity in self.shards.all("identity")]
        recorded: list[list[str] | None] = self.shards.all("get_meta", MEMBERS_META)
        for k, members in enumerate(recorded):
            if members is not None and members != ids:
                strangers = [f"shard {j} ({ids[j]})" for j in range(len(ids))
                             if j >= len(members) or members[j] != ids[j]]
                raise LedgerConflict(
                    f"shard {k}'s store records the deployment's stores as {members}, but "
                    f"{', '.join(strangers)} is another store: a store lost and re-created "
                    "(or swapped for another) would give its keys fresh budgets. Restore "
                    "the deployment's own stores; a deployment whose store is lost for good "
                    "cannot resume.")
        for k, members in enumerate(recorded):
            if members is None:
                self.shards.one(k, "set_meta", MEMBERS_META, ids)

    def _reconcile_grid(self) -> None:
        """A split grid that some shards committed (a crash between the shards' commits;
        no round ran after it) is committed by the others with the charges they compute
        from their own committed records, then installed in the coordinator's grower."""
        grids: list[GridEvent | None] = self.shards.all("released_grid")
        event = next((grid for grid in grids if grid is not None), None)
        if event is None:
            return
        behind = [k for k, held in enumerate(grids) if held is None]
        if behind and not math.isfinite(event.charge):
            raise LedgerConflict("a shard's store holds a split grid without its charge (kept "
                                 "before charges were), so shards without it cannot be "
                                 "charged for it: these stores were not written together")
        for k in behind:
            self.shards.one(k, "commit_grid", event)
        self.booster.install_split_grid(
            QuantileMap.from_cdf(self.config.public_schema, event.cdf, event.mapped))
        self.released_grid = event

    def _reconcile_recalibration(self, ens: Ensemble, positions: int,
                                 initialized: bool) -> None:
        """A refit that some shards committed (a crash between the shards' commits; each
        had committed the records its sums came from before sending them) is committed by
        the others, whose sums of that window it spent; ``ens`` answers with it. An open
        window is opened on every shard."""
        states: list[RecalibrationState] = self.shards.all("recalibration_state")
        lead = max(states, key=lambda state: state.refitted_at)
        done = lead.spent()
        for k, state in enumerate(states):
            if state.refitted_at < lead.refitted_at:
                self.shards.one(k, "commit_recalibration", done)
        self.recalibration = done
        ens.answer_map = done.answer_map
        self._open_recalibration(positions, initialized)

    def _open_recalibration(self, positions: int, initialized: bool) -> None:
        """Open the first window on every shard once the positions pass it."""
        policy = self.config.recalibration
        if (not self.recalibration.open and initialized
                and rounds_left(self.config, self.booster)
                and opens(policy, positions, self.config.final_at)):
            window = opening_window(policy, positions)
            self.shards.all("open_recalibration", window)
            with self._view_lock:
                self.recalibration = self.recalibration.opened(window)

    def _refit_answers(self) -> None:
        """A refit over all shards: each commits its merged records and sends its exact
        sums; their total gets the noise once; every shard commits the map, durably; then
        the coordinator answers with it (announced with the next version's tree)."""
        total = functools.reduce(np.add, self.shards.all("recalibration_sums"))
        state = refit(self.recalibration, total, self.config.recalibration,
                      self.booster.calibration, self.booster.noise, self._positions,
                      refit_versions(self.booster, self.release_version))
        self.shards.all("commit_recalibration", state)
        with self._view_lock:
            self.recalibration = state
            self.booster.ensemble.answer_map = state.answer_map

    def recover(self, error: ShardUnavailable) -> None:
        """A shard died mid-operation: the round is aborted (nothing released), the shard
        comes back from its store (its committed charges stay spent), and the shards are
        reconciled to one round."""
        self.aborted_rounds += 1
        counted, held = self._positions, list(self._held)
        deadline = time.monotonic() + self.recover_timeout
        while True:
            try:
                self.shards.wait_available(max(0.0, deadline - time.monotonic()))
                self._reconcile()
                break
            except ShardUnavailable as again:  # a shard died again while coming back
                if time.monotonic() > deadline:
                    self._stop_on(again)  # the shards may stay a round apart
                    raise
            except BaseException as failed:  # a reconciliation that failed: the same
                self._stop_on(failed)
                raise
        lost = {k: before - after for k, (before, after) in enumerate(zip(
            held, self._held, strict=True)) if after < before}
        if self._fed_by_add and lost:
            # rows given to add() have no source to read them again: the call that met the
            # death once returned as if they were learned, and the positions went back by the
            # rows that hashed to the dead shard (reviews S #2, D5). Counted shard by shard:
            # a shard restarted between calls takes the next call's rows on top of what it
            # kept, and the total may not go back (review S #8).
            shards = ", ".join(f"shard {k}: {n}" for k, n in lost.items())
            raise ShardUnavailable(
                error.shard, f"it died and came back from its store without "
                f"{sum(lost.values())} rows given to add() since its last commit ({shards}): "
                "they were not learned (no budget was spent on them), and the deployment "
                f"holds {self._positions} positions where it had counted {counted}; rows of "
                "this call after the death were not given to the shards either")

    def _fresh_locks(self) -> None:
        self._view_lock = threading.RLock()

    def _usable(self) -> None:
        """Refuse to go on after a commit phase failed with anything but a shard's death
        (which :meth:`recover` reconciles). Such a failure (a full disk, a store error) may
        come after other shards committed the round: carried on, a restarted shard would
        miss that round's charges while the released model held its sums."""
        if self._broken is not None:
            raise StateStoreError(
                f"the sharded engine stopped after a failed commit ({self._broken}); its "
                "shards may be a round apart. Restart it from its stores: opening them "
                "reconciles the shards (the one behind replays the round and pays for it)."
            ) from self._broken

    def _stop_on(self, error: BaseException) -> None:
        self._broken = error

    # ------------------------------------------------------------------ records
    @property
    def positions(self) -> int:
        return self._positions

    def add_one(self, row: np.ndarray, label: float, key: Any = None) -> None:
        """One encoded row with its validated label at the next position."""
        self.add(np.asarray(row, dtype=float).reshape(1, -1), [label],
                 None if key is None else [key])

    def _check_hash_routing(self) -> None:
        """Keyed records given to :meth:`add` go to the shard of their key's hash; on
        stores a Kafka deployment fed, a key's shard is its partition's, so the hash could
        open a second ledger for a person the partition's shard already charges. Such
        stores (a partition count or map recorded) are refused, and the others are marked
        (``KEY_ROUTING_META``) for a Kafka shard to refuse; once a coordinator's life."""
        if self._hash_routing_checked or self.shards.n == 1:
            return
        for name in ("partitions", "partition_map"):
            if any(value is not None for value in self.shards.all("get_meta", name)):
                raise LedgerConflict(
                    "these shard stores were fed from Kafka, where a key's shard is the "
                    "shard of its message key's partition: records handed to the sharded "
                    "engine go to the shard of their key's hash, which may be another one, "
                    "and one person would keep a ledger on two shards. Send the records "
                    "through the event topics")
        # every store says so before its first keyed record, so that a Kafka shard refuses
        # each of them, a store without records too (it would record its partitions first)
        self.shards.all("set_meta", KEY_ROUTING_META, "hash")
        self._hash_routing_checked = True

    @learning_call
    def empty_event(self) -> None:
        """A stream position without a usable record (a dead letter): it counts like any
        other (its shard commits it with its positions)."""
        self._fed_by_add = True
        self._usable()
        self._refresh_if_stale()
        k = self._keyless % self.shards.n
        self._keyless += 1
        empty = (np.zeros((0, self.config.public_schema.n_features)), np.zeros(0), [], 1,
                 np.zeros(0, dtype=np.int64))
        self._hand_out({k: empty}, {k: 1})

    @learning_call
    def add(self, rows: np.ndarray, targets: Any, keys: Sequence[Any] | None = None) -> None:
        """Encoded rows, each at the next position, to the shards that own their keys (rows
        without a key go to the shards in turn); triggers fire at the same positions as in a
        single engine. A row with a bad label or key is not learned but keeps its position
        (an empty event), the others are learned, and then an ``InvalidRecord`` names the
        first bad row, as a single engine does (a bad label or key once lost the whole
        call's positions).

        A call that fails part-way (a shard died while the rows were handed out) leaves
        the rows the other shards took with them: do not give the same keyless rows again,
        since each keyless row is its own key and a repeated one would train under a second
        budget (keyed rows given again are upserts of their one ledger). ``positions`` after
        the failure says how many rows of the stream the shards hold (review S #7)."""
        self._fed_by_add = True
        self._usable()
        self._refresh_if_stale()
        if bad := self.validator.bad_rows(targets, keys):
            raw = vector(targets).reshape(-1)  # as bad_rows judged them (review D7 #2)
            if len(rows) != raw.size or (keys is not None and len(keys) != raw.size):
                raise ValueError(f"got {len(rows)} rows and {raw.size} labels"
                                 + ("" if keys is None else f" and {len(keys)} keys"))
            rows = np.asarray(rows, dtype=float)
            start = 0
            for i in [*(i for i, _ in bad), raw.size]:  # the good runs between the bad rows
                if i > start:
                    self.add(rows[start:i], raw[start:i],
                             None if keys is None else list(keys[start:i]))
                if i < raw.size:
                    self.empty_event()
                start = i + 1
            raise rows_not_learned(bad, raw.size)
        targets = self.validator.labels(targets)
        n, n_shards = len(targets), self.shards.n
        rows = np.asarray(rows, dtype=float)
        if rows.shape != (n, self.config.public_schema.n_features):
            raise ValueError(f"rows must have shape ({n}, "
                             f"{self.config.public_schema.n_features}), got {rows.shape}")
        if keys is None:
            owner = (self._keyless + np.arange(n)) % n_shards
            self._keyless += n
            names = None
        else:
            if len(keys) != n:
                raise ValueError(f"got {len(keys)} keys for {n} rows")
            self._check_hash_routing()
            names = np.asarray(normalise_keys(keys), dtype=object)
            owner = np.fromiter((zlib.crc32(name.encode()) for name in names), np.int64, n)
            owner %= n_shards
        start = 0
        while start < n:
            stop = min(n, start + self._next_trigger - self._positions)
            part = owner[start:stop]
            args = []
            for k in range(n_shards):
                mine = np.flatnonzero(part == k) + start
                args.append((rows[mine], targets[mine],
                             None if names is None else names[mine].tolist()))
            self._hand_out(dict(enumerate(args)), {k: len(a[1]) for k, a in enumerate(args)})
            start = stop

    @learning_call
    def flush(self) -> None:
        """Every shard commits the rows it holds (:meth:`StreamEngine.flush`): rows given to
        :meth:`add` since the last round are otherwise lost at :meth:`close`, as a single
        engine's are. A shard that dies meanwhile is recovered, which says what it lost."""
        self._usable()
        self._refresh_if_stale()
        try:
            with self._stale_on_failure():
                self.shards.all("flush")
        except ShardUnavailable as error:
            self.recover(error)  # raises if rows given to add() were lost
            self.shards.all("flush")

    @learning_call
    def poll(self) -> int:
        """Every shard reads one bounded batch from its own source (in parallel on a
        cluster); then the trigger the new total of positions reached fires. Returns the
        positions added.

        The shards' caps add up to the positions left to the next trigger: each reads at
        most ``left // n`` messages and ``left % n`` of them one more (which ones rotates),
        so where a message is one position the round runs exactly at its trigger, as a
        single trainer's does. Each shard reading its share rounded up once let the total
        pass the trigger by up to ``n - 1`` positions, by how many depending on which shards
        had events ready, that is on whose keys are in which shard, and the round's noise
        stage and leaf depth, computed at the total, depended on it too. (A Kafka message
        after an offset gap, a transaction marker or a compacted record, counts the gap's
        positions too, so there the total can still pass the trigger: see README.) While
        events flow, shards take what their client has already fetched without waiting (a
        shard short of its share must not hold up the others for the poll timeout). Idle,
        one step of each turn of the shards waits up to the poll timeout (a turn: one step,
        or ``ceil(n / left)`` steps when fewer than ``n`` positions are left and only
        ``left`` shards may read), so an idle stream does not spin and an event on a shard
        that may not read this step waits at most one timeout, not one behind each idle
        shard.
        """
        self._usable()
        self.catch_up()  # on the records of the trigger that owes them
        self._refresh_if_stale()
        before, n = self._positions, self.shards.n
        left = self._next_trigger - before
        base, extra = divmod(left, n)
        caps = [base + int((k - self._turn) % n < extra) for k in range(n)]
        self._turn = (self._turn + extra) % n
        # idle, one step a turn of the shards waits (a turn: the steps until every shard
        # has read once); an event then waits at most one poll timeout, wherever it is
        turn = -(-n // max(min(left, n), 1))
        idle = not self._flowing and self._empty_steps
        wait = None if idle and self._empty_steps % turn == 0 else 0.0
        try:
            with self._stale_on_failure():
                self._held = self.shards.each("poll", [(cap, wait) for cap in caps])
                total = sum(self._held)
        except ShardUnavailable as error:
            self.recover(error)
            return 0
        self._flowing = total > before
        self._empty_steps = 0 if self._flowing else self._empty_steps + 1
        self._advance(total)
        return total - before

    def _hand_out(self, args: dict[int, tuple[Any, ...]], positions: dict[int, int]) -> None:
        """Give shard ``k`` its ``add`` arguments ``args[k]`` (``positions[k]`` positions)
        and count them. A shard that died, or was restarted since the last call, is
        recovered at once, which names the rows given to :meth:`add` it lost (and raises).
        If it lost none, a shard that did not take its part (a restarted one refuses a call
        before doing anything) is given it again: such a part was once dropped, and its
        keyless rows could not be given again without a second budget (review D6)."""
        counted, before = self._positions, list(self._held)
        try:
            with self._stale_on_failure():
                if len(args) == self.shards.n:
                    self._held = list(self.shards.each("add", [args[k] for k in sorted(args)]))
                else:
                    for k, part in args.items():
                        self._held[k] = self.shards.one(k, "add", *part)
        except ShardUnavailable as error:
            self.recover(error)  # raises if rows given earlier were lost
            for k, part in args.items():
                took = self._held[k] - before[k]
                if took == 0 and positions[k]:
                    self._held[k] = self.shards.one(k, "add", *part)
                elif took != positions[k]:
                    raise ShardUnavailable(k, f"it holds {took} of the {positions[k]} "
                                              "positions of this call's part") from error
            self._stale = False  # counted: the recovery read every shard
        self._advance(counted + sum(positions.values()))

    @contextlib.contextmanager
    def _stale_on_failure(self) -> Iterator[None]:
        """A call to the shards that fails part-way (some took their rows or events, or a
        shard died and came back without its uncommitted ones) leaves the count to be read
        again (:meth:`_refresh_if_stale`, which recovers a shard still away). A shard's
        death once left the count as it was when :meth:`add` was called directly (only a
        poll recovered): triggers followed positions that no store held."""
        try:
            yield
        except BaseException:
            self._stale = True
            raise

    def _refresh_if_stale(self) -> None:
        """After a call to the shards that failed part-way, count what each shard holds now
        and run the triggers that passed."""
        if self._stale:
            try:
                states = self.shards.all("state")
            except ShardUnavailable as error:
                self.recover(error)  # the reconciliation reads every shard's positions
                self._stale = False
                return
            self._stale = False
            self._held = [state.positions for state in states]
            self._advance(sum(self._held))

    def _advance(self, positions: int) -> None:
        """Count the positions up to ``positions`` and run every trigger they passed (after
        the rounds an earlier one still owes)."""
        self.catch_up()
        self._positions = positions
        # the positions a recovery inside train() reconciled, not the argument: a shard that
        # came back without its uncommitted records holds fewer
        while self._positions >= self._next_trigger:
            trigger = self._next_trigger
            self._next_trigger = self.schedule.next_after(trigger)
            note_one_over_delta(self, trigger)
            self.train(trees_due(self.config, self.schedule, trigger))

    # ------------------------------------------------------------------ rounds
    @learning_call
    def train(self, rounds: int = 1) -> int:
        """Run ``rounds`` rounds over all shards (the initial score first, once ``warmup``
        positions have passed); returns the trees added. A shard that dies aborts the round
        in progress and the rest of this call (see :meth:`recover`)."""
        check_call(rounds)
        self._usable()
        self._refresh_if_stale()
        try:
            if not self._initialized:
                if self._positions < self.config.warmup:
                    return 0
                self.shards.all("flush")  # what the score reads is committed before its sum
                self._release_initial_score()
            charge = hinted_grid_charge(self.config, self.booster, self._positions)
            if charge is not None:
                self._release_split_grid(charge)
            if recalibration_due(self.config, self.booster, self.recalibration,
                                 self._positions, rounds):
                self._refit_answers()
            self._open_recalibration(self._positions, self._initialized)
            return run_rounds(self.config, self.booster, self._round, rounds)
        except ShardUnavailable as error:
            self.recover(error)
            return 0
        except BaseException as error:
            self._stop_on(error)
            raise

    @learning_call
    def finish(self, split_grid: bool | None = None) -> int:
        """The stream ends here: the split grid and the end burst of
        :meth:`StreamEngine.finish <renyiboost.stream.engine.StreamEngine.finish>` over all
        shards, the burst recorded in every shard's store before its first round, so that a
        restarted deployment resumes it (or runs none after a finished one) instead of
        starting a second. Returns the rounds run."""
        check_call(split_grid=split_grid)
        self._usable()
        self._refresh_if_stale()
        owed = self.catch_up()  # a burst a crash cut short is resumed here
        self.train(0)  # the initial score if it is due
        if not self._initialized:
            warn_finished_early(self.positions, self.config)
            return owed
        try:
            burst, new_end = finish_burst(self.config, self._positions,
                                          self.booster.rounds_done,
                                          self.shards.one(0, "get_meta", FINISH_META))
            charge = end_grid_charge(self.config, self.booster, split_grid, burst)
            if charge is not None:
                self._release_split_grid(charge)
            if new_end:
                record_end(self.config, self.schedule, self._positions,
                           self.booster.rounds_done, functools.partial(self.shards.all,
                                                                       "set_meta"))
        except ShardUnavailable as error:
            self.recover(error)
            return owed
        except BaseException as error:
            self._stop_on(error)
            raise
        return owed + self.train(burst)

    def _release_initial_score(self) -> None:
        total = sum(self.shards.all("initial_sum"))
        if self.booster.calibration is None:  # no privacy: the exact count
            n_active = sum(state.n_active for state in self.shards.all("state"))
            score = self.booster.score_of_mean(total, n_active)
        else:
            score = self.booster.score_over_public_count(total, self._positions)
        self.shards.all("install_initial", score)
        self.shards.all("wait_durable")
        with self._view_lock:
            self.booster.ensemble.init_score = score
            self._initialized = True
        self._released()

    def _release_split_grid(self, charge: float) -> None:
        """The split grid over all shards: each commits its merged records and sends the
        exact histograms of its records that afford ``charge``; their sum gets the noise
        once; every shard commits the grid with its payers' charges, durably; then it is
        the coordinator's (the trees after it split on it)."""
        counts = functools.reduce(np.add, self.shards.all("grid_counts", charge))
        grid = self.booster.split_grid_of(counts, charge)
        event = GridEvent(charge, grid.cdf, grid.mapped, self.release_version + 1)
        self.shards.all("commit_grid", event)
        with self._view_lock:  # announced with the next version's tree
            self.booster.install_split_grid(grid)
            self.released_grid = event

    def _round(self) -> None:
        stage = noise_stage_at(self.config, self._positions)
        levels = leaf_depth_at(self.config, self.booster, self._positions, stage)
        features, thresholds = self.booster.grow_tree()
        # Step 1 (each shard commits its records, then sends its sums) and step 2 (each
        # commits the round, durably) are one call to every shard each.
        sums = functools.reduce(LeafSums.__add__, self.shards.all(
            "round_sums", features, thresholds, levels, stage))
        tree = self.booster.release_round(features, thresholds, sums, levels, stage)
        self.shards.all("commit_round", tree, stage)
        # Step 3: every commit returned, so the tree is the model's.
        with self._view_lock:
            ens = self.booster.ensemble
            ens.append(tree.features, tree.thresholds, tree.leaves)
            self.booster.rounds_done += 1
            max_trees = self.config.max_trees
            if max_trees is not None and ens.n_trees > max_trees:
                ens.keep_last(max_trees)
        self._released()

    def _released(self) -> None:
        """Tell the listeners of the version now durable on every shard (never under
        :attr:`_view_lock`: a listener may hand a read to another thread)."""
        self._announced = self.release_version
        self._tell(self._announced)

    # ------------------------------------------------------------------ reading
    @property
    def release_version(self) -> int:
        with self._view_lock:
            return self.booster.rounds_done + int(self._initialized)

    def predict_margin(self, X: np.ndarray) -> np.ndarray:
        """The model's margin for encoded rows (only trees every shard committed)."""
        with self._view_lock:
            return self.booster.ensemble.predict_margin(np.asarray(X, dtype=float))

    def privacy_guarantee(self) -> PrivacyGuarantee:
        with self._view_lock:
            return privacy_guarantee_of(self.config, self.booster)

    def release(self, model: str = "model", after: int = 0,
                upto: int | None = None) -> ModelRelease:
        """The committed model as a public release (see :meth:`StreamEngine.release`); it
        names shard 0's store, whose epoch grows with every start of the deployment."""
        with self._view_lock:
            version = self.release_version if upto is None else min(upto,
                                                                     self.release_version)
            return model_release(self.config, self.booster, self.identity, model, after,
                                 version, self.recalibration, self.released_grid)

    def spent_rdp(self) -> np.ndarray:
        """Spent RDP of every key of every shard (operator telemetry)."""
        return np.concatenate(self.shards.all("spent_rdp"))

    def operator_budget_of(self, key: Any) -> KeyBudget:
        """A key's budget, from the shard that holds it (operator telemetry). Every shard
        is asked: a key's shard is its hash for rows given to :meth:`add`, but the shard of
        its Kafka partition for shards that read their own partitions."""
        budgets = self.shards.all("operator_budget_of", key)
        return next((b for b in budgets if b.status != "unknown"), budgets[0])

    def operator_telemetry(self) -> dict[str, Any]:
        """The coordinator's and every shard's operator telemetry (never publish this)."""
        return {"channel": "operator-telemetry", "release_version": self.release_version,
                "positions": self._positions, "aborted_rounds": self.aborted_rounds,
                "shards": self.shards.all("telemetry")}

    def close(self) -> None:
        self.shards.close()

