"""Shards as Ray actors: a :class:`~renyiboost.stream.sharded.ShardGroup` on a Ray cluster.

This is the only module that imports Ray (the ``ray`` extra: ``pip install
'renyiboost[ray]'``). Each shard is one actor holding a
:class:`~renyiboost.stream.sharded.ShardWorker`: its engine, its state store (a PostgreSQL
schema, so that a shard restarted on another node resumes from the database; or a SQLite
file on a single node) and its own source (the Kafka partitions it is assigned). The
coordinator runs in the driver and calls every shard in parallel.

**Failures.** Actors are created with ``max_restarts`` (default: unlimited) and no task
retries: Ray restarts a dead actor (a killed process, a lost node) by running its
constructor again, which reopens the shard's store at its last commit and its source at
the offsets committed with it. A call that was in flight fails with a
:class:`~renyiboost.exceptions.ShardUnavailable`; the coordinator aborts that round,
waits here for the actor to answer again, and reconciles the shards
(:class:`~renyiboost.stream.sharded.ShardedEngine`). Nothing is retried inside Ray: a
round's calls are not idempotent (a retried ``install_released`` after a commit would be
refused, and a retried ``poll`` would skip a batch).

A shard Ray restarted *between* two calls (killed while idle) is noticed too: every actor
draws an incarnation id when its constructor runs, every call names the id the coordinator
knows, and an actor asked under another id refuses before doing anything, with the same
:class:`~renyiboost.exceptions.ShardUnavailable`. The coordinator learns the new id only
by waiting for the shard (:meth:`RayShards.wait_available`, which its recovery does), so
a restarted shard never silently answers for the process whose uncommitted rows it lost
(review S #8: a call after such a restart used to run on the new actor as if nothing had
happened). Operator readers of the committed ledger (:data:`ANY_INCARNATION`) are answered
by any incarnation.

An error the shard raises (a locked store, a refused shard map) is re-raised in the driver
as itself; a shard that cannot open its store keeps the error and raises it on every call
instead of dying, so Ray does not restart it in a loop.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from renyiboost.exceptions import RenyiboostError, ShardUnavailable, StoreLocked
from renyiboost.stream.engine import EngineConfig, StreamEngine
from renyiboost.stream.sharded import ShardSource, ShardWorker

log = logging.getLogger("renyiboost.shards")

#: Seconds a restarted shard waits for its dead predecessor's store lock to drop.
LOCK_WAIT_ON_RESTART = 30.0
#: Seconds a failed start waits for the shards that opened to close their stores.
CLOSE_ON_FAILED_START = 30.0
#: Worker methods any incarnation of a shard answers: reads of its committed ledger
#: (operator telemetry), which a restart does not change.
ANY_INCARNATION = frozenset({"spent_rdp", "operator_budget_of", "telemetry"})


class _ShardActor:
    """The actor: a :class:`ShardWorker` opened by the constructor (also on every restart),
    or the error that stopped it from opening."""

    def __init__(self, config: EngineConfig, location: str | None, k: int, n: int,
                 seed: int | None,
                 source: Callable[[StreamEngine, int, int], ShardSource] | None) -> None:
        self.worker: ShardWorker | None = None
        self.error: BaseException | None = None
        self.k = k
        #: New each time the constructor runs, that is on every restart.
        self.id = uuid.uuid4().hex
        # A restart after a crash may find the dead process's lock not yet dropped (a
        # PostgreSQL server notices a vanished client within moments): wait for it then,
        # and only then (a first start refuses a held store at once).
        restarted = ray.get_runtime_context().was_current_actor_reconstructed
        deadline = time.monotonic() + (LOCK_WAIT_ON_RESTART if restarted else 0.0)
        while True:
            try:
                self.worker = ShardWorker(config, location, k, n, seed, source)
                return
            except StoreLocked as error:
                if time.monotonic() > deadline:
                    self.error = error
                    return
                time.sleep(0.5)
            except Exception as error:  # noqa: BLE001 - kept, and raised on every call
                self.error = error
                return

    def call(self, incarnation: str | None, method: str, *args: Any) -> Any:
        """``method`` of the worker, if the caller knows this incarnation (``None``:
        whichever; only a failed start's close uses it)."""
        if incarnation not in (None, self.id) and method not in ANY_INCARNATION:
            raise ShardUnavailable(self.k, (
                "it was restarted since the coordinator last called it (Ray re-created the "
                "actor from its store, without what it had not committed)"))
        if self.worker is None:
            assert self.error is not None
            raise self.error
        return getattr(self.worker, method)(*args)

    def pid(self) -> int:
        """The actor's process (tests kill it)."""
        return os.getpid()

    def incarnation(self) -> str:
        """This incarnation's id (see :meth:`call`)."""
        return self.id


class RayShards:
    """``len(locations)`` shards as Ray actors (see the module docstring).

    Parameters
    ----------
    config
        The deployment's engine configuration.
    locations
        One existing store per shard (``postgresql://…?schema=…`` URLs, or SQLite paths
        every node can reach); see :func:`~renyiboost.stream.sharded.shard_locations`.
        ``None`` keeps a shard in memory (benchmarks and tests only: its ledger dies with
        the actor, so such actors are never restarted).
    seed
        As for :class:`~renyiboost.stream.sharded.ShardedEngine` (shard ``k`` draws with
        ``seed + 1 + k``); ``None`` for production.
    source
        Builds a shard's own source from its engine (e.g. its Kafka partitions).
    address
        ``None``/``"local"`` starts a local Ray instance; ``"auto"`` joins the running
        cluster; ``"ray://host:port"`` connects a client. An initialised Ray is used as is.
    num_cpus
        CPUs each shard actor reserves (Ray spreads the actors over the nodes).
    max_restarts
        Restarts Ray may make of each shard (``-1``: unlimited).
    call_timeout
        Seconds a call may take before the shard counts as unavailable.
    start_timeout
        Seconds the actors may take to be scheduled and started.
    """

    def __init__(self, config: EngineConfig, locations: Sequence[str | None],
                 seed: int | None = None,
                 source: Callable[[StreamEngine, int, int], ShardSource] | None = None,
                 address: str | None = None, num_cpus: float = 1.0, max_restarts: int = -1,
                 call_timeout: float = 600.0, start_timeout: float = 120.0) -> None:
        if not ray.is_initialized():
            local = address in (None, "local")
            ray.init(address=None if local else address, include_dashboard=False,
                     log_to_driver=False, **({"num_cpus": max(2, len(locations))} if local
                                             else {}))
        self.n = len(locations)
        if any(location is None for location in locations):
            max_restarts = 0  # a memory shard restarted would be a second ledger
        self.call_timeout = call_timeout
        actor = ray.remote(_ShardActor).options(
            max_restarts=max_restarts, max_task_retries=0, num_cpus=num_cpus,
            scheduling_strategy="SPREAD")
        self.actors = [actor.remote(config, None if location is None else str(location), k, self.n,
                                    None if seed is None else seed + 1 + k, source)
                       for k, location in enumerate(locations)]
        started = [actor.incarnation.remote() for actor in self.actors]
        ready: list[Any] = []
        try:
            ready, _ = ray.wait(started, num_returns=self.n, timeout=start_timeout)
            if len(ready) < self.n:
                raise ShardUnavailable(len(ready), (
                    f"only {len(ready)} of {self.n} shard actors started within "
                    f"{start_timeout:g} s; the cluster needs {num_cpus:g} free CPUs a shard"))
            #: The incarnation of every shard this coordinator knows (see :meth:`call`).
            self.incarnations: list[str] = ray.get(started)
            self.all("state")  # an error opening any shard, here and as itself
        except BaseException:
            try:
                self._close_opened([self.actors[started.index(ref)] for ref in ready])
            finally:  # an interrupt while closing still ends the actors
                self._kill()
            raise

    def _close_opened(self, actors: Sequence[Any]) -> None:
        """After a failed start, close the shards that did open, waiting up to
        :data:`CLOSE_ON_FAILED_START` s: killed with their stores open, their locks lived
        until the store noticed (a PostgreSQL server, moments after the process died), so a
        start right after the failure could be refused its own stores (``StoreLocked``). A
        shard that did not open answers its error, which is ignored here (the caller raises
        the first one). ``actors``: those that started (one not scheduled is not waited
        for)."""
        refs = [actor.call.remote(None, "close") for actor in actors]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=CLOSE_ON_FAILED_START)

    def _get(self, refs: list[Any], shards: Sequence[int]) -> list[Any]:
        try:
            return ray.get(refs, timeout=self.call_timeout)
        except RayTaskError as error:
            cause = error.cause
            if isinstance(cause, RenyiboostError):
                raise cause from None
            raise
        except (RayActorError, GetTimeoutError) as error:
            shard = self._first_unavailable(shards)
            raise ShardUnavailable(shard, f"{type(error).__name__}: "
                                          f"{str(error).splitlines()[0][:200]}") from None

    def _first_unavailable(self, shards: Sequence[int]) -> int:
        for k in shards:
            try:
                ray.get(self.actors[k].pid.remote(), timeout=1.0)
            except Exception:  # noqa: BLE001 - any failure names this shard
                return k
        return shards[0]

    def _call(self, k: int, method: str, *args: Any) -> Any:
        return self.actors[k].call.remote(self.incarnations[k], method, *args)

    def all(self, method: str, *args: Any) -> list[Any]:
        return self._get([self._call(k, method, *args) for k in range(self.n)], range(self.n))

    def one(self, k: int, method: str, *args: Any) -> Any:
        return self._get([self._call(k, method, *args)], [k])[0]

    def each(self, method: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        refs = [self._call(k, method, *a) for k, a in zip(range(self.n), args, strict=True)]
        return self._get(refs, range(self.n))

    def pids(self) -> list[int]:
        """The shards' processes (operator telemetry; tests kill them)."""
        return ray.get([actor.pid.remote() for actor in self.actors], timeout=self.call_timeout)

    def wait_available(self, timeout: float) -> None:
        """Wait until every shard answers again (Ray restarts a dead actor), and learn the
        incarnation each answers as: the caller (a recovery, which then reconciles the
        shards) accepts the restarts."""
        deadline = time.monotonic() + timeout
        for k, actor in enumerate(self.actors):
            while True:
                try:
                    self.incarnations[k] = ray.get(
                        actor.incarnation.remote(),
                        timeout=max(0.1, deadline - time.monotonic()))
                    break
                except (RayActorError, GetTimeoutError) as error:
                    if time.monotonic() > deadline:
                        raise ShardUnavailable(k, f"not back within {timeout:g} s "
                                                  f"({type(error).__name__})") from None
                    time.sleep(0.2)

    def close(self) -> None:
        """Close every shard cleanly (a last commit with a snapshot), then end the actors.

        A shard killed just before (Ray is restarting it from its store) answers
        ``ActorUnavailableError`` for a moment; its close is asked again once it answers,
        within ``call_timeout``. Nothing is lost either way: its store holds every commit,
        and closing an engine twice is harmless. A shard's own error (a store that failed,
        a shard that never opened) is raised once every other shard's close has returned:
        the first one ended the loop, and the actors still closing were killed with their
        stores open (review S, 29 November)."""
        errors: list[Exception] = []
        try:
            refs = [self._call(k, "close") for k in range(self.n)]
            failed = []
            for k, ref in enumerate(refs):
                try:
                    self._get([ref], [k])
                except ShardUnavailable:
                    failed.append(k)
                except Exception as error:  # noqa: BLE001 - every shard first, then raised
                    errors.append(error)
            if failed:
                log.info("closing: shards %s were restarting; asking again", failed)
                self.wait_available(self.call_timeout)
                for k in failed:
                    self.one(k, "close")
        finally:
            self._kill()
        if errors:
            raise errors[0]

    def _kill(self) -> None:
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
