"""Durable records: what the coordinator writes to its log, and replays to rebuild itself.

The same keys and meaning as Kafka's __consumer_offsets (GroupMetadataManager):
an offset commit keyed by (group, topic, partition), and a group's metadata keyed by group,
each with a value or None (a tombstone: the key is deleted). Durable state changes only by
replaying these records (Coordinator.replay); a handler that changes durable state returns
records and the state changes when they are durable. msgspec's array-like encoding keeps
them compact on disk (storage/segment.py frames them).

An OffsetCommit's records travel together as one OffsetCommits: the request's batch, which
stands for one OffsetCommitKey/OffsetCommitValue record per partition. The log holds those
records one by one, exactly as if they had been written singly.
"""

from __future__ import annotations

import msgspec

from fastcoord.protocol.commit_batch import OffsetCommitBatch


class OffsetCommitKey(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=1):
    group: str
    topic: str
    partition: int


class OffsetCommitValue(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=1):
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


class GroupMetadataKey(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=2):
    group: str


class MemberMetadataValue(msgspec.Struct, frozen=True, array_like=True, gc=False):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the chosen protocol's metadata
    assignment: bytes


class GroupMetadataValue(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=2):
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadataValue, ...]


RecordKey = OffsetCommitKey | GroupMetadataKey
RecordValue = OffsetCommitValue | GroupMetadataValue


class Record(msgspec.Struct, frozen=True, array_like=True, gc=False):
    key: RecordKey
    value: RecordValue | None  # None: tombstone

    @property
    def group_id(self) -> str:
        return self.key.group


class OffsetCommits(msgspec.Struct, frozen=True, gc=False):
    """Every partition of `batch` committed by group `group_id` at `commit_timestamp`: one
    record per partition, in the batch's order, without building them (`records()` does,
    for tests and the storage's twin)."""

    group_id: str
    batch: OffsetCommitBatch
    commit_timestamp: int

    def __len__(self) -> int:
        return len(self.batch.partitions)

    def records(self) -> list[Record]:
        group, timestamp = self.group_id, self.commit_timestamp
        return [
            Record(
                OffsetCommitKey(group, topic, partition),
                OffsetCommitValue(offset, leader_epoch, metadata, timestamp),
            )
            for topic, partition, offset, leader_epoch, metadata in self.batch.rows()
        ]


# What a Result asks to be written: single records, or an OffsetCommit's together.
LogEntry = Record | OffsetCommits
