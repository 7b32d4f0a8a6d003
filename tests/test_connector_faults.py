"""Faults at the Kafka connectors' edges, against a real broker: an event too large for its
dead letter, messages on the model topic that are not releases, a version missing from the
model topic, and a label set whose probabilities cannot be answered as JSON."""

from __future__ import annotations

import json
import logging
import threading
import time
import tracemalloc
import unicodedata
import uuid
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from confluent_kafka import KafkaError, KafkaException, Message, Producer
from conftest import create_topic, read_topic
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from renyiboost.connectors.events import EventFormat, EventParser
from renyiboost.connectors.kafka import (
    DEAD_LETTER_HEAD_BYTES,
    KafkaSettings,
    KafkaTrainer,
    ModelFollower,
    PublishFailed,
    RepeatedClientLines,
    ShardedKafkaTrainer,
    _Loop,
    event_json,
    publish_versions,
    published_to,
)
from renyiboost.connectors.kafka import log as kafka_log
from renyiboost.connectors.local_broker import free_port
from renyiboost.exceptions import BrokerUnavailable, LedgerConflict, TestingOnlyWarning
from renyiboost.models.batch import SGBDT
from renyiboost.models.estimators import SGBDTRegressor
from renyiboost.release import ModelRelease
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import EngineConfig, StreamEngine
from renyiboost.stream.store import SQLiteStore

warnings.simplefilter("ignore", TestingOnlyWarning)

SCHEMA = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)}, target_bounds=(0.0, 3.0))


def _one_feature_config() -> EngineConfig:
    return EngineConfig.from_defaults(PublicSchema(features={"a": (0.0, 1.0)},
                                                   target_bounds=(0.0, 1.0)), "regression", 1.0)


def _trainer_on_new_topic(bootstrap: str, tmp_path: Path, prefix: str
                          ) -> tuple[str, StreamEngine, KafkaTrainer]:
    """A new topic, and a trainer of a one-feature regression on it with a new store."""
    topic = _topic(prefix)
    create_topic(bootstrap, topic)
    engine = StreamEngine(_one_feature_config(),
                          store=SQLiteStore(tmp_path / "s.db", create=True))
    trainer = KafkaTrainer(engine, KafkaSettings(bootstrap_servers=bootstrap, topics=[topic],
                                                 model_topic=f"{topic}.m"))
    return topic, engine, trainer


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _settings(bootstrap: str, topic: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=bootstrap, topics=[topic], group_id=f"g-{topic}",
                         model_topic=f"{topic}.models", model_name="model")


def _engine(path: Path, schema: PublicSchema = SCHEMA, task: str = "regression"
            ) -> StreamEngine:
    config = EngineConfig.from_defaults(schema, task, 1.0, train_every=50, warmup=50)
    return StreamEngine(config, store=SQLiteStore(path, create=True), seed=1)


def _rows(n: int, seed: int) -> list[dict[str, float]]:
    rng = np.random.default_rng(seed)
    return [{"a": float(a), "b": float(b)} for a, b in rng.uniform(0, 1, (n, 2))]


def _events(start: int, n: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{start + i}".encode(), event_json(f"k{start + i}", x, 3 * x["a"]))
            for i, x in enumerate(_rows(n, seed=start))]


def _produce(bootstrap: str, topic: str, values: list[tuple[bytes | None, bytes | None]]
             ) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "message.max.bytes": 4_000_000})  # room for a 1 MB event
    for key, value in values:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0


# ---------------------------------------------------------------------- dead letters
def test_a_1mb_event_is_dead_lettered_truncated_and_the_trainer_goes_on(kafka_bootstrap,
                                                                        tmp_path) -> None:
    """An event of about 1 MB (the broker takes it; the parser's limit is 64 KiB) becomes a
    dead letter with reason "oversize" and its first bytes only, whose headers say the
    original size and where the event is; the trainer trains and commits what follows it
    (a whole dead letter exceeds the producer's message.max.bytes and stopped the trainer,
    on every restart)."""
    topic = _topic("big")
    create_topic(kafka_bootstrap, topic)
    big = event_json("big", {"a": 0.5, "pad": "p" * 1_048_000}, 1.0)
    _produce(kafka_bootstrap, topic, _events(0, 250) + [(b"big", big)] + _events(250, 250))
    engine = _engine(tmp_path / "s.db")
    trainer = KafkaTrainer(engine, _settings(kafka_bootstrap, topic))
    trainer.run(max_idle=3.0)

    assert dict(trainer.dead_letters) == {"oversize": 1}
    assert engine.positions == 501
    assert engine.offsets[f"{topic}:0"] == 501 - engine.n_pending > 251  # past the big one
    assert engine.operator_telemetry().n_active + engine.n_pending == 500
    assert engine.store.get_meta("dead_lettered") == {f"{topic}:0": 251}
    [letter] = read_topic(kafka_bootstrap, f"{topic}.dlq", 1)
    headers = {name: value.decode() for name, value in letter.headers()}
    assert headers["reason"] == "oversize" and str(len(big)) in headers["detail"]
    assert (headers["source.topic"], headers["source.partition"], headers["source.offset"]
            ) == (topic, "0", "250")
    name, stamp = headers["renyiboost.dlq.id"].rsplit(":", 1)
    assert name == f"{topic}:0:250" and int(stamp) > 0  # the source message's timestamp
    assert headers["value.truncated"] == str(len(big)) and "key.truncated" not in headers
    assert letter.value() == big[:DEAD_LETTER_HEAD_BYTES] and letter.key() == b"big"
    engine.close()


def test_more_dead_letters_than_the_producer_queue_holds_wait_for_room(kafka_bootstrap,
                                                                       tmp_path) -> None:
    """A burst of bad events larger than the producer's local queue (here 20 messages, by
    default 100,000) waits for room instead of raising ``BufferError`` out of the trainer,
    which, since nothing of the batch had committed, did so again on every restart."""
    topic = _topic("burst")
    create_topic(kafka_bootstrap, topic)
    _produce(kafka_bootstrap, topic, [(f"k{i}".encode(), b"{not json") for i in range(60)]
             + _events(0, 100))
    engine = _engine(tmp_path / "s.db")
    settings = _settings(kafka_bootstrap, topic).model_copy(
        update={"extra": {"queue.buffering.max.messages": "20"}})
    trainer = KafkaTrainer(engine, settings)
    trainer.run(max_idle=3.0)
    assert dict(trainer.dead_letters) == {"json": 60} and engine.positions == 160
    assert len(read_topic(kafka_bootstrap, f"{topic}.dlq", 60)) == 60
    engine.close()


def test_a_dead_letter_the_producer_refuses_as_too_large_is_sent_truncated(
        kafka_bootstrap, tmp_path) -> None:
    """An event under the parser's limit but over the producer's ``message.max.bytes`` (a
    smaller limit than the default, here): the producer refuses its whole dead letter at
    once, and it is sent truncated instead."""
    topic = _topic("limit")
    create_topic(kafka_bootstrap, topic)
    wide = event_json("wide", {"a": 0.5, "pad": "z" * 30_000}, 1.0)  # unknown feature
    _produce(kafka_bootstrap, topic, _events(0, 60) + [(b"wide", wide)] + _events(60, 60))
    engine = _engine(tmp_path / "s.db")
    settings = _settings(kafka_bootstrap, topic)
    trainer = KafkaTrainer(engine, settings)
    trainer.producer = Producer(settings.client(**{
        "enable.idempotence": True, "linger.ms": 5, "message.max.bytes": 20_000}))
    trainer.run(max_idle=3.0)

    assert dict(trainer.dead_letters) == {"schema": 1} and engine.positions == 121
    [letter] = read_topic(kafka_bootstrap, f"{topic}.dlq", 1)
    headers = {name: value.decode() for name, value in letter.headers()}
    assert headers["reason"] == "schema" and headers["source.offset"] == "60"
    assert headers["value.truncated"] == str(len(wide))
    assert letter.value() == wide[:DEAD_LETTER_HEAD_BYTES]
    engine.close()


