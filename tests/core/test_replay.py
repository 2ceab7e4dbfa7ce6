"""Durable state is what the records say: replaying them rebuilds the same coordinator."""

from __future__ import annotations

from fastcoord.core.coordinator import Coordinator
from fastcoord.core.state import STABLE
from tests.core.harness import FAST, Harness


def replayed(h: Harness) -> Coordinator:
    fresh = Coordinator(FAST, now_ms=h.now)
    for record in h.records:
        fresh.replay(record, h.now, loading=True)
    return fresh


def test_replaying_every_record_of_a_scenario_gives_the_same_durable_state() -> None:
    h = Harness(FAST)
    leader, follower, third = h.stable_group(3)
    h.commit({("t", 0): 5, ("t", 1): 6}, leader, 1)
    h.commit({("t", 2): 7}, follower, 1)
    h.commit({("x", 0): 1}, group_id="simple")
    h.leave((third, None))  # rebalance to generation 2
    _j1, _j2 = h.join(leader), h.join(follower)
    h.sync(leader, 2, {leader: b"L", follower: b"F"})
    h.sync(follower, 2)
    assert h.group().is_(STABLE)
    static_join = h.join(instance_id="host-a", group_id="other")
    h.sleep(0)
    static = h.answer(static_join)
    h.sync(static.member_id, 1, {static.member_id: b"S"}, group_id="other")
    h.commit({("t", 0): 8}, leader, 2)
    h.commit({("x", 0): 2}, group_id="simple")

    assert replayed(h).snapshot() == h.co.snapshot()


def test_a_replayed_group_is_stable_and_its_members_sessions_start_at_load() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2, session_ms=10_000)
    fresh = replayed(h)
    group = fresh.groups["g"]
    assert group.is_(STABLE) and group.generation_id == 1 and group.leader_id == leader
    # Members that never heartbeat the new coordinator expire one session after the load.
    fresh_result = fresh.advance(h.now + 10_000)
    assert {e.member_id for e in fresh_result.events if e.kind == "member_expired"} == {
        leader,
        follower,
    }


def test_deleted_groups_and_expired_offsets_stay_gone_after_replay() -> None:
    h = Harness(FAST)
    h.commit({("t", 0): 1}, group_id="gone")
    from fastcoord.protocol.messages import DeleteGroupsRequest

    h.send(DeleteGroupsRequest(groups_names=["gone"]), 2)
    assert "gone" not in h.co.snapshot()
    assert replayed(h).snapshot() == h.co.snapshot()
