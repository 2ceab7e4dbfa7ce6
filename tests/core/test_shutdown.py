"""Shutdown: Kafka's onGroupUnloaded for every group. Whoever waits is answered at once."""

from __future__ import annotations

from fastcoord.core.state import COMPLETING_REBALANCE, PREPARING_REBALANCE
from fastcoord.protocol.errors import ErrorCode
from tests.core.harness import FAST, Harness


def test_waiting_joins_and_syncs_are_answered_not_coordinator() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2, group_id="syncing")
    # A new rebalance: both rejoin; the follower's SyncGroup then waits for the leader's.
    h.join(leader, group_id="syncing")
    h.join(follower, group_id="syncing")
    assert h.group("syncing").is_(COMPLETING_REBALANCE)
    waiting_sync = h.sync(follower, 2, group_id="syncing")
    assert h.answer(waiting_sync) is None
    # Another group has a JoinGroup waiting for a member that has not rejoined.
    first, second = h.stable_group(2, group_id="joining")
    waiting_join = h.join(first, group_id="joining")
    assert h.answer(waiting_join) is None
    assert h.group("joining").is_(PREPARING_REBALANCE)

    h.absorb(h.co.shutdown(h.now))

    assert h.answer(waiting_sync).error_code == ErrorCode.NOT_COORDINATOR
    join = h.answer(waiting_join)
    assert (join.error_code, join.member_id) == (ErrorCode.NOT_COORDINATOR, first)
    # Nothing else is coordinated: later requests are refused, heartbeats included.
    assert h.heartbeat(second, 1, group_id="joining") == ErrorCode.COORDINATOR_NOT_AVAILABLE
    fast = h.co.heartbeat("joining", second, 1, None, 4, h.now)
    assert fast == ErrorCode.COORDINATOR_NOT_AVAILABLE
    late = h.answer(h.join(leader, group_id="syncing"))
    assert late.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE


def test_shutdown_of_an_idle_coordinator_answers_nothing() -> None:
    h = Harness(FAST)
    h.stable_group(3)
    answered = len(h.answers)
    result = h.co.shutdown(h.now)
    assert result.responses == [] and result.records == []
    h.absorb(result)
    assert len(h.answers) == answered
