"""A group's committed offsets, (topic, partition) -> OffsetCommitValue: the pure-Python
twin of _ext/offset_table.pyx.

A commit of a hundred partitions is replayed into its group's table when it is durable;
building a key tuple and a value Struct per partition, and a dictionary entry for each, was
most of what a commit cost after its decoding. The compiled table keeps each topic's
offsets in C arrays and builds an OffsetCommitValue only when one is read (OffsetFetch,
retention, snapshots), which are far rarer than commits. This twin is the reference:
a dictionary, and the same answers. Reads list keys in (topic, partition) order.
"""

from __future__ import annotations

from collections.abc import Iterator

from fastcoord.core.records import OffsetCommitValue
from fastcoord.protocol.commit_batch import OffsetCommitBatch

TopicPartition = tuple[str, int]


class OffsetTable:
    def __init__(self) -> None:
        self._offsets: dict[TopicPartition, OffsetCommitValue] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def __contains__(self, tp: object) -> bool:
        return tp in self._offsets

    def __iter__(self) -> Iterator[TopicPartition]:
        """The keys, in (topic, partition) order."""
        return iter(sorted(self._offsets))

    def get(self, tp: TopicPartition) -> OffsetCommitValue | None:
        return self._offsets.get(tp)

    def put(self, topic: str, partition: int, value: OffsetCommitValue) -> None:
        """The offset of (topic, partition) is `value` (replaying one record)."""
        self._offsets[(topic, partition)] = value

    def pop(self, topic: str, partition: int) -> OffsetCommitValue | None:
        """Remove the offset of (topic, partition); returns it, or None if there was none."""
        return self._offsets.pop((topic, partition), None)

    def items(self) -> list[tuple[TopicPartition, OffsetCommitValue]]:
        """Every (key, value), in (topic, partition) order."""
        return sorted(self._offsets.items())

    def replay_commits(self, batch: OffsetCommitBatch, commit_timestamp: int) -> None:
        """Every partition of `batch` committed at `commit_timestamp`, in order (a partition
        named twice ends with its last offset)."""
        offsets = self._offsets
        for topic, partition, offset, leader_epoch, metadata in batch.rows():
            offsets[(topic, partition)] = OffsetCommitValue(
                offset, leader_epoch, metadata, commit_timestamp
            )
