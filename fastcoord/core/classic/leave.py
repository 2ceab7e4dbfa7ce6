"""Members leaving: LeaveGroup (by member id or, KIP-345, by instance id), and the timers
that remove members who stopped coming: session expiry (onMemberFailure) and KIP-394
pending members that never rejoined with their id.
"""

from __future__ import annotations

from fastcoord.core.classic.rebalance import maybe_prepare_rebalance, try_complete_join
from fastcoord.core.classic.session import drop_member, schedule_session, validate_current_member
from fastcoord.core.group import Group, Member
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.result import Call, Result
from fastcoord.core.state import COMPLETING_REBALANCE, DEAD, PREPARING_REBALANCE, STABLE
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import LeaveGroupRequest, LeaveGroupResponse, MemberResponse


def leave_group(gm: GroupManager, call: Call, req: LeaveGroupRequest) -> None:
    handle, version, now_ms, result = call.handle, call.version, call.now_ms, call.result
    # v0-2 name one member; v3+ a batch, by member id or by group instance id.
    leaving = (
        [(m.member_id, m.group_instance_id) for m in req.members]
        if version >= 3
        else [(req.member_id, None)]
    )
    error = gm.group_status_error(req.group_id, req)
    group = gm.groups.get(req.group_id) if error is None else None
    errors: list[ErrorCode] = []
    if error is None and group is not None and group.is_(DEAD):
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error is None:
        for member_id, instance_id in leaving:
            errors.append(
                _leave_one(gm, group, member_id, instance_id, now_ms, result)
                if group is not None
                else ErrorCode.UNKNOWN_MEMBER_ID
            )
    if version >= 3:
        result.respond(
            handle,
            LeaveGroupResponse(
                error_code=error or ErrorCode.NONE,
                members=[
                    MemberResponse(member_id, instance_id, err)
                    for (member_id, instance_id), err in zip(leaving, errors, strict=False)
                ],
            ),
        )
    else:
        result.respond(
            handle,
            LeaveGroupResponse(
                error_code=error if error is not None else errors[0],
            ),
        )


def _leave_one(
    gm: GroupManager,
    group: Group,
    member_id: str,
    instance_id: str | None,
    now_ms: int,
    result: Result,
) -> ErrorCode:
    if member_id == "":
        # Administrative removal by group instance id (KIP-345).
        current = group.current_static_member_id(instance_id)
        if current is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member_id = current
    elif member_id in group.pending_members:
        group.pending_members.discard(member_id)
        gm.cancel(("pending", group.group_id, member_id))
        if group.is_(PREPARING_REBALANCE):
            try_complete_join(gm, group, now_ms, result)
        return ErrorCode.NONE
    else:
        error = validate_current_member(group, member_id, instance_id)
        if error is not None:
            return error
    member = group.get(member_id)
    gm.event(
        result, now_ms, "member_left", group, member_id=member_id, members=len(group.members) - 1
    )
    remove_member_and_update_group(gm, group, member, now_ms, result, "left the group")
    return ErrorCode.NONE


def remove_member_and_update_group(
    gm: GroupManager, group: Group, member: Member, now_ms: int, result: Result, reason: str
) -> None:
    """onMemberFailure / removeMemberAndUpdateGroup."""
    drop_member(gm, group, member, result)
    if group.is_(STABLE) or group.is_(COMPLETING_REBALANCE):
        maybe_prepare_rebalance(gm, group, now_ms, result, f"{member.member_id}: {reason}")
    elif group.is_(PREPARING_REBALANCE):
        try_complete_join(gm, group, now_ms, result)


def on_heartbeat_timer(
    gm: GroupManager, group_id: str, member_id: str, now_ms: int, result: Result
) -> None:
    group = gm.groups.get(group_id)
    member = group.members.get(member_id) if group is not None else None
    if group is None or member is None:
        return
    if member.session_deadline_ms > now_ms:
        # Heartbeats moved the deadline since the timer was armed.
        gm.schedule(("heartbeat", group_id, member_id), member.session_deadline_ms)
        return
    if gm.table.satisfied(member.slot):
        # Members waiting for a rebalance satisfy expected heartbeats (hasSatisfiedHeartbeat).
        schedule_session(gm, group, member, now_ms)
        return
    gm.event(result, now_ms, "member_expired", group, member_id=member_id, reason="session timeout")
    remove_member_and_update_group(gm, group, member, now_ms, result, "session timeout")


def on_pending_member_timer(
    gm: GroupManager, group_id: str, member_id: str, now_ms: int, result: Result
) -> None:
    group = gm.groups.get(group_id)
    if group is None or member_id not in group.pending_members:
        return
    group.pending_members.discard(member_id)
    if group.is_(PREPARING_REBALANCE):
        try_complete_join(gm, group, now_ms, result)