class _BrokerLimit:
    """A producer whose broker refuses messages over ``limit`` bytes in the delivery report
    (a dead-letter topic with a smaller ``max.message.bytes`` than the producer's)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.queued: list[tuple[dict, object]] = []
        self.delivered: list[dict] = []

    def produce(self, topic: str, value=None, key=None, headers=None, on_delivery=None) -> None:
        self.queued.append(({"topic": topic, "value": value, "key": key,
                             "headers": dict(headers or [])}, on_delivery))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        while self.queued:  # a delivery callback may queue a message again
            sent, callback = self.queued.pop(0)
            if len(sent["value"] or b"") + len(sent["key"] or b"") > self.limit:
                callback(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), None)
            else:
                self.delivered.append(sent)
                callback(None, None)
        return 0


def test_a_dead_letter_the_broker_refuses_as_too_large_is_sent_again_truncated(
        kafka_bootstrap, tmp_path) -> None:
    topic = _topic("brokerlimit")
    create_topic(kafka_bootstrap, topic)
    engine = _engine(tmp_path / "s.db")
    trainer = KafkaTrainer(engine, _settings(kafka_bootstrap, topic))
    trainer.producer = producer = _BrokerLimit(20_000)
    wide = event_json("wide", {"a": 0.5, "pad": "z" * 30_000}, 1.0)
    messages = [Message(topic=topic, partition=0, offset=i, key=key, value=value)
                for i, (key, value) in enumerate(_events(0, 60) + [(b"wide", wide)])]
    with engine.group_commit():
        trainer._process(messages)  # raised "dead letters not delivered" before the fix

    [letter] = producer.delivered
    assert letter["topic"] == f"{topic}.dlq" and letter["headers"]["reason"] == b"schema"
    assert letter["headers"]["value.truncated"] == str(len(wide)).encode()
    assert letter["value"] == wide[:DEAD_LETTER_HEAD_BYTES]
    assert engine.store.get_meta("dead_lettered") == {f"{topic}:0": 61}
    trainer.consumer.close()
    engine.close()


# ---------------------------------------------------------------------- the model topic
def _trained(path: Path, n: int = 400) -> StreamEngine:
    engine = _engine(path)
    rows = _rows(n, seed=7)
    engine.add(engine.validator.rows(rows), [3 * x["a"] for x in rows],
               [f"k{i}" for i in range(n)])
    engine.flush()
    return engine


def _releases(engine: StreamEngine, versions: range) -> list[tuple[bytes, bytes]]:
    """The model topic's messages of ``versions``, as the trainer publishes them."""
    return [(b"model", engine.release("model", after=v - 1, upto=v).model_dump_json().encode())
            for v in versions]


def _assert_follows(follower: ModelFollower, engine: StreamEngine) -> None:
    """The follower serves exactly the engine's model."""
    probe = _rows(50, seed=99)
    assert follower.version == engine.release_version
    assert follower.ensemble.n_trees == engine.ensemble.n_trees
    np.testing.assert_array_equal(follower.predict_margin(probe),
                                  engine.predict_margin(engine.validator.rows(probe)))
    assert follower.stalled is None


def _poll_until(follower: ModelFollower, done, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"follower at version {follower.version}"
        follower.poll(0.5)


def test_the_follower_skips_messages_that_are_not_releases(kafka_bootstrap, tmp_path) -> None:
    """A tombstone, foreign JSON and two malformed versions 3 (a leaf short, a feature the
    schema lacks) under the model's key, in the middle of the topic, are skipped; the
    follower ends with the engine's model (they made it lose the rest of its batch, then
    jump to a later version without the trees in between; a malformed tree was applied
    half, after which every answer failed)."""
    engine = _trained(tmp_path / "s.db")
    versions = engine.release_version
    assert versions > 4
    topic = _topic("models")
    create_topic(kafka_bootstrap, topic)
    messages = _releases(engine, range(1, versions + 1))
    malformed = []
    for part, change in (("leaves", lambda v: v[:-1]), ("features", lambda v: [99, *v[1:]])):
        third = json.loads(messages[2][1])
        third["trees"][0][part] = change(third["trees"][0][part])
        malformed.append((b"model", json.dumps(third).encode()))
    _produce(kafka_bootstrap, topic, messages[:2] + [(b"model", None), (b"model", b'{"a": 1}'),
                                                     (b"other", b"not JSON"), *malformed]
             + messages[2:])
    follower = ModelFollower(kafka_bootstrap, topic, "model")
    follower.wait_for(versions)
    _assert_follows(follower, engine)
    assert follower.not_releases == 4  # the other key's message is not this model's
    follower.close()
    engine.close()


def test_a_version_missing_from_the_model_topic_is_not_served(kafka_bootstrap,
                                                              tmp_path) -> None:
    """Version 3 is not on the topic: the follower stays at version 2 (re-reading the topic
    does not find 3), and the server says why with 503; once the trainer publishes the
    versions again, the follower catches up with the engine. ``/model`` and ``/release``
    refuse too (they once answered the older version while ``/predict`` refused)."""
    from fastapi.testclient import TestClient

    from renyiboost.connectors.serving import FollowerService, create_app

    engine = _trained(tmp_path / "s.db")
    versions = engine.release_version
    topic = _topic("models")
    create_topic(kafka_bootstrap, topic)
    messages = _releases(engine, range(1, versions + 1))
    _produce(kafka_bootstrap, topic, messages[:2] + messages[3:])
    follower = ModelFollower(kafka_bootstrap, topic, "model")
    _poll_until(follower, lambda: follower.stalled is not None)
    assert follower.version == 2 and follower.ensemble.n_trees == 1
    assert "version 4" in follower.stalled and "version 3 is missing" in follower.stalled
    client = TestClient(create_app(FollowerService(follower)))  # no lifespan: no thread
    health = client.get("/health")
    assert health.status_code == 503
    assert health.json()["status"] == "not serving" and health.json()["version"] == 2
    assert health.json()["reason"] == follower.stalled
    refused = client.post("/predict", json={"rows": [{"a": 0.5, "b": 0.5}]})
    assert refused.status_code == 503 and refused.json()["detail"] == follower.stalled
    for path in ("/model", "/release"):  # nor is the older version described or exported
        refused = client.get(path)
        assert refused.status_code == 503 and refused.json()["detail"] == follower.stalled

    _produce(kafka_bootstrap, topic, messages[2:])  # a re-publish after a crash
    follower.wait_for(versions)
    _assert_follows(follower, engine)
    assert client.get("/health").json() == {"status": "ready", "version": versions,
                                            "seeded_for_testing": True}  # a seeded engine
    assert client.get("/release").json()["version"] == versions
    follower.close()
    engine.close()


class _LosesOnce:
    """A consumer that loses one message the first time it is delivered (what a failed batch
    did), and is otherwise the follower's own."""

    def __init__(self, consumer, offset: int) -> None:
        self.consumer, self.offset, self.lost = consumer, offset, False

    def consume(self, max_messages: int, timeout: float) -> list:
        messages = self.consumer.consume(max_messages, timeout)
        if not self.lost and any(m.offset() == self.offset for m in messages):
            self.lost = True
            return [m for m in messages if m.offset() != self.offset]
        return messages

    def __getattr__(self, name: str):
        return getattr(self.consumer, name)


def test_a_gap_makes_the_follower_re_read_the_topic(kafka_bootstrap, tmp_path) -> None:
    engine = _trained(tmp_path / "s.db")
    versions = engine.release_version
    topic = _topic("models")
    create_topic(kafka_bootstrap, topic)
    _produce(kafka_bootstrap, topic, _releases(engine, range(1, versions + 1)))
    follower = ModelFollower(kafka_bootstrap, topic, "model")
    follower.consumer = _LosesOnce(follower.consumer, offset=2)  # version 3
    follower.wait_for(versions)
    _assert_follows(follower, engine)
    assert follower.consumer.lost and follower._reread_at == 2  # it found version 3 again
    follower.close()
    engine.close()


# ---------------------------------------------------------------------- serving labels
@pytest.mark.parametrize("labels", [[1, "1", "x"], [True, "True", "x"]])
def test_labels_that_print_alike_are_refused_not_merged(kafka_bootstrap, tmp_path,
                                                        labels) -> None:
    """Probabilities are answered as ``{str(label): p}``: a label set with two labels of one
    ``str()`` would lose a class from every answer, so it is not served, with the reason."""
    client, follower, engine = _served_classifier(kafka_bootstrap, tmp_path, labels)
    health = client.get("/health")
    assert health.status_code == 503 and health.json()["status"] == "not serving"
    assert repr(labels) in health.json()["reason"]
    answer = client.post("/predict", json={"rows": [{"a": 0.5, "b": 0.5}]})
    assert answer.status_code == 503 and "read the same as JSON keys" in answer.json()["detail"]
    follower.close()
    engine.close()


def test_labels_that_print_apart_keep_their_probabilities(kafka_bootstrap, tmp_path) -> None:
    """A label set that mixes integers and strings whose ``str()`` differ is served as
    before: one ``{str(label): p}`` a row, in the label set's order."""
    from renyiboost.models.losses import class_probabilities

    client, follower, engine = _served_classifier(kafka_bootstrap, tmp_path, [0, "other", "x"])
    assert client.get("/health").status_code == 200
    rows = _rows(5, seed=3)
    answer = client.post("/predict", json={"rows": rows}).json()
    proba = class_probabilities(engine.predict_margin(engine.validator.rows(rows)))
    assert [list(p) for p in answer["probabilities"]] == [["0", "other", "x"]] * 5
    np.testing.assert_allclose([list(p.values()) for p in answer["probabilities"]], proba,
                               rtol=1e-12)
    follower.close()
    engine.close()


def _served_classifier(bootstrap: str, tmp_path: Path, labels: list):
    """A test client of the HTTP app over a follower that applied a classifier's full
    release (a model of ``labels``), the follower and the engine."""
    from fastapi.testclient import TestClient

    from renyiboost.connectors.serving import FollowerService, create_app

    schema = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)}, labels=labels)
    engine = _engine(tmp_path / "s.db", schema, "classification")
    rows = _rows(300, seed=5)
    y = np.array([labels[min(2, int(3 * x["a"]))] for x in rows], dtype=object)  # as typed
    engine.add(engine.validator.rows(rows), y, [f"k{i}" for i in range(300)])
    engine.flush()
    follower = ModelFollower(bootstrap, _topic("unused"), "model")
    follower._apply(engine.release("model"))  # the whole model: one release
    assert follower.version == engine.release_version > 1
    return TestClient(create_app(FollowerService(follower))), follower, engine


