"""OffsetCommit, OffsetFetch and OffsetDelete, on the offset manager.

Follows Kafka's GroupCoordinator.handleCommitOffsets / handleFetchOffsets /
handleDeleteOffsets. A commit is a write: its records go out with the Result, and the
commit is answered (and its offsets become visible to OffsetFetch) only when they are
durable, through replay. Whether a group admits a commit is the group's to say (GroupView).
"""

from __future__ import annotations

from array import array

from fastcoord.core.classic.subscriptions import parse_subscription_topics
from fastcoord.core.native import offset_table
from fastcoord.core.offset_manager import CommitCheck, OffsetManager
from fastcoord.core.records import OffsetCommitKey, OffsetCommits, Record
from fastcoord.core.result import Call, Event, Handle, Result
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

__all__ = ["parse_subscription_topics"]  # where the interop tests have always found it

TopicPartition = tuple[str, int]


# ErrorCode's members as the commit path reads them: on Python 3.11 the enum's metaclass
# defines __getattr__, so each `ErrorCode.X` takes the interpreter's slow attribute path
# (about 850 instructions), and a commit read over a dozen of them.
_NONE = ErrorCode.NONE

# Kafka's mapping of a failed append to what the committing client is told (the others
# are told as they are).
_STORAGE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


def storage_error(error: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed append to what the committing client is told."""
    return _STORAGE_ERRORS.get(error, error)


# -- OffsetCommit -------------------------------------------------------------------------


def offset_commit(
    om: OffsetManager, call: Call, req: OffsetCommitRequest | OffsetCommitBatch
) -> None:
    """The server decodes OffsetCommit into a batch; a request object (tests, other callers)
    is converted with the same version rules."""
    if not isinstance(req, OffsetCommitBatch):
        req = OffsetCommitBatch.from_request(req, call.version)
    offset_commits(om, [(call.handle, req)], call.now_ms, call.result)


# An accepted commit: its handle, its batch, the errors of its partitions (None: all NONE),
# and its records.
_Accepted = tuple[Handle, OffsetCommitBatch, "array[int] | None", OffsetCommits]


def offset_commits(
    om: OffsetManager, requests: list[tuple[Handle, OffsetCommitBatch]], now_ms: int, result: Result
) -> None:
    """OffsetCommit requests read one after another, each checked as Kafka's
    handleCommitOffsets checks it; what they commit goes out in one append. A run of
    consecutive commits to the same group asks once whether this coordinator serves the
    group and which kind of group it is (which check its commits get), and consecutive
    commits of the same member are checked once: nothing between them could change the
    answer (a commit changes no group state until it is durable)."""
    accepted: list[_Accepted] = []
    checked: tuple[str, int, str, str | None] | None = None
    checked_group: str | None = None
    status: ErrorCode | None = None  # why this coordinator cannot serve the group
    check: CommitCheck | None = None  # the group's, when it is served
    verdict = _NONE
    for handle, batch in requests:
        key = (batch.group_id, batch.generation_id, batch.member_id, batch.group_instance_id)
        if key != checked:
            group_id = batch.group_id
            if checked is None or group_id != checked_group:
                checked_group = group_id
                status = om.ctx.group_status_error(group_id, batch)
                check = om.groups.offset_commit_check(group_id) if status is None else None
            checked = key
            error = status if check is None else check(batch, now_ms)
            verdict = _NONE if error is None else error
        if verdict != _NONE:
            result.respond(handle, OffsetCommitAnswer(batch, verdict))
            continue
        errors, commits = _records(om, batch, now_ms)
        if commits is None:
            result.respond(handle, OffsetCommitAnswer(batch, _NONE, errors))
        else:
            accepted.append((handle, batch, errors, commits))
    if not accepted:
        return

    def stored(error: ErrorCode, now_ms: int, result: Result) -> None:
        failed = storage_error(error)
        for handle, batch, errors, commits in accepted:
            if error == _NONE:
                om.replay_commits(commits, now_ms)
                result.respond(handle, OffsetCommitAnswer(batch, _NONE, errors))
            elif errors is None:
                result.respond(handle, OffsetCommitAnswer(batch, failed))
            else:
                failed_errors = array("h", [failed if e == _NONE else e for e in errors])
                result.respond(handle, OffsetCommitAnswer(batch, failed, failed_errors))
            result.events.append(
                Event(
                    at_ms=now_ms,
                    kind="offsets_committed",
                    group_id=commits.group_id,
                    members=len(commits.batch.partitions) if error == _NONE else 0,
                )
            )

    om.ctx.append(result, [commits for *_, commits in accepted], stored)


def _records(
    om: OffsetManager, batch: OffsetCommitBatch, now_ms: int
) -> tuple[array[int] | None, OffsetCommits | None]:
    """(the errors of the batch's partitions, None if all NONE; the records of those it
    commits, None if none): a partition whose metadata is too long is refused alone."""
    errors: array[int] | None = None
    if batch.metadata is not None:
        max_metadata = om.config.offset_metadata_max_bytes
        too_large = [len(m) > max_metadata for m in batch.metadata]
        if any(too_large):
            errors = array(
                "h", [ErrorCode.OFFSET_METADATA_TOO_LARGE if t else 0 for t in too_large]
            )
            batch = batch.select([k for k, t in enumerate(too_large) if not t])
    if not batch.partitions:
        return errors, None
    return errors, OffsetCommits(batch.group_id, batch, now_ms)


# -- OffsetFetch --------------------------------------------------------------------------


Fetched = dict[str, list[tuple[int, int, int, str | None, ErrorCode]]]
_NO_OFFSETS = offset_table.OffsetTable()  # of a group not visible: never written


def _fetch(
    om: OffsetManager,
    group_id: str,
    topics: list[tuple[str, list[int]]] | None,
    req: Request,
    member: tuple[str | None, int] = (None, -1),
) -> tuple[ErrorCode, Fetched]:
    """(group error, topic -> [(partition, offset, leader epoch, metadata, error)]);
    `member`: the (member id, member epoch) a v9+ request names."""
    error = om.ctx.group_status_error(group_id, req)
    if error is None:
        error = om.groups.validate_offset_fetch(group_id, *member)
    if error is not None:
        return error, {}
    offsets = om.offsets(group_id) if om.groups.offsets_visible(group_id) else _NO_OFFSETS
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


def offset_fetch(om: OffsetManager, call: Call, req: OffsetFetchRequest) -> None:
    handle, version, result = call.handle, call.version, call.result
    if version >= 8:
        groups = []
        for g in req.groups:
            wanted = None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics]
            error, fetched = _fetch(om, g.group_id, wanted, req, (g.member_id, g.member_epoch))
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
    error, fetched = _fetch(om, req.group_id, wanted, req)
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


def offset_delete(om: OffsetManager, call: Call, req: OffsetDeleteRequest) -> None:
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

    error = om.ctx.group_status_error(req.group_id, req)
    subscribed = om.groups.validate_offset_delete(req.group_id) if error is None else error
    if isinstance(subscribed, ErrorCode):
        respond(result, subscribed, {})
        return
    requested = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
    errors = dict.fromkeys(requested, ErrorCode.NONE)
    for tp in requested:
        if subscribed(tp[0]):
            errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    offsets = om.offsets(req.group_id)
    deletable = [tp for tp, err in errors.items() if err == ErrorCode.NONE and tp in offsets]
    if not deletable:
        respond(result, ErrorCode.NONE, errors)
        return
    keys = [OffsetCommitKey(req.group_id, t, p) for t, p in deletable]

    def stored(error: ErrorCode, now_ms: int, result: Result) -> None:
        if error == ErrorCode.NONE:
            for key in keys:
                om.replay_offset(key, None, now_ms)
            respond(result, ErrorCode.NONE, errors)
        else:
            respond(result, storage_error(error), {})

    om.ctx.append(result, [Record(key, None) for key in keys], stored)
