"""The client's lane and poller, compiled or their twins with FASTCOORD_NO_EXTENSIONS=1,
and the request templates the lane copies.

A member's heartbeat request never changes between rebalances but for its correlation id
(a classic Heartbeat, or the consumer protocol's steady ConsumerGroupHeartbeat, which
carries its epoch and nothing else), and its OffsetCommit request but for the offsets, so
the client encodes each once, as a template, with the schema-driven codec, and notes where
the offsets are; the lane (_ext/client_lane.pyx, or its twin fastcoord/client/lane.py) then
only copies templates and reads answers. The answers the lane expects byte for byte (a
commit's, a ConsumerGroupHeartbeat's) are encoded here too, as a broker writes them. Both
lanes give the same answers; only speed differs.
"""

from __future__ import annotations

import struct
from typing import Protocol

from fastcoord import _accel
from fastcoord.client.lane import Heard, Int64Array, Unusual
from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    HeartbeatRequest,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

__all__ = [
    "Lane",
    "LaneType",
    "Poller",
    "commit_answer",
    "commit_offsets",
    "commit_template",
    "consumer_heartbeat_answer",
    "consumer_heartbeat_template",
    "heartbeat_template",
    "make_lane",
    "make_poller",
]

# Heartbeat v3 (KIP-345) added group.instance.id; an older request cannot carry it.
FIRST_STATIC_MEMBERSHIP = 3
# Marks an offset's place in a commit template: these 5 bytes, then the partition's place in
# the request. No string can hold them (0xC0 and 0xFF are not UTF-8); a number of the
# request could, and then the mark is found twice and the template refused.
_MARK = 0x7E_C0_FF_EE_5A << 24
_INT64 = struct.Struct(">q")


class Lane(Protocol):
    """The interface that _ext/client_lane.pyx and client/lane.py share."""

    @property
    def slots(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def received_at_ns(self) -> int: ...
    def start(
        self,
        slot: int,
        token: object,
        heartbeat: bytes,
        due_ms: int,
        interval_ms: int,
        answer: bytes | None = None,
    ) -> None: ...
    def confirmed(self, slot: int) -> int | None: ...
    def start_commits(
        self,
        slot: int,
        commit: bytes,
        offsets_at: list[int],
        offsets: list[int],
        answer: bytes,
        due_ms: int,
        interval_ms: int,
    ) -> None: ...
    def stop(self, slot: int) -> list[int]: ...
    def lost(self) -> list[object]: ...
    def due(self, now_ms: int, correlation_id: int, out: bytearray) -> int: ...
    def stamp(self, now_ns: int) -> None: ...
    def read(
        self,
        buf: bytearray,
        pos: int,
        max_size: int,
        heartbeat_version: int,
        now_ns: int,
        unusual: list[Unusual],
        others: list[tuple[int, bytes]],
    ) -> int: ...
    def claim(
        self,
        correlation_id: int,
        frame: bytes,
        heartbeat_version: int,
        now_ns: int,
        unusual: list[Unusual],
    ) -> bool: ...


class LaneType(Protocol):
    def __call__(self, slots: int, latency: Int64Array, commits: Int64Array) -> Lane: ...


class Poller(Protocol):
    """The interface of lane.Poller and its compiled twin."""

    def fileno(self) -> int: ...
    def __len__(self) -> int: ...
    def add(self, fd: int, lane: Lane, owner: object, heartbeat_version: int) -> None: ...
    def remove(self, fd: int) -> None: ...
    def close(self) -> None: ...
    def poll(self) -> list[Heard]: ...


class PollerType(Protocol):
    def __call__(self, max_size: int) -> Poller: ...


_module = _accel.load("client_lane", "fastcoord.client.lane")
make_lane: LaneType = _module.Lane
make_poller: PollerType = _module.Poller


def heartbeat_template(
    version: int,
    client_id: str,
    group_id: str,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
) -> bytes:
    """A member's Heartbeat request frame, size prefix included, with correlation id 0: the
    template the lane copies with a fresh id. ValueError for a static member's request
    below v3, which would silently drop its group instance id."""
    if group_instance_id is not None and version < FIRST_STATIC_MEMBERSHIP:
        raise ValueError(
            f"Heartbeat v{version} cannot carry group_instance_id "
            f"(static members need v{FIRST_STATIC_MEMBERSHIP}+)"
        )
    header = RequestHeader(ApiKey.HEARTBEAT, version, 0, client_id)
    request = HeartbeatRequest(group_id, generation_id, member_id, group_instance_id)
    return framing.encode_request(header, request)


def consumer_heartbeat_template(
    version: int, client_id: str, request: ConsumerGroupHeartbeatRequest
) -> bytes:
    """A member's steady ConsumerGroupHeartbeat (consumer_member.steady_heartbeat) as a
    frame, size prefix included, with correlation id 0: the template the lane copies."""
    header = RequestHeader(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, 0, client_id)
    return framing.encode_request(header, request)


def consumer_heartbeat_answer(
    version: int, member_id: str, member_epoch: int, heartbeat_interval_ms: int
) -> bytes:
    """The bytes after the correlation id of the answer every steady heartbeat of the member
    gets while nothing changes: no error, no message, its id and epoch, the interval it
    heartbeats at, no assignment, no throttle, no tagged fields."""
    response = ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        member_id=member_id,
        member_epoch=member_epoch,
        heartbeat_interval_ms=heartbeat_interval_ms,
        assignment=None,
    )
    return framing.encode_response(0, version, response)[8:]


