"""OffsetCommit, OffsetFetch, OffsetDelete, and the retention of offsets of empty groups.

Follows Kafka's GroupCoordinator.handleCommitOffsets / handleFetchOffsets /
handleDeleteOffsets and GroupMetadataManager.cleanupGroupMetadata. A commit is a write:
its records go out with the Result, and the commit is answered (and its offsets become
visible to OffsetFetch) only when they are durable, through replay.

Commits of v2-4 may carry a retention time; like Kafka since KIP-211, offsets expire by the
broker's offsets.retention.minutes counted from when the group became empty (or, for a
group that never had members, from the commit), and the per-request retention is ignored.
"""

from __future__ import annotations

import struct
from array import array
from typing import TYPE_CHECKING

from fastcoord.core.group import Group
from fastcoord.core.membership import schedule_session, validate_current_member
from fastcoord.core.native import offset_table
from fastcoord.core.records import OffsetCommitKey, OffsetCommits, OffsetCommitValue, Record
from fastcoord.core.result import Call, Event, Handle, Result
from fastcoord.core.state import COMPLETING_REBALANCE, DEAD, EMPTY
from fastcoord.protocol.commit_batch import OffsetCommitAnswer, OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from fastcoord.protocol.schema import Request

if TYPE_CHECKING:
    from fastcoord.core.coordinator import Coordinator

TopicPartition = tuple[str, int]


