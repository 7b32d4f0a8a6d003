"""One key, one ledger on Kafka (real broker): a trainer that would start a second ledger
refuses, a dead cluster is an error, dead letters are not repeated after a crash, and two
neighbouring topics publish the same messages."""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import time
import tracemalloc
import uuid
import warnings

import numpy as np
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition
from conftest import create_topic, read_topic

from renyiboost.cli import main as cli
from renyiboost.connectors.events import EventFormat, EventParser, event_json
from renyiboost.connectors.kafka import (
    KafkaSettings,
    KafkaTrainer,
    key_partition,
    model_releases,
    murmur2,
    start_within,
)
from renyiboost.connectors.local_broker import free_port
from renyiboost.exceptions import BrokerUnavailable, LedgerConflict, TestingOnlyWarning
from renyiboost.models.booster import SGBDTParams
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import EngineConfig, StreamEngine
from renyiboost.stream.sources import InMemorySource
from renyiboost.stream.store import SQLiteStore

warnings.simplefilter("ignore", TestingOnlyWarning)
SOURCE = InMemorySource("abalone", scenario="iid", batch_size=500, limit=600)


def _events(drop: str | None = None) -> list[tuple[bytes, bytes | None]]:
    """Abalone events keyed by person; ``drop``'s events become tombstones (empty events)."""
    out = []
    for batch in SOURCE:
        for i, (row, y) in enumerate(zip(batch.X, batch.y, strict=True)):
            key = f"p{(len(out) + i) % 150}"
            value = event_json(key, SOURCE.schema.decode_row(row), float(y))
            out.append((key.encode(), None if key == drop else value))
    return out


def _produce(bootstrap: str, topic: str, events) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value in events:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0


def _engine(store, max_rounds: int | None = None) -> StreamEngine:
    params = SGBDTParams(task="regression", epsilon=1.0, rounds=4, depth=3, sampling_rate=0.5,
                         learning_rate=0.3, reg_lambda=20.0, max_rounds=max_rounds)
    config = EngineConfig(public_schema=SOURCE.schema, params=params, train_every=50,
                          trees_per_trigger=2, warmup=120)
    return StreamEngine(config, store=store, seed=3)


def _settings(bootstrap: str, topic: str, group: str | None = None, **kw) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=bootstrap, topics=[topic],
                         group_id=group or f"g-{topic}", model_topic=f"{topic}.models",
                         model_name="m", **kw)


def _train(bootstrap: str, topic: str, store, group: str | None = None) -> StreamEngine:
    engine = _engine(store)
    try:
        KafkaTrainer(engine, _settings(bootstrap, topic, group)).run(max_idle=2.0)
    except BaseException:
        engine.close()
        raise
    engine.flush()
    return engine


def _topic() -> str:
    return f"ledger-{uuid.uuid4().hex[:8]}"


def test_a_second_store_on_a_consumed_topic_or_model_is_refused(kafka_bootstrap, tmp_path):
    topic = _topic()
    _produce(kafka_bootstrap, topic, _events())
    first = _train(kafka_bootstrap, topic, SQLiteStore(tmp_path / "a.db", create=True))
    assert first.release_version > 2
    first.close()
    # the same group: its committed offsets are ahead of a new store's
    with pytest.raises(LedgerConflict, match="has consumed"):
        _train(kafka_bootstrap, topic, SQLiteStore(tmp_path / "b.db", create=True))
    # another group, the same model: the model topic holds another store's releases
    with pytest.raises(LedgerConflict, match="from state store"):
        _train(kafka_bootstrap, topic, SQLiteStore(tmp_path / "c.db", create=True),
               group="another-group")


def test_an_old_copy_of_the_store_is_refused(kafka_bootstrap, tmp_path):
    """A store restored from a backup older than the published model: its keys' charges
    since the backup are lost, so it must not train (nor publish) again."""
    topic = _topic()
    events = _events()
    _produce(kafka_bootstrap, topic, events[:300])
    path = tmp_path / "s.db"
    _train(kafka_bootstrap, topic, SQLiteStore(path, create=True)).close()
    shutil.copy(path, tmp_path / "backup.db")  # closed: everything is in the main file
    _produce(kafka_bootstrap, topic, events[300:])
    newer = _train(kafka_bootstrap, topic, str(path))
    newer.close()
    shutil.copy(tmp_path / "backup.db", path)
    with pytest.raises(LedgerConflict, match="behind epoch"):  # the store's own record
        _train(kafka_bootstrap, topic, str(path))
    (tmp_path / "s.db.epoch").unlink()  # without that record, as at a new path: Kafka's checks
    with pytest.raises(LedgerConflict, match="has consumed"):
        _train(kafka_bootstrap, topic, str(path))
    with pytest.raises(LedgerConflict, match="lost commits"):
        _train(kafka_bootstrap, topic, str(path), group="a-fresh-group")


