"""JoinGroup: Kafka's handleJoinGroup with doNewMemberJoinGroup and doCurrentMemberJoinGroup.

KIP-394 pending members (v4+: a new member is handed an id and comes back with it), KIP-345
static members (v5+: a known instance id replaces its old member, without a rebalance when
the group is Stable and the protocol does not change) and KIP-814 SkipAssignment (v9+).

A JoinGroup superseded by another from the same member is answered REBALANCE_IN_PROGRESS:
on a shared connection it would otherwise never be answered (Kafka mutes a connection while
its JoinGroup waits, so it never sees two).
"""

from __future__ import annotations

from fastcoord.core.classic.leave import remove_member_and_update_group
from fastcoord.core.classic.rebalance import (
    maybe_prepare_rebalance,
    prepare_rebalance,
    try_complete_join,
)
from fastcoord.core.classic.records import group_metadata_record
from fastcoord.core.classic.responses import (
    Protocols,
    answer_join,
    answer_sync,
    join_response,
    member_list,
    sync_response,
)
from fastcoord.core.classic.session import schedule_session, validate_current_member
from fastcoord.core.group import NEW_MEMBER_JOIN_TIMEOUT_MS, Group, Member
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.result import Call, Result
from fastcoord.core.state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import JoinGroupRequest


