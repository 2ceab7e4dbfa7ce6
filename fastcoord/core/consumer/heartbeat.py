"""ConsumerGroupHeartbeat: Kafka's GroupMetadataManager.consumerGroupHeartbeat.

One request joins (member epoch 0), stays (the member's epoch), or leaves (-1; -2 for a
static member that will be back). A heartbeat that is not a leave does three things, as
Kafka's does: it updates the member (a new subscription bumps the group epoch); if the
group epoch is ahead of the target assignment's, the server-side assignor computes a new
target; and the member takes one step towards its target (reconciliation.py), revoking
before anything is given to someone else.

The heartbeat decides and writes records; the records are replayed into the group at
once (records.py), and the answer leaves once they, and every write before them, are
durable. Sessions: a member that stops heartbeating for the session timeout is fenced
(removed, its partitions free); a member told to revoke partitions that has not within
its rebalance timeout is fenced too.
"""

from __future__ import annotations

import base64
import dataclasses
import re
import uuid
import zlib
from collections.abc import Iterable, Mapping

from fastcoord.core.consumer import columns, records
from fastcoord.core.consumer.assignment import Assignment
from fastcoord.core.consumer.assignors import ASSIGNORS, MemberSubscription, TopicMetadata
from fastcoord.core.consumer.columns import session_key
from fastcoord.core.consumer.group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
)
from fastcoord.core.consumer.reconciliation import (
    CurrentAssignment,
    FencedMemberEpochError,
    MemberState,
    check_member_epoch,
    reconcile,
)
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.offsets import storage_error
from fastcoord.core.records import GroupMetadataKey, Record
from fastcoord.core.result import Call, Result
from fastcoord.core.state import EMPTY
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseAssignment,
    ConsumerGroupHeartbeatResponseTopicPartitions,
)

# Kafka's CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION: from v1 the client names itself.
MEMBER_ID_REQUIRED_VERSION = 1


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def revocation_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("consumer_revocation", group_id, member_id)


def new_member_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): 22 characters of URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def error_response(error: HeartbeatError) -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(error_code=error.code, error_message=error.message)


# -- the request ----------------------------------------------------------------------------


def consumer_group_heartbeat(
    gm: GroupManager, call: Call, req: ConsumerGroupHeartbeatRequest
) -> None:
    status = gm.group_status_error(req.group_id, req)
    if status is not None:
        call.respond(ConsumerGroupHeartbeatResponse(error_code=status))
        return
    try:
        _validate(gm, req, call.version)
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            written, response = _leave(gm, call, req)
        else:
            written, response = _heartbeat(gm, call, req)
    except HeartbeatError as exc:
        call.respond(error_response(exc))
        return
    commit(gm, call.result, call.now_ms, written, call.handle, response, req.group_id)
    if response.member_epoch >= 0:
        _arm_timers(gm, req.group_id, response.member_id or "", call.now_ms)


def commit(
    gm: GroupManager,
    result: Result,
    now_ms: int,
    written: list[Record],
    handle: object = None,
    response: ConsumerGroupHeartbeatResponse | None = None,
    group_id: str | None = None,
) -> None:
    """Replay `written` into the groups now, ask for it to be made durable, and answer
    once it is. An answer that writes nothing still reflects its group's records: it waits
    for those not yet durable (an append of nothing completes after every append before
    it), and goes at once when there are none, which is the steady heartbeat's case."""
    unsettled = gm.unsettled_writes
    if not written and (group_id is None or group_id not in unsettled):
        if response is not None:
            result.respond(handle, response)
        return
    groups = {r.key.group for r in written}
    before = {g: _state(gm, g) for g in groups}
    for record in written:
        if isinstance(record.key, GroupMetadataKey):
            continue  # the Empty classic group it deletes has gone with the replay below
        gm.replay_consumer(record, now_ms)
    for g, state in before.items():
        _report(gm, result, now_ms, g, state)
    for g in groups:
        unsettled[g] = unsettled.get(g, 0) + 1
        _sync(gm, g)

    def stored(error: ErrorCode, now_ms: int, result: Result) -> None:
        for g in groups:
            left = unsettled[g] - 1
            if left:
                unsettled[g] = left
            else:
                del unsettled[g]
                _sync(gm, g)
        if response is None:
            return
        if error == ErrorCode.NONE:
            result.respond(handle, response)
        else:
            result.respond(handle, ConsumerGroupHeartbeatResponse(error_code=storage_error(error)))

    gm.append(result, written, stored)


