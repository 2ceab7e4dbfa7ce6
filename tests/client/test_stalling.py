"""The frame reader that flow-control tests trust catches every way a stream can break."""

from __future__ import annotations

import struct

import pytest

from fastcoord.client.stalling import Received


def frame(correlation: int, body: bytes) -> bytes:
    return struct.pack(">ii", 4 + len(body), correlation) + body


def test_whole_frames_in_order_pass_in_any_chunking() -> None:
    stream = frame(1, b"ab") + frame(2, b"") + frame(3, b"x" * 1000)
    for step in (1, 3, 7, len(stream)):
        got = Received()
        for i in range(0, len(stream), step):
            got.feed(stream[i : i + step])
        got.check()
        assert got.frames == [(1, 6), (2, 4), (3, 1004)] and got.cut == 0


def test_a_frame_out_of_order_is_caught() -> None:
    got = Received()
    got.feed(frame(1, b"a") + frame(3, b"b"))
    with pytest.raises(AssertionError, match="correlation id 3, not 2"):
        got.check()


def test_a_frame_written_inside_another_is_caught() -> None:
    got = Received()
    # The first answer cut after 3 bytes of its body, the next ones written after the cut.
    with pytest.raises(AssertionError):
        got.feed(frame(1, b"\xff" * 6)[:11] + frame(2, b"\xff" * 6) + frame(3, b"\xff" * 6))
        got.closed = True
        got.check()


def test_a_cut_frame_is_allowed_only_before_a_close() -> None:
    got = Received()
    got.feed(frame(1, b"ab") + frame(2, b"abcdef")[:9])
    with pytest.raises(AssertionError, match="connection is open"):
        got.check()
    got.closed = True
    got.check()
    assert got.frames == [(1, 6)] and got.cut == 9


def test_a_size_too_small_for_a_header_is_caught() -> None:
    with pytest.raises(AssertionError, match="frame of 2 bytes"):
        Received().feed(b"\0\0\0\x02ab\0\0")
