"""The templates the client's lane copies, against the schema codec, and the lane the
client uses (compiled, or the twin with FASTCOORD_NO_EXTENSIONS=1)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord import _accel
from fastcoord._ext import client_lane as compiled  # type: ignore[attr-defined]
from fastcoord.client import lane as twin
from fastcoord.client import native
from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    HeartbeatRequest,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

HEARTBEAT, COMMIT = ApiKey.HEARTBEAT, ApiKey.OFFSET_COMMIT


def test_the_client_uses_the_selected_lane() -> None:
    assert native.make_lane is (twin.Lane if _accel.NO_EXTENSIONS else compiled.Lane)


@pytest.mark.parametrize("version", range(5))
def test_heartbeat_templates_are_heartbeat_requests_with_correlation_id_zero(version: int) -> None:
    instance = "static-1" if version >= 3 else None
    template = native.heartbeat_template(version, "rdkafka", "g", 3, "m-1", instance)
    header, request, extra = framing.decode_request(template[4:])
    assert header == RequestHeader(HEARTBEAT, version, 0, "rdkafka")
    assert (request, extra) == (HeartbeatRequest("g", 3, "m-1", instance), 0)
    assert int.from_bytes(template[:4], "big") == len(template) - 4


def test_a_static_member_template_needs_v3() -> None:
    with pytest.raises(ValueError, match="Heartbeat v2 cannot carry group_instance_id"):
        native.heartbeat_template(2, "c", "g", 1, "m", "static")


names = st.text(st.characters(codec="utf-8"), max_size=12)
commits = st.builds(
    lambda group, member, instance, generation, topics: OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=instance,
        topics=[
            OffsetCommitRequestTopic(
                name,
                [
                    OffsetCommitRequestPartition(p, offset, committed_metadata=metadata)
                    for p, offset, metadata in partitions
                ],
            )
            for name, partitions in topics
        ],
    ),
    names,
    names,
    st.one_of(st.none(), names),
    st.integers(-1, 2**31 - 1),
    st.lists(
        st.tuples(
            names,
            st.lists(
                st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**62), names), max_size=4
            ),
        ),
        max_size=3,
    ),
)


@settings(max_examples=300)
@given(commits, st.sampled_from([2, 5, 7, 8, 9]), st.integers(0, 1000))
def test_commit_templates_place_every_offset(
    request: OffsetCommitRequest, version: int, advance: int
) -> None:
    if version < 7:
        request.group_instance_id = None  # not in the versions before static membership
    frame, offsets_at = native.commit_template(version, "client", request)
    assert frame == framing.encode_request(RequestHeader(COMMIT, version, 0, "client"), request)
    offsets = native.commit_offsets(request)
    assert len(offsets_at) == len(offsets)
    # Each place holds its partition's offset; writing others there gives their request.
    patched = bytearray(frame)
    for at, offset in zip(offsets_at, offsets, strict=True):
        assert struct.unpack_from(">q", frame, at)[0] == offset
        struct.pack_into(">q", patched, at, offset + advance)
    _, decoded, _ = framing.decode_request(bytes(patched[4:]))
    assert native.commit_offsets(decoded) == [o + advance for o in offsets]
    assert decoded.topics == [
        OffsetCommitRequestTopic(
            t.name,
            [
                OffsetCommitRequestPartition(
                    p.partition_index,
                    p.committed_offset + advance,
                    p.committed_leader_epoch,
                    p.commit_timestamp,
                    p.committed_metadata,
                )
                for p in t.partitions
            ],
        )
        for t in request.topics
    ]


def test_a_template_whose_bytes_hide_an_offset_is_refused() -> None:
    """No string can hold the mark (its bytes are not UTF-8), but a number can: v2's
    retention time, say. The mark is then found twice, and the template refused."""
    request = OffsetCommitRequest(
        group_id="g",
        retention_time_ms=0x7E_C0_FF_EE_5A << 24,
        topics=[OffsetCommitRequestTopic("t", [OffsetCommitRequestPartition(0, 1)])],
    )
    with pytest.raises(ValueError, match="the offset of partition 0 cannot be placed"):
        native.commit_template(2, "c", request)
    assert native.commit_template(8, "c", request)[1]  # v8 has no retention time


@pytest.mark.parametrize("version", [2, 7, 8, 9])
def test_the_expected_commit_answer_is_a_full_success(version: int) -> None:
    request = OffsetCommitRequest(
        group_id="g",
        topics=[
            OffsetCommitRequestTopic("a", [OffsetCommitRequestPartition(3, 1)]),
            OffsetCommitRequestTopic("b", [OffsetCommitRequestPartition(0, 1)] * 2),
        ],
    )
    expected = native.commit_answer(version, request)
    _, response = framing.decode_response(COMMIT, version, (7).to_bytes(4, "big") + expected)
    assert response == OffsetCommitResponse(
        0,
        [
            OffsetCommitResponseTopic("a", [OffsetCommitResponsePartition(3, 0)]),
            OffsetCommitResponseTopic("b", [OffsetCommitResponsePartition(0, 0)] * 2),
        ],
    )
