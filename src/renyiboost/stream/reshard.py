"""``renyiboost reshard``: move a deployment's ledgers to another number of shards.

A key's ledger lives on the shard that owns the key (:mod:`renyiboost.stream.sharded`).
Changing the number of shards, or the partition → shard map, changes owners, so a trainer
refuses both (a moved key would meet a fresh ledger: a second budget, DEVELOPERS
invariant 5). Resharding moves every key's ledger to its new owner while nothing trains:

1. **Open and reconcile** the old stores (their locks keep every trainer out) and commit
   what they hold; every shard is then at the same round.
2. **Route** every key. For a deployment that reads Kafka (its stores recorded the topics'
   partition counts), the new map gives partition ``p`` to shard ``p mod M``
   (:func:`~renyiboost.stream.sharded.default_partition_map`) and a key follows the
   partition of its first record (its *origin*, recorded with the key since the
   ``origins`` column exists). A key without a recorded origin can move only with its
   whole old shard, i.e. when all of that shard's partitions go to one new shard; any
   other case is refused. Otherwise (records routed by
   :meth:`~renyiboost.stream.sharded.ShardedEngine.add`) a key goes to
   :func:`~renyiboost.stream.sharded.shard_of` ``(key, M)``. Keyless records (a fresh
   identity each) go with their origin's partition, else to shard ``k mod M``. A key found
   in two old stores (two ledgers already) is refused: fix that first.
3. **Create** the new stores, each born *pending* (``reshard_pending``, written in the
   transaction that creates its identity; an engine refuses to train on it), and let each
   adopt its keys in one commit
   (:meth:`~renyiboost.stream.engine.StreamEngine.adopt`): spent budgets, retirements, rows
   and margins exactly, the model, the source offsets of its partitions (and their dead
   letters), the published version, and the record of a ``finish()`` end burst (so a
   ``finish()`` at the same position after the reshard resumes it rather than running a
   second burst). The new shard 0 *continues the identity* of the old
   shard 0 (its store id, at a later epoch), so the model topic and its followers accept
   the new deployment's releases as the same model's.
4. **Tombstone** every old store (``resharded``: an engine refuses it for good), then
   **finish** the new ones (clear ``pending``). A directory deployment's old files then move
   to ``DIR/resharded-from-N-…/``.

Stream positions (the public schedule's clock) are kept in total: old shard ``k``'s go to
new shard ``k mod M``, as do its counters.

**Crash safety.** Until every old store is tombstoned, the old stores are the deployment
and the new ones are pending; running the same command again discards pending (or empty)
new stores and starts over. Once one old store is tombstoned, every new store was complete:
running it again tombstones the rest and finishes. At no moment can both a trainable old
store and a trainable new store hold a key.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from renyiboost.exceptions import LedgerConflict, StoreNotFound
from renyiboost.stream.engine import (
    FINISH_META,
    EngineConfig,
    EngineExport,
    KeyLedgers,
    StreamEngine,
)
from renyiboost.stream.postgres import place as postgres_place
from renyiboost.stream.postgres import without_password
from renyiboost.stream.sharded import (
    LocalShards,
    ShardedEngine,
    default_partition_map,
    shard_of,
)
from renyiboost.stream.store import (
    KEY_ROUTING_META,
    KEY_SOURCE_META,
    PARTITIONER_META,
    SEEDED_META,
    TOPIC_IDS_META,
    WENT_BACK_META,
    SQLStateStore,
    add_resharded_mark,
    is_postgres_location,
    marked_as,
    resharded_marks,
    sqlite_path,
    store_at,
    stored_identity,
)

#: Store side values that belong to a partition (``topic:p`` → value) and follow it.
PARTITION_VALUES = ("dead_lettered", WENT_BACK_META)

log = logging.getLogger("renyiboost.reshard")


@dataclass
class ReshardReport:
    """What a reshard did (operator telemetry: exact counts)."""

    into: list[str]  # the new stores' locations
    store_ids: list[str]
    n_active: list[int]  # per new shard
    n_retired: list[int]
    moved: int  # keys whose shard changed
    partition_map: dict[str, list[int]] | None
    finished_only: bool  # an interrupted reshard was finished (nothing moved now)


def reshard(config: EngineConfig, sources: Sequence[str], targets: Sequence[str]
            ) -> ReshardReport:
    """Move the ledgers of the stores ``sources`` (shards ``0…N-1`` of a deployment, or one
    plain store) into new stores at ``targets`` (shards ``0…M-1``); see the module
    docstring. Every store must be free (no trainer running)."""
    if not sources or not targets:
        raise ValueError("reshard needs at least one source and one target store")
    _check_places(sources, targets)
    if any(_read_mark(Path(s)) is not None for s in sources if not is_postgres_location(s)):
        log.info("finishing an interrupted reshard: moving the old files away")
        return _finish_archive(sources, targets)
    olds: list[SQLStateStore] = []
    try:
        for location in sources:
            olds.append(store_at(location))
        tombs = [old.get_meta("resharded") for old in olds]
        if any(tomb is not None for tomb in tombs):
            log.info("finishing an interrupted reshard: %d of %d old stores tombstoned",
                     sum(t is not None for t in tombs), len(tombs))
            report = _finish(olds, tombs, targets)
        else:
            log.info("resharding %d stores into %d", len(sources), len(targets))
            _clear_targets(targets, [old.identity.store_id for old in olds])
            group = LocalShards.open(config, olds)  # its workers close the stores
            olds = []
            try:
                ShardedEngine(config, group)  # reconciles the shards to one round
                report = _move(config, group, targets)
            finally:
                group.close()
    finally:
        for old in olds:
            old.close()
    _archive(sources)
    log.info("reshard done: %d shards; the old stores are refused from now on", len(targets))
    return report


def _place(location: str) -> str:
    """Where a location's store lives, spelled one way: a SQLite path made absolute (a
    ``sqlite:///`` URL is its path), a PostgreSQL URL as :func:`postgres.place` spells it."""
    text = str(location)
    return postgres_place(text) if is_postgres_location(text) else str(sqlite_path(text).resolve())


