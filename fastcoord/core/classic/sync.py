"""SyncGroup: the leader's assignment stored, then given to every member (doSyncGroup).

The assignment is answered only once its record is durable. Members that do not send
SyncGroup within the rebalance timeout are removed (the pending sync timeout). A removed
member's waiting SyncGroup is answered UNKNOWN_MEMBER_ID, so that every request on a
shared connection gets its answer.
"""

from __future__ import annotations

from fastcoord.core.classic.rebalance import maybe_prepare_rebalance, prepare_rebalance
from fastcoord.core.classic.records import apply_assignments, group_metadata_record
from fastcoord.core.classic.responses import (
    answer_sync,
    reset_and_propagate_assignment_error,
    sync_response,
)
from fastcoord.core.classic.session import drop_member, schedule_session, validate_current_member
from fastcoord.core.group import Group
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.records import GroupMetadataValue
from fastcoord.core.result import Call, Result
from fastcoord.core.state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import SyncGroupRequest


def sync_group(gm: GroupManager, call: Call, req: SyncGroupRequest) -> None:
    handle, version, now_ms, result = call.handle, call.version, call.now_ms, call.result
    error = gm.group_status_error(req.group_id, req)
    if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        # The rebalance's state is lost with the load: make the member rejoin.
        error = ErrorCode.REBALANCE_IN_PROGRESS
    group = gm.groups.get(req.group_id) if error is None else None
    if error is None and group is None:
        error = ErrorCode.UNKNOWN_MEMBER_ID
    if error is None and group is not None:
        error = _validate_sync(group, req, version)
    if error is not None or group is None:
        result.respond(handle, sync_response(error or ErrorCode.UNKNOWN_MEMBER_ID))
        return
    member = group.get(req.member_id)
    if group.is_(EMPTY):
        result.respond(handle, sync_response(ErrorCode.UNKNOWN_MEMBER_ID))
    elif group.is_(PREPARING_REBALANCE):
        result.respond(handle, sync_response(ErrorCode.REBALANCE_IN_PROGRESS))
    elif group.is_(COMPLETING_REBALANCE):
        answer_sync(result, member, sync_response(ErrorCode.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = handle
        group.pending_sync_members.discard(req.member_id)
        if group.is_leader(req.member_id):
            _store_assignment(gm, group, req, now_ms, result)
    else:  # Stable
        group.pending_sync_members.discard(req.member_id)
        result.respond(handle, sync_response(ErrorCode.NONE, group, member.assignment))
        schedule_session(gm, group, member, now_ms)


def _validate_sync(group: Group, req: SyncGroupRequest, version: int) -> ErrorCode | None:
    if group.is_(DEAD):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    instance_id = req.group_instance_id if version >= 3 else None
    error = validate_current_member(group, req.member_id, instance_id)
    if error is not None:
        return error
    if req.generation_id != group.generation_id:
        return ErrorCode.ILLEGAL_GENERATION
    if version >= 5 and req.protocol_type is not None and req.protocol_type != group.protocol_type:
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    if version >= 5 and req.protocol_name is not None and req.protocol_name != group.protocol_name:
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    return None


def _store_assignment(
    gm: GroupManager, group: Group, req: SyncGroupRequest, now_ms: int, result: Result
) -> None:
    """The leader's assignment: persist it, and answer everyone once it is durable."""
    given = {a.member_id: a.assignment for a in req.assignments}
    assignment = {mid: given.get(mid, b"") for mid in group.members}
    record = group_metadata_record(group, now_ms, assignment)
    generation = group.generation_id

    def stored(error: ErrorCode, now_ms: int, result: Result) -> None:
        # Another member may have joined while the write was in flight: act only if the
        # group is still completing the same generation.
        if not (group.is_(COMPLETING_REBALANCE) and group.generation_id == generation):
            return
        if error != ErrorCode.NONE:
            reset_and_propagate_assignment_error(group, error, result)
            maybe_prepare_rebalance(
                gm, group, now_ms, result, f"storing the assignment failed: {error.name}"
            )
            return
        assert isinstance(record.value, GroupMetadataValue)
        apply_assignments(group, record.value)
        propagate_assignment(gm, group, ErrorCode.NONE, now_ms, result)
        group.transition_to(STABLE, now_ms, "leader's assignment stored")
        gm.event(
            result,
            now_ms,
            "sync_completed",
            group,
            generation=generation,
            members=len(group.members),
            duration_ms=now_ms - group.rebalance_started_ms,
        )

    gm.append(result, [record], stored)


def propagate_assignment(
    gm: GroupManager, group: Group, error: ErrorCode, now_ms: int, result: Result
) -> None:
    for member in group.members.values():
        if member.awaiting_sync is not None:
            answer_sync(result, member, sync_response(error, group, member.assignment))
            if error == ErrorCode.NONE:
                schedule_session(gm, group, member, now_ms)


def on_sync_timer(
    gm: GroupManager, group_id: str, generation: int, now_ms: int, result: Result
) -> None:
    """Members that have not sent SyncGroup within the rebalance timeout are removed."""
    group = gm.groups.get(group_id)
    if group is None or group.generation_id != generation:
        return
    if not (group.is_(COMPLETING_REBALANCE) or group.is_(STABLE)):
        return
    if not group.pending_sync_members:
        return
    for member_id in sorted(group.pending_sync_members):
        member = group.members.get(member_id)
        if member is not None:
            gm.event(
                result,
                now_ms,
                "member_removed",
                group,
                member_id=member_id,
                reason="did not send SyncGroup within the rebalance timeout",
            )
            drop_member(gm, group, member, result)
    prepare_rebalance(gm, group, now_ms, result, "members did not sync")
