"""Nodes in a ZooKeeper-kept cluster, on a real ZooKeeper: registration, the keeper's
election, and the map every node follows as nodes come and go and operators move
partitions."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fastcoord.cluster.routing import Node
from fastcoord.cluster.zookeeper import (
    DEFAULT_CHROOT,
    Membership,
    MoveRefused,
    OwnershipMap,
    split_hosts,
)
from fastcoord.testing import wait_for
from fastcoord.testing_zookeeper import ZooKeeper, zookeeper_server

pytestmark = pytest.mark.cluster

PARTITIONS = 50
SESSION_MS = 2000  # 4 of the test server's 500 ms ticks


class Member:
    """A Membership and the maps and states it reported."""

    def __init__(self, zk: ZooKeeper, node_id: int) -> None:
        self.maps: list[OwnershipMap] = []
        self.states: list[str] = []
        self.lock = threading.Lock()
        self.node = Node(node_id, "127.0.0.1", 9000 + node_id)
        self.membership = Membership(
            zk.hosts, self.node, PARTITIONS, SESSION_MS, self._map, self.states.append
        )

    def _map(self, read: OwnershipMap) -> None:
        with self.lock:
            self.maps.append(read)

    def last(self) -> OwnershipMap | None:
        with self.lock:
            return self.maps[-1] if self.maps else None

    def owners(self) -> dict[int, int]:
        last = self.last()
        return {} if last is None else last.owners


@pytest.fixture
def zk(tmp_path: Path) -> Iterator[ZooKeeper]:
    with zookeeper_server(tmp_path / "zookeeper") as server:
        yield server


NODE_PROCESS = """
import sys, time
from fastcoord.cluster.routing import Node
from fastcoord.cluster.zookeeper import Membership
node = Node(int(sys.argv[2]), "127.0.0.1", 9000 + int(sys.argv[2]))
m = Membership(sys.argv[1], node, 50, 2000, lambda read: None, lambda state: None)
m.start()
print("registered", m.client.client_id[0], flush=True)
time.sleep(120)
"""


def node_process(zk: ZooKeeper, node_id: int) -> tuple[subprocess.Popen[str], int]:
    """A node's membership in a process of its own, registered when this returns, and its
    ZooKeeper session's id: a SIGKILL ends it without a goodbye to ZooKeeper."""
    process = subprocess.Popen(
        [sys.executable, "-c", NODE_PROCESS, zk.hosts, str(node_id)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    word, session = process.stdout.readline().split()
    assert word == "registered"
    return process, int(session)


def stop_process(process: subprocess.Popen[str]) -> None:
    process.kill()
    process.wait(timeout=30)
    if process.stdout is not None:
        process.stdout.close()


def started(zk: ZooKeeper, *ids: int) -> list[Member]:
    members = [Member(zk, node_id) for node_id in ids]
    for member in members:
        member.membership.start()
    return members


def spread_over(members: list[Member], ids: set[int]) -> Callable[[], bool]:
    """Every member has read a map over exactly `ids`, and the same one."""

    def check() -> bool:
        maps = [m.owners() for m in members]
        return all(m == maps[0] for m in maps) and set(maps[0].values()) == ids

    return check


def counts(owners: dict[int, int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for node in owners.values():
        out[node] = out.get(node, 0) + 1
    return out


def test_hosts_and_chroot() -> None:
    assert split_hosts("127.0.0.1:2181") == ("127.0.0.1:2181", DEFAULT_CHROOT)
    assert split_hosts("a:1,b:2/kafka/x/") == ("a:1,b:2", "/kafka/x")
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        split_hosts("nohost")


def test_three_nodes_share_the_partitions_and_follow_one_map(zk: ZooKeeper) -> None:
    members = started(zk, 1, 2, 3)
    try:
        wait_for("one map over three nodes", spread_over(members, {1, 2, 3}))
        assert sorted(counts(members[0].owners()).values()) == [16, 17, 17]
        assert sum(m.membership.keeper for m in members) == 1
        nodes = members[0].last()
        assert nodes is not None and nodes.nodes[2] == Node(2, "127.0.0.1", 9002)
    finally:
        for m in members:
            m.membership.stop()


def test_a_node_that_leaves_gives_up_only_its_own_partitions(zk: ZooKeeper) -> None:
    members = started(zk, 1, 2, 3)
    try:
        wait_for("one map over three nodes", spread_over(members, {1, 2, 3}))
        before = dict(members[0].owners())
        leaving = next(m for m in members if not m.membership.keeper)
        leaving.membership.stop()
        rest = [m for m in members if m is not leaving]
        ids = {m.node.node_id for m in rest}
        wait_for("the map over the two left", spread_over(rest, ids))
        after = rest[0].owners()
        moved = {p for p in before if before[p] != after[p]}
        assert moved == {p for p, n in before.items() if n == leaving.node.node_id}
        assert sorted(counts(after).values()) == [25, 25]
    finally:
        for m in members:
            m.membership.stop()


def test_the_keepers_end_elects_another_which_keeps_the_map(zk: ZooKeeper) -> None:
    members = started(zk, 1, 2, 3)
    try:
        wait_for("one map over three nodes", spread_over(members, {1, 2, 3}))
        keeper = next(m for m in members if m.membership.keeper)
        keeper.membership.stop()
        rest = [m for m in members if m is not keeper]
        wait_for("a new keeper", lambda: sum(m.membership.keeper for m in rest) == 1)
        wait_for("the map over the rest", spread_over(rest, {m.node.node_id for m in rest}))
    finally:
        for m in members:
            m.membership.stop()


def test_a_killed_nodes_partitions_move_within_its_session_timeout(zk: ZooKeeper) -> None:
    """A node SIGKILLed says no goodbye: ZooKeeper expires its session after the timeout,
    and the keeper moves its partitions then."""
    members = started(zk, 1, 2)
    victim, _ = node_process(zk, 3)
    try:
        wait_for("one map over three nodes", spread_over(members, {1, 2, 3}))
        victim.kill()
        killed = time.monotonic()
        wait_for("the map over the two left", spread_over(members, {1, 2}))
        elapsed = time.monotonic() - killed
        print(f"moved {elapsed:.2f} s after the kill")
        assert elapsed < SESSION_MS / 1000 + 5, elapsed
    finally:
        stop_process(victim)
        for m in members:
            m.membership.stop()


def test_a_new_node_takes_its_share_and_nothing_else_moves(zk: ZooKeeper) -> None:
    members = started(zk, 1, 2)
    try:
        wait_for("the map over two", spread_over(members, {1, 2}))
        before = dict(members[0].owners())
        members += started(zk, 3)
        wait_for("the map over three", spread_over(members, {1, 2, 3}))
        after = members[0].owners()
        moved = {p for p in before if before[p] != after[p]}
        assert all(after[p] == 3 for p in moved) and len(moved) == counts(after)[3] == 16
    finally:
        for m in members:
            m.membership.stop()


def test_an_operators_move_changes_one_partition_and_is_checked(zk: ZooKeeper) -> None:
    members = started(zk, 1, 2, 3)
    try:
        wait_for("one map over three nodes", spread_over(members, {1, 2, 3}))
        before = dict(members[0].owners())
        partition = next(p for p, n in before.items() if n != 2)
        written = members[0].membership.move(partition, 2)
        assert written.owners == {**before, partition: 2}
        wait_for("the moved map", lambda: all(m.owners() == written.owners for m in members))
        with pytest.raises(MoveRefused, match=r"node 9 is not live \(live: \[1, 2, 3\]\)"):
            members[1].membership.move(0, 9)
        with pytest.raises(MoveRefused, match="no offsets partition 50"):
            members[1].membership.move(50, 1)
    finally:
        for m in members:
            m.membership.stop()


def test_a_restarted_node_waits_for_its_old_session_to_end(zk: ZooKeeper) -> None:
    """Node 1 killed and started again within its session timeout: its old registration
    lives until that session expires, and only then does the new one register."""
    old, old_session = node_process(zk, 1)
    old.kill()
    killed = time.monotonic()
    members = started(zk, 1)
    try:
        client = members[0].membership.client
        path = "/fastcoord/nodes/1"

        def owner() -> int | None:
            stat = client.exists(path)
            return None if stat is None else stat.ephemeralOwner

        first = owner()
        # The killed node's session ends no sooner than a third of its timeout after the
        # kill (its last ping); a new registration seen before that took the old one's place.
        assert first == old_session or time.monotonic() - killed >= SESSION_MS / 3000, (
            f"registered by session {first} {time.monotonic() - killed:.2f} s after the kill"
        )
        wait_for(
            "the registration, once the old session expired",
            lambda: owner() == client.client_id[0],
            30,
        )
        # The map (perhaps the killed node's, which named node 1 too) once it is kept anew.
        wait_for("the map over node 1", spread_over(members, {1}), 30)
        wait_for("node 1 keeping the map", lambda: members[0].membership.keeper, 30)
    finally:
        stop_process(old)
        for m in members:
            m.membership.stop()
