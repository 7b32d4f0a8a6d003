"""Kafka: train continuously from a topic, publish model updates, dead-letter bad events.

* :class:`KafkaTrainer` consumes event topics in a consumer group and feeds the engine. The
  source offsets live in the **state store** and are committed in the same SQLite
  transaction as the round that consumed them (the Kafka Streams / Flink pattern); on
  (re)assignment the consumer seeks to them, and Kafka's own group commits are only
  informational. After a crash at any moment no event is trained twice or skipped.
* Every committed round is published to the model topic (keyed by the model name) as a
  :class:`ModelUpdate` carrying the new trees, the privacy report and a version (the number
  of rounds). Publishing happens after the commit, so no published tree was ever unpaid for;
  a crash between the two re-publishes on restart, and followers ignore versions they have.
* :class:`ModelFollower` rebuilds the model from the model topic and serves predictions
  without access to the state store or the raw events.
* Events that fail to parse or validate go to ``<topic>.dlq`` with the reason and the source
  topic/partition/offset in headers, and are counted per reason; the stream never stops.
  A batch's dead letters are delivered before any offset past them commits.
* A poll batch is validated in one pydantic call and reaches the engine as columns (one
  ``add`` per batch); see :meth:`EventParser.parse_batch`.

Nothing here is broker-specific: it uses plain consumer groups, keyed produce and headers
(Kafka ≥ 2.8), never transactions.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)
from pydantic import BaseModel, ConfigDict, Field
from scipy.special import expit

from renyiboost.connectors.events import (
    EventFormat,
    EventParser,
    Rejected,
    cycle_collector_paused,
)
from renyiboost.models.losses import unscale_margin
from renyiboost.models.trees import Ensemble
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import StreamEngine
from renyiboost.stream.store import InitEvent, RoundEvent

UPDATE_FORMAT = "renyiboost.update/1"
#: Consumer errors that are states, not failures: end of a partition, a topic not created yet.
_TRANSIENT = (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART)


class KafkaSettings(BaseModel):
    """Connection and topics. ``extra`` is passed through to librdkafka (security etc.)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str
    topics: list[str]
    group_id: str = "renyiboost"
    model_topic: str = "renyiboost.models"
    model_name: str = "model"
    batch_size: int = Field(1000, ge=1, description="messages per poll (bounded memory)")
    poll_timeout: float = Field(0.5, gt=0)
    session_timeout_ms: int = Field(6000, ge=1000)
    dlq_timeout: float = Field(
        30.0, gt=0, description="seconds to wait for a batch's dead letters to be delivered")
    extra: dict[str, str] = Field(default_factory=dict)

    def client(self, **more: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_servers, **self.extra, **more}


class TreeUpdate(BaseModel):
    round: int
    features: list[int]
    thresholds: list[float]
    leaves: list[float]


class ModelUpdate(BaseModel):
    """One published model version: the trees added since the previous version."""

    format: str = UPDATE_FORMAT
    model: str
    version: int  # rounds done; a follower applies versions in order and skips old ones
    task: str
    depth: int
    public_schema: dict[str, Any]
    init_score: float
    max_trees: int | None
    trees: list[TreeUpdate]
    privacy: dict[str, Any]


