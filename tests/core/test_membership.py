"""Heartbeat, session expiry, static membership and LeaveGroup, in virtual time."""

from __future__ import annotations

from fastcoord.core.state import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE
from fastcoord.protocol.errors import ErrorCode
from tests.core.harness import FAST, Harness

# -- Heartbeat --------------------------------------------------------------------------


def test_heartbeat_checks_in_the_group_coordinators_order() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2)
    assert h.heartbeat(leader, 1, group_id="") == ErrorCode.INVALID_GROUP_ID
    assert h.heartbeat(leader, 1, group_id="unknown") == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("stranger", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat(leader, 0) == ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat(leader, 1) == ErrorCode.NONE
    # Not Stable: REBALANCE_IN_PROGRESS comes before the member and generation checks.
    h.join(leader)
    assert h.group().is_(PREPARING_REBALANCE)
    assert h.heartbeat("stranger", 99) == ErrorCode.REBALANCE_IN_PROGRESS
    # CompletingRebalance: NONE for the current generation.
    h.join(follower)
    assert h.group().is_(COMPLETING_REBALANCE)
    assert h.heartbeat(follower, 2) == ErrorCode.NONE
    assert h.heartbeat(follower, 1) == ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat("stranger", 2) == ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeats_while_the_partition_loads_are_answered_blindly() -> None:
    h = Harness(FAST)
    leader, _ = h.stable_group(2)
    h.co.loading_partitions.add(h.co.partition_for("g", 50))
    assert h.heartbeat(leader, 1) == ErrorCode.NONE
    assert h.answer(h.join(leader)).error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert h.answer(h.sync(leader, 1)).error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_a_heartbeat_moves_the_session_deadline() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2, session_ms=10_000)
    for _ in range(10):  # 50 s of heartbeats every 5 s keep both alive
        h.sleep(5_000)
        assert h.heartbeat(leader, 1) == ErrorCode.NONE
        assert h.heartbeat(follower, 1) == ErrorCode.NONE
    assert h.group().is_(STABLE) and len(h.group().members) == 2


def test_a_member_that_stops_heartbeating_expires_and_the_group_rebalances() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2, session_ms=10_000)
    h.sleep(5_000)
    h.heartbeat(leader, 1)
    h.sleep(4_999)
    assert h.group().has(follower)
    h.sleep(1)  # the follower's session ends 10 s after its last sign of life
    assert not h.group().has(follower)
    assert h.group().is_(PREPARING_REBALANCE)
    assert [e.member_id for e in h.events if e.kind == "member_expired"] == [follower]
    # The survivor rejoins and the rebalance completes with it alone.
    response = h.answer(h.join(leader))
    assert (response.generation_id, [m.member_id for m in response.members]) == (2, [leader])


def test_the_last_member_expiring_leaves_an_empty_group() -> None:
    h = Harness(FAST)
    h.stable_group(1, session_ms=10_000)
    h.sleep(10_000)
    assert h.group().is_(EMPTY)
    assert h.group().generation_id == 2
    assert h.kinds()[-2:] == ["rebalance_started", "rebalance_completed"]


