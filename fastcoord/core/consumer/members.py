"""The group and the member a ConsumerGroupHeartbeat is for, found or created.

A joining member (epoch 0) may create its group, taking the place of an Empty classic group
of the same id; any other must name a member the group knows, at the epoch it knows (or
its previous one, owning nothing it is not assigned: it missed the answer that moved it
on). A static member (KIP-345: an instance id) that left with -2 comes back under a new
member id and takes its old place and partitions. Nothing here changes the group: a new
group or member exists once its records are replayed.
"""

from __future__ import annotations

import base64
import dataclasses
import uuid

from fastcoord.core.consumer import records
from fastcoord.core.consumer.assignment import Assignment
from fastcoord.core.consumer.group import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerMember,
)
from fastcoord.core.consumer.reconciliation import check_member_epoch
from fastcoord.core.consumer.writes import HeartbeatError
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.records import GroupMetadataKey, Record
from fastcoord.core.state import EMPTY
from fastcoord.protocol.errors import ErrorCode


def new_member_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): 22 characters of URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def consumer_group(
    gm: GroupManager, group_id: str, joining: bool, now_ms: int, written: list[Record]
) -> ConsumerGroup:
    """Kafka's getOrMaybeCreateConsumerGroup: a new group is not in the groups until its
    records are replayed."""
    group = gm.consumer_groups.get(group_id)
    if group is not None:
        return group
    classic = gm.groups.get(group_id)
    if classic is None and not joining:
        raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
    if classic is not None:
        if not (
            joining and classic.is_(EMPTY) and not classic.members and not classic.pending_members
        ):
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group"
            )
        # An Empty classic group becomes a consumer group: its metadata goes (its offsets
        # stay), as Kafka's maybeDeleteEmptyClassicGroup does.
        written.append(Record(GroupMetadataKey(group_id), None))
    return ConsumerGroup(group_id, now_ms)


def dynamic_member(
    group: ConsumerGroup,
    member_id: str,
    epoch: int,
    owned: Assignment | None,
    joining: bool,
) -> ConsumerMember:
    member = group.members.get(member_id)
    if member is None:
        if not joining:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
        return ConsumerMember(member_id)
    _check_epoch(member, epoch, owned)
    return member


def static_member(
    group: ConsumerGroup,
    member_id: str,
    epoch: int,
    instance_id: str,
    owned: Assignment | None,
    joining: bool,
) -> tuple[ConsumerMember, ConsumerMember | None]:
    """(the member, the member it replaces or None): Kafka's
    getOrMaybeSubscribeStaticConsumerGroupMember."""
    existing = group.static_member(instance_id)
    if joining:
        if existing is None:
            return group.members.get(member_id) or ConsumerMember(member_id), None
        if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise HeartbeatError(
                ErrorCode.UNRELEASED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} cannot join the "
                f"group because the instance id is owned by {existing.member_id} member.",
            )
        # The instance comes back under a new member id: it takes the old one's place and
        # partitions, from epoch 0.
        current = dataclasses.replace(existing.current, member_epoch=0, previous_member_epoch=0)
        return dataclasses.replace(existing, member_id=member_id, current=current), existing
    if existing is None:
        raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if existing.member_id != member_id:
        raise HeartbeatError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{existing.member_id}.",
        )
    _check_epoch(existing, epoch, owned)
    return existing, None


def _check_epoch(member: ConsumerMember, epoch: int, owned: Assignment | None) -> None:
    if check_member_epoch(member.current, epoch, owned) is None:
        return
    known = member.member_epoch
    side = "greater" if epoch > known else "smaller"
    raise HeartbeatError(
        ErrorCode.FENCED_MEMBER_EPOCH,
        f"The consumer group member has a {side} member epoch ({epoch}) than the one known by "
        f"the group coordinator ({known}). The member must abandon all its partitions and "
        "rejoin.",
    )


def replace_member(group: ConsumerGroup, old: ConsumerMember, new: ConsumerMember) -> list[Record]:
    """Kafka's replaceMember: the old member's records go, the new one's come with its
    target and current assignment."""
    group_id = group.group_id
    return [
        *records.member_tombstones(group_id, old.member_id),
        records.member_metadata(group_id, new),
        records.target_member(group_id, new.member_id, group.target.get(old.member_id, {})),
        records.current_assignment(group_id, new.member_id, new.current),
    ]
