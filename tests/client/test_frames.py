"""The client's heartbeat path: compiled against its twin, and both against the schema codec.

Runs whatever FASTCOORD_NO_EXTENSIONS says: both modules are imported directly. Answers
are built with framing.encode_response, so they are what a server sends.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord import _accel
from fastcoord._ext import client_frames as compiled  # type: ignore[attr-defined]
from fastcoord.client import frames as twin
from fastcoord.client import native
from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import HeartbeatRequest, HeartbeatResponse, LeaveGroupResponse

MODULES = [pytest.param(compiled, id="compiled"), pytest.param(twin, id="twin")]
HEARTBEAT = ApiKey.HEARTBEAT
# The size of a Heartbeat answer in the layout read without the schema codec, by version.
COMMON_SIZE = {0: 6, 1: 10, 2: 10, 3: 10, 4: 12}

int16s = st.integers(-(2**15), 2**15 - 1)
int32s = st.integers(-(2**31), 2**31 - 1)
versions = st.integers(0, 4)


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """The result, or the error's type and text, so that two implementations compare."""
    try:
        return ("ok", fn(*args))
    except (ProtocolError, ValueError, TypeError) as exc:
        return (type(exc).__name__, str(exc))


def answer(correlation_id: int, version: int, error: int, throttle: int = 0) -> bytes:
    return framing.encode_response(correlation_id, version, HeartbeatResponse(throttle, error))


def walk(
    module: ModuleType,
    buf: bytes,
    heartbeats: dict[int, object],
    version: int,
    pos: int = 0,
    max_size: int = 1 << 20,
) -> tuple[int, list[tuple[object, int]], list[tuple[int, bytes]]]:
    answered: list[tuple[object, int]] = []
    others: list[tuple[int, bytes]] = []
    end = module.read_answers(bytearray(buf), pos, max_size, heartbeats, version, answered, others)
    return end, answered, others


# -- read_answers on hand-made frames ---------------------------------------------------------


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("version", range(5))
def test_heartbeat_answers_of_every_version_are_read(module: ModuleType, version: int) -> None:
    leave = framing.encode_response(12, 3, LeaveGroupResponse(error_code=25))
    buf = (
        answer(10, version, 0, throttle=100)
        + leave
        + answer(11, version, 27)
        + answer(99, version, 22)  # not one of ours: the caller's to match
        + answer(13, version, -1, throttle=-5)
    )
    heartbeats: dict[int, object] = {10: "m10", 11: "m11", 13: "m13", 14: "m14"}
    end, answered, others = walk(module, buf, heartbeats, version)
    assert end == len(buf)
    assert answered == [("m10", 0), ("m11", 27), ("m13", -1)]
    assert heartbeats == {14: "m14"}
    assert others == [(12, leave[4:]), (99, answer(99, version, 22)[4:])]
    for (_, code), cid in zip(answered, (10, 11, 13), strict=True):
        frame = answer(cid, version, code, throttle=100 if cid == 10 else -5)[4:]
        assert framing.decode_response(HEARTBEAT, version, frame)[1].error_code == code


@pytest.mark.parametrize("module", MODULES)
def test_the_walk_starts_at_pos_and_stops_before_an_incomplete_frame(module: ModuleType) -> None:
    first, last = answer(1, 4, 0), answer(2, 4, 25)
    for cut in range(len(last)):
        buf = b"junk" + first + last[:cut]
        heartbeats: dict[int, object] = {1: "a", 2: "b"}
        end, answered, others = walk(module, buf, heartbeats, 4, pos=4)
        assert (end, answered, others, heartbeats) == (4 + len(first), [("a", 0)], [], {2: "b"})
    assert walk(module, b"junk", {}, 4, pos=4) == (4, [], [])


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("size", [-(2**31), -1, 0, 1, 2, 3, 13])
def test_sizes_that_cannot_be_frames_raise(module: ModuleType, size: int) -> None:
    """Below 4 a frame cannot hold its correlation id; above max_size it is refused. The
    frames before the bad one stay handled."""
    buf = answer(1, 4, 0) + size.to_bytes(4, "big", signed=True) + bytes(20)
    heartbeats: dict[int, object] = {1: "a", 0: "zero"}
    answered: list[tuple[object, int]] = []
    with pytest.raises(ProtocolError, match=rf"response frame of {size} bytes"):
        module.read_answers(bytearray(buf), 0, 12, heartbeats, 4, answered, [])
    assert (answered, heartbeats) == ([("a", 0)], {0: "zero"})
    # A frame of exactly max_size bytes is allowed.
    assert walk(module, answer(1, 4, 0), {1: "a"}, 4, max_size=12) == (16, [("a", 0)], [])