def _check_places(sources: Sequence[str], targets: Sequence[str]) -> None:
    """Refuse a store named twice, or both as a source and as a target, before anything
    opens: each was refused later, as a store "in use by this process" or one that "already
    exists", which did not say what was wrong with the call."""
    old, new = [_place(loc) for loc in sources], [_place(loc) for loc in targets]
    for role, locations, places in (("source", sources, old), ("target", targets, new)):
        for i, place in enumerate(places):
            if place in places[:i]:
                raise LedgerConflict(f"the {role} store {without_password(locations[i])} is "
                                     "named twice; each shard's store is named once")
    for location, place in zip(targets, new, strict=True):
        if place in old:
            raise LedgerConflict(
                f"{without_password(location)} is both a source and a target: a reshard "
                "writes the ledgers into new stores and refuses the old ones from then on, "
                "so the new shards need places of their own (--into)")


def _clear_targets(targets: Sequence[str], old_ids: list[str]) -> None:
    """Discard what an interrupted reshard left at ``targets`` (pending or empty stores);
    refuse a target that holds a ledger."""
    for location in targets:
        try:
            store = store_at(location)
        except StoreNotFound:
            continue
        if (tomb := store.get_meta("resharded")) is not None:
            # a store an earlier reshard retired (PostgreSQL keeps them in place): it was
            # refused as one that "may hold a second ledger", which invited hand edits
            # of the ledgers (review H)
            store.close()
            raise LedgerConflict(
                f"{store.location} is a store an earlier reshard retired (its ledgers went "
                f"to {tomb.get('into_locations')}); it stays as it is. Reshard into other "
                "places (another --into, or another schema prefix)")
        pending = store.get_meta("reshard_pending")
        if pending is not None and pending["from"] != old_ids:
            store.close()
            raise LedgerConflict(f"{store.location} is being filled by a reshard of other "
                                 "stores; finish that one first")
        if pending is None and store.identity.store_id in old_ids and store.has_committed():
            # Left by a reshard that marked its stores pending only after an engine had
            # loaded them (renyiboost before the mark came with the identity), and trained
            # on since: its keys may hold a ledger here and one in the old store.
            store.close()
            raise LedgerConflict(
                f"{location} continues the identity of an old store but was never marked as "
                "being filled by a reshard, and it holds a ledger: keys trained on it since an "
                "interrupted reshard may hold a second ledger there beside the old store's. "
                "Add their spent budgets up by hand before resharding again.")
        try:
            store.discard()  # refuses a store that holds a ledger
        except BaseException:
            store.close()
            raise


