"""`fastcoord loadtest`, the real command, against a real cluster of three `fastcoord serve`
nodes reached through node 0 alone: every member finds its group's coordinator and joins
there, the summary's per-node figures are each node's share as the routing rule gives it
and as the nodes themselves say (their groups and connections on the admin port), members
sharing connections share them per node, and a fault schedule given every node's admin
port reaches every node.

One cluster serves the quick tests (each with groups of its own prefix): starting three
nodes takes longer than a test's run. Marked `cluster`, as the other tests of several nodes
are (their own CI job); the 40,000 members' test is `slow`.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fastcoord.client.admin import AdminClient
from fastcoord.cluster.routing import Cluster, Node
from fastcoord.core.partition import partition_for
from fastcoord.loadtest.scenarios import Plan
from fastcoord.testing import ServerProcess, child_env, fastcoord_cluster
from tests.interop.test_loadtest import FAST, loadtest, loadtest_command, summary, table

NODE_ARGS = (
    "--in-memory",
    "--group-initial-rebalance-delay-ms",
    "0",
    "--group-min-session-timeout-ms",
    "500",
    "--num-partitions",
    "6",
    "--admin-port",
    "0",
)
MEMBERS = 300
GROUPS = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    with fastcoord_cluster(tmp_path_factory.mktemp("cluster"), 3, *NODE_ARGS) as nodes:
        yield nodes


def plan(prefix: str) -> Plan:
    """The groups of a run of MEMBERS in GROUPS, as the load test deals them out."""
    return Plan("steady", MEMBERS, GROUPS, prefix, 1.0, 1.0, 1, 1, 1, 1.0)


def routing(nodes: list[ServerProcess]) -> Cluster:
    """The cluster's rule, as every node computes it (50 offsets partitions, the default)."""
    listed = [Node(i, n.host, n.port) for i, n in enumerate(nodes)]
    return Cluster(listed, 0, 50, partition_for)


def owners(nodes: list[ServerProcess], groups: set[str]) -> dict[str, str]:
    """Each group's coordinator's HOST:PORT, by the routing rule."""
    rule = routing(nodes)
    return {g: rule.coordinator(g).address for g in groups}


def node_groups(node: ServerProcess, prefix: str) -> dict[str, tuple[str, int]]:
    """The node's groups of this prefix, as its admin port lists them: (state, members)."""
    return {
        g["group_id"]: (g["state"], g["members"])
        for g in AdminClient(node.admin).groups()
        if g["group_id"].startswith(prefix + "-")
    }


def gauge(node: ServerProcess, name: str) -> float:
    # A node in the middle of a join storm on a busy machine may take a while to answer
    # its admin port: the wait is bounded, the answer is what is checked.
    admin = AdminClient(node.admin, timeout_s=ADMIN_TIMEOUT_S)
    for family in text_string_to_metric_families(admin.metrics_text()):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{node.name} has no {name}")