def _sync(gm: GroupManager, group_id: str) -> None:
    group = gm.consumer_groups.get(group_id)
    if group is not None:
        columns.sync(gm, group)


def _state(gm: GroupManager, group_id: str) -> tuple[int, ConsumerGroupState | None]:
    group = gm.consumer_groups.get(group_id)
    return (0, None) if group is None else (group.group_epoch, group.state)


def _report(
    gm: GroupManager,
    result: Result,
    now_ms: int,
    group_id: str,
    before: tuple[int, ConsumerGroupState | None],
) -> None:
    """Events for the event log: a new group epoch starts a rebalance; reaching Stable
    completes the one started. Stable is reached without one too (a static member back
    from its -2 leave at the epoch it had, or a group loaded mid-rebalance): no event."""
    group = gm.consumer_groups.get(group_id)
    if group is None:
        return
    epoch, state = before
    if group.group_epoch > epoch:
        if group.rebalance_started_ms is None:
            group.rebalance_started_ms = now_ms
        gm.ctx.event(
            result,
            now_ms,
            "rebalance_started",
            group_id,
            generation=epoch,
            members=len(group.members),
            reason=f"group epoch {group.group_epoch}",
        )
    started = group.rebalance_started_ms
    if (
        group.state is ConsumerGroupState.STABLE
        and state is not ConsumerGroupState.STABLE
        and started is not None
    ):
        group.rebalance_started_ms = None
        gm.ctx.event(
            result,
            now_ms,
            "rebalance_completed",
            group_id,
            generation=group.group_epoch,
            members=len(group.members),
            duration_ms=now_ms - started,
        )


def _validate(gm: GroupManager, req: ConsumerGroupHeartbeatRequest, version: int) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
    epoch = req.member_epoch
    if version >= MEMBER_ID_REQUIRED_VERSION or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        _not_blank(req.member_id, "MemberId can't be empty.")
    _not_blank(req.group_id, "GroupId can't be empty.")
    _not_blank(req.instance_id, "InstanceId can't be empty.")
    _not_blank(req.rack_id, "RackId can't be empty.")
    if epoch == 0:
        if req.rebalance_timeout_ms == -1:
            _invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            _invalid("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            _invalid(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                "(re-)joining."
            )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            _invalid("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        _invalid("MemberEpoch is invalid.")
    assignors = gm.config.group_consumer_assignors
    if req.server_assignor is not None and req.server_assignor not in assignors:
        raise HeartbeatError(
            ErrorCode.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
            f"{', '.join(assignors)}.",
        )


def _not_blank(value: str | None, message: str) -> None:
    if value is not None and not value.strip():
        _invalid(message)


def _invalid(message: str) -> None:
    raise HeartbeatError(ErrorCode.INVALID_REQUEST, message)


def _owned(req: ConsumerGroupHeartbeatRequest) -> dict[uuid.UUID, frozenset[int]] | None:
    if req.topic_partitions is None:
        return None
    owned: dict[uuid.UUID, frozenset[int]] = {}
    for tp in req.topic_partitions:
        owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return owned


# -- joining and staying ----------------------------------------------------------------------


def _heartbeat(
    gm: GroupManager, call: Call, req: ConsumerGroupHeartbeatRequest
) -> tuple[list[Record], ConsumerGroupHeartbeatResponse]:
    group_id, epoch, now_ms = req.group_id, req.member_epoch, call.now_ms
    joining = epoch == 0
    written: list[Record] = []
    group = _group(gm, group_id, joining, now_ms, written)
    member_id = req.member_id
    if len(group.members) >= gm.config.group_consumer_max_size and (
        not member_id or member_id not in group.members
    ):
        raise HeartbeatError(
            ErrorCode.GROUP_MAX_SIZE_REACHED,
            "The consumer group has reached its maximum capacity of "
            f"{gm.config.group_consumer_max_size} members.",
        )
    if not member_id:
        member_id = new_member_id()
    owned = _owned(req)
    replaced: ConsumerMember | None = None
    if req.instance_id is None:
        member = _dynamic_member(group, member_id, epoch, owned, joining)
    else:
        member, replaced = _static_member(group, member_id, epoch, req.instance_id, owned, joining)
        if replaced is not None:
            written.extend(_replace(group, replaced, member))
            gm.cancel(session_key(group_id, replaced.member_id))
            gm.cancel(revocation_key(group_id, replaced.member_id))

    updated = _updated(member, req, call.client_id, call.client_host)

    # 1. The member: written if it changed; a new subscription starts a new group epoch.
    bump = group.group_epoch == 0
    known = member.member_id in group.members and replaced is None
    if not known or updated.metadata() != member.metadata():
        written.append(records.member_metadata(group_id, updated))
        if updated.subscribed_topic_names != member.subscribed_topic_names:
            bump = True
    if updated.subscribed_topic_regex != member.subscribed_topic_regex:
        if updated.subscribed_topic_regex:
            _check_regex(updated.subscribed_topic_regex)
        bump = True
    group_epoch = group.group_epoch
    refresh = bump or group.image_version != gm.topics.version()
    members = group.members
    if refresh or group_epoch > group.assignment_epoch:
        # The group as it will be: a copy, built only when the group's subscriptions or
        # assignment are looked at (a steady heartbeat looks at neither).
        members = dict(group.members)
        if replaced is not None:
            del members[replaced.member_id]
        members[updated.member_id] = updated
    if refresh:
        metadata_hash = _metadata_hash(subscribed_topics(gm, members.values()))
        if metadata_hash != group.metadata_hash:
            bump = True
        if bump:
            group_epoch += 1
            written.append(records.group_epoch(group_id, group_epoch, metadata_hash))

    # 2. The target assignment, when the group epoch is ahead of it.
    target: Assignment
    if group_epoch > group.assignment_epoch:
        targets = _assign(gm, group, members)
        for mid, target in targets.items():
            if target != group.target.get(mid, {}) or (replaced is not None and mid == member_id):
                written.append(records.target_member(group_id, mid, target))
        written.append(records.target_epoch(group_id, group_epoch))
        target_epoch, target = group_epoch, targets[updated.member_id]
    else:
        target_epoch = group.assignment_epoch
        target = group.target.get(
            replaced.member_id if replaced is not None else updated.member_id, {}
        )

    # 3. One step of the member towards its target.
    current = updated.current
    if not current.is_reconciled_to(target_epoch):
        try:
            current = reconcile(current, target_epoch, target, group.current_partition_epoch, owned)
        except FencedMemberEpochError as exc:
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, str(exc)) from None
        if current != updated.current or replaced is not None:
            written.append(records.current_assignment(group_id, updated.member_id, current))
    response = ConsumerGroupHeartbeatResponse(
        member_id=updated.member_id,
        member_epoch=current.member_epoch,
        heartbeat_interval_ms=gm.config.group_consumer_heartbeat_interval_ms,
    )
    full = joining or (
        req.rebalance_timeout_ms != -1
        and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
        and owned is not None
    )
    if full or current.assigned != member.current.assigned:
        response.assignment = _response_assignment(current.assigned)
    if not known and replaced is None:
        gm.ctx.event(
            call.result,
            now_ms,
            "member_joined",
            group_id,
            member_id=updated.member_id,
            members=len(group.members) + 1,
        )
    return written, response


