"""Each coordinator node's share of a run against a cluster: the worker's Recorder keeps the
lanes' plain successes of each node's connections in that node's sinks and counts what is
recorded from Python under the node it names; the parent counts each group once however many
workers hold its members, and the live view, the end's table and summary.json show each
node when there are two or more. The open-file check counts a connection per node among a
shared connection's groups."""

from __future__ import annotations

import resource
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from fastcoord.client import lane
from fastcoord.loadtest import run
from fastcoord.loadtest.aggregate import Aggregator
from fastcoord.loadtest.display import plain_line, print_summary, render
from fastcoord.loadtest.stats import Recorder, Second, address_text
from fastcoord.loadtest.summary import Thresholds
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode

from .test_display import text_of
from .workers import START_MS

A = ("127.0.0.1", 9090)
B = ("127.0.0.1", 9091)
C = ("127.0.0.1", 9092)
MS = 1_000_000


def sink_heartbeats(recorder: Recorder, node: tuple[str, int], latencies_ns: list[int]) -> None:
    """What a lane of a connection to `node` records of plain heartbeat answers."""
    latency, commits = recorder.sinks(node)
    for ns in latencies_ns:
        row = latency[lane.HEARTBEAT]
        row[lane.bucket_of_ns(ns)] += 1
        row[lane.COUNT] += 1
        row[lane.SUM] += ns
        row[lane.MAX] = max(row[lane.MAX], ns)
    commits[0] += 1
    commits[1] += 3


def worker_second(worker: int, elapsed_s: int, groups: dict[str, tuple[str, int]]) -> Second:
    """A worker's second against the nodes A, B and C: 10 sunk heartbeats to each, a
    JoinGroup each from Python (B's answered MEMBER_ID_REQUIRED, C's NOT_COORDINATOR),
    a lost SyncGroup of C's, and FindCoordinator's answers naming `groups`' coordinators."""
    r = Recorder(worker, cpu_s=0.0)
    r.node(A, 0)
    r.node(B, 1)
    r.node(C, 2)
    r.record(ApiKey.FIND_COORDINATOR, MS, 0)  # the bootstrap's: no node's
    for group, address in groups.items():
        r.coordinator(group, address)
    for node in (A, B, C):
        sink_heartbeats(r, node, [MS] * 10)
    r.record(ApiKey.JOIN_GROUP, 5 * MS, 0, A)
    r.record(ApiKey.JOIN_GROUP, 5 * MS, ErrorCode.MEMBER_ID_REQUIRED, B)
    r.record(ApiKey.JOIN_GROUP, 5 * MS, ErrorCode.NOT_COORDINATOR, C)
    r.error_code(ApiKey.SYNC_GROUP, ErrorCode.NETWORK_EXCEPTION, C)
    return r.take(elapsed_s, START_MS + elapsed_s * 1000, {"stable": 10}, 4, 0.1, {A: 1, B: 2})


def test_a_take_keeps_each_nodes_share_beside_the_whole() -> None:
    s = worker_second(0, 1, {"g1": A, "g2": B})
    apis = {a.api_key: a for a in s.apis}
    assert apis[ApiKey.HEARTBEAT].count == 30  # the sinks of every node, merged
    assert apis[ApiKey.JOIN_GROUP].count == 3 and apis[ApiKey.FIND_COORDINATOR].count == 1
    assert (s.commits, s.offsets) == (3, 9)
    nodes = {n.address: n for n in s.nodes}
    assert list(nodes) == ["127.0.0.1:9090", "127.0.0.1:9091", "127.0.0.1:9092"]
    a, b, c = nodes.values()
    assert a.requests == {ApiKey.JOIN_GROUP: 1, ApiKey.HEARTBEAT: 10} and a.errors == {}
    assert b.errors == {ApiKey.JOIN_GROUP: {ErrorCode.MEMBER_ID_REQUIRED: 1}}
    assert c.errors == {
        ApiKey.JOIN_GROUP: {ErrorCode.NOT_COORDINATOR: 1},
        ApiKey.SYNC_GROUP: {ErrorCode.NETWORK_EXCEPTION: 1},
    }
    assert (a.connections, b.connections, c.connections) == (1, 2, 0)
    assert s.node_ids == {"127.0.0.1:9090": 0, "127.0.0.1:9091": 1, "127.0.0.1:9092": 2}
    assert s.groups == {"g1": "127.0.0.1:9090", "g2": "127.0.0.1:9091"}


