"""The compiled OffsetCommit codec against its pure-Python twin: same batches, bytes, errors.

Runs whatever FASTCOORD_NO_EXTENSIONS says: both modules are imported directly.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord._ext import commit_frames as compiled  # type: ignore[attr-defined]
from fastcoord.protocol import commit_frames as twin
from fastcoord.protocol import frames, framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.commit_batch import OffsetCommitAnswer, OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode, ProtocolError
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    HeartbeatRequest,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from tests.protocol.strategies import mutated, outcome, struct_strategy

versions = st.integers(0, 9)
int32s = st.integers(-(2**31), 2**31 - 1)
# Names and metadata as clients send them, and some that are not: long, empty, non-ASCII.
texts = st.one_of(st.sampled_from(["", "orders", "t-1", "grüße"]), st.text(max_size=40))


@st.composite
def commit_requests(draw: st.DrawFn, version: int) -> OffsetCommitRequest:
    """Requests like clients send (many partitions, repeated topics), or anything at all."""
    if draw(st.booleans()):
        return draw(struct_strategy(OffsetCommitRequest, version))
    partition = st.builds(
        OffsetCommitRequestPartition,
        partition_index=st.one_of(st.integers(0, 300), int32s),
        committed_offset=st.one_of(st.integers(-1, 10**6), st.integers(-(2**63), 2**63 - 1)),
        committed_leader_epoch=st.one_of(st.just(-1), int32s),
        commit_timestamp=st.just(-1),
        committed_metadata=st.one_of(st.none(), st.just(""), texts),
    )
    topics = st.lists(
        st.builds(OffsetCommitRequestTopic, name=texts, partitions=st.lists(partition, max_size=8)),
        max_size=6,
    )
    return OffsetCommitRequest(
        group_id=draw(texts),
        generation_id_or_member_epoch=draw(st.one_of(st.just(-1), int32s)),
        member_id=draw(texts),
        group_instance_id=draw(st.one_of(st.none(), texts)) if version >= 7 else None,
        topics=draw(topics),
    )


@st.composite
def commit_frames(draw: st.DrawFn) -> bytes:
    version = draw(versions)
    header = RequestHeader(
        ApiKey.OFFSET_COMMIT, version, draw(int32s), draw(st.one_of(st.none(), texts))
    )
    return framing.encode_request(header, draw(commit_requests(version)))[4:]


@settings(max_examples=500)
@given(commit_frames())
def test_valid_commit_requests_decode_the_same(frame: bytes) -> None:
    result = outcome(compiled.decode_offset_commit, frame)
    assert result[0] == "ok"
    assert result == outcome(twin.decode_offset_commit, frame)
    _, batch, extra = result[1]
    assert type(batch) is OffsetCommitBatch and extra == 0
    assert batch.ends == array("i", sorted(batch.ends))
    assert len(batch.ends) == len(batch.topics)
    assert len(batch.partitions) == len(batch.offsets) == len(batch.leader_epochs)
    assert batch.metadata is None or (len(batch.metadata) == len(batch) and any(batch.metadata))


@settings(max_examples=300)
@given(commit_frames(), st.binary(min_size=1, max_size=8))
def test_bytes_after_a_commit_are_counted_the_same(frame: bytes, extra: bytes) -> None:
    header, batch, none = twin.decode_offset_commit(frame)
    assert none == 0
    expected = ("ok", (header, batch, len(extra)))
    assert outcome(compiled.decode_offset_commit, frame + extra) == expected
    assert outcome(twin.decode_offset_commit, frame + extra) == expected


@settings(max_examples=1000)
@given(st.one_of(mutated(commit_frames()), st.binary(max_size=60)))
def test_malformed_commit_requests_fail_the_same(frame: bytes) -> None:
    assert outcome(compiled.decode_offset_commit, frame) == outcome(
        twin.decode_offset_commit, frame
    )


def test_other_frames_decode_as_decode_request_does() -> None:
    frame = framing.encode_request(
        RequestHeader(ApiKey.HEARTBEAT, 3, 1, "c"), HeartbeatRequest("g", 2, "m", "i")
    )[4:]
    for module in (compiled, twin):
        assert module.decode_offset_commit(frame) == framing.decode_request(frame)
        assert module.decode_offset_commit(bytearray(frame)) == framing.decode_request(frame)


def test_a_batch_keeps_what_kafka_keeps_of_each_version() -> None:
    """Fields the version does not have take Kafka's defaults; null metadata is "", and a
    batch whose metadata is all empty keeps none."""
    request = OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=4,
        member_id="m",
        group_instance_id="i",
        retention_time_ms=99,
        topics=[
            OffsetCommitRequestTopic(
                "t",
                [
                    OffsetCommitRequestPartition(0, 10, 3, 5, None),
                    OffsetCommitRequestPartition(1, 11, 3, 5, ""),
                ],
            ),
            OffsetCommitRequestTopic("u", []),
            OffsetCommitRequestTopic("t", [OffsetCommitRequestPartition(0, 12, 3, 5, "meta")]),
        ],
    )
    for version in range(10):
        frame = framing.encode_request(
            RequestHeader(ApiKey.OFFSET_COMMIT, version, 1, "c"), request
        )
        for module in (compiled, twin):
            _, batch, _ = module.decode_offset_commit(frame[4:])
            assert batch.group_id == "g"
            assert (batch.generation_id, batch.member_id) == (
                (4, "m") if version >= 1 else (-1, "")
            )
            assert batch.group_instance_id == ("i" if version >= 7 else None)
            assert batch.topics == ["t", "u", "t"] and list(batch.ends) == [2, 2, 3]
            assert list(batch.partitions) == [0, 1, 0] and list(batch.offsets) == [10, 11, 12]
            assert list(batch.leader_epochs) == ([3, 3, 3] if version >= 6 else [-1, -1, -1])
            assert batch.metadata == ["", "", "meta"]
    empty = OffsetCommitRequest(
        group_id="g", topics=[OffsetCommitRequestTopic("t", [OffsetCommitRequestPartition(0, 1)])]
    )
    frame = framing.encode_request(RequestHeader(ApiKey.OFFSET_COMMIT, 8, 1, "c"), empty)
    assert compiled.decode_offset_commit(frame[4:])[1].metadata is None


# -- the answer ------------------------------------------------------------------------------


@st.composite
def answers(draw: st.DrawFn) -> OffsetCommitAnswer:
    frame = draw(commit_frames())
    _, batch, _ = twin.decode_offset_commit(frame)
    codes = st.one_of(
        st.sampled_from([0, 12, 15, 16, 22, 25, 27]), st.integers(-(2**15), 2**15 - 1)
    )
    errors = None
    if draw(st.booleans()):
        errors = array("h", draw(st.lists(codes, min_size=len(batch), max_size=len(batch))))
    return OffsetCommitAnswer(batch, draw(codes), errors)


@settings(max_examples=500)
@given(st.integers(-(2**31), 2**31 - 1), versions, answers())
def test_answers_encode_the_same(
    correlation_id: int, version: int, answer: OffsetCommitAnswer
) -> None:
    frame = compiled.encode_offset_commit_response(correlation_id, version, answer)
    assert frame == twin.encode_offset_commit_response(correlation_id, version, answer)
    got_id, response = framing.decode_response(ApiKey.OFFSET_COMMIT, version, frame[4:])
    assert got_id == correlation_id and response == answer.to_response()


@settings(max_examples=200)
@given(
    st.integers(-(2**32), 2**32),
    st.integers(-2, 11),
    answers(),
    st.sampled_from(["code", "errors", "ends", "topics", "partitions"]),
)
def test_odd_answers_are_left_to_the_twin(
    correlation_id: int, version: int, answer: OffsetCommitAnswer, odd: str
) -> None:
    """Out of range, or not the shape a batch has: the compiled codec gives the twin's
    answer, or its error."""
    batch = answer.batch
    if odd == "code":
        answer = OffsetCommitAnswer(batch, 1 << 20)
    elif odd == "errors":
        answer = OffsetCommitAnswer(batch, 0, array("h", [0] * (len(batch) + 1)))
    elif odd == "ends":
        batch.ends.append(len(batch) + 1)
        batch.topics.append("x")
    elif odd == "topics":
        batch.topics.append("x")
    else:
        batch.partitions.append(1)

    def run(fn: Callable[..., bytes]) -> tuple[str, Any]:
        try:
            return ("ok", fn(correlation_id, version, answer))
        except (ProtocolError, ValueError, IndexError) as exc:
            return ("error", type(exc).__name__)

    assert run(compiled.encode_offset_commit_response) == run(twin.encode_offset_commit_response)


def test_an_answer_is_the_response_kafka_would_give() -> None:
    _, batch, _ = twin.decode_offset_commit(
        framing.encode_request(
            RequestHeader(ApiKey.OFFSET_COMMIT, 8, 1, "c"),
            OffsetCommitRequest(
                group_id="g",
                topics=[
                    OffsetCommitRequestTopic(
                        "t",
                        [OffsetCommitRequestPartition(0, 1), OffsetCommitRequestPartition(3, 1)],
                    )
                ],
            ),
        )[4:]
    )
    answer = OffsetCommitAnswer(batch, ErrorCode.NONE, array("h", [0, 12]))
    frame = compiled.encode_offset_commit_response(7, 8, answer)
    # size, correlation id, header tags, throttle, 1 topic ("t"), 2 partitions, body tags
    assert frame == (
        b"\0\0\0\x1d\0\0\0\x07\0\0\0\0\0\x02\x02t\x03"
        + b"\0\0\0\0\0\0\0"
        + b"\0\0\0\x03\0\x0c\0"
        + b"\0\0"
    )
    response = framing.decode_response(ApiKey.OFFSET_COMMIT, 8, frame[4:])[1]
    assert isinstance(response, OffsetCommitResponse)
    assert [(p.partition_index, p.error_code) for p in response.topics[0].partitions] == [
        (0, 0),
        (3, 12),
    ]
    assert answer.topics == response.topics


def test_front_door_uses_the_selected_module_for_commits() -> None:
    request = OffsetCommitRequest(
        group_id="g", topics=[OffsetCommitRequestTopic("t", [OffsetCommitRequestPartition(0, 1)])]
    )
    frame = framing.encode_request(RequestHeader(ApiKey.OFFSET_COMMIT, 9, 1, "c"), request)[4:]
    header, batch, extra = frames.decode_request(frame)
    assert (header, batch, extra) == twin.decode_offset_commit(frame)
    assert isinstance(batch, OffsetCommitBatch)
    answer = OffsetCommitAnswer(batch, 0)
    assert frames.encode_response(1, 9, answer) == twin.encode_offset_commit_response(1, 9, answer)