def join_group(gm: GroupManager, call: Call, req: JoinGroupRequest) -> None:
    version, now_ms, result = call.version, call.now_ms, call.result
    error = gm.group_status_error(req.group_id, req)
    if error is not None:
        call.respond(join_response(version, error, req.member_id))
        return
    config = gm.config
    if not (
        config.group_min_session_timeout_ms
        <= req.session_timeout_ms
        <= config.group_max_session_timeout_ms
    ):
        call.respond(join_response(version, ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id))
        return
    if req.group_id in gm.consumer_groups:
        # A consumer group has no room for classic members here (Kafka 4 can mix them).
        call.respond(join_response(version, ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
        return
    is_unknown = req.member_id == ""
    group = gm.groups.get(req.group_id)
    if group is None:
        if not is_unknown:
            call.respond(join_response(version, ErrorCode.UNKNOWN_MEMBER_ID, req.member_id))
            return
        group = gm.get_or_create_group(req.group_id, now_ms)
    join = _Join(gm, call, req)
    if not _accept_joining_member(gm, group, req.member_id):
        member = group.members.get(req.member_id)
        if member is not None:
            remove_member_and_update_group(gm, group, member, now_ms, result, "group is full")
        call.respond(join_response(version, ErrorCode.GROUP_MAX_SIZE_REACHED))
    elif is_unknown:
        _new_member_join(join, group)
    else:
        _current_member_join(join, group)
    if group.is_(PREPARING_REBALANCE):
        try_complete_join(gm, group, now_ms, result)


class _Join:
    """One JoinGroup in flight: the call, the request, and what is derived from it."""

    __slots__ = ("call", "gm", "protocols", "rebalance_timeout_ms", "req")

    def __init__(self, gm: GroupManager, call: Call, req: JoinGroupRequest) -> None:
        self.gm = gm
        self.call = call
        self.req = req
        self.protocols: Protocols = [(p.name, p.metadata) for p in req.protocols]
        # JoinGroup v0 has no rebalance timeout: the session timeout serves as both.
        self.rebalance_timeout_ms = (
            req.rebalance_timeout_ms if call.version >= 1 else req.session_timeout_ms
        )

    def respond(self, error: ErrorCode, member_id: str = "") -> None:
        self.call.respond(join_response(self.call.version, error, member_id))

    def update(self, group: Group, member: Member) -> None:
        """Take the member's protocols and timeouts from this request; it now waits in it."""
        group.update_member(
            member,
            self.protocols,
            self.rebalance_timeout_ms,
            self.req.session_timeout_ms,
            self.call.handle,
            self.call.version,
        )


def _accept_joining_member(gm: GroupManager, group: Group, member_id: str) -> bool:
    max_size = gm.config.group_max_size
    if group.is_(EMPTY) or group.is_(DEAD):
        return True
    if group.is_(PREPARING_REBALANCE):
        member = group.members.get(member_id)
        return (member is not None and member.awaiting_join is not None) or (
            group.awaiting_join_count < max_size
        )
    return group.has(member_id) or len(group.members) < max_size


def _new_member_join(join: _Join, group: Group) -> None:
    req = join.req
    if group.is_(DEAD):
        join.respond(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return
    if not group.supports_protocols(req.protocol_type, join.protocols):
        join.respond(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        return
    instance_id = req.group_instance_id if join.call.version >= 5 else None
    new_id = join.gm.new_member_id(instance_id if instance_id is not None else join.call.client_id)
    if instance_id is not None:
        old_id = group.current_static_member_id(instance_id)
        if old_id is None:
            _add_member_and_rebalance(join, group, new_id, instance_id)
        else:
            _update_static_member_and_rebalance(join, group, instance_id, old_id, new_id)
    elif join.call.version >= 4:
        # KIP-394: hand out a member id and wait for the member to come back with it; a
        # member that never does expires after its session timeout without holding the
        # rebalance open for longer.
        group.pending_members.add(new_id)
        join.gm.schedule(
            ("pending", group.group_id, new_id), join.call.now_ms + req.session_timeout_ms
        )
        join.respond(ErrorCode.MEMBER_ID_REQUIRED, new_id)
    else:
        _add_member_and_rebalance(join, group, new_id, None)


def _current_member_join(join: _Join, group: Group) -> None:
    req = join.req
    member_id = req.member_id
    instance_id = req.group_instance_id if join.call.version >= 5 else None
    if group.is_(DEAD):
        join.respond(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        return
    if not group.supports_protocols(req.protocol_type, join.protocols):
        join.respond(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        return
    if member_id in group.pending_members:
        if instance_id is not None:
            # Pending members are dynamic by construction; a static id here is a client
            # mixing two identities. Kafka throws; answer as for an unknown member.
            join.respond(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            return
        _add_member_and_rebalance(join, group, member_id, None)
        return
    error = validate_current_member(group, member_id, instance_id)
    if error is not None:
        join.respond(error, member_id)
        return
    member = group.get(member_id)
    if group.is_(PREPARING_REBALANCE):
        _update_member_and_rebalance(join, group, member, "member rejoined during rebalance")
    elif group.is_(COMPLETING_REBALANCE):
        if member.matches(join.protocols):
            # The member lost the JoinGroup response of this generation: send it again.
            _respond_current_generation(join, group, member_id, with_members=True)
        else:
            _update_member_and_rebalance(join, group, member, "member metadata changed")
    elif group.is_(STABLE):
        if group.is_leader(member_id):
            # A leader's JoinGroup always rebalances: it may have seen a change (new
            # partitions, say) that the member metadata does not show.
            _update_member_and_rebalance(join, group, member, "leader rejoined")
        elif not member.matches(join.protocols):
            _update_member_and_rebalance(join, group, member, "member metadata changed")
        else:
            _respond_current_generation(join, group, member_id, with_members=False)
    else:
        join.respond(ErrorCode.UNKNOWN_MEMBER_ID, member_id)


def _respond_current_generation(
    join: _Join, group: Group, member_id: str, with_members: bool
) -> None:
    members = member_list(group) if with_members and group.is_leader(member_id) else []
    join.call.result.respond(
        join.call.handle,
        join_response(join.call.version, ErrorCode.NONE, member_id, group, members),
    )


def _supersede_waiting_join(join: _Join, group: Group, member: Member) -> None:
    if member.awaiting_join is not None:
        answer_join(
            join.call.result,
            group,
            member,
            join_response(
                member.awaiting_join_version, ErrorCode.REBALANCE_IN_PROGRESS, member.member_id
            ),
        )


def _add_member_and_rebalance(
    join: _Join, group: Group, member_id: str, instance_id: str | None
) -> None:
    gm, req, now_ms = join.gm, join.req, join.call.now_ms
    member = Member(
        group,
        member_id,
        instance_id,
        join.call.client_id,
        join.call.client_host,
        join.rebalance_timeout_ms,
        req.session_timeout_ms,
        req.protocol_type,
        join.protocols,
    )
    member.is_new = True
    if group.is_(PREPARING_REBALANCE) and group.generation_id == 0:
        group.new_member_added = True
    if member_id in group.pending_members:
        group.pending_members.discard(member_id)
        gm.cancel(("pending", group.group_id, member_id))
    group.add(member, join.call.handle, join.call.version)
    # A new member cannot heartbeat before its first JoinGroup response, so its session
    # timeout does not apply yet; if it never completes the join it goes after 5 minutes.
    schedule_session(gm, group, member, now_ms, NEW_MEMBER_JOIN_TIMEOUT_MS)
    gm.event(
        join.call.result,
        now_ms,
        "member_joined",
        group,
        member_id=member_id,
        members=len(group.members),
    )
    maybe_prepare_rebalance(gm, group, now_ms, join.call.result, f"new member {member_id} joined")


def _update_member_and_rebalance(join: _Join, group: Group, member: Member, reason: str) -> None:
    _supersede_waiting_join(join, group, member)
    join.update(group, member)
    maybe_prepare_rebalance(join.gm, group, join.call.now_ms, join.call.result, reason)


def _update_static_member_and_rebalance(
    join: _Join, group: Group, instance_id: str, old_id: str, new_id: str
) -> None:
    gm, result, now_ms = join.gm, join.call.result, join.call.now_ms
    current_leader = group.leader_id
    member = group.get(old_id)
    # Fence the old incarnation at once if it is waiting for an answer.
    answer_join(
        result,
        group,
        member,
        join_response(member.awaiting_join_version, ErrorCode.FENCED_INSTANCE_ID, old_id),
    )
    answer_sync(result, member, sync_response(ErrorCode.FENCED_INSTANCE_ID))
    gm.cancel(("heartbeat", group.group_id, old_id))
    old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
    group.replace_static_member(instance_id, old_id, new_id)
    schedule_session(gm, group, member, now_ms)
    join.update(group, member)
    gm.event(
        result,
        now_ms,
        "member_joined",
        group,
        member_id=new_id,
        members=len(group.members),
        reason=f"static member {instance_id} replaced {old_id}",
    )
    if group.is_(STABLE):
        if group.protocol_name != group.select_protocol():
            maybe_prepare_rebalance(
                gm, group, now_ms, result, f"static member {instance_id} changed the protocol"
            )
            return
        # Same protocol: no rebalance. Persist the new member id, then answer.
        version = join.call.version
        generation = group.generation_id

        def stored(error: ErrorCode, now_ms: int, result: Result) -> None:
            if not group.has(new_id) or group.generation_id != generation:
                return
            if error != ErrorCode.NONE:
                # Answer first: reverting the member clears its waiting JoinGroup.
                answer_join(result, group, member, join_response(version, error))
                group.replace_static_member(instance_id, new_id, old_id)
                group.update_member(member, *old, None, 0)
                gm.cancel(("heartbeat", group.group_id, new_id))
                schedule_session(gm, group, member, now_ms)
                return
            is_leader = group.is_leader(new_id)
            if version >= 9:
                # KIP-814: the static leader gets the members but must not reassign.
                members = member_list(group) if is_leader else []
                response = join_response(
                    version, ErrorCode.NONE, new_id, group, members, skip_assignment=is_leader
                )
            else:
                # Older leaders would run a trivial assignment that a Stable group never
                # propagates; naming the old leader id makes them act as followers.
                response = join_response(
                    version, ErrorCode.NONE, new_id, group, leader=current_leader
                )
            answer_join(result, group, member, response)

        gm.append(result, [group_metadata_record(group, now_ms)], stored)
    elif group.is_(COMPLETING_REBALANCE):
        # The old member id may already be in the leader's assignment: start over.
        prepare_rebalance(gm, group, now_ms, result, f"static member {instance_id} rejoined")