@pytest.mark.parametrize("module", MODULES)
def test_pos_outside_the_buffer_and_unknown_versions_are_refused(module: ModuleType) -> None:
    for pos in (-1, 5):
        with pytest.raises(ValueError, match="pos is outside buf"):
            module.read_answers(bytearray(4), pos, 100, {}, 4, [], [])
    with pytest.raises(ValueError, match="Heartbeat v-1"):
        module.read_answers(bytearray(4), 0, 100, {}, -1, [], [])


def sized(inner: bytes) -> bytes:
    """A frame of `inner`, size prefix included."""
    return len(inner).to_bytes(4, "big") + inner


def with_header_tag(frame: bytes) -> bytes:
    """A v4 answer whose response header carries one tagged field (tag 0, 2 bytes)."""
    return sized(frame[4:8] + b"\x01\x00\x02hi" + frame[9:])


def with_body_tag(frame: bytes) -> bytes:
    """A v4 answer whose body carries one unknown tagged field (tag 5, 2 bytes)."""
    return sized(frame[4:-1] + b"\x01\x05\x02hi")


@pytest.mark.parametrize("module", MODULES)
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
def test_heartbeat_answers_in_another_layout_are_left_to_the_full_decoder(
    module: ModuleType, version: int, frame: bytes, decodes: bool
) -> None:
    heartbeats: dict[int, object] = {7: "m", 8: "next"}
    buf = frame + answer(8, version, 0)
    assert walk(module, buf, heartbeats, version) == (len(buf), [("next", 0)], [(7, frame[4:])])
    assert heartbeats == {7: "m"}  # the caller's full decoder reads or refuses it
    if decodes:
        assert framing.decode_response(HEARTBEAT, version, frame[4:])[1].error_code == 3
    else:
        with pytest.raises(ProtocolError):
            framing.decode_response(HEARTBEAT, version, frame[4:])


@pytest.mark.parametrize("module", MODULES)
def test_a_correlation_id_answers_once(module: ModuleType) -> None:
    buf = answer(5, 2, 0) + answer(5, 2, 22) + answer(-5, 2, 0)
    end, answered, others = walk(module, buf, {5: "m", -5: "negative"}, 2)
    assert end == len(buf)
    assert answered == [("m", 0), ("negative", 0)]
    assert others == [(5, answer(5, 2, 22)[4:])]


class ResizingKey:
    """A dict key equal to correlation id 1 that grows the receive buffer when compared."""

    def __init__(self, buf: bytearray) -> None:
        self.buf = buf

    def __hash__(self) -> int:
        return hash(1)

    def __eq__(self, other: object) -> bool:
        self.buf.extend(bytes(1 << 16))
        return False


def test_the_compiled_walk_keeps_the_buffer_from_moving_under_it() -> None:
    buf = bytearray(answer(1, 4, 0) * 3)
    with pytest.raises(BufferError):
        compiled.read_answers(buf, 0, 100, {ResizingKey(buf): "x"}, 4, [], [])
    assert len(buf) == 48


# -- read_answers: compiled and twin on arbitrary buffers -------------------------------------

pool = st.integers(0, 12)  # few correlation ids, so that answers repeat and miss


