"""ConsumerGroupHeartbeat: Kafka's GroupMetadataManager.consumerGroupHeartbeat.

One request joins (member epoch 0), stays (the member's epoch), or leaves (-1; -2 for a
static member that will be back: leave.py). A heartbeat that is not a leave does three
things, as Kafka's does: it updates the member (a new subscription bumps the group epoch);
if the group epoch is ahead of the target assignment's, the server-side assignor computes a
new target (target.py); and the member takes one step towards its target
(reconciliation.py), revoking before anything is given to someone else. The heartbeat
decides and writes records; writes.py replays them and answers once they are durable.
"""

from __future__ import annotations

import dataclasses
import uuid

from fastcoord.core.consumer import records
from fastcoord.core.consumer.assignment import Assignment
from fastcoord.core.consumer.batching import Waiting
from fastcoord.core.consumer.columns import session_key
from fastcoord.core.consumer.group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerMember,
)
from fastcoord.core.consumer.leave import leave
from fastcoord.core.consumer.members import (
    consumer_group,
    dynamic_member,
    new_member_id,
    replace_member,
    static_member,
)
from fastcoord.core.consumer.reconciliation import FencedMemberEpochError, reconcile
from fastcoord.core.consumer.sessions import arm_timers, revocation_key
from fastcoord.core.consumer.subscriptions import check_regex, metadata_hash_of, subscribed_topics
from fastcoord.core.consumer.target import assign, response_assignment
from fastcoord.core.consumer.writes import HeartbeatError, commit, error_response
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.records import Record
from fastcoord.core.result import Call, Result
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

# Kafka's CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION: from v1 the client names itself.
MEMBER_ID_REQUIRED_VERSION = 1


def consumer_group_heartbeat(
    gm: GroupManager, call: Call, req: ConsumerGroupHeartbeatRequest
) -> None:
    status = gm.group_status_error(req.group_id, req)
    if status is not None:
        call.respond(ConsumerGroupHeartbeatResponse(error_code=status))
        return
    response: ConsumerGroupHeartbeatResponse | None
    try:
        _validate(gm, req, call.version)
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            written, response = leave(gm, call, req)
        else:
            written, response = _heartbeat(gm, call, req)
    except HeartbeatError as exc:
        call.respond(error_response(exc))
        return
    if response is None:
        # Its step waits for the group's target assignment (batching.py): what it changed
        # of the member is written now, so that the assignment sees it.
        commit(gm, call.result, call.now_ms, written)
        arm_timers(gm, req.group_id, req.member_id or "", call.now_ms)
        return
    commit(gm, call.result, call.now_ms, written, call.handle, response, req.group_id)
    if response.member_epoch >= 0:
        arm_timers(gm, req.group_id, response.member_id or "", call.now_ms)


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


def _heartbeat(
    gm: GroupManager, call: Call, req: ConsumerGroupHeartbeatRequest
) -> tuple[list[Record], ConsumerGroupHeartbeatResponse | None]:
    """The records the heartbeat writes and its answer; None for the answer when its step
    towards the target waits for the group's next target assignment (batching.py)."""
    group_id, epoch, now_ms = req.group_id, req.member_epoch, call.now_ms
    joining = epoch == 0
    written: list[Record] = []
    group = consumer_group(gm, group_id, joining, now_ms, written)
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
        member = dynamic_member(group, member_id, epoch, owned, joining)
    else:
        member, replaced = static_member(group, member_id, epoch, req.instance_id, owned, joining)
        if replaced is not None:
            written.extend(replace_member(group, replaced, member))
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
            check_regex(updated.subscribed_topic_regex)
        bump = True
    group_epoch = group.group_epoch
    batches = gm.batches
    # A target already due (batching.py) will see this member: one epoch for them all.
    due = batches is not None and group_epoch > group.assignment_epoch and replaced is None
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
        metadata_hash = metadata_hash_of(subscribed_topics(gm, members.values()))
        if metadata_hash != group.metadata_hash:
            bump = True
        if bump and not due:
            group_epoch += 1
            written.append(records.group_epoch(group_id, group_epoch, metadata_hash))
        elif metadata_hash != group.metadata_hash:
            written.append(records.group_epoch(group_id, group_epoch, metadata_hash))

    full = joining or (
        req.rebalance_timeout_ms != -1
        and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
        and owned is not None
    )
    if not known and replaced is None:
        gm.ctx.event(
            call.result,
            now_ms,
            "member_joined",
            group_id,
            member_id=updated.member_id,
            members=len(group.members) + 1,
        )

    # 2. The target assignment, when the group epoch is ahead of it: now, or once for the
    # heartbeats read together (batching.py).
    if batches is not None and group_epoch > group.assignment_epoch and replaced is None:
        batches.add(
            group_id,
            Waiting(call, updated.member_id, owned, full, member.current.assigned),
        )
        return written, None
    target: Assignment
    if group_epoch > group.assignment_epoch:
        targets = assign(gm, group, members)
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
    stepped = _step(gm, group, updated, target_epoch, target, owned, replaced is not None, written)
    return written, _with_assignment(stepped, full, member.current.assigned)


