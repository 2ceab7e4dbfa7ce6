"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their delayed operations.

Follows Kafka's GroupCoordinator (newer Kafka where docs/kafka-compatibility.md says so):
handleJoinGroup with doNewMemberJoinGroup / doCurrentMemberJoinGroup, KIP-394 pending
members, KIP-345 static members and KIP-814 SkipAssignment; prepareRebalance with
InitialDelayedJoin or DelayedJoin; onCompleteJoin; doSyncGroup with storeGroup; the pending
sync timeout; heartbeat expiry (onMemberFailure); LeaveGroup by member id or instance id.

Two departures, both so that every request gets an answer on a shared connection (Kafka
mutes a connection while its JoinGroup waits, so it never sees them): a JoinGroup or
SyncGroup superseded by another from the same member is answered REBALANCE_IN_PROGRESS, and
a removed member's waiting SyncGroup is answered UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from fastcoord.core.group import NEW_MEMBER_JOIN_TIMEOUT_MS, Group, Member
from fastcoord.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    Record,
)
from fastcoord.core.result import Call, Result
from fastcoord.core.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
)
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

if TYPE_CHECKING:
    from fastcoord.core.coordinator import Coordinator

Protocols = list[tuple[str, bytes]]


# -- responses ----------------------------------------------------------------------------


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


def validate_current_member(
    group: Group, member_id: str, instance_id: str | None
) -> ErrorCode | None:
    if group.is_static_member_fenced(instance_id, member_id):
        return ErrorCode.FENCED_INSTANCE_ID
    if not group.has(member_id):
        return ErrorCode.UNKNOWN_MEMBER_ID
    return None


# -- JoinGroup ----------------------------------------------------------------------------


def join_group(co: Coordinator, call: Call, req: JoinGroupRequest) -> None:
    version, now_ms, result = call.version, call.now_ms, call.result
    error = co.group_status_error(req.group_id, req)
    if error is not None:
        call.respond(join_response(version, error, req.member_id))
        return
    config = co.config
    if not (
        config.group_min_session_timeout_ms
        <= req.session_timeout_ms
        <= config.group_max_session_timeout_ms
    ):
        call.respond(join_response(version, ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id))
        return
    is_unknown = req.member_id == ""
    group = co.groups.get(req.group_id)
    if group is None:
        if not is_unknown:
            call.respond(join_response(version, ErrorCode.UNKNOWN_MEMBER_ID, req.member_id))
            return
        group = co.get_or_create_group(req.group_id, now_ms)
    join = _Join(co, call, req)
    if not _accept_joining_member(co, group, req.member_id):
        member = group.members.get(req.member_id)
        if member is not None:
            remove_member_and_update_group(co, group, member, now_ms, result, "group is full")
        call.respond(join_response(version, ErrorCode.GROUP_MAX_SIZE_REACHED))
    elif is_unknown:
        _new_member_join(join, group)
    else:
        _current_member_join(join, group)
    if group.is_(PREPARING_REBALANCE):
        try_complete_join(co, group, now_ms, result)


class _Join:
    """One JoinGroup in flight: the call, the request, and what is derived from it."""

    __slots__ = ("call", "co", "protocols", "rebalance_timeout_ms", "req")

    def __init__(self, co: Coordinator, call: Call, req: JoinGroupRequest) -> None:
        self.co = co
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


