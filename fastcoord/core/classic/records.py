"""A classic group's durable record: GroupMetadataKey/GroupMetadataValue, written and replayed.

The record carries the generation, protocol, leader and every member with its subscription
and assignment; at load a group is rebuilt from its latest record alone.
"""

from __future__ import annotations

import msgspec

from fastcoord.core.classic.session import schedule_session
from fastcoord.core.group import Group, Member
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    Record,
)
from fastcoord.core.state import EMPTY, STABLE


def group_metadata_record(
    group: Group, now_ms: int, assignment: dict[str, bytes] | None = None
) -> Record:
    members = group.member_values()
    if assignment is not None:
        members = tuple(_with_assignment(m, assignment.get(m.member_id, b"")) for m in members)
    return Record(
        GroupMetadataKey(group.group_id),
        GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=now_ms,
            members=members,
        ),
    )


def _with_assignment(m: MemberMetadataValue, assignment: bytes) -> MemberMetadataValue:
    return msgspec.structs.replace(m, assignment=assignment)


def replay_group(
    gm: GroupManager,
    group_id: str,
    value: GroupMetadataValue | None,
    now_ms: int,
    loading: bool,
    has_offsets: bool,
) -> None:
    """Apply a group metadata record (or tombstone).

    Live, the record was produced from this very group: only what it makes durable (the
    assignment) needs applying, and the rest is checked to agree. At load, the group is
    rebuilt from it: Stable with its members (their sessions start now), or Empty.
    """
    group = gm.groups.get(group_id)
    if value is None:
        if group is not None and group.members and loading:
            # At load the latest record of a key is what counts, as in Kafka's loading (and
            # as compaction, which keeps only that record, assumes): the group goes.
            for member_id in list(group.members):
                gm.cancel(("heartbeat", group_id, member_id))
                group.remove(member_id)
            group.state = EMPTY
        if group is not None and not group.members:
            if has_offsets:
                # What is left is a group of offsets alone, as Kafka loads one.
                group.generation_id, group.protocol_name, group.leader_id = 0, None, None
                group.protocol_type = None
            else:
                del gm.groups[group_id]
                group.release()
        return
    if not loading and group is not None:
        apply_assignments(group, value)
        return
    if group is None:
        group = gm.groups[group_id] = Group(group_id, value.current_state_timestamp, gm.table)
    for member in list(group.members.values()):
        gm.cancel(("heartbeat", group_id, member.member_id))
        group.remove(member.member_id)
    group.protocol_type = value.protocol_type or None
    group.generation_id = value.generation
    group.protocol_name = value.protocol
    group.state_timestamp_ms = value.current_state_timestamp
    group.state = STABLE if value.members else EMPTY
    for m in value.members:
        member = Member(
            group,
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            value.protocol_type,
            [(value.protocol or "", m.subscription)],
        )
        member.assignment = m.assignment
        group.add(member, None, 0)
        schedule_session(gm, group, member, now_ms)
    group.leader_id = value.leader


def apply_assignments(group: Group, value: GroupMetadataValue) -> None:
    """Live, a record was produced from this very group: what it makes durable is the
    assignment."""
    for m in value.members:
        member = group.members.get(m.member_id)
        if member is not None:
            member.assignment = m.assignment
