"""The test ZooKeeper (fastcoord.testing_zookeeper) is the real server: kazoo connects, an
ephemeral node lives as long as its session, a killed client's session expires, sessions
outlive ZooKeeper's own outage, and its data outlive a restart."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState

from fastcoord.cluster.zookeeper import reconnecting
from fastcoord.testing import wait_for
from fastcoord.testing_zookeeper import ZooKeeper, zookeeper_server

pytestmark = pytest.mark.cluster

SESSION_S = 2.0  # 4 of the test server's 500 ms ticks


class Watched:
    """A kazoo client and the states its listener saw, in order."""

    def __init__(self, zk: ZooKeeper) -> None:
        self.states: list[str] = []
        self.lock = threading.Lock()
        self.client = KazooClient(
            hosts=zk.hosts, timeout=SESSION_S, connection_retry=reconnecting(int(SESSION_S * 1000))
        )
        self.client.add_listener(self._seen)
        self.client.start(timeout=10)

    def _seen(self, state: str) -> None:
        with self.lock:
            self.states.append(state)

    def saw(self, state: str) -> bool:
        with self.lock:
            return state in self.states

    def close(self) -> None:
        self.client.stop()
        self.client.close()


def test_an_ephemeral_node_lives_with_its_session(tmp_path: Path) -> None:
    with zookeeper_server(tmp_path / "zk") as zk:
        owner, other = Watched(zk), Watched(zk)
        try:
            owner.client.create(
                "/fastcoord/nodes/1", b"127.0.0.1:9092", ephemeral=True, makepath=True
            )
            assert other.client.get("/fastcoord/nodes/1")[0] == b"127.0.0.1:9092"
            owner.close()
            wait_for("the node's end", lambda: other.client.exists("/fastcoord/nodes/1") is None)
        finally:
            other.close()


def test_sessions_outlive_zookeepers_own_outage(tmp_path: Path) -> None:
    """A stopped ZooKeeper expires nobody: at its restart it restores the sessions from its
    log with their timeouts started afresh, and a client that comes back within one keeps
    its session and its ephemeral nodes, however long the outage was. (So a node cut off
    from ZooKeeper cannot learn from ZooKeeper that its session ended: it must count the
    session timeout itself.)"""
    with zookeeper_server(tmp_path / "zk") as zk:
        watched = Watched(zk)
        try:
            watched.client.create("/held", ephemeral=True)
            session = watched.client.client_id
            for outage_s in (0.2, SESSION_S * 2):
                with watched.lock:
                    watched.states.clear()
                zk.stop()
                wait_for("SUSPENDED", lambda: watched.saw(KazooState.SUSPENDED))
                time.sleep(outage_s)
                zk.start()
                wait_for("CONNECTED", lambda: watched.client.state == KazooState.CONNECTED)
                assert watched.client.client_id == session
                assert not watched.saw(KazooState.LOST)
                assert watched.client.exists("/held") is not None
        finally:
            watched.close()


KILLED_OWNER = """
import sys, time
from kazoo.client import KazooClient
client = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[2]))
client.start(timeout=10)
client.create("/owner", b"me", ephemeral=True)
print("created", flush=True)
time.sleep(600)
"""


def test_a_killed_clients_ephemeral_node_expires_with_its_session(tmp_path: Path) -> None:
    """What a SIGKILLed node leaves: its session, which ZooKeeper expires after the session
    timeout, and its ephemeral nodes with it (a watch fires)."""
    with zookeeper_server(tmp_path / "zk") as zk:
        owner = subprocess.Popen(
            [sys.executable, "-c", KILLED_OWNER, zk.hosts, str(SESSION_S)],
            stdout=subprocess.PIPE,
            text=True,
        )
        watched = Watched(zk)
        try:
            assert owner.stdout is not None and owner.stdout.readline() == "created\n"
            gone = threading.Event()
            assert watched.client.exists("/owner", watch=lambda _: gone.set()) is not None
            owner.kill()
            owner.wait()
            killed_at = time.monotonic()
            assert gone.wait(SESSION_S + 10)
            took = time.monotonic() - killed_at
            assert watched.client.exists("/owner") is None
            # Not at once (the session outlives its TCP connection), at most about a
            # session timeout plus the server's tick of expiry checks.
            assert took >= SESSION_S / 2, took
        finally:
            if owner.poll() is None:
                owner.kill()
                owner.wait()
            if owner.stdout is not None:
                owner.stdout.close()
            watched.close()


def test_the_data_outlive_a_restart(tmp_path: Path) -> None:
    with zookeeper_server(tmp_path / "zk") as zk:
        watched = Watched(zk)
        try:
            watched.client.create("/fastcoord/map", b"0:1,1:2", makepath=True)
        finally:
            watched.close()
        zk.stop()
        assert not zk.ok()
        zk.start()
        watched = Watched(zk)
        try:
            assert watched.client.get("/fastcoord/map")[0] == b"0:1,1:2"
        finally:
            watched.close()