@st.composite
def response_chunks(draw: st.DrawFn, version: int) -> bytes:
    kind = draw(
        st.sampled_from(
            ["answer"] * 6 + ["other version", "other", "tagged", "mutated", "mutated", "size"]
        )
    )
    cid = draw(int32s) if draw(st.integers(0, 3)) == 3 else draw(pool)
    if kind == "answer":
        return answer(cid, version, draw(int16s), draw(int32s))
    if kind == "other version":
        return answer(cid, draw(versions), draw(int16s), draw(int32s))
    if kind == "other":
        body = draw(st.binary(max_size=16))
        return sized(cid.to_bytes(4, "big", signed=True) + body)
    if kind == "tagged":
        frame = answer(cid, 4, draw(int16s), draw(int32s))
        return draw(st.sampled_from([with_header_tag, with_body_tag]))(frame)
    if kind == "mutated":
        inner = bytearray(answer(cid, version, draw(int16s), draw(int32s))[4:])
        for _ in range(draw(st.integers(1, 3))):
            op = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
            i = draw(st.integers(0, max(len(inner) - 1, 0)))
            if op == "flip" and inner:
                inner[i] ^= 1 << draw(st.integers(0, 7))
            elif op == "truncate":
                del inner[i:]
            elif op == "insert":
                inner[i:i] = draw(st.binary(min_size=1, max_size=4))
            elif op == "delete" and inner:
                del inner[i]
        return sized(bytes(inner))
    size = draw(st.one_of(st.integers(-2, 24), int32s))
    return size.to_bytes(4, "big", signed=True)  # a size prefix of any value


@st.composite
def answer_streams(draw: st.DrawFn) -> tuple[int, bytes, dict[int, object], int, int]:
    version = draw(versions)
    chunks = draw(st.lists(response_chunks(version), max_size=12))
    tail = draw(response_chunks(version))
    buf = b"".join(chunks) + tail[: draw(st.integers(0, len(tail)))]
    # Mostly the ids the answers carry, in any order, and a few that no answer carries.
    order = draw(st.permutations(range(13)))
    kept = draw(st.lists(st.booleans(), min_size=13, max_size=13))
    ids = [cid for cid, keep in zip(order, kept, strict=True) if keep]
    ids += draw(st.lists(int32s, max_size=2))
    heartbeats: dict[int, object] = {cid: ("member", cid) for cid in ids}
    pos = min(draw(st.sampled_from([0, 0, 0, 1, 4, 7])), len(buf))
    max_size = draw(st.sampled_from([1 << 20] * 4 + [12, 6]))
    return version, buf, heartbeats, pos, max_size


def expected_walk(
    buf: bytes, pos: int, max_size: int, heartbeats: dict[int, object], version: int
) -> tuple[tuple[str, Any], list[tuple[object, int]], list[tuple[int, bytes]]]:
    """The contract, with the error code of every answer taken from the schema codec."""
    answered: list[tuple[object, int]] = []
    others: list[tuple[int, bytes]] = []
    while len(buf) - pos >= 4:
        size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
        if not 4 <= size <= max_size:
            return ("ProtocolError", f"response frame of {size} bytes"), answered, others
        if len(buf) - pos - 4 < size:
            break
        frame = buf[pos + 4 : pos + 4 + size]
        pos += 4 + size
        cid = int.from_bytes(frame[:4], "big", signed=True)
        tags_empty = version < 4 or (frame[4:5] == b"\0" and frame[-1:] == b"\0")
        if cid in heartbeats and size == COMMON_SIZE[version] and tags_empty:
            response = framing.decode_response(HEARTBEAT, version, frame)[1]
            assert isinstance(response, HeartbeatResponse)
            answered.append((heartbeats.pop(cid), response.error_code))
        else:
            others.append((cid, frame))
    return ("ok", pos), answered, others


