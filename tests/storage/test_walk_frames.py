"""walk_frames, compiled against its twin: the same spans, stop and reason for any bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord._ext import crc32c as compiled  # type: ignore[attr-defined]
from fastcoord.storage import crc32c as twin


def frame(payload: bytes) -> bytes:
    return struct.pack(">II", len(payload), twin.crc32c(payload)) + payload


@st.composite
def segments(draw: st.DrawFn) -> bytes:
    data = bytearray(b"".join(frame(p) for p in draw(st.lists(st.binary(max_size=40)))))
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["flip", "truncate", "append"]))
        if op == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del data[draw(st.integers(0, len(data))) :]
        else:
            data += draw(st.binary(max_size=12))
    return bytes(data)


@settings(max_examples=500)
@given(segments(), st.integers(0, 30), st.sampled_from([8, 40, 0x7FFFFFFF]))
def test_the_same_walk(data: bytes, start: int, max_payload: int) -> None:
    start = min(start, len(data))
    assert compiled.walk_frames(data, start, max_payload) == twin.walk_frames(
        data, start, max_payload
    )


def test_good_frames_are_walked_to_the_end() -> None:
    payloads = [b"", b"a", b"record" * 100]
    data = b"".join(frame(p) for p in payloads)
    for module in (compiled, twin):
        spans, stop, reason = module.walk_frames(data)
        assert [data[a:b] for a, b in spans] == payloads
        assert (stop, reason) == (len(data), None)
        with pytest.raises(ValueError, match="outside"):
            module.walk_frames(data, len(data) + 1)