def _move(config: EngineConfig, group: LocalShards, targets: Sequence[str]) -> ReshardReport:
    engines = [worker.engine for worker in group.workers]
    exports = [engine.export_ledgers() for engine in engines]
    side = [{name: engine.store.get_meta(name) for name in
             ("partitions", "partition_map", "published", FINISH_META, KEY_SOURCE_META,
              KEY_ROUTING_META, SEEDED_META, PARTITIONER_META, TOPIC_IDS_META,
              *PARTITION_VALUES)}
            for engine in engines]
    n_new = len(targets)
    # Where the Kafka trainer read its keys is pinned for the ledger's life: a new store
    # without the pin would take them from wherever its first start says, and every person
    # whose payload field differs from the message key would get a second ledger.
    key_source = _agreed([s[KEY_SOURCE_META] for s in side if s[KEY_SOURCE_META] is not None],
                         "key sources")
    if n_new > 1 and key_source is not None and key_source.get("key_field") is not None:
        raise LedgerConflict(
            f"the old stores' keys came from the payload field {key_source['key_field']!r}; "
            "several shards take a record's shard from its partition, which the producer "
            "chooses from the message key, so a key read from the payload would reach "
            "several shards (each with a budget of its own). Reshard into one store, or keep "
            "the stores as they are.")
    counts = _agreed([s["partitions"] for s in side if s["partitions"] is not None],
                     "partition counts")
    partitioner = _agreed([s[PARTITIONER_META] for s in side
                           if s[PARTITIONER_META] is not None], "partitioners")
    # a topic whose id the old stores recorded differently (one read it re-created, one
    # not yet) is recorded by the new stores' first start: the ids they agree on go with them
    ids = [s[TOPIC_IDS_META] or {} for s in side]
    topic_ids = {topic: id_ for topic, id_ in ids[0].items()
                 if all(other.get(topic, id_) == id_ for other in ids)}
    new_map = None if counts is None else default_partition_map(counts, n_new)
    old_map = None
    if counts is not None:
        old_map = _agreed([s["partition_map"] for s in side], "partition map")
        if old_map is None:
            if len(engines) > 1:
                raise LedgerConflict("the old stores read Kafka but recorded no partition map")
            old_map = default_partition_map(counts, 1)
    owners = [_owners(k, export.keys, len(engines), n_new, old_map, new_map)
              for k, export in enumerate(exports)]
    # keys placed by their hash on several new stores mark them for a Kafka shard to refuse;
    # a deployment that holds nothing yet (`state init`, a first start that failed) not
    hashed = counts is None and n_new > 1 and (
        any(s[KEY_ROUTING_META] == "hash" for s in side)
        or any(export.keys.names.size for export in exports)
        or any(engine.positions for engine in engines))
    _check_one_ledger_per_key(exports)
    old_ids = [engine.store.identity.store_id for engine in engines]
    pending = {"from": old_ids, "from_locations": [e.store.location for e in engines],
               "at": _now()}
    news: list[StreamEngine] = []
    try:
        for j, location in enumerate(targets):
            moved = _gathered(j, exports, owners, n_new, new_map)
            # The side values are written with the identity, in one transaction: the new
            # store (shard 0's continues old shard 0's store id) is never trainable beside
            # the old stores, whenever a crash comes (invariant 5).
            marks: dict[str, Any] = {
                "reshard_pending": pending,
                "shard_map": {"shard": j, "of": n_new}}
            if counts is not None:
                marks["partitions"] = counts
                marks["partition_map"] = new_map
            for name in PARTITION_VALUES:
                values = _by_partition([s[name] or {} for s in side], j, n_new, new_map)
                if values:
                    marks[name] = values
            if j == 0 and side[0]["published"] is not None:
                marks["published"] = side[0]["published"]
            if side[0][FINISH_META] is not None:  # every shard holds the deployment's end
                marks[FINISH_META] = side[0][FINISH_META]
            if key_source is not None:
                marks[KEY_SOURCE_META] = key_source
            if partitioner is not None and n_new > 1:
                marks[PARTITIONER_META] = partitioner
            if topic_ids:
                marks[TOPIC_IDS_META] = topic_ids
            if hashed:
                marks[KEY_ROUTING_META] = "hash"
            if any(s[SEEDED_META] for s in side):  # the model's seeded past goes with it
                marks[SEEDED_META] = True
            store = store_at(location, create=True, meta=marks,
                             continues=engines[0].store.identity if j == 0 else None)
            # This engine alone may load the pending store: the mark stays on disk, and the
            # store's lock keeps every other process out while this reshard holds it.
            with store.hiding_meta("reshard_pending"):
                news.append(StreamEngine(config, store=store, coordinated=True))
            news[-1].adopt(moved)
        tomb = {"into": [e.store.identity.store_id for e in news],
                "into_locations": [e.store.location for e in news], "shards": n_new,
                "at": _now()}
        for engine in engines:
            engine.store.set_meta("resharded", tomb)
        for engine in news:
            engine.store.set_meta("reshard_pending", None)
        report = ReshardReport(
            into=tomb["into_locations"], store_ids=tomb["into"],
            n_active=[e.n_active for e in news],
            n_retired=[int(e.spent_rdp().size - e.n_active) for e in news],
            moved=sum(int(np.count_nonzero(o != k)) for k, o in enumerate(owners)),
            partition_map=new_map, finished_only=False)
    finally:
        for engine in news:
            engine.close()
    return report


