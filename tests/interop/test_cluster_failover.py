"""A node of a three-node cluster SIGKILLed and started again 20 s later, with the same id
and data directory: by `fastcoord cluster`, and by hand. Real consumers (confluent-kafka)
in groups on every node, each given node 0's address alone.

- The other nodes' groups see no new generation and no error: their coordinators never
  stopped.
- The dead node's groups are Stable again within their session timeout plus the node's
  load time, counted from its restart.
- Every offset acknowledged before the kill reads back from the restarted node.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from fastcoord.client.admin import AdminClient
from fastcoord.client.blocking import Connection
from fastcoord.cluster.routing import Cluster, Node
from fastcoord.core.native import partition
from fastcoord.testing import (
    ServerProcess,
    cluster_list,
    free_ports,
    start_cluster,
    start_node,
    wait_for,
)
from tests.interop import groups
from tests.interop.confluent_members import Poller, confluent
from tests.interop.groups import PARTITIONS, TOPIC

# kafka-python 3.0.12 leaves the socket of each connection refused (by the dead node) to the
# garbage collector, at the end of the session: the members here are librdkafka's.
pytestmark = pytest.mark.cluster


NODES = 3
VICTIM = 1
GROUPS_PER_NODE = 2
MEMBERS = 2
SESSION_TIMEOUT_MS = 10_000
DOWN_S = 20
NODE_ARGS = groups.SERVER_ARGS


def owner(addresses: list[tuple[str, int]], group: str) -> int:
    listed = [Node(i, host, port) for i, (host, port) in enumerate(addresses)]
    return Cluster(listed, 0, 50, partition.partition_for).coordinator(group).node_id


def groups_by_node(addresses: list[tuple[str, int]]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {i: [] for i in range(NODES)}
    for k in range(1000):
        group = f"failover-{k}"
        node = owner(addresses, group)
        if len(out[node]) < GROUPS_PER_NODE:
            out[node].append(group)
    return out


def errors_total(admin: AdminClient) -> float:
    text = admin.metrics_text()
    return sum(
        float(v) for v in re.findall(r"^fastcoord_request_errors_total\{.*\} (\S+)$", text, re.M)
    )


def generations(admin: AdminClient, wanted: list[str]) -> dict[str, tuple[str, int]]:
    return {
        g["group_id"]: (g["state"], g["generation"])
        for g in admin.groups()
        if g["group_id"] in wanted
    }


def fetch_offsets(address: tuple[str, int], group: str) -> dict[int, int]:
    with Connection(*address) as c:
        found = c.committed(group, TOPIC, range(PARTITIONS))
    return {partition: offset for partition, offset in found.items() if offset >= 0}


@contextmanager
def members_of(bootstrap: str, by_node: dict[int, list[str]]) -> Iterator[dict[str, list[Any]]]:
    poller = Poller()
    made: dict[str, list[Any]] = {}
    try:
        for node_groups in by_node.values():
            for group in node_groups:
                made[group] = [
                    poller.add(
                        confluent(bootstrap, group, f"{group}-{m}", "classic", SESSION_TIMEOUT_MS)
                    )
                    for m in range(MEMBERS)
                ]
        poller.start()
        yield made
    finally:
        poller.close()


def commit_all(members: dict[str, list[Any]]) -> dict[str, dict[int, int]]:
    """Each member commits an offset for each partition it owns; what was acknowledged
    (a synchronous commit returns once the coordinator has answered)."""
    acknowledged: dict[str, dict[int, int]] = {}
    for group, group_members in members.items():
        for member in group_members:
            owned = sorted(member.owned)
            offsets = [TopicPartition(TOPIC, p, 1000 + p) for p in owned]
            for tp in member.consumer.commit(offsets=offsets, asynchronous=False):
                assert tp.error is None, tp.error
            acknowledged.setdefault(group, {}).update({p: 1000 + p for p in owned})
    return acknowledged


def load_seconds(log: str) -> float:
    found = re.findall(r"loaded \d+ groups.* in ([\d.]+) s", log)
    assert found, log[-2000:]
    return float(found[-1])


def check_failover(
    addresses: list[tuple[str, int]],
    admins: list[AdminClient],
    kill: Callable[[], None],
    restarted: Callable[[], str],
) -> None:
    """The scenario: groups on every node settle and commit; node VICTIM is killed; after
    `restarted()` (which returns once the node listens again, with its log), the checks."""
    by_node = groups_by_node(addresses)
    survivors = [g for n, gs in by_node.items() if n != VICTIM for g in gs]
    victims = by_node[VICTIM]
    bootstrap = f"{addresses[0][0]}:{addresses[0][1]}"  # node 0's alone
    with members_of(bootstrap, by_node) as members:
        for group in members:
            groups.settle(members[group], timeout_s=60)
        acknowledged = commit_all(members)
        before = {n: generations(admins[n], by_node[n]) for n in range(NODES) if n != VICTIM}
        for seen in before.values():
            assert {s for s, _ in seen.values()} == {"Stable"}, seen
        errors_before = {n: errors_total(admins[n]) for n in before}
        kill()
        time.sleep(DOWN_S)
        log = restarted()
        back_at = time.monotonic()
        limit = SESSION_TIMEOUT_MS / 1000 + load_seconds(log) + 5  # 5: the checks' own polls
        victim_admin = admins[VICTIM]

        def victims_stable() -> bool:
            seen = generations(victim_admin, victims)
            return len(seen) == len(victims) and all(s == "Stable" for s, _ in seen.values())

        wait_for("the dead node's groups Stable again", victims_stable, limit)
        took = time.monotonic() - back_at
        assert took <= limit
        for group in victims:
            groups.settle(members[group], timeout_s=limit)
        # The others saw nothing: the same generation, still Stable, no error answered.
        for n, seen in before.items():
            assert generations(admins[n], by_node[n]) == seen
            assert errors_total(admins[n]) == errors_before[n]
        for group, offsets in acknowledged.items():
            address = addresses[owner(addresses, group)]
            got = fetch_offsets(address, group)
            assert {p: got.get(p) for p in offsets} == offsets, group
        assert set(acknowledged) == set(survivors) | set(victims)


def test_a_node_killed_is_restarted_by_fastcoord_cluster(tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path, NODES, "--restart-delay-ms", str(DOWN_S * 1000), *NODE_ARGS)
    try:
        supervisor = AdminClient(cluster.admin)
        view = supervisor.cluster()
        nodes = view["nodes"]
        addresses = [(n["host"], n["port"]) for n in nodes]
        admins = [AdminClient(n["admin"]) for n in nodes]
        victim_pid = nodes[VICTIM]["pid"]

        def kill() -> None:
            os.kill(victim_pid, signal.SIGKILL)

        def restarted() -> str:
            def running_again() -> bool:
                node = supervisor.cluster()["nodes"][VICTIM]
                return node["state"] == "running" and node["pid"] != victim_pid

            wait_for("the supervisor's restart", running_again, 30)
            node = supervisor.cluster()["nodes"][VICTIM]
            admins[VICTIM] = AdminClient(node["admin"])  # a new one: --admin-port 0
            assert node["restarts"] == 1
            assert node["last_exit_code"] == -signal.SIGKILL
            assert node["data_dir"] == str(tmp_path / "data" / f"node-{VICTIM}")
            return cluster.log()

        check_failover(addresses, admins, kill, restarted)
        assert "exited with signal SIGKILL; starting it again in 20000 ms (restart 1)" in (
            cluster.log()
        )
        metrics = supervisor.metrics_text()
        assert f'fastcoord_cluster_node_restarts_total{{node="{VICTIM}"}} 1' in metrics
    finally:
        cluster.stop()
    assert "stopped" in cluster.log()


def test_a_node_killed_is_restarted_by_hand_with_the_same_id_and_data(tmp_path: Path) -> None:
    ports = free_ports(NODES)
    listed = cluster_list(ports)
    args = (*NODE_ARGS, "--admin-port", "0")
    nodes: list[ServerProcess] = []
    try:
        for i in range(NODES):
            nodes.append(start_node(tmp_path / f"node-{i}", i, listed, *args))
        addresses = [(n.host, n.port) for n in nodes]
        admins = [AdminClient(n.admin) for n in nodes]

        def kill() -> None:
            nodes[VICTIM].kill()

        def restarted() -> str:
            nodes[VICTIM] = start_node(tmp_path / f"node-{VICTIM}", VICTIM, listed, *args)
            admins[VICTIM] = AdminClient(nodes[VICTIM].admin)
            return nodes[VICTIM].log()

        check_failover(addresses, admins, kill, restarted)
        # Each node keeps the logs of its own partitions, and none of another's.
        for i in range(NODES):
            data = tmp_path / f"node-{i}" / "data"
            kept = sorted(int(d.name.rsplit("-", 1)[1]) for d in data.glob("__consumer_offsets-*"))
            assert kept, f"node {i} wrote nothing"  # a log is made at its first write
            assert set(kept) <= {p for p in range(50) if p % NODES == i}, (i, kept)
    finally:
        for node in nodes:
            node.stop()