def test_a_store_that_went_back_with_its_topic_restarts(kafka_bootstrap, tmp_path):
    """A re-created topic: the store counts on from its new offsets, but the consumer group
    still holds the old topic's (told before), and every restart was refused as if another
    trainer had read them (review K, 29 November). The offset a partition went back from
    is recorded before the batch that goes back commits; a group offset up to it is the
    store's own, one beyond it is still refused."""
    topic = _topic()
    create_topic(kafka_bootstrap, topic)
    value = event_json("k", {"a": 0.5}, 0.5)

    def batch(stamp: int, n: int) -> list[Message]:
        return [Message(topic=topic, partition=0, offset=o, key=f"k{stamp}-{o}".encode(),
                        value=value, timestamp=(1, stamp + o)) for o in range(n)]

    config = EngineConfig.from_defaults(PublicSchema(features={"a": (0.0, 1.0)},
                                                     target_bounds=(0.0, 1.0)), "regression", 1.0)
    path, settings = tmp_path / "s.db", _settings(kafka_bootstrap, topic)
    engine = StreamEngine(config, store=SQLiteStore(path, create=True), seed=1)
    trainer = KafkaTrainer(engine, settings)
    with engine.group_commit():
        trainer._process(batch(1_000, 120))  # the old topic: offsets 0 … 119
    engine.flush()
    trainer.consumer.commit(offsets=[TopicPartition(topic, 0, engine.offsets[f"{topic}:0"])],
                            asynchronous=False)  # what the trainer tells the group
    with engine.group_commit():
        trainer._process(batch(9_000, 20))  # re-created: offsets 0 … 19
    trainer.close()  # stopped before the group heard of it
    engine.flush()
    assert engine.offsets == {f"{topic}:0": 20}
    engine.close()
    engine = StreamEngine(config, store=SQLiteStore(path), seed=1)
    KafkaTrainer(engine, settings).close()  # its own old offset: not another trainer's
    group = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": settings.group_id})
    group.commit(offsets=[TopicPartition(topic, 0, 121)], asynchronous=False)
    with pytest.raises(LedgerConflict, match="has consumed"):  # beyond it: another's
        KafkaTrainer(engine, settings)
    # once the group stands at the store's offset the allowance ends (review D2)
    group.commit(offsets=[TopicPartition(topic, 0, 20)], asynchronous=False)
    KafkaTrainer(engine, settings).close()
    group.commit(offsets=[TopicPartition(topic, 0, 100)], asynchronous=False)
    group.close()
    with pytest.raises(LedgerConflict, match="has consumed"):
        KafkaTrainer(engine, settings)
    engine.close()


def test_a_topic_recreated_while_the_trainer_was_away_is_read_from_its_start(
        kafka_bootstrap, tmp_path, caplog):
    """A topic deleted and created again while the trainer was down, whose new log reached
    past the stored offset, was read from that offset: its first events were never trained
    nor dead-lettered (review K, 29 November). The store records each topic's id; under a
    new id the topic is read from its log's start, and goes back as one re-created under a
    running trainer does."""
    from confluent_kafka.admin import AdminClient

    topic, events = _topic(), _events()
    create_topic(kafka_bootstrap, topic)
    _produce(kafka_bootstrap, topic, events[:130])
    path = tmp_path / "s.db"
    engine = _train(kafka_bootstrap, topic, SQLiteStore(path, create=True))
    assert engine.offsets == {f"{topic}:0": 130} and engine.positions == 130
    engine.close()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_topics([topic])[topic].result(10)
    deadline = time.monotonic() + 20
    while topic in admin.list_topics(timeout=5).topics and time.monotonic() < deadline:
        time.sleep(0.2)
    create_topic(kafka_bootstrap, topic)
    _produce(kafka_bootstrap, topic, events[130:330])  # 200 new events, offsets 0 … 199
    with caplog.at_level(logging.WARNING, "renyiboost.kafka"):
        engine = _train(kafka_bootstrap, topic, str(path))
    assert "re-created while the trainer was away" in caplog.text
    assert engine.offsets == {f"{topic}:0": 200}
    assert engine.positions == 330  # every new event read, none passed over
    engine.close()
    engine = _train(kafka_bootstrap, topic, str(path))  # the new id is the store's now
    assert engine.positions == 330
    engine.close()


