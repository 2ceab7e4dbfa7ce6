"""The answers of the classic protocol: JoinGroup and SyncGroup responses, and answering
the requests members wait in.

A member's JoinGroup or SyncGroup may wait for a rebalance; whatever ends the wait (the
rebalance completing, the member being removed or superseded, the coordinator unloading)
answers it through these, so a waiting request is answered exactly once.
"""

from __future__ import annotations

from fastcoord.core.group import Group, Member
from fastcoord.core.result import Result
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    JoinGroupResponse,
    JoinGroupResponseMember,
    SyncGroupResponse,
)

Protocols = list[tuple[str, bytes]]


def join_response(
    version: int,
    error: ErrorCode,
    member_id: str = "",
    group: Group | None = None,
    members: list[JoinGroupResponseMember] | None = None,
    leader: str | None = None,
    skip_assignment: bool = False,
) -> JoinGroupResponse:
    if group is None or error != ErrorCode.NONE:
        return JoinGroupResponse(
            error_code=error,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if version >= 7 else "",
            leader="",
            member_id=member_id,
        )
    return JoinGroupResponse(
        error_code=error,
        generation_id=group.generation_id,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        leader=(group.leader_id if leader is None else leader) or "",
        skip_assignment=skip_assignment,
        member_id=member_id,
        members=members or [],
    )


def member_list(group: Group) -> list[JoinGroupResponseMember]:
    """What the leader receives: every member and its metadata for the chosen protocol."""
    protocol = group.protocol_name or ""
    return [
        JoinGroupResponseMember(m.member_id, m.group_instance_id, m.metadata(protocol))
        for m in group.members.values()
    ]


def sync_response(
    error: ErrorCode, group: Group | None = None, assignment: bytes = b""
) -> SyncGroupResponse:
    if group is None or error != ErrorCode.NONE:
        return SyncGroupResponse(error_code=error)
    return SyncGroupResponse(
        error_code=error,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        assignment=assignment,
    )


def answer_join(result: Result, group: Group, member: Member, response: JoinGroupResponse) -> None:
    """maybeInvokeJoinCallback: answer the member's waiting JoinGroup, if it has one."""
    if member.awaiting_join is not None:
        result.respond(member.awaiting_join, response)
        group.set_awaiting_join(member, None, 0)


def answer_sync(result: Result, member: Member, response: SyncGroupResponse) -> None:
    if member.awaiting_sync is not None:
        result.respond(member.awaiting_sync, response)
        member.awaiting_sync = None


def reset_and_propagate_assignment_error(group: Group, error: ErrorCode, result: Result) -> None:
    for member in group.members.values():
        member.assignment = b""
        answer_sync(result, member, sync_response(error))


def unload_group(group: Group, result: Result) -> None:
    """Kafka's onGroupUnloaded, at shutdown: whoever waits for a JoinGroup or SyncGroup
    answer is told NOT_COORDINATOR, so that it finds the coordinator again rather than
    waiting out its request timeout."""
    error = ErrorCode.NOT_COORDINATOR
    for member in group.members.values():
        version = member.awaiting_join_version
        answer_join(result, group, member, join_response(version, error, member.member_id))
        answer_sync(result, member, sync_response(error))
