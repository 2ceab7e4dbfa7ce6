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

PAUSE_MS = 5000
LATENCY_MS = 100


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


def sample(admin: AdminClient, name: str, **labels: str) -> float:
    """One sample of a scrape of the server's metrics; 0 when it has none."""
    for family in text_string_to_metric_families(admin.metrics_text()):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return found.value
    return 0.0


def injected(admin: AdminClient, api: str, kind: str) -> float:
    return sample(admin, "fastcoord_faults_injected_total", api=api, kind=kind)


def answered(admin: AdminClient, api: str) -> float:
    return sample(admin, "fastcoord_requests_total", api=api)


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
        # No more rebalances once the rule ended: each member beats a few more times, any
        # of which would have been answered REBALANCE_IN_PROGRESS while the rule held.
        beats = answered(admin, "Heartbeat")
        wait_for(
            "more heartbeats", lambda: answered(admin, "Heartbeat") >= beats + 3 * len(members)
        )
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
        paused_at = time.monotonic()  # before the rule can start: `took` is not overstated
        admin.add_fault({"api": "JoinGroup", "group": "g", "pause": True, "duration_ms": PAUSE_MS})
        second = Member(server, "c1")
        wait_for("the new member's JoinGroup held", lambda: admin.faults()[0]["held"] >= 1, 4)
        # Nothing moves while it is paused: given a few heartbeat intervals to (wrongly)
        # move, with no event to wait for, the group is as it was...
        time.sleep(max(0.0, paused_at + 3.0 - time.monotonic()))
        group = admin.group("g")
        # ...if it was looked at while the rule still held, which a stalled machine can miss.
        assert admin.faults()[0]["state"] != "ended", "looked at the group after the pause"
        assert group["generation"] == before
        assert len(group["members"]) == 1
        # The rule's end lets go of what it holds, and the group forms (within settle's
        # deadline, which a hold kept past the rule's end would run into).
        settle([first, second], [6, 6], timeout_s=20)
        took = time.monotonic() - paused_at
        view = admin.faults()[0]
    finally:
        for m in (first, second):
            if m is not None:
                m.close()
    # Not before the pause is over (the server counts whole milliseconds), on our clock and
    # on the server's: the new member joined at the rule's end or after.
    assert took >= PAUSE_MS / 1000 - 0.001, took
    assert server.data_dir is not None
    events = server.data_dir / "events"
    joins = wait_for(
        "the new member's join in the event log",
        lambda: [
            int(e["at"].timestamp() * 1000)
            for e in event_log.read(events).to_pylist()
            if e["kind"] == "member_joined" and e["at"].timestamp() * 1000 >= view["added_ms"]
        ],
        5,
    )
    assert min(joins) >= view["ends_ms"], (joins, view)
    assert "fault #1: the pause is over, handling" in server.log()
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
    """Latency is a floor under each delayed round trip, whatever the machine's load; how
    much the rule adds is read against round trips without it, in the same run."""
    admin = AdminClient(server.admin)
    fault = admin.add_fault({"api": "Heartbeat", "latency_ms": LATENCY_MS})
    slowed = heartbeat_round_trips(server, 7)
    admin.delete_fault(fault["id"])
    unslowed = heartbeat_round_trips(server, 7)
    latency_s = LATENCY_MS / 1000
    # Each request was held its latency (the server counts whole milliseconds)...
    assert min(slowed) >= latency_s - 0.001, slowed
    # ...that much, not a multiple, and no longer once the rule is deleted: the fastest
    # round trips with and without it (the least disturbed by the load) differ by about it.
    added = min(slowed) - min(unslowed)
    assert latency_s / 2 < added < 2 * latency_s, (slowed, unslowed)
    spread = admin.add_fault({"api": "Heartbeat", "latency_ms": {"p50": 30, "p99": 60}})
    drawn = heartbeat_round_trips(server, 15)
    # Drawn around a median of 30 ms: held, and less than the fixed 100 ms above.
    assert 0.02 <= statistics.median(drawn) < statistics.median(slowed), (drawn, slowed)
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
