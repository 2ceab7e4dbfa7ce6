"""A real ZooKeeper for tests: Debian's package, one standalone server on 127.0.0.1.

fastcoord moves coordinators through ZooKeeper, so its tests need the real server, with
its sessions, ephemeral nodes and expiry, not a mock of them. This starts the server of
Debian's `zookeeper` package (its jar, on the `java` of testing_java) with a
configuration of its own in a directory the test gives, on a free loopback port, and
stops it by its PID:

    with zookeeper_server(tmp_path) as zk:
        kazoo = KazooClient(hosts=zk.hosts)   # "127.0.0.1:PORT"
        zk.stop()                             # ZooKeeper gone: sessions can expire
        zk.start()                            # back, on the same port and data

The server is in the machine's package, not on PyPI: `make test` installs it where it is
missing (apt-get), and FASTCOORD_ZOOKEEPER_CLASSPATH points elsewhere (a ZooKeeper
unpacked by hand: its lib/*.jar).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastcoord.cluster.supervisor import free_ports
from fastcoord.testing_java import java

DEBIAN_CLASSPATH = "/usr/share/java/zookeeper.jar"
CLASSPATH_ENV = "FASTCOORD_ZOOKEEPER_CLASSPATH"
INSTALL_HINT = (
    "install Debian's zookeeper package (apt-get install zookeeper) or set "
    f"{CLASSPATH_ENV} to a ZooKeeper's jars"
)
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"  # standalone: no quorum
TICK_MS = 500  # sessions may last 2 to 20 ticks: 1 s to 10 s, short enough for tests
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


class ZooKeeperUnavailable(RuntimeError):
    """No ZooKeeper on this machine."""


def classpath() -> str:
    """Where ZooKeeper's classes are: the environment's say, else Debian's jar (whose
    manifest names the jars it needs)."""
    given = os.environ.get(CLASSPATH_ENV)
    if given:
        return given
    if not Path(DEBIAN_CLASSPATH).exists():
        raise ZooKeeperUnavailable(f"no ZooKeeper: {INSTALL_HINT}")
    return DEBIAN_CLASSPATH


class ZooKeeper:
    """One standalone server: its port, its directory, its process while it runs."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self.config = directory / "zoo.cfg"
        self.log = directory / "zookeeper.log"
        (directory / "data").mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            f"tickTime={TICK_MS}\n"
            f"dataDir={directory / 'data'}\n"
            f"clientPort={port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"  # its Jetty would take port 8080
            "4lw.commands.whitelist=ruok,srvr\n"
        )

    @property
    def hosts(self) -> str:
        """kazoo's `hosts` (and `--zookeeper`) for this server."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the server and wait until it answers `ruok`."""
        if self.process is not None:
            raise RuntimeError("ZooKeeper runs already")
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [java(), "-cp", classpath(), MAIN, str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.ok():
            if self.process.poll() is not None:
                self.process = None
                raise RuntimeError(f"ZooKeeper exited at start: see {self.log}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ZooKeeper did not answer within {START_TIMEOUT_S} s")
            time.sleep(0.05)

    def ok(self) -> bool:
        """Whether the server answers ZooKeeper's `ruok` with `imok`."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"ruok")
                return sock.recv(4) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within STOP_TIMEOUT_S; nothing if it is
        not running. Its data stay for start()."""
        process, self.process = self.process, None
        if process is None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def zookeeper_server(directory: Path) -> Iterator[ZooKeeper]:
    """A ZooKeeper running in `directory` (created) for the block, stopped after it."""
    [port] = free_ports(1)
    server = ZooKeeper(directory, port)
    server.start()
    try:
        yield server
    finally:
        server.stop()
