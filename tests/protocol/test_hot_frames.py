"""The compiled hot-frame codec against its pure-Python twin: same objects, bytes and errors.

Runs whatever FASTCOORD_NO_EXTENSIONS says: both modules are imported directly.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord._ext import hot_frames as compiled  # type: ignore[attr-defined]
from fastcoord.protocol import frames, framing
from fastcoord.protocol import hot_frames as twin
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    HeartbeatRequest,
    HeartbeatResponse,
)
from tests.protocol.strategies import mutated, outcome, struct_strategy

versions = st.integers(0, 4)
int32s = st.integers(-(2**31), 2**31 - 1)


@st.composite
def heartbeat_frames(draw: st.DrawFn) -> bytes:
    version = draw(versions)
    header = RequestHeader(
        ApiKey.HEARTBEAT, version, draw(int32s), draw(st.one_of(st.none(), st.text(max_size=8)))
    )
    body = draw(struct_strategy(HeartbeatRequest, version))
    return framing.encode_request(header, body)[4:]


@st.composite
def padded_heartbeat_frames(draw: st.DrawFn) -> bytes:
    """A valid frame with bytes after its message, which Kafka ignores."""
    return draw(heartbeat_frames()) + draw(st.binary(min_size=1, max_size=8))


@settings(max_examples=400)
@given(heartbeat_frames())
def test_valid_heartbeat_requests_decode_the_same(frame: bytes) -> None:
    result = outcome(compiled.decode_heartbeat_request, frame)
    assert result[0] == "ok"
    assert result == outcome(twin.decode_heartbeat_request, frame)


@settings(max_examples=400)
@given(heartbeat_frames(), st.binary(min_size=1, max_size=8))
def test_bytes_after_a_heartbeat_are_counted_the_same(frame: bytes, extra: bytes) -> None:
    header, request, none = twin.decode_heartbeat_request(frame)
    assert none == 0
    expected = ("ok", (header, request, len(extra)))
    assert outcome(compiled.decode_heartbeat_request, frame + extra) == expected
    assert outcome(twin.decode_heartbeat_request, frame + extra) == expected


@settings(max_examples=1000)
@given(st.one_of(mutated(heartbeat_frames()), st.binary(max_size=40)))
def test_malformed_heartbeat_requests_fail_the_same(frame: bytes) -> None:
    assert outcome(compiled.decode_heartbeat_request, frame) == outcome(
        twin.decode_heartbeat_request, frame
    )


def test_tagged_fields_in_a_v4_frame_are_read_by_the_generic_path() -> None:
    header = RequestHeader(ApiKey.HEARTBEAT, 4, 9, "c")
    frame = framing.encode_request(header, HeartbeatRequest("g", 1, "m", None))[4:]
    # Replace the body's empty tagged-field section with one unknown tag of 2 bytes.
    tagged = frame[:-1] + b"\x01\x05\x02hi"
    assert compiled.decode_heartbeat_request(tagged) == twin.decode_heartbeat_request(tagged)
    assert compiled.decode_heartbeat_request(tagged)[1:] == (HeartbeatRequest("g", 1, "m", None), 0)
    # ...and with bytes after the message, the generic path counts them as the hot path does.
    assert compiled.decode_heartbeat_request(tagged + b"\0\0")[1:] == (
        HeartbeatRequest("g", 1, "m", None),
        2,
    )
    assert twin.decode_heartbeat_request(tagged + b"\0\0")[2] == 2


@settings(max_examples=400)
@given(
    st.integers(-(2**32), 2**32),
    st.integers(-2, 6),
    st.builds(
        HeartbeatResponse,
        throttle_time_ms=st.one_of(int32s, st.integers(-(2**40), 2**40)),
        error_code=st.one_of(st.integers(-(2**15), 2**15 - 1), st.integers(-(2**20), 2**20)),
    ),
)
def test_heartbeat_responses_encode_the_same(
    correlation_id: int, version: int, response: HeartbeatResponse
) -> None:
    assert outcome(compiled.encode_heartbeat_response, correlation_id, version, response) == (
        outcome(twin.encode_heartbeat_response, correlation_id, version, response)
    )


def test_heartbeat_response_layout_v4() -> None:
    frame = compiled.encode_heartbeat_response(7, 4, HeartbeatResponse(5, 27))
    # size, correlation id, header tags, throttle time, error code, body tags
    assert frame == b"\0\0\0\x0c" + b"\0\0\0\x07" + b"\0" + b"\0\0\0\x05" + b"\0\x1b" + b"\0"


def test_front_door_uses_the_selected_module_for_heartbeats() -> None:
    frame = framing.encode_request(
        RequestHeader(ApiKey.HEARTBEAT, 3, 1, "c"), HeartbeatRequest("g", 2, "m", "i")
    )[4:]
    assert frames.decode_request(frame) == twin.decode_heartbeat_request(frame)
    assert frames.encode_response(1, 3, HeartbeatResponse()) == twin.encode_heartbeat_response(
        1, 3, HeartbeatResponse()
    )


# -- answer_heartbeats: a run of heartbeats from the receive buffer to the send buffer --------


class Table:
    """Answers by member id, deterministically, and records every call (both loops must
    consult the table for the same frames, in the same order)."""

    consumer_heartbeat_interval_ms = 4321

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def heartbeat_id(self, group_id: str, member_id: str, generation: int, now_ms: int) -> int:
        self.calls.append((group_id, member_id, generation, now_ms))
        if member_id.startswith("x"):
            return -1  # the full path's business
        return (len(member_id) + generation) % 3 * 11  # any codes will do: 0, 11 or 22

    def consumer_heartbeat_id(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        client_id: str | None,
        client_host: str,
        now_ms: int,
    ) -> int:
        self.calls.append((group_id, member_id, epoch, client_id, client_host, now_ms))
        if member_id.startswith("x"):
            return -1
        return (len(member_id) + epoch) % 3  # 0 answers; anything else is the full path's


@st.composite
def consumer_heartbeat_frames(draw: st.DrawFn) -> bytes:
    """A steady member's ConsumerGroupHeartbeat (every optional field null), or any."""
    version = draw(st.integers(0, 1))
    header = RequestHeader(
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        version,
        draw(int32s),
        draw(st.one_of(st.none(), st.text(max_size=8))),
    )
    if draw(st.booleans()):
        body = ConsumerGroupHeartbeatRequest(
            group_id=draw(st.text(max_size=6)),
            member_id=draw(st.one_of(st.text(max_size=6), st.text(min_size=130, max_size=140))),
            member_epoch=draw(st.one_of(st.integers(-3, 5), int32s)),
        )
    else:
        body = draw(struct_strategy(ConsumerGroupHeartbeatRequest, version))
    return framing.encode_request(header, body)[4:]


