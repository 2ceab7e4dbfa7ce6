"""Sessions: Heartbeat, the session deadline, and taking a member out.

A heartbeat only moves its member's session deadline; the member's timer, when it fires
early, re-arms at that deadline (completeAndScheduleNextHeartbeatExpiration). The common
heartbeat (a known dynamic member, nothing loading) is answered by the member table alone,
in compiled code; the rest take heartbeat_error, which gives the same answers.
"""

from __future__ import annotations

from fastcoord.core.classic.responses import answer_join, answer_sync, join_response, sync_response
from fastcoord.core.group import Group, Member
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.result import Call, Result
from fastcoord.core.state import DEAD, EMPTY, PREPARING_REBALANCE
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import HeartbeatRequest, HeartbeatResponse


def validate_current_member(
    group: Group, member_id: str, instance_id: str | None
) -> ErrorCode | None:
    if group.is_static_member_fenced(instance_id, member_id):
        return ErrorCode.FENCED_INSTANCE_ID
    if not group.has(member_id):
        return ErrorCode.UNKNOWN_MEMBER_ID
    return None


def schedule_session(
    gm: GroupManager, group: Group, member: Member, now_ms: int, timeout_ms: int | None = None
) -> None:
    """completeAndScheduleNextHeartbeatExpiration: the session starts again from now."""
    deadline = now_ms + (member.session_timeout_ms if timeout_ms is None else timeout_ms)
    member.session_deadline_ms = deadline
    key = ("heartbeat", group.group_id, member.member_id)
    armed = gm.ctx.deadline(key)
    if armed is None or armed > deadline:
        gm.schedule(key, deadline)


def drop_member(gm: GroupManager, group: Group, member: Member, result: Result) -> None:
    """Remove a member and answer whatever it was waiting for; no rebalance decision."""
    answer_join(
        result,
        group,
        member,
        join_response(member.awaiting_join_version, ErrorCode.UNKNOWN_MEMBER_ID),
    )
    answer_sync(result, member, sync_response(ErrorCode.UNKNOWN_MEMBER_ID))
    gm.cancel(("heartbeat", group.group_id, member.member_id))
    group.remove(member.member_id)


def heartbeat(gm: GroupManager, call: Call, req: HeartbeatRequest) -> None:
    handle, version, now_ms, result = call.handle, call.version, call.now_ms, call.result
    error = heartbeat_code(
        gm, req.group_id, req.member_id, req.generation_id, req.group_instance_id, version, now_ms
    )
    result.respond(handle, HeartbeatResponse(error_code=error))


def heartbeat_code(
    gm: GroupManager,
    group_id: str,
    member_id: str,
    generation: int,
    group_instance_id: str | None,
    version: int,
    now_ms: int,
) -> int:
    """A Heartbeat's error code: the member table's answer when it can give one alone,
    else heartbeat_error's."""
    if group_instance_id is None and gm.serves_all():
        code: int = gm.table.heartbeat_id(group_id, member_id, generation, now_ms)
        if code >= 0:
            return code
    code = heartbeat_error(gm, group_id, member_id, generation, group_instance_id, version, now_ms)
    # The table counts what it answers; these are the rest (see heartbeat_answers).
    gm.heartbeat_fallbacks[code] = gm.heartbeat_fallbacks.get(code, 0) + 1
    return code


_HEARTBEAT = HeartbeatRequest()


def heartbeat_error(
    gm: GroupManager,
    group_id: str,
    member_id: str,
    generation: int,
    group_instance_id: str | None,
    version: int,
    now_ms: int,
) -> int:
    """The checks in GroupCoordinator's order; a heartbeat that passes moves the deadline."""
    error = gm.group_status_error(group_id, _HEARTBEAT)
    if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        return ErrorCode.NONE  # the group is still loading: answer blindly, as Kafka does
    if error is not None:
        return error
    group = gm.groups.get(group_id)
    if group is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if group.is_(DEAD):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    instance_id = group_instance_id if version >= 3 else None
    if group.is_static_member_fenced(instance_id, member_id):
        return ErrorCode.FENCED_INSTANCE_ID
    member = group.members.get(member_id)
    if group.is_(PREPARING_REBALANCE):
        # Members keep heartbeating while they rejoin; keep them alive.
        if member is not None and generation == group.generation_id:
            member.session_deadline_ms = now_ms + member.session_timeout_ms
        return ErrorCode.REBALANCE_IN_PROGRESS
    if group.is_(EMPTY) or member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if generation != group.generation_id:
        return ErrorCode.ILLEGAL_GENERATION
    # Stable, or CompletingRebalance for the current generation (members may heartbeat
    # between their JoinGroup response and their SyncGroup).
    member.session_deadline_ms = now_ms + member.session_timeout_ms
    return ErrorCode.NONE