def test_a_model_topic_without_the_published_offset_is_read_from_its_start(
        kafka_bootstrap, tmp_path, caplog):
    """The start check read the model topic from the offset of the store's last release.
    Where the topic no longer held that offset (re-created, and another store published
    there), the consumer's reset jumped to the end and the check saw nothing, so another
    ledger's releases passed (against Tansu, which never says out of range, it waited for
    the connect timeout instead). It now reads such a partition from its start. The other
    store's release is its version 0: the check looks at every release, not only the
    newest version."""
    topic = _topic()
    _produce(kafka_bootstrap, topic, _events()[:300])
    path = tmp_path / "s.db"
    _train(kafka_bootstrap, topic, SQLiteStore(path, create=True)).close()
    settings = _settings(kafka_bootstrap, topic)
    foreign = model_releases(settings)[0].model_copy(update={"store_id": "another-store"})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(settings.model_topic, key=b"m", value=foreign.model_dump_json())
    assert producer.flush(30) == 0
    db = sqlite3.connect(path)
    (published,) = db.execute("SELECT value FROM meta WHERE name = 'side:published'").fetchone()
    db.execute("UPDATE meta SET value = ? WHERE name = 'side:published'",
               (json.dumps({**json.loads(published), "offset": 10_000}),))
    db.commit()
    db.close()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "renyiboost.kafka"), \
            pytest.raises(LedgerConflict, match="from state store another-store"):
        _train(kafka_bootstrap, topic, str(path))
    assert time.monotonic() - started < settings.connect_timeout
    assert "no longer holds the last published release" in caplog.text
    assert "at offset 10000 of partition 0" in caplog.text


def test_a_recreated_model_topic_gets_every_version_again(kafka_bootstrap, tmp_path, caplog):
    """A model topic deleted while the trainer was down is created again at its start; it
    then published only the versions after the store's record of its last release, and a
    follower stalled for good at version 1 (its server answered 503). Every version is
    published again now, and a new follower takes the whole model. The release is looked
    for, not only its offset: here a second model shares the topic and, restarted first,
    re-publishes its versions past this model's recorded offset."""
    from confluent_kafka.admin import AdminClient

    from renyiboost.connectors.kafka import ModelFollower

    topic, other = _topic(), _topic()
    _produce(kafka_bootstrap, topic, _events()[:300])
    _produce(kafka_bootstrap, other, _events()[:300])
    path = tmp_path / "s.db"
    engine = _train(kafka_bootstrap, topic, SQLiteStore(path, create=True))
    versions = engine.release_version
    engine.close()
    settings = _settings(kafka_bootstrap, topic)
    sharing = KafkaSettings(bootstrap_servers=kafka_bootstrap, topics=[other],
                            group_id=f"g-{other}", model_topic=settings.model_topic,
                            model_name="b")

    def train_sharing(store) -> None:
        engine = _engine(store)
        try:
            KafkaTrainer(engine, sharing).run(max_idle=2.0)
            engine.flush()
        finally:
            engine.close()

    train_sharing(SQLiteStore(tmp_path / "b.db", create=True))
    assert [r.version for r in model_releases(settings)] == list(range(1, versions + 1))
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # held until it answers
    admin.delete_topics([settings.model_topic])[settings.model_topic].result(10)
    deadline = time.monotonic() + 10
    while model_releases(settings) and time.monotonic() < deadline:
        time.sleep(0.2)
    train_sharing(str(tmp_path / "b.db"))  # first: its versions pass this model's offset
    with caplog.at_level(logging.WARNING, "renyiboost.kafka"):
        _train(kafka_bootstrap, topic, str(path)).close()
    assert [r.version for r in model_releases(settings)] == list(range(1, versions + 1))
    assert f"no longer holds the last published release (version {versions}" in caplog.text
    follower = ModelFollower(kafka_bootstrap, settings.model_topic, settings.model_name)
    follower.wait_for(versions)
    assert follower.version == versions and not follower.stalled
    follower.close()