@st.composite
def stream_frames(draw: st.DrawFn) -> bytes:
    kinds = ["heartbeat", "heartbeat", "heartbeat", "padded", "mutated", "other", "raw"]
    kinds += ["consumer", "consumer", "consumer", "consumer_padded", "consumer_mutated"]
    kind = draw(st.sampled_from(kinds))
    if kind == "consumer":
        frame = draw(consumer_heartbeat_frames())
    elif kind == "consumer_padded":
        frame = draw(consumer_heartbeat_frames()) + draw(st.binary(min_size=1, max_size=4))
    elif kind == "consumer_mutated":
        frame = draw(mutated(consumer_heartbeat_frames()))
    elif kind == "heartbeat":
        frame = draw(heartbeat_frames())
    elif kind == "padded":
        frame = draw(padded_heartbeat_frames())
    elif kind == "mutated":
        frame = draw(mutated(heartbeat_frames()))
    elif kind == "other":
        header = RequestHeader(ApiKey.API_VERSIONS, 0, draw(int32s), "c")
        frame = framing.encode_request(header, ApiVersionsRequest())[4:]
    else:
        return draw(st.binary(max_size=12))  # any size prefix at all
    return len(frame).to_bytes(4, "big") + frame


@settings(max_examples=300)
@given(st.lists(stream_frames(), max_size=12), st.integers(0, 8), st.integers(8, 200))
def test_answer_heartbeats_matches_the_twin(chunks: list[bytes], skip: int, max_size: int) -> None:
    buf = bytearray(b"".join(chunks))
    start = min(skip, len(buf))
    answers = []
    for module in (compiled, twin):
        table, out, trailing = Table(), bytearray(b"keep"), [(-1, -1)]
        result = outcome(
            module.answer_heartbeats, bytearray(buf), start, max_size, table, 7, out, trailing, "h"
        )
        answers.append((result, table.calls, bytes(out), trailing))
    assert answers[0] == answers[1]
    (status, (pos, count)), calls, out, trailing = answers[1]
    assert status == "ok" and start <= pos <= len(buf) and count <= len(calls)
    assert out.startswith(b"keep")
    assert trailing[0] == (-1, -1) and len(trailing) <= count + 1
    assert all(0 <= version <= 4 and extra > 0 for version, extra in trailing[1:])