def _owners(k: int, keys: KeyLedgers, n_old: int, n_new: int,
            old_map: dict[str, list[int]] | None, new_map: dict[str, list[int]] | None
            ) -> np.ndarray:
    """The new shard of every key of old shard ``k`` (see the module docstring)."""
    if new_map is None or old_map is None:
        return np.array([k % n_new if name is None else shard_of(name, n_new)
                         for name in keys.names], dtype=np.int64)
    # The new owner of each of this shard's partitions, named as origins are ("topic:p").
    mine = {f"{topic}:{p}": new_map[topic][p] for topic, shards in old_map.items()
            for p, shard in enumerate(shards) if shard == k}
    whole = set(mine.values())
    owners = np.full(keys.names.size, -1, dtype=np.int64)
    known = np.not_equal(keys.origins, None)
    if known.any():
        origins, inverse = np.unique(keys.origins[known].astype(str), return_inverse=True)
        foreign = [origin for origin in origins if origin not in mine]
        if foreign:
            raise LedgerConflict(
                f"keys of shard {k} of {n_old} first came from partitions {foreign[:3]}, which "
                "the recorded partition map gives to another shard: these stores were not "
                "written under that map")
        owners[known] = np.array([mine[origin] for origin in origins])[inverse]
    if len(whole) == 1:  # the shard moves whole: no origin needed
        owners[~known] = next(iter(whole))
    else:
        keyless = ~known & np.equal(keys.names, None)
        owners[keyless] = k % n_new
    unplaced = keys.names[owners < 0].tolist()
    if unplaced:
        raise LedgerConflict(
            f"{len(unplaced)} keys of shard {k} (e.g. {unplaced[:3]}) have no recorded source "
            f"partition (they were stored before origins were), and shard {k}'s partitions go "
            f"to {len(whole)} different new shards: their new owner is unknown. Reshard to a "
            "number of shards that keeps each old shard's partitions together (a divisor of "
            f"{n_old}), or keep {n_old} shards.")
    return owners


def _check_one_ledger_per_key(exports: list[EngineExport]) -> None:
    names = np.concatenate([e.keys.names[e.keys.names != None] for e in exports])
    unique, counts = np.unique(names.astype(str), return_counts=True)
    if np.any(counts > 1):
        twice = unique[counts > 1]
        raise LedgerConflict(
            f"{twice.size} keys (e.g. {twice[:3].tolist()}) have ledgers in two old stores: "
            "their records reached two shards (a producer that does not partition by the "
            "message key?). Their spent budgets must be added up by hand before a reshard.")