def _step(
    gm: GroupManager,
    group: ConsumerGroup,
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    replaced: bool,
    written: list[Record],
) -> tuple[ConsumerGroupHeartbeatResponse, Assignment]:
    """The member's step towards its target (its current assignment record appended to
    `written` when it moves): the answer that says its epoch, and the assignment it now
    holds, which _with_assignment puts in the answer or not."""
    current = member.current
    if not current.is_reconciled_to(target_epoch):
        try:
            current = reconcile(current, target_epoch, target, group.current_partition_epoch, owned)
        except FencedMemberEpochError as exc:
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, str(exc)) from None
        if current != member.current or replaced:
            written.append(records.current_assignment(group.group_id, member.member_id, current))
    response = ConsumerGroupHeartbeatResponse(
        member_id=member.member_id,
        member_epoch=current.member_epoch,
        heartbeat_interval_ms=gm.config.group_consumer_heartbeat_interval_ms,
    )
    return response, current.assigned


def _with_assignment(
    stepped: tuple[ConsumerGroupHeartbeatResponse, Assignment], full: bool, before: Assignment
) -> ConsumerGroupHeartbeatResponse:
    """The answer, with the member's assignment when the request was a full one or the
    assignment changed."""
    response, assigned = stepped
    if full or assigned != before:
        response.assignment = response_assignment(assigned)
    return response


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


def run_batches(gm: GroupManager, now_ms: int, result: Result, budget: int | None = None) -> None:
    """The target assignments due (batching.py), in the order they fell due: each group's
    computed once, then each heartbeat that waits for it takes its step and is answered, in
    the order they came. With a `budget`, groups are taken until about that many members'
    worth of work is done (one group at least); the rest stay due for the next call."""
    batches = gm.batches
    spent = 0
    while batches and (budget is None or spent < budget):
        group_id, waiting = batches.next()
        spent += _run_batch(gm, group_id, waiting, now_ms, result)


def _run_batch(
    gm: GroupManager, group_id: str, waiting: list[Waiting], now_ms: int, result: Result
) -> int:
    """One group's target assignment and the steps of the heartbeats that waited for it;
    the work done, in members."""
    group = gm.consumer_groups.get(group_id)
    status = gm.group_status_error(group_id, _ANY_HEARTBEAT)
    if group is None or status is not None:
        # Deleted or unloaded meanwhile: answered as a heartbeat arriving now would be.
        code = status if status is not None else ErrorCode.GROUP_ID_NOT_FOUND
        for w in waiting:
            result.respond(w.call.handle, ConsumerGroupHeartbeatResponse(error_code=code))
        return len(waiting)
    if group.group_epoch > group.assignment_epoch:
        written: list[Record] = []
        targets = assign(gm, group, group.members)
        for mid, target in targets.items():
            if target != group.target.get(mid, {}):
                written.append(records.target_member(group_id, mid, target))
        written.append(records.target_epoch(group_id, group.group_epoch))
        commit(gm, result, now_ms, written)
    for w in waiting:
        handle = w.call.handle
        member = group.members.get(w.member_id)
        if member is None:  # it left, or was fenced, while it waited
            error = HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {w.member_id} is not a member of group {group_id}.",
            )
            result.respond(handle, error_response(error))
            continue
        written = []
        try:
            stepped = _step(
                gm,
                group,
                member,
                group.assignment_epoch,
                group.target.get(member.member_id, {}),
                w.owned,
                False,
                written,
            )
        except HeartbeatError as exc:
            result.respond(handle, error_response(exc))
            continue
        response = _with_assignment(stepped, w.full, w.assigned)
        commit(gm, result, now_ms, written, handle, response, group_id)
        if response.member_epoch >= 0:
            arm_timers(gm, group_id, member.member_id, now_ms)
    return len(group.members) + len(waiting)


# What group_status_error is asked with: a heartbeat's group id may not be empty.
_ANY_HEARTBEAT = ConsumerGroupHeartbeatRequest()
