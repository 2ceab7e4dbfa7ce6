"""The client's member state machine against fastcoord's own coordinator core, in virtual
time: the requests a Member makes are handled by the real group state machine, and its
answers go back to the Member, with no sockets in between."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fastcoord.client.member import Member, Next, State
from fastcoord.core.config import GroupConfig
from fastcoord.core.partition import partition_for
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from tests.core.harness import Harness

PARTITIONS = {"t": 6, "u": 3}
PARTITIONS_OF_OFFSETS = GroupConfig().offsets_topic_num_partitions
SESSION_MS = 10_000


@dataclass
class Group:
    """Members talking to the harness's coordinator; answers delivered as they come."""

    h: Harness
    members: list[Member] = field(default_factory=list)
    waiting: list[tuple[Member, str, int, int]] = field(default_factory=list)  # kind, handle, epoch
    tally: Counter[State] = field(default_factory=Counter)  # the members' own count by state

    def add(self, instance_id: str | None = None, topics: tuple[str, ...] = ("t",)) -> Member:
        m = Member(
            "g",
            list(topics),
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=30_000,
            group_instance_id=instance_id,
            tally=self.tally,
        )
        self.members.append(m)
        return m

    def join(self, m: Member) -> None:
        self._send(m, "join", m.join(self.h.now), 7)

    def _send(self, m: Member, kind: str, request: Any, version: int) -> None:
        self.waiting.append((m, kind, self.h.send(request, version), m.epoch))

    def pump(self) -> None:
        """Deliver every answer there is, and what the members send in reply, until none."""
        progress = True
        while progress:
            progress = False
            for entry in list(self.waiting):
                m, kind, handle, epoch = entry
                answer = self.h.answer(handle)
                if answer is None:
                    continue
                self.waiting.remove(entry)
                progress = True
                if m.epoch != epoch:
                    continue
                if kind == "join":
                    assert isinstance(answer, JoinGroupResponse)
                    outcome = m.on_join(answer, self.h.now, PARTITIONS)
                    if isinstance(outcome, SyncGroupRequest):
                        self._send(m, "sync", outcome, 5)
                    else:
                        self.follow(m, outcome)
                elif kind == "sync":
                    assert isinstance(answer, SyncGroupResponse)
                    self.follow(m, m.on_sync(answer, self.h.now))
        # The tally the members keep as they change state is the count of their states.
        assert +self.tally == Counter(m.state for m in self.members)

    def follow(self, m: Member, outcome: Next) -> None:
        if outcome is Next.REJOIN:
            self.join(m)

    def heartbeat(self, m: Member) -> int:
        code = self.h.heartbeat(m.member_id, m.generation_id, instance_id=m.group_instance_id)
        self.follow(m, m.on_heartbeat(code, self.h.now))
        return code

    def beat_all(self, rounds: int = 1, every_ms: int = 1_000) -> list[int]:
        codes = []
        for _ in range(rounds):
            self.h.sleep(every_ms)
            for m in self.members:
                if m.state is State.STABLE:
                    codes.append(self.heartbeat(m))
            self.pump()
        return codes


def formed(count: int, **config: Any) -> Group:
    g = Group(Harness(GroupConfig(group_initial_rebalance_delay_ms=0, **config)))
    for _ in range(count):
        g.join(g.add())
    g.pump()
    g.beat_all(3)
    return g


def owned(g: Group) -> list[tuple[str, int]]:
    return sorted((t, p) for m in g.members for t, ps in m.assignment.items() for p in ps)


def test_members_join_and_the_leader_assigns_every_partition_once() -> None:
    g = formed(3)
    assert [m.state for m in g.members] == [State.STABLE] * 3
    assert sum(m.leader for m in g.members) == 1
    assert len({m.generation_id for m in g.members}) == 1
    assert owned(g) == [("t", p) for p in range(6)]
    assert all(len(m.assignment["t"]) == 2 for m in g.members)
    assert {r.reason for m in g.members for r in m.rebalances} == {"join"}


def test_a_new_member_makes_the_others_rejoin_and_they_see_the_rebalance() -> None:
    g = formed(2)
    before = g.members[0].generation_id
    for m in g.members:
        m.rebalances.clear()
    g.join(g.add())
    g.pump()
    codes = g.beat_all(4)
    assert ErrorCode.REBALANCE_IN_PROGRESS in codes
    assert [m.state for m in g.members] == [State.STABLE] * 3
    assert {m.generation_id for m in g.members} == {before + 1}
    assert owned(g) == [("t", p) for p in range(6)]
    seen = {r.reason for m in g.members[:2] for r in m.rebalances}
    assert seen == {"REBALANCE_IN_PROGRESS"}