def _gathered(j: int, exports: list[EngineExport], owners: list[np.ndarray], n_new: int,
              new_map: dict[str, list[int]] | None) -> EngineExport:
    """New shard ``j``'s part of the exports."""
    first = exports[0]
    counters: dict[str, int] = dict.fromkeys(first.counters, 0)
    positions = 0
    sums = np.zeros_like(first.recalibration.sums)
    for k, export in enumerate(exports):
        if k % n_new == j:
            positions += export.positions
            sums += export.recalibration.sums
            for name, value in export.counters.items():
                counters[name] = counters.get(name, 0) + value
    return EngineExport(
        keys=KeyLedgers.joined([e.keys.take(o == j) for e, o in zip(exports, owners,
                                                                     strict=True)]),
        ensemble=first.ensemble, rounds_done=first.rounds_done,
        initialized=first.initialized, positions=positions,
        offsets=_by_partition([e.offsets for e in exports], j, n_new, new_map),
        counters=counters, grid=first.grid,  # the shards reconciled to one grid and map
        recalibration=dataclasses.replace(first.recalibration, sums=sums))


def _by_partition(values: list[dict[str, Any]], j: int, n_new: int,
                  new_map: dict[str, list[int]] | None) -> dict[str, Any]:
    """The values of new shard ``j``'s partitions (``topic:p`` → value, from whichever old
    shard had the partition), or, without a partition map, old shard ``k``'s for ``k mod
    M = j``."""
    out: dict[str, Any] = {}
    for k, mapping in enumerate(values):
        for name, value in mapping.items():
            if new_map is None:
                keep = k % n_new == j
            else:
                topic, p = name.rsplit(":", 1)
                keep = new_map[topic][int(p)] == j
            if keep:
                out[name] = value
    return out


def _agreed(values: list[Any], what: str) -> Any:
    """The one value every old store recorded (``None`` if none did)."""
    distinct = {repr(value) for value in values}
    if len(distinct) > 1:
        raise LedgerConflict(f"the old stores recorded different {what}: {sorted(distinct)}")
    return values[0] if values else None


def _finish(olds: list[SQLStateStore], tombs: list[Any], targets: Sequence[str]
            ) -> ReshardReport:
    """An interrupted reshard got as far as tombstoning: every new store is complete, so
    tombstone the rest of the old ones and finish the new ones."""
    tomb = next(t for t in tombs if t is not None)
    news: list[SQLStateStore] = []
    try:
        for location in targets:
            try:
                news.append(store_at(location))
            except StoreNotFound:  # not where this reshard put them: another target
                raise LedgerConflict(
                    f"the old stores were already resharded into {tomb['into_locations']} "
                    f"(not {[without_password(str(t)) for t in targets]}); they must never "
                    "train again: reshard that deployment instead") from None
        ids = [store.identity.store_id for store in news]
        if ids != tomb["into"]:
            raise LedgerConflict(
                f"the old stores were resharded into {tomb['into_locations']}, not into "
                f"{[s.location for s in news]}")
        # every old store, not some: finishing with a part of them once left the others
        # without a tombstone (and the directory with stores of two deployments)
        old_ids = [old.identity.store_id for old in olds]
        for store in news:
            pending = store.get_meta("reshard_pending")
            if pending is not None and sorted(pending["from"]) != sorted(old_ids):
                raise LedgerConflict(
                    f"this reshard moved the ledgers of {pending['from_locations']}; finish "
                    f"it with all of them as its sources, not {[o.location for o in olds]}")
        for old, recorded in zip(olds, tombs, strict=True):
            if recorded is None:
                old.set_meta("resharded", tomb)
            elif recorded["into"] != tomb["into"]:
                raise LedgerConflict("the old stores were resharded into different stores")
        for store in news:
            store.set_meta("reshard_pending", None)
        return ReshardReport(into=tomb["into_locations"], store_ids=ids, n_active=[],
                             n_retired=[], moved=0,
                             partition_map=news[0].get_meta("partition_map"),
                             finished_only=True)
    finally:
        for store in news:
            store.close()