def _accept_joining_member(co: Coordinator, group: Group, member_id: str) -> bool:
    max_size = co.config.group_max_size
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
    new_id = join.co.new_member_id(instance_id if instance_id is not None else join.call.client_id)
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
        join.co.schedule(
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
    co, req, now_ms = join.co, join.req, join.call.now_ms
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
        co.cancel(("pending", group.group_id, member_id))
    group.add(member, join.call.handle, join.call.version)
    # A new member cannot heartbeat before its first JoinGroup response, so its session
    # timeout does not apply yet; if it never completes the join it goes after 5 minutes.
    schedule_session(co, group, member, now_ms, NEW_MEMBER_JOIN_TIMEOUT_MS)
    co.event(
        join.call.result,
        now_ms,
        "member_joined",
        group,
        member_id=member_id,
        members=len(group.members),
    )
    maybe_prepare_rebalance(co, group, now_ms, join.call.result, f"new member {member_id} joined")


def _update_member_and_rebalance(join: _Join, group: Group, member: Member, reason: str) -> None:
    _supersede_waiting_join(join, group, member)
    join.update(group, member)
    maybe_prepare_rebalance(join.co, group, join.call.now_ms, join.call.result, reason)


def _update_static_member_and_rebalance(
    join: _Join, group: Group, instance_id: str, old_id: str, new_id: str
) -> None:
    co, result, now_ms = join.co, join.call.result, join.call.now_ms
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
    co.cancel(("heartbeat", group.group_id, old_id))
    old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
    group.replace_static_member(instance_id, old_id, new_id)
    schedule_session(co, group, member, now_ms)
    join.update(group, member)
    co.event(
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
                co, group, now_ms, result, f"static member {instance_id} changed the protocol"
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
                co.cancel(("heartbeat", group.group_id, new_id))
                schedule_session(co, group, member, now_ms)
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

        co.append(result, [group_metadata_record(group, now_ms)], stored)
    elif group.is_(COMPLETING_REBALANCE):
        # The old member id may already be in the leader's assignment: start over.
        prepare_rebalance(co, group, now_ms, result, f"static member {instance_id} rejoined")
    # PreparingRebalance: the caller tries to complete the join.


# -- rebalance ----------------------------------------------------------------------------


def maybe_prepare_rebalance(
    co: Coordinator, group: Group, now_ms: int, result: Result, reason: str
) -> None:
    if group.is_(STABLE) or group.is_(COMPLETING_REBALANCE) or group.is_(EMPTY):
        prepare_rebalance(co, group, now_ms, result, reason)


def prepare_rebalance(
    co: Coordinator, group: Group, now_ms: int, result: Result, reason: str
) -> None:
    if group.is_(COMPLETING_REBALANCE):
        reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS, result)
    co.cancel(("sync", group.group_id, group.generation_id))
    key = ("join", group.group_id)
    if group.is_(EMPTY):
        # KIP-134: the first rebalance waits for more members, extended while they come.
        delay = co.config.group_initial_rebalance_delay_ms
        group.initial_join = (delay, max(group.rebalance_timeout_ms() - delay, 0))
        co.schedule(key, now_ms + delay)
    else:
        group.initial_join = None
        co.schedule(key, now_ms + group.rebalance_timeout_ms())
    old_generation = group.generation_id
    group.transition_to(PREPARING_REBALANCE, now_ms, reason)
    group.rebalance_started_ms = now_ms
    co.event(
        result,
        now_ms,
        "rebalance_started",
        group,
        generation=old_generation,
        members=len(group.members),
        reason=reason,
    )
    try_complete_join(co, group, now_ms, result)


def try_complete_join(co: Coordinator, group: Group, now_ms: int, result: Result) -> None:
    """DelayedJoin.tryComplete: done as soon as every known member has rejoined.

    The initial delayed join never completes early (InitialDelayedJoin.tryComplete).
    """
    if (
        group.is_(PREPARING_REBALANCE)
        and group.initial_join is None
        and group.has_all_members_joined()
    ):
        co.cancel(("join", group.group_id))
        on_complete_join(co, group, now_ms, result)


def on_join_timer(co: Coordinator, group_id: str, now_ms: int, result: Result) -> None:
    group = co.groups.get(group_id)
    if group is None or not group.is_(PREPARING_REBALANCE):
        return
    if group.initial_join is not None:
        delay, remaining = group.initial_join
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            next_delay = min(co.config.group_initial_rebalance_delay_ms, remaining)
            group.initial_join = (next_delay, max(remaining - delay, 0))
            co.schedule(("join", group_id), now_ms + next_delay)
            return
    on_complete_join(co, group, now_ms, result)


def on_complete_join(co: Coordinator, group: Group, now_ms: int, result: Result) -> None:
    group.initial_join = None
    for member in group.not_yet_rejoined():
        if not member.is_static:
            co.event(
                result,
                now_ms,
                "member_removed",
                group,
                member_id=member.member_id,
                reason="did not rejoin within the rebalance timeout",
            )
            _drop_member(co, group, member, result)
    if group.is_(DEAD):
        return
    if group.members and not group.maybe_elect_new_joined_leader():
        # Nobody rejoined: wait another rebalance timeout while sessions expire.
        co.schedule(("join", group.group_id), now_ms + group.rebalance_timeout_ms())
        return
    group.generation_id += 1
    group.pending_sync_members.clear()
    if not group.members:
        group.protocol_name = None
        group.leader_id = None
        group.transition_to(EMPTY, now_ms, "rebalance completed with no members")
        _rebalance_completed(co, group, now_ms, result)
        co.append(result, [group_metadata_record(group, now_ms)], _ignore_store_error)
        return
    group.protocol_name = group.select_protocol()
    group.transition_to(COMPLETING_REBALANCE, now_ms, "every member joined")
    _rebalance_completed(co, group, now_ms, result)
    members = member_list(group)
    for member in group.members.values():
        leader = group.is_leader(member.member_id)
        answer_join(
            result,
            group,
            member,
            join_response(
                member.awaiting_join_version,
                ErrorCode.NONE,
                member.member_id,
                group,
                members if leader else [],
            ),
        )
        schedule_session(co, group, member, now_ms)
        member.is_new = False
        group.pending_sync_members.add(member.member_id)
    co.schedule(
        ("sync", group.group_id, group.generation_id), now_ms + group.rebalance_timeout_ms()
    )


def _rebalance_completed(co: Coordinator, group: Group, now_ms: int, result: Result) -> None:
    co.event(
        result,
        now_ms,
        "rebalance_completed",
        group,
        generation=group.generation_id,
        members=len(group.members),
        duration_ms=now_ms - group.rebalance_started_ms,
    )


def _ignore_store_error(error: ErrorCode, now_ms: int, result: Result) -> None:
    # Kafka: if the empty group's metadata is lost, the previous generation comes back at
    # load and times out, which is safe for a group with no active members.
    return


# -- SyncGroup ----------------------------------------------------------------------------


def sync_group(co: Coordinator, call: Call, req: SyncGroupRequest) -> None:
    handle, version, now_ms, result = call.handle, call.version, call.now_ms, call.result
    error = co.group_status_error(req.group_id, req)
    if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        # The rebalance's state is lost with the load: make the member rejoin.
        error = ErrorCode.REBALANCE_IN_PROGRESS
    group = co.groups.get(req.group_id) if error is None else None
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
            _store_assignment(co, group, req, now_ms, result)
    else:  # Stable
        group.pending_sync_members.discard(req.member_id)
        result.respond(handle, sync_response(ErrorCode.NONE, group, member.assignment))
        schedule_session(co, group, member, now_ms)


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
    co: Coordinator, group: Group, req: SyncGroupRequest, now_ms: int, result: Result
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
                co, group, now_ms, result, f"storing the assignment failed: {error.name}"
            )
            return
        co.replay(record, now_ms)
        propagate_assignment(co, group, ErrorCode.NONE, now_ms, result)
        group.transition_to(STABLE, now_ms, "leader's assignment stored")
        co.event(
            result,
            now_ms,
            "sync_completed",
            group,
            generation=generation,
            members=len(group.members),
            duration_ms=now_ms - group.rebalance_started_ms,
        )

    co.append(result, [record], stored)


