"""OffsetCommit in columns: the request as arrays, and its answer by reference to it.

An OffsetCommit request commits tens to thousands of offsets, and decoding each partition
into its own Struct, then building a response Struct per partition, cost more than all the
rest of a commit. The server therefore decodes an OffsetCommit request into an
`OffsetCommitBatch`: the group's fields, then one array per partition field, in request
order. The core validates it once, the log frames its records from the arrays, the group's
offset table takes them in one call, and the answer is an `OffsetCommitAnswer`: the batch
and the error code of every partition, encoded straight to the wire.

Both are plain data. The compiled codec (_ext/commit_frames.pyx) and its twin
(protocol/commit_frames.py) build them; `from_request` builds one from the schema-driven
codec's OffsetCommitRequest, with the same version rules.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import ClassVar

import msgspec

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

# Fields that exist from these versions on (OffsetCommitRequest.json); before, Kafka's
# defaults stand: generation -1, member id "", no instance id, leader epoch -1.
FIRST_GENERATION = 1
FIRST_LEADER_EPOCH = 6
FIRST_INSTANCE_ID = 7


class OffsetCommitBatch(msgspec.Struct, gc=False):
    """An OffsetCommit request: partition k is of topic entry i where
    ends[i - 1] <= k < ends[i]. A topic may appear in more than one entry, and a partition
    more than once, as the client sent them. Null metadata is "" (Kafka's NoMetadata).
    v1's per-partition commit timestamp and v2-4's retention time are not kept: since
    KIP-211 the broker's retention applies."""

    API_KEY: ClassVar[int] = ApiKey.OFFSET_COMMIT

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    topics: list[str]  # topic entries, in request order
    ends: array[int]  # 'i': the end of each topic entry's partitions
    partitions: array[int]  # 'i'
    offsets: array[int]  # 'q'
    leader_epochs: array[int]  # 'i'
    metadata: list[str] | None  # None when every partition's metadata is empty

    def __len__(self) -> int:
        return len(self.partitions)

    def rows(self) -> Iterator[tuple[str, int, int, int, str]]:
        """(topic, partition, offset, leader epoch, metadata) of each partition, in order."""
        k = 0
        for topic, end in zip(self.topics, self.ends, strict=True):
            while k < end:
                metadata = "" if self.metadata is None else self.metadata[k]
                yield topic, self.partitions[k], self.offsets[k], self.leader_epochs[k], metadata
                k += 1

    def entry_of(self) -> list[int]:
        """The topic entry of each partition."""
        out: list[int] = []
        start = 0
        for i, end in enumerate(self.ends):
            out.extend([i] * (end - start))
            start = end
        return out

    def select(self, keep: list[int]) -> OffsetCommitBatch:
        """A batch of the partitions `keep` (indexes, ascending), each in its topic entry."""
        entry_of = self.entry_of()
        entries: list[int] = []
        ends = array("i")
        for n, k in enumerate(keep):
            if not entries or entries[-1] != entry_of[k]:
                entries.append(entry_of[k])
                ends.append(n)
            ends[-1] = n + 1
        return OffsetCommitBatch(
            self.group_id,
            self.generation_id,
            self.member_id,
            self.group_instance_id,
            [self.topics[i] for i in entries],
            ends,
            array("i", [self.partitions[k] for k in keep]),
            array("q", [self.offsets[k] for k in keep]),
            array("i", [self.leader_epochs[k] for k in keep]),
            None if self.metadata is None else _metadata([self.metadata[k] for k in keep]),
        )

    @classmethod
    def from_request(cls, req: OffsetCommitRequest, version: int) -> OffsetCommitBatch:
        """The batch of a decoded request of `version`: fields the version does not have
        take Kafka's defaults, whatever the object holds."""
        topics: list[str] = []
        ends = array("i")
        partitions = array("i")
        offsets = array("q")
        epochs = array("i")
        metadata: list[str] = []
        for topic in req.topics:
            topics.append(topic.name)
            for p in topic.partitions:
                partitions.append(p.partition_index)
                offsets.append(p.committed_offset)
                epochs.append(p.committed_leader_epoch if version >= FIRST_LEADER_EPOCH else -1)
                metadata.append(p.committed_metadata or "")
            ends.append(len(partitions))
        return cls(
            req.group_id,
            req.generation_id_or_member_epoch if version >= FIRST_GENERATION else -1,
            req.member_id if version >= FIRST_GENERATION else "",
            req.group_instance_id if version >= FIRST_INSTANCE_ID else None,
            topics,
            ends,
            partitions,
            offsets,
            epochs,
            _metadata(metadata),
        )


def _metadata(metadata: list[str]) -> list[str] | None:
    return metadata if any(metadata) else None


class OffsetCommitAnswer(msgspec.Struct, frozen=True, gc=False):
    """The response to `batch`: every partition's error is `error_code`, or errors[k]
    when `errors` (an 'h' array) is given. Encoded to the wire as the OffsetCommitResponse
    that `to_response` builds."""

    API_KEY: ClassVar[int] = ApiKey.OFFSET_COMMIT

    batch: OffsetCommitBatch
    error_code: int = 0
    errors: array[int] | None = None

    def error_of(self, k: int) -> int:
        return self.error_code if self.errors is None else self.errors[k]

    def to_response(self) -> OffsetCommitResponse:
        batch = self.batch
        topics = []
        start = 0
        for name, end in zip(batch.topics, batch.ends, strict=True):
            topics.append(
                OffsetCommitResponseTopic(
                    name,
                    [
                        OffsetCommitResponsePartition(batch.partitions[k], self.error_of(k))
                        for k in range(start, end)
                    ],
                )
            )
            start = end
        return OffsetCommitResponse(topics=topics)

    @property
    def topics(self) -> list[OffsetCommitResponseTopic]:
        """The response's topics, as OffsetCommitResponse has them."""
        return self.to_response().topics

    @property
    def throttle_time_ms(self) -> int:
        return 0