def _archive(sources: Sequence[str]) -> None:
    """Move the tombstoned SQLite files of a directory deployment (``shard-K-of-N.db``) to
    ``DIR/resharded-from-N-<time>/``, so the directory holds one deployment again, and leave
    a mark at each old path (:func:`~renyiboost.stream.store.resharded_mark`) before its files
    move: the ``.epoch`` record that refuses an older copy restored there moves with them,
    and a backup of the old deployment restored in place once opened and trained beside the
    new one (review S, 29 November). Run again after a crash among the moves, it moves the
    rest into the same folder (:func:`_finish_archive`)."""
    paths = [Path(s) for s in sources if not is_postgres_location(s)]
    if not paths or any(not p.name.startswith("shard-") for p in paths):
        return
    marks = {path: _read_mark(path) for path in paths}
    tombs = {path: _tombstone(path) for path in paths if marks[path] is None}
    if any(tomb is None for tomb in tombs.values()):
        return
    archive = next((Path(mark["archive"]) for mark in marks.values() if mark is not None), None)
    if archive is None:  # a folder of its own (two reshards in one second shared one)
        n = paths[0].name.rsplit("-of-", 1)[1].removesuffix(".db")
        stem = paths[0].parent / f"resharded-from-{n}-{time.strftime('%Y%m%dT%H%M%S')}"
        archive = next(folder for i in itertools.count()
                       if not (folder := Path(f"{stem}{f'-{i}' if i else ''}")).exists())
    archive.mkdir(exist_ok=True)
    for path in paths:
        if path in tombs:
            store_id, created, tomb = tombs[path]
            add_resharded_mark(path, {
                "store_id": store_id, "created": created, "archive": str(archive),
                "into": tomb["into"], "into_locations": tomb["into_locations"], "at": _now()})
        for suffix in ("", "-wal", "-shm", ".lock", ".epoch"):
            old = Path(f"{path}{suffix}")
            if old.exists():
                if (archive / old.name).exists():  # a move never overwrites: review H
                    raise LedgerConflict(
                        f"{archive / old.name} already exists: {old} is not the store this "
                        "reshard moved there. Nothing more was moved; check the archive")
                shutil.move(old, archive / old.name)


def _read_mark(path: Path) -> dict[str, Any] | None:
    """The mark of the reshard that moved the store at ``path`` away, or is moving it: the
    newest mark there, unless another store lives at the path now (a later deployment's
    store put there; its mark was taken for this one's, and a reshard of that deployment
    "finished" the old one by moving the live stores into the old archive: review H)."""
    marks = resharded_marks(path)
    if not marks:
        return None
    if path.exists():
        identity = stored_identity(path)
        if not isinstance(identity, dict) or marked_as(
                marks[-1:], identity.get("store_id"), identity.get("created")) is None:
            return None  # not the marked store: a newer one
    return marks[-1]


def _finish_archive(sources: Sequence[str], targets: Sequence[str]) -> ReshardReport:
    """A reshard that crashed while it moved the old files away: move the rest. Every old
    store is either moved (its mark names where) or still in place and tombstoned."""
    paths = [Path(s) for s in sources if not is_postgres_location(s)]
    marks = [_read_mark(path) for path in paths]
    mark = next(m for m in marks if m is not None)
    if [_place(t) for t in targets] != [_place(t) for t in mark["into_locations"]]:
        raise LedgerConflict(
            f"the old stores were already resharded into {mark['into_locations']} (not "
            f"{[without_password(str(t)) for t in targets]}); they must never train again: "
            "reshard that deployment instead")
    for path, found in zip(paths, marks, strict=True):
        if found is None and _tombstone(path) is None:
            raise LedgerConflict(
                f"{path} is not tombstoned, but the reshard that moved the other stores "
                f"named with it into {mark['into_locations']} tombstoned every one of them: "
                "these are not one deployment's stores. Name the stores that reshard moved.")
        if found is not None and found.get("into") != mark.get("into"):
            raise LedgerConflict("the old stores were resharded into different stores")
    _archive(sources)
    return ReshardReport(into=mark["into_locations"], store_ids=mark["into"], n_active=[],
                         n_retired=[], moved=0, partition_map=None, finished_only=True)


def _tombstone(path: Path) -> tuple[str, float | None, dict[str, Any]] | None:
    """A store's id, creation time and tombstone (``None``: no store there, or one not
    tombstoned)."""
    try:
        store = store_at(path)
    except StoreNotFound:
        return None
    try:
        tomb = store.get_meta("resharded")
        return None if tomb is None else (store.identity.store_id, store.created(), tomb)
    finally:
        store.close()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