def test_node_ids_and_groups_cross_once_then_only_when_they_change() -> None:
    r = Recorder(0, cpu_s=0.0)
    r.node(A, 0)
    for _ in range(10):  # ten members of g asked
        r.coordinator("g", A)
    first = r.take(1, START_MS + 1000, {}, 0, 0.0)
    assert first.node_ids == {"127.0.0.1:9090": 0} and first.groups == {"g": "127.0.0.1:9090"}
    r.node(A, 0)
    r.coordinator("g", A)
    second = r.take(2, START_MS + 2000, {}, 0, 0.0)
    assert second.node_ids == {} and second.groups == {} and second.nodes == []
    r.coordinator("g", B)  # it moved
    assert r.take(3, START_MS + 3000, {}, 0, 0.0).groups == {"g": "127.0.0.1:9091"}


def test_a_nodes_sinks_live_as_long_as_the_recorder_and_a_take_empties_them() -> None:
    r = Recorder(0, cpu_s=0.0)
    latency, commits = r.sinks(A)
    assert r.sinks(A)[0] is latency and r.sinks(B)[0] is not latency
    sink_heartbeats(r, A, [MS, 3 * MS])
    sink_heartbeats(r, B, [2 * MS])
    merged, committed = r.sunk()
    assert merged[lane.HEARTBEAT, lane.COUNT] == 3
    assert merged[lane.HEARTBEAT, lane.SUM] == 6 * MS
    assert merged[lane.HEARTBEAT, lane.MAX] == 3 * MS  # the most, not the sum
    assert committed.tolist() == [2, 6]
    r.take(1, START_MS + 1000, {}, 0, 0.0)
    assert not latency.any() and not commits.any()
    assert r.sunk()[0].sum() == 0


def test_addresses_as_text() -> None:
    assert address_text(("10.0.0.1", 9092)) == "10.0.0.1:9092"
    assert address_text(("::1", 9092)) == "[::1]:9092"


def cluster_aggregator(tmp_path: Path | None = None) -> Aggregator:
    """Two seconds of two workers against A, B and C; the groups' members in both workers."""
    agg = Aggregator(tmp_path, {"members": 40, "duration_s": 30}, 2, Thresholds())
    groups = {"g1": A, "g2": B, "g3": A, "g4": C}
    for elapsed_s in (1, 2):
        for worker in (0, 1):
            agg.add(worker_second(worker, elapsed_s, groups if elapsed_s == 1 else {}))
    return agg


def test_each_group_counts_once_on_the_node_that_coordinates_it() -> None:
    summary = cluster_aggregator().finish("completed", None)
    nodes = summary["nodes"]
    assert list(nodes) == ["127.0.0.1:9090", "127.0.0.1:9091", "127.0.0.1:9092"]
    assert [n["node_id"] for n in nodes.values()] == [0, 1, 2]
    assert [n["groups"] for n in nodes.values()] == [2, 1, 1]
    a, b, c = nodes.values()
    # 2 workers x 2 seconds: 10 heartbeats and a JoinGroup to each node each time.
    assert a["requests"] == b["requests"] == c["requests"] == 4 * 11
    assert a["apis"]["Heartbeat"] == {"count": 40, "errors": {}, "signals": {}}
    assert b["errors"] == {} and b["signals"] == {"MEMBER_ID_REQUIRED": 4}  # a signal
    assert b["error_rate"] == 0
    assert b["apis"]["JoinGroup"] == {
        "count": 4,
        "errors": {},
        "signals": {"MEMBER_ID_REQUIRED": 4},
    }
    assert c["errors"] == {"NETWORK_EXCEPTION": 4, "NOT_COORDINATOR": 4} and c["signals"] == {}
    assert c["error_rate"] == pytest.approx(8 / 44)
    # The most connections in one merged second: both workers' together.
    assert [n["connections"] for n in nodes.values()] == [2, 4, 0]
    # FindCoordinator is the bootstrap's, in no node's share.
    whole = summary["requests"]["count"]
    assert sum(n["requests"] for n in nodes.values()) == whole - 4


def test_a_group_that_moves_counts_on_its_new_node() -> None:
    agg = Aggregator(None, {}, 2, Thresholds())
    agg.add(worker_second(0, 1, {"g": A}))
    agg.add(worker_second(1, 1, {"g": A}))
    agg.add(worker_second(0, 2, {"g": B}))
    nodes = agg.summary()["nodes"]
    assert [n["groups"] for n in nodes.values()] == [0, 1, 0]


