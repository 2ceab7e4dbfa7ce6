"""Fault rules: what is accepted, what is refused and why, and which rule a request meets
when, on virtual time."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest

from fastcoord.faults import FaultError, FaultSet, parse_rule
from fastcoord.protocol.api_keys import ApiKey, api_name
from fastcoord.protocol.errors import ErrorCode

HB = int(ApiKey.HEARTBEAT)
JOIN = int(ApiKey.JOIN_GROUP)


def always() -> float:
    return 0.0


def add(faults: FaultSet, now: int = 0, **rule: Any) -> Any:
    return faults.add(parse_rule(rule), now)


def test_api_names_are_kafkas() -> None:
    assert api_name(HB) == "Heartbeat"
    assert api_name(int(ApiKey.OFFSET_COMMIT)) == "OffsetCommit"
    assert api_name(999) == "ApiKey999"
    for spelling in ("JoinGroup", "JOIN_GROUP", "joingroup", "join_group"):
        assert parse_rule({"api": spelling, "pause": True}).api == spelling


@pytest.mark.parametrize(
    ("rule", "reason"),
    [
        ({"api": "Nope", "error": 27}, "api: unknown API 'Nope'"),
        ({"error": 27}, "missing field api"),
        ({"api": "Heartbeat"}, "one action"),
        ({"api": "Heartbeat", "error": 27, "pause": True}, "this rule has error, pause"),
        ({"api": "Heartbeat", "error": "NOT_AN_ERROR"}, "unknown Kafka error 'NOT_AN_ERROR'"),
        ({"api": "Heartbeat", "error": 0}, "NONE is not an error"),
        ({"api": "Heartbeat", "error": 9999}, "unknown Kafka error 9999"),
        ({"api": "Heartbeat", "latency_ms": 0}, "latency_ms: more than 0"),
        ({"api": "Heartbeat", "latency_ms": {"p50": 50, "p99": 10}}, "p50 <= p99"),
        ({"api": "Heartbeat", "latency_ms": {"p50": 5}}, "missing required field `p99`"),
        ({"api": "Heartbeat", "latency_ms": "slow"}, "latency_ms: expected"),
        ({"api": "Heartbeat", "pause": True, "probability": 0}, "probability"),
        ({"api": "Heartbeat", "pause": True, "probability": 1.5}, "probability"),
        ({"api": "Heartbeat", "pause": True, "duration_ms": 0}, "duration_ms"),
        ({"api": "Heartbeat", "pause": True, "count": 0}, "count"),
        ({"api": "Heartbeat", "pause": True, "start_after_ms": -1}, "start_after_ms"),
        ({"api": "Heartbeat", "pause": True, "group": "("}, "not a regular expression"),
        ({"api": "Heartbeat", "pause": True, "group": "x" * 2000}, "at most 1000"),
        ({"api": "Heartbeat", "pause": True, "colour": "red"}, "unknown field colour"),
        ({"api": "Heartbeat", "pause": True, "count": "three"}, "count: expected"),
        ([1, 2], "expected `object`"),
        ({"api": "*", "move_coordinator": True}, "give the group whose coordinator moves"),
        ({"api": "Heartbeat", "group": "g", "move_coordinator": True}, "a move is no request's"),
        ({"api": "*", "group": "g", "move_coordinator": True, "count": 1}, "no probability"),
        ({"api": "*", "group": "g", "move_coordinator": True, "pause": True}, "this rule has"),
    ],
)
def test_bad_rules_are_refused_with_the_reason(rule: Any, reason: str) -> None:
    with pytest.raises(FaultError) as refused:
        parse_rule(rule)
    assert reason in str(refused.value)


def test_a_rule_applies_to_its_api_and_groups_only() -> None:
    faults = FaultSet()
    fault = add(faults, api="Heartbeat", group="load-.*", error="REBALANCE_IN_PROGRESS")
    assert fault.error == ErrorCode.REBALANCE_IN_PROGRESS
    assert faults.touches(HB) and not faults.touches(JOIN)
    assert faults.match(JOIN, ["load-1"], 1, always) is None
    assert faults.match(HB, ["other"], 1, always) is None
    assert faults.match(HB, ["xload-1"], 1, always) is None  # the whole id must match
    assert faults.match(HB, [], 1, always) is None  # a rule with a group needs one
    assert faults.match(HB, ["load-1"], 1, always) is fault
    assert fault.injected == 1


def test_any_api_and_the_first_rule_wins() -> None:
    faults = FaultSet()
    first = add(faults, api="*", latency_ms=10)
    add(faults, api="Heartbeat", error=27)
    assert faults.touches(HB) and faults.touches(JOIN)
    assert faults.match(HB, [], 0, always) is first
    assert faults.match(JOIN, ["g"], 0, always) is first


def test_start_duration_and_count_on_virtual_time() -> None:
    faults = FaultSet()
    fault = add(faults, now=1000, api="JoinGroup", error=27, start_after_ms=500, duration_ms=200)
    assert (fault.starts_ms, fault.ends_ms) == (1500, 1700)
    assert fault.state(1499) == "waiting"
    assert faults.match(JOIN, ["g"], 1499, always) is None
    assert faults.next_change_ms(1000) == 1500
    assert faults.match(JOIN, ["g"], 1500, always) is fault
    assert faults.next_change_ms(1500) == 1700
    assert faults.match(JOIN, ["g"], 1700, always) is None
    assert fault.state(1700) == "ended"
    faults.refresh(1700)
    assert not faults.live and not faults.touches(JOIN)
    assert faults.next_change_ms(1700) is None

    counted = add(faults, now=2000, api="JoinGroup", error=27, count=2)
    assert [faults.match(JOIN, ["g"], t, always) for t in (2001, 2002, 2003)] == [
        counted,
        counted,
        None,
    ]
    assert counted.state(2003) == "ended" and not faults.live  # spent: the fast paths resume


def test_probability_draws_once_per_request() -> None:
    faults = FaultSet()
    add(faults, api="Heartbeat", error=27, probability=0.25)
    draws = random.Random(7)
    met = sum(faults.match(HB, [], 0, draws.random) is not None for _ in range(4000))
    assert 850 < met < 1150


def test_latency_fixed_and_log_normal() -> None:
    faults = FaultSet()
    fixed = add(faults, api="Heartbeat", latency_ms=40)
    assert fixed.latency_draw(random.Random(1).gauss) == pytest.approx(40)
    spread = add(faults, api="Heartbeat", latency_ms={"p50": 20, "p99": 200})
    gauss = random.Random(2).gauss
    draws = sorted(spread.latency_draw(gauss) for _ in range(20_000))
    assert statistics.median(draws) == pytest.approx(20, rel=0.05)
    assert draws[int(0.99 * len(draws))] == pytest.approx(200, rel=0.1)
    assert all(d > 0 and math.isfinite(d) for d in draws)


def test_a_pause_holds_until_its_end_even_when_spent() -> None:
    faults = FaultSet()
    pause = add(faults, now=0, api="JoinGroup", pause=True, duration_ms=5000, count=1)
    assert faults.match(JOIN, ["g"], 10, always) is pause
    pause.held.append("a request")
    assert faults.match(JOIN, ["g"], 20, always) is None  # spent: the next is not held
    assert pause.pausing(4999) and faults.ended(4999) == []
    assert faults.ended(5000) == [pause]


def test_remove_and_clear() -> None:
    faults = FaultSet()
    one = add(faults, api="Heartbeat", error=27)
    two = add(faults, api="JoinGroup", pause=True)
    assert (one.id, two.id) == (1, 2)
    assert faults.remove(1, 0) is one and one.deleted and one.state(0) == "ended"
    assert faults.remove(1, 0) is None
    assert not faults.touches(HB) and faults.touches(JOIN)
    assert faults.clear(0) == [two] and len(faults) == 0 and not faults.live
    assert add(faults, api="Heartbeat", error=27).id == 3  # ids are never reused


def test_describe() -> None:
    faults = FaultSet()
    fault = add(faults, api="Heartbeat", group="g.*", error=27, probability=0.5)
    assert fault.describe() == "#1 Heartbeat group~g.*: error REBALANCE_IN_PROGRESS p=0.5"
    latency = add(faults, api="*", latency_ms={"p50": 5, "p99": 50})
    assert latency.describe() == "#2 *: latency p50 5 ms, p99 50 ms"


def test_a_move_is_no_requests_and_keeps_the_fast_paths() -> None:
    """A move_coordinator rule is carried out once by the server, at its start: no request
    meets it, and it does not send heartbeats off their fast paths."""
    faults = FaultSet()
    move = add(faults, api="*", group="orders", move_coordinator=True, duration_ms=10_000)
    assert move.kind == "move_coordinator" and move.state(0) == "active"
    assert move.describe() == "#1 move the coordinator of group orders"
    assert not faults.live and not faults.touches(HB)
    assert faults.match(HB, ["orders"], 0, always) is None
    assert faults.next_change_ms(0) == 10_000  # its window ends