@pytest.mark.parametrize("labels", [None, ["x", "y", "z"]], ids=["binary", "multiclass"])
def test_the_follower_labels_on_the_margins_as_every_path_does(labels) -> None:
    """Margins of ±1e-17 round to probabilities of exactly 0.5: the follower took the
    label from the probabilities (the first class on a tie) where the estimators, the batch
    fit and ONNX take it from the margins."""
    rng = np.random.default_rng(0)
    schema = PublicSchema(features={"a": (0.0, 1.0)}, labels=labels)
    X = rng.uniform(0, 1, (300, 1))
    y = (rng.uniform(size=300) < 0.5).astype(float) if labels is None else \
        np.array(labels, dtype=object)[rng.integers(0, 3, 300)]
    model = SGBDT(schema, task="classification", epsilon=1.0, rounds=1, depth=1,
                  expected_records=300, seed=0).fit(X, y)
    release = model.release().model_dump()
    if labels is None:
        release["init_score"], release["trees"][0]["leaves"] = 0.0, [1e-17, -1e-17]
    else:
        release["init_score"] = [0.0, 0.0, -1.0]
        release["trees"][0]["leaves"] = [[0.0, 1e-17, 0.0], [0.0, -1e-17, 0.0]]
    release = ModelRelease.model_validate(release)
    follower = ModelFollower.without_consumer()
    follower._apply(release)
    batch = SGBDT.from_json(release.model_dump_json())
    rows = np.array([[0.0], [1.0]])
    assert [follower.predict_one({"a": float(a)}) for a in rows[:, 0]] == \
        [bool(c) if labels is None else c for c in batch.predict(rows)]


@pytest.mark.parametrize("max_trees", [None, 4], ids=["every tree", "newest 4"])
def test_a_follower_gives_the_whole_model_it_rebuilt_from_the_topic(max_trees) -> None:
    """An export from the model topic alone: the follower, fed one message a version (each
    holding only its own output), hands out the whole model of its version, equal to the
    engine's own export, which ``SGBDT.from_json`` and ONNX take. Before, only the engine's
    store could give one, and a model-topic message was refused as a part of a model."""
    rng = np.random.default_rng(3)
    schema = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)},
                          target_bounds=(0.0, 2.0))
    config = EngineConfig.from_defaults(schema, "regression", 1.0, train_every=40,
                                        warmup=40, max_trees=max_trees)
    engine = StreamEngine(config, seed=3)
    X = rng.uniform(0, 1, (400, 2))
    engine.add(X, X.sum(axis=1), [str(i) for i in range(400)])
    follower = ModelFollower.without_consumer()
    with pytest.raises(LookupError, match="no model version"):
        follower.release()
    for version in range(1, engine.release_version + 1):
        message = engine.release(after=version - 1, upto=version)
        if version > 2:  # one tree of several
            with pytest.raises(ValueError, match="part of the model"):
                message.check_whole()
        follower._apply(message)
    whole = follower.release()
    assert engine.release_version >= 8 and len(whole.trees) == min(
        engine.release_version - 1, max_trees or 10**9)
    assert whole.model_dump() == engine.release().model_dump()
    rebuilt = SGBDT.from_json(whole.model_dump_json())
    rows = [{"a": a, "b": b} for a, b in X[:50].tolist()]
    np.testing.assert_allclose(rebuilt.predict(X[:50]),
                               follower.answers(follower.predict_margin(rows))[0], rtol=1e-12)


def test_a_release_of_another_shape_changes_nothing_in_the_follower() -> None:
    """A release whole in itself that does not fit the followed model (here of another
    depth) raises before anything changes: the initial score and answer map were once
    set first and the trees appended one by one, so a failure left every later answer
    broken."""
    rng = np.random.default_rng(5)
    schema = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)},
                          target_bounds=(0.0, 2.0))
    engine = StreamEngine(EngineConfig.from_defaults(schema, "regression", 1.0, train_every=40,
                                                     warmup=40), seed=5)
    X = rng.uniform(0, 1, (300, 2))
    engine.add(X, X.sum(axis=1), [str(i) for i in range(300)])
    follower = ModelFollower.without_consumer()
    for version in range(1, engine.release_version):
        follower._apply(engine.release(after=version - 1, upto=version))
    rows = [{"a": a, "b": b} for a, b in X[:20].tolist()]
    before = follower.predict_margin(rows)
    last = engine.release(after=engine.release_version - 1, upto=engine.release_version)
    deeper = last.model_dump()
    deeper["depth"] += 1
    deeper["init_score"] = 5.0
    deeper["trees"] = [tree | {"features": [0] * (2 ** deeper["depth"] - 1),
                               "thresholds": [0.5] * (2 ** deeper["depth"] - 1),
                               "leaves": [0.1] * 2 ** deeper["depth"]}
                       for tree in deeper["trees"]]
    with pytest.raises(ValueError):
        follower._apply(ModelRelease.model_validate(deeper))
    for smoothing in (None, [0.1], "0.1", 1.0, -0.1):  # null once raised a TypeError, which
        bad = last.model_dump()                      # cost the follower its batch
        bad["params"] = {**bad["params"], "smoothing": smoothing}
        with pytest.raises(ValueError, match="params.smoothing"):
            ModelRelease.model_validate(bad)
    assert follower.version == engine.release_version - 1
    np.testing.assert_array_equal(follower.predict_margin(rows), before)
    follower._apply(last)  # and the model's own next version still follows
    np.testing.assert_allclose(follower.predict_margin(rows),
                               engine.predict_margin(engine.validator.rows(rows)), rtol=1e-12)


