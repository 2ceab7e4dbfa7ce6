"""Shared, seeded inputs for the benchmarks. Append-only: changing an input changes history."""

from __future__ import annotations

import os
import random

from fastcoord.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    JoinGroupResponseMember,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

SEED = 20261121

# tests/test_benches.py runs every benchmark once with FASTCOORD_BENCH_SMOKE=1: sizes shrink
# so that the suite stays fast while the benchmark code itself is exercised.
SMOKE = os.environ.get("FASTCOORD_BENCH_SMOKE", "") not in ("", "0")


def scaled(n: int) -> int:
    """A benchmark size: n itself, or n / 1000 (at least 10) in the smoke test."""
    return max(10, n // 1000) if SMOKE else n


def member_id(i: int) -> str:
    return f"consumer-{i}-2f1c3b0a-6d3e-4f5a-9b7c-{i:012d}"


def subscription_metadata(rng: random.Random) -> bytes:
    # A consumer protocol subscription of a few topics: about 60 bytes, as real clients send.
    return bytes(rng.getrandbits(8) for _ in range(60))


def heartbeat_request() -> HeartbeatRequest:
    return HeartbeatRequest("load-test-group-0007", 42, member_id(7), None)


def join_group_request() -> JoinGroupRequest:
    rng = random.Random(SEED)
    return JoinGroupRequest(
        group_id="load-test-group-0007",
        session_timeout_ms=45000,
        rebalance_timeout_ms=300000,
        member_id=member_id(7),
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[
            JoinGroupRequestProtocol("range", subscription_metadata(rng)),
            JoinGroupRequestProtocol("cooperative-sticky", subscription_metadata(rng)),
        ],
    )


def join_group_leader_response(members: int) -> JoinGroupResponse:
    """What the leader receives: every member with its subscription."""
    rng = random.Random(SEED)
    return JoinGroupResponse(
        error_code=0,
        generation_id=12,
        protocol_type="consumer",
        protocol_name="range",
        leader=member_id(0),
        member_id=member_id(0),
        members=[
            JoinGroupResponseMember(member_id(i), None, subscription_metadata(rng))
            for i in range(members)
        ],
    )


def offset_commit_request(partitions: int) -> OffsetCommitRequest:
    topics = 4
    return OffsetCommitRequest(
        group_id="load-test-group-0007",
        generation_id_or_member_epoch=12,
        member_id=member_id(7),
        topics=[
            OffsetCommitRequestTopic(
                f"topic-{t}",
                [
                    OffsetCommitRequestPartition(p, 1_000_000 + p, -1, -1, "")
                    for p in range(t, partitions, topics)
                ],
            )
            for t in range(topics)
        ],
    )


def offset_commit_response(partitions: int) -> OffsetCommitResponse:
    topics = 4
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                f"topic-{t}",
                [OffsetCommitResponsePartition(p, 0) for p in range(t, partitions, topics)],
            )
            for t in range(topics)
        ]
    )