def run_watching(
    nodes: list[ServerProcess], out: Path, until: Any, *args: str
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """A loadtest through node 0 with FAST timings; meanwhile `until()` is asked every 0.2 s
    until it returns something true (or the run ends): what it last returned is kept."""
    command = loadtest_command(nodes[0].bootstrap, out, *args, *FAST)
    seen: Any = None
    with subprocess.Popen(
        command, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as run:
        deadline = time.monotonic() + 40
        while run.poll() is None and time.monotonic() < deadline:
            seen = until()
            if seen:
                break
            time.sleep(0.2)
        stdout, stderr = run.communicate(timeout=60)
    result = subprocess.CompletedProcess(command, run.returncode, stdout, stderr)
    return result, seen


@pytest.mark.cluster
def test_every_member_joins_its_groups_coordinator_through_one_bootstrap(
    cluster: list[ServerProcess], tmp_path: Path
) -> None:
    prefix = "routed"
    groups = {plan(prefix).group_of(i) for i in range(MEMBERS)}
    share = owners(cluster, groups)

    def all_stable() -> dict[str, dict[str, tuple[str, int]]] | None:
        seen = {n.bootstrap: node_groups(n, prefix) for n in cluster}
        everyone = {g: v for mine in seen.values() for g, v in mine.items()}
        return seen if everyone == dict.fromkeys(groups, ("Stable", 10)) else None

    result, seen = run_watching(
        cluster,
        tmp_path / "run",
        all_stable,
        *("--members", str(MEMBERS), "--groups", str(GROUPS), "--group-prefix", prefix),
        *("--duration", "8"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # While it ran, every group was Stable with its 10 members on its own coordinator, and
    # on no other node.
    assert seen is not None, "the groups never were all Stable on their coordinators"
    for node in cluster:
        assert set(seen[node.bootstrap]) == {g for g, a in share.items() if a == node.bootstrap}
        assert set(node_groups(node, prefix)) == set(seen[node.bootstrap])  # after, too
    s = summary(tmp_path / "run")
    assert s["members"]["peak_stable"] == MEMBERS and s["unexpected_expirations"] == 0
    assert s["config"]["server_nodes"] == 3
    nodes = s["nodes"]
    assert list(nodes) == [n.bootstrap for n in cluster]  # in id order
    assert [nodes[n.bootstrap]["node_id"] for n in cluster] == [0, 1, 2]
    expected = Counter(share.values())
    assert {a: v["groups"] for a, v in nodes.items()} == expected
    assert sum(v["groups"] for v in nodes.values()) == GROUPS
    for address, node in nodes.items():
        # A connection of its own for each member of the node's groups; every JoinGroup,
        # SyncGroup and LeaveGroup of those members answered by it and by no other.
        members = 10 * expected[address]
        assert node["connections"] == members
        assert node["apis"]["SyncGroup"]["count"] >= members
        assert node["apis"]["LeaveGroup"]["count"] == members
        assert node["apis"]["Heartbeat"]["count"] > 0
        assert node["errors"] == {}
    # The bootstrap's own requests are no coordinator's: the per-node counts add up to
    # the run's but for them.
    apis = s["apis"]
    bootstrap = apis["FindCoordinator"]["count"] + apis["Metadata"]["count"]
    assert sum(v["requests"] for v in nodes.values()) == s["requests"]["count"] - bootstrap
    assert "coordinator nodes" in result.stdout


@pytest.mark.cluster
def test_shared_connections_are_shared_per_node(
    cluster: list[ServerProcess], tmp_path: Path
) -> None:
    # 20 members a connection in groups of 10: each connection index holds two groups,
    # on two nodes as often as not, and then its members split over them, each node's
    # group on a connection of its own, each member in the lane slot of its index. And
    # each group has two more to its coordinator, for the JoinGroups and for the SyncGroups
    # the coordinator holds until its rebalance completes (docs/loadtest.md).
    prefix = "shared"
    sharing = 20
    p = plan(prefix)
    rule = routing(cluster)
    expected: Counter[str] = Counter()
    for index in range(-(-MEMBERS // sharing)):
        members = range(index * sharing, min((index + 1) * sharing, MEMBERS))
        expected.update({rule.coordinator(p.group_of(i)).address for i in members})
    assert sum(expected.values()) > MEMBERS // sharing  # some connection indexes do split
    for group in {p.group_of(i) for i in range(MEMBERS)}:
        expected[rule.coordinator(group).address] += 2

    def connections() -> dict[str, int] | None:
        open_ = {n.bootstrap: int(gauge(n, "fastcoord_connections")) for n in cluster}
        open_[cluster[0].bootstrap] -= 1  # the worker's bootstrap connection
        return open_ if open_ == expected else None

    result, seen = run_watching(
        cluster,
        tmp_path / "run",
        connections,
        *("--members", str(MEMBERS), "--groups", str(GROUPS), "--group-prefix", prefix),
        *("--members-per-connection", str(sharing), "--duration", "8"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert seen == expected  # as the nodes counted them while the run went on
    s = summary(tmp_path / "run")
    assert s["members"]["peak_stable"] == MEMBERS and s["unexpected_expirations"] == 0
    assert {a: v["connections"] for a, v in s["nodes"].items()} == expected
    heartbeats = s["apis"]["Heartbeat"]
    assert heartbeats["count"] > MEMBERS and heartbeats["errors"] == heartbeats["signals"] == {}


SCHEDULE = """
[[fault]]
at_ms = 3000
api = "Heartbeat"
error = "NOT_COORDINATOR"
count = 4
"""


@pytest.mark.cluster
def test_a_fault_goes_to_every_node_and_sends_members_back_to_find_their_coordinator(
    cluster: list[ServerProcess], tmp_path: Path
) -> None:
    schedule = tmp_path / "faults.toml"
    schedule.write_text(SCHEDULE)
    prefix = "faulted"
    result = loadtest(
        cluster[0].bootstrap,
        tmp_path / "run",
        *("--members", str(MEMBERS), "--groups", str(GROUPS), "--group-prefix", prefix),
        *("--duration", "8", "--faults", str(schedule)),
        *("--admin", ",".join(n.admin for n in cluster)),
        *FAST,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    s = summary(tmp_path / "run")
    (fault,) = s["faults"]
    assert fault["apply_error"] is None and fault["end_error"] is None
    # Added on each node, where its count was spent: 4 heartbeats answered NOT_COORDINATOR.
    assert [n["admin"] for n in fault["nodes"]] == [n.admin for n in cluster]
    assert [(n["injected"], n["state"]) for n in fault["nodes"]] == [(4, "ended")] * 3
    assert fault["injected"] == 12
    for node in cluster:
        assert AdminClient(node.admin).faults() == []  # the run deleted what it added
    # Each member told NOT_COORDINATOR went back to FindCoordinator, then heartbeat at its
    # group's coordinator (the same node: nothing moved) in the generation it had, as Java's
    # consumer does. So no rebalance names NOT_COORDINATOR, and no JoinGroup came once the
    # fault was in force and every member had been stable (a busy machine can start the run
    # slowly: the members' first joins, still under way when the fault comes, are not its).
    apis = s["apis"]
    rebalances = table(tmp_path / "run", "rebalances")
    why = Counter((r["reason"], r["generation"]) for r in rebalances if r["reason"] != "join")
    assert not [r for r in rebalances if r["reason"] == "NOT_COORDINATOR"], why
    stable_s = min(
        r["elapsed_s"] for r in table(tmp_path / "run", "states") if r["stable"] == MEMBERS
    )
    since_s = max(fault["window"]["first_s"], stable_s + 1)
    joins_since = [
        (r["elapsed_s"], r["count"])
        for r in table(tmp_path / "run", "latency")
        if r["api"] == "JoinGroup" and r["elapsed_s"] >= since_s and r["count"]
    ]
    assert joins_since == [], (fault["window"], stable_s, why)
    assert apis["Heartbeat"]["errors"]["NOT_COORDINATOR"] == 12
    assert apis["FindCoordinator"]["count"] == MEMBERS + 12
    errors = {api: a["errors"] for api, a in apis.items() if a["errors"]}
    assert s["requests"]["errors"] == 12, errors
    assert s["members"]["peak_stable"] == MEMBERS
    for node in s["nodes"].values():
        assert node["apis"]["Heartbeat"]["errors"]["NOT_COORDINATOR"] == 4
        assert sum(node["errors"].values()) == 4
    assert "injected 12 (ended)" in result.stdout
    assert "per node:" in result.stdout


# 40,000 members, a connection each, over three nodes


BIG_MEMBERS = 40_000
BIG_GROUPS = 4_000
ADMIN_TIMEOUT_S = 60.0
MAX_CONNECTIONS = 19_900  # a node's max.connections here: 20,000 files less its reserve


def connections_now(nodes: list[ServerProcess]) -> dict[str, int]:
    return {n.bootstrap: int(gauge(n, "fastcoord_connections")) for n in nodes}


@pytest.mark.slow
def test_forty_thousand_members_a_connection_each_over_three_nodes(tmp_path: Path) -> None:
    """More connections than one node may hold (20,000 open files a process here), spread
    by the routing rule over three: each node holds its groups' members' connections, well
    within its own limit, and refuses none. Long heartbeat and session times so that the
    machine's two cores keep up: the test is of the spread, not of the rate."""
    prefix = "wide"
    args = (
        *("--members", str(BIG_MEMBERS), "--groups", str(BIG_GROUPS), "--group-prefix", prefix),
        *("--processes", "3", "--members-per-connection", "1", "--duration", "120"),
        *("--heartbeat-interval-ms", "10000", "--session-timeout-ms", "60000"),
        *("--commit-interval-ms", "10000", "--request-timeout-ms", "60000"),
    )
    node_args = ("--in-memory", "--num-partitions", "6", "--admin-port", "0")
    with fastcoord_cluster(tmp_path / "cluster", 3, *node_args) as nodes:
        p = Plan("steady", BIG_MEMBERS, BIG_GROUPS, prefix, 1.0, 1.0, 1, 1, 1, 1.0)
        share = owners(nodes, {p.group_of(i) for i in range(BIG_MEMBERS)})
        groups = Counter(share.values())
        expected = {a: 10 * groups[a] for a in groups}  # a connection per member
        assert max(expected.values()) < MAX_CONNECTIONS < BIG_MEMBERS
        started = time.monotonic()
        peak: dict[str, int] = {}
        reached_s: float | None = None

        def watch() -> None:
            nonlocal reached_s
            now = connections_now(nodes)
            for address, n in now.items():
                peak[address] = max(peak.get(address, 0), n)
            members = {a: n - (3 if a == nodes[0].bootstrap else 0) for a, n in now.items()}
            if reached_s is None and members == expected:
                reached_s = time.monotonic() - started

        command = loadtest_command(nodes[0].bootstrap, tmp_path / "run", *args)
        with subprocess.Popen(
            command, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as run:
            while run.poll() is None:
                watch()
                time.sleep(1.0)
            stdout, stderr = run.communicate(timeout=60)
        took_s = time.monotonic() - started
        logs = [n.log() for n in nodes]
    print(
        f"\n40,000 members over 3 nodes: every member's connection open after "
        f"{reached_s if reached_s is None else round(reached_s, 1)} s, run {took_s:.0f} s; "
        f"nodes' peak connections {peak}, expected {expected}"
    )
    assert run.returncode == 0, stdout + stderr
    for log in logs:
        assert "refusing connection" not in log
    s = summary(tmp_path / "run")
    stable = s["members"]["peak_stable"]
    per_node = [(a, v["groups"], v["connections"]) for a, v in s["nodes"].items()]
    print(f"peak stable {stable}; per node (address, groups, connections): {per_node}")
    assert stable == BIG_MEMBERS
    assert {a: v["groups"] for a, v in s["nodes"].items()} == groups
    assert {a: v["connections"] for a, v in s["nodes"].items()} == expected
    # The nodes counted as many: each member's connection (and node 0 the workers'
    # bootstrap connections), never more than a node may hold.
    assert reached_s is not None, (peak, expected)
    assert all(peak[a] < MAX_CONNECTIONS for a in peak)