class _RefusingProducer:
    """A producer whose broker refuses one version's message (``error``; ``None``: no
    report yet, still queued) and delivers the others, at flush, as librdkafka reports."""

    def __init__(self, refused: int, error: int | None) -> None:
        self.refused, self.error, self.queue, self.sent = refused, error, [], []

    def begin_transaction(self) -> None:
        pass

    def commit_transaction(self, timeout=None) -> None:
        pass

    def produce(self, topic, key=None, value=None, on_delivery=None) -> None:
        self.queue.append((topic, key, value, on_delivery))

    def flush(self, timeout=None) -> int:
        for topic, key, value, report in self.queue:
            version = json.loads(value)["version"]
            message = Message(topic=topic, partition=0, offset=len(self.sent), key=key,
                              value=value)
            if version == self.refused:
                if self.error is not None:  # else no report yet: still queued
                    report(KafkaError(self.error), message)
            else:
                self.sent.append(version)
                report(None, message)
        self.queue = []
        return 0


@pytest.mark.parametrize("queued", [True, False], ids=["still queued", "refused"])
def test_a_version_the_broker_did_not_take_is_never_recorded_as_published(queued) -> None:
    """Versions 1 and 3… arrived, version 2 did not: the record once said the last version
    sent, so version 2 was never sent again and every follower stalled at 1. Still queued
    at the flush's timeout, it is sent again next time (1 recorded); refused, it stops the
    trainer (1 recorded)."""
    engine = StreamEngine(EngineConfig.from_defaults(
        PublicSchema(features={"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0)), "regression", 1.0,
        train_every=20, warmup=20), seed=0)
    rows = np.random.default_rng(0).uniform(size=(200, 1))
    engine.add(rows, rows[:, 0], [f"k{i}" for i in range(200)])
    assert engine.release_version >= 4
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", topics=["t"])
    producer = _RefusingProducer(2, None if queued else KafkaError.MSG_SIZE_TOO_LARGE)
    if queued:
        record = publish_versions(producer, settings, engine.release, 0,
                                  engine.release_version)
        assert record is not None and record["version"] == 1
    else:
        with pytest.raises(PublishFailed, match="model version 2") as failed:
            publish_versions(producer, settings, engine.release, 0, engine.release_version)
        assert failed.value.delivered["version"] == 1
    assert 3 in producer.sent


def test_a_transaction_refused_locally_is_aborted_and_its_reason_kept() -> None:
    """A message the producer refuses itself (too large) needs no abort by librdkafka's
    rules, so the transaction stayed open: every later publish failed with "not valid in
    state InTransaction" instead of the reason. A begun transaction that fails is aborted
    now, and each try names the message's size."""

    class Local(_RefusingProducer):
        open = False
        aborts = 0

        def begin_transaction(self) -> None:
            if self.open:
                raise KafkaException(KafkaError(KafkaError._STATE,
                                                "Operation not valid in state InTransaction"))
            self.open = True

        def abort_transaction(self, timeout=None) -> None:
            self.open, self.aborts = False, self.aborts + 1

        def produce(self, topic, key=None, value=None, on_delivery=None) -> None:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE,
                                            "Message size too large"))

    engine = StreamEngine(EngineConfig.from_defaults(
        PublicSchema(features={"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0)), "regression", 1.0,
        train_every=20, warmup=20), seed=0)
    rows = np.random.default_rng(0).uniform(size=(60, 1))
    engine.add(rows, rows[:, 0], [f"k{i}" for i in range(60)])
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", topics=["t"])
    producer = Local(0, None)
    for _ in range(2):
        with pytest.raises(PublishFailed, match="Message size too large"):
            publish_versions(producer, settings, engine.release, 0, engine.release_version)
    assert producer.aborts == 2 and not producer.open


def test_a_partition_that_went_back_dead_letters_its_new_bad_events(kafka_bootstrap,
                                                                     tmp_path) -> None:
    """A re-created topic starts its offsets at 0 again. Each partition's dead-letter mark
    (the offset after its last dead letter, so that a restart does not send them twice)
    once stayed at the old topic's, and the new topic's bad events below it were counted
    as repeats and reached no dead-letter topic. The mark goes back with the partition, in
    message order, and a repeat after a restart is still recognised; the dead letters' ids
    differ by the source's timestamp."""
    topic, engine, trainer = _trainer_on_new_topic(kafka_bootstrap, tmp_path, "back")
    good = event_json("k", {"a": 0.5}, 0.5)

    def batch(stamp: int, bad: int, n: int) -> list[Message]:
        return [Message(topic=topic, partition=0, offset=o, key=f"k{o}".encode(),
                        value=b"{bad" if o == bad else good, timestamp=(1, stamp + o))
                for o in range(n)]

    with engine.group_commit():
        trainer._process(batch(1_000, bad=10, n=12))
    with engine.group_commit():  # the topic re-created: offsets 0 … 5, a bad one at 3
        trainer._process(batch(9_000, bad=3, n=6))
    with engine.group_commit():  # and a new bad one later, in a batch that goes back too
        trainer._process(batch(20_000, bad=4, n=8)[:2] + batch(30_000, bad=1, n=3))
    letters = read_topic(kafka_bootstrap, f"{topic}.dlq", 4)
    ids = sorted(dict(m.headers())["renyiboost.dlq.id"].decode() for m in letters)
    assert ids == sorted([f"{topic}:0:10:1010", f"{topic}:0:3:9003", f"{topic}:0:1:30001"])
    assert trainer.dead_letters["json"] == 3 and trainer.dead_letters_repeated == 0
    trainer.close()
    engine.close()


def test_a_fenced_trainer_stops_with_the_fence_not_a_flush_error() -> None:
    """A fenced model publisher delivers nothing more, and flushing it again at the close
    (confluent-kafka 2.16) raised a SystemError from a delivery callback about one run in
    ten, which replaced the LedgerConflict that says another trainer took the model over.
    The close neither publishes nor flushes once the publisher is fenced."""

    class FencedPublisher:
        flushes = 0

        def flush(self, timeout: float) -> int:
            self.flushes += 1
            raise SystemError("on_delivery returned a result with an exception set")

    class Trainer(_Loop):
        publishes = 0

        def __init__(self) -> None:
            self.publisher = FencedPublisher()

        def poll_once(self) -> int:
            self.publish()
            return 1

        def _publish(self) -> None:
            self.publishes += 1
            raise LedgerConflict("another trainer has started for model 'm' and fenced this")

        def close(self) -> None:
            self._close_publisher(self.publisher)

    trainer = Trainer()
    with pytest.raises(LedgerConflict, match="fenced this"):
        trainer.run()
    assert trainer.fenced and trainer.publishes == 1 and trainer.publisher.flushes == 0
    # the two trainers' own close, on a fenced publisher
    for kind, publisher in ((KafkaTrainer, "publisher"), (ShardedKafkaTrainer, "producer")):
        real = object.__new__(kind)
        real.fenced = True
        setattr(real, publisher, FencedPublisher())
        if kind is KafkaTrainer:
            real.producer = SimpleNamespace(flush=lambda timeout: 0)
            real.consumer = SimpleNamespace(close=lambda: None)
        real.close()
        assert getattr(real, publisher).flushes == 0


@pytest.mark.parametrize("stopped_by", ["broker", "publish"])
def test_a_loop_stopped_by_the_cluster_keeps_its_error_and_publishes_nothing_more(
        stopped_by) -> None:
    """A loop stopped by an unreachable cluster, or by a version not delivered, tried to
    publish again at its close: it waited out the client's timeouts once more (about a
    minute by default), and its own PublishFailed replaced the error that stopped the loop
    (review K, 29 November). The close leaves the versions to the next start."""
    from renyiboost.connectors.kafka import PublishFailed
    from renyiboost.exceptions import BrokerUnavailable

    class Publisher:
        flushes = 0

        def flush(self, timeout: float) -> int:
            self.flushes += 1
            return 0

    class Trainer(_Loop):
        publishes = 0

        def __init__(self) -> None:
            self.publisher = Publisher()

        def poll_once(self) -> int:
            if stopped_by == "broker":
                raise BrokerUnavailable("the Kafka cluster at 127.0.0.1:1 did not answer")
            self.publish()
            return 1

        def _publish(self) -> None:
            self.publishes += 1
            raise PublishFailed(7, None, "Broker: Message size too large")

        def close(self) -> None:
            self._close_publisher(self.publisher)

    trainer = Trainer()
    with pytest.raises(BrokerUnavailable if stopped_by == "broker" else PublishFailed) as e:
        trainer.run()
    assert e.value.__context__ is None  # nothing raised at the close
    assert trainer.broken and trainer.publisher.flushes == 0
    assert trainer.publishes == (stopped_by == "publish")


def test_a_fence_or_full_queue_met_inside_a_transaction() -> None:
    """librdkafka's fence can reach Python as the cause of a SystemError from a delivery
    callback (confluent-kafka 2.16): it is the fence (LedgerConflict). A local error that
    is no KafkaException (a full queue: BufferError) aborts the transaction it began, or
    the next begin would fail "not valid in state InTransaction"."""
    from renyiboost.connectors.kafka import _transaction

    class Producer:
        aborts = 0

        def begin_transaction(self) -> None: ...
        def commit_transaction(self, timeout=None) -> None: ...

        def abort_transaction(self, timeout=None) -> None:
            self.aborts += 1

    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", topics=["t"])
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance",
                                       fatal=True))
    producer = Producer()
    with (pytest.raises(LedgerConflict, match="fenced this one's publisher"),
          _transaction(producer, settings)):
        raise SystemError("on_delivery returned a result with an exception set") from fenced
    fatal = KafkaException(KafkaError(KafkaError._FATAL, "Local: Fatal error", fatal=True))
    with (pytest.raises(LedgerConflict, match=r"failed for good \(Local: Fatal error\); "
                        "most often, another trainer"), _transaction(producer, settings)):
        raise fatal
    with pytest.raises(BufferError, match="Queue full"), _transaction(producer, settings):
        raise BufferError("Local: Queue full")
    assert producer.aborts == 1


