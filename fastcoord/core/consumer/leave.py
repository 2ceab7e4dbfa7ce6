"""Members leaving: a heartbeat at epoch -1 (or -2, a static member that will be back), the
timers that fence members who stopped coming (session expiry, a revocation not done within
the rebalance timeout), and the removal of an Empty group left with no offsets.

A member fenced or gone has its records removed and the group epoch moves, so that the
others are given its partitions.
"""

from __future__ import annotations

from fastcoord.core.consumer import columns, records
from fastcoord.core.consumer.columns import session_key
from fastcoord.core.consumer.group import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerMember,
)
from fastcoord.core.consumer.reconciliation import CurrentAssignment, MemberState
from fastcoord.core.consumer.sessions import revocation_key
from fastcoord.core.consumer.subscriptions import metadata_hash_of, subscribed_topics
from fastcoord.core.consumer.writes import HeartbeatError, commit
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.records import Record
from fastcoord.core.result import Call, Result
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)


def fence(gm: GroupManager, group: ConsumerGroup, member: ConsumerMember) -> list[Record]:
    """Kafka's consumerGroupFenceMember: the member's records go and the group epoch moves,
    so that the others are given its partitions."""
    gm.cancel(session_key(group.group_id, member.member_id))
    gm.cancel(revocation_key(group.group_id, member.member_id))
    rest = [m for m in group.members.values() if m.member_id != member.member_id]
    metadata_hash = metadata_hash_of(subscribed_topics(gm, rest))
    return [
        *records.member_tombstones(group.group_id, member.member_id),
        records.group_epoch(group.group_id, group.group_epoch + 1, metadata_hash),
    ]


def leave(
    gm: GroupManager, call: Call, req: ConsumerGroupHeartbeatRequest
) -> tuple[list[Record], ConsumerGroupHeartbeatResponse]:
    group_id, member_id = req.group_id, req.member_id
    group = gm.consumer_groups.get(group_id)
    if group is None:
        raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
    response = ConsumerGroupHeartbeatResponse(member_id=member_id, member_epoch=req.member_epoch)
    if req.instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {group_id}.",
            )
    else:
        static = group.static_member(req.instance_id)
        if static is None:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown."
            )
        if static.member_id != member_id:
            raise HeartbeatError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {req.instance_id} was fenced by "
                f"member {static.member_id}.",
            )
        member = static
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # The instance will be back: it keeps its place and partitions until its session
            # times out; what it was revoking is free now.
            gm.cancel(revocation_key(group_id, member_id))
            current = CurrentAssignment(
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                previous_member_epoch=member.current.member_epoch,
                state=member.current.state,
                assigned=member.current.assigned,
            )
            return [records.current_assignment(group_id, member_id, current)], response
    gm.ctx.event(
        call.result,
        call.now_ms,
        "member_left",
        group_id,
        member_id=member_id,
        members=len(group.members) - 1,
    )
    return fence(gm, group, member), response


def on_session_timer(
    gm: GroupManager, group_id: str, member_id: str, now_ms: int, result: Result
) -> None:
    group = gm.consumer_groups.get(group_id)
    member = group.members.get(member_id) if group is not None else None
    if group is None or member is None:
        return
    deadline = columns.session_deadline(gm, group_id, member_id)
    if deadline is not None and deadline > now_ms:
        gm.schedule(session_key(group_id, member_id), deadline)
        return
    gm.ctx.event(
        result, now_ms, "member_expired", group_id, member_id=member_id, reason="session timeout"
    )
    commit(gm, result, now_ms, fence(gm, group, member))


def on_revocation_timer(
    gm: GroupManager, group_id: str, member_id: str, now_ms: int, result: Result
) -> None:
    group = gm.consumer_groups.get(group_id)
    member = group.members.get(member_id) if group is not None else None
    if group is None or member is None:
        return
    current = member.current
    if current.state is not MemberState.UNREVOKED_PARTITIONS or (
        group.revoking_at.get(member_id) != current.member_epoch
    ):
        return
    gm.ctx.event(
        result,
        now_ms,
        "member_removed",
        group_id,
        member_id=member_id,
        reason="did not revoke its partitions within the rebalance timeout",
    )
    commit(gm, result, now_ms, fence(gm, group, member))


def remove_empty_group(
    gm: GroupManager, group: ConsumerGroup, has_offsets: bool, now_ms: int, result: Result
) -> None:
    """An Empty consumer group with no offsets left is deleted (Kafka's maybeDeleteGroup)."""
    if group.members or has_offsets:
        return
    commit(gm, result, now_ms, records.group_tombstones(group.group_id))
