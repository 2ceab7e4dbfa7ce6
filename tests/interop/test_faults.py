"""Fault rules set at runtime on the real `fastcoord serve` through its admin port, met by
real clients: an injected REBALANCE_IN_PROGRESS makes confluent-kafka consumers rejoin
until the rule ends, a pause of JoinGroup delays a rebalance by the pause and loses
nothing, latency shows in a client's round trips, a dropped connection is reconnected,
an injected retriable OffsetCommit error is retried by kafka-python."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import OffsetAndMetadata, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from fastcoord.client.admin import AdminClient
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import HeartbeatRequest, HeartbeatResponse
from fastcoord.server import event_log
from fastcoord.testing import ServerProcess
from tests.interop.groups import TOPIC, group_server
from tests.interop.groups import settle as settle_kafka_python
from tests.interop.kafka_python_member import Member as KafkaPythonMember
from tests.interop.test_confluent import Member, settle


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with group_server(tmp_path, "--admin-port", "0", "--event-log-flush-ms", "100") as running:
        yield running


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 20) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)
    return result


def injected(admin: AdminClient, api: str, kind: str) -> float:
    for family in text_string_to_metric_families(admin.metrics_text()):
        for sample in family.samples:
            if sample.name == "fastcoord_faults_injected_total" and sample.labels == {
                "api": api,
                "kind": kind,
            }:
                return sample.value
    return 0.0


def test_injected_rebalance_in_progress_makes_confluent_consumers_rejoin(
    server: ServerProcess,
) -> None:
    admin = AdminClient(server.admin)
    members = [Member(server, f"c{i}") for i in range(2)]
    try:
        settle(members, [6, 6])
        before = admin.group("g")["generation"]
        fault = admin.add_fault(
            {
                "api": "Heartbeat",
                "group": "g",
                "error": "REBALANCE_IN_PROGRESS",
                "duration_ms": 3000,
            }
        )
        wait_for("a rejoin", lambda: admin.group("g")["generation"] > before, 10)
        wait_for("the rule's end", lambda: admin.faults()[0]["state"] == "ended", 10)
        settle(members, [6, 6])
        group = wait_for("Stable", lambda: (g := admin.group("g"))["state"] == "Stable" and g)
        time.sleep(1.5)  # three heartbeat intervals: no more rebalances once the rule ended
        assert admin.group("g")["generation"] == group["generation"]
        assert admin.group("g")["state"] == "Stable"
        assert len(group["members"]) == 2
        met = admin.faults()[0]["injected"]
        assert met >= 2, "each member's heartbeat met the rule"
        assert injected(admin, "Heartbeat", "error") == met
        assert fault["id"] == 1
    finally:
        for m in members:
            m.close()


def test_a_pause_of_joingroup_delays_the_rebalance_by_the_pause_and_loses_nothing(
    server: ServerProcess,
) -> None:
    admin = AdminClient(server.admin)
    first = Member(server, "c0")
    second: Member | None = None
    try:
        settle([first], [12])
        before = admin.group("g")["generation"]
        admin.add_fault({"api": "JoinGroup", "group": "g", "pause": True, "duration_ms": 5000})
        paused_at = time.monotonic()
        second = Member(server, "c1")
        wait_for("the new member's JoinGroup held", lambda: admin.faults()[0]["held"] >= 1, 4)
        time.sleep(max(0.0, paused_at + 3.5 - time.monotonic()))
        assert admin.group("g")["generation"] == before  # nothing moves while it is paused
        assert len(admin.group("g")["members"]) == 1
        settle([first, second], [6, 6], timeout_s=20)
        took = time.monotonic() - paused_at
        view = admin.faults()[0]
    finally:
        for m in (first, second):
            if m is not None:
                m.close()
    assert 4.9 <= took < 12, took
    assert view["state"] == "ended" and view["held"] == 0 and view["injected"] >= 1
    assert second.errors == [] and first.errors == []  # no JoinGroup was lost or timed out
    assert injected(admin, "JoinGroup", "pause") == view["injected"]


def heartbeat_round_trips(server: ServerProcess, count: int) -> list[float]:
    times = []
    with server.connect() as conn:
        for _ in range(count):
            started = time.perf_counter()
            answer = conn.request(HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 4)
            times.append(time.perf_counter() - started)
            assert isinstance(answer, HeartbeatResponse)
            assert answer.error_code == ErrorCode.UNKNOWN_MEMBER_ID  # handled, after the wait
    return times


def test_latency_shows_in_a_clients_round_trips(server: ServerProcess) -> None:
    admin = AdminClient(server.admin)
    fault = admin.add_fault({"api": "Heartbeat", "latency_ms": 100})
    slowed = statistics.median(heartbeat_round_trips(server, 7))
    admin.delete_fault(fault["id"])
    unslowed = statistics.median(heartbeat_round_trips(server, 7))
    assert 0.1 <= slowed < 0.5, slowed
    assert unslowed < 0.05, unslowed
    spread = admin.add_fault({"api": "Heartbeat", "latency_ms": {"p50": 30, "p99": 60}})
    drawn = statistics.median(heartbeat_round_trips(server, 15))
    assert 0.02 <= drawn < 0.3, drawn
    assert admin.delete_fault(spread["id"])["injected"] == 15


def test_a_dropped_connection_is_closed_and_the_next_one_served(server: ServerProcess) -> None:
    admin = AdminClient(server.admin)
    admin.add_fault({"api": "Heartbeat", "drop_connection": True, "count": 1})
    with server.connect() as conn:
        conn.send(HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), 4)
        assert conn.closed_by_server()
    assert len(heartbeat_round_trips(server, 3)) == 3  # spent: served as usual
    assert admin.faults()[0]["injected"] == 1
    assert injected(admin, "Heartbeat", "drop_connection") == 1
    assert "fault #1: drop_connection" in server.log()
    assert server.data_dir is not None
    events = wait_for(
        "the event in the event log",
        lambda: [
            e
            for e in event_log.read(server.data_dir / "events").to_pylist()
            if e["kind"] == "fault_injected"
        ],
        5,
    )
    assert [(e["group_id"], e["member_id"], e["reason"]) for e in events] == [
        ("g", "m", "#1 Heartbeat: drop connection")
    ]


def test_kafka_python_retries_an_injected_commit_error(server: ServerProcess) -> None:
    admin = AdminClient(server.admin)
    member = KafkaPythonMember(server, "k0")
    try:
        settle_kafka_python([member])
        admin.add_fault(
            {"api": "OffsetCommit", "error": "COORDINATOR_LOAD_IN_PROGRESS", "count": 1}
        )
        offsets = {TopicPartition(TOPIC, p): OffsetAndMetadata(5, "", -1) for p in range(12)}
        member.call(lambda c: c.commit(offsets))
        committed = member.call(lambda c: c.committed(TopicPartition(TOPIC, 3)))
    finally:
        member.close()
    assert committed == 5
    assert admin.faults()[0]["injected"] == 1
    assert injected(admin, "OffsetCommit", "error") == 1
