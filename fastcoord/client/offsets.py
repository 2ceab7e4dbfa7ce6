"""The OffsetCommit and OffsetFetch requests, as both kinds of member build them.

A classic member (member.py) and a member of the consumer group protocol
(consumer_member.py) ask the same two things of their group's offsets: where to start on
the partitions they were given, and to store how far they got. Only who signs a commit
differs: the classic member's generation, or the consumer-protocol member's epoch, in the
one field OffsetCommit has for either. Which partitions each owns, and in what order it
lists them, stay the members' own; the version a request goes out at is its connection's.
"""

from __future__ import annotations

from collections.abc import Iterable

from fastcoord.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
)

# Partitions by topic name, topics and partitions in the order the request lists them.
Partitions = Iterable[tuple[str, Iterable[int]]]


def offset_fetch_request(group_id: str, partitions: Partitions) -> OffsetFetchRequest:
    """The committed offsets of `partitions`, which a consumer asks for what it is given."""
    return OffsetFetchRequest(
        group_id=group_id,
        topics=[OffsetFetchRequestTopic(topic, list(parts)) for topic, parts in partitions],
    )


def offset_commit_request(
    group_id: str,
    partitions: Partitions,
    positions: dict[tuple[str, int], int],
    advance: int,
    *,
    generation_id_or_member_epoch: int,
    member_id: str,
    group_instance_id: str | None,
) -> OffsetCommitRequest:
    """Commit each of `partitions` `advance` past its position (0 when it has none), as if
    that many records had been consumed since; `positions` moves on to what is committed,
    so that the next commit goes on from there."""
    topics = []
    for topic, parts in partitions:
        committed = []
        for p in parts:
            offset = positions.get((topic, p), 0) + advance
            positions[(topic, p)] = offset
            committed.append(OffsetCommitRequestPartition(p, offset, committed_metadata=""))
        topics.append(OffsetCommitRequestTopic(topic, committed))
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id_or_member_epoch=generation_id_or_member_epoch,
        member_id=member_id,
        group_instance_id=group_instance_id,
        topics=topics,
    )
