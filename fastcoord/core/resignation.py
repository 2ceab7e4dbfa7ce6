"""A coordinator resigns an offsets partition: its groups and offsets leave this node.

Kafka's onResignation (GroupMetadataManager.removeGroupsForPartition, onGroupUnloaded):
when a partition moves to another node, every group of it is unloaded here. Whoever waits
for a JoinGroup or SyncGroup answer is told NOT_COORDINATOR, so that it finds the new
coordinator at once; each group goes Dead, its members, timers and table slots are
released, and its offsets leave memory. Nothing is written: the log keeps every record,
and the new owner loads them from it.

Appends in flight when the partition is resigned still complete here (the log is closed
only after they are written), and their callbacks find Dead groups, which they leave alone.
An OffsetCommit among them puts its offsets back into memory when it completes, so the
coordinator unloads the partition once more when every append made before the resignation
is complete: unloading is idempotent, and the second pass drops what came back.
"""

from __future__ import annotations

from collections.abc import Callable

from fastcoord.core.classic.responses import unload_group
from fastcoord.core.consumer.columns import session_key
from fastcoord.core.consumer.sessions import revocation_key
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.offset_manager import OffsetManager
from fastcoord.core.result import Result
from fastcoord.core.state import DEAD


def unload_partition(
    gm: GroupManager,
    om: OffsetManager,
    in_partition: Callable[[str], bool],
    now_ms: int,
    result: Result,
    report: bool,
) -> list[str]:
    """Unload every group for which `in_partition(group_id)` holds; the ids of the
    groups unloaded (those with members or metadata, and those with offsets alone).
    `report`: a group_unloaded event for each group with members or metadata, which the
    event log keeps as the mark of a move."""
    unloaded = set()
    for group_id in [g for g in gm.groups if in_partition(g)]:
        members = len(gm.groups[group_id].members)
        _unload_classic(gm, group_id, now_ms, result)
        unloaded.add(group_id)
        if report:
            gm.ctx.event(result, now_ms, "group_unloaded", group_id, members=members)
    for group_id in [g for g in gm.consumer_groups if in_partition(g)]:
        members = len(gm.consumer_groups[group_id].members)
        _unload_consumer(gm, group_id)
        unloaded.add(group_id)
        if report:
            gm.ctx.event(result, now_ms, "group_unloaded", group_id, members=members)
    for group_id in [g for g in om.group_ids() if in_partition(g)]:
        om.drop(group_id)
        unloaded.add(group_id)
    return sorted(unloaded)


def _unload_classic(gm: GroupManager, group_id: str, now_ms: int, result: Result) -> None:
    group = gm.groups.pop(group_id)
    unload_group(group, result)
    gm.cancel(("join", group_id))
    gm.cancel(("sync", group_id, group.generation_id))
    for member_id in list(group.members):
        gm.cancel(("heartbeat", group_id, member_id))
        group.remove(member_id)
    for member_id in group.pending_members:
        gm.cancel(("pending", group_id, member_id))
    group.pending_members.clear()
    if not group.is_(DEAD):
        # An append's callback that completes later finds the group Dead and does nothing.
        group.transition_to(DEAD, now_ms, "its partition moved to another coordinator")
    group.release()


def _unload_consumer(gm: GroupManager, group_id: str) -> None:
    group = gm.consumer_groups.pop(group_id)
    table = gm.table
    for member_id in group.members:
        gm.cancel(session_key(group_id, member_id))
        gm.cancel(revocation_key(group_id, member_id))
        slot = table.slot_of(group_id, member_id)
        if slot >= 0:
            table.unbind(group_id, member_id)
            table.remove_member(slot)
    slot = gm.consumer_slots.pop(group_id, None)
    if slot is not None:
        table.remove_group(slot)
    # unsettled_writes stays: the callbacks of the group's appends in flight count it down.