def test_a_member_that_stops_heartbeating_is_expired_and_rejoins_as_new() -> None:
    g = formed(2)
    quiet, other = g.members
    old_id = quiet.member_id
    for _ in range(15):  # past the session timeout: only `other` heartbeats
        g.h.sleep(1_000)
        g.heartbeat(other)
        g.pump()
    assert g.h.heartbeat(old_id, quiet.generation_id) == ErrorCode.UNKNOWN_MEMBER_ID
    assert quiet.on_heartbeat(ErrorCode.UNKNOWN_MEMBER_ID, g.h.now) is Next.REJOIN
    assert quiet.member_id == ""  # forgotten: it joins as a new member
    g.join(quiet)
    g.pump()
    g.beat_all(4)
    assert quiet.state is State.STABLE and quiet.member_id not in ("", old_id)
    assert owned(g) == [("t", p) for p in range(6)]


def test_a_static_member_restarting_within_its_session_sees_no_rebalance() -> None:
    g = Group(Harness(GroupConfig(group_initial_rebalance_delay_ms=0)))
    for i in range(3):
        g.join(g.add(instance_id=f"i-{i}"))
    g.pump()
    g.beat_all(3)
    generation = g.members[0].generation_id
    restarted = g.members[1]
    old_assignment = restarted.assignment
    for m in g.members:
        m.rebalances.clear()
    restarted.restart()
    assert restarted.member_id == "" and restarted.group_instance_id == "i-1"
    g.h.sleep(2_000)
    g.join(restarted)
    g.pump()
    codes = g.beat_all(3)
    assert ErrorCode.REBALANCE_IN_PROGRESS not in codes
    assert restarted.state is State.STABLE
    assert {m.generation_id for m in g.members} == {generation}
    assert restarted.assignment == old_assignment
    assert [r for m in g.members for r in m.rebalances] == []


def test_commits_advance_and_a_new_assignment_fetches_them() -> None:
    g = formed(1)
    (m,) = g.members
    request = m.commit(advance=10)
    assert request is not None
    answer = g.h.answer(g.h.send(request, 8))
    outcome, done, error = m.on_commit(answer, g.h.now)
    assert (outcome, done, error) == (Next.NOTHING, 6, 0)
    fetched = g.h.answer(g.h.send(m.fetch_offsets(), 7))
    assert isinstance(fetched, OffsetFetchResponse)
    m.positions.clear()
    assert m.on_fetch(fetched, g.h.now) is Next.NOTHING
    assert m.positions == {("t", p): 10 for p in range(6)}


def test_a_full_group_stops_the_member_that_cannot_join() -> None:
    g = formed(1, group_max_size=1)
    extra = g.add()
    g.join(extra)
    g.pump()
    assert extra.state is State.STOPPED
    assert extra.last_error == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_member_id_required_is_answered_with_the_id_given() -> None:
    m = Member("g", ["t"])
    request = m.join(0)
    assert isinstance(request, JoinGroupRequest) and request.member_id == ""
    answer = JoinGroupResponse(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id="m-1")
    assert m.on_join(answer, 1, PARTITIONS) is Next.REJOIN
    assert m.join(2).member_id == "m-1"


def test_a_stable_member_whose_coordinator_moves_keeps_its_generation() -> None:
    g = formed(3)
    generation = {m.generation_id for m in g.members}
    assignments = [m.assignment for m in g.members]
    for m in g.members:
        m.rebalances.clear()
    partition = partition_for("g", PARTITIONS_OF_OFFSETS)
    g.h.absorb(g.h.co.resign(partition, g.h.now))
    for m in g.members:
        code = g.h.heartbeat(m.member_id, m.generation_id)
        assert code == ErrorCode.NOT_COORDINATOR
        # Told to find the coordinator again, and still in the group as it was.
        assert m.on_heartbeat(code, g.h.now) is Next.RETRY
        assert m.state is State.STABLE and m.member_id
    # A commit told the same says the same.
    request = g.members[0].commit()
    assert request is not None
    outcome, done, error = g.members[0].on_commit(g.h.answer(g.h.send(request, 8)), g.h.now)
    assert (outcome, done, error) == (Next.RETRY, 0, ErrorCode.NOT_COORDINATOR)

    # The partition comes back (as on the node that takes it): its log replayed.
    g.h.co.take(partition)
    for record in g.h.records:
        g.h.co.replay(record, g.h.now, loading=True)
    g.h.co.loading_partitions.discard(partition)
    codes = g.beat_all(3)
    assert codes and set(codes) == {ErrorCode.NONE}
    assert {m.generation_id for m in g.members} == generation
    assert [m.assignment for m in g.members] == assignments
    assert [r for m in g.members for r in m.rebalances] == []


def test_a_joining_member_told_to_find_its_coordinator_joins_again_with_its_id() -> None:
    g = formed(1)
    (m,) = g.members
    member_id = m.member_id
    m.join(g.h.now)
    assert m.state is State.JOINING
    answer = JoinGroupResponse(error_code=ErrorCode.NOT_COORDINATOR)
    assert m.on_join(answer, g.h.now, PARTITIONS) is Next.RETRY
    assert m.state is State.UNJOINED and m.member_id == member_id