def _updated(
    member: ConsumerMember, req: ConsumerGroupHeartbeatRequest, client_id: str, client_host: str
) -> ConsumerMember:
    """The member with what the request changes (a null field changes nothing): the member
    itself when nothing changes, as in a steady heartbeat."""
    if (
        req.instance_id is None
        and req.rack_id is None
        and req.rebalance_timeout_ms == -1
        and req.server_assignor is None
        and req.subscribed_topic_names is None
        and req.subscribed_topic_regex is None
        and client_id == member.client_id
        and client_host == member.client_host
    ):
        return member
    return dataclasses.replace(
        member,
        instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=(
            req.rebalance_timeout_ms
            if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms
        ),
        server_assignor=(
            req.server_assignor if req.server_assignor is not None else member.server_assignor
        ),
        subscribed_topic_names=(
            tuple(req.subscribed_topic_names)
            if req.subscribed_topic_names is not None
            else member.subscribed_topic_names
        ),
        subscribed_topic_regex=(
            req.subscribed_topic_regex
            if req.subscribed_topic_regex is not None
            else member.subscribed_topic_regex
        ),
        client_id=client_id,
        client_host=client_host,
    )


def _group(
    gm: GroupManager, group_id: str, joining: bool, now_ms: int, written: list[Record]
) -> ConsumerGroup:
    """Kafka's getOrMaybeCreateConsumerGroup: a new group is not in the groups until its
    records are replayed."""
    group = gm.consumer_groups.get(group_id)
    if group is not None:
        return group
    classic = gm.groups.get(group_id)
    if classic is None and not joining:
        raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
    if classic is not None:
        if not (
            joining and classic.is_(EMPTY) and not classic.members and not classic.pending_members
        ):
            raise HeartbeatError(
                ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group"
            )
        # An Empty classic group becomes a consumer group: its metadata goes (its offsets
        # stay), as Kafka's maybeDeleteEmptyClassicGroup does.
        written.append(Record(GroupMetadataKey(group_id), None))
    return ConsumerGroup(group_id, now_ms)