class KafkaTrainer:
    """Consume events, train the engine, publish updates, dead-letter bad events.

    Parameters
    ----------
    engine
        The engine (with a durable store for exactly-once: the offsets live there).
    settings
        Connection, topics and model topic.
    event_format
        Field names and the size limit of events.
    """

    def __init__(
        self, engine: StreamEngine, settings: KafkaSettings,
        event_format: EventFormat | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.parser = EventParser(engine.schema, engine.check_label, event_format,
                                  labels_ok=engine.label_ok)
        self.dead_letters: Counter[str] = Counter()
        self.consumed = 0
        self.stopping = False
        self.consumer = Consumer(settings.client(**{
            "group.id": settings.group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": settings.session_timeout_ms,
        }))
        self.producer = Producer(settings.client(**{"enable.idempotence": True, "linger.ms": 5}))
        self.consumer.subscribe(settings.topics, on_assign=self._on_assign)
        engine.listeners.append(self._on_output)
        self._published = int(engine.store.get_meta("published_version") or 0)
        self._unpublished = engine.booster.rounds_done > self._published
        self.assigned = False
        self._partition_names: dict[tuple[str, int], str] = {}
        self._undelivered: list[str] = []

    # ------------------------------------------------------------------ offsets
    def _on_assign(self, consumer: Consumer, partitions: list) -> None:
        """Seek every assigned partition to the offset committed with the last round."""
        offsets = self.engine.offsets
        for tp in partitions:
            stored = offsets.get(f"{tp.topic}:{tp.partition}")
            tp.offset = int(stored) if stored is not None else OFFSET_BEGINNING
        consumer.assign(partitions)
        self.assigned = True

    # ------------------------------------------------------------------ the loop
    def poll_once(self) -> int:
        """Consume one bounded batch and feed it to the engine; returns the messages read."""
        messages = self.consumer.consume(self.settings.batch_size, self.settings.poll_timeout)
        with cycle_collector_paused(), self.engine.group_commit():
            self._process(messages)
        self.consumed += len(messages)
        self.publish()
        if messages and self.engine.offsets:
            self._commit_informational()
        return len(messages)

    def _process(self, messages: list[Message]) -> None:
        """Validate a batch, dead-letter the bad events and feed the good ones in order.

        The valid events go to the engine in one call, each with its own source position
        (a trigger inside commits exactly the records merged). A dead-lettered event is
        covered by the position of the next valid event of its partition, or, at the end
        of its partition's run in the batch, skipped past explicitly; its dead letter is
        delivered before anything of the batch can commit.
        """
        if any(map(Message.error, messages)):
            messages = self._without_errors(messages)
        if not messages:
            return
        batch = self.parser.parse_batch(list(map(Message.value, messages)),
                                        list(map(Message.key, messages)))
        positions = self._positions(messages)
        for i, rejected in batch.rejected:
            self._dead_letter(messages[i], rejected)
        if batch.rejected:
            self._deliver_dead_letters()
        if batch.index:
            self.engine.add(batch.rows, batch.labels, batch.keys,
                            [positions[i] for i in batch.index], labels_checked=True)  # the parser ran engine.label_ok
        if batch.rejected:
            last = dict(positions)  # every partition's position after this batch
            for name in {positions[i][0] for i, _ in batch.rejected}:
                self.engine.skip((name, last[name]))

    @staticmethod
    def _without_errors(messages: list[Message]) -> list[Message]:
        for message in messages:
            error = message.error()
            if error is not None and error.code() not in _TRANSIENT:
                raise RuntimeError(f"Kafka error: {error}")
        return [m for m in messages if m.error() is None]

    def _positions(self, messages: list[Message]) -> list[tuple[str, int]]:
        """``(partition name, next offset)`` of every message."""
        where = list(zip(map(Message.topic, messages), map(Message.partition, messages)))
        names = self._partition_names
        for topic, partition in set(where) - names.keys():
            names[topic, partition] = f"{topic}:{partition}"
        return [(names[tp], offset + 1)
                for tp, offset in zip(where, map(Message.offset, messages), strict=True)]

    def _dead_letter(self, message: Message, parsed: Rejected) -> None:
        self.dead_letters[parsed.reason] += 1
        self.producer.produce(
            f"{message.topic()}.dlq", value=message.value(), key=message.key(),
            headers=[
                ("reason", parsed.reason.encode()), ("detail", parsed.detail.encode()),
                ("source.topic", message.topic().encode()),
                ("source.partition", str(message.partition()).encode()),
                ("source.offset", str(message.offset()).encode()),
            ],
            on_delivery=self._on_dead_letter_delivery,
        )
        self.producer.poll(0)

    def _on_dead_letter_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self._undelivered.append(str(error))

    def _deliver_dead_letters(self) -> None:
        """Wait until the batch's dead letters are on the broker, before the offsets that
        pass them can commit (a crash must not lose a dead letter); raises otherwise, which
        ends the process with nothing of the batch committed."""
        remaining = self.producer.flush(self.settings.dlq_timeout)
        if remaining or self._undelivered:
            errors, self._undelivered = self._undelivered, []
            raise RuntimeError(f"dead letters not delivered ({remaining} still queued, "
                               f"errors: {errors[:3]}); nothing of this batch is committed")

    def _commit_informational(self) -> None:
        """Tell the group where the durable state is (monitoring only; never read back)."""
        offsets = [TopicPartition(tp.split(":")[0], int(tp.split(":")[1]), int(offset))
                   for tp, offset in self.engine.offsets.items()]
        try:
            self.consumer.commit(offsets=offsets, asynchronous=True)
        except Exception:  # noqa: BLE001, S110 - informational only, never read back
            pass

    def run(
        self,
        max_idle: float | None = None,
        on_poll: Callable[[KafkaTrainer], None] | None = None,
    ) -> None:
        """Poll until :meth:`stop` (e.g. from a signal handler) or ``max_idle`` seconds idle."""
        idle_since, was_assigned = time.monotonic(), self.assigned
        while not self.stopping:
            if self.poll_once() or self.assigned != was_assigned:
                idle_since, was_assigned = time.monotonic(), self.assigned
            elif max_idle is not None and self.assigned and time.monotonic() - idle_since > max_idle:
                break
            if on_poll:
                on_poll(self)
        self.close()

    def stop(self) -> None:
        """Finish the current batch (and the rounds it triggers), then close."""
        self.stopping = True

    def close(self) -> None:
        self.publish()
        self.producer.flush(10)
        self.consumer.close()

    # ------------------------------------------------------------------ publishing
    def _on_output(self, event: InitEvent | RoundEvent) -> None:
        self._unpublished = True

    def publish(self) -> None:
        """Publish the committed rounds not yet published (after the commit, never before)."""
        if not self._unpublished:
            return
        engine = self.engine
        version = engine.booster.rounds_done
        update = model_update(engine, self.settings.model_name, since=self._published)
        self.producer.produce(self.settings.model_topic, key=self.settings.model_name.encode(),
                              value=update.model_dump_json().encode())
        if self.producer.flush(10) == 0:
            self._published = version
            self._unpublished = False
            engine.store.set_meta("published_version", version)

    def status(self) -> dict[str, Any]:
        report = self.engine.privacy_report()
        return {"consumed": self.consumed, "dead_letters": dict(self.dead_letters),
                "published_version": self._published, "offsets": self.engine.offsets,
                "privacy": report.model_dump()}


def model_update(engine: StreamEngine, name: str, since: int) -> ModelUpdate:
    """The update from version ``since`` to the engine's committed model."""
    ens = engine.ensemble
    first_round = engine.booster.rounds_done - ens.n_trees
    trees = [
        TreeUpdate(round=first_round + i, features=ens.features[i].tolist(),
                   thresholds=ens.thresholds[i].tolist(), leaves=ens.leaves[i].tolist())
        for i in range(ens.n_trees) if first_round + i >= since
    ]
    config = engine.config
    return ModelUpdate(
        model=name, version=engine.booster.rounds_done, task=config.params.task,
        depth=config.params.depth, public_schema=engine.schema.model_dump(mode="json"),
        init_score=ens.init_score, max_trees=config.max_trees, trees=trees,
        privacy=engine.privacy_report().model_dump(),
    )


class ModelFollower:
    """Serves predictions from the model topic's latest version (no state store needed).

    Reads the topic from the beginning and applies updates in version order; a repeated or
    older version (a re-publish after a crash) is ignored.
    """

    def __init__(
        self, bootstrap_servers: str, model_topic: str, model_name: str = "model",
        extra: Mapping[str, str] | None = None,
    ) -> None:
        self.model_name = model_name
        self.model_topic = model_topic
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap_servers, **(extra or {}),
            "group.id": f"renyiboost-follower-{time.time_ns()}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        })
        self.consumer.subscribe([model_topic])
        self.version = 0
        self.ensemble: Ensemble | None = None
        self.schema: PublicSchema | None = None
        self.task = "regression"
        self.privacy: dict[str, Any] = {}
        self._next_round = 0

    def poll(self, timeout: float = 1.0, max_messages: int = 1000) -> int:
        """Apply the updates available now; returns how many were applied."""
        applied = 0
        for message in self.consumer.consume(max_messages, timeout):
            if message.error() or message.key() != self.model_name.encode():
                continue
            update = ModelUpdate.model_validate_json(message.value())
            if update.version <= self.version:
                continue
            self._apply(update)
            applied += 1
        return applied

    def wait_for(self, version: int, timeout: float = 30.0) -> None:
        """Poll until the follower has ``version`` (raises ``TimeoutError``)."""
        deadline = time.monotonic() + timeout
        while self.version < version:
            if time.monotonic() > deadline:
                raise TimeoutError(f"model version {version} not seen (have {self.version})")
            self.poll(0.5)

    def _apply(self, update: ModelUpdate) -> None:
        if self.ensemble is None:
            self.schema = PublicSchema(**update.public_schema)
            self.task = update.task
            self.ensemble = Ensemble(depth=update.depth, is_categorical=self.schema.is_categorical)
        ens = self.ensemble
        ens.init_score = update.init_score
        for tree in update.trees:
            if tree.round >= self._next_round:
                ens.append(np.asarray(tree.features, dtype=np.int64),
                           np.asarray(tree.thresholds, dtype=float),
                           np.asarray(tree.leaves, dtype=float))
                self._next_round = tree.round + 1
        if update.max_trees is not None:
            ens.keep_last(update.max_trees)
        self.version = update.version
        self.privacy = update.privacy

    def predict_margin(self, rows: list[Mapping[str, Any]]) -> np.ndarray:
        if self.ensemble is None or self.schema is None:
            raise RuntimeError("no model version received yet")
        return self.ensemble.predict_margin(self.schema.encode_dicts(rows))

    def predict_one(self, x: Mapping[str, Any]) -> float | bool:
        margin = float(self.predict_margin([x])[0])
        if self.task == "classification":
            return margin > 0.0
        return float(unscale_margin(margin, self.schema.target_bounds))  # type: ignore[union-attr,arg-type]

    def predict_proba_one(self, x: Mapping[str, Any]) -> dict[bool, float]:
        p = float(expit(self.predict_margin([x])[0]))
        return {False: 1.0 - p, True: p}

    def close(self) -> None:
        self.consumer.close()


def event_json(key: str, x: Mapping[str, Any], y: float | bool,
               event_format: EventFormat | None = None) -> bytes:
    """Serialise one event in the default (or given) format."""
    fmt = event_format or EventFormat()
    event = {fmt.key_field: key, fmt.features_field: dict(x), fmt.label_field: y}
    return json.dumps(event).encode()
