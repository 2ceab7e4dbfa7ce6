"""JoinGroup and SyncGroup, scenario by scenario, in virtual time, as walkthroughs of
Kafka's GroupCoordinator tell them."""

from __future__ import annotations

from fastcoord.core.config import GroupConfig
from fastcoord.core.state import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE
from fastcoord.protocol.errors import ErrorCode
from tests.core.harness import FAST, Harness, subscription


def test_a_member_joins_an_empty_group_and_waits_the_initial_delay() -> None:
    h = Harness()
    # JoinGroup v4+ without a member id: MEMBER_ID_REQUIRED and a generated id (KIP-394).
    first = h.answer(h.join(client_id="consumer-1"))
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id == "consumer-1-1"
    assert h.group().is_(EMPTY)
    member_id = first.member_id
    # Joining with it starts the rebalance, held for group.initial.rebalance.delay.ms.
    join = h.join(member_id)
    assert h.group().is_(PREPARING_REBALANCE)
    h.sleep(2999)
    assert h.answer(join) is None
    h.sleep(1)
    response = h.answer(join)
    assert response.error_code == 0
    assert response.generation_id == 1
    assert response.leader == member_id == response.member_id
    assert response.protocol_name == "range"
    assert [m.member_id for m in response.members] == [member_id]
    assert h.group().is_(COMPLETING_REBALANCE)
    # The leader's SyncGroup carries the assignment; the group becomes Stable.
    sync = h.answer(h.sync(member_id, 1, {member_id: b"partitions"}))
    assert (sync.error_code, sync.assignment) == (0, b"partitions")
    assert h.group().is_(STABLE)
    assert h.kinds() == [
        "member_joined",
        "rebalance_started",
        "rebalance_completed",
        "sync_completed",
    ]


def test_a_second_member_within_the_initial_delay_extends_it() -> None:
    h = Harness()
    a, join_a = h.join_new()
    h.sleep(2000)
    b, join_b = h.join_new()  # a new member during the delay: wait another 3 s
    h.sleep(1000)  # the first 3 s are up, but a member arrived: extended
    assert h.answer(join_a) is None
    h.sleep(2999)
    assert h.answer(join_a) is None
    h.sleep(1)
    ra, rb = h.answer(join_a), h.answer(join_b)
    assert ra.leader == a and rb.leader == a
    assert [m.member_id for m in ra.members] == [a, b]
    assert rb.members == []  # only the leader receives the member list
    assert ra.generation_id == rb.generation_id == 1


def test_the_initial_delay_never_exceeds_the_rebalance_timeout() -> None:
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=3000))
    _a, join_a = h.join_new(rebalance_ms=7000)
    for _ in range(5):  # members keep arriving every 2.5 s
        h.sleep(2500)
        h.join_new(rebalance_ms=7000)
    # 3 s + min(3 s, 4 s) + min(3 s, 1 s): the delay ends by 7 s at the latest.
    assert h.answer(join_a) is not None
    assert h.now - 1_000_000 <= 12_500


def test_delayed_join_completes_when_every_known_member_has_rejoined() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2)
    # A third member joins: the others hear REBALANCE_IN_PROGRESS on their next heartbeat.
    _c, join_c = h.join_new()
    assert h.group().is_(PREPARING_REBALANCE)
    assert h.heartbeat(leader, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    join_leader = h.join(leader)
    assert h.answer(join_c) is None
    join_follower = h.join(follower)  # the last known member: complete at once
    assert h.group().is_(COMPLETING_REBALANCE)
    answers = [h.answer(x) for x in (join_leader, join_follower, join_c)]
    assert [a.generation_id for a in answers] == [2, 2, 2]
    assert len(answers[0].members) == 3 and answers[1].members == answers[2].members == []


def test_members_that_do_not_rejoin_are_removed_when_the_rebalance_times_out() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2, rebalance_ms=20_000)
    join_leader = h.join(leader, rebalance_ms=20_000)  # the leader triggers a rebalance
    h.sleep(5_000)
    h.heartbeat(follower, 1)  # still alive, but it never rejoins
    h.sleep(15_000)
    response = h.answer(join_leader)
    assert response.error_code == 0 and response.generation_id == 2
    assert [m.member_id for m in response.members] == [leader]
    assert not h.group().has(follower)


def test_a_follower_rejoining_a_stable_group_unchanged_gets_the_current_generation() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2)
    response = h.answer(h.join(follower))
    assert (response.error_code, response.generation_id, response.leader) == (0, 1, leader)
    assert h.group().is_(STABLE)
    # ...whereas the leader's JoinGroup, or changed metadata, starts a rebalance.
    h.join(follower, protocols=[("range", subscription("t", "u"))])
    assert h.group().is_(PREPARING_REBALANCE)


def test_protocol_vote_picks_what_most_members_prefer_among_common_protocols() -> None:
    h = Harness(FAST)
    joins = [
        h.join_new(protocols=[("roundrobin", b""), ("range", b"")])[1],
        h.join_new(protocols=[("range", b""), ("roundrobin", b"")])[1],
        h.join_new(protocols=[("sticky", b""), ("range", b""), ("roundrobin", b"")])[1],
    ]
    h.sleep(0)
    assert {h.answer(j).protocol_name for j in joins} == {"range"}