def reset_and_propagate_assignment_error(group: Group, error: ErrorCode, result: Result) -> None:
    for member in group.members.values():
        member.assignment = b""
        answer_sync(result, member, sync_response(error))


def propagate_assignment(
    co: Coordinator, group: Group, error: ErrorCode, now_ms: int, result: Result
) -> None:
    for member in group.members.values():
        if member.awaiting_sync is not None:
            answer_sync(result, member, sync_response(error, group, member.assignment))
            if error == ErrorCode.NONE:
                schedule_session(co, group, member, now_ms)


def unload_group(group: Group, result: Result) -> None:
    """Kafka's onGroupUnloaded, at shutdown: whoever waits for a JoinGroup or SyncGroup
    answer is told NOT_COORDINATOR, so that it finds the coordinator again rather than
    waiting out its request timeout."""
    error = ErrorCode.NOT_COORDINATOR
    for member in group.members.values():
        version = member.awaiting_join_version
        answer_join(result, group, member, join_response(version, error, member.member_id))
        answer_sync(result, member, sync_response(error))


def on_sync_timer(
    co: Coordinator, group_id: str, generation: int, now_ms: int, result: Result
) -> None:
    """Members that have not sent SyncGroup within the rebalance timeout are removed."""
    group = co.groups.get(group_id)
    if group is None or group.generation_id != generation:
        return
    if not (group.is_(COMPLETING_REBALANCE) or group.is_(STABLE)):
        return
    if not group.pending_sync_members:
        return
    for member_id in sorted(group.pending_sync_members):
        member = group.members.get(member_id)
        if member is not None:
            co.event(
                result,
                now_ms,
                "member_removed",
                group,
                member_id=member_id,
                reason="did not send SyncGroup within the rebalance timeout",
            )
            _drop_member(co, group, member, result)
    prepare_rebalance(co, group, now_ms, result, "members did not sync")


