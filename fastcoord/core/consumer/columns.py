"""A consumer group's hot fields in the member table, kept as the group changes.

Most ConsumerGroupHeartbeats change nothing: a steady member, at its epoch, says it is
alive. The member table (fastcoord/core/member_table.py) answers those alone, in compiled
code, from columns this module keeps equal to the group: per group its epoch and whether
it is open (its target assignment is at the group epoch, none of its writes is waiting to
be durable, and the topics have not changed since it resolved its subscriptions); per
member its slot, epoch, whether it is steady (reconciled to its target, nothing pending),
its client id and host, and its session deadline, which lives only in the table. Whatever
the table does not answer comes to heartbeat.py, which changes the group by records; each
record replayed comes through `replayed`, so the columns follow live changes and a load
alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastcoord.core import member_table as columns
from fastcoord.core.consumer.group import ConsumerGroup, ConsumerMember
from fastcoord.core.consumer.reconciliation import MemberState
from fastcoord.core.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
)

if TYPE_CHECKING:
    from fastcoord.core.group_manager import GroupManager


def replayed(gm: GroupManager, key: ConsumerGroupKey, now_ms: int) -> None:
    """After a record of `key.group` is replayed: its slots, and the columns it moved."""
    table = gm.table
    group = gm.consumer_groups.get(key.group)
    slot = gm.consumer_slots.get(key.group)
    if group is None:
        if slot is not None:
            del gm.consumer_slots[key.group]
            table.remove_group(slot)
        return
    if slot is None:
        slot = gm.consumer_slots[key.group] = table.add_group(columns.STATE_CONSUMER_HELD, 0)
    if isinstance(key, ConsumerGroupMemberMetadataKey | ConsumerGroupCurrentMemberAssignmentKey):
        member = group.members.get(key.member_id)
        bound = table.slot_of(key.group, key.member_id)
        if member is None:
            if bound >= 0:
                table.unbind(key.group, key.member_id)
                table.remove_member(bound)
        else:
            if bound < 0:
                session = gm.config.group_consumer_session_timeout_ms
                bound = table.add_member(slot, session, max(member.rebalance_timeout_ms, 0))
                table.bind(key.group, key.member_id, bound)
                # A member new to the table (joining, or loaded) has its full session from
                # now, as Kafka arms every member's session when it loads a group.
                table.set_deadline(bound, now_ms + session)
                gm.schedule(session_key(key.group, key.member_id), now_ms + session)
            _member(gm, bound, member)
    sync(gm, group)


def _member(gm: GroupManager, slot: int, member: ConsumerMember) -> None:
    table = gm.table
    session, _ = table.timeouts(slot)
    table.set_timeouts(slot, session, max(member.rebalance_timeout_ms, 0))
    current = member.current
    steady = current.state is MemberState.STABLE
    table.set_consumer(slot, current.member_epoch, steady, member.client_id, member.client_host)


def sync(gm: GroupManager, group: ConsumerGroup) -> None:
    """The group's epoch and whether the table may answer its steady members."""
    slot = gm.consumer_slots.get(group.group_id)
    if slot is None:
        return
    open_ = (
        group.assignment_epoch == group.group_epoch
        and group.group_id not in gm.unsettled_writes
        and group.image_version == gm.topics.version()
    )
    state = columns.STATE_CONSUMER_OPEN if open_ else columns.STATE_CONSUMER_HELD
    gm.table.set_group(slot, state, group.group_epoch)


def topics_changed(gm: GroupManager) -> None:
    """A topic was added: every group resolves its subscriptions again at its next
    heartbeat, which the table leaves to the full path until then."""
    for group in gm.consumer_groups.values():
        sync(gm, group)


def member_slot(gm: GroupManager, group_id: str, member_id: str) -> int:
    return int(gm.table.slot_of(group_id, member_id))


def session_deadline(gm: GroupManager, group_id: str, member_id: str) -> int | None:
    """When the member's session ends: None if it is not in the table."""
    slot = member_slot(gm, group_id, member_id)
    return None if slot < 0 else int(gm.table.deadline(slot))


def set_session_deadline(gm: GroupManager, group_id: str, member_id: str, deadline: int) -> None:
    slot = member_slot(gm, group_id, member_id)
    if slot >= 0:
        gm.table.set_deadline(slot, deadline)


def session_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("consumer_session", group_id, member_id)
