"""advance(now, limit): a burst of due timers handled in parts, with the same outcome as all
at once; what is scheduled again or cancelled while it waits its turn is not fired."""

from __future__ import annotations

from typing import Any

from fastcoord.core.config import GroupConfig
from fastcoord.core.coordinator import Coordinator
from fastcoord.core.result import Result, TimerKey
from tests.core.harness import Harness

SESSION_MS = 10_000


def spied(co: Coordinator) -> list[TimerKey]:
    """The keys the coordinator fires, in order (its timer dispatch, recorded)."""
    fired: list[TimerKey] = []
    fire = co._fire

    def record(key: TimerKey, now_ms: int, result: Result) -> None:
        fired.append(key)
        fire(key, now_ms, result)

    co._fire = record  # type: ignore[method-assign]
    return fired


def test_due_timers_fire_in_deadline_order_in_parts() -> None:
    co = Coordinator(GroupConfig(), now_ms=0)
    fired = spied(co)
    keys: list[TimerKey] = [("pending", "g", f"m{i}") for i in range(100)]
    for i, key in enumerate(keys):
        co.schedule(key, 1_000 + i)
    co.advance(1_099, limit=10)
    assert fired == keys[:10]
    assert co.next_deadline() == 1_099  # the rest are due now
    co.cancel(keys[15])
    co.schedule(keys[20], 5_000)  # its new deadline replaces the one that fell due
    co.advance(1_100, limit=30)
    assert fired == keys[:15] + keys[16:20] + keys[21:42]
    co.advance(1_100)
    assert fired == keys[:15] + keys[16:20] + keys[21:]
    deadline = co.next_deadline()  # the wheel's bucket for it: not later than its own
    assert deadline is not None and 1_100 < deadline <= 5_000
    co.advance(5_000)
    assert fired[-1] == keys[20] and len(fired) == 99


def run_burst(limit: int | None) -> tuple[Harness, int]:
    """Three groups of 200 whose sessions were armed in the same millisecond; half the
    members heartbeat, then every session timer falls due at once. Returns the harness and
    how many advance calls the burst took."""
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=0))
    members = {g: h.stable_group(200, group_id=g, session_ms=SESSION_MS) for g in "abc"}
    h.sleep(SESSION_MS // 2)
    for g, ids in members.items():
        generation = h.group(g).generation_id
        for m in ids[::2]:
            assert h.heartbeat(m, generation, group_id=g) == 0
    h.now += SESSION_MS // 2 + 1
    calls = 0
    while (deadline := h.co.next_deadline()) is not None and deadline <= h.now:
        h.absorb(h.co.advance(h.now, limit))
        calls += 1
    return h, calls


def outcome(h: Harness) -> Any:
    return (
        [(e.kind, e.group_id, e.member_id) for e in h.events],
        {g: sorted(h.group(g).members) for g in "abc"},
        [(r.key, r.value) for r in h.records],
    )


def test_a_burst_handled_in_parts_ends_as_one_handled_at_once() -> None:
    at_once, calls = run_burst(None)
    in_parts, parts = run_burst(50)
    assert calls == 1 and parts >= 600 // 50  # every member's timer, 50 at a time
    assert outcome(in_parts) == outcome(at_once)
    expired = [e for e in in_parts.events if e.kind == "member_expired"]
    assert len(expired) == 300  # the half that did not heartbeat, and only they
