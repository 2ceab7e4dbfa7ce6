"""Fault rules carried out on requests by the FaultInjector, over a host of the test's own
in virtual time: an error fills the request's slot at once and is counted and logged as an
event; latency and a pause hand the request back later, as it came, each way a request is
handled; a request whose client went meanwhile is not handled; a dropped connection goes."""

from __future__ import annotations

import heapq
import itertools
from array import array
from collections.abc import Callable
from typing import Any

from fastcoord.core.result import Event
from fastcoord.faults import parse_rule
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
)
from fastcoord.server.fault_injection import FaultInjector
from fastcoord.server.metrics import Metrics

HB = int(ApiKey.HEARTBEAT)
JOIN = int(ApiKey.JOIN_GROUP)
COMMIT = int(ApiKey.OFFSET_COMMIT)


class Conn:
    def __init__(self) -> None:
        self.closed = False
        self.dropped: list[str] = []

    def drop(self, reason: str) -> None:
        self.dropped.append(reason)
        self.closed = True


class Slot:
    """A request's place in its connection's answers: here, a list of them."""

    def __init__(self, api_key: int, version: int = 0, conn: Conn | None = None) -> None:
        self.api_key = api_key
        self.version = version
        self.conn = conn or Conn()
        self.answers: list[Any] = []

    def answer(self, response: Any) -> None:
        self.answers.append(response)


class Events:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, events: list[Event]) -> None:
        self.events.extend(events)


class Host:
    """A FaultHost in virtual time: what `later` is given waits for `advance` to reach its
    time, and every request handled past the rules is kept, in order, with how it came."""

    def __init__(self) -> None:
        self.now = 0
        self.metrics = Metrics()
        self.event_log = Events()
        self._timers: list[tuple[int, int, Callable[[], object]]] = []
        self._order = itertools.count()
        self.handled: list[tuple[str, Slot, Any]] = []

    def now_ms(self) -> int:
        return self.now

    def later(self, at_ms: int, fn: Callable[[], object]) -> None:
        heapq.heappush(self._timers, (at_ms, next(self._order), fn))

    def advance(self, to_ms: int) -> None:
        while self._timers and self._timers[0][0] <= to_ms:
            at, _, fn = heapq.heappop(self._timers)
            self.now = max(self.now, at)
            fn()
        self.now = to_ms

    def handle(self, slot: Slot, header: RequestHeader, request: Any) -> None:
        assert header.api_key == slot.api_key
        self.handled.append(("handle", slot, request))

    def commit_offsets_now(self, commits: list[tuple[Slot, OffsetCommitBatch]]) -> None:
        self.handled.extend(("commit", slot, batch) for slot, batch in commits)


def rule(**fields: Any) -> Any:
    return parse_rule(fields)


def header(api: int, version: int = 0) -> RequestHeader:
    return RequestHeader(api, version, 1, "fault-test")


def join(group: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="m",
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol("range", b"")],
    )


def commit(group: str) -> OffsetCommitBatch:
    """An OffsetCommit of offset 7 for partition 0 of topic t."""
    return OffsetCommitBatch(
        group_id=group,
        generation_id=1,
        member_id="m",
        group_instance_id=None,
        topics=["t"],
        ends=array("i", [1]),
        partitions=array("i", [0]),
        offsets=array("q", [7]),
        leader_epochs=array("i", [-1]),
        metadata=None,
    )


def test_an_error_answers_at_once_and_is_counted_and_logged() -> None:
    host = Host()
    injector = FaultInjector(host, seed=1)
    injector.add(rule(api="Heartbeat", group="g.*", error="REBALANCE_IN_PROGRESS", count=1))
    assert not injector.intercept(Slot(HB), header(HB), HeartbeatRequest("other", 1, "m"))
    slot = Slot(HB, version=4)
    assert injector.intercept(slot, header(HB, 4), HeartbeatRequest("g1", 1, "m"))
    assert [a.error_code for a in slot.answers] == [ErrorCode.REBALANCE_IN_PROGRESS]
    assert host.metrics.requests[HB] == 1
    assert host.metrics.errors == {(HB, int(ErrorCode.REBALANCE_IN_PROGRESS)): 1}
    assert host.metrics.faults == {("Heartbeat", "error"): 1}
    assert [(e.kind, e.group_id, e.member_id) for e in host.event_log.events] == [
        ("fault_injected", "g1", "m")
    ]
    # Its count is reached: the next heartbeat is the server's again.
    assert not injector.faults.live
    assert not injector.intercept(Slot(HB), header(HB), HeartbeatRequest("g1", 1, "m"))
    assert host.handled == []


def test_latency_and_a_pause_hand_requests_back_in_virtual_time() -> None:
    host = Host()
    injector = FaultInjector(host, seed=1)
    injector.add(rule(api="OffsetCommit", latency_ms=40))
    pause = injector.add(rule(api="JoinGroup", pause=True, start_after_ms=100, duration_ms=1000))

    committing = Slot(COMMIT)
    batch = commit("g")
    assert injector.intercept(committing, None, batch)  # read in a run: no header of its own
    assert not injector.intercept(Slot(JOIN), header(JOIN), join("g"))  # not started yet
    host.advance(39)
    assert host.handled == []
    host.advance(40)
    assert host.handled == [("commit", committing, batch)]

    host.advance(100)  # the pause starts
    held = [(Slot(JOIN), join(f"g{i}")) for i in range(2)]
    for slot, request in held:
        host.advance(host.now + 25)
        assert injector.intercept(slot, header(JOIN), request)
    assert len(pause.held) == 2
    host.advance(1099)
    assert len(host.handled) == 1
    host.advance(1100)  # its time is up: handled in the order they came
    assert host.handled[1:] == [("handle", slot, request) for slot, request in held]
    assert pause.state(host.now) == "ended" and pause.held == []
    assert host.metrics.faults == {("OffsetCommit", "latency"): 1, ("JoinGroup", "pause"): 2}
    assert host.metrics.requests[JOIN] == 0  # counted when the server handles them


def test_a_delayed_request_of_a_client_gone_is_not_handled() -> None:
    host = Host()
    injector = FaultInjector(host, seed=1)
    injector.add(rule(api="Heartbeat", latency_ms=10))
    slot = Slot(HB)
    assert injector.intercept(slot, header(HB), HeartbeatRequest("g", 1, "m"))
    slot.conn.closed = True
    host.advance(10)
    assert host.handled == [] and slot.answers == []


def test_a_dropped_connection_and_a_deleted_pause() -> None:
    host = Host()
    injector = FaultInjector(host, seed=1)
    drop = injector.add(rule(api="Heartbeat", drop_connection=True))
    slot = Slot(HB)
    assert injector.intercept(slot, header(HB), HeartbeatRequest("g", 1, "m"))
    assert slot.conn.dropped == [f"fault #{drop.id}: drop_connection"] and slot.answers == []
    assert injector.remove(drop.id) is drop

    pause = injector.add(rule(api="JoinGroup", pause=True))  # until deleted
    waiting = Slot(JOIN)
    request = join("g")
    assert injector.intercept(waiting, header(JOIN), request)
    host.advance(60_000)
    assert host.handled == []
    assert injector.clear() == [pause]  # the admin port's DELETE /v1/faults
    assert host.handled == [("handle", waiting, request)]