def test_the_views_show_each_node_of_a_cluster() -> None:
    agg = cluster_aggregator()
    snapshot = agg.snapshot()
    assert [(n.node_id, n.groups, n.connections, n.requests) for n in snapshot.nodes] == [
        (0, 2, 2, 22),
        (1, 1, 4, 22),
        (2, 1, 0, 22),
    ]
    text = text_of(render(snapshot))
    row = next(line for line in text.splitlines() if "1@127.0.0.1:9091" in line)
    assert [cell.strip() for cell in row.split("│")[1:-1]] == [
        "1@127.0.0.1:9091",
        "1",
        "4",
        "22",
        "-",
        "MEMBER_ID_REQUIRED 2",
    ]
    line = plain_line(snapshot)
    assert "nodes: 0@127.0.0.1:9090 2 groups 2 connections 22/s, 1@127.0.0.1:9091" in line
    summary = agg.finish("completed", None)
    console = Console(record=True, width=140)
    print_summary(summary, console)
    end = console.export_text()
    assert "coordinator nodes" in end
    row = next(line for line in end.splitlines() if "2@127.0.0.1:9092" in line)
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells[:4] == ["2@127.0.0.1:9092", "1", "0", "44"]


def test_a_lone_server_shows_no_table_of_nodes() -> None:
    agg = Aggregator(None, {"members": 10}, 1, Thresholds())
    r = Recorder(0, cpu_s=0.0)
    r.node(A, 0)
    r.coordinator("g", A)
    sink_heartbeats(r, A, [MS] * 5)
    agg.add(r.take(1, START_MS + 1000, {"stable": 10}, 11, 0.1, {A: 10}))
    snapshot = agg.snapshot()
    assert len(snapshot.nodes) == 1
    assert "coordinator nodes" not in text_of(render(snapshot))
    assert "nodes:" not in plain_line(snapshot)
    summary = agg.finish("completed", None)
    assert summary["nodes"]["127.0.0.1:9090"]["groups"] == 1
    console = Console(record=True, width=140)
    print_summary(summary, console)
    assert "coordinator nodes" not in console.export_text()


# The open-file check


def options(members: int, groups: int, sharing: int, processes: int) -> run.Options:
    return run.Options(
        bootstrap="127.0.0.1:9092",
        scenario="steady",
        members=members,
        groups=groups,
        members_per_connection=sharing,
        processes=processes,
        duration_s=10,
        heartbeat_interval_ms=3000,
        session_timeout_ms=45000,
        rebalance_timeout_ms=60000,
        commit_interval_ms=5000,
        request_timeout_ms=30000,
        topics=["t"],
        partitions=1,
        churn_rate=None,
        wave_size=None,
        wave_interval_ms=1000,
        restart_pause_ms=None,
        group_prefix="g",
        seed=0,
        out=Path("out"),
        max_error_rate=None,
        max_p99_ms=None,
    )


def test_a_shared_connection_counts_once_per_node_among_its_groups() -> None:
    # Members that share connections have two more per group they are in, for the
    # JoinGroups and the SyncGroups the coordinator holds (30 groups here, 10 in the last
    # example), beside the shared ones.
    # A connection a group (10 members in groups of 10): one node each, whatever the cluster.
    assert run.connections_per_worker(options(300, 30, 10, 1), 3) == [30 + 60]
    # 15 a connection: each spans two groups, so two connections against a cluster.
    assert run.connections_per_worker(options(300, 30, 15, 1), 1) == [20 + 60]
    assert run.connections_per_worker(options(300, 30, 15, 1), 3) == [40 + 60]
    # A connection per member: the cluster changes nothing, and nothing is shared.
    assert run.connections_per_worker(options(40_000, 4_000, 1, 3), 3) == [13_334, 13_333, 13_333]
    # Three workers deal members out in turn: a worker's 10 consecutive members span three
    # groups, at most the cluster's three nodes; each worker has members of every group.
    assert run.connections_per_worker(options(300, 30, 10, 3), 3) == [30 + 60] * 3
    assert run.connections_per_worker(options(300, 30, 10, 3), 2) == [20 + 60] * 3
    # Ten groups of a member each on two connections: a connection to each node, at most.
    assert run.connections_per_worker(options(10, 10, 5, 1), 3) == [6 + 20]


def test_the_file_check_refuses_what_only_a_cluster_would_need(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda _: (1024, 1024))
    # 667 shared connections and the 120 groups' two each alone; over three nodes, 773 and 240.
    o = options(10_000, 120, 15, 1)
    run.check_file_limit(o)
    with pytest.raises(
        run.CannotStart, match=r"need 1014 connections \(to their groups'"
    ) as caught:
        run.check_file_limit(o, 3)
    assert "use --processes 2" in str(caught.value)


def test_an_unused_sink_costs_nothing() -> None:
    r = Recorder(0, cpu_s=0.0)
    latency, commits = r.sunk()
    assert latency.shape == (2, lane.ROW) and not latency.any() and commits.tolist() == [0, 0]
    assert np.array_equal(r.sinks()[0], np.zeros((2, lane.ROW), np.int64))