def test_a_kafka_shard_refuses_a_store_its_keys_reached_by_hash(tmp_path) -> None:
    """Records handed to a sharded engine (a memory: replay) reach a shard by their key's
    hash; from Kafka the same key reaches its partition's shard. A Kafka shard on a store
    fed by hash would give such a key a second ledger there, so it is refused before it
    connects (the broker address is unreachable on purpose); a store it fed itself, with
    its partition map recorded, is not."""
    config = _one_feature_config()
    engine = StreamEngine(config, store=SQLiteStore(tmp_path / "s.db", create=True),
                          coordinated=True)
    engine.add(np.array([[0.5]]), [0.5], ["person-1"])
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", topics=["t"], connect_timeout=0.5)
    refusal = "reached their shard by their hash"
    with pytest.raises(LedgerConflict, match=refusal):
        KafkaTrainer(engine, settings, shard=0, partition_map={"t": [0, 1]})
    engine.store.set_meta("partition_map", {"t": [0, 1]})
    with pytest.raises(BrokerUnavailable, match="no Kafka broker at 127.0.0.1:1"):
        KafkaTrainer(engine, settings, shard=0, partition_map={"t": [0, 1]})  # past the check
    # a store the sharded engine marked is refused though it holds no record (it would
    # record its partitions before another shard refused), and so it is under a map that
    # gives every partition to one shard of several
    empty = StreamEngine(config, store=SQLiteStore(tmp_path / "e.db", create=True),
                         coordinated=True)
    empty.store.set_meta("key_routing", "hash")
    empty.store.set_meta("shard_map", {"shard": 0, "of": 2})
    for partition_map in ({"t": [0, 1]}, {"t": [0, 0]}):
        with pytest.raises(LedgerConflict, match=refusal):
            KafkaTrainer(empty, settings, shard=0, partition_map=partition_map)
    assert empty.store.get_meta("partitions") is None
    empty.close()
    engine.close()


def test_shards_refuse_a_payload_key_and_dead_letter_other_spellings(tmp_path) -> None:
    """A shard takes whole partitions, and the producer picks a partition from the message
    key's bytes: a payload key (``key_field``) or a key sent in another spelling than its
    canonical one ("Zoë" decomposed) put one person on two shards, each charging its own
    budget (about 2B spent). The first is refused, the second dead-lettered (``key``)."""
    config = _one_feature_config()
    engine = StreamEngine(config, store=SQLiteStore(tmp_path / "s.db", create=True),
                          coordinated=True)
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", topics=["t"])
    with pytest.raises(ValueError, match="key_field = 'user' is refused"):
        KafkaTrainer(engine, settings, EventFormat(key_field="user"), shard=0,
                     partition_map={"t": [0, 1]})
    composed, decomposed = (unicodedata.normalize(form, "Zoë") for form in ("NFC", "NFD"))
    keys = [composed.encode(), decomposed.encode(), b"p1"]
    values = [event_json(key.decode(), {"a": 0.5}, 0.5) for key in keys]
    messages = [Message(topic="t", partition=0, offset=i, key=key, value=value)
                for i, (key, value) in enumerate(zip(keys, values, strict=True))]
    batch = EventParser(engine.validator).parse_batch(values, keys)
    assert batch.keys == [composed, composed, "p1"]  # one person, two spellings
    kept = KafkaTrainer._placed_by_key(batch, messages, {"t": 1}, "consistent_random")
    assert kept.index == [0, 2] and kept.keys == [composed, "p1"] and len(kept.rows) == 2
    assert [(i, why.reason) for i, why in kept.rejected] == [(1, "key")]
    engine.close()


def _follower_model(**options: Any) -> SGBDTRegressor:
    """A small seeded stream model (test-only) that released a few versions."""
    model = SGBDTRegressor({"a": (0.0, 1.0), "b": (-1.0, 1.0)}, target_bounds=(0.0, 3.0),
                           epsilon=1.0, seed=4, rounds=12, depth=2, train_every=30, warmup=30,
                           **options)
    rng = np.random.default_rng(4)
    for i in range(300):
        a, b = rng.uniform(), rng.uniform(-1, 1)
        model.learn_one({"a": a, "b": b}, float(np.clip(2 * a + b, 0, 3)), key=i)
    return model