def _dynamic_member(
    group: ConsumerGroup,
    member_id: str,
    epoch: int,
    owned: Assignment | None,
    joining: bool,
) -> ConsumerMember:
    member = group.members.get(member_id)
    if member is None:
        if not joining:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
        return ConsumerMember(member_id)
    _check_epoch(member, epoch, owned)
    return member


def _static_member(
    group: ConsumerGroup,
    member_id: str,
    epoch: int,
    instance_id: str,
    owned: Assignment | None,
    joining: bool,
) -> tuple[ConsumerMember, ConsumerMember | None]:
    """(the member, the member it replaces or None): Kafka's
    getOrMaybeSubscribeStaticConsumerGroupMember."""
    existing = group.static_member(instance_id)
    if joining:
        if existing is None:
            return group.members.get(member_id) or ConsumerMember(member_id), None
        if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise HeartbeatError(
                ErrorCode.UNRELEASED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} cannot join the "
                f"group because the instance id is owned by {existing.member_id} member.",
            )
        # The instance comes back under a new member id: it takes the old one's place and
        # partitions, from epoch 0.
        current = dataclasses.replace(existing.current, member_epoch=0, previous_member_epoch=0)
        return dataclasses.replace(existing, member_id=member_id, current=current), existing
    if existing is None:
        raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if existing.member_id != member_id:
        raise HeartbeatError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} was fenced by member "
            f"{existing.member_id}.",
        )
    _check_epoch(existing, epoch, owned)
    return existing, None


def _check_epoch(member: ConsumerMember, epoch: int, owned: Assignment | None) -> None:
    if check_member_epoch(member.current, epoch, owned) is None:
        return
    known = member.member_epoch
    side = "greater" if epoch > known else "smaller"
    raise HeartbeatError(
        ErrorCode.FENCED_MEMBER_EPOCH,
        f"The consumer group member has a {side} member epoch ({epoch}) than the one known by "
        f"the group coordinator ({known}). The member must abandon all its partitions and "
        "rejoin.",
    )


def _replace(group: ConsumerGroup, old: ConsumerMember, new: ConsumerMember) -> list[Record]:
    """Kafka's replaceMember: the old member's records go, the new one's come with its
    target and current assignment."""
    group_id = group.group_id
    return [
        *records.member_tombstones(group_id, old.member_id),
        records.member_metadata(group_id, new),
        records.target_member(group_id, new.member_id, group.target.get(old.member_id, {})),
        records.current_assignment(group_id, new.member_id, new.current),
    ]


def _check_regex(regex: str) -> None:
    try:
        re.compile(regex)
    except re.error as exc:
        raise HeartbeatError(
            ErrorCode.INVALID_REGULAR_EXPRESSION,
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.",
        ) from None


def _matches(regex: str, names: list[str]) -> list[str]:
    try:
        pattern = re.compile(regex)
    except re.error:
        return []
    return [name for name in names if pattern.fullmatch(name)]


def member_topics(gm: GroupManager, member: ConsumerMember) -> set[str]:
    """The topic names a member subscribes to, its regular expression resolved against the
    topics there are now."""
    topics = set(member.subscribed_topic_names)
    if member.subscribed_topic_regex:
        topics.update(_matches(member.subscribed_topic_regex, gm.topics.topic_names()))
    return topics


def subscribed_topics(
    gm: GroupManager, members: Iterable[ConsumerMember]
) -> dict[str, tuple[uuid.UUID, int]]:
    """Every topic some member subscribes to that exists: name -> (id, partitions)."""
    names: set[str] = set()
    for member in members:
        names |= member_topics(gm, member)
    out: dict[str, tuple[uuid.UUID, int]] = {}
    for name in sorted(names):
        found = gm.topics.topic_by_name(name)
        if found is not None:
            out[name] = found
    return out


def _metadata_hash(topics: Mapping[str, tuple[uuid.UUID, int]]) -> int:
    """A hash of the subscribed topics that is the same in every process (a restart must
    not see a change where there is none)."""
    text = ";".join(f"{name}:{tid}:{n}" for name, (tid, n) in sorted(topics.items()))
    return zlib.crc32(text.encode())