# -- Heartbeat ----------------------------------------------------------------------------


def heartbeat(co: Coordinator, call: Call, req: HeartbeatRequest) -> None:
    handle, version, now_ms, result = call.handle, call.version, call.now_ms, call.result
    error = co.heartbeat(
        req.group_id, req.member_id, req.generation_id, req.group_instance_id, version, now_ms
    )
    result.respond(handle, HeartbeatResponse(error_code=error))


_HEARTBEAT = HeartbeatRequest()


def heartbeat_error(
    co: Coordinator,
    group_id: str,
    member_id: str,
    generation: int,
    group_instance_id: str | None,
    version: int,
    now_ms: int,
) -> int:
    """The checks in GroupCoordinator's order; a heartbeat that passes moves the deadline."""
    error = co.group_status_error(group_id, _HEARTBEAT)
    if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        return ErrorCode.NONE  # the group is still loading: answer blindly, as Kafka does
    if error is not None:
        return error
    group = co.groups.get(group_id)
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


def schedule_session(
    co: Coordinator, group: Group, member: Member, now_ms: int, timeout_ms: int | None = None
) -> None:
    """completeAndScheduleNextHeartbeatExpiration: the session starts again from now."""
    deadline = now_ms + (member.session_timeout_ms if timeout_ms is None else timeout_ms)
    member.session_deadline_ms = deadline
    key = ("heartbeat", group.group_id, member.member_id)
    armed = co.wheel.deadline(key)
    if armed is None or armed > deadline:
        co.schedule(key, deadline)


def on_heartbeat_timer(
    co: Coordinator, group_id: str, member_id: str, now_ms: int, result: Result
) -> None:
    group = co.groups.get(group_id)
    member = group.members.get(member_id) if group is not None else None
    if group is None or member is None:
        return
    if member.session_deadline_ms > now_ms:
        # Heartbeats moved the deadline since the timer was armed.
        co.schedule(("heartbeat", group_id, member_id), member.session_deadline_ms)
        return
    if co.table.satisfied(member.slot):
        # Members waiting for a rebalance satisfy expected heartbeats (hasSatisfiedHeartbeat).
        schedule_session(co, group, member, now_ms)
        return
    co.event(result, now_ms, "member_expired", group, member_id=member_id, reason="session timeout")
    remove_member_and_update_group(co, group, member, now_ms, result, "session timeout")


def on_pending_member_timer(
    co: Coordinator, group_id: str, member_id: str, now_ms: int, result: Result
) -> None:
    group = co.groups.get(group_id)
    if group is None or member_id not in group.pending_members:
        return
    group.pending_members.discard(member_id)
    if group.is_(PREPARING_REBALANCE):
        try_complete_join(co, group, now_ms, result)


# -- removal ------------------------------------------------------------------------------


def _drop_member(co: Coordinator, group: Group, member: Member, result: Result) -> None:
    """Remove a member and answer whatever it was waiting for; no rebalance decision."""
    answer_join(
        result,
        group,
        member,
        join_response(member.awaiting_join_version, ErrorCode.UNKNOWN_MEMBER_ID),
    )
    answer_sync(result, member, sync_response(ErrorCode.UNKNOWN_MEMBER_ID))
    co.cancel(("heartbeat", group.group_id, member.member_id))
    group.remove(member.member_id)