@settings(max_examples=600)
@given(answer_streams())
def test_read_answers_matches_the_twin_and_the_schema_codec(
    stream: tuple[int, bytes, dict[int, object], int, int],
) -> None:
    version, buf, heartbeats, pos, max_size = stream
    results = []
    for module in (compiled, twin):
        left = dict(heartbeats)
        answered: list[tuple[object, int]] = [("earlier", 0)]
        others: list[tuple[int, bytes]] = [(-1, b"earlier")]
        result = outcome(
            module.read_answers, bytearray(buf), pos, max_size, left, version, answered, others
        )
        results.append((result, answered, others, list(left.items())))
    assert results[0] == results[1]
    (status, detail), answered, others, left = results[1]
    left_expected = dict(heartbeats)
    expected, answered_expected, others_expected = expected_walk(
        buf, pos, max_size, left_expected, version
    )
    assert answered == [("earlier", 0), *answered_expected]
    assert others == [(-1, b"earlier"), *others_expected]
    assert left == list(left_expected.items())
    if status == "ok":
        assert (status, detail) == expected
    else:
        assert status == expected[0]
        assert expected[1] in detail


# -- heartbeat_frames -------------------------------------------------------------------------


def templates_of_every_version() -> list[bytes]:
    return [
        native.heartbeat_template(v, f"client-{v}", "group", 7 + v, f"member-{v}", instance)
        for v in range(5)
        for instance in ((None, "static") if v >= 3 else (None,))
    ]


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("first", [0, 1000, 2**31 - 8])
def test_heartbeat_frames_give_each_request_its_correlation_id(
    module: ModuleType, first: int
) -> None:
    templates = templates_of_every_version()
    out = module.heartbeat_frames(templates, first)
    assert type(out) is bytes and len(out) == sum(map(len, templates))
    pos = 0
    for i, template in enumerate(templates):
        frame = out[pos : pos + len(template)]
        pos += len(frame)
        assert frame[:8] + frame[12:] == template[:8] + template[12:]
        header, request, extra = framing.decode_request(frame[4:])
        expected_header, expected_request, _ = framing.decode_request(template[4:])
        assert header == RequestHeader(
            HEARTBEAT, expected_header.api_version, first + i, expected_header.client_id
        )
        assert (request, extra) == (expected_request, 0)
    assert module.heartbeat_frames([], -1) == b""


@pytest.mark.parametrize("module", MODULES)
def test_heartbeat_frames_refuse_ids_out_of_range_and_short_templates(module: ModuleType) -> None:
    template = native.heartbeat_template(4, "c", "g", 1, "m", None)
    with pytest.raises(ValueError, match=re.escape("correlation ids -1..0 leave")):
        module.heartbeat_frames([template, template], -1)
    with pytest.raises(ValueError, match=re.escape("correlation ids 2147483647..2147483648 leave")):
        module.heartbeat_frames([template, template], 2**31 - 1)
    assert len(module.heartbeat_frames([template], 2**31 - 1)) == len(template)
    with pytest.raises(ValueError, match="template 1 has 11 bytes"):
        module.heartbeat_frames([template, template[:11]], 0)
    with pytest.raises(TypeError, match="template 0 is bytearray"):
        module.heartbeat_frames([bytearray(template)], 0)


@settings(max_examples=400)
@given(
    st.lists(st.binary(min_size=10, max_size=40), max_size=8),
    st.one_of(st.integers(-3, 3), st.integers(2**31 - 10, 2**31 + 2), int32s),
)
def test_heartbeat_frames_match_the_twin(templates: list[bytes], first: int) -> None:
    result = outcome(compiled.heartbeat_frames, templates, first)
    assert result == outcome(twin.heartbeat_frames, templates, first)
    if result[0] == "ok":
        out = bytearray(b"".join(templates))
        at = 0
        for i, template in enumerate(templates):
            out[at + 8 : at + 12] = (first + i).to_bytes(4, "big")
            at += len(template)
        assert result[1] == bytes(out)


# -- native: the module the client uses, and its templates -----------------------------------


def test_the_client_uses_the_selected_module() -> None:
    assert native.client_frames is (twin if _accel.NO_EXTENSIONS else compiled)


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