def test_a_follower_skips_releases_not_of_the_model_it_follows() -> None:
    """Releases of the followed store that fit their own schema but not the followed
    model's (four features: every answer then failed), or the next version without its
    round's tree, are skipped whole; a message claiming a huge version is judged by
    counting its trees (a set of the rounds it claimed took 2.5 GB at 3·10⁷)."""
    model = _follower_model()
    engine = model.engine
    assert engine.release_version >= 5
    follower = ModelFollower(f"127.0.0.1:{free_port()}", "models")
    rows = np.random.default_rng(5).uniform(0, 1, (20, 2))
    try:
        for version in range(1, 4):
            follower._apply(engine.release("model", after=version - 1, upto=version))
        before = follower.ensemble.predict_margin(rows)
        fourth = engine.release("model", after=3, upto=4)
        wide = {"features": {name: (0.0, 1.0) for name in "abcd"}, "target_bounds": (0.0, 3.0)}
        for bad, why in (
                (fourth.model_copy(update={"public_schema": wide}), "its public_schema"),
                (fourth.model_copy(update={"depth": 3}), "its depth"),
                (fourth.model_copy(update={"task": "classification"}), "its task"),
                (fourth.model_copy(update={"max_trees": 2}), "its max_trees"),
                (fourth.model_copy(update={"trees": []}), "lacks the tree of its round 2")):
            with pytest.raises(ValueError, match=why):
                follower._apply(bad)
        huge = fourth.model_copy(update={"version": 10**6, "trees": []})
        tracemalloc.start()
        try:
            assert not follower._continues(huge)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 100_000, peak  # a set of 10⁶ rounds takes tens of MB
        assert follower.version == 3
        np.testing.assert_array_equal(follower.ensemble.predict_margin(rows), before)
        follower._apply(fourth)
        assert follower.version == 4 and follower.lacking_trees() == 0
    finally:
        follower.consumer.close()


def test_versions_published_after_a_tree_cap_dropped_their_trees_are_not_answered() -> None:
    """A publisher that lags behind ``max_trees`` (many triggers in one poll) sends versions
    whose trees the engine already dropped: applied, the follower held a model the trainer
    never had and /release answered 500. Such a version is now refused (503 with the
    reason) until newer versions bring the cap's trees, then served whole."""
    from renyiboost.connectors.serving import FollowerService

    model = _follower_model(max_trees=2)
    engine = model.engine
    newest = engine.release_version
    assert newest >= 6
    follower = ModelFollower(f"127.0.0.1:{free_port()}", "models")
    service = FollowerService(follower)
    try:
        follower._apply(engine.release("model", after=0, upto=1))
        follower._apply(engine.release("model", after=1, upto=2))  # its tree dropped since
        assert follower.lacking_trees() == 1
        assert "arrived without 1 of its trees" in service.refusal()
        with pytest.raises(LookupError, match="max_trees"):
            service.release()
        for version in range(3, newest + 1):
            follower._apply(engine.release("model", after=version - 1, upto=version))
        assert follower.lacking_trees() == 0 and service.refusal() is None
        whole = engine.release("model")
        assert service.release()["trees"] == whole.model_dump(mode="json")["trees"]
        # holding a full cap, a next version without trees (an older publisher's, behind
        # the cap) passed a count of trees, and the cap's older rounds were answered and
        # exported as the newer ones (review V, 29 November): rounds are compared now
        follower._apply(whole.model_copy(update={"version": newest + 1, "trees": []}))
        assert follower.lacking_trees() == 1
        assert "arrived without 1 of its trees" in service.refusal()
    finally:
        follower.consumer.close()


def test_a_publisher_behind_its_tree_cap_sends_the_current_version_whole() -> None:
    """More than ``max_trees`` versions behind (many triggers in one poll), the publisher
    sent versions whose trees the engine had dropped, and followers held a model the
    trainer never had until newer versions came. Now it sends one message of the current
    version with the cap's trees: a follower takes it whole and answers as the engine; a
    publisher within the cap still sends one message a version."""
    from renyiboost.release import ModelRelease

    model = _follower_model(max_trees=2)
    engine = model.engine
    current = engine.release_version
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", topics=["t"])
    rows = np.random.default_rng(6).uniform(0, 1, (20, 2))
    for published in (0, current - 4):
        producer = _RefusingProducer(-1, None)
        producer.messages = []
        produce = producer.produce

        def keep(topic, key=None, value=None, on_delivery=None, producer=producer,
                 produce=produce):
            producer.messages.append(ModelRelease.model_validate_json(value))
            produce(topic, key, value, on_delivery)

        producer.produce = keep
        record = publish_versions(producer, settings, engine.release, published, current, 2)
        assert record is not None and record["version"] == current
        assert producer.sent == [current]
        follower = ModelFollower(f"127.0.0.1:{free_port()}", "models")
        try:
            if published:
                for version in range(1, published + 1):
                    follower._apply(engine.release("model", after=version - 1, upto=version))
            follower._apply(producer.messages[0])
            _holds_the_engines_model(follower, engine, current, rows)
        finally:
            follower.consumer.close()
    _one_message_a_version_within_the_cap(settings, engine, current, 2)


def _holds_the_engines_model(follower: ModelFollower, engine: StreamEngine, version: int,
                             rows: np.ndarray) -> None:
    assert follower.version == version and follower.lacking_trees() == 0
    np.testing.assert_allclose(follower.ensemble.predict_margin(rows),
                               engine.booster.ensemble.predict_margin(rows))


def _one_message_a_version_within_the_cap(settings: KafkaSettings, engine: StreamEngine,
                                          current: int, max_trees: int) -> None:
    within = _RefusingProducer(-1, None)
    publish_versions(within, settings, engine.release, current - 2, current, max_trees)
    assert within.sent == [current - 1, current]