def remove_member_and_update_group(
    co: Coordinator, group: Group, member: Member, now_ms: int, result: Result, reason: str
) -> None:
    """onMemberFailure / removeMemberAndUpdateGroup."""
    _drop_member(co, group, member, result)
    if group.is_(STABLE) or group.is_(COMPLETING_REBALANCE):
        maybe_prepare_rebalance(co, group, now_ms, result, f"{member.member_id}: {reason}")
    elif group.is_(PREPARING_REBALANCE):
        try_complete_join(co, group, now_ms, result)


# -- LeaveGroup ---------------------------------------------------------------------------


def leave_group(co: Coordinator, call: Call, req: LeaveGroupRequest) -> None:
    handle, version, now_ms, result = call.handle, call.version, call.now_ms, call.result
    # v0-2 name one member; v3+ a batch, by member id or by group instance id.
    leaving = (
        [(m.member_id, m.group_instance_id) for m in req.members]
        if version >= 3
        else [(req.member_id, None)]
    )
    error = co.group_status_error(req.group_id, req)
    group = co.groups.get(req.group_id) if error is None else None
    errors: list[ErrorCode] = []
    if error is None and group is not None and group.is_(DEAD):
        error = ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error is None:
        for member_id, instance_id in leaving:
            errors.append(
                _leave_one(co, group, member_id, instance_id, now_ms, result)
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
    co: Coordinator,
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
        co.cancel(("pending", group.group_id, member_id))
        if group.is_(PREPARING_REBALANCE):
            try_complete_join(co, group, now_ms, result)
        return ErrorCode.NONE
    else:
        error = validate_current_member(group, member_id, instance_id)
        if error is not None:
            return error
    member = group.get(member_id)
    co.event(
        result, now_ms, "member_left", group, member_id=member_id, members=len(group.members) - 1
    )
    remove_member_and_update_group(co, group, member, now_ms, result, "left the group")
    return ErrorCode.NONE


# -- durable group metadata ---------------------------------------------------------------


def group_metadata_record(
    group: Group, now_ms: int, assignment: dict[str, bytes] | None = None
) -> Record:
    members = group.member_values()
    if assignment is not None:
        members = tuple(_with_assignment(m, assignment.get(m.member_id, b"")) for m in members)
    return Record(
        GroupMetadataKey(group.group_id),
        GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=now_ms,
            members=members,
        ),
    )


def _with_assignment(m: MemberMetadataValue, assignment: bytes) -> MemberMetadataValue:
    return msgspec.structs.replace(m, assignment=assignment)


def replay_group(
    co: Coordinator, group_id: str, value: GroupMetadataValue | None, now_ms: int, loading: bool
) -> None:
    """Apply a group metadata record (or tombstone).

    Live, the record was produced from this very group: only what it makes durable (the
    assignment) needs applying, and the rest is checked to agree. At load, the group is
    rebuilt from it: Stable with its members (their sessions start now), or Empty.
    """
    group = co.groups.get(group_id)
    if value is None:
        if group is not None and group.members and loading:
            # At load the latest record of a key is what counts, as in Kafka's loading (and
            # as compaction, which keeps only that record, assumes): the group goes.
            for member_id in list(group.members):
                co.cancel(("heartbeat", group_id, member_id))
                group.remove(member_id)
            group.state = EMPTY
        if group is not None and not group.members:
            if group.offsets:
                # What is left is a group of offsets alone, as Kafka loads one.
                group.generation_id, group.protocol_name, group.leader_id = 0, None, None
                group.protocol_type = None
            else:
                del co.groups[group_id]
                group.release()
        return
    if not loading and group is not None:
        for m in value.members:
            member = group.members.get(m.member_id)
            if member is not None:
                member.assignment = m.assignment
        return
    if group is None:
        group = co.groups[group_id] = Group(group_id, value.current_state_timestamp, co.table)
    for member in list(group.members.values()):
        co.cancel(("heartbeat", group_id, member.member_id))
        group.remove(member.member_id)
    group.protocol_type = value.protocol_type or None
    group.generation_id = value.generation
    group.protocol_name = value.protocol
    group.state_timestamp_ms = value.current_state_timestamp
    group.state = STABLE if value.members else EMPTY
    for m in value.members:
        member = Member(
            group,
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            value.protocol_type,
            [(value.protocol or "", m.subscription)],
        )
        member.assignment = m.assignment
        group.add(member, None, 0)
        schedule_session(co, group, member, now_ms)
    group.leader_id = value.leader
