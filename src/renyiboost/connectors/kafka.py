"""Kafka: train continuously from a topic, publish model releases, dead-letter bad events.

* :class:`KafkaTrainer` owns **all** partitions of its event topics (``assign``, no consumer
  group rebalancing) and feeds the engine. The source offsets live in the **state store**
  and are committed in the same SQLite transaction as the round that consumed them (the
  Kafka Streams / Flink pattern); the consumer starts from them, and the group's own offset
  commits are informational. After a crash at any moment no event is trained twice or
  skipped.
* **One key, one ledger** (DEVELOPERS invariant 5). A trainer refuses to start (with a
  :class:`~renyiboost.exceptions.LedgerConflict` that says why) when its store is not
  durable; when the partitions of its topics changed since the store first recorded them;
  when its consumer group has committed offsets beyond the store's (another trainer, or a
  newer copy of this store, consumed those events with its own ledger); and when the model
  topic holds releases of this model from another store, or versions newer than its own
  store has committed (published trees beyond the ledger are under-charged keys). These
  checks run at start, and ``assign`` joins no group, so a second trainer started beside a
  running one (before either has committed or published, or on a copy of its live store)
  passes them: the model topic's transactional producer (:func:`model_publisher`) then
  fences the first one's, which stops at its next publish.
* **Sharded** (:mod:`renyiboost.stream.sharded`): :meth:`KafkaTrainer.for_shard` makes the
  trainer of one shard, which ``assign()``s only the partitions the partition map gives it
  (:func:`partition_map_for`: partition ``p`` to shard ``p mod n``), records that map in its
  store at the first start and refuses another one, and publishes nothing;
  :class:`ShardedKafkaTrainer` is the coordinator that polls the shards, runs the public
  schedule over their summed positions and publishes the global model.
* Every committed output is published to the model topic (keyed by the model name) as one
  :class:`~renyiboost.release.ModelRelease` — the public release type, nothing else — after
  the commit, never before. One message per output, so the topic's message count and shapes
  are a function of public stream positions only. A crash between commit and publish
  re-publishes on restart; followers skip versions they have.
* :class:`ModelFollower` rebuilds the model from the model topic and serves predictions
  without access to the state store or the raw events. It skips a message that is not a
  release (a tombstone, foreign JSON) and applies only a release that continues its version:
  when one is missing it re-reads the topic from the beginning, and if the topic lacks it
  for good it keeps the last whole version and says why (:attr:`ModelFollower.stalled`)
  instead of serving a model without the trees in between.
* Events that fail to parse or validate go to ``<topic>.dlq`` with the reason, the source
  topic/partition/offset and an idempotency id (``renyiboost.dlq.id``) in headers; they count
  as stream positions like any event (they are empty events of the public schedule). A
  batch's dead letters are delivered, and the offsets they reach recorded in the store,
  before any offset past them commits; a restart does not dead-letter them again (a crash in
  the moment between delivery and that record can repeat a batch's dead letters: the id
  header lets a consumer drop the repeats). The dead-letter topic holds raw events: give it
  the ACLs of the input topic. An event over the parser's ``max_bytes`` (or any dead letter
  the producer or broker refuses as too large) is dead-lettered with only its first
  :data:`DEAD_LETTER_HEAD_BYTES` bytes of value and key and a ``value.truncated`` (and
  ``key.truncated``) header with the original size in bytes: a 1 MB event must not stop
  the trainer, and the ``source.*`` headers still find the raw event on the input topic.
* Client logs go through :mod:`logging` (logger ``renyiboost.kafka``); a cluster that does not
  answer within ``connect_timeout`` seconds, at start or while running, ends the trainer with
  a :class:`~renyiboost.exceptions.BrokerUnavailable` error.

Nothing here is broker-specific: plain Kafka ≥ 2.8 features (assign, keyed produce, headers,
offset commits, metadata, watermarks, and transactions for the model topic's publisher).
"""

from __future__ import annotations

import functools
import logging
import math
import re
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from pydantic import ValidationError

from renyiboost.connectors.events import (
    EventFormat,
    EventParser,
    ParsedBatch,
    Rejected,
    cycle_collector_paused,
    event_json,
)
from renyiboost.connectors.kafka_settings import (
    KafkaSettings,
    dead_letter_topic,
    refuse_managed,
)
from renyiboost.exceptions import (
    BrokerUnavailable,
    LedgerConflict,
    RenyiboostError,
    ShardUnavailable,
)
from renyiboost.models.losses import class_codes, class_probabilities, unscale_margin
from renyiboost.models.trees import Ensemble, input_shifts
from renyiboost.release import (
    ModelRelease,
    PrivacyGuarantee,
    joined_parts,
    release_parts,
    released_trees,
)
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import StreamEngine
from renyiboost.stream.positions import PositionRuns, offset_positions
from renyiboost.stream.sharded import (
    ShardedEngine,
    check_one_shard_a_key,
    default_partition_map,
)
from renyiboost.stream.store import (
    KEY_ROUTING_META,
    KEY_SOURCE_META,
    PARTITIONER_META,
    TOPIC_IDS_META,
    WENT_BACK_META,
    InitEvent,
    RoundEvent,
    StoreIdentity,
    key_source_name,
    pin_meta,
    score_value,
)
from renyiboost.validation import RecordValidator

__all__ = ["KafkaSettings", "KafkaTrainer", "ModelFollower", "ShardedKafkaTrainer", "event_json",
           "model_releases", "partition_map_for"]

log = logging.getLogger("renyiboost.kafka")


class RepeatedClientLines(logging.Filter):
    """Let one line of librdkafka's through per ``window`` seconds, however often the client
    repeats it, and say how many were held back. Without a broker a follower's client logged
    the same "Connection refused" about 20 times a second, burying every other line of
    ``serve`` and ``train``. librdkafka's lines reach the logger as ``"%s [%s] %s"`` with its
    facility, client name and text; the text's "(after N ms in state …)" is left out of
    the comparison. Lines of renyiboost's own pass untouched."""

    CLIENT_FORMAT = "%s [%s] %s"
    _TIMING = re.compile(r"\(after \d+ms in state [^)]*\)")

    def __init__(self, window: float = 60.0) -> None:
        super().__init__()
        self.window = window
        self._seen: dict[str, tuple[float, int]] = {}  # line -> (when let through, held back)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != self.CLIENT_FORMAT or not isinstance(record.args, tuple):
            return True
        line = self._TIMING.sub("", record.getMessage())
        now = time.monotonic()
        with self._lock:
            if len(self._seen) > 1_000:  # many distinct lines: forget those out of window
                self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.window}
            shown, held = self._seen.get(line, (-math.inf, 0))
            if now - shown < self.window:
                self._seen[line] = (shown, held + 1)
                return False
            self._seen[line] = (now, 0)
        if held:
            record.msg, record.args = "%s (and %d more like it in the last %g s)", (
                record.getMessage(), held, self.window)
        return True


log.addFilter(RepeatedClientLines())
#: Consumer errors that are states, not failures: end of a partition, a topic not created yet.
_TRANSIENT = (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART)
#: The store's record of the event format its dead-letter marks were set under.
DEAD_LETTER_FORMAT_META = "dead_letter_format"
#: Why a shard dead-letters an event whose message key is not its key's canonical spelling.
_OTHER_SPELLING = Rejected(
    "key", "with several shards the message key must be the key in its canonical form (NFC, "
           "as renyiboost normalises it): the producer partitions by its bytes, and another "
           "spelling of the same key could reach another shard")
#: Bytes of a rejected event's value (and key) that its dead letter keeps when the whole
#: event would be too large to produce: an event over the parser's ``max_bytes`` may be close
#: to the producer's ``message.max.bytes`` (1,000,000 by default), and a dead letter that
#: cannot be delivered stops the trainer before the batch commits, on every restart.
DEAD_LETTER_HEAD_BYTES = 1024
#: librdkafka's default ``message.max.bytes``, the largest message a producer sends unless
#: ``[kafka] extra`` sets it.
MESSAGE_MAX_BYTES = 1_000_000
#: A stretch of offsets without a message this long is logged (:meth:`KafkaTrainer.
#: _offset_positions`): a transaction marker leaves one, and a compacted or retained topic a
#: few; thousands mean the trainer was down while retention deleted what it had not read.
EMPTY_RUN_WARNING = 1_000
#: Seconds for which a follower's last client error explains why it has no model yet
#: (:meth:`ModelFollower.waiting_reason`); a client retries and reports again within them.
CLIENT_ERROR_FRESH = 30.0
#: What a public answer says of the Kafka client's error instead of its text, which can
#: name the cluster's internal addresses or an authentication failure (operator telemetry).
CLIENT_ERROR_LOGGED = "the Kafka client's error is in the server's log"

def read_client_config(path: str | Path) -> dict[str, str]:
    """librdkafka settings from a ``key=value`` file (``#`` comments; the format of kcat's
    ``-F``), for the commands without a renyiboost config (``serve``, ``replay``): a
    secured cluster's ``security.protocol``, ``sasl.*`` and ``ssl.*``, kept out of the
    command line. Settings renyiboost manages (:data:`MANAGED_CLIENT_SETTINGS`) are
    refused, as in ``[kafka] extra``."""
    settings: dict[str, str] = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            # the line itself is not shown: "sasl.password: …" (a Java properties file's
            # colon) was echoed whole to the terminal (review C, 29 November)
            raise ValueError(f"{path}:{number}: expected key=value (a line without '=')")
        settings[name.strip()] = value.strip()
    return refuse_managed(settings, str(path))


#: The part of librdkafka's error texts that changes between repeats of one error.
_CLIENT_ERROR_TIMING = re.compile(r" \(after \d+ms in state \w+(?:, \d+ identical error\(s\) "
                                  r"suppressed)?\)")


def _unreachable(settings: KafkaSettings, error: BaseException) -> BrokerUnavailable:
    return BrokerUnavailable(
        f"no Kafka broker at {settings.bootstrap_servers} answered within "
        f"{settings.connect_timeout:g} s ({error}); check the address and the cluster")


