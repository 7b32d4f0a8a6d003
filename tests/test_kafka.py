"""Kafka end to end against a real broker: training, model topic, dead letters, crashes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections import Counter
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Message, Producer
from conftest import create_topic, read_topic
from hypothesis import given, settings
from hypothesis import strategies as st

from renyiboost.connectors.events import Rejected
from renyiboost.connectors.kafka import KafkaSettings, KafkaTrainer, ModelFollower, event_json
from renyiboost.exceptions import RenyiboostError, TestingOnlyWarning
from renyiboost.models.booster import SGBDTParams
from renyiboost.models.losses import class_probabilities
from renyiboost.release import OPTIONAL_RELEASE_FIELDS, ModelRelease
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import EngineConfig, StreamEngine
from renyiboost.stream.sources import InMemorySource
from renyiboost.stream.store import SQLiteStore

warnings.simplefilter("ignore", TestingOnlyWarning)


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(
    bootstrap: str, topic: str, values: list[tuple[bytes | None, bytes]], **where
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in values:
        producer.produce(topic, key=key, value=value, **where)
    assert producer.flush(30) == 0


def _abalone_events(limit: int | None = None) -> list[tuple[bytes, bytes]]:
    source = InMemorySource("abalone", scenario="late", batch_size=500, limit=limit)
    events = []
    for batch in source:
        for row, y, key in zip(batch.X, batch.y, batch.keys, strict=True):
            x = source.schema.decode_row(row)
            events.append((key.encode(), event_json(key, x, float(y))))
    return events


def _engine(store: str | SQLiteStore | None, seed: int = 1) -> StreamEngine:
    source = InMemorySource("abalone")
    params = SGBDTParams(task="regression", epsilon=1.0, rounds=20, depth=3,
                         learning_rate=0.3, sampling_rate=0.3, grad_clip=0.3,
                         reg_lambda=20.0, count_share=0.3)
    config = EngineConfig(public_schema=source.schema, params=params, train_every=200,
                          trees_per_trigger=2, warmup=200)
    return StreamEngine(config, store=store, seed=seed)


def _settings(bootstrap: str, topic: str, **kw) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=bootstrap, topics=[topic],
                         group_id=f"g-{topic}", model_topic=f"{topic}.models",
                         model_name="abalone", **kw)


def test_train_from_a_topic_and_serve_from_the_model_topic(kafka_bootstrap, tmp_path) -> None:
    topic = _topic("abalone")
    _produce(kafka_bootstrap, topic, _abalone_events())
    engine = _engine(SQLiteStore(tmp_path / "state.db", create=True))
    trainer = KafkaTrainer(engine, _settings(kafka_bootstrap, topic))
    trainer.run(max_idle=3.0)
    report = engine.operator_telemetry()
    assert trainer.consumed == 4177 and not trainer.dead_letters
    # the committed offsets cover exactly the merged events; the rest are re-read on restart
    assert sum(engine.offsets.values()) == 4177 - engine.n_pending
    assert report.n_trees > 20

    follower = ModelFollower(kafka_bootstrap, f"{topic}.models", "abalone")
    follower.wait_for(engine.release_version)
    probe = [x for x, _ in InMemorySource("abalone").data.records()][:200]
    ours = engine.booster.loss.unscale(np.clip(
        engine.predict_margin(engine.validator.rows(probe)), -1, 1))
    np.testing.assert_allclose([follower.predict_one(x) for x in probe], ours, rtol=1e-12)
    assert follower.guarantee == engine.privacy_guarantee()
    assert follower.store_id == engine.store.identity.store_id
    follower.close()
    # one message per released output, each the public release type and nothing else
    got = read_topic(kafka_bootstrap, f"{topic}.models", engine.release_version)
    assert [json.loads(m.value())["version"] for m in got] == list(
        range(1, engine.release_version + 1))
    assert {frozenset(json.loads(m.value())) for m in got} == {
        frozenset(ModelRelease.model_fields) - OPTIONAL_RELEASE_FIELDS}  # a stream: no grid
    assert all(len(json.loads(m.value())["trees"]) == (v > 0) for v, m in enumerate(got))


def test_a_publisher_behind_its_tree_cap_sends_parts_under_a_small_message_limit(
        kafka_bootstrap, tmp_path) -> None:
    """Many triggers in one poll put the publisher more than ``max_trees`` versions behind,
    and the cap's trees went as one message; past half the producer's ``message.max.bytes``
    (here 3,000 bytes: the cap's six trees and the release's other fields
    are about 3,100, and the one message was refused) that message is now parts, delivered in one transaction through a
    real broker, and a follower reading the topic answers as the engine."""
    topic = _topic("parts")
    _produce(kafka_bootstrap, topic, _abalone_events())
    source = InMemorySource("abalone")
    params = SGBDTParams(task="regression", epsilon=1.0, rounds=40, depth=3,
                         learning_rate=0.3, sampling_rate=0.3, grad_clip=0.3,
                         reg_lambda=20.0, count_share=0.3)
    config = EngineConfig(public_schema=source.schema, params=params, train_every=100,
                          trees_per_trigger=2, warmup=100, max_trees=6)
    engine = StreamEngine(config, store=SQLiteStore(tmp_path / "s.db", create=True), seed=3)
    settings = _settings(kafka_bootstrap, topic, extra={"message.max.bytes": "3000"})
    trainer = KafkaTrainer(engine, settings)
    trainer.run(max_idle=3.0)
    got = read_topic(kafka_bootstrap, f"{topic}.models", 1000, timeout=8.0)
    messages = [ModelRelease.model_validate_json(m.value()) for m in got]
    parted = [m for m in messages if m.part is not None]
    assert parted and parted[-1].part[0] == parted[-1].part[1] > 1
    assert max(len(m.value()) for m in got) < 3000
    follower = ModelFollower(kafka_bootstrap, f"{topic}.models", "abalone")
    follower.wait_for(engine.release_version)
    assert follower.lacking_trees() == 0
    probe = [x for x, _ in source.data.records()][:100]
    ours = engine.booster.loss.unscale(np.clip(
        engine.predict_margin(engine.validator.rows(probe)), -1, 1))
    np.testing.assert_allclose([follower.predict_one(x) for x in probe], ours, rtol=1e-12)
    follower.close()


def test_string_labels_train_from_a_topic_and_follow_as_labels(kafka_bootstrap, tmp_path) -> None:
    """A multiclass model with a public label set of strings, end to end: events carry the
    labels as strings, a label outside the set is a dead letter with reason "label", and the
    follower answers with the set's labels and the engine's own class probabilities."""
    schema = PublicSchema(features={"a": (0.0, 1.0), "b": ["x", "y"]},
                          labels=["low", "mid", "high"])
    rng = np.random.default_rng(5)
    rows = [{"a": float(a), "b": "xy"[int(b)]} for a, b in
            zip(rng.uniform(0, 1, 600), rng.integers(0, 2, 600), strict=True)]
    labels = [schema.classes[min(2, int(3 * x["a"]))] for x in rows]
    topic = _topic("labels")
    events = [(f"k{i}".encode(), event_json(f"k{i}", x, label))
              for i, (x, label) in enumerate(zip(rows, labels, strict=True))]
    events.insert(300, (b"bad", event_json("bad", rows[0], "huge")))
    _produce(kafka_bootstrap, topic, events, partition=0)
    config = EngineConfig.from_defaults(schema, "classification", epsilon=4.0, rounds=12,
                                        train_every=100, warmup=100, trigger_growth=0.0)
    engine = StreamEngine(config, store=SQLiteStore(tmp_path / "s.db", create=True), seed=2)
    trainer = KafkaTrainer(engine, _settings(kafka_bootstrap, topic))
    trainer.run(max_idle=3.0)
    assert dict(trainer.dead_letters) == {"label": 1}
    report = engine.operator_telemetry()
    assert report.n_active + report.n_retired + report.n_pending == 600  # every valid event

    follower = ModelFollower(kafka_bootstrap, f"{topic}.models", "abalone")
    follower.wait_for(engine.release_version)
    proba = class_probabilities(engine.predict_margin(engine.validator.rows(rows[:100])))
    predicted = [follower.predict_one(x) for x in rows[:100]]
    assert predicted == [schema.classes[c] for c in proba.argmax(axis=1)]
    assert set(predicted) <= {"low", "mid", "high"} and len(set(predicted)) > 1
    got = follower.predict_proba_one(rows[0])
    assert list(got) == ["low", "mid", "high"]
    np.testing.assert_allclose(list(got.values()), proba[0], rtol=1e-12)
    follower.close()


def test_bad_events_go_to_the_dead_letter_topic_with_reasons(kafka_bootstrap, tmp_path) -> None:
    topic = _topic("dlq")
    good = _abalone_events(limit=300)
    bad = [
        (b"k1", b"{not json"),
        (b"k2", json.dumps({"x": {"length": "long"}, "y": 5}).encode()),
        (b"k3", b'{"x": {"length": -Infinity}, "y": 5}'),  # NaN would be a missing value
        (b"k4", json.dumps({"x": {"colour": 1.0}, "y": 5}).encode()),
        (b"k5", json.dumps({"x": {"length": 0.5, "pad": "z" * 70_000}, "y": 5}).encode()),
        (None, json.dumps({"x": {"length": 0.5}, "y": 5}).encode()),
        (b"k7", json.dumps({"x": {"length": 0.5}, "y": 99}).encode()),
    ]
    _produce(kafka_bootstrap, topic, good[:150] + bad + good[150:], partition=0)
    engine = _engine(SQLiteStore(tmp_path / "s.db", create=True))
    trainer = KafkaTrainer(engine, _settings(kafka_bootstrap, topic))
    trainer.run(max_idle=3.0)
    assert dict(trainer.dead_letters) == {"json": 1, "schema": 3, "oversize": 1,
                                          "missing_key": 1, "label": 1}
    engine.train(1)
    assert engine.operator_telemetry().n_active == 300  # every valid event trained
    assert engine.positions == 307  # and every event, dead-lettered or not, is a position

    got = read_topic(kafka_bootstrap, f"{topic}.dlq", len(bad))
    assert len(got) == len(bad)
    headers = sorted((dict(m.headers()) for m in got), key=lambda h: int(h["source.offset"]))
    assert [h["reason"].decode() for h in headers] == [
        "json", "schema", "schema", "schema", "oversize", "missing_key", "label"]
    assert all(h["source.topic"].decode() == topic for h in headers)
    assert [int(h["source.offset"]) for h in headers] == list(range(150, 157))
    ids = [h["renyiboost.dlq.id"].decode().rsplit(":", 1) for h in headers]
    assert [name for name, _ in ids] == [f"{topic}:0:{offset}" for offset in range(150, 157)]
    assert all(int(stamp) > 0 for _, stamp in ids)  # for consumers that dedupe


def _service_config(tmp_path: Path, bootstrap: str, topic: str, state: str | None = None
                    ) -> Path:
    """A ``renyiboost train`` config for Abalone from ``topic``, with its state store created
    (``state``: a SQLite file in ``tmp_path`` unless given, e.g. a ``postgresql://`` URL)."""
    features = "\n".join(
        f"{name} = {json.dumps(list(spec))}"
        for name, spec in InMemorySource("abalone").schema.features.items()
    )
    text = f"""
source = "kafka://{bootstrap}/{topic}"
state = "{state or tmp_path / 'state.db'}"
model_topic = "{topic}.models"
model_name = "abalone"

[kafka]
group_id = "g-{topic}"
batch_size = 20

[model]
task = "regression"
epsilon = 1.0
target_bounds = [0, 30]
rounds = 20
depth = 4
sampling_rate = 0.3
learning_rate = 0.3
train_every = 40
trees_per_trigger = 3
warmup = 40
seed = 5

[model.features]
{features}
"""
    path = tmp_path / "train.toml"
    path.write_text(text)
    from renyiboost.connectors.service import init_state, load_config

    init_state(load_config(path))  # creating the store is an explicit act
    return path


def _trainer_process(config: Path, max_idle: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "renyiboost", "train", "--config", str(config),
         "--max-idle", str(max_idle), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def _engine_from(config: Path) -> StreamEngine:
    from renyiboost.connectors.service import engine_config, load_config

    cfg = load_config(config)
    return StreamEngine(engine_config(cfg.model), store=cfg.state, seed=cfg.model.seed)


@pytest.mark.parametrize("store, kills", [("sqlite", 20), ("postgres", 12)])
def test_kill_minus_nine_at_random_points_loses_and_repeats_nothing(
        kafka_bootstrap, tmp_path, request, store, kills):
    """SIGKILLs at seeded random moments while events keep arriving; then a clean run. On the
    SQLite store and on the PostgreSQL store (a real server, which sees its client vanish
    in the middle of a transaction; each restart comes at once, and the store waits for the
    server to end its killed predecessor's session).

    Exactly once: every event's key is in the ledger, none was merged twice (each key is
    sent once, so a replayed event would be an upsert), the committed offsets cover every
    event, and every published tree is the committed tree of its round.
    """
    topic = _topic("crash")
    events = _abalone_events(limit=3000)
    state = None
    if store == "postgres":
        server = request.getfixturevalue("postgres_server")
        state = f"{server.url}?schema=crash_{topic.replace('-', '_').replace('.', '_')}"
    config = _service_config(tmp_path, kafka_bootstrap, topic, state)
    rng = np.random.default_rng(20261123)
    chunk = len(events) // kills
    for i in range(kills):
        _produce(kafka_bootstrap, topic, events[i * chunk:(i + 1) * chunk])
        process = _trainer_process(config, max_idle=120)
        time.sleep(float(rng.uniform(1.0, 4.0)))
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        assert process.returncode == -signal.SIGKILL
    final = _trainer_process(config, max_idle=4)
    _, err = final.communicate(timeout=120)
    assert final.returncode == 0, err.decode()[-2000:]

    engine = _engine_from(config)
    keys = {key.decode() for key, _ in events}
    statuses = {engine.operator_budget_of(k).status for k in keys}
    assert statuses <= {"active", "retired"}  # none skipped
    assert engine.counters["upserts"] == 0 and engine.counters["superseded"] == 0  # none twice
    assert sum(engine.offsets.values()) == len(events) == engine.positions
    report = engine.operator_telemetry()
    assert report.max_spent_rdp <= engine.privacy_guarantee().budget_rdp
    assert report.n_pending == 0

    follower = ModelFollower(kafka_bootstrap, f"{topic}.models", "abalone")
    follower.wait_for(engine.release_version)
    assert follower.version == engine.release_version
    np.testing.assert_array_equal(follower.ensemble.leaves, engine.ensemble.leaves)
    np.testing.assert_array_equal(follower.ensemble.thresholds, engine.ensemble.thresholds)
    follower.close()


def test_sigterm_finishes_the_batch_commits_and_exits_cleanly(kafka_bootstrap, tmp_path):
    topic = _topic("term")
    events = _abalone_events(limit=1000)
    _produce(kafka_bootstrap, topic, events)
    config = _service_config(tmp_path, kafka_bootstrap, topic)
    process = _trainer_process(config, max_idle=120)
    deadline = time.monotonic() + 60
    consumed = 0
    while consumed < len(events) and time.monotonic() < deadline:
        line = process.stdout.readline()
        if line:
            consumed = json.loads(line)["consumed"]
    assert consumed == len(events)
    process.send_signal(signal.SIGTERM)
    process.wait(15)
    assert process.returncode == 0
    engine = _engine_from(config)
    assert sum(engine.offsets.values()) == len(events)  # every event committed on the way out
    report = engine.operator_telemetry()
    assert report.n_active + report.n_retired == len(events)


def test_replay_command_produces_the_drifted_data_set(kafka_bootstrap, tmp_path) -> None:
    from renyiboost.cli import main as cli

    topic = _topic("replay")
    client = tmp_path / "client.properties"  # a secured cluster's settings would go here
    client.write_text("# librdkafka settings\nclient.id = replay-test\n\n")
    assert cli(["replay", "abalone", "--scenario", "late", "--to",
                f"kafka://{kafka_bootstrap}/{topic}", "--limit", "400", "--rate", "4000",
                "--client-config", str(client)]) == 0
    got = read_topic(kafka_bootstrap, topic, 400)
    assert len(got) == 400
    events = [json.loads(m.value()) for m in got]
    assert len({m.key() for m in got}) == 400  # the identity is the message key
    assert all(set(e) == {"x", "y"} and 0 <= e["y"] <= 30 for e in events)


# --------------------------------------------------------------------- the batch fast path

#: Every kind of bad event next to valid ones: (message key, value, reason or None if valid).
#: The message key is the identity (the default format).
def _json(event) -> bytes:
    return json.dumps(event).encode()


_MIXED = [
    (b"v1", _json({"x": {"length": 0.5, "sex": "F"}, "y": 5}), None),
    (b"m1", b"{not json", "json"),
    (b"m2", None, "json"),  # an empty value (a tombstone)
    (b"m3", _json({"x": {"length": "long"}, "y": 5}), "schema"),
    (b"m4", b'{"x": {"length": -Infinity}, "y": 5}', "schema"),  # (NaN: missing)
    (b"m5", _json({"x": {"colour": 1.0}, "y": 5}), "schema"),
    (b"m6", _json({"x": {"length": True}, "y": 5}), "schema"),
    (b"m7", _json({"y": 5}), "schema"),
    (b"m8", _json([{"x": {}, "y": 5}]), "schema"),
    (b"m9", b'{"x": {"length": 1' + b"0" * 400 + b'}, "y": 5}', "schema"),
    (b"mj", b'{"x": {"length": Infinity}, "y": 5}', "schema"),
    (b"mh", _json({"key": "mh", "x": {"length": 0.5}, "y": 5}), "schema"),  # payload key: no
    (b"ma", _json({"x": {"length": 0.5, "pad": "z" * 70_000}, "y": 5}), "oversize"),
    (None, _json({"x": {"length": 0.5}, "y": 5}), "missing_key"),
    (b"", _json({"x": {"length": 0.5}, "y": 5}), "missing_key"),
    (b"\xff\xfe", _json({"x": {"length": 0.5}, "y": 5}), "key"),  # not UTF-8
    (b"k" * 300, _json({"x": {"length": 0.5}, "y": 5}), "key"),  # longer than MAX_KEY_CHARS
    (b"mb", _json({"x": {"length": 0.5}, "y": 99}), "label"),
    (b"mc", b'{"x": {"length": 0.5}, "y": NaN}', "label"),
    (b"md", b'{"x": {"length": 0.5}, "y": 1' + b"0" * 400 + b"}", "label"),
    (b"me", _json({"x": {"length": 0.5}, "y": True}), "label"),  # a bool is no regression label
    (b"mi", _json({"x": {"length": 0.5}, "y": "5"}), "label"),  # nor is a numeric string
    (b"mf", _json({"x": {"length": 2.5, "sex": "?"}, "y": 30}), None),
    (b"mg", _json({"x": {"height": 0.1}, "y": 0}), None),
    ("Zoe\u0308".encode(), _json({"x": {"length": None}, "y": 1.5}), None),  # NFC: "Zoë"
    (b"v1", _json({"x": {"diameter": 0.25}, "y": 7}), None),
]


def _parser():
    from renyiboost.connectors.events import EventParser

    return EventParser(_engine(None).validator)


def _same_batch(fast, slow) -> None:
    assert fast.index == slow.index and fast.keys == slow.keys and fast.labels == slow.labels
    np.testing.assert_array_equal(fast.rows, slow.rows)
    assert fast.rejected == slow.rejected


def test_the_batch_parser_rejects_exactly_what_the_per_message_parser_rejects() -> None:
    parser = _parser()
    values = [v for _, v, _ in _MIXED]
    keys = [k for k, _, _ in _MIXED]
    fast = parser.parse_batch(values, keys)
    _same_batch(fast, parser.parse_each(values, keys))
    assert [why.reason for _, why in fast.rejected] == [r for _, _, r in _MIXED if r]
    assert fast.keys == ["v1", "mf", "mg", "Zo\u00eb", "v1"]
    assert fast.labels == [5.0, 30.0, 0.0, 1.5, 7.0]
    assert fast.rows[1].tolist()[:2] == [3.0, 1.0]  # "other" category; length clipped
    # a batch of valid events only, and an empty one
    good = [i for i, (_, _, r) in enumerate(_MIXED) if r is None]
    _same_batch(parser.parse_batch([values[i] for i in good], [keys[i] for i in good]),
                parser.parse_each([values[i] for i in good], [keys[i] for i in good]))
    assert parser.parse_batch([], []).rows.shape == (0, 8)


@settings(max_examples=60, deadline=None)
@given(picks=st.lists(st.integers(0, len(_MIXED) - 1), max_size=60))
def test_any_mix_of_events_parses_as_one_message_at_a_time(picks: list[int]) -> None:
    parser = _parser()
    values = [_MIXED[i][1] for i in picks]
    keys = [_MIXED[i][0] for i in picks]
    _same_batch(parser.parse_batch(values, keys), parser.parse_each(values, keys))


def test_parsing_a_batch_leaves_the_cycle_collector_as_it_found_it() -> None:
    import gc

    parser = _parser()
    values = [v for _, v, _ in _MIXED]
    keys = [k for k, _, _ in _MIXED]
    assert gc.isenabled()
    parser.parse_batch(values, keys)
    assert gc.isenabled()
    gc.disable()
    try:
        parser.parse_batch(values, keys)
        assert not gc.isenabled()
    finally:
        gc.enable()


def _messages(topic: str) -> list[Message]:
    """Valid Abalone events and every kind of bad one, over two interleaved partitions,
    as a consumer would return them (offsets in order per partition)."""
    good = _abalone_events(limit=700)
    mixed = [(k, v) for k, v, _ in _MIXED]
    values = good[:300] + mixed + good[300:] + mixed[1:4]  # ends with bad events
    out, next_offset = [], [0, 0]
    for i, (key, value) in enumerate(values):
        partition = 0 if i % 3 else 1
        out.append(Message(topic=topic, partition=partition, offset=next_offset[partition],
                           key=key, value=value))
        next_offset[partition] += 1
    return out


def test_the_trainer_feeds_a_mixed_batch_like_one_event_at_a_time(kafka_bootstrap,
                                                                  tmp_path) -> None:
    """The batch path trains the same records in the same order with the same triggers,
    dead-letters the same events with the same reasons, and ends at the same offsets as
    feeding the events one by one (the engine's reference path)."""
    from renyiboost.connectors.events import EventParser

    topic = _topic("mixed")
    create_topic(kafka_bootstrap, topic, partitions=2)
    messages = _messages(topic)
    engine = _engine(SQLiteStore(tmp_path / "s.db", create=True))
    trainer = KafkaTrainer(engine, _settings(kafka_bootstrap, topic))
    # batches that cut through triggers; one of bad events only, ending both partitions
    cuts = [0, 250, 301, 316, 566, len(messages)]
    for start, stop in pairwise(cuts):
        with engine.group_commit():
            trainer._process(messages[start:stop])
    engine.flush()
    trainer.producer.flush(10)

    reference = _engine(None)
    parser = EventParser(reference.validator)
    expected_dlq = []
    for m in messages:
        position = (f"{m.topic()}:{m.partition()}", m.offset() + 1)
        parsed = parser.parse(m.value(), m.key())
        if isinstance(parsed, Rejected):
            reference.empty_event(position)
            expected_dlq.append((m.partition(), m.offset(), parsed.reason, parsed.detail))
        else:
            reference.add(parsed.row[None, :], [parsed.label], [parsed.key], [position])
    reference.flush()

    ends = Counter(m.partition() for m in messages)
    assert engine.offsets == reference.offsets == {f"{topic}:{p}": n for p, n in ends.items()}
    assert engine.positions == reference.positions == len(messages)
    assert engine._keys == reference._keys and engine.counters == reference.counters
    pool, reference_pool = engine.active_pool(), reference.active_pool()
    for name in ("uids", "X", "target", "margin", "spent"):
        np.testing.assert_array_equal(getattr(pool, name), getattr(reference_pool, name))
    np.testing.assert_array_equal(engine.ensemble.leaves, reference.ensemble.leaves)
    assert engine.booster.rounds_done == reference.booster.rounds_done > 0

    got = read_topic(kafka_bootstrap, f"{topic}.dlq", len(expected_dlq))
    dlq = sorted((int(h["source.partition"]), int(h["source.offset"]), h["reason"].decode(),
                  h["detail"].decode()) for h in (dict(m.headers()) for m in got))
    assert dlq == sorted(expected_dlq)
    assert len(dlq) == sum(1 for _, _, r in _MIXED if r) + 3
    assert dict(trainer.dead_letters) == dict(Counter(r for *_, r, _ in expected_dlq))


class _Stuck:
    """A producer whose messages never leave."""

    def __init__(self) -> None:
        self.callbacks: list = []

    def produce(self, *args, on_delivery=None, **kwargs) -> None:
        self.callbacks.append(on_delivery)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return len(self.callbacks)


class _Refused(_Stuck):
    """A producer whose messages the broker refuses (e.g. no dead-letter topic)."""

    def flush(self, timeout: float) -> int:
        from confluent_kafka import KafkaError

        for callback in self.callbacks:
            callback(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), None)
        self.callbacks = []
        return 0


@pytest.mark.parametrize("producer", [_Stuck, _Refused])
def test_a_batch_commits_only_after_its_dead_letters_are_delivered(
    kafka_bootstrap, tmp_path, producer
) -> None:
    topic = _topic("undelivered")
    create_topic(kafka_bootstrap, topic, partitions=2)
    engine = _engine(SQLiteStore(tmp_path / "s.db", create=True))
    trainer = KafkaTrainer(engine, _settings(kafka_bootstrap, topic))
    messages = _messages(topic)
    with engine.group_commit():
        trainer._process(messages[:300])  # valid events only: rounds and offsets commit
    before = dict(engine.offsets)
    assert before and engine.booster.rounds_done > 0

    trainer.producer = producer()
    with pytest.raises(RenyiboostError, match="dead letters not delivered"), \
            engine.group_commit():
        trainer._process(messages[300:700])  # bad events, and enough valid ones to train
    trainer.consumer.close()
    engine.close()
    restarted = _engine(str(tmp_path / "s.db"))  # what a restart would resume from
    assert restarted.offsets == before  # the whole batch is re-read, dead letters included
    assert restarted.booster.rounds_done == 2