def test_the_model_topic_keeps_every_release_or_the_trainer_refuses_it(kafka_bootstrap,
                                                                       tmp_path):
    """Kafka deletes a topic's messages after 7 days by default, and a group's offsets 7
    days after its last member left: with both gone, a store restored (with its record)
    from an older backup passed every start check and re-published versions its followers
    held. The trainer creates a missing model topic keeping every release, and refuses one
    that deletes or compacts them."""
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    topic = _topic()
    _produce(kafka_bootstrap, topic, _events()[:300])
    _train(kafka_bootstrap, topic, SQLiteStore(tmp_path / "s.db", create=True)).close()
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    settings = _settings(kafka_bootstrap, topic)
    [described] = admin.describe_configs([ConfigResource("topic", settings.model_topic)]
                                         ).values()
    assert {name: entry.value for name, entry in described.result(10).items()} == {
        "cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
    assert model_releases(settings)  # and it holds the releases
    for config, shown in (({"retention.ms": "604800000"}, "retention.ms=604800000"),
                          ({"cleanup.policy": "compact"}, "cleanup.policy=compact")):
        other = _topic()
        _produce(kafka_bootstrap, other, _events()[:10])
        admin.create_topics([NewTopic(f"{other}.models", 1, 1, config=config)]
                            )[f"{other}.models"].result(10)
        with pytest.raises(LedgerConflict, match=f"does not keep every release \\({shown}"):
            _train(kafka_bootstrap, other, SQLiteStore(tmp_path / f"{other}.db", create=True))


@pytest.mark.parametrize(("limit", "forever"), [
    ("-1", True), ("9223372036854775807", True), ("604800000", False), ("0", False),
    ("", False)])
def test_a_retention_limit_keeps_everything_only_if_it_cannot_be_reached(limit, forever):
    from renyiboost.connectors.kafka import _forever

    assert _forever(limit) is forever


def test_a_release_of_a_later_epoch_of_the_store_is_refused(kafka_bootstrap, tmp_path):
    """A copy of the store that opened a later epoch and published (even an old version
    again, so that the newest version on the topic is still this store's) is another
    ledger running beside this one."""
    topic = _topic()
    _produce(kafka_bootstrap, topic, _events()[:300])
    path = tmp_path / "s.db"
    _train(kafka_bootstrap, topic, SQLiteStore(path, create=True)).close()
    settings = _settings(kafka_bootstrap, topic)
    first = model_releases(settings)[0]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(settings.model_topic, key=b"m",
                     value=first.model_copy(update={"epoch": first.epoch + 5}).model_dump_json())
    assert producer.flush(30) == 0
    with pytest.raises(LedgerConflict, match=f"epoch {first.epoch + 5} of this store"):
        _train(kafka_bootstrap, topic, str(path))


@pytest.mark.parametrize(("offset", "retained", "start"), [
    (12, (10, 20), 12), (10, (10, 20), 10), (19, (10, 20), 19),
    (9, (10, 20), OFFSET_BEGINNING),  # retention deleted it
    (20, (10, 20), OFFSET_BEGINNING), (5, (0, 0), OFFSET_BEGINNING)])  # re-created
def test_the_start_check_reads_only_an_offset_the_partition_holds(offset, retained, start):
    """Retention passing the published offset cannot be injected into Tansu (it has no
    DeleteRecords and no retention in memory): the rule is checked on its own."""
    assert start_within(offset, retained, "models:0") == start


def test_changed_partitions_and_memory_stores_are_refused(kafka_bootstrap, tmp_path):
    topic = _topic()
    _produce(kafka_bootstrap, topic, _events()[:100])
    path = tmp_path / "s.db"
    _train(kafka_bootstrap, topic, SQLiteStore(path, create=True)).close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = ? WHERE name = 'side:partitions'",
               (json.dumps({topic: 3}),))
    db.commit()
    db.close()
    with pytest.raises(LedgerConflict, match="partitions of the event topics changed"):
        _train(kafka_bootstrap, topic, str(path))
    other = _topic()  # another topic is named as such (it was "the partitions changed")
    _produce(kafka_bootstrap, other, _events()[:10])
    with pytest.raises(LedgerConflict, match=rf"trained on the topics \['{topic}'\], and "
                                             rf"this start reads \['{other}'\]"):
        _train(kafka_bootstrap, other, str(path))
    with pytest.raises(LedgerConflict, match="durable state store"):
        KafkaTrainer(_engine(None), _settings(kafka_bootstrap, topic))


def test_an_unreachable_cluster_is_an_error_not_a_hang(tmp_path, capsys) -> None:
    closed = f"127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(BrokerUnavailable, match="answered within 2 s"):
        KafkaTrainer(_engine(SQLiteStore(tmp_path / "s.db", create=True)),
                     _settings(closed, "t", connect_timeout=2.0))
    assert cli(["replay", "abalone", "--to", f"kafka://{closed}/t", "--limit", "10",
                "--connect-timeout", "2"]) == 1
    assert time.monotonic() - start < 20
    err = capsys.readouterr().err
    assert "renyiboost: error: no Kafka broker at" in err


def test_dead_letters_are_not_repeated_after_a_crash(kafka_bootstrap, tmp_path, monkeypatch):
    topic = _topic()
    events = _events()[:200]
    bad = [(f"bad{i}".encode(), b"{not json") for i in range(5)]
    _produce(kafka_bootstrap, topic, events[:100] + bad + events[100:])
    path = tmp_path / "s.db"
    engine = _engine(SQLiteStore(path, create=True))
    trainer = KafkaTrainer(engine, _settings(kafka_bootstrap, topic, batch_size=1000))

    def crash(change) -> None:
        raise OSError("killed before the round's commit (injected)")

    monkeypatch.setattr(engine.store, "commit", crash)
    with pytest.raises(OSError, match="injected"):
        for _ in range(20):
            trainer.poll_once()
    assert sum(trainer.dead_letters.values()) == 5  # delivered, then the crash
    trainer.consumer.close()
    engine.close()
    monkeypatch.undo()

    again = _engine(str(path))
    trainer = KafkaTrainer(again, _settings(kafka_bootstrap, topic))
    trainer.run(max_idle=2.0)
    assert trainer.dead_letters_repeated == 5 and not trainer.dead_letters
    assert again.positions == 205
    # asks for more than 5, so it reads to the timeout: long beside a group join's 3-4 s
    assert len(read_topic(kafka_bootstrap, f"{topic}.dlq", 10, timeout=12.0)) == 5