def _scan(consumer: Consumer, assignment: list[TopicPartition], timeout: float,
          keep: Callable[[Message], None]) -> None:
    """Read ``assignment`` to the end of every partition, handing each message to ``keep``."""
    consumer.assign(assignment)
    open_partitions = {(tp.topic, tp.partition) for tp in assignment}
    deadline = time.monotonic() + timeout
    while open_partitions:
        if time.monotonic() > deadline:
            raise BrokerUnavailable(f"reading {sorted(open_partitions)} to its end took longer "
                                    f"than {timeout:g} s")
        for message in consumer.consume(500, 0.5):
            error = message.error()
            if error is None:
                keep(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                open_partitions.discard((message.topic(), message.partition()))
            else:
                raise RenyiboostError(f"reading the model topic failed: {error}")


def produce_waiting(producer: Producer, timeout: float, topic: str, **message: Any) -> None:
    """``producer.produce`` that waits, serving delivery reports, while the producer's local
    queue is full (``BufferError``), and gives up after ``timeout`` seconds with
    :class:`BrokerUnavailable`. A burst larger than the queue (``queue.buffering.max.messages``,
    100,000 by default) once raised ``BufferError`` out of the trainer on every restart."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            producer.produce(topic, **message)
            return
        except BufferError:
            if time.monotonic() > deadline:
                raise BrokerUnavailable(
                    f"the producer's queue to {topic!r} stayed full for {timeout:g} s: the "
                    "broker does not take messages as fast as they come") from None
            producer.poll(0.1)


def start_within(offset: int, retained: tuple[int, int], where: str) -> int:
    """The offset to read a partition from, ``offset`` if the partition still holds it:
    retention may have deleted it (``offset`` below the low watermark), or the topic may
    have been deleted and re-created (``offset`` at or past the high watermark). The
    consumer's ``auto.offset.reset`` would then jump to the end and read nothing (and a
    broker that never reports the offset out of range, like Tansu, would keep the read
    waiting), so the check reads the partition from its first retained message instead."""
    low, high = retained
    if low <= offset < high:
        return offset
    log.warning("%s no longer holds offset %d of the last published release (it holds %d to "
                "%d): retention deleted it, or the topic was re-created; reading the model "
                "topic from its first retained message", where, offset, low, high - 1)
    return OFFSET_BEGINNING


def model_releases(settings: KafkaSettings, start: Mapping[int, int] | None = None
                   ) -> list[ModelRelease]:
    """The releases of ``settings.model_name`` on the model topic, in the order read.
    ``start`` maps partitions to the offset to read from (others from the beginning)."""
    consumer = Consumer(settings.client(**{
        "group.id": f"renyiboost-check-{uuid.uuid4().hex}", "enable.auto.commit": False,
        "enable.partition.eof": True,
        # what followers read: an aborted publication is no release (and names none)
        "isolation.level": "read_committed"}))
    try:
        topic = settings.model_topic
        meta = consumer.list_topics(topic, timeout=settings.connect_timeout).topics.get(topic)
        if meta is None or meta.error is not None:
            return []
        name = settings.model_name.encode()
        found: list[ModelRelease] = []

        def keep(message: Message) -> None:
            if message.key() == name:
                try:
                    found.append(ModelRelease.model_validate_json(message.value()))
                except ValidationError:
                    log.warning("model topic %s:%d@%d holds a message for %r that is not a "
                                "release", topic, message.partition(), message.offset(),
                                settings.model_name)

        assignment = []
        for partition in meta.partitions:
            offset = (start or {}).get(partition, OFFSET_BEGINNING)
            if offset != OFFSET_BEGINNING:
                retained = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=settings.connect_timeout)
                offset = start_within(offset, retained, f"{topic}:{partition}")
            assignment.append(TopicPartition(topic, partition, offset))
        _scan(consumer, assignment, settings.connect_timeout, keep)
        return found
    except KafkaException as error:
        raise _unreachable(settings, error) from None
    finally:
        consumer.close()


class _Loop:
    """The polling loop of a trainer: :meth:`run` until :meth:`stop` or idle, then close."""

    stopping: bool = False
    #: A later trainer for the model fenced this one's model publisher, which can deliver
    #: nothing more (:func:`_transaction`).
    fenced: bool = False
    #: The loop stopped because the cluster did not answer or a version was not delivered:
    #: the close publishes nothing more (the next start publishes every version not yet
    #: published), so it neither waits out the timeouts again nor replaces that error.
    broken: bool = False
    #: The error a call of :meth:`poll_once` stopped on; the trainer refuses further polls.
    failed: BaseException | None = None

    def publish(self) -> None:
        """Publish the committed versions not yet published (after their commit, never
        before), remembering a fence (the :class:`LedgerConflict` of :func:`_transaction`)."""
        try:
            self._publish()
        except LedgerConflict:
            self.fenced = True
            raise

    def _publish(self) -> None:
        raise NotImplementedError

    def _close_publisher(self, publisher: Producer | None) -> None:
        """Publish what is left and flush the model's publisher, unless it was fenced: it
        can deliver nothing more, and flushing it again (confluent-kafka 2.16) has raised
        a ``SystemError`` from a delivery callback, about one run in ten of the fencing
        test, which replaced the ``LedgerConflict`` that says why the trainer stopped; or
        unless the loop is :attr:`broken` (a publish then waited out the timeouts again,
        about a minute, and its ``PublishFailed`` replaced the error that stopped it)."""
        if self.fenced or self.broken:
            return
        try:
            self.publish()
        finally:
            if publisher is not None:
                publisher.flush(10)

    def poll_once(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def run(self, max_idle: float | None = None,
            on_poll: Callable[[Any], None] | None = None) -> None:
        """Poll until :meth:`stop` (e.g. from a signal handler) or ``max_idle`` seconds
        idle, calling ``on_poll(self)`` after every poll; then close, whatever happened."""
        idle_since = time.monotonic()
        try:
            while not self.stopping:
                if self.poll_once():
                    idle_since = time.monotonic()
                elif max_idle is not None and time.monotonic() - idle_since > max_idle:
                    break
                if on_poll:
                    on_poll(self)
        except (BrokerUnavailable, PublishFailed):
            self.broken = True
            raise
        finally:
            self.close()

    def stop(self) -> None:
        """Finish the current batch (and the rounds it triggers), then close."""
        self.stopping = True


class KafkaTrainer(_Loop):
    """Consume events, train the engine, publish releases, dead-letter bad events.

    Parameters
    ----------
    engine
        The engine, with a durable store (the ledger and the offsets live there).
    settings
        Connection, topics and model topic.
    event_format
        Field names, the key's source and the size limit of events.
    """

    def __init__(
        self, engine: StreamEngine, settings: KafkaSettings,
        event_format: EventFormat | None = None,
        shard: int | None = None, partition_map: dict[str, list[int]] | None = None,
    ) -> None:
        if (shard is None) != (partition_map is None):
            raise ValueError("a shard's trainer needs both its shard and the partition map")
        #: A shard of a sharded deployment reads only the partitions ``partition_map``
        #: gives it and publishes nothing (its coordinator publishes the global model).
        self.shard = shard
        self.partition_map = partition_map
        #: Shards split the keys by partition, which the producer picks from the message
        #: key's bytes: a key must arrive as those bytes, in its one canonical spelling
        #: (:meth:`_placed_by_key`), or one person would keep a ledger on several shards.
        self.keys_place_shards = partition_map is not None and len(
            {owner for owners in partition_map.values() for owner in owners}) > 1
        if self.keys_place_shards and event_format is not None and (
                event_format.key_field is not None):
            raise ValueError(
                "with several shards a record's shard is its partition, which the producer "
                "chooses from the message key: the key must be the message key, so "
                f"[events] key_field = {event_format.key_field!r} is refused (one person's "
                "events would reach several shards, each with a budget of its own)")
        # one shard of several, whatever the map (one that gives every partition to one
        # shard still meets keys whose ledgers another shard holds)
        placed = (engine.store.get_meta("shard_map") or {}).get("of", 1)
        if partition_map is not None and (self.keys_place_shards or placed > 1) and (
                engine.store.get_meta(KEY_ROUTING_META) == "hash" or (
                    engine.positions and engine.store.get_meta("partition_map") is None)):
            raise LedgerConflict(
                "this shard's store belongs to a deployment whose keys reached their shard "
                "by their hash (records handed to the sharded engine, a memory: replay), "
                "and from Kafka a key goes to the shard of its partition, which may be "
                "another one: one person would keep a ledger on two shards. Start the "
                "Kafka deployment on new stores")
        if not engine.store.durable:
            raise LedgerConflict(
                "the Kafka trainer needs a durable state store: with a memory store a restart "
                "re-reads the topic and hands every key a fresh budget")
        self.engine = engine
        self.settings = settings
        self.parser = EventParser(engine.validator, event_format)
        # Who a record belongs to is fixed for the ledger's life: a payload field at one start
        # and the message key at the next gave one person two budgets (0.88 spent against a
        # budget of 0.48), under two names.
        key_source = ({"key_field": event_format.key_field}
                      if event_format is not None and event_format.key_field is not None
                      else {"message_key": True})
        #: What this start pins in the store (``(name, value, refusal)``), checked now and
        #: recorded once every start check has passed.
        self._pins: list[tuple[str, Any, Callable[[Any], str]]] = []
        self._pin(KEY_SOURCE_META, key_source, lambda recorded: (
            f"this store's keys came from {key_source_name(recorded)}, and this start takes "
            f"them from {key_source_name(key_source)}: every person would get a second "
            "ledger under another name. Keep [events] key_field as it was"))
        self.dead_letters: Counter[str] = Counter()
        self.dead_letters_repeated = 0
        self.consumed = 0
        #: Offsets read past that held no message (:meth:`_offset_positions`).
        self.empty_positions = 0
        self.stopping = False
        self._down_since: float | None = None
        self._fatal: KafkaError | None = None
        #: The client's error texts logged (without their varying "(after … in state …)"),
        #: so that a repeat is not logged again until the cluster answers (a broker down
        #: for 3 s gave 59 lines; librdkafka alternates a few texts).
        self._logged_client_errors: set[str] = set()
        self.consumer = Consumer(settings.client(**{
            "group.id": settings.group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "error_cb": self._on_client_error,
        }))
        self.producer = Producer(settings.client(**{
            "enable.idempotence": True, "linger.ms": 5, "error_cb": self._on_client_error}))
        store = engine.store
        #: The last release on the model topic: its version, partition and offset.
        self._published = published_to(store.get_meta("published"), settings)
        self._dead_lettered: dict[str, int] = self._dead_letter_marks(store)
        self._undelivered: list[str] = []
        #: Per partition, the offset the next message should have (:meth:`_positions`).
        self._expected: dict[str, int] = {}
        try:
            self._partitions = self._claim_partitions()
            #: The model topic's fenced publisher (:func:`model_publisher`); a shard
            #: publishes nothing.
            self.publisher = (None if shard is not None
                              else model_publisher(settings, self._check_model_topic))
            for name, value, refusal in self._pins:
                pin_meta(store, name, value, refusal)
            for name, value in self._start_meta.items():
                store.set_meta(name, value)
            # the rounds a crash inside a trigger left owed, now that the checks have seen
            # the store as it was (published below, with any other unpublished version)
            engine.catch_up()
        except BaseException:
            self.consumer.close()
            raise
        if shard is None:
            engine.listeners.append(self._on_output)
        self._unpublished = shard is None and engine.release_version > self._published["version"]

    @classmethod
    def for_shard(cls, settings: KafkaSettings, event_format: EventFormat | None,
                  partition_map: dict[str, list[int]]) -> Callable[[StreamEngine, int, int],
                                                                   KafkaTrainer]:
        """The source of shard ``k`` of a sharded deployment, as a picklable callable of
        ``(engine, k, n)`` (see :class:`~renyiboost.stream.sharded.ShardWorker`)."""
        return functools.partial(_shard_trainer, settings, event_format, partition_map)

    # ------------------------------------------------------------------ ownership
    def _claim_partitions(self) -> list[TopicPartition]:
        """Check that this store may own every partition of the topics, then assign them
        at the store's offsets (see the module docstring)."""
        settings, engine = self.settings, self.engine
        counts = _partition_counts(self.consumer, settings)
        recorded = engine.store.get_meta("partitions")
        if recorded is not None and set(recorded) != set(counts):
            raise LedgerConflict(
                f"this store trained on the topics {sorted(recorded)}, and this start reads "
                f"{sorted(counts)}: its offsets and ledgers belong to those topics' events. "
                "Pass the store's own topic (--source), or train another topic into a new "
                "store (--state … --new-state)")
        if recorded is not None and recorded != counts:
            raise LedgerConflict(
                f"the partitions of the event topics changed since this store first read them "
                f"({recorded} → {counts}); a trainer owns all partitions of its topics, and "
                "keys move between partitions when their number changes. Repartitioning needs "
                "a planned migration, not a restart.")
        owned = [TopicPartition(topic, p) for topic, n in counts.items() for p in range(n)]
        if self.partition_map is not None:
            owned = self._shard_partitions(owned, counts)
        if self.keys_place_shards:
            self._pin(PARTITIONER_META, settings.partitioner, lambda recorded: (
                f"this shard's store admitted events placed by the {recorded} partitioner, "
                f"and this start checks them against {settings.partitioner}: a person's "
                "events would reach another partition, so another shard and a second "
                "budget. Keep [kafka] partitioner as it was; producers that change theirs "
                "need a new deployment, or one shard first (`renyiboost reshard --to 1`)"))
        self._check_group(owned)
        ensure_dead_letter_topics(self.settings)
        if self.shard is None:
            keep_model_topic_forever(self.settings)  # once: the fenced re-check reads releases
            self._published, releases = still_published(self.settings, self._published,
                                                        engine.store.identity)
            check_model_topic(self.settings, engine.store.identity, engine.release_version,
                              self._published, releases)
        #: Side values this start writes once every start check passed (with the pins).
        self._start_meta: dict[str, Any] = {}
        if recorded is None:
            self._start_meta["partitions"] = counts
        ids = _topic_ids(settings)
        known = dict(engine.store.get_meta(TOPIC_IDS_META) or {})
        #: Topics re-created since the store last read them (a new topic id): read from
        #: their log's start, and recorded under their new id once a batch of them is read.
        self._recreated = {topic: ids[topic] for topic in ids
                           if known.get(topic) not in (None, ids[topic])}
        if fresh := {topic: id_ for topic, id_ in ids.items() if topic not in known}:
            self._start_meta[TOPIC_IDS_META] = {**known, **fresh}  # first read here
        #: Re-created topics read since the last commit, whose new ids are recorded once
        #: that commit is durable (:meth:`poll_once`).
        self._recreated_read: dict[str, str] = {}
        offsets = engine.offsets
        for tp in owned:
            name = f"{tp.topic}:{tp.partition}"
            stored = offsets.get(name)
            tp.offset = self._expected[name] = (
                int(stored) if stored is not None else self._log_start(tp))
            if tp.topic in self._recreated and stored is not None:
                tp.offset = self._log_start(tp)  # below the stored offset: it goes back
                log.warning("%s was re-created while the trainer was away (topic id %s, "
                            "now %s): reading it from offset %d, where the store stood at %d",
                            name, known[tp.topic], ids[tp.topic], tp.offset, stored)
        self.consumer.assign(owned)
        return owned

    def _log_start(self, tp: TopicPartition) -> int:
        """Where a partition the store has not read yet starts counting positions: the
        log's start offset (its low watermark), which retention moves with time and size
        and compaction never moves. Counting from the first message delivered made the
        public clock depend on the data: on a compacted topic whose head offsets belonged
        to one person, the store with that person and the one without stood one position
        apart for good, and released at different offsets."""
        try:
            low, _ = self.consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=self.settings.connect_timeout)
        except KafkaException as error:
            raise _unreachable(self.settings, error) from None
        return int(low)

    def _shard_partitions(self, every: list[TopicPartition],
                          counts: dict[str, int]) -> list[TopicPartition]:
        """The partitions the map gives this shard; the map is recorded in the store at the
        first start and a different one is refused (its keys' ledgers live elsewhere)."""
        mapping = self.partition_map or {}
        if {topic: len(shards) for topic, shards in mapping.items()} != counts:
            raise LedgerConflict(f"the partition map {mapping} does not cover the partitions "
                                 f"of the event topics ({counts})")
        check_one_shard_a_key(mapping)
        self._pin("partition_map", mapping, lambda recorded: (
            f"the partition map changed since this shard's store first recorded it "
            f"({recorded} → {mapping}): the keys of a moved partition have their ledgers "
            "in another shard's store. Change it only with `renyiboost reshard`, which "
            "moves those ledgers."))
        return [tp for tp in every if mapping[tp.topic][tp.partition] == self.shard]

    def _pin(self, name: str, value: Any, refusal: Callable[[Any], str]) -> None:
        """Refuse a start whose ``value`` differs from the store's; record it once every
        start check has passed (:func:`~renyiboost.stream.store.pin_meta`)."""
        pin_meta(self.engine.store, name, value, refusal, record=False)
        self._pins.append((name, value, refusal))

    def _check_group(self, owned: list[TopicPartition]) -> None:
        settings, offsets = self.settings, self.engine.offsets
        try:
            committed = self.consumer.committed(owned, timeout=settings.connect_timeout)
        except KafkaException as error:
            raise _unreachable(settings, error) from None
        went_back = self.engine.store.get_meta(WENT_BACK_META) or {}
        for tp in committed:
            name = f"{tp.topic}:{tp.partition}"
            ours = int(offsets.get(name, 0))
            # a group offset of the partition before it went back (a re-created topic) is
            # this store's own, told to the group before the store went back
            if tp.offset >= 0 and tp.offset > max(ours, int(went_back.get(name, -1))):
                raise LedgerConflict(
                    f"consumer group {settings.group_id!r} has consumed {tp.topic}:{tp.partition} "
                    f"up to offset {tp.offset}, but this state store only to {ours}: another "
                    "trainer (or a newer copy of this store) trained on those events with its "
                    "own ledger, and a second ledger would give their keys a second budget. "
                    "Resume from that store.")
        # once the group stands at or below the store's offset, its old offset is gone: the
        # allowance ends (kept, it passed another trainer's offsets up to the old log's end)
        settled = {f"{tp.topic}:{tp.partition}" for tp in committed
                   if tp.offset <= int(offsets.get(f"{tp.topic}:{tp.partition}", 0))}
        if went_back and settled & set(went_back):
            self.engine.store.set_meta(WENT_BACK_META, {
                name: offset for name, offset in went_back.items() if name not in settled})
        try:
            from confluent_kafka.admin import AdminClient

            admin = AdminClient(settings.client())
            group = admin.describe_consumer_groups([settings.group_id])[settings.group_id]
            members = group.result(timeout=settings.connect_timeout).members
        except Exception as error:  # noqa: BLE001 - best effort: not every broker answers
            log.warning("could not describe consumer group %r (%s); relying on its committed "
                        "offsets", settings.group_id, error)
            return
        if members:
            raise LedgerConflict(
                f"consumer group {settings.group_id!r} has active members "
                f"({', '.join(m.client_id for m in members)}): another process consumes these "
                "partitions; one store owns all of them")

    def _check_model_topic(self) -> None:
        check_model_topic(self.settings, self.engine.store.identity,
                          self.engine.release_version, self._published)

    # ------------------------------------------------------------------ the loop
    def poll_once(self, max_messages: int | None = None, timeout: float | None = None) -> int:
        """Consume one bounded batch (at most ``batch_size``, and ``max_messages`` if given,
        waiting at most ``timeout`` seconds, default ``poll_timeout``) and feed it to the
        engine; returns the messages read.

        A call that fails leaves the trainer unusable: it had counted the batch's offsets
        (and perhaps delivered its dead letters) before the failure, so a call after it
        committed later offsets with those neither learned nor counted (review K2 #4). Close
        it; a new trainer reads the batch again from the store's offsets."""
        if self.failed is not None:
            raise RenyiboostError(
                f"this trainer stopped on an error ({type(self.failed).__name__}: "
                f"{self.failed!s:.200}); what it read since its last commit is read again by a "
                "new trainer: close this one and start another") from self.failed
        try:
            return self._poll(max_messages, timeout)
        except BaseException as error:
            self.failed = error
            raise

    def _poll(self, max_messages: int | None, timeout: float | None) -> int:
        self._check_client()
        size = self.settings.batch_size if max_messages is None else min(
            max(1, max_messages), self.settings.batch_size)
        messages = self.consumer.consume(
            size, self.settings.poll_timeout if timeout is None else timeout)
        # the data's warnings after the batch is counted and its group committed
        with (self.parser.validator.warnings_at_end(), cycle_collector_paused(),
              self.engine.group_commit()):
            self._process(messages)
        # an error event (a topic deleted while running: UNKNOWN_TOPIC_OR_PART) is no
        # message: counted, it kept the trainer from going idle and hid the outage (K2 #6)
        delivered = sum(message.error() is None for message in messages)
        self.consumed += delivered
        if delivered:
            self._down_since = None
            self._logged_client_errors.clear()
        self.publish()
        if self._recreated_read:
            self.engine.flush()  # the batches that went back are durable: then the new ids
            store = self.engine.store
            store.set_meta(TOPIC_IDS_META,
                           {**(store.get_meta(TOPIC_IDS_META) or {}), **self._recreated_read})
            self._recreated_read = {}
        if delivered and self.engine.offsets:
            self._commit_informational()
        return delivered

    def _process(self, messages: list[Message]) -> None:
        """Validate a batch, dead-letter the bad events and feed all of them, in order.

        The valid events go to the engine in one call, each with its own source position;
        the rejected ones are empty events at their positions (the public schedule counts
        them). Their dead letters are delivered, and recorded in the store, before anything
        of the batch can commit.
        """
        if any(map(Message.error, messages)):
            messages = self._without_errors(messages)
        if not messages:
            return
        batch = self.parser.parse_batch(list(map(Message.value, messages)),
                                        list(map(Message.key, messages)))
        if self.keys_place_shards:
            batch = self._placed_by_key(
                batch, messages,
                {topic: len(shards) for topic, shards in (self.partition_map or {}).items()},
                self.settings.partitioner)
        events, at, back = self._offset_positions(messages)
        if back or self._recreated:
            self._record_went_back(back, {m.topic() for m in messages})
        if batch.rejected or back:
            self._dead_letter_batch(messages, batch.rejected, back)
        index = at[np.asarray(batch.index, dtype=np.int64)]
        self.engine.add(batch.rows, batch.labels, batch.keys, events, event_index=index,
                        n_events=len(events), labels_checked=True)  # the parser checked them

    def _offset_positions(self, messages: list[Message]
                          ) -> tuple[PositionRuns, np.ndarray, list[tuple[int, str, int]]]:
        """The stream positions of a batch, one an *offset*: ``(partition, next offset)``
        for every offset from the one expected to each message's, and each message's index
        among them. An offset that holds no message (compaction removed it, a transaction
        marker, retention passed it while the trainer was down) is an empty position: the
        public clock is the offsets, and compaction removes offsets according to who
        upserted, so counting delivered messages made it depend on the data. A stretch of
        empty positions is one run (:class:`~renyiboost.stream.positions.PositionRuns`),
        however long; one of :data:`EMPTY_RUN_WARNING` or more is logged, and all are
        counted in the operator telemetry (``empty_positions``). Also returned: where a
        partition went back, ``(message index, partition name, offset, offset expected)``."""
        names = [f"{message.topic()}:{message.partition()}" for message in messages]
        offsets = np.fromiter(map(Message.offset, messages), dtype=np.int64,
                              count=len(messages))
        batch = offset_positions(names, offsets, self._expected)
        back = [(int(i), names[i], int(offsets[i]), int(batch.expected_offset[i]))
                for i in np.flatnonzero(batch.expected_offset > offsets)]
        for _, name, offset, expected in back:
            log.warning("%s went back from offset %d to %d; counting on from there",
                        name, expected, offset)
        for i in np.flatnonzero(batch.skipped >= EMPTY_RUN_WARNING):
            log.warning("%s: offsets %d to %d hold no message (retention or compaction "
                        "removed them, or they are transaction markers); they count as "
                        "%d empty stream positions", names[i], offsets[i] - batch.skipped[i],
                        offsets[i] - 1, batch.skipped[i])
        self.empty_positions += int(batch.skipped.sum())
        return batch.positions, batch.at, back

    @staticmethod
    def _placed_by_key(batch: ParsedBatch, messages: list[Message], counts: dict[str, int],
                       partitioner: str) -> ParsedBatch:
        """A shard's valid events that its key's partition may not hold move to the dead
        letters, in one pass over the batch (each distinct key is hashed once):

        * reason ``key``: the message key is not the key's canonical form
          (:func:`~renyiboost.validation.normalise_key`: ``"Zoë"`` sent decomposed, say). The
          producer placed it by bytes that another spelling of the same key does not share,
          so the same person could reach a second shard and a second ledger;
        * reason ``partition``: the event is not in the partition ``partitioner`` gives its
          message key (:func:`key_partition`). A producer with another partitioner (the Java
          client's murmur2 beside librdkafka's CRC-32), or one that chose partitions itself,
          put the same key in two partitions, and so on two shards, each spending a budget
          of its own.
        """
        partition_of: dict[tuple[str, bytes], int] = {}
        strays: list[tuple[int, Rejected]] = []
        elsewhere = Rejected(
            "partition", f"with several shards an event must be in the partition the "
                         f"{partitioner} partitioner gives its message key (KafkaSettings."
                         "partitioner): in another, its key could reach a second shard and a "
                         "second budget")
        for j, (i, key) in enumerate(zip(batch.index, batch.keys, strict=True)):
            message = messages[i]
            raw, topic = message.key(), message.topic()
            if raw != key.encode():
                strays.append((j, _OTHER_SPELLING))
                continue
            placed = partition_of.get((topic, raw))
            if placed is None:
                placed = partition_of[topic, raw] = key_partition(raw, counts[topic],
                                                                  partitioner)
            if message.partition() != placed:
                strays.append((j, elsewhere))
        return KafkaTrainer._dead_letter_strays(batch, strays)

    @staticmethod
    def _dead_letter_strays(batch: ParsedBatch,
                            strays: list[tuple[int, Rejected]]) -> ParsedBatch:
        """``batch`` without its valid events ``strays`` (``(index among them, why)``), which
        join the rejected."""
        if not strays:
            return batch
        keep = np.ones(len(batch.index), dtype=bool)
        keep[[j for j, _ in strays]] = False
        rejected = sorted([*batch.rejected, *((batch.index[j], why) for j, why in strays)],
                          key=lambda item: item[0])
        return ParsedBatch([i for i, k in zip(batch.index, keep, strict=True) if k],
                           [key for key, k in zip(batch.keys, keep, strict=True) if k],
                           batch.rows[keep],
                           [label for label, k in zip(batch.labels, keep, strict=True) if k],
                           rejected)

    def _without_errors(self, messages: list[Message]) -> list[Message]:
        for message in messages:
            error = message.error()
            if error is not None and error.code() not in _TRANSIENT:
                raise RenyiboostError(f"Kafka error: {error}")
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                self._note_transient(str(error))
        return [m for m in messages if m.error() is None]

    def _note_transient(self, error: str) -> None:
        """Log a transient error of the consumer once until messages come again (a topic
        deleted while the trainer runs was filtered out without a word: review K2 #6)."""
        if error not in self._logged_client_errors:
            self._logged_client_errors.add(error)
            log.warning("the consumer reports %s; waiting for messages", error)

    @property
    def _judged_by(self) -> dict[str, Any]:
        """The event format the dead-letter marks were set under."""
        return self.parser.format.model_dump(mode="json")

    def _dead_letter_marks(self, store: Any) -> dict[str, int]:
        """Each partition's mark, the offset after its last dead letter (:meth:`_dead_letter_
        batch`), unless the marks were set under another event format: an event the
        earlier format took and this one refuses lies below its mark and was never sent,
        and a restart counted it a repeat, lost without a dead letter (review K2 #3). Then
        every refused event is sent again; the dead letters' ids let a reader drop the
        repeats."""
        marks = dict(store.get_meta("dead_lettered") or {})
        judged = store.get_meta(DEAD_LETTER_FORMAT_META)
        if marks and judged is not None and judged != self._judged_by:
            log.warning("the event format changed since the last dead letters (%s → %s): "
                        "the refused events after the committed offsets are dead-lettered "
                        "again (repeats keep their renyiboost.dlq.id)", judged, self._judged_by)
            return {}
        return marks

    def _dead_letter_batch(self, messages: list[Message], rejected: list[tuple[int, Rejected]],
                           back: list[tuple[int, str, int, int]]) -> None:
        """Dead-letter the ``rejected`` events but those a restart found delivered already:
        each partition's mark is the next offset after its last dead letter. Where a
        partition went back (``back``: a re-created topic), its mark goes back with it, in
        message order: kept high, it had passed the new events' bad ones over as repeats,
        and they reached no dead-letter topic."""
        done, sent = self._dead_lettered, 0
        reached, back_at = dict(done), iter(back)
        going = next(back_at, None)
        for i, why in rejected:
            while going is not None and going[0] <= i:
                _, name, offset, _ = going
                reached[name] = min(reached.get(name, 0), offset)
                going = next(back_at, None)
            message = messages[i]
            name, after = f"{message.topic()}:{message.partition()}", message.offset() + 1
            if after <= reached.get(name, 0):
                self.dead_letters_repeated += 1  # delivered before a restart
                continue
            self._dead_letter(message, why)
            reached[name], sent = after, sent + 1
        for _, name, offset, _ in ([going] if going is not None else []) + list(back_at):
            reached[name] = min(reached.get(name, 0), offset)
        if reached != done:
            if sent:
                self._deliver_dead_letters()
            self.engine.store.set_meta("dead_lettered", reached)
            self.engine.store.set_meta(DEAD_LETTER_FORMAT_META, self._judged_by)
            self._dead_lettered = reached
        if sent:
            log.warning("dead-lettered events to %s.dlq; by reason so far: %s (operator "
                        "telemetry)", messages[0].topic(), dict(self.dead_letters))

    def _record_went_back(self, back: list[tuple[int, str, int, int]],
                          topics: set[str]) -> None:
        """Record, before the batch that goes back commits, the offset each partition went
        back from (a re-created topic), and the new id of a topic re-created while the
        trainer was away, once a batch of it is read. The consumer group's offset,
        committed after the old topic's events, stays above the store's until the group
        is told again (a crash or a stop before that), and the start's check
        (:meth:`_check_group`) refused every restart as if another trainer had read those
        offsets."""
        store = self.engine.store
        if back:
            went_back = dict(store.get_meta(WENT_BACK_META) or {})
            for _, name, _, expected in back:
                went_back[name] = max(int(went_back.get(name, 0)), expected)
            store.set_meta(WENT_BACK_META, went_back)
        # the new id waits for the batch's commit: recorded before it, a crash between
        # made the restart read the new log from the old offset again (review D2)
        self._recreated_read.update(
            {topic: self._recreated.pop(topic) for topic in topics & set(self._recreated)})

    def _dead_letter(self, message: Message, parsed: Rejected) -> None:
        self.dead_letters[parsed.reason] += 1
        value = message.value()
        # An event the parser refused for its size may be too large for the producer too.
        oversize = value is not None and len(value) > self.parser.format.max_bytes
        self._produce_dead_letter(message, parsed, truncated=oversize)
        self.producer.poll(0)

    def _produce_dead_letter(self, message: Message, parsed: Rejected, truncated: bool) -> None:
        """Send the dead letter of ``message``: its value and key with the reason and source
        in headers; with ``truncated``, only the first :data:`DEAD_LETTER_HEAD_BYTES` of value
        and key, and a ``value.truncated`` / ``key.truncated`` header with the size cut from.
        A whole dead letter the producer refuses as too large is sent truncated instead."""
        # The id names the message for consumers that drop repeats: its offset, and its
        # timestamp for a topic re-created with offsets from 0 again, whose events are new.
        where = (f"{message.topic()}:{message.partition()}:{message.offset()}:"
                 f"{message.timestamp()[1]}")
        value, key = message.value(), message.key()
        headers = [
            ("reason", parsed.reason.encode()), ("detail", parsed.detail.encode()),
            ("source.topic", message.topic().encode()),
            ("source.partition", str(message.partition()).encode()),
            ("source.offset", str(message.offset()).encode()),
            ("renyiboost.dlq.id", where.encode()),
        ]
        if truncated:
            for name, field in (("value", value), ("key", key)):
                if field is not None and len(field) > DEAD_LETTER_HEAD_BYTES:
                    headers.append((f"{name}.truncated", str(len(field)).encode()))
            value = None if value is None else value[:DEAD_LETTER_HEAD_BYTES]
            key = None if key is None else key[:DEAD_LETTER_HEAD_BYTES]
        try:
            produce_waiting(
                self.producer, self.settings.dlq_timeout, dead_letter_topic(message.topic()),
                value=value, key=key, headers=headers,
                on_delivery=functools.partial(self._on_dead_letter_delivery, message, parsed,
                                              truncated))
        except KafkaException as error:
            if truncated or error.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                raise
            log.warning("the dead letter of %s is too large to produce (%s); sending it "
                        "truncated", where, error.args[0])
            self._produce_dead_letter(message, parsed, truncated=True)

    def _on_dead_letter_delivery(self, message: Message, parsed: Rejected, truncated: bool,
                                 error: KafkaError | None, delivered: Message | None) -> None:
        """Record a dead letter that was not delivered (the batch then does not commit); one
        the broker refused as too large (a topic's ``max.message.bytes`` below the
        producer's) is sent again truncated, and the flush that called this waits for it."""
        if error is None:
            return
        if not truncated and error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
            log.warning("the broker refused the dead letter of %s:%d:%d as too large (%s); "
                        "sending it truncated", message.topic(), message.partition(),
                        message.offset(), error)
            try:
                self._produce_dead_letter(message, parsed, truncated=True)
                return
            except KafkaException as again:
                error = again.args[0]
        self._undelivered.append(str(error))

    def _deliver_dead_letters(self) -> None:
        """Wait until the batch's dead letters are on the broker, before the offsets that
        pass them can commit (a crash must not lose a dead letter); raises otherwise, which
        ends the process with nothing of the batch committed."""
        remaining = self.producer.flush(self.settings.dlq_timeout)
        if remaining or self._undelivered:
            errors, self._undelivered = self._undelivered, []
            raise RenyiboostError(f"dead letters not delivered ({remaining} still queued, "
                                  f"errors: {errors[:3]}); nothing of this batch is committed")

    def _commit_informational(self) -> None:
        """Tell the group where the durable state is (monitoring, and the check that no
        other store trains on these partitions; never read back as a position)."""
        offsets = [TopicPartition(tp.rsplit(":", 1)[0], int(tp.rsplit(":", 1)[1]), int(offset))
                   for tp, offset in self.engine.offsets.items()]
        try:
            self.consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as error:
            log.info("informational offset commit failed: %s", error)

    # ------------------------------------------------------------------ client health
    def _on_client_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._fatal = error
        elif error.code() == KafkaError._ALL_BROKERS_DOWN and self._down_since is None:
            self._down_since = time.monotonic()
        text = _CLIENT_ERROR_TIMING.sub("", error.str())
        if text not in self._logged_client_errors:
            self._logged_client_errors.add(text)
            log.warning("Kafka client: %s (logged once until the cluster answers)", text)

    def _check_client(self) -> None:
        """Stop with an error on a fatal client error or a cluster down for too long."""
        if self._fatal is not None:
            raise RenyiboostError(f"fatal Kafka client error: {self._fatal}")
        if self._down_since is None:
            return
        try:
            self.consumer.list_topics(timeout=min(5.0, self.settings.connect_timeout))
            self._down_since = None
            self._logged_client_errors.clear()
        except KafkaException as error:
            if time.monotonic() - self._down_since > self.settings.connect_timeout:
                raise _unreachable(self.settings, error) from None

    def close(self) -> None:
        try:
            self._close_publisher(self.publisher)
        finally:
            self.producer.flush(10)
            self.consumer.close()

    # ------------------------------------------------------------------ publishing
    def _on_output(self, event: InitEvent | RoundEvent) -> None:
        self._unpublished = True

    def _publish(self) -> None:
        """One :class:`ModelRelease` message per version not yet published."""
        if not self._unpublished:
            return
        try:
            published = publish_versions(self.publisher, self.settings, self.engine.release,
                                         self._published["version"],
                                         self.engine.release_version,
                                         self.engine.config.max_trees)
        except PublishFailed as failed:
            if failed.delivered is not None:
                self.engine.store.set_meta("published", failed.delivered)
            raise
        if published is not None:
            log.debug("published versions %d to %d of %r to %s",
                      self._published["version"] + 1, published["version"],
                      self.settings.model_name, self.settings.model_topic)
            self._published = published
            self._unpublished = published["version"] < self.engine.release_version
            self.engine.store.set_meta("published", published)

    def telemetry(self) -> dict[str, Any]:
        """Operator telemetry of the trainer and its engine (never publish this)."""
        return {"channel": "operator-telemetry", "consumed": self.consumed,
                "dead_letters": dict(self.dead_letters),
                "dead_letters_repeated": self.dead_letters_repeated,
                "empty_positions": self.empty_positions,
                "published_version": self._published["version"],
                "engine": self.engine.operator_telemetry().model_dump()}