def test_a_catch_up_too_large_for_one_message_goes_in_parts_a_follower_joins() -> None:
    """Behind its tree cap, the publisher sent the cap's trees in one message: at 500 trees of
    depth 6 1.4 MB, over librdkafka's default ``message.max.bytes``, so every restart
    stopped with ``PublishFailed`` (review K, 29 November). Past half the producer's limit
    the release now goes in parts of at most that many bytes, which a follower joins into
    the version; parts that do not follow each other are never applied, and a part is no
    export."""
    from renyiboost.release import LONGEST_FLOAT, joined_parts, release_parts

    model = _follower_model(max_trees=8)
    engine = model.engine
    current = engine.release_version
    assert current - 1 > 8
    whole = engine.release("model", after=0, upto=current)
    limit = 2 * len(whole.model_dump_json()) * 7 // 10  # a part: half (3 of 8 trees)
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", topics=["t"],
                             extra={"message.max.bytes": str(limit)})
    producer = _RefusingProducer(-1, None)
    values: list[bytes] = []
    produce = producer.produce

    def keep(topic, key=None, value=None, on_delivery=None):
        values.append(value)
        produce(topic, key, value, on_delivery)

    producer.produce = keep
    record = publish_versions(producer, settings, engine.release, 0, current, 8)
    parts = [ModelRelease.model_validate_json(value) for value in values]
    n = len(parts)
    assert n == 3 and [p.part for p in parts] == [(k, n) for k in range(1, n + 1)]
    assert max(len(value) for value in values) <= limit // 2
    # counted from the longest values, not the drawn ones: as many parts for any values
    longest = whole.model_copy(update={"init_score": LONGEST_FLOAT, "trees": [
        t.model_copy(update={"thresholds": [LONGEST_FLOAT] * len(t.thresholds),
                             "leaves": [LONGEST_FLOAT] * len(t.leaves)})
        for t in whole.trees]})
    assert [len(p.model_dump_json()) <= limit // 2 and len(p.trees) for p in
            release_parts(longest, limit // 2)] == [len(p.trees) for p in parts]
    assert record is not None and record["version"] == current
    assert record["offset"] == len(values) - 1  # the last part's: the start check reads it
    assert joined_parts(parts) == whole
    with pytest.raises(ValueError, match=f"part 1 of {n}"):
        parts[0].check_whole()
    with pytest.raises(ValueError, match=f"not the {n} parts of one release"):
        joined_parts([parts[0], parts[2], parts[1]])
    rows = np.random.default_rng(7).uniform(0, 1, (20, 2))

    def message(offset: int) -> Message:
        return Message(topic="models", partition=0, offset=offset,
                       key=settings.model_name.encode(), value=values[offset])

    follower = ModelFollower(f"127.0.0.1:{free_port()}", "models")
    try:
        follower._apply(engine.release("model", after=0, upto=1))
        assert follower._take(message(0)) == 0 and follower._take(message(2)) == 0  # 2 lost
        assert follower.version == 1 and follower._parts == []
        # parts holding more trees than the version's whole model are dropped as they pass it
        values += [whole.model_copy(update={"part": (k, 2)}).model_dump_json().encode()
                   for k in (1, 2)]
        skipped = follower.not_releases
        assert follower._take(message(3)) == 0 and follower._take(message(4)) == 0
        assert follower._parts == [] and follower.not_releases == skipped + 1
        assert [follower._take(message(i)) for i in range(3)] == [0, 0, 1]
        _holds_the_engines_model(follower, engine, current, rows)
    finally:
        follower.consumer.close()
    _one_message_a_version_within_the_cap(settings, engine, current, 8)  # as before


@given(st.floats(allow_nan=False, allow_infinity=False))
@hypothesis_settings(max_examples=500, deadline=None)
def test_no_finite_float_is_longer_in_a_release_than_the_longest_float(value: float) -> None:
    """The parts of a release are counted from :data:`LONGEST_FLOAT`'s text (what any DP
    value's can be): a longer one would make a part larger than the producer's limit."""
    from renyiboost.release import LONGEST_FLOAT, ReleasedTree

    def text(x: float) -> int:
        return len(ReleasedTree(round=0, features=[], thresholds=[x], leaves=[]).model_dump_json())

    assert text(value) <= text(LONGEST_FLOAT)


def test_a_published_record_of_another_or_no_named_topic_publishes_every_version_again():
    """The store's record of the last published version counts only for its own model
    topic and model name; a record written before records named them counts as another
    topic's (an upgrade that also moved the topic once published only the later versions
    there, and the new topic's followers stalled at version 1 for good)."""
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:1", topics=["events"])
    here = {"version": 7, "partition": 0, "offset": 9, "topic": settings.model_topic,
            "model": settings.model_name}
    assert published_to(here, settings) == here
    legacy = {name: here[name] for name in ("version", "partition", "offset")}
    for record in (None, legacy, here | {"topic": "elsewhere"}, here | {"model": "other"}):
        assert published_to(record, settings) == {"version": 0}

class _HeldCount:
    """A lock that counts how often it was taken."""

    def __init__(self) -> None:
        self.lock, self.taken = threading.Lock(), 0

    def __enter__(self) -> None:
        self.lock.acquire()
        self.taken += 1

    def __exit__(self, *_: object) -> None:
        self.lock.release()

    def locked(self) -> bool:
        return self.lock.locked()


def test_a_follower_catching_up_takes_the_service_lock_a_message_at_a_time() -> None:
    """The follower thread held the server's lock for a whole batch (up to 1,000 versions):
    ``/health`` and ``/predict`` waited 3.6 s behind a catch-up. Now the lock is taken once a
    message and never while the broker is read, and every version still arrives whole."""
    from renyiboost.connectors.serving import FollowerService

    engine = _follower_model().engine
    newest = engine.release_version
    payloads = [engine.release("model", after=v - 1, upto=v).model_dump_json().encode()
                for v in range(1, newest + 1)]
    service = FollowerService(ModelFollower.without_consumer())
    service.lock = held = _HeldCount()

    class Batch:
        def consume(self, max_messages: int, timeout: float) -> list[Any]:
            assert not held.locked()  # waiting on the broker holds no lock
            return [SimpleNamespace(error=lambda: None, key=lambda: b"model",
                                    value=lambda p=p: p, topic=lambda: "models",
                                    partition=lambda: 0, offset=lambda i=i: i)
                    for i, p in enumerate(payloads)]

    service.follower.consumer = Batch()
    assert service._poll_once(None) is None  # served
    assert service.follower.version == newest >= 8
    assert held.taken == newest + 1  # a message each, and the check of the version
    assert service.release()["trees"] == engine.release("model").model_dump(mode="json")[
        "trees"]

def test_a_client_line_repeated_many_times_a_second_is_logged_once_a_window(caplog):
    """Without a broker, a follower's client logged "Connection refused" about 20 times a
    second (``serve``: 148 lines in 8 s); the filter lets one through per window and then
    says how many it held back. Lines of renyiboost's own are never held back."""
    client_filter = next(f for f in kafka_log.filters if isinstance(f, RepeatedClientLines))
    client_filter.window = 1.0
    client_filter._seen.clear()
    follower = ModelFollower(f"127.0.0.1:{free_port()}", "models")
    try:
        with caplog.at_level(logging.ERROR, "renyiboost.kafka"):
            started = time.monotonic()
            while time.monotonic() - started < 1.6:
                follower.poll(timeout=0.2)
                kafka_log.error("a line of our own")
    finally:
        follower.consumer.close()
        client_filter.window = 60.0
    refused = [r.getMessage() for r in caplog.records if "Connection refused" in r.getMessage()]
    assert 1 <= len(refused) <= 3, refused  # one a second at most (about 30 without)
    assert any("more like it in the last 1 s" in line for line in refused[1:]), refused
    assert sum(r.getMessage() == "a line of our own" for r in caplog.records) >= 5


def test_a_repeating_client_error_is_logged_once_until_the_cluster_answers(caplog) -> None:
    """librdkafka reports an unreachable broker on every reconnect attempt: a broker down
    for 3 s gave the trainer's log 59 "Kafka client:" lines before its one error line
    (231 callbacks in 10 s). Each text is logged once, its varying "(after … in state …)"
    left out, however the texts alternate; all of them again once the cluster answers."""
    trainer = KafkaTrainer.__new__(KafkaTrainer)  # the callback's state alone, no broker
    trainer._fatal, trainer._down_since, trainer._logged_client_errors = None, None, set()

    def refused(ms: int) -> KafkaError:
        return KafkaError(KafkaError._TRANSPORT, f"127.0.0.1:9/bootstrap: Connect to "
                                                 f"ipv4#127.0.0.1:9 failed: Connection refused "
                                                 f"(after {ms}ms in state CONNECT)")

    down = KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")
    with caplog.at_level(logging.WARNING, "renyiboost.kafka"):
        for ms in range(50):
            trainer._on_client_error(refused(ms))
            trainer._on_client_error(down)
        trainer._logged_client_errors.clear()  # what an answer of the cluster does
        trainer._on_client_error(refused(3))
    lines = [r.getMessage() for r in caplog.records if "Kafka client" in r.getMessage()]
    assert len(lines) == 3 and "1/1 brokers are down" in lines[1]
    assert "(after" not in lines[0] and "Connection refused" in lines[2]
    assert trainer._down_since is not None


def test_a_first_release_that_fails_part_way_leaves_the_follower_without_a_model(
        monkeypatch) -> None:
    """A first release that failed after its schema, store and trees were set (a negative
    tree cap, refused by ``keep_last``) was "skipped", then served as version 0, and every
    real release was refused as another store's (review P #1). The first release is now
    taken whole or not at all, and nothing is served at version 0."""
    from renyiboost.connectors.serving import FollowerService
    from renyiboost.models.trees import Ensemble

    engine = _follower_model().engine
    whole = engine.release("model")
    follower = ModelFollower.without_consumer()
    calls = {"n": 0}
    extend = Ensemble.extend

    def fails_once(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise ValueError("refused part-way (injected)")
        return extend(self, *args, **kwargs)

    monkeypatch.setattr(Ensemble, "extend", fails_once)
    with pytest.raises(ValueError, match="injected"):
        follower._apply(whole)
    assert (follower.ensemble, follower.validator, follower.store_id, follower.version) == (
        None, None, None, 0)
    service = FollowerService(follower)
    assert service.refusal() == "no model version received yet"
    follower._apply(whole)  # the real release is not refused as another store's
    assert follower.version == whole.version and service.refusal() is None
    follower.version = 0  # an ensemble at version 0 is never served either
    assert service.refusal() == "no model version received yet"


def test_health_says_degraded_while_every_poll_of_the_model_topic_fails() -> None:
    """A follower whose every poll raised (a closed consumer, a fatal client error) was
    only logged, and ``/health`` kept saying "ready" from a version that could no longer
    move on (review P #5). It now says "degraded" until a poll succeeds again; the
    client's error text is not answered."""
    from fastapi.testclient import TestClient

    from renyiboost.connectors.serving import FollowerService, create_app

    engine = _follower_model().engine
    follower = ModelFollower.without_consumer()
    follower._apply(engine.release("model"))
    service = FollowerService(follower)
    client = TestClient(create_app(service))  # no lifespan: no thread

    class Broken:
        def consume(self, max_messages: int, timeout: float) -> list[Any]:
            raise RuntimeError("KafkaError{code=_FATAL, broker 10.0.0.7:9092}")

        def close(self) -> None:
            pass

    class Empty(Broken):
        def consume(self, max_messages: int, timeout: float) -> list[Any]:
            return []

    follower.consumer = Broken()
    service._poll_once(None)
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "degraded"
    assert "10.0.0.7" not in health.text and "FATAL" not in health.text
    assert client.post("/predict", json={"rows": [{"a": 0.5, "b": 0.0}]}).status_code == 200
    follower.consumer = Empty()
    service._poll_once(None)
    assert client.get("/health").json()["status"] == "ready"


def test_the_served_release_is_built_once_a_version() -> None:
    """``/release`` rebuilt the whole model under the lock every prediction needs, on every
    request (0.4 s at 5,000 trees; review P #7): it is now built once a version."""
    from renyiboost.connectors.serving import FollowerService

    engine = _follower_model().engine
    newest = engine.release_version
    follower = ModelFollower.without_consumer()
    follower._apply(engine.release("model", after=0, upto=newest - 1))
    service = FollowerService(follower)
    built = []
    release = follower.release
    follower.release = lambda: built.append(follower.version) or release()
    first = service.release()
    assert service.release() is first and built == [newest - 1]
    follower._apply(engine.release("model", after=newest - 1, upto=newest))
    assert service.release()["version"] == newest and built == [newest - 1, newest]
    assert service.release()["trees"] == engine.release("model").model_dump(mode="json")[
        "trees"]


def test_a_poll_that_failed_leaves_the_trainer_refusing_more_and_errors_are_no_messages(
        kafka_bootstrap, tmp_path, caplog) -> None:
    """Review K2 #4: a poll whose dead letters could not be delivered had counted its
    offsets already, so a second call committed later offsets with that batch neither
    learned nor counted. The trainer refuses every call after a failed one. K2 #6: an error
    event of the consumer (a topic deleted while running) counted as a message read, kept
    the trainer from going idle, and was dropped without a word."""
    topic, engine, trainer = _trainer_on_new_topic(kafka_bootstrap, tmp_path, "failed")
    good = event_json("k", {"a": 0.5}, 0.5)
    batches = [
        [Message(topic=topic, partition=0, offset=o, key=f"k{o}".encode(),
                 value=b"{bad" if o == 3 else good, timestamp=(1, 1000 + o)) for o in range(5)],
        [Message(topic=topic, partition=0, offset=o, key=f"k{o}".encode(), value=good,
                 timestamp=(1, 1000 + o)) for o in range(5, 10)]]
    consumer = trainer.consumer
    trainer.consumer = SimpleNamespace(consume=lambda size, timeout: batches.pop(0))

    def undelivered(*args: Any) -> None:
        raise RuntimeError("the dead-letter topic did not take them")

    trainer._deliver_dead_letters = undelivered
    with pytest.raises(RuntimeError, match="did not take them"):
        trainer.poll_once()
    with pytest.raises(Exception, match="stopped on an error .*did not take them"):
        trainer.poll_once()
    assert engine.positions == 0 and batches  # the second batch was never read
    gone = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)
    trainer.failed = None
    trainer.consumer = SimpleNamespace(consume=lambda size, timeout: [
        Message(topic=topic, partition=0, error=gone)] * 3)
    with caplog.at_level(logging.WARNING, logger=kafka_log.name):
        assert trainer.poll_once() == 0 and trainer.poll_once() == 0
    assert trainer.consumed == 0 and caplog.text.count("Unknown topic or partition") == 1
    trainer.consumer = consumer
    trainer.close()
    engine.close()


def test_a_restart_under_another_event_format_dead_letters_what_it_now_refuses(
        kafka_bootstrap, tmp_path) -> None:
    """Review K2 #3: a batch dead-lettered its bad event at offset 6 (mark 7) and the
    trainer died before committing; restarted with a smaller ``max_bytes``, the 3 kB event
    at offset 3, valid before, was refused, lay below the mark, and was counted a repeat:
    neither learned nor dead-lettered. Marks set under another format are not trusted."""
    topic = _topic("format")
    create_topic(kafka_bootstrap, topic)
    config = _one_feature_config()
    path = tmp_path / "s.db"
    good = event_json("k", {"a": 0.5}, 0.5)
    big = json.dumps({"x": {"a": 0.5}, "y": 0.5}).encode()[:-1] + b" " * 3000 + b"}"
    batch = [Message(topic=topic, partition=0, offset=o, key=f"k{o}".encode(),
                     value={3: big, 6: b"{bad"}.get(o, good), timestamp=(1, 5000 + o))
             for o in range(8)]
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, topics=[topic],
                             model_topic=f"{topic}.m")
    engine = StreamEngine(config, store=SQLiteStore(path, create=True))
    trainer = KafkaTrainer(engine, settings)
    with engine.group_commit():
        trainer._process(batch)
    assert trainer.dead_letters["json"] == 1
    trainer.consumer.close()
    engine.store.close()  # a crash: nothing of the batch committed, the mark kept
    engine = StreamEngine(config, store=SQLiteStore(path))
    trainer = KafkaTrainer(engine, settings, EventFormat(max_bytes=1000))
    with engine.group_commit():
        trainer._process(batch)
    assert trainer.dead_letters == {"oversize": 1, "json": 1}
    assert trainer.dead_letters_repeated == 0
    letters = read_topic(kafka_bootstrap, f"{topic}.dlq", 3)
    assert sorted(dict(m.headers())["reason"].decode() for m in letters) == [
        "json", "json", "oversize"]
    trainer.close()
    engine.close()


def test_a_trainer_creates_its_dead_letter_topics_at_start(kafka_bootstrap, tmp_path) -> None:
    """Review K2 #2: nothing checked the dead-letter topic at start, so a cluster that does
    not create topics on first write stopped the trainer at the first bad event, weeks in,
    and at every restart on that batch. A start creates each event topic's dead-letter
    topic."""
    from confluent_kafka.admin import AdminClient

    topics = [_topic("letters"), _topic("letters")]
    for topic in topics:
        create_topic(kafka_bootstrap, topic)
    config = _one_feature_config()
    engine = StreamEngine(config, store=SQLiteStore(tmp_path / "s.db", create=True))
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert not {f"{t}.dlq" for t in topics} & set(admin.list_topics(timeout=10).topics)
    trainer = KafkaTrainer(engine, KafkaSettings(bootstrap_servers=kafka_bootstrap,
                                                 topics=topics, model_topic=f"{topics[0]}.m"))
    assert {f"{t}.dlq" for t in topics} <= set(admin.list_topics(timeout=10).topics)
    trainer.close()
    engine.close()