def test_neighbouring_topics_publish_the_same_messages(kafka_bootstrap, tmp_path) -> None:
    """Topic B is topic A with one person's events replaced by empty events (tombstones,
    dead-lettered) at the same offsets: the model topics carry the same number of messages,
    with the same versions, fields and tree shapes; only DP values differ."""
    shapes = []
    for name, events in (("a", _events()), ("b", _events(drop="p7"))):
        topic = _topic()
        _produce(kafka_bootstrap, topic, events)
        engine = _train(kafka_bootstrap, topic, SQLiteStore(tmp_path / f"{name}.db", create=True))
        got = read_topic(kafka_bootstrap, f"{topic}.models", engine.release_version)
        shape = []
        for message in got:
            data = json.loads(message.value())
            data.pop("store_id"), data.pop("init_score")
            data["trees"] = [(t["round"], len(t["leaves"])) for t in data["trees"]]
            shape.append(data)
        shapes.append(shape)
        engine.close()
    assert len(shapes[0]) == len(shapes[1]) > 5
    assert shapes[0] == shapes[1]


def test_a_payload_key_when_configured_is_the_only_identity(kafka_bootstrap, tmp_path):
    from renyiboost.connectors.events import EventParser

    engine = _engine(None)
    parser = EventParser(engine.validator, EventFormat(key_field="user"))
    good = json.dumps({"user": "u1", "x": {"length": 0.5}, "y": 5}).encode()
    assert parser.parse(good, b"ignored").key == "u1"
    missing = json.dumps({"x": {"length": 0.5}, "y": 5}).encode()
    assert parser.parse(missing, b"message-key").reason == "missing_key"
    batch = parser.parse_batch([good, missing], [b"a", b"b"])
    assert batch.keys == ["u1"] and batch.rejected[0][1].reason == "missing_key"
    np.testing.assert_array_equal(batch.rows[0], parser.parse(good, None).row)


def test_a_cluster_that_goes_away_stops_the_trainer_with_an_error(tmp_path, caplog) -> None:
    """The broker dies under a running trainer: after ``connect_timeout`` it stops with
    ``BrokerUnavailable`` (nothing past the last commit is lost: the offsets are in the
    store), and librdkafka's complaints arrive through ``logging``, not raw stderr."""
    from renyiboost.connectors.local_broker import LocalBroker

    broker = LocalBroker(tmp_path / "tansu.log")
    bootstrap = broker.start()
    topic = _topic()
    _produce(bootstrap, topic, _events()[:200])
    engine = _engine(SQLiteStore(tmp_path / "s.db", create=True))
    trainer = KafkaTrainer(engine, _settings(bootstrap, topic, connect_timeout=3.0))
    while trainer.consumed < 200:
        trainer.poll_once()
    broker.stop()
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="renyiboost.kafka"), \
            pytest.raises(BrokerUnavailable, match="answered within 3 s"):
        trainer.run(max_idle=120)
    assert time.monotonic() - start < 60
    assert any(record.name == "renyiboost.kafka" for record in caplog.records)
    assert engine.offsets  # what was committed stays committed
    engine.close()


def test_neighbouring_topics_publish_the_same_messages_with_shards(kafka_bootstrap,
                                                                   tmp_path) -> None:
    """The same with two key shards (in this process) reading a 4-partition topic: the
    model topic's messages are the same in number, versions and fields; the stores of the
    shards each own their partitions; only the model topic is published."""
    from test_kafka import create_topic

    from renyiboost.connectors.kafka import ShardedKafkaTrainer, partition_map_for
    from renyiboost.stream.sharded import (
        LocalShards,
        ShardedEngine,
        create_shard_stores,
        shard_locations,
    )

    shapes, config = [], _engine(None).config
    for name, events in (("a", _events()), ("b", _events(drop="p7"))):
        topic = _topic()
        create_topic(kafka_bootstrap, topic, partitions=4)
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
        for key, value in events:  # partitioned by the message key
            producer.produce(topic, key=key, value=value)
        assert producer.flush(30) == 0
        settings = _settings(kafka_bootstrap, topic)
        locations = shard_locations(str(tmp_path / name), 2)
        (tmp_path / name).mkdir()
        create_shard_stores(config, locations)
        source = KafkaTrainer.for_shard(settings, None, partition_map_for(settings, 2))
        engine = ShardedEngine(config, LocalShards.open(config, locations, 3, source), seed=3)
        ShardedKafkaTrainer(engine, settings).run(max_idle=2.0)
        assert engine.positions == len(events)
        got = read_topic(kafka_bootstrap, f"{topic}.models", engine.release_version)
        shape = []
        for message in got:
            data = json.loads(message.value())
            data.pop("store_id"), data.pop("init_score")
            data["trees"] = [t["round"] for t in data["trees"]]
            shape.append(data)
        shapes.append(shape)
        owned = [sorted(s["engine"]["offsets"]) for s in engine.operator_telemetry()["shards"]]
        assert owned == [[f"{topic}:0", f"{topic}:2"], [f"{topic}:1", f"{topic}:3"]]
        engine.close()
    assert len(shapes[0]) == len(shapes[1]) >= 5
    assert shapes[0] == shapes[1]


