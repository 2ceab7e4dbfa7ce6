"""A consumer group's records: built from what a heartbeat decided, and replayed.

A heartbeat never changes a group directly: it decides, writes records, and the records
are replayed into the group at once (and again, in the same order, at load). So replaying
a group's records rebuilds exactly the state the heartbeats left. The order within a
heartbeat is Kafka's: the member's metadata, the group epoch, the target assignment (the
members whose share changed, then its epoch), the member's current assignment; a member
leaves by its current assignment, its target, then its metadata.
"""

from __future__ import annotations

import uuid

from fastcoord.core.consumer.assignment import Assignment
from fastcoord.core.consumer.group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerMember,
)
from fastcoord.core.consumer.reconciliation import CurrentAssignment, MemberState
from fastcoord.core.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    Record,
    TopicPartitions,
)


def _partitions(assignment: Assignment) -> tuple[TopicPartitions, ...]:
    return tuple(
        TopicPartitions(topic, tuple(sorted(parts)))
        for topic, parts in sorted(assignment.items(), key=lambda item: item[0].int)
    )


def _assignment(partitions: tuple[TopicPartitions, ...]) -> dict[uuid.UUID, frozenset[int]]:
    return {tp.topic_id: frozenset(tp.partitions) for tp in partitions if tp.partitions}


# -- building -----------------------------------------------------------------------------


def member_metadata(group_id: str, member: ConsumerMember) -> Record:
    return Record(
        ConsumerGroupMemberMetadataKey(group_id, member.member_id),
        ConsumerGroupMemberMetadataValue(
            instance_id=member.instance_id,
            rack_id=member.rack_id,
            client_id=member.client_id,
            client_host=member.client_host,
            subscribed_topic_names=member.subscribed_topic_names,
            subscribed_topic_regex=member.subscribed_topic_regex,
            server_assignor=member.server_assignor,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
        ),
    )


def group_epoch(group_id: str, epoch: int, metadata_hash: int) -> Record:
    return Record(
        ConsumerGroupMetadataKey(group_id), ConsumerGroupMetadataValue(epoch, metadata_hash)
    )


def target_member(group_id: str, member_id: str, assignment: Assignment) -> Record:
    return Record(
        ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
        ConsumerGroupTargetAssignmentMemberValue(_partitions(assignment)),
    )


def target_epoch(group_id: str, epoch: int) -> Record:
    return Record(
        ConsumerGroupTargetAssignmentMetadataKey(group_id),
        ConsumerGroupTargetAssignmentMetadataValue(epoch),
    )


def current_assignment(group_id: str, member_id: str, current: CurrentAssignment) -> Record:
    return Record(
        ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id),
        ConsumerGroupCurrentMemberAssignmentValue(
            member_epoch=current.member_epoch,
            previous_member_epoch=current.previous_member_epoch,
            state=int(current.state),
            assigned_partitions=_partitions(current.assigned),
            partitions_pending_revocation=_partitions(current.pending_revocation),
        ),
    )


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member leaves: its current assignment, its target, then its metadata."""
    return [
        Record(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None),
        Record(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None),
        Record(ConsumerGroupMemberMetadataKey(group_id, member_id), None),
    ]


def group_tombstones(group_id: str) -> list[Record]:
    """An empty group goes: its target assignment's epoch, then the group."""
    return [
        Record(ConsumerGroupTargetAssignmentMetadataKey(group_id), None),
        Record(ConsumerGroupMetadataKey(group_id), None),
    ]


# -- replaying ----------------------------------------------------------------------------


class ReplayError(RuntimeError):
    """Records out of Kafka's order: a bug (Kafka throws IllegalStateException)."""


def replay(
    groups: dict[str, ConsumerGroup],
    key: ConsumerGroupKey,
    value: ConsumerGroupValue | None,
    now_ms: int,
) -> None:
    """Apply one consumer group record (or tombstone) to `groups`."""
    group_id = key.group
    group = groups.get(group_id)
    if isinstance(key, ConsumerGroupMetadataKey):
        if value is None:
            if group is not None:
                if group.members:
                    raise ReplayError(f"group {group_id} deleted with members")
                del groups[group_id]
            return
        assert isinstance(value, ConsumerGroupMetadataValue)
        if group is None:
            group = groups[group_id] = ConsumerGroup(group_id, now_ms)
        group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash
        group.update_state(now_ms)
        return
    if isinstance(key, ConsumerGroupMemberMetadataKey):
        if value is None:
            if group is None or key.member_id not in group.members:
                return
            if group.members[key.member_id].member_epoch != LEAVE_GROUP_MEMBER_EPOCH:
                raise ReplayError(f"member {key.member_id} removed before its assignment")
            if key.member_id in group.target:
                raise ReplayError(f"member {key.member_id} removed before its target")
            group.remove_member(key.member_id, now_ms)
            return
        assert isinstance(value, ConsumerGroupMemberMetadataValue)
        if group is None:
            group = groups[group_id] = ConsumerGroup(group_id, now_ms)
        old = group.members.get(key.member_id)
        member = ConsumerMember(
            member_id=key.member_id,
            instance_id=value.instance_id,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            subscribed_topic_names=value.subscribed_topic_names,
            subscribed_topic_regex=value.subscribed_topic_regex,
            server_assignor=value.server_assignor,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
        )
        if old is not None:
            member.current = old.current
        group.update_member(member, now_ms)
        return
    if group is None:
        raise ReplayError(f"a record of group {group_id} before the group")
    if isinstance(key, ConsumerGroupTargetAssignmentMetadataKey):
        if value is None:
            if group.members:
                raise ReplayError(f"target assignment of group {group_id} deleted with members")
            group.set_assignment_epoch(-1, now_ms)
        else:
            assert isinstance(value, ConsumerGroupTargetAssignmentMetadataValue)
            group.set_assignment_epoch(value.assignment_epoch, now_ms)
    elif isinstance(key, ConsumerGroupTargetAssignmentMemberKey):
        if value is None:
            group.target.pop(key.member_id, None)
        else:
            assert isinstance(value, ConsumerGroupTargetAssignmentMemberValue)
            group.target[key.member_id] = _assignment(value.topic_partitions)
    elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
        holder = group.members.get(key.member_id)
        if holder is None:
            if value is None:
                return
            raise ReplayError(f"assignment of member {key.member_id} before the member")
        if value is None:
            current = CurrentAssignment(LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH)
        else:
            assert isinstance(value, ConsumerGroupCurrentMemberAssignmentValue)
            current = CurrentAssignment(
                member_epoch=value.member_epoch,
                previous_member_epoch=value.previous_member_epoch,
                state=MemberState.from_value(value.state),
                assigned=_assignment(value.assigned_partitions),
                pending_revocation=_assignment(value.partitions_pending_revocation),
            )
        group.update_assignment(holder, current, now_ms)
