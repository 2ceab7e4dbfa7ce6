"""A group and its members: Kafka's GroupMetadata and MemberMetadata, without the handlers.

Holds what a group is (state, generation, protocol, leader, members in join order, pending
members of KIP-394, static members of KIP-345) and the small rules that only read or
reshape it: leader election, the protocol vote, static member replacement. What happens on
JoinGroup, SyncGroup and the rest lives in core/classic/; its offsets are the offset
manager's.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from fastcoord.core import member_table as columns
from fastcoord.core.records import MemberMetadataValue
from fastcoord.core.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupState,
    transition,
)

# The member table's numbers for the states (fastcoord/core/member_table.py).
STATE_NUMBERS = {
    EMPTY: columns.STATE_EMPTY,
    PREPARING_REBALANCE: columns.STATE_PREPARING_REBALANCE,
    COMPLETING_REBALANCE: columns.STATE_COMPLETING_REBALANCE,
    STABLE: columns.STATE_STABLE,
    DEAD: columns.STATE_DEAD,
}

Handle = Any

# A new member that never completes its first join is dropped after this long (Kafka's
# GroupCoordinator.NewMemberJoinTimeoutMs), whatever its session timeout.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


class Member:
    """One member of a group (MemberMetadata). Its hot fields live in the member table."""

    __slots__ = (
        "_awaiting_join",
        "_awaiting_sync",
        "_is_new",
        "assignment",
        "awaiting_join_version",
        "client_host",
        "client_id",
        "group_instance_id",
        "member_id",
        "protocol_type",
        "protocols",
        "slot",
        "table",
    )

    def __init__(
        self,
        group: Group,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> None:
        self.table = group.table
        self.slot: int = group.table.add_member(
            group.slot, session_timeout_ms, rebalance_timeout_ms
        )
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.protocol_type = protocol_type
        self.protocols = protocols  # (name, metadata), in the member's order of preference
        self.assignment = b""
        self._awaiting_join: Handle | None = None  # the JoinGroup waiting for the rebalance
        self.awaiting_join_version = 0
        self._awaiting_sync: Handle | None = None  # the SyncGroup waiting for the assignment
        self._is_new = False

    # The waiting requests and the new flag are mirrored as flags in the member table.

    @property
    def awaiting_join(self) -> Handle | None:
        return self._awaiting_join

    @awaiting_join.setter
    def awaiting_join(self, handle: Handle | None) -> None:
        self._awaiting_join = handle
        self.table.set_flag(self.slot, columns.AWAITING_JOIN, handle is not None)

    @property
    def awaiting_sync(self) -> Handle | None:
        return self._awaiting_sync

    @awaiting_sync.setter
    def awaiting_sync(self, handle: Handle | None) -> None:
        self._awaiting_sync = handle
        self.table.set_flag(self.slot, columns.AWAITING_SYNC, handle is not None)

    @property
    def is_new(self) -> bool:
        return self._is_new

    @is_new.setter
    def is_new(self, new: bool) -> None:
        self._is_new = new
        self.table.set_flag(self.slot, columns.NEW, new)

    @property
    def session_deadline_ms(self) -> int:
        deadline: int = self.table.deadline(self.slot)
        return deadline

    @session_deadline_ms.setter
    def session_deadline_ms(self, value: int) -> None:
        self.table.set_deadline(self.slot, value)

    @property
    def session_timeout_ms(self) -> int:
        timeout: int = self.table.timeouts(self.slot)[0]
        return timeout

    @property
    def rebalance_timeout_ms(self) -> int:
        timeout: int = self.table.timeouts(self.slot)[1]
        return timeout

    def set_timeouts(self, session_timeout_ms: int, rebalance_timeout_ms: int) -> None:
        self.table.set_timeouts(self.slot, session_timeout_ms, rebalance_timeout_ms)

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


class Group:
    """One group (GroupMetadata). State and generation are mirrored in the member table,
    which answers heartbeats without touching this object."""

    __slots__ = (
        "_generation_id",
        "_state",
        "awaiting_join_count",
        "group_id",
        "initial_join",
        "leader_id",
        "members",
        "new_member_added",
        "pending_members",
        "pending_sync_members",
        "protocol_name",
        "protocol_type",
        "rebalance_started_ms",
        "slot",
        "state_timestamp_ms",
        "static_members",
        "supported_protocols",
        "table",
    )

    def __init__(self, group_id: str, now_ms: int, table: Any, state: GroupState = EMPTY) -> None:
        self.group_id = group_id
        self.table = table
        self._state = state
        self._generation_id = 0
        self.slot: int = table.add_group(STATE_NUMBERS[state], 0)
        self.state_timestamp_ms = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}  # in join order: the leader is the first
        self.pending_members: set[str] = set()  # KIP-394: given an id, not yet rejoined
        self.pending_sync_members: set[str] = set()
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        self.supported_protocols: Counter[str] = Counter()
        self.awaiting_join_count = 0
        self.new_member_added = False  # extends the initial rebalance delay
        # (delay, remaining) while an InitialDelayedJoin is pending, else None
        self.initial_join: tuple[int, int] | None = None
        self.rebalance_started_ms = 0

    @property
    def state(self) -> GroupState:
        return self._state

    @state.setter
    def state(self, state: GroupState) -> None:
        self._state = state
        self.table.set_group(self.slot, STATE_NUMBERS[state], self._generation_id)

    @property
    def generation_id(self) -> int:
        return self._generation_id

    @generation_id.setter
    def generation_id(self, generation: int) -> None:
        self._generation_id = generation
        self.table.set_group(self.slot, STATE_NUMBERS[self._state], generation)

    def release(self) -> None:
        """Give the group's slot back; the group must have no members left."""
        assert not self.members, self.group_id
        self.table.remove_group(self.slot)

    # -- state -----------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self._state is state  # not through the property: a call less, on hot paths

    def transition_to(self, target: GroupState, now_ms: int, why: str) -> None:
        self.state = transition(self.group_id, self.state, target, why)
        self.state_timestamp_ms = now_ms

    # -- members ---------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> Member:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: Member, join: Handle | None, join_version: int) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.table.bind(self.group_id, member.member_id, member.slot)
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.supported_protocols.update(name for name, _ in member.protocols)
        self.set_awaiting_join(member, join, join_version)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.table.unbind(self.group_id, member_id)
        self.table.remove_member(member.slot)
        self.supported_protocols.subtract(name for name, _ in member.protocols)
        self.supported_protocols += Counter()  # drop zero counts
        if member.awaiting_join is not None:
            self.awaiting_join_count -= 1
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def set_awaiting_join(self, member: Member, join: Handle | None, version: int) -> None:
        if (member.awaiting_join is None) != (join is None):
            self.awaiting_join_count += 1 if join is not None else -1
        member.awaiting_join = join
        member.awaiting_join_version = version

    def update_member(
        self,
        member: Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join: Handle | None,
        join_version: int,
    ) -> None:
        self.supported_protocols.subtract(name for name, _ in member.protocols)
        self.supported_protocols.update(name for name, _ in protocols)
        self.supported_protocols += Counter()
        member.protocols = protocols
        member.set_timeouts(session_timeout_ms, rebalance_timeout_ms)
        self.set_awaiting_join(member, join, join_version)

    def has_all_members_joined(self) -> bool:
        return self.awaiting_join_count == len(self.members) and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """If the leader has not rejoined, make a member that has the leader. False if none."""
        if self.leader_id is not None:
            leader = self.members.get(self.leader_id)
            if leader is not None and leader.awaiting_join is not None:
                return True
        for member in self.members.values():
            if member.awaiting_join is not None:
                self.leader_id = member.member_id
                return True
        return False

    # -- static membership (KIP-345) ---------------------------------------------------

    def current_static_member_id(self, group_instance_id: str | None) -> str | None:
        if group_instance_id is None:
            return None
        return self.static_members.get(group_instance_id)

    def is_static_member_fenced(self, group_instance_id: str | None, member_id: str) -> bool:
        current = self.current_static_member_id(group_instance_id)
        return current is not None and current != member_id

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Give a static member a new member id, keeping its place in join order,
        its leadership and its waiting requests (GroupMetadata.replaceStaticMember)."""
        member = self.members[old_id]
        member.member_id = new_id
        self.members = {(new_id if mid == old_id else mid): m for mid, m in self.members.items()}
        self.table.unbind(self.group_id, old_id)
        self.table.bind(self.group_id, new_id, member.slot)
        self.static_members[instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_id)
            self.pending_sync_members.add(new_id)
        return member

    # -- protocol ----------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """A joining member must share the protocol type and one protocol with the group."""
        if not protocols or not protocol_type:
            return False
        if self.is_(EMPTY) and not self.members:
            return True
        names = {name for name, _ in protocols}
        return self.protocol_type == protocol_type and any(
            self.supported_protocols[name] == len(self.members) for name in names
        )

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """Kafka's protocol vote: each member votes for its preferred candidate.

        Ties, which Kafka leaves to map order, go to the protocol the leader prefers.
        """
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id}: no protocol is supported by all members")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        tied = {name for name, count in votes.items() if count == best}
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        return leader.vote(tied)

    def member_values(self) -> tuple[MemberMetadataValue, ...]:
        protocol = self.protocol_name
        return tuple(
            MemberMetadataValue(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata(protocol) if protocol else b"",
                assignment=m.assignment,
            )
            for m in self.members.values()
        )