def _assign(
    gm: GroupManager, group: ConsumerGroup, members: dict[str, ConsumerMember]
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """The new target assignment (Kafka's updateTargetAssignment), by the group's preferred
    server assignor."""
    topics: dict[uuid.UUID, TopicMetadata] = {}
    specs: dict[str, MemberSubscription] = {}
    for member in members.values():
        ids: set[uuid.UUID] = set()
        for name in member_topics(gm, member):
            found = gm.topics.topic_by_name(name)
            if found is not None:
                topic_id, partitions = found
                ids.add(topic_id)
                topics[topic_id] = TopicMetadata(topic_id, name, partitions)
        previous = group.target.get(member.member_id)
        if previous is None and member.instance_id is not None:
            # A static member replaced under a new id keeps what the old one was given.
            old_id = group.static_members.get(member.instance_id)
            previous = group.target.get(old_id) if old_id is not None else None
        specs[member.member_id] = MemberSubscription(
            subscribed_topic_ids=frozenset(ids),
            target=previous or {},
            instance_id=member.instance_id,
            rack_id=member.rack_id,
        )
    default = gm.config.group_consumer_assignors[0]
    members_by_assignor = [m.server_assignor for m in members.values() if m.server_assignor]
    name = _preferred(members_by_assignor, default)
    return ASSIGNORS[name].assign(specs, topics)


def _preferred(names: list[str], default: str) -> str:
    """The server assignor most members ask for (ties: the first by name); the default if
    none asks."""
    if not names:
        return default
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    best = max(counts.values())
    return min(n for n, c in counts.items() if c == best)


def _response_assignment(assigned: Assignment) -> ConsumerGroupHeartbeatResponseAssignment:
    return ConsumerGroupHeartbeatResponseAssignment(
        topic_partitions=[
            ConsumerGroupHeartbeatResponseTopicPartitions(topic, sorted(parts))
            for topic, parts in sorted(assigned.items(), key=lambda item: item[0].int)
        ]
    )


# -- timers ---------------------------------------------------------------------------------


def _arm_timers(gm: GroupManager, group_id: str, member_id: str, now_ms: int) -> None:
    """After a heartbeat: the group's subscribed topics are as of the topics there are now;
    the session starts again; a member left revoking gets until its rebalance timeout."""
    group = gm.consumer_groups.get(group_id)
    member = group.members.get(member_id) if group is not None else None
    if group is None or member is None:
        return
    version = gm.topics.version()
    if group.image_version != version:
        group.image_version = version
        columns.sync(gm, group)
    schedule_session(gm, group_id, member, now_ms)
    current = member.current
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if group.revoking_at.get(member_id) != current.member_epoch:
            group.revoking_at[member_id] = current.member_epoch
            gm.schedule(revocation_key(group_id, member_id), now_ms + member.rebalance_timeout_ms)
    elif group.revoking_at.pop(member_id, None) is not None:
        gm.cancel(revocation_key(group_id, member_id))


def schedule_session(gm: GroupManager, group_id: str, member: ConsumerMember, now_ms: int) -> None:
    """The session starts again from now; the timer is moved only when it would fire after
    the new deadline (when it fires early, it re-arms at the deadline)."""
    deadline = now_ms + gm.config.group_consumer_session_timeout_ms
    columns.set_session_deadline(gm, group_id, member.member_id, deadline)
    key = session_key(group_id, member.member_id)
    armed = gm.ctx.deadline(key)
    if armed is None or armed > deadline:
        gm.schedule(key, deadline)


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


# -- leaving --------------------------------------------------------------------------------


def fence(gm: GroupManager, group: ConsumerGroup, member: ConsumerMember) -> list[Record]:
    """Kafka's consumerGroupFenceMember: the member's records go and the group epoch moves,
    so that the others are given its partitions."""
    gm.cancel(session_key(group.group_id, member.member_id))
    gm.cancel(revocation_key(group.group_id, member.member_id))
    rest = [m for m in group.members.values() if m.member_id != member.member_id]
    metadata_hash = _metadata_hash(subscribed_topics(gm, rest))
    return [
        *records.member_tombstones(group.group_id, member.member_id),
        records.group_epoch(group.group_id, group.group_epoch + 1, metadata_hash),
    ]


def _leave(
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


def remove_empty_group(
    gm: GroupManager, group: ConsumerGroup, has_offsets: bool, now_ms: int, result: Result
) -> None:
    """An Empty consumer group with no offsets left is deleted (Kafka's maybeDeleteGroup)."""
    if group.members or has_offsets:
        return
    commit(gm, result, now_ms, records.group_tombstones(group.group_id))