def test_members_waiting_in_a_rebalance_are_not_expired() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2, session_ms=10_000, rebalance_ms=60_000)
    join = h.join(leader, session_ms=10_000, rebalance_ms=60_000)
    for _ in range(6):  # the leader waits in JoinGroup for 30 s, beyond its session timeout
        h.sleep(5_000)
        assert h.heartbeat(follower, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.group().has(leader)
    h.join(follower, session_ms=10_000, rebalance_ms=60_000)
    assert h.answer(join).generation_id == 2


# -- static membership (KIP-345) ------------------------------------------------------


def test_a_static_member_restarting_gets_its_assignment_back_without_a_rebalance() -> None:
    h = Harness(FAST)
    first_join = h.join(instance_id="host-a")  # static: no MEMBER_ID_REQUIRED
    h.sleep(0)
    first = h.answer(first_join)
    assert first.error_code == 0
    old_id = first.member_id
    b, _join_b = h.join_new()
    h.sleep(0)
    leader = h.answer(h.join(old_id, instance_id="host-a"))
    gen = leader.generation_id
    h.sync(old_id, gen, {old_id: b"A", b: b"B"})
    h.sync(b, gen)
    assert h.group().is_(STABLE)
    # The process restarts and joins with no member id but the same instance id.
    rejoin = h.answer(h.join(instance_id="host-a"))
    assert rejoin.error_code == 0 and rejoin.member_id != old_id
    assert rejoin.generation_id == gen
    assert h.group().is_(STABLE)
    # JoinGroup v7: the old leader id, so the member acts as a follower...
    assert rejoin.leader == old_id and rejoin.members == []
    # ...and its SyncGroup returns the stored assignment.
    assert h.answer(h.sync(rejoin.member_id, gen, instance_id="host-a")).assignment == b"A"
    # The old incarnation is fenced.
    assert h.heartbeat(old_id, gen, instance_id="host-a") == ErrorCode.FENCED_INSTANCE_ID
    assert h.heartbeat(rejoin.member_id, gen, instance_id="host-a") == ErrorCode.NONE


def test_a_static_leader_rejoining_with_join_group_v9_skips_assignment() -> None:
    h = Harness(FAST)
    first_join = h.join(instance_id="host-a", version=9)
    h.sleep(0)
    first = h.answer(first_join)
    h.sync(first.member_id, 1, {first.member_id: b"A"})
    rejoin = h.answer(h.join(instance_id="host-a", version=9))
    assert rejoin.skip_assignment is True
    assert rejoin.leader == rejoin.member_id
    assert [m.member_id for m in rejoin.members] == [rejoin.member_id]
    assert h.group().is_(STABLE)


def test_static_member_replacement_is_persisted_before_it_is_acknowledged() -> None:
    h = Harness(FAST)
    first_join = h.join(instance_id="host-a")
    h.sleep(0)
    first = h.answer(first_join)
    h.sync(first.member_id, 1, {first.member_id: b"A"})
    h.hold_appends = True
    rejoin = h.join(instance_id="host-a")
    assert h.answer(rejoin) is None
    h.ack(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert h.answer(rejoin).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    # Reverted: the old member id is the member again.
    assert h.group().has(first.member_id)


def test_leave_group_by_instance_id_and_member_id() -> None:
    h = Harness(FAST)
    static_join = h.join(instance_id="host-a")
    dynamic, _join_dynamic = h.join_new()
    h.sleep(0)
    static = h.answer(static_join)
    response = h.leave(("", "host-a"), (dynamic, None), ("", "host-z"), ("nobody", None))
    assert response.error_code == 0
    assert [m.error_code for m in response.members] == [
        ErrorCode.NONE,
        ErrorCode.NONE,
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.UNKNOWN_MEMBER_ID,
    ]
    assert not h.group().has(static.member_id) and not h.group().has(dynamic)
    assert h.group().is_(EMPTY)


def test_leave_group_v0_to_v2_name_one_member() -> None:
    h = Harness(FAST)
    _leader, follower = h.stable_group(2)
    assert h.leave((follower, None), version=2).error_code == ErrorCode.NONE
    assert h.leave(("nobody", None), version=0).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.group().is_(PREPARING_REBALANCE)
    assert [e.kind for e in h.events].count("member_left") == 1


def test_a_fenced_static_member_cannot_leave_for_its_successor() -> None:
    h = Harness(FAST)
    first_join = h.join(instance_id="host-a")
    h.sleep(0)
    first = h.answer(first_join)
    h.sync(first.member_id, 1, {first.member_id: b"A"})
    h.answer(h.join(instance_id="host-a"))
    response = h.leave((first.member_id, "host-a"))
    assert [m.error_code for m in response.members] == [ErrorCode.FENCED_INSTANCE_ID]