def test_inconsistent_protocols_and_session_timeouts_are_refused() -> None:
    h = Harness(FAST)
    h.stable_group(1)
    assert h.answer(h.join(protocols=[("other", b"")])).error_code == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert h.answer(h.join(protocol_type="connect")).error_code == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert h.answer(h.join(session_ms=5999)).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.answer(h.join(session_ms=1_800_001)).error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.answer(h.join("nobody", group_id="other")).error_code == (ErrorCode.UNKNOWN_MEMBER_ID)
    assert h.answer(h.join(group_id="")).error_code == ErrorCode.INVALID_GROUP_ID


def test_group_max_size() -> None:
    h = Harness(GroupConfig(group_initial_rebalance_delay_ms=0, group_max_size=2))
    h.stable_group(2)
    # A full Stable group refuses a new member already at the step that would give it an id.
    assert h.answer(h.join()).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert len(h.group().members) == 2 and not h.group().pending_members


def test_join_group_v0_to_v3_add_the_member_directly() -> None:
    h = Harness(FAST)
    join = h.join(version=3)
    h.sleep(0)
    response = h.answer(join)
    assert response.error_code == 0 and response.member_id == "client-1"


def test_a_pending_member_that_never_rejoins_expires_without_holding_the_rebalance() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2)
    ghost = h.answer(h.join(session_ms=10_000))
    assert ghost.error_code == ErrorCode.MEMBER_ID_REQUIRED
    # A real rebalance starts; the pending member holds it only until its session ends.
    join_leader, join_follower = h.join(leader), h.join(follower)
    assert h.answer(join_leader) is None
    h.sleep(10_000)
    assert h.answer(join_leader).error_code == 0
    assert h.answer(join_follower).generation_id == 2
    assert ghost.member_id not in h.group().pending_members


def test_sync_group_errors() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2)
    assert h.answer(h.sync("stranger", 1)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.answer(h.sync(follower, 7)).error_code == ErrorCode.ILLEGAL_GENERATION
    assert h.answer(h.sync(follower, 1, protocol_type="connect")).error_code == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert h.answer(h.sync(follower, 1, protocol_name="roundrobin")).error_code == (
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    )
    assert h.answer(h.sync(follower, 1, group_id="nope")).error_code == (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    # A later follower SyncGroup in Stable gets its stored assignment.
    assert h.answer(h.sync(follower, 1)).assignment == f"assignment-of-{follower}".encode()
    h.join(leader)
    assert h.answer(h.sync(follower, 1)).error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_missing_members_get_empty_assignments() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2)
    j1, j2 = h.join(leader), h.join(follower)
    gen = h.answer(j1).generation_id
    follower_sync = h.sync(follower, gen)
    assert h.answer(follower_sync) is None  # waits for the leader
    h.sync(leader, gen, {leader: b"all"})
    assert h.answer(follower_sync).assignment == b""
    assert h.answer(j2).error_code == 0


def test_members_that_do_not_sync_in_time_are_removed_and_the_group_rebalances() -> None:
    h = Harness(FAST)
    timeouts = {"session_ms": 30_000, "rebalance_ms": 20_000}
    leader, follower = h.stable_group(2, **timeouts)
    j1, _j2 = h.join(leader, **timeouts), h.join(follower, **timeouts)
    gen = h.answer(j1).generation_id
    h.sync(leader, gen, {leader: b"a", follower: b"b"})
    assert h.group().is_(STABLE)
    h.sleep(19_999)
    assert h.group().has(follower)
    h.sleep(1)  # the follower never sent SyncGroup
    assert not h.group().has(follower)
    assert h.group().is_(PREPARING_REBALANCE)
    assert "did not send SyncGroup" in h.events[-2].reason


def test_a_rebalance_answers_members_waiting_in_sync_group_rebalance_in_progress() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2)
    j1, _j2 = h.join(leader), h.join(follower)
    gen = h.answer(j1).generation_id
    waiting = h.sync(follower, gen)
    _, _newcomer = h.join_new()  # resetAndPropagateAssignmentError
    assert h.answer(waiting).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.group().is_(PREPARING_REBALANCE)


def test_a_failed_store_of_the_assignment_answers_the_error_and_rebalances() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2)
    j1, _j2 = h.join(leader), h.join(follower)
    gen = h.answer(j1).generation_id
    waiting = h.sync(follower, gen)
    h.hold_appends = True
    leader_sync = h.sync(leader, gen, {leader: b"a", follower: b"b"})
    assert h.answer(leader_sync) is None  # not acknowledged before the write is durable
    h.ack(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert h.answer(leader_sync).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.answer(waiting).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.group().is_(PREPARING_REBALANCE)


def test_when_the_leader_leaves_the_next_member_leads() -> None:
    h = Harness(FAST)
    leader, second, third = h.stable_group(3)
    h.leave((leader, None))
    j2, j3 = h.join(second), h.join(third)
    response = h.answer(j2)
    assert response.leader == second and h.answer(j3).leader == second
    assert [m.member_id for m in response.members] == [second, third]


def test_a_member_expiring_during_a_rebalance_completes_the_pending_join() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2, session_ms=10_000, rebalance_ms=60_000)
    join = h.join(leader, session_ms=10_000, rebalance_ms=60_000)
    h.sleep(9_999)
    assert h.answer(join) is None
    h.sleep(1)  # the follower neither rejoins nor heartbeats: it expires, the join completes
    response = h.answer(join)
    assert (response.generation_id, [m.member_id for m in response.members]) == (2, [leader])
    assert [e.member_id for e in h.events if e.kind == "member_expired"] == [follower]