def test_a_second_trainer_for_the_model_fences_the_first(kafka_bootstrap, tmp_path):
    """Both pass the start's checks (nothing is published yet); the second's publisher
    fences the first's, whose next publish stops it with LedgerConflict, so only one ledger
    ever reaches the model topic. Two trainers once trained and published side by side."""
    topic = _topic()
    _produce(kafka_bootstrap, topic, _events()[:300])
    first_engine = _engine(SQLiteStore(tmp_path / "a.db", create=True))
    second_engine = _engine(SQLiteStore(tmp_path / "b.db", create=True))
    first = KafkaTrainer(first_engine, _settings(kafka_bootstrap, topic))
    second = KafkaTrainer(second_engine, _settings(kafka_bootstrap, topic, "other-group"))
    with pytest.raises(LedgerConflict, match="fenced"):
        first.run(max_idle=2.0)
    second.run(max_idle=2.0)
    releases = [json.loads(m.value()) for m in read_topic(
        kafka_bootstrap, f"{topic}.models", second_engine.release_version)]
    assert {r["store_id"] for r in releases} == {second_engine.store.identity.store_id}
    assert [r["version"] for r in releases] == list(range(1, second_engine.release_version + 1))
    first_engine.close()
    second_engine.close()


def test_a_new_model_topic_is_given_every_version(kafka_bootstrap, tmp_path):
    """The store's record of the last published version once held for any model topic: a
    restart with another one published only the versions after it, and every follower
    of the new topic stalled for good at the first. The record names its topic and model
    now, and a new one gets every version from 1 (public releases: no budget)."""
    topic = _topic()
    _produce(kafka_bootstrap, topic, _events()[:300])
    engine = _engine(SQLiteStore(tmp_path / "a.db", create=True))
    KafkaTrainer(engine, _settings(kafka_bootstrap, topic)).run(max_idle=2.0)
    versions = engine.release_version
    assert versions >= 3
    engine.close()
    engine = _engine(SQLiteStore(tmp_path / "a.db"))
    moved = _settings(kafka_bootstrap, topic).model_copy(update={"model_topic": f"{topic}.new"})
    KafkaTrainer(engine, moved).run(max_idle=2.0)
    assert engine.release_version == versions  # nothing new to learn: only re-published
    releases = [json.loads(m.value()) for m in read_topic(
        kafka_bootstrap, f"{topic}.new", versions, timeout=10.0)]
    assert [r["version"] for r in releases] == list(range(1, versions + 1))
    assert engine.store.get_meta("published")["topic"] == f"{topic}.new"
    engine.close()


@pytest.mark.parametrize("person", [(10, 60, 118), (0,)])
def test_offsets_without_a_message_are_positions(kafka_bootstrap, tmp_path, person):
    """On a compacted topic the offsets that compaction removed depend on who upserted: a
    person's superseded records vanish, and as tombstones all of them do. Positions once
    counted delivered messages, so two neighbouring compacted topics read to the same
    offset stood at 150 and 149 positions and released differently. Every offset is a
    position now, holding a message or not, from the log's start: a new store counted from
    the first message delivered, so a person whose upsert was at offset 0 still moved the
    clock (``person``: one person's upserts)."""
    events = _events()[:200]

    def delivered(neighbour: bool) -> list[tuple[int, bytes, bytes]]:
        return [(offset, key, value) for offset, (key, value) in enumerate(events)
                if offset not in person or (not neighbour and offset == person[-1])]

    seen = []
    for neighbour in (False, True):
        topic = _topic()
        create_topic(kafka_bootstrap, topic)
        engine = _engine(SQLiteStore(tmp_path / f"{neighbour}.db", create=True))
        trainer = KafkaTrainer(engine, _settings(kafka_bootstrap, topic))
        messages = [Message(topic=topic, partition=0, offset=offset, key=key, value=value)
                    for offset, key, value in delivered(neighbour) if offset <= 151]
        with engine.group_commit():
            trainer._process(messages)
        seen.append((engine.positions, engine.release_version))
        engine.flush()
        assert engine.offsets == {f"{topic}:0": 152}  # the offsets are positions too
        trainer.close()
        engine.close()
    assert seen[0] == seen[1] and seen[0][0] == 152