#: The model topic's settings that keep every release: followers rebuild the model from all
#: of its versions, and the start check reads them for evidence of another ledger.
MODEL_TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}


#: The errors of a client that may not describe or create the model topic.
_NOT_AUTHORIZED = frozenset({KafkaError.TOPIC_AUTHORIZATION_FAILED,
                             KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                             KafkaError.POLICY_VIOLATION})


def _forever(limit: str) -> bool:
    """Whether a retention limit keeps everything: -1, or one too large to be reached
    (Kafka's longest, 2⁶³ − 1 ms, is 292 million years)."""
    try:
        return int(limit) < 0 or int(limit) >= 2**62
    except ValueError:
        return False


def ensure_dead_letter_topics(settings: KafkaSettings) -> None:
    """Create each event topic's dead-letter topic that does not exist, or refuse the start
    when it cannot be created: a trainer whose dead letters could not be delivered stopped
    at the first bad event, perhaps weeks in, and again at every restart on the same batch,
    its valid events never learned (review K2 #2). A client not allowed to list or create
    topics is warned, as for the model topic, and finds out at its first dead letter."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(settings.client())
    timeout = settings.connect_timeout
    try:
        present = admin.list_topics(timeout=timeout).topics
        missing = [dead_letter_topic(topic) for topic in settings.topics
                   if dead_letter_topic(topic) not in present]
        created = admin.create_topics([NewTopic(name, num_partitions=1) for name in missing]
                                      ) if missing else {}
        for name, future in created.items():
            try:
                future.result(timeout)
                log.info("created the dead-letter topic %r", name)
            except KafkaException as error:
                code = error.args[0].code()
                if code in _NOT_AUTHORIZED:
                    raise
                if code != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise RenyiboostError(f"cannot create the dead-letter topic {name!r} "
                                          f"({error.args[0].str()}): create it before the "
                                          "trainer starts") from None
    except KafkaException as error:
        if error.args[0].code() in _NOT_AUTHORIZED:
            log.warning("cannot check or create the dead-letter topics %s (%s): create them, "
                        "and let this client write to them, before the first bad event comes",
                        [dead_letter_topic(t) for t in settings.topics], error.args[0].str())
            return
        raise _unreachable(settings, error) from None


def keep_model_topic_forever(settings: KafkaSettings) -> None:
    """Create the model topic keeping every release (:data:`MODEL_TOPIC_CONFIG`, one
    partition) if it does not exist, and refuse one that deletes or compacts them.

    Kafka's defaults delete a topic's messages after 7 days (``retention.ms``) and a group's
    committed offsets after 7 days without members (``offsets.retention.minutes``). Once both
    were gone, a store restored with its record from an older backup passed every start
    check and re-published versions its followers already held, over trees they kept; a
    follower started later could not rebuild the model at all. A broker that reports no
    settings for the topic (Tansu reports only those set explicitly) is taken at its
    word, and a client not authorised to describe or create it is warned, not stopped
    (the trainer ran without these rights before this check)."""
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient(settings.client())
    topic, timeout = settings.model_topic, settings.connect_timeout
    try:
        if topic not in admin.list_topics(timeout=timeout).topics:
            created = admin.create_topics(
                [NewTopic(topic, num_partitions=1, config=MODEL_TOPIC_CONFIG)])
            try:
                created[topic].result(timeout)
                log.info("created the model topic %r keeping every release", topic)
                return
            except KafkaException as error:
                if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
        described = admin.describe_configs([ConfigResource("topic", topic)])
        configs = next(iter(described.values())).result(timeout)
    except KafkaException as error:
        if error.args[0].code() in _NOT_AUTHORIZED:  # a role without the rights: say so
            log.warning("cannot check that the model topic %r keeps every release (%s): "
                        "grant this client DescribeConfigs (and CreateTopics) on it, or make "
                        "sure it has %s", topic, error.args[0].str(), MODEL_TOPIC_CONFIG)
            return
        raise _unreachable(settings, error) from None
    found = {name: configs[name].value for name in MODEL_TOPIC_CONFIG if name in configs}
    wrong = {name: value for name, value in found.items() if value is not None and (
        "compact" in value if name == "cleanup.policy" else not _forever(value))}
    if wrong:
        raise LedgerConflict(
            f"the model topic {topic!r} does not keep every release ("
            + ", ".join(f"{name}={value}" for name, value in wrong.items())
            + "): followers rebuild the model from all of its versions, and the start check "
            "reads them to see that no other ledger trained this model. Set "
            + ", ".join(f"{name}={value}" for name, value in MODEL_TOPIC_CONFIG.items())
            + f" on it (kafka-configs --alter --entity-type topics --entity-name {topic} "
            "--add-config ...), or name a new model topic.")


def still_published(settings: KafkaSettings, published: dict[str, Any],
                    identity: StoreIdentity) -> tuple[dict[str, Any], list[ModelRelease] | None]:
    """``published`` (the store's record of its last release, :func:`published_to`) if the
    model topic still holds that release, with the releases read from it on (for
    :func:`check_model_topic`, which need not read them again); else version 0 and
    ``None``, so that every version is published again: a topic deleted and re-created (or
    emptied) got only the versions after the record, and every follower stalled for good at
    the first missing one, with no command to re-publish it. Re-publishing public releases costs no budget, and
    followers skip the versions they hold.

    The release itself is looked for, not only its offset: on a topic several models
    share, another model's re-publication after a re-creation moved the high watermark
    past this model's recorded offset. The watermarks are read uncommitted (another
    producer's open transaction holds the committed high watermark back), and a
    partition the re-created topic lacks is a lost release, not an unreachable broker."""
    if "offset" not in published:
        return published, None
    offset, partition = int(published["offset"]), int(published["partition"])
    consumer = Consumer(settings.client(**{
        "group.id": f"renyiboost-check-{uuid.uuid4().hex}", "enable.auto.commit": False,
        "isolation.level": "read_uncommitted"}))
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(settings.model_topic, partition), timeout=settings.connect_timeout)
    except KafkaException as error:
        if error.args[0].code() not in _NO_SUCH_PARTITION:
            raise _unreachable(settings, error) from None
        low = high = 0
    finally:
        consumer.close()
    if low <= offset < high:
        releases = model_releases(settings, {partition: offset})
        if (releases and releases[0].version == published["version"]
                and releases[0].store_id == identity.store_id):
            return published, releases
    log.warning("the model topic %r no longer holds the last published release (version %d "
                "at offset %d of partition %d; the partition holds %d to %d): it was "
                "re-created or emptied; publishing every version again", settings.model_topic,
                published["version"], offset, partition, low, high - 1)
    return {"version": 0}, None


#: The errors of a partition (or topic) the broker does not have.
_NO_SUCH_PARTITION = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC,
                                KafkaError.UNKNOWN_TOPIC_OR_PART})


def check_model_topic(settings: KafkaSettings, identity: StoreIdentity, release_version: int,
                      published: Mapping[str, Any],
                      releases: list[ModelRelease] | None = None) -> None:
    """Refuse to train a model whose topic shows another ledger (see the module docstring):
    releases from another store, versions this store has not committed, or a later epoch.
    ``releases``: those since ``published`` when the caller has just read them."""
    if releases is None:
        releases = model_releases(settings, {published["partition"]: published["offset"]}
                                  if "offset" in published else None)
    if not releases:
        return
    # any release of another store since this one's last, not only the newest version: a
    # store started later publishes from version 0 again
    foreign = next((r for r in releases if r.store_id != identity.store_id), None)
    if foreign is not None:
        raise LedgerConflict(
            f"the model topic {settings.model_topic!r} holds releases of model "
            f"{settings.model_name!r} from state store {foreign.store_id}, not from this "
            f"store ({identity.store_id}); their keys were charged in that store's ledger. "
            "Resume from that store, or publish a new model under a new name (which "
            "spends a new budget on the same people).")
    newest = max(releases, key=lambda release: release.version)
    if newest.version > release_version:
        raise LedgerConflict(
            f"the model topic holds version {newest.version} of {settings.model_name!r} but "
            f"this store has committed only {release_version}: the store lost "
            "commits (an old backup, a lost write-ahead log), so published trees were "
            "paid from budgets it no longer records. Refusing to charge those keys again.")
    latest_epoch = max((r.epoch for r in releases if r.epoch is not None), default=None)
    if latest_epoch is not None and latest_epoch >= identity.epoch:
        raise LedgerConflict(
            f"the model topic holds a release of epoch {latest_epoch} of this store, and "
            f"this process opened epoch {identity.epoch}: another copy of the store is "
            "running (or ran later)")


def model_publisher(settings: KafkaSettings, check: Callable[[], None]) -> Producer:
    """The model topic's producer: transactional, with one ``transactional.id`` a model
    topic and model name, so that the broker fences the publisher of any trainer started
    earlier for the model (its next publish fails, and it stops with
    :class:`~renyiboost.exceptions.LedgerConflict`): two trainers never both publish, whether
    the second came with a store of its own or a copy of the first's live store. ``check``
    (the start's model-topic check) runs again once the fence is up, so nothing the fenced
    trainer published before it goes unseen."""
    producer = Producer(settings.client(**{
        "transactional.id": f"renyiboost.{settings.model_topic}.{settings.model_name}",
        "linger.ms": 5}))
    try:
        producer.init_transactions(settings.connect_timeout)
    except KafkaException as error:
        raise _unreachable(settings, error) from None
    check()
    return producer


#: The errors of a transactional publisher fenced by a newer one with its
#: ``transactional.id`` (librdkafka's own, and the broker's two).
FENCE_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                         KafkaError.INVALID_PRODUCER_EPOCH})

@contextmanager
def _transaction(producer: Producer, settings: KafkaSettings) -> Iterator[None]:
    """The block's messages in one transaction: a fenced publisher (another trainer has
    started for the model) is a :class:`LedgerConflict`; a transaction that fails
    otherwise once begun is aborted, so a reader that reads committed messages sees none of
    it, and the next publish begins a new one (a message refused locally, e.g. too large,
    once left it open, and every later try failed with "not valid in state InTransaction",
    which hid the first reason)."""
    begun = False
    try:
        producer.begin_transaction()
        begun = True
        yield
        producer.commit_transaction(settings.connect_timeout)
    except BaseException as failure:
        # confluent-kafka 2.16 has raised a fatal error during a flush as the cause of a
        # SystemError from a delivery callback
        kafka = failure if isinstance(failure, KafkaException) else (
            failure.__cause__ if isinstance(failure, SystemError) else None)
        if not isinstance(kafka, KafkaException):
            kafka = None
        elif (fence := kafka.args[0].code() in FENCE_CODES) or kafka.args[0].fatal():
            # a fatal error is most often the fence, but produce() reports any as "Local:
            # Fatal error": the reason is named, for the operator to tell which
            raise LedgerConflict(
                ("another trainer has started" if fence else
                 f"the publisher failed for good ({kafka.args[0].str()}); most often, "
                 "another trainer has started")
                + f" for model {settings.model_name!r} on {settings.model_topic!r} and "
                "fenced this one's publisher: two trainers would each spend their own ledger "
                "on the same people. This trainer stops; its versions not yet published stay "
                "unpublished.") from None
        if begun or (kafka is not None and kafka.args[0].txn_requires_abort()):
            # any failure of a begun transaction (a full local queue too), or the next
            # begin fails "not valid in state InTransaction" and hides this one
            with suppress(KafkaException):
                producer.abort_transaction(settings.connect_timeout)
        if kafka is not None:
            raise kafka from None
        raise


def publish_versions(producer: Producer, settings: KafkaSettings,
                     release: Callable[..., ModelRelease], published: int,
                     current: int, max_trees: int | None = None) -> dict[str, Any] | None:
    """Produce versions ``published + 1 … current`` of the model (``release(model, after,
    upto)``) to the model topic, one message each, in one transaction of ``producer`` (a
    :func:`model_publisher`); returns the new ``published`` record
    (version, partition, offset of the last) for the versions delivered *without a gap*
    from ``published + 1`` on, else ``None``.

    Under a tree cap (the engine's ``max_trees``) a publisher more than ``max_trees``
    versions behind (many triggers in one poll, a burst, a broker away) would send versions
    whose trees the engine has dropped: a follower then held a model the trainer never
    had until newer versions brought the cap's trees. Then one message of the current
    version carries the cap's trees, which a follower takes whole
    (:meth:`ModelFollower._continues`).

    A release whose trees may not fit in half the producer's ``message.max.bytes`` (the
    cap's trees) goes in parts (:func:`~renyiboost.release.release_parts`, which counts
    every DP value at its longest text), in the same transaction, so a follower reads all
    of them or none: one message of 500 trees of depth 6 was 1.4 MB, over librdkafka's
    default of 1,000,000 bytes, and every restart stopped with :class:`PublishFailed`
    (review K, 29 November). Half leaves room for the message's own overhead and a broker
    or topic limit below the producer's.

    A version not delivered is never counted as published, even when later ones arrived: a
    follower cannot pass the missing version. One still queued when the flush times out is
    sent again (with the ones after it) at the next publish; one whose delivery failed
    (librdkafka reports that after its own retries) stops the trainer with
    :class:`PublishFailed`, the versions before it recorded, rather than leave every
    follower stalled behind a gap nobody knows of."""
    outcome: dict[tuple[int, int], tuple[int, int] | KafkaError] = {}
    part_bytes = int(settings.extra.get("message.max.bytes", MESSAGE_MAX_BYTES)) // 2
    n_parts: dict[int, int] = {}

    def on_delivery(version: int, part: int, error: KafkaError | None,
                    message: Message) -> None:
        outcome[version, part] = error if error is not None else (message.partition(),
                                                                  message.offset())

    versions = (range(current, current + 1) if max_trees is not None
                and current - published > max_trees else range(published + 1, current + 1))
    try:
        with _transaction(producer, settings):
            after = published
            for version in versions:
                messages = release_parts(release(settings.model_name, after=after,
                                                 upto=version), part_bytes)
                n_parts[version] = len(messages)
                for part, message in enumerate(messages):
                    producer.produce(settings.model_topic, key=settings.model_name.encode(),
                                     value=message.model_dump_json().encode(),
                                     on_delivery=functools.partial(on_delivery, version, part))
                after = version
            producer.flush(settings.connect_timeout)
    except KafkaException as failure:  # the transaction is aborted: none of it is visible
        raise PublishFailed(versions[0], None, failure.args[0].str()) from None
    record = None
    for version in versions:
        results = [outcome.get((version, part)) for part in range(n_parts[version])]
        failed = next((r for r in results if isinstance(r, KafkaError)), None)
        if failed is not None:  # librdkafka reports it after its own retries
            raise PublishFailed(version, record, failed.str())
        result = results[-1]
        if None in results:  # still queued when the flush timed out
            break  # sent again next time
        record = {"version": version, "partition": result[0], "offset": result[1],
                  "topic": settings.model_topic, "model": settings.model_name}
    return record


def published_to(record: Mapping[str, Any] | None,
                 settings: KafkaSettings) -> dict[str, Any]:
    """A store's record of the last published version, if it is this model topic's and
    name's; else version 0, so every version is published again here. A restart with
    another model topic or name once published only the versions after the record, and
    every follower of the new topic stalled for good at the first (re-publishing public
    releases costs no budget). A record written before records named their topic counts
    as another topic's: an upgrade that also moved the model topic would have published
    only the later versions there, and on the same topic followers skip the versions they
    hold."""
    if record is None or (record.get("topic"), record.get("model")) != (
            settings.model_topic, settings.model_name):
        return {"version": 0}
    return dict(record)


class PublishFailed(RenyiboostError):
    """A model version was not delivered (too large, not authorised, timed out after the
    client's retries): the trainer records what was delivered before it and stops, since
    every follower would wait at the version before it; a restart sends it again."""

    def __init__(self, version: int, delivered: dict[str, Any] | None, reason: str) -> None:
        super().__init__(f"model version {version} could not be published to the model "
                         f"topic: {reason}; the versions before it are published, and the "
                         "trainer stops so that followers do not wait at a gap")
        self.version, self.delivered, self.reason = version, delivered, reason

    def __reduce__(self) -> tuple[type, tuple[int, dict[str, Any] | None, str]]:
        return type(self), (self.version, self.delivered, self.reason)  # as built


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of ``data`` (the Java client's ``Utils.murmur2``, seed
    ``0x9747b28c``), as an unsigned 32-bit number. Written out here because no package
    the project already uses exposes it.

    >>> murmur2(b"21") - 2**32, murmur2(b"abc")  # Kafka's UtilsTest: -973932308, 479470107
    (-973932308, 479470107)
    """
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = 0x9747B28C ^ length
    for start in range(0, length - length % 4, 4):
        k = int.from_bytes(data[start:start + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[length - length % 4:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h = ((h ^ tail[0]) * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    return h ^ (h >> 15)


def key_partition(key: bytes, partitions: int, partitioner: str) -> int:
    """The partition of ``partitions`` that ``partitioner`` (librdkafka's name) gives a
    message key: ``consistent_random``, CRC-32 of its bytes (librdkafka's default, so
    confluent-kafka's), or ``murmur2_random``, murmur2 with the sign bit cleared (the Java
    client's default).

    >>> key_partition(b"21", 10, "murmur2_random"), key_partition(b"21", 10, "consistent_random")
    (0, 2)
    """
    if partitioner == "consistent_random":
        return zlib.crc32(key) % partitions
    if partitioner == "murmur2_random":
        return (murmur2(key) & 0x7FFFFFFF) % partitions
    raise ValueError(f"unknown partitioner {partitioner!r}")


def _shard_trainer(settings: KafkaSettings, event_format: EventFormat | None,
                   partition_map: dict[str, list[int]], engine: StreamEngine, k: int,
                   n: int) -> KafkaTrainer:
    shards = {shard for owners in partition_map.values() for shard in owners}
    if not shards <= set(range(n)):
        raise ValueError(f"the partition map names shards {sorted(shards)}, not 0..{n - 1}")
    return KafkaTrainer(engine, settings, event_format, shard=k, partition_map=partition_map)


def partition_map_for(settings: KafkaSettings, n_shards: int) -> dict[str, list[int]]:
    """The default partition → shard map of the topics (see
    :func:`~renyiboost.stream.sharded.default_partition_map`)."""
    consumer = Consumer(settings.client(**{"group.id": settings.group_id}))
    try:
        counts = _partition_counts(consumer, settings)
    finally:
        consumer.close()
    return default_partition_map(counts, n_shards)


def _topic_ids(settings: KafkaSettings) -> dict[str, str]:
    """Each event topic's id (Kafka 2.8 on; a re-created topic has a new one), or none
    for a topic whose cluster does not say: then a topic re-created while the trainer was
    away is seen only when its offsets go back below the store's."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    try:
        admin = AdminClient(settings.client())  # kept until the answers are in
        futures = admin.describe_topics(TopicCollection(list(settings.topics)),
                                        request_timeout=settings.connect_timeout)
        ids = {topic: str(future.result(timeout=settings.connect_timeout).topic_id or "")
               for topic, future in futures.items()}
    except Exception as error:  # noqa: BLE001 - best effort: not every broker answers
        log.warning("could not read the event topics' ids (%s): a topic re-created while "
                    "the trainer is away is seen only if its offsets go back", error)
        return {}
    # the zero id (all "A" in base64) is a cluster's that keeps no topic ids
    return {topic: id_ for topic, id_ in ids.items() if id_ and set(id_) != {"A"}}


def _partition_counts(consumer: Consumer, settings: KafkaSettings) -> dict[str, int]:
    """The number of partitions of each event topic (every topic must exist)."""
    try:
        metadata = consumer.list_topics(timeout=settings.connect_timeout)
    except KafkaException as error:
        raise _unreachable(settings, error) from None
    counts: dict[str, int] = {}
    for topic in settings.topics:
        meta = metadata.topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise RenyiboostError(
                f"topic {topic!r} does not exist at {settings.bootstrap_servers}; create it "
                "(with its final number of partitions) before training")
        counts[topic] = len(meta.partitions)
    return counts


class ShardedKafkaTrainer(_Loop):
    """The coordinator of a sharded Kafka deployment: it drives the shards' own trainers
    (each :meth:`KafkaTrainer.for_shard`, reading its partitions of the map), runs the
    public schedule over their summed positions, and publishes the global model.

    Publishing follows the single trainer: a version goes to the model topic only once
    every shard committed it, as one :class:`~renyiboost.release.ModelRelease` message; the
    releases name shard 0's store and epoch, and the published version is recorded there.
    At start the model topic is checked as for a single trainer (another ledger's releases,
    versions the shards have not committed, a later epoch: refused).
    """

    def __init__(self, engine: ShardedEngine, settings: KafkaSettings) -> None:
        self.engine = engine
        self.settings = settings
        self.stopping = False
        self.consumed = 0
        keep_model_topic_forever(settings)
        self._published, releases = still_published(
            settings, published_to(engine.shards.one(0, "get_meta", "published"), settings),
            engine.identity)

        def check() -> None:
            check_model_topic(settings, engine.identity, engine.release_version,
                              self._published)

        check_model_topic(settings, engine.identity, engine.release_version, self._published,
                          releases)
        self.producer = model_publisher(settings, check)
        self._unrecorded = False

    def poll_once(self) -> int:
        """Every shard reads one bounded batch; the triggers fire; new versions are
        published. Returns the positions added."""
        added = self.engine.poll()
        self.consumed += added
        self.publish()
        return added

    def _publish(self) -> None:
        engine = self.engine
        if self._unrecorded:
            self._record_published()
        if engine.release_version <= self._published["version"]:
            return
        try:
            published = publish_versions(self.producer, self.settings, engine.release,
                                         self._published["version"], engine.release_version,
                                         engine.config.max_trees)
        except PublishFailed as failed:
            if failed.delivered is not None:
                self._published = failed.delivered
                self._record_published()
            raise
        if published is not None:
            self._published = published
            self._record_published()

    def _record_published(self) -> None:
        """Record the published version in shard 0's store; if shard 0 is down, it is
        recorded at the next publish (this process knows it: nothing is sent twice)."""
        try:
            self.engine.shards.one(0, "set_meta", "published", self._published)
            self._unrecorded = False
        except ShardUnavailable as error:
            self._unrecorded = True
            self.engine.recover(error)

    def close(self) -> None:
        self._close_publisher(self.producer)

    def telemetry(self) -> dict[str, Any]:
        """Operator telemetry of the coordinator and every shard (never publish this)."""
        return {**self.engine.operator_telemetry(), "consumed": self.consumed,
                "published_version": self._published["version"]}


class ReleaseGap(RenyiboostError):
    """A release that does not continue the follower's version: applying it would serve a
    model without the trees of the versions in between."""


class ModelFollower:
    """Serves predictions from the model topic's releases (no state store needed).

    Reads the topic from the beginning and applies releases in version order; a repeated or
    older version (a re-publish after a crash) is ignored, and so is a release from another
    store than the first one applied (a second ledger's trees are not this model's). A
    message under the model's key that is not a release (a tombstone, foreign JSON) is logged
    and skipped.

    A release must continue the current version (the next version, or a release that holds
    every tree the follower lacks): the versions of a model are the steps of one sum of trees,
    and a follower that jumped one would answer without its tree, silently. On a gap the
    follower re-reads the topic from the beginning, once per version it holds; if the missing
    version is not there either, it keeps its version (whole and consistent) and says why in
    :attr:`stalled` until a release continues it (a re-publish, a full release).
    """

    def __init__(
        self, bootstrap_servers: str, model_topic: str, model_name: str = "model",
        extra: Mapping[str, str] | None = None,
    ) -> None:
        self._start(model_name)
        self.model_topic = model_topic
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap_servers, "logger": log, **(extra or {}),
            "group.id": f"renyiboost-follower-{uuid.uuid4().hex}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "isolation.level": "read_committed",  # an aborted publish is never applied
            "error_cb": self._on_client_error,
        })
        self.consumer.subscribe([model_topic])

    def _on_client_error(self, error: KafkaError) -> None:
        """Keep the client's last error (an unreachable cluster, a missing topic) for
        :meth:`waiting_reason`: ``serve`` once answered "waiting" with no word of it. Its
        text goes to the log (once while it repeats), never into a public answer."""
        self._note_client_error(error.str())

    def _note_client_error(self, text: str) -> None:
        if self.client_error is None or self.client_error[0] != text:
            log.warning("the model topic %r cannot be read: %s", self.model_topic, text)
        self.client_error = (text, time.monotonic())

    @classmethod
    def without_consumer(cls, model_name: str = "model") -> ModelFollower:
        """A follower that reads no topic: its caller hands it the releases in order
        (``_apply``), as the tests of the release paths do without a broker."""
        follower = cls.__new__(cls)
        follower._start(model_name)
        return follower

    def _start(self, model_name: str) -> None:
        """The state of a follower that has applied nothing."""
        self.model_name = model_name
        self.version = 0
        self.store_id: str | None = None
        self.ensemble: Ensemble | None = None
        self.validator: RecordValidator | None = None
        self.task = "regression"
        self.guarantee: PrivacyGuarantee | None = None
        self._next_round = 0
        #: Under a tree cap, the round of each tree the ensemble holds, in its order
        #: (:meth:`lacking_trees`; at most the cap and a release's trees). Without a cap the
        #: rounds are 0 … n − 1 and are not kept: a copy of them every version was the cost
        #: the ensemble's doubling buffers avoid (15,000 trees, 1,000 versions: 23 GB).
        self._rounds = np.zeros(0, dtype=np.int64)
        self._spans: list[float] | None = None  # the release's smoothing spans
        #: The last applied release without its trees: the version's schema, parameters,
        #: guarantee and post-processing, for :meth:`release`.
        self._last: ModelRelease | None = None
        #: Why the follower cannot move past :attr:`version` (the model topic lacks the
        #: versions after it), or ``None``; ``renyiboost serve`` answers 503 with it.
        self.stalled: str | None = None
        #: Messages under the model's key that were not releases and were skipped (messages
        #: of the public model topic, not counts of data).
        self.not_releases = 0
        #: The version at which the follower last re-read the topic for a missing version.
        self._reread_at: int | None = None
        #: Other models' names seen on the topic (message keys, public): a follower of a
        #: misspelt name waited in silence; now it logs them and ``/health`` names them.
        self.other_models: set[str] = set()
        #: The Kafka client's last error and when (cleared by a message; an error older
        #: than :data:`CLIENT_ERROR_FRESH` seconds is not reported).
        self.client_error: tuple[str, float] | None = None
        #: The parts read so far of a release sent in parts (:meth:`_gathered`).
        self._parts: list[ModelRelease] = []

    def poll(self, timeout: float = 1.0, max_messages: int = 1000,
             lock: AbstractContextManager[Any] | None = None) -> int:
        """Apply the releases available now; returns how many were applied (see the class
        docstring for messages that are not releases and for gaps). ``lock`` (a server's)
        is held for one message at a time and never while waiting for the broker: held for
        a whole batch, a follower catching up blocked ``/health`` for seconds."""
        applied = 0
        for message in self.consumer.consume(max_messages, timeout):
            with lock if lock is not None else nullcontext():
                taken = self._take(message)
            if taken is None:
                break  # the rest of this batch comes again, from the beginning
            applied += taken
        return applied

    def _take(self, message: Message) -> int | None:
        """Apply one message of the topic: 1 when it was this model's next release, 0 when
        it was skipped, ``None`` when a gap made the follower seek back to the beginning."""
        if message.error():
            if message.error().code() != KafkaError._PARTITION_EOF:
                self._note_client_error(message.error().str())
            return 0
        self.client_error = None
        if message.key() != self.model_name.encode():
            self._other_model(message)
            return 0
        release = self._release_of(message)
        if release is None:
            return 0
        if self.store_id is not None and release.store_id != self.store_id:
            log.error("ignoring a release of %r from store %s (following store %s)",
                      self.model_name, release.store_id, self.store_id)
            return 0
        if release.version <= self.version:
            return 0
        if release.part is not None:
            release = self._gathered(release, message)
            if release is None:
                return 0
        try:
            self._apply(release)
        except ReleaseGap as gap:
            return None if self._reread(gap) else 0
        except ValueError as error:  # whole in itself, but not this model's shape
            self.not_releases += 1
            log.warning("skipping %s:%d@%d, a release of model %r that does not fit the "
                        "model followed (%s)", message.topic(), message.partition(),
                        message.offset(), self.model_name, error)
            return 0
        return 1

    def _gathered(self, part: ModelRelease, message: Message) -> ModelRelease | None:
        """The whole release once ``part`` is the last of its parts (read in order, as one
        transaction wrote them), else ``None`` (kept until the rest arrives). Parts that are
        not the ``n`` of one release (one lost, or a re-read after a gap began again) are
        dropped at the last (:func:`~renyiboost.release.joined_parts`) or when a first part
        comes; the version then comes again or the next version's gap says what is
        missing. Kept parts hold at most the version's whole model together."""
        k, n = part.part or (1, 1)
        if k == 1:
            self._parts = []
        self._parts.append(part)
        if sum(len(p.trees) for p in self._parts) > part.whole_trees:
            self._parts = []
            why = "more trees than the version's whole model holds"
        elif k < n:
            return None
        else:
            parts, self._parts = self._parts, []
            try:
                return joined_parts(parts)
            except ValueError as error:
                why = str(error)
        self.not_releases += 1
        log.warning("skipping the parts of version %d of %r read up to %s:%d@%d: %s",
                    part.version, self.model_name, message.topic(), message.partition(),
                    message.offset(), why)
        return None

    def _other_model(self, message: Message) -> None:
        """Note a release of another model on the topic (logged once a name, a few names):
        only a message that is a release of the model its key names. The names reach the
        public ``/health``, and a model topic pointed at an event or dead-letter topic showed
        its message keys there, person ids (review K2 #5)."""
        other = (message.key() or b"").decode("utf-8", "replace")[:100]
        if other in self.other_models or len(self.other_models) >= 20:
            return
        try:
            release = ModelRelease.model_validate_json(message.value() or b"")
        except ValidationError:
            return
        if release.model == other:
            self.other_models.add(other)
            log.warning("the model topic holds releases of %r; this follower follows %r "
                        "(--model-name)", other, self.model_name)

    def unreadable(self) -> bool:
        """Whether the Kafka client reported an error in the last
        :data:`CLIENT_ERROR_FRESH` seconds without a message since (the cluster is
        unreachable, the topic missing): newer versions may exist that this follower
        cannot see."""
        error = self.client_error
        return error is not None and time.monotonic() - error[1] < CLIENT_ERROR_FRESH

    def waiting_reason(self) -> str | None:
        """Why no version arrived yet, where the topic says more than "nothing yet"."""
        if self.version:
            return None
        if self.unreadable():
            return f"the model topic cannot be read yet ({CLIENT_ERROR_LOGGED})"
        if not self.other_models:
            return None
        return (f"no release of {self.model_name!r} on the model topic yet; it holds releases "
                f"of {sorted(self.other_models)!r}: check --model-name")

    def _release_of(self, message: Message) -> ModelRelease | None:
        """The release in ``message``, or ``None`` (logged) for a message that is not one: one
        bad message must not cost the follower the rest of its batch."""
        value = message.value()
        if value is None:
            why = "a tombstone, no value"
        else:
            try:
                return ModelRelease.model_validate_json(value)
            except ValidationError as error:
                first = error.errors()[0]
                why = (f"{error.error_count()} validation errors, the first at "
                       f"{'.'.join(map(str, first['loc'])) or 'the top'}: {first['msg']}")
        self.not_releases += 1
        log.warning("skipping %s:%d@%d under the key of model %r: not a release (%s)",
                    message.topic(), message.partition(), message.offset(), self.model_name,
                    why)
        return None

    def _reread(self, gap: ReleaseGap) -> bool:
        """Seek every partition back to its beginning to find the versions missing before a
        release (once per version the follower holds); returns whether it did. When the
        re-read meets the gap again, the topic lacks them: :attr:`stalled` says so."""
        if self._reread_at != self.version:
            try:
                for tp in self.consumer.assignment():
                    self.consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                      OFFSET_BEGINNING))
            except KafkaException as error:
                log.warning("could not re-read %s from the beginning: %s", self.model_topic,
                            error)
            else:
                self._reread_at = self.version
                self._parts = []
                log.warning("%s; re-reading %s from the beginning", gap, self.model_topic)
                return True
        if self.stalled is None:
            self.stalled = (f"{gap} from the model topic {self.model_topic!r}, also after "
                            "re-reading it; the follower stays at its version until a release "
                            "continues it (a trainer restarted on its store publishes every "
                            "version again to a topic that lost its last release)")
            log.error("%s", self.stalled)
        return False

    def wait_for(self, version: int, timeout: float = 30.0) -> None:
        """Poll until the follower has ``version`` (raises ``TimeoutError``)."""
        deadline = time.monotonic() + timeout
        while self.version < version:
            if time.monotonic() > deadline:
                raise TimeoutError(f"model version {version} not seen (have {self.version}"
                                   + (f"; {self.stalled}" if self.stalled else "") + ")")
            self.poll(0.5)

    def _continues(self, release: ModelRelease) -> bool:
        """Whether ``release`` brings the follower from :attr:`version` to its own with every
        tree in between: the next version (the model topic's one message a version), or a
        release holding every round the follower lacks up to its own (version ``r + 2`` is
        the tree of round ``r``) except those its ``max_trees`` drops anyway."""
        if release.version == self.version + 1:
            return True
        newest = release.version - 2
        lacking = max(self.version - 1, 0)
        if release.max_trees is not None:
            lacking = max(lacking, newest - release.max_trees + 1)
        # counted, not listed: the trees are in order, each round once (the release's
        # validator), and a set of the rounds was as large as a message's version claimed
        # (one message of version 3·10⁷ held the service's lock for 5 s and 2.5 GB)
        held = sum(lacking <= tree.round <= newest for tree in release.trees)
        return held == max(newest - lacking + 1, 0)

    def _check_fits(self, release: ModelRelease) -> None:
        """``ValueError`` (the release is skipped) for a release of the followed store that
        is not of the followed model's shape: another task, depth, schema or tree cap (its
        trees fit its own schema, and applied, every answer failed), or the next version
        without its round's tree where no tree cap dropped it."""
        followed = self._last
        if followed is not None:
            for name in ("task", "depth", "public_schema", "max_trees"):
                if getattr(release, name) != getattr(followed, name):
                    raise ValueError(f"its {name} is not the followed model's")
        if (release.version == self.version + 1 and release.version >= 2
                and release.max_trees is None
                and not any(tree.round == release.version - 2 for tree in release.trees)):
            raise ValueError(f"version {release.version} lacks the tree of its round "
                             f"{release.version - 2}")

    def _apply(self, release: ModelRelease) -> None:
        """Add a release that continues the current version; raises :class:`ReleaseGap`
        (and changes nothing) for one that does not, ``ValueError`` for one not of the
        followed model's shape (:meth:`_check_fits`)."""
        self._check_fits(release)
        if not self._continues(release):
            first, last = self.version + 1, release.version - 1
            missing = (f"version {first} is" if first == last
                       else f"versions {first} to {last} are")
            raise ReleaseGap(f"version {release.version} of model {self.model_name!r} does "
                             f"not follow version {self.version}: {missing} missing")
        first = self.ensemble is None
        if first:
            # the first release is set up whole or not at all (below): one that failed
            # part-way once left its schema and store behind, served as version 0, and every
            # real release was refused as another store's (review P #1)
            schema = PublicSchema(**release.public_schema)
            validator = RecordValidator(schema, release.task)
            ens = Ensemble.for_schema(schema, release.depth, release.smoothing,
                                      spans=release.smoothing_spans)
            self._spans = release.smoothing_spans
        else:
            ens = self.ensemble
        if release.smoothing_spans != self._spans:  # a hinted stream released its grid
            ens.shifts = input_shifts(PublicSchema(**release.public_schema), release.smoothing,
                                      spans=release.smoothing_spans)
            self._spans = release.smoothing_spans
        new = [tree for tree in release.trees if tree.round >= self._next_round]
        if new:  # all of a release's trees or none (Ensemble.extend): nothing half-applied
            ens.extend([tree.features for tree in new], [tree.thresholds for tree in new],
                       [tree.leaves for tree in new])
            self._next_round = new[-1].round + 1
            if release.max_trees is not None:
                self._rounds = np.concatenate([self._rounds, [tree.round for tree in new]])
        ens.init_score = score_value(release.init_score)
        ens.answer_map = release.answer_map
        if release.max_trees is not None:
            ens.keep_last(release.max_trees)
            self._rounds = self._rounds[-release.max_trees:]
        # rounds up to version - 2 are in, or dropped by max_trees for good
        self._next_round = max(self._next_round, release.version - 1)
        if first:
            self.validator, self.task, self.store_id = validator, release.task, release.store_id
            self.ensemble = ens
        self.version = release.version
        self.guarantee = release.guarantee
        self._last = release.model_copy(update={"trees": []})
        self.stalled = None

    def lacking_trees(self) -> int:
        """Trees of the current version's model that the follower does not hold: a
        publisher that lagged behind a tree cap (``max_trees``) sent versions whose trees
        its engine had already dropped, so until newer versions bring the cap's worth of
        trees, the follower's model is one the trainer never had."""
        if self._last is None or self.ensemble is None:
            return 0
        whole, newest = self._last.whole_trees, self.version - 2  # _last: this version's
        if self._last.max_trees is None:  # each version brought its own tree (_check_fits)
            return whole - self.ensemble.n_trees
        # rounds, not a count: a follower holding a full cap took a version without trees
        # and answered from the cap's older rounds (review V, 29 November)
        held = int(np.count_nonzero((self._rounds > newest - whole) & (self._rounds <= newest)))
        return max(whole - held, len(self._rounds) - held)

    def release(self) -> ModelRelease:
        """The whole model of the current version as one public release, as the engine's
        ``release()`` gives it: the last applied release's schema, parameters, guarantee and
        post-processing with every tree the follower holds (the newest ``max_trees`` where it
        keeps only those). An export from the model topic alone: ``to_onnx``,
        ``SGBDT.from_json``; a model-topic message holds only its own version's output.
        Raises ``LookupError`` before the first version."""
        if self._last is None or self.ensemble is None:
            raise LookupError("no model version received yet")
        ens = self.ensemble
        return self._last.model_copy(update={"trees": released_trees(
            ens.features, ens.thresholds, ens.leaves,
            max(self.version - 1, 0) - ens.n_trees)}).check_whole()

    def predict_margin(self, rows: list[Mapping[str, Any]]) -> np.ndarray:
        if self.ensemble is None or self.validator is None:
            raise RuntimeError("no model version received yet")
        return self.ensemble.predict_margin(self.validator.rows(rows))

    def answers(self, margin: np.ndarray) -> tuple[list[Any], np.ndarray | None]:
        """Predictions from the current version's margins: target values (regression), or
        labels of the public label set with their class probabilities (one column a class,
        in ``schema.classes`` order), the label decided on the margins as every other path
        decides it (:func:`~renyiboost.models.losses.class_codes`)."""
        schema = self.validator.schema  # type: ignore[union-attr]
        if self.task == "regression":
            return unscale_margin(margin, schema.target_bounds).tolist(), None
        classes = schema.classes
        return [classes[c] for c in class_codes(margin).tolist()], class_probabilities(margin)

    def predict_one(self, x: Mapping[str, Any]) -> Any:
        """The target value, or the most probable label of the public label set."""
        return self.answers(self.predict_margin([x]))[0][0]

    def predict_proba_one(self, x: Mapping[str, Any]) -> dict[Any, float]:
        """``{label: probability}`` over the public label set (``False``/``True`` without
        one)."""
        if self.task != "classification":
            raise TypeError("predict_proba_one is for a classifier's releases")
        _, proba = self.answers(self.predict_margin([x]))
        return dict(zip(self.validator.schema.classes, proba[0].tolist(), strict=True))  # type: ignore[union-attr,index]

    def close(self) -> None:
        self.consumer.close()