def commit_template(
    version: int, client_id: str, request: OffsetCommitRequest
) -> tuple[bytes, list[int]]:
    """`request` as a frame, size prefix included, with correlation id 0, and where each
    partition's committed offset is in it (in the request's order of topics and
    partitions): the template the lane copies with fresh offsets. ValueError if the
    request's own bytes hide an offset's place."""
    marked = _with_offsets(request, [_MARK + i for i in range(_count(request))])
    header = RequestHeader(ApiKey.OFFSET_COMMIT, version, 0, client_id)
    probe = framing.encode_request(header, marked)
    offsets_at = []
    for i in range(_count(request)):
        mark = _INT64.pack(_MARK + i)
        at = probe.find(mark)
        if at < 0 or probe.find(mark, at + 1) >= 0:
            raise ValueError(f"the offset of partition {i} cannot be placed in the template")
        offsets_at.append(at)
    frame = framing.encode_request(header, request)
    if len(frame) != len(probe):
        raise ValueError("the template's length depends on its offsets")
    return frame, offsets_at


def commit_answer(version: int, request: OffsetCommitRequest) -> bytes:
    """The bytes after the correlation id of the answer that says every partition of
    `request` was committed, as a Kafka broker writes it (no throttle, no tagged fields)."""
    response = OffsetCommitResponse(
        throttle_time_ms=0,
        topics=[
            OffsetCommitResponseTopic(
                t.name, [OffsetCommitResponsePartition(p.partition_index, 0) for p in t.partitions]
            )
            for t in request.topics
        ],
    )
    return framing.encode_response(0, version, response)[8:]


def commit_offsets(request: OffsetCommitRequest) -> list[int]:
    """The committed offsets of `request`, in its order of topics and partitions."""
    return [p.committed_offset for t in request.topics for p in t.partitions]


def _count(request: OffsetCommitRequest) -> int:
    return sum(len(t.partitions) for t in request.topics)


def _with_offsets(request: OffsetCommitRequest, offsets: list[int]) -> OffsetCommitRequest:
    values = iter(offsets)
    topics = [
        OffsetCommitRequestTopic(
            t.name,
            [
                OffsetCommitRequestPartition(
                    p.partition_index,
                    next(values),
                    p.committed_leader_epoch,
                    p.commit_timestamp,
                    p.committed_metadata,
                )
                for p in t.partitions
            ],
        )
        for t in request.topics
    ]
    return OffsetCommitRequest(
        group_id=request.group_id,
        generation_id_or_member_epoch=request.generation_id_or_member_epoch,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id,
        retention_time_ms=request.retention_time_ms,
        topics=topics,
    )
