"""Random sequences of client actions and time jumps never break the coordinator's invariants.

A handful of simulated consumers (some static) join, sync, heartbeat, commit and leave at
random, following what they last heard the way a client does, while virtual time jumps by
anything from 0 ms to a minute. After every step:

- every non-empty group has one leader, and it is a member;
- a group's generation never goes back;
- Empty means no members; Stable and CompletingRebalance mean some;
- every member of a Stable group holds the assignment its leader sent;
- no heartbeat timer is armed for a member that is gone, and no pending-member timer for a
  member that is no longer pending;
- the count of members awaiting a join is the number of members that are.

At the end, after every timeout has passed, every request has been answered exactly once
(the harness refuses a second answer) and replaying the records rebuilds the same state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastcoord.core.coordinator import Coordinator
from fastcoord.core.group import STATE_NUMBERS
from fastcoord.core.state import COMPLETING_REBALANCE, EMPTY, STABLE
from fastcoord.protocol.messages import JoinGroupResponse, SyncGroupResponse
from tests.core.harness import FAST, Harness

GROUPS = ["g", "h"]
SLEEPS = [0, 1, 50, 1_000, 3_000, 9_999, 10_000, 30_000, 61_000]


@dataclass
class Client:
    group_id: str
    instance_id: str | None
    member_id: str = ""
    generation: int = -1
    leader: bool = False
    members: list[str] = field(default_factory=list)
    pending: list[tuple[str, int]] = field(default_factory=list)  # (kind, handle)


def absorb_answers(h: Harness, clients: list[Client]) -> None:
    """Clients update what they know from the answers that have arrived."""
    for c in clients:
        still = []
        for kind, handle in c.pending:
            answer = h.answer(handle)
            if answer is None:
                still.append((kind, handle))
            elif isinstance(answer, JoinGroupResponse):
                if answer.error_code in (0, 79):  # NONE, MEMBER_ID_REQUIRED
                    c.member_id = answer.member_id
                if answer.error_code == 0:
                    c.generation = answer.generation_id
                    c.leader = answer.leader == answer.member_id
                    c.members = [m.member_id for m in answer.members]
                elif answer.error_code in (25, 82):  # UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID
                    c.member_id, c.generation = "", -1
            elif isinstance(answer, SyncGroupResponse) and answer.error_code == 25:
                c.member_id, c.generation = "", -1
        c.pending = still


def check_invariants(co: Coordinator, generations: dict[str, int], assigned: set[bytes]) -> None:
    # The member table's counts (the metrics') are the groups'.
    states = co.table.group_states()
    assert states == [sum(1 for g in co.groups.values() if g.is_(s)) for s in STATE_NUMBERS]
    assert len(co.table) == sum(len(g.members) for g in co.groups.values())
    for group_id, group in co.groups.items():
        assert group.generation_id >= generations.get(group_id, 0), group_id
        generations[group_id] = group.generation_id
        if group.members:
            assert group.leader_id in group.members
        if group.is_(EMPTY):
            assert not group.members
        if group.is_(STABLE) or group.is_(COMPLETING_REBALANCE):
            assert group.members
        if group.is_(STABLE):
            for m in group.members.values():
                assert m.assignment in assigned, (m.member_id, m.assignment)
        awaiting = sum(1 for m in group.members.values() if m.awaiting_join is not None)
        assert group.awaiting_join_count == awaiting


def check_timers(co: Coordinator, seen: set[tuple[str, str]]) -> None:
    for group_id, member_id in seen:
        group = co.groups.get(group_id)
        if group is None or not group.has(member_id):
            assert ("heartbeat", group_id, member_id) not in co.wheel
        if group is None or member_id not in group.pending_members:
            assert ("pending", group_id, member_id) not in co.wheel


# Weighted the way consumers behave: mostly syncing and heartbeating, sometimes leaving.
actions = st.sampled_from(
    ["join"] * 3 + ["sync"] * 4 + ["heartbeat"] * 3 + ["commit"] * 2 + ["leave"] + ["sleep"] * 3
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_client_behaviour_keeps_the_invariants(data: st.DataObject) -> None:
    h = Harness(FAST)
    clients = [Client(GROUPS[i % 2], f"host-{i}" if i % 3 == 0 else None) for i in range(5)]
    generations: dict[str, int] = {}
    assigned: set[bytes] = {b""} - {b""}
    seen: set[tuple[str, str]] = set()
    for _ in range(data.draw(st.integers(10, 80))):
        action = data.draw(actions)
        c = clients[data.draw(st.integers(0, len(clients) - 1))]
        version = data.draw(st.sampled_from([3, 5, 7, 9]))
        if action == "join":
            handle = h.join(
                c.member_id,
                c.group_id,
                instance_id=c.instance_id,
                version=version,
                session_ms=10_000,
                rebalance_ms=20_000,
                client_id=f"c{clients.index(c)}",
            )
            c.pending.append(("join", handle))
        elif action == "sync" and c.member_id:
            assignments = None
            if c.leader:
                assignments = {m: f"{c.generation}:{m}".encode() for m in c.members}
                assigned.update(assignments.values())
            c.pending.append(
                ("sync", h.sync(c.member_id, c.generation, assignments, c.group_id, c.instance_id))
            )
        elif action == "heartbeat" and c.member_id:
            h.heartbeat(c.member_id, c.generation, c.group_id, c.instance_id)
        elif action == "commit":
            c.pending.append(
                (
                    "commit",
                    h.commit(
                        {("t", 0): 1},
                        c.member_id,
                        c.generation,
                        c.group_id,
                        instance_id=c.instance_id,
                    ),
                )
            )
        elif action == "leave" and c.member_id:
            h.leave((c.member_id, c.instance_id), group_id=c.group_id)
            c.member_id, c.generation = "", -1
        elif action == "sleep":
            h.sleep(data.draw(st.sampled_from(SLEEPS)))
        absorb_answers(h, clients)
        for c2 in clients:
            if c2.member_id:
                seen.add((c2.group_id, c2.member_id))
        check_invariants(h.co, generations, assigned)
        check_timers(h.co, seen)
    # Every timeout passes: everything waiting is answered, once.
    h.sleep(400_000)
    outstanding = [handle for c in clients for _, handle in c.pending if h.answer(handle) is None]
    assert outstanding == []
    check_timers(h.co, seen)
    fresh = Coordinator(FAST, now_ms=h.now)
    for record in h.records:
        fresh.replay(record, h.now, loading=True)
    assert fresh.snapshot() == h.co.snapshot()
