"""Durable records: what the coordinator writes to its log, and replays to rebuild itself.

The same keys and meaning as Kafka's __consumer_offsets (GroupMetadataManager):
an offset commit keyed by (group, topic, partition), a classic group's metadata keyed by
group, and a consumer group's records (below), each with a value or None (a tombstone: the
key is deleted). Durable state changes only by
replaying these records (Coordinator.replay); a handler that changes durable state returns
records and the state changes when they are durable. msgspec's array-like encoding keeps
them compact on disk (storage/segment.py frames them).

An OffsetCommit's records travel together as one OffsetCommits: the request's batch, which
stands for one OffsetCommitKey/OffsetCommitValue record per partition. The log holds those
records one by one, exactly as if they had been written singly.
"""

from __future__ import annotations

import uuid
from typing import ClassVar

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


# A consumer group (the consumer group protocol) is written as Kafka writes it: the group
# epoch, each member's subscription, the target assignment (its epoch, and each member's
# share), and each member's current assignment, each under its own key, so that a
# heartbeat that changes one member writes only that member's records. The tags are
# Kafka's record types.


class TopicPartitions(msgspec.Struct, frozen=True, array_like=True, gc=False):
    topic_id: uuid.UUID
    partitions: tuple[int, ...]


class ConsumerGroupMetadataKey(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=3):
    group: str


class ConsumerGroupMetadataValue(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=3):
    epoch: int
    metadata_hash: int  # of the subscribed topics' ids and partition counts


class ConsumerGroupMemberMetadataKey(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=5):
    group: str
    member_id: str


class ConsumerGroupMemberMetadataValue(
    msgspec.Struct, frozen=True, array_like=True, gc=False, tag=5
):
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int


class ConsumerGroupTargetAssignmentMetadataKey(
    msgspec.Struct, frozen=True, array_like=True, gc=False, tag=6
):
    group: str


class ConsumerGroupTargetAssignmentMetadataValue(
    msgspec.Struct, frozen=True, array_like=True, gc=False, tag=6
):
    assignment_epoch: int


class ConsumerGroupTargetAssignmentMemberKey(
    msgspec.Struct, frozen=True, array_like=True, gc=False, tag=7
):
    group: str
    member_id: str


class ConsumerGroupTargetAssignmentMemberValue(
    msgspec.Struct, frozen=True, array_like=True, gc=False, tag=7
):
    topic_partitions: tuple[TopicPartitions, ...]


class ConsumerGroupCurrentMemberAssignmentKey(
    msgspec.Struct, frozen=True, array_like=True, gc=False, tag=8
):
    group: str
    member_id: str


class ConsumerGroupCurrentMemberAssignmentValue(
    msgspec.Struct, frozen=True, array_like=True, gc=False, tag=8
):
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState
    assigned_partitions: tuple[TopicPartitions, ...]
    partitions_pending_revocation: tuple[TopicPartitions, ...]


ConsumerGroupKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
)
ConsumerGroupValue = (
    ConsumerGroupMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
)
# The same, for isinstance.
CONSUMER_GROUP_KEYS = (
    ConsumerGroupMetadataKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey,
)
CONSUMER_GROUP_VALUES = (
    ConsumerGroupMetadataValue,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupCurrentMemberAssignmentValue,
)

# ACLs (CreateAcls, DeleteAcls) are written to the same log, one record per binding: the
# key is the binding, a value says it exists, a tombstone deletes it, so compaction keeps
# exactly the ACLs in force. Kafka keeps them in its metadata log instead; the tag is
# outside the coordinator's record types. They all go to offsets partition 0 (which the
# cluster's controller, its lowest node id, owns): the group they are routed by is "",
# whose Java hash is 0, so partition_for gives 0 whatever the partition count.
ACL_PARTITION = 0


class AclKey(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=64):
    group: ClassVar[str] = ""  # what Record.group_id routes by: partition 0

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


class AclValue(msgspec.Struct, frozen=True, array_like=True, gc=False, tag=64):
    """The ACL its key names exists."""


RecordKey = OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | AclKey
RecordValue = OffsetCommitValue | GroupMetadataValue | ConsumerGroupValue | AclValue


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