def test_answer_heartbeats_stops_where_the_full_path_must_answer() -> None:
    def frame(member: str, version: int = 3, instance: str | None = None) -> bytes:
        header = RequestHeader(ApiKey.HEARTBEAT, version, len(member), "c")
        return framing.encode_request(header, HeartbeatRequest("g", 1, member, instance))

    for module in (compiled, twin):
        good = frame("a") + frame("bb", 4) + frame("ccc", 0)
        for stopper in (frame("xa"), frame("s", instance="static"), frame("a")[:-1]):
            table, out, trailing = Table(), bytearray(), []
            buf = bytearray(good + stopper + frame("a"))
            pos, count = module.answer_heartbeats(buf, 0, 1 << 20, table, 5, out, trailing)
            assert (pos, count, trailing) == (len(good), 3, [])
            expected = [
                frames.encode_response(len(m), v, HeartbeatResponse(error_code=code))
                for m, v, code in (("a", 3, 22), ("bb", 4, 0), ("ccc", 0, 11))
            ]
            assert bytes(out) == b"".join(expected)


def test_answer_heartbeats_answers_heartbeats_with_bytes_after_them() -> None:
    """As Kafka, the bytes after the message are ignored; each answered frame that had some
    is reported as (version, count), for the server's log."""

    def frame(member: str, version: int, extra: bytes = b"") -> bytes:
        header = RequestHeader(ApiKey.HEARTBEAT, version, len(member), "c")
        inner = framing.encode_request(header, HeartbeatRequest("g", 1, member, None))[4:]
        return (len(inner) + len(extra)).to_bytes(4, "big") + inner + extra

    expected = b"".join(
        frames.encode_response(len(m), v, HeartbeatResponse(error_code=code))
        for m, v, code in (("a", 3, 22), ("bb", 4, 0), ("ccc", 0, 11), ("dddd", 4, 22))
    )
    for module in (compiled, twin):
        buf = bytearray(
            frame("a", 3, b"\0\0\0")
            + frame("bb", 4)
            + frame("ccc", 0, b"\xff")
            + frame("dddd", 4, b"\x01\0\0\0\0")
            + frame("xa", 4, b"\0")  # the table leaves this one to the full path
        )
        table, out, trailing = Table(), bytearray(), []
        pos, count = module.answer_heartbeats(buf, 0, 1 << 20, table, 5, out, trailing)
        assert (len(buf) - pos, count) == (len(frame("xa", 4, b"\0")), 4)
        assert bytes(out) == expected
        assert trailing == [(3, 3), (0, 1), (4, 5)]


def test_consumer_heartbeats_that_change_nothing_are_answered_in_the_run() -> None:
    def frame(member: str, epoch: int = 3, version: int = 1, **fields: object) -> bytes:
        header = RequestHeader(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, len(member), "c")
        body = ConsumerGroupHeartbeatRequest("g", member, epoch, **fields)  # type: ignore[arg-type]
        return framing.encode_request(header, body)

    def answer(member: str, epoch: int, version: int) -> bytes:
        response = ConsumerGroupHeartbeatResponse(
            member_id=member, member_epoch=epoch, heartbeat_interval_ms=4321
        )
        return frames.encode_response(len(member), version, response)

    classic = framing.encode_request(
        RequestHeader(ApiKey.HEARTBEAT, 3, 9, "c"), HeartbeatRequest("g", 1, "bb", None)
    )
    long_id = "m" * 200  # its length takes two varint bytes
    good = frame("aa", 1) + classic + frame("bbbb", 2, 0) + frame(long_id, 1)
    expected = (
        answer("aa", 1, 1)
        + frames.encode_response(9, 3, HeartbeatResponse(error_code=0))
        + answer("bbbb", 2, 0)
        + answer(long_id, 1, 1)
    )
    stoppers = [
        frame("xa"),  # the table leaves it to the full path
        frame("a", 0),  # joining
        frame("a", -1),  # leaving
        frame("aa", 1, rebalance_timeout_ms=1000),
        frame("aa", 1, instance_id="static"),
        frame("aa", 1, server_assignor="range"),
        frame("aa", 1, subscribed_topic_names=[]),
        frame("aa", 1, subscribed_topic_regex="t.*"),
        frame("aa", 1, topic_partitions=[]),
        frame("aa", 1, rack_id="r"),
    ]
    for module in (compiled, twin):
        for stopper in stoppers:
            table, out, trailing = Table(), bytearray(), []
            buf = bytearray(good + stopper + frame("aa", 1))
            pos, count = module.answer_heartbeats(buf, 0, 1 << 20, table, 5, out, trailing, "/h")
            assert (pos, count, trailing) == (len(good), 4, []), (module, stopper)
            assert bytes(out) == expected
            assert table.calls[0] == ("g", "aa", 1, "c", "/h", 5)
        out = bytearray()
        pos, count = module.answer_heartbeats(
            bytearray(good + frame("aa", 1)[:-1]), 0, 1 << 20, Table(), 5, out, [], "/h"
        )
        assert (pos, count, bytes(out)) == (len(good), 4, expected)  # the last is incomplete
