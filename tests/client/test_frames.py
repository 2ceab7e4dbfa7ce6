"""The Heartbeat answer layouts the client's lane reads without the schema codec
(client/frames.py), against the schema codec itself. The compiled lane's own copy of the
reader is held to this one by the differential tests in test_lane.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord.client import frames
from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.messages import HeartbeatResponse

HEARTBEAT = ApiKey.HEARTBEAT
# The size of a Heartbeat answer in the layout read without the schema codec, by version.
COMMON_SIZE = {0: 6, 1: 10, 2: 10, 3: 10, 4: 12}

int16s = st.integers(-(2**15), 2**15 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
versions = st.integers(0, 4)


def answer(correlation_id: int, version: int, error: int, throttle: int = 0) -> bytes:
    return framing.encode_response(correlation_id, version, HeartbeatResponse(throttle, error))


def sized(inner: bytes) -> bytes:
    """A frame of `inner`, size prefix included."""
    return len(inner).to_bytes(4, "big") + inner


def with_header_tag(frame: bytes) -> bytes:
    """A v4 answer whose response header carries one tagged field (tag 0, 2 bytes)."""
    return sized(frame[4:8] + b"\x01\x00\x02hi" + frame[9:])


def with_body_tag(frame: bytes) -> bytes:
    """A v4 answer whose body carries one unknown tagged field (tag 5, 2 bytes)."""
    return sized(frame[4:-1] + b"\x01\x05\x02hi")


def error_of(frame: bytes, version: int, at: int = 0) -> int | None:
    """heartbeat_error on `frame` (size prefix included) placed `at` bytes into a buffer."""
    buf = bytearray(b"x" * at + frame)
    return frames.heartbeat_error(buf, at + 4, len(frame) - 4, version)


@pytest.mark.parametrize("version", range(5))
@pytest.mark.parametrize("error", [0, 27, -1, 2**15 - 1])
def test_answers_of_every_version_are_read(version: int, error: int) -> None:
    frame = answer(10, version, error, throttle=100)
    assert len(frame) - 4 == COMMON_SIZE[version]
    assert error_of(frame, version) == error == error_of(frame, version, at=7)
    assert framing.decode_response(HEARTBEAT, version, frame[4:])[1].error_code == error


@pytest.mark.parametrize(
    ("version", "frame", "decodes"),
    [
        pytest.param(0, sized(answer(7, 0, 3)[4:9]), False, id="v0-short"),
        pytest.param(1, answer(7, 0, 3), False, id="v1-short"),
        pytest.param(4, answer(7, 3, 3), False, id="v4-without-tag-sections"),
        pytest.param(0, sized(answer(7, 0, 3)[4:] + b"\0"), False, id="v0-byte-left-over"),
        pytest.param(3, answer(7, 4, 3), False, id="v3-bytes-left-over"),
        pytest.param(4, with_header_tag(answer(7, 4, 3)), True, id="v4-header-tag"),
        pytest.param(4, with_body_tag(answer(7, 4, 3)), True, id="v4-body-tag"),
        pytest.param(4, sized(answer(7, 4, 3)[4:-1] + b"\x01"), False, id="v4-missing-tag"),
    ],
)
def test_answers_in_another_layout_are_left_to_the_full_decoder(
    version: int, frame: bytes, decodes: bool
) -> None:
    assert error_of(frame, version) is None
    if decodes:
        assert framing.decode_response(HEARTBEAT, version, frame[4:])[1].error_code == 3
    else:
        with pytest.raises(ProtocolError):
            framing.decode_response(HEARTBEAT, version, frame[4:])


@st.composite
def heartbeat_answers(draw: st.DrawFn, version: int) -> bytes:
    """Answers to a Heartbeat of `version`: right, of another version, tagged, mutated."""
    kind = draw(st.sampled_from(["answer", "answer", "other version", "tagged", "mutated"]))
    cid = draw(int32s)
    if kind == "answer":
        return answer(cid, version, draw(int16s), draw(int32s))
    if kind == "other version":
        return answer(cid, draw(versions), draw(int16s), draw(int32s))
    if kind == "tagged":
        frame = answer(cid, 4, draw(int16s), draw(int32s))
        return draw(st.sampled_from([with_header_tag, with_body_tag]))(frame)
    inner = bytearray(answer(cid, version, draw(int16s), draw(int32s))[4:])
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        i = draw(st.integers(0, max(len(inner) - 1, 0)))
        if op == "flip" and inner:
            inner[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del inner[max(i, 4) :]
        elif op == "insert":
            inner[i:i] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and len(inner) > 4:
            del inner[max(i, 4)]
    return sized(bytes(inner))


@settings(max_examples=600)
@given(st.data(), versions)
def test_a_read_error_code_is_the_schema_codecs(data: st.DataObject, version: int) -> None:
    frame = data.draw(heartbeat_answers(version))
    error = error_of(frame, version, at=data.draw(st.integers(0, 5)))
    size = len(frame) - 4
    tags_empty = version < 4 or (frame[8:9] == b"\0" and frame[-1:] == b"\0")
    if size == COMMON_SIZE[version] and tags_empty:
        response = framing.decode_response(HEARTBEAT, version, frame[4:])[1]
        assert isinstance(response, HeartbeatResponse)
        assert error == response.error_code
    else:
        assert error is None


def test_sizes_that_cannot_be_frames_are_named() -> None:
    assert "at least its 4-byte correlation id" in str(frames.frame_size_error(3, 100))
    assert "larger than the 100-byte limit" in str(frames.frame_size_error(101, 100))