def storage_error(error: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed append to what the committing client is told."""
    if error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return error


# -- OffsetCommit -------------------------------------------------------------------------


def offset_commit(
    co: Coordinator, call: Call, req: OffsetCommitRequest | OffsetCommitBatch
) -> None:
    """The server decodes OffsetCommit into a batch; a request object (tests, other callers)
    is converted with the same version rules."""
    if not isinstance(req, OffsetCommitBatch):
        req = OffsetCommitBatch.from_request(req, call.version)
    offset_commits(co, [(call.handle, req)], call.now_ms, call.result)


# An accepted commit: its handle, its batch, the errors of its partitions (None: all NONE),
# and its records.
_Accepted = tuple[Handle, OffsetCommitBatch, "array[int] | None", OffsetCommits]


def offset_commits(
    co: Coordinator, requests: list[tuple[Handle, OffsetCommitBatch]], now_ms: int, result: Result
) -> None:
    """OffsetCommit requests read one after another, each checked as Kafka's
    handleCommitOffsets checks it; what they commit goes out in one append. Consecutive
    commits of the same member of the same group are checked once: nothing between them
    could change the answer (a commit changes no group state until it is durable)."""
    accepted: list[_Accepted] = []
    checked: tuple[str, int, str, str | None] | None = None
    verdict: Group | ErrorCode = ErrorCode.NONE
    for handle, batch in requests:
        key = (batch.group_id, batch.generation_id, batch.member_id, batch.group_instance_id)
        if key != checked:
            checked = key
            verdict = _admit(co, batch, now_ms)
        if isinstance(verdict, ErrorCode):
            result.respond(handle, OffsetCommitAnswer(batch, verdict))
            continue
        errors, commits = _records(co, verdict, batch, now_ms)
        if commits is None:
            result.respond(handle, OffsetCommitAnswer(batch, ErrorCode.NONE, errors))
        else:
            accepted.append((handle, batch, errors, commits))
    if not accepted:
        return

    def stored(error: ErrorCode, now_ms: int, result: Result) -> None:
        failed = storage_error(error)
        for handle, batch, errors, commits in accepted:
            if error == ErrorCode.NONE:
                replay_commits(co, commits, now_ms)
                result.respond(handle, OffsetCommitAnswer(batch, ErrorCode.NONE, errors))
            elif errors is None:
                result.respond(handle, OffsetCommitAnswer(batch, failed))
            else:
                failed_errors = array("h", [failed if e == ErrorCode.NONE else e for e in errors])
                result.respond(handle, OffsetCommitAnswer(batch, failed, failed_errors))
            result.events.append(
                Event(
                    at_ms=now_ms,
                    kind="offsets_committed",
                    group_id=commits.group_id,
                    members=len(commits.batch.partitions) if error == ErrorCode.NONE else 0,
                )
            )

    co.append(result, [commits for *_, commits in accepted], stored)


def _admit(co: Coordinator, batch: OffsetCommitBatch, now_ms: int) -> Group | ErrorCode:
    """The group a commit goes to, or why it is refused."""
    error = co.group_status_error(batch.group_id, batch)
    if error is not None:
        return error
    generation, member_id = batch.generation_id, batch.member_id
    group = co.groups.get(batch.group_id)
    if group is None:
        if generation >= 0:
            # A commit from an old generation of a group that is gone.
            return ErrorCode.ILLEGAL_GENERATION
        # A "simple" commit: the group does not use Kafka for membership.
        group = co.get_or_create_group(batch.group_id, now_ms)
    error = _validate_commit(group, generation, member_id, batch.group_instance_id)
    if error is not None:
        return error
    if not (generation < 0 and group.is_(EMPTY)):
        if group.is_(COMPLETING_REBALANCE):
            # The member has its JoinGroup answer but not yet its assignment.
            return ErrorCode.REBALANCE_IN_PROGRESS
        schedule_session(co, group, group.get(member_id), now_ms)
    return group


def _validate_commit(
    group: Group, generation: int, member_id: str, instance_id: str | None
) -> ErrorCode | None:
    if group.is_(DEAD):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation >= 0 or member_id != "" or instance_id is not None:
        error = validate_current_member(group, member_id, instance_id)
        if error is not None:
            return error
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return None
    if not group.is_(EMPTY):
        # Once a group has members, only they may commit.
        return ErrorCode.UNKNOWN_MEMBER_ID
    return None


def _records(
    co: Coordinator, group: Group, batch: OffsetCommitBatch, now_ms: int
) -> tuple[array[int] | None, OffsetCommits | None]:
    """(the errors of the batch's partitions, None if all NONE; the records of those it
    commits, None if none): a partition whose metadata is too long is refused alone."""
    errors: array[int] | None = None
    if batch.metadata is not None:
        max_metadata = co.config.offset_metadata_max_bytes
        too_large = [len(m) > max_metadata for m in batch.metadata]
        if any(too_large):
            errors = array(
                "h", [ErrorCode.OFFSET_METADATA_TOO_LARGE if t else 0 for t in too_large]
            )
            batch = batch.select([k for k, t in enumerate(too_large) if not t])
    if not batch.partitions:
        return errors, None
    return errors, OffsetCommits(group.group_id, batch, now_ms)


def replay_offset(
    co: Coordinator, key: OffsetCommitKey, value: OffsetCommitValue | None, now_ms: int
) -> None:
    group = co.groups.get(key.group)
    if value is None:
        if group is not None:
            group.offsets.pop(key.topic, key.partition)
        return
    if group is None:
        group = co.get_or_create_group(key.group, now_ms)
    group.offsets.put(key.topic, key.partition, value)


def replay_commits(co: Coordinator, commits: OffsetCommits, now_ms: int) -> None:
    group = co.get_or_create_group(commits.group_id, now_ms)
    group.offsets.replay_commits(commits.batch, commits.commit_timestamp)


# -- OffsetFetch --------------------------------------------------------------------------


Fetched = dict[str, list[tuple[int, int, int, str | None, ErrorCode]]]
_NO_OFFSETS = offset_table.OffsetTable()  # of a group that is not there: never written


def _fetch(
    co: Coordinator, group_id: str, topics: list[tuple[str, list[int]]] | None, req: Request
) -> tuple[ErrorCode, Fetched]:
    """(group error, topic -> [(partition, offset, leader epoch, metadata, error)])."""
    error = co.group_status_error(group_id, req)
    if error is not None:
        return error, {}
    group = co.groups.get(group_id)
    offsets = group.offsets if group is not None and not group.is_(DEAD) else _NO_OFFSETS
    out: Fetched = {}
    if topics is None:
        for (topic, partition), v in offsets.items():
            out.setdefault(topic, []).append(
                (partition, v.offset, v.leader_epoch, v.metadata, ErrorCode.NONE)
            )
        return ErrorCode.NONE, out
    for topic, partitions in topics:
        rows = out.setdefault(topic, [])
        for partition in partitions:
            found = offsets.get((topic, partition))
            if found is None:
                rows.append((partition, -1, -1, "", ErrorCode.NONE))
            else:
                rows.append(
                    (partition, found.offset, found.leader_epoch, found.metadata, ErrorCode.NONE)
                )
    return ErrorCode.NONE, out


def offset_fetch(co: Coordinator, call: Call, req: OffsetFetchRequest) -> None:
    handle, version, result = call.handle, call.version, call.result
    if version >= 8:
        groups = []
        for g in req.groups:
            wanted = None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics]
            error, fetched = _fetch(co, g.group_id, wanted, req)
            groups.append(
                OffsetFetchResponseGroup(
                    group_id=g.group_id,
                    topics=[
                        OffsetFetchResponseTopics(
                            name,
                            [
                                OffsetFetchResponsePartitions(p, off, epoch, meta, err)
                                for p, off, epoch, meta, err in rows
                            ],
                        )
                        for name, rows in fetched.items()
                    ],
                    error_code=error,
                )
            )
        result.respond(handle, OffsetFetchResponse(groups=groups))
        return
    wanted = None if req.topics is None else [(t.name, t.partition_indexes) for t in req.topics]
    error, fetched = _fetch(co, req.group_id, wanted, req)
    if error != ErrorCode.NONE and version < 2:
        # No top-level error before v2: every requested partition carries it.
        fetched = {name: [(p, -1, -1, "", error) for p in parts] for name, parts in wanted or []}
    result.respond(
        handle,
        OffsetFetchResponse(
            topics=[
                OffsetFetchResponseTopic(
                    name,
                    [
                        OffsetFetchResponsePartition(p, off, epoch, meta, err)
                        for p, off, epoch, meta, err in rows
                    ],
                )
                for name, rows in fetched.items()
            ],
            error_code=error,
        ),
    )


# -- OffsetDelete -------------------------------------------------------------------------


def subscribed_topics(group: Group) -> set[str] | None:
    """Topics the members of a consumer group subscribe to; None if unknown."""
    if group.protocol_type != "consumer" or not group.protocol_name:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        parsed = parse_subscription_topics(member.metadata(group.protocol_name))
        if parsed is None:
            return None
        topics.update(parsed)
    return topics


def parse_subscription_topics(metadata: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription (version int16, then [string]); None if the
    bytes are not one. Versions 0-3 all start this way."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos = 6
        topics = []
        if count < 0 or count > len(metadata):
            return None
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            if n < 0 or pos + 2 + n > len(metadata):
                return None
            topics.append(metadata[pos + 2 : pos + 2 + n].decode("utf-8"))
            pos += 2 + n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


def offset_delete(co: Coordinator, call: Call, req: OffsetDeleteRequest) -> None:
    handle, result = call.handle, call.result

    def respond(result: Result, error: ErrorCode, errors: dict[TopicPartition, ErrorCode]) -> None:
        topics = (
            []
            if error != ErrorCode.NONE
            else [
                OffsetDeleteResponseTopic(
                    t.name,
                    [
                        OffsetDeleteResponsePartition(
                            p.partition_index, errors[(t.name, p.partition_index)]
                        )
                        for p in t.partitions
                    ],
                )
                for t in req.topics
            ]
        )
        result.respond(handle, OffsetDeleteResponse(error_code=error, topics=topics))

    error = co.group_status_error(req.group_id, req)
    group = co.groups.get(req.group_id) if error is None else None
    if error is None and (group is None or group.is_(DEAD)):
        error = ErrorCode.GROUP_ID_NOT_FOUND
    if error is not None or group is None:
        respond(result, error or ErrorCode.GROUP_ID_NOT_FOUND, {})
        return
    requested = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
    errors = dict.fromkeys(requested, ErrorCode.NONE)
    if not group.is_(EMPTY):
        if group.protocol_type != "consumer":
            respond(result, ErrorCode.NON_EMPTY_GROUP, {})
            return
        subscribed = subscribed_topics(group)
        for tp in requested:
            if subscribed is None or tp[0] in subscribed:
                errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    deletable = [tp for tp, err in errors.items() if err == ErrorCode.NONE and tp in group.offsets]
    if not deletable:
        respond(result, ErrorCode.NONE, errors)
        return
    tombstones = [Record(OffsetCommitKey(group.group_id, t, p), None) for t, p in deletable]

    def stored(error: ErrorCode, now_ms: int, result: Result) -> None:
        if error == ErrorCode.NONE:
            for record in tombstones:
                co.replay(record, now_ms)
            respond(result, ErrorCode.NONE, errors)
        else:
            respond(result, storage_error(error), {})

    co.append(result, tombstones, stored)


# -- retention ----------------------------------------------------------------------------


def expire_offsets(co: Coordinator, now_ms: int, result: Result) -> None:
    """cleanupGroupMetadata: expire offsets, and remove empty groups left with none."""
    from fastcoord.core.admin import remove_empty_group

    retention = co.config.offsets_retention_ms
    for group in list(co.groups.values()):
        expired: list[TopicPartition] = []
        if group.is_(EMPTY):
            # A consumer group's offsets expire counting from when it became empty; a group
            # that never had members counts from each commit.
            for tp, v in group.offsets.items():
                base = group.state_timestamp_ms if group.protocol_type else v.commit_timestamp
                if base + retention <= now_ms:
                    expired.append(tp)
        elif not group.is_(DEAD):
            subscribed = subscribed_topics(group)
            if subscribed is not None:
                # KIP-496: offsets of topics no member subscribes to expire by commit time.
                expired = [
                    tp
                    for tp, v in group.offsets.items()
                    if tp[0] not in subscribed and v.commit_timestamp + retention <= now_ms
                ]
        if expired:
            tombstones = [Record(OffsetCommitKey(group.group_id, t, p), None) for t, p in expired]

            def stored(
                error: ErrorCode,
                now_ms: int,
                result: Result,
                group: Group = group,
                tombstones: list[Record] = tombstones,
            ) -> None:
                if error == ErrorCode.NONE:
                    for record in tombstones:
                        co.replay(record, now_ms)
                    remove_empty_group(co, group, now_ms, result)

            co.append(result, tombstones, stored)
        else:
            remove_empty_group(co, group, now_ms, result)
