"""A real PostgreSQL server for the tests: Debian's ``postgresql`` binaries (``.ci/run``
installs them), a throw-away cluster on a free loopback port, trust authentication.

PostgreSQL refuses to run as root, so under root (CI) the cluster belongs to the
``postgres`` system user that Debian's package creates and the server runs through
``runuser``; as any other user it runs as that user.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from renyiboost.connectors.local_broker import free_port, port_open


def _bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(
        f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (apt-get install postgresql)")
    return found


class LocalPostgres:
    """``start()`` → a ``postgresql://`` URL; ``kill()`` ends the server at once (SIGKILL of
    the postmaster: what a crashed database host does to its clients); ``start()`` again
    brings the same cluster back."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="renyiboost-pg-"))
        self.data = self.root / "data"
        self.process: subprocess.Popen | None = None
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        self._run([_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                   "--no-sync"], check=True)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, argv: list[str], check: bool = False) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", "postgres", "--"] if self._as_postgres else []
        return subprocess.run(prefix + argv, capture_output=True, text=True, check=check)

    def start(self) -> str:
        prefix = ["runuser", "-u", "postgres", "--"] if self._as_postgres else []
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - the server's own log
        self.process = subprocess.Popen(
            prefix + [_bin("postgres"), "-D", str(self.data), "-p", str(self.port),
                      "-c", "listen_addresses=127.0.0.1",
                      "-c", f"unix_socket_directories={self.root}"],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.timeout
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("PostgreSQL did not start: "
                                   + (self.root / "server.log").read_text()[-2000:])
            time.sleep(0.1)
        return self.url

    def _ready(self) -> bool:
        if not port_open(self.port):
            return False
        return self._run([_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)]
                         ).returncode == 0

    def _postmaster(self) -> int | None:
        pid_file = self.data / "postmaster.pid"
        try:
            return int(pid_file.read_text().split()[0])
        except (FileNotFoundError, IndexError, ValueError):
            return None

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once (no clean shutdown: what a
        crashed database host does to its clients)."""
        postmaster = self._postmaster()
        if postmaster is not None:
            subprocess.run(["pkill", "-KILL", "-P", str(postmaster)], check=False)
            subprocess.run(["kill", "-KILL", str(postmaster)], check=False)
        if self.process is not None:
            self.process.wait(10)
            self.process = None
        deadline = time.monotonic() + self.timeout
        while port_open(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is None:
            return
        self._run([_bin("pg_ctl"), "stop", "-D", str(self.data), "-m", "fast", "-w"])
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()
        self.process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