def test_a_long_stretch_of_empty_offsets_is_one_run(kafka_bootstrap, tmp_path, caplog):
    """A trainer down while retention deleted a million unread messages reads on a million
    offsets later: each is an empty position, committed as such, and the gap is logged and
    counted in the operator telemetry. Spelled out as a tuple per offset that gap took
    over 100 MB (a gigabyte for ten million); as a run it takes a few numbers."""
    topic, gap = _topic(), 1_000_000
    create_topic(kafka_bootstrap, topic)
    # a few rounds: an unbounded stream releases a tree at every trigger of the gap too
    engine = _engine(SQLiteStore(tmp_path / "gap.db", create=True), max_rounds=6)
    trainer = KafkaTrainer(engine, _settings(kafka_bootstrap, topic))
    (key, value), offsets = _events()[0], [*range(10), 400, 401 + gap]
    messages = [Message(topic=topic, partition=0, offset=offset, key=key, value=value)
                for offset in offsets]
    with engine.group_commit():  # past the warmup: the rounds' kernels are compiled
        trainer._process(messages[:-1])
    tracemalloc.start()
    with caplog.at_level(logging.WARNING, "renyiboost.kafka"), engine.group_commit():
        trainer._process(messages[-1:])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    engine.flush()
    assert engine.positions == gap + 402
    assert engine.offsets == {f"{topic}:0": gap + 402}
    assert trainer.telemetry()["empty_positions"] == gap + 390
    assert f"offsets 401 to {gap + 400} hold no message" in caplog.text
    assert "offsets 10 to 399" not in caplog.text  # shorter than EMPTY_RUN_WARNING
    assert peak < 20e6, peak
    trainer.close()
    engine.close()


def test_the_key_source_is_pinned_for_the_ledgers_life(kafka_bootstrap, tmp_path):
    """``[events] key_field = "user"`` at one start and the message key at the next made
    one person two keys, each with a budget (0.88 spent against a budget of 0.48). A
    start that fails pins nothing: a first start against an unreachable cluster once pinned
    the key source of a store that had read nothing, and the corrected start was refused."""
    topic = _topic()
    create_topic(kafka_bootstrap, topic)
    failed = _engine(SQLiteStore(tmp_path / "failed.db", create=True))
    with pytest.raises(BrokerUnavailable):
        KafkaTrainer(failed, KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}",
                                           topics=[topic], connect_timeout=1),
                     EventFormat(key_field="user"))
    assert failed.store.get_meta("key_source") is None
    KafkaTrainer(failed, _settings(kafka_bootstrap, topic)).close()  # the corrected start
    assert failed.store.get_meta("key_source") == {"message_key": True}
    failed.close()
    store = tmp_path / "keys.db"
    engine = _engine(SQLiteStore(store, create=True))
    KafkaTrainer(engine, _settings(kafka_bootstrap, topic),
                 EventFormat(key_field="user")).close()
    engine.close()
    for event_format in (None, EventFormat(key_field="account")):
        engine = _engine(SQLiteStore(store))
        with pytest.raises(LedgerConflict, match="payload field 'user'"):
            KafkaTrainer(engine, _settings(kafka_bootstrap, topic), event_format)
        engine.close()
    engine = _engine(SQLiteStore(store))
    KafkaTrainer(engine, _settings(kafka_bootstrap, topic),
                 EventFormat(key_field="user")).close()
    engine.close()


def test_a_replay_and_a_topic_never_feed_one_store(kafka_bootstrap, tmp_path):
    """A replay keys its records by row number: a store Kafka fed, trained with a forgotten
    ``--source`` (the example config's default is ``memory:abalone``), took rows "0", "1", …
    into the ledgers of the people with those keys, and its next Kafka start published the
    trees. Either way round, the second source is refused before it reads a record."""
    from renyiboost.connectors.service import _train_from_memory

    topic = _topic()
    create_topic(kafka_bootstrap, topic)
    fed = tmp_path / "kafka.db"
    engine = _engine(SQLiteStore(fed, create=True))
    KafkaTrainer(engine, _settings(kafka_bootstrap, topic)).close()
    with pytest.raises(LedgerConflict, match=r"keys came from the message key, and "
                                             r"memory:abalone keys its records by the row "
                                             r"numbers of memory:abalone.*--new-state"):
        _train_from_memory(engine, InMemorySource("abalone", batch_size=1000),
                           "memory:abalone", False)
    assert engine.positions == 0
    engine.close()
    replayed = tmp_path / "replay.db"
    engine = _engine(SQLiteStore(replayed, create=True))
    _train_from_memory(engine, InMemorySource("abalone", batch_size=1000), "memory:abalone",
                       False)
    assert engine.positions == 4177
    engine.close()
    engine = _engine(SQLiteStore(replayed))
    with pytest.raises(LedgerConflict, match="keys came from the row numbers of memory:abalone"):
        KafkaTrainer(engine, _settings(kafka_bootstrap, topic))
    _train_from_memory(engine, InMemorySource("abalone", batch_size=1000), "memory:abalone",
                       False)  # the replay itself continues (nothing left to feed)
    assert engine.positions == 4177
    engine.close()


