"""The work that spans groups and offsets: DeleteGroups, and the expiry of offsets.

Both change what the group manager and the offset manager hold together, so the
coordinator does them, as Kafka's GroupCoordinatorShard does (deleteGroups,
cleanupGroupMetadata). Only an Empty group can be deleted: its offsets and its metadata
get tombstones, and it is gone once they are durable. Like Kafka since KIP-211, offsets
expire by offsets.retention.minutes counted from when the group became empty (for a group
that never had members, from each commit); a commit's own retention time is ignored. An
Empty group left with no offsets is removed.
"""

from __future__ import annotations

from fastcoord.core.classic.records import replay_group
from fastcoord.core.consumer import leave as consumer_leave
from fastcoord.core.consumer import records as consumer_records
from fastcoord.core.consumer.group import ConsumerGroupState
from fastcoord.core.context import Context
from fastcoord.core.group import Group
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.offset_manager import OffsetManager
from fastcoord.core.offsets import storage_error
from fastcoord.core.records import GroupMetadataKey, OffsetCommitKey, Record
from fastcoord.core.result import Call, Result
from fastcoord.core.state import DEAD, EMPTY
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
)


def _drop_offsets(om: OffsetManager, records: list[Record], now_ms: int) -> None:
    for record in records:
        key = record.key
        assert isinstance(key, OffsetCommitKey) and record.value is None
        om.replay_offset(key, None, now_ms)


def delete_groups(
    gm: GroupManager, om: OffsetManager, call: Call, req: DeleteGroupsRequest
) -> None:
    handle, now_ms, result = call.handle, call.now_ms, call.result
    errors: dict[str, ErrorCode] = {}
    records: list[Record] = []
    consumer: dict[str, list[Record]] = {}  # consumer groups deleted: their own tombstones
    for group_id in req.groups_names:
        error = gm.group_status_error(group_id, req)
        group = gm.groups.get(group_id) if error is None else None
        cgroup = gm.consumer_groups.get(group_id) if error is None else None
        if error is not None:
            errors[group_id] = error
        elif cgroup is not None:
            if cgroup.state is not ConsumerGroupState.EMPTY:
                errors[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                # A consumer group's records are replayed as they are written (writes.py):
                # the group is gone now, and a member joining next starts a new one.
                errors[group_id] = ErrorCode.NONE
                consumer[group_id] = tombstones = [
                    *om.tombstones(group_id),
                    *consumer_records.group_tombstones(group_id),
                ]
                records.extend(tombstones)
                _drop_offsets(om, tombstones[:-2], now_ms)
                for record in tombstones[-2:]:
                    gm.replay_consumer(record, now_ms)
        elif group is None or group.is_(DEAD):
            errors[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
        elif not group.is_(EMPTY):
            errors[group_id] = ErrorCode.NON_EMPTY_GROUP
        else:
            errors[group_id] = ErrorCode.NONE
            records.extend(om.tombstones(group_id))
            records.append(Record(GroupMetadataKey(group_id), None))
            group.transition_to(DEAD, now_ms, "deleted")

    def respond(result: Result) -> None:
        results = [DeletableGroupResult(group_id, err) for group_id, err in errors.items()]
        result.respond(handle, DeleteGroupsResponse(results=results))

    if not records:
        respond(result)
        return

    def stored(error: ErrorCode, now_ms: int, result: Result) -> None:
        for group_id in consumer:
            if error != ErrorCode.NONE:
                errors[group_id] = storage_error(error)
        for group_id, err in errors.items():
            if group_id in consumer:
                continue
            group = gm.groups.get(group_id)
            if err != ErrorCode.NONE or group is None:
                continue
            if error == ErrorCode.NONE:
                _drop_offsets(om, om.tombstones(group_id), now_ms)
                replay_group(gm, group_id, None, now_ms, False, om.has_offsets(group_id))
            else:
                errors[group_id] = storage_error(error)
            if group.is_(DEAD) and gm.groups.get(group_id) is group:
                om.drop(group_id)  # the group's offsets leave memory with it
            gm.remove_group_if_dead(group)
        respond(result)

    gm.append(result, records, stored)


def expire_offsets(
    gm: GroupManager, om: OffsetManager, ctx: Context, now_ms: int, result: Result
) -> None:
    """cleanupGroupMetadata: expire offsets, and remove empty groups left with none."""
    for group in list(gm.groups.values()):
        group_id = group.group_id
        tombstones = om.expired(group_id, now_ms)
        if not tombstones:
            gm.remove_empty_group(group, om.has_offsets(group_id), now_ms, result)
            continue

        def stored(
            error: ErrorCode,
            now_ms: int,
            result: Result,
            group: Group = group,
            tombstones: list[Record] = tombstones,
        ) -> None:
            if error == ErrorCode.NONE:
                _drop_offsets(om, tombstones, now_ms)
                if gm.groups.get(group.group_id) is group:
                    gm.remove_empty_group(group, om.has_offsets(group.group_id), now_ms, result)

        ctx.append(result, tombstones, stored)
    for cgroup in list(gm.consumer_groups.values()):
        group_id = cgroup.group_id
        tombstones = om.expired(group_id, now_ms)
        if tombstones:
            _drop_offsets(om, tombstones, now_ms)  # replayed at once, as the group's records
            ctx.append(result, tombstones, _ignore)
        if cgroup.state is ConsumerGroupState.EMPTY:
            consumer_leave.remove_empty_group(gm, cgroup, om.has_offsets(group_id), now_ms, result)


def _ignore(error: ErrorCode, now_ms: int, result: Result) -> None:
    return