def test_a_shard_dead_letters_an_event_outside_its_keys_partition(kafka_bootstrap,
                                                                   tmp_path) -> None:
    """Shards own partitions, so one key must have one partition: an event that a producer
    put elsewhere (another partitioner, or a partition chosen by hand) would give its key a
    ledger and a budget on a second shard. Against a real broker: confluent-kafka's own
    placement is the one ``consistent_random`` computes for every key, and the events
    placed by hand in the other partition go to the dead letters (reason ``partition``);
    the same placements read with ``murmur2_random`` (the Java client's) disagree."""
    topic = _topic()
    create_topic(kafka_bootstrap, topic, partitions=2)
    events = [(key, value) for key, value in _events()[:60] if value is not None]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    misplaced = {key for key, _ in events[::10]}
    for key, value in events:
        if key in misplaced:  # by hand, in the partition its hash does not give it
            producer.produce(topic, key=key, value=value,
                             partition=1 - key_partition(key, 2, "consistent_random"))
        else:
            producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    messages = read_topic(kafka_bootstrap, topic, len(events))
    assert len(messages) == len(events)
    placed = [m for m in messages if m.key() not in misplaced]
    assert all(m.partition() == key_partition(m.key(), 2, "consistent_random") for m in placed)
    parser = EventParser(StreamEngine(EngineConfig.from_defaults(
        SOURCE.schema, "regression", 1.0)).validator)
    batch = parser.parse_batch([m.value() for m in messages], [m.key() for m in messages])
    kept = KafkaTrainer._placed_by_key(batch, messages, {topic: 2}, "consistent_random")
    rejected = {messages[i].key() for i, why in kept.rejected if why.reason == "partition"}
    assert rejected == misplaced and len(kept.index) == len(placed)
    java = KafkaTrainer._placed_by_key(batch, messages, {topic: 2}, "murmur2_random")
    assert len(java.rejected) > len(misplaced)  # other hashes: about half the keys differ
    # and a shard's trainer sends them to the dead-letter topic with the reason
    engine = StreamEngine(EngineConfig.from_defaults(SOURCE.schema, "regression", 1.0),
                          store=SQLiteStore(tmp_path / "shard0.db", create=True),
                          coordinated=True)
    trainer = KafkaTrainer(engine, _settings(kafka_bootstrap, topic), shard=0,
                           partition_map={topic: [0, 1]})
    mine = [m for m in messages if m.partition() == 0]
    with engine.group_commit():
        trainer._process(mine)
    expected = {m.key() for m in mine if m.key() in misplaced}
    letters = read_topic(kafka_bootstrap, f"{topic}.dlq", len(expected))
    assert expected and {m.key() for m in letters} == expected
    assert {dict(m.headers())["reason"] for m in letters} == {b"partition"}
    assert trainer.dead_letters["partition"] == len(expected)
    trainer.close()
    engine.close()
    # the partitioner is pinned: read with the Java client's, a person's events would reach
    # the other partition, so the other shard and a second budget (review S, 29 November)
    engine = StreamEngine(EngineConfig.from_defaults(SOURCE.schema, "regression", 1.0),
                          store=SQLiteStore(tmp_path / "shard0.db"), coordinated=True)
    java_settings = _settings(kafka_bootstrap, topic).model_copy(
        update={"partitioner": "murmur2_random"})
    with pytest.raises(LedgerConflict, match="by the consistent_random partitioner, and "
                                             "this start checks them against murmur2_random"):
        KafkaTrainer(engine, java_settings, shard=0, partition_map={topic: [0, 1]})
    engine.close()


@pytest.mark.parametrize(("data", "java"), [
    (b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829), (b"abc", 479470107),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
])
def test_murmur2_is_the_java_clients(data, java) -> None:
    """Kafka's own vectors (UtilsTest.testMurmur2 of the Java client), signed as Java
    gives them: a Java producer's placement is checked with this hash."""
    assert murmur2(data) == java % 2**32
