"""Clients that do not read their answers, and a check of what they did receive.

A client that sends requests and then stops reading (a consumer paused by its own
collector, a stuck thread, a bug) must cost a server no more than its bounds and must
never be sent an answer cut by another. Tests and benchmarks of a server's flow control
need such clients and a strict reader of what arrived: every byte must parse as whole
frames in order, and a cut frame may only be the last bytes before the server closed.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass, field

from fastcoord.protocol.framing import encode_request
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import JoinGroupRequest, JoinGroupRequestProtocol, MetadataRequest
from fastcoord.protocol.schema import Request

CLIENT_ID = "fastcoord-stalling"
_SIZE = struct.Struct(">i")
_FRAME_START = struct.Struct(">ii")  # size, correlation id
MAX_FRAME = 1 << 26  # a larger size means the stream has lost its frames


def pipeline(requests: list[tuple[Request, int]], first_correlation: int = 1) -> bytes:
    """Request frames back to back, correlation ids counting up from `first_correlation`."""
    out = bytearray()
    for i, (request, version) in enumerate(requests):
        header = RequestHeader(request.API_KEY, version, first_correlation + i, CLIENT_ID)
        out += encode_request(header, request)
    return bytes(out)


def every_topic_metadata(count: int, version: int = 1) -> list[tuple[Request, int]]:
    """`count` Metadata requests for every topic: the largest answer a broker gives."""
    request = MetadataRequest(topics=[] if version == 0 else None)
    return [(request, version)] * count


def new_member_join(group_id: str) -> tuple[Request, int]:
    """A JoinGroup v3 of a new member: in a new group it waits out the initial delay."""
    request = JoinGroupRequest(
        group_id=group_id,
        session_timeout_ms=30_000,
        rebalance_timeout_ms=30_000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol("range", b"")],
    )
    return request, 3


@dataclass
class Received:
    """What a client read: the frames' correlation ids and sizes, in order, the bytes of a
    last frame that did not arrive whole, and whether the server closed the connection."""

    frames: list[tuple[int, int]] = field(default_factory=list)
    cut: int = 0
    closed: bool = False
    data: bytearray = field(default_factory=bytearray, repr=False)

    def feed(self, chunk: bytes) -> None:
        self.data += chunk
        pos = 0
        while len(self.data) - pos >= 8:
            size, correlation = _FRAME_START.unpack_from(self.data, pos)
            if not 4 <= size <= MAX_FRAME:
                raise AssertionError(f"frame of {size} bytes after {len(self.frames)} frames")
            if len(self.data) - pos - 4 < size:
                break
            self.frames.append((correlation, size))
            pos += 4 + size
        del self.data[:pos]
        self.cut = len(self.data)

    def check(self, first_correlation: int = 1) -> None:
        """Whole frames in order; a cut frame only at the end of a closed connection."""
        correlations = [c for c, _ in self.frames]
        expected = list(range(first_correlation, first_correlation + len(correlations)))
        if correlations != expected:
            wrong = next(
                i for i, (a, b) in enumerate(zip(correlations, expected, strict=True)) if a != b
            )
            raise AssertionError(
                f"frame {wrong} has correlation id {correlations[wrong]}, not {expected[wrong]}"
            )
        if self.cut and not self.closed:
            raise AssertionError(f"{self.cut} bytes of a frame, and the connection is open")


def read_all(
    sock: socket.socket,
    until: float,
    want: int | None = None,
    pace: tuple[int, float] | None = None,
) -> Received:
    """Read until the server closes, `want` frames have come, or time.monotonic() passes
    `until`; `pace` = (bytes, seconds) reads that many bytes at a time with a pause
    between, a slow reader that still reads."""
    got = Received()
    chunk = pace[0] if pace else 1 << 20
    while not got.closed and time.monotonic() < until:
        if want is not None and len(got.frames) >= want:
            break
        sock.settimeout(max(0.001, until - time.monotonic()))
        try:
            data = sock.recv(chunk)
        except TimeoutError:
            break
        except ConnectionResetError:
            got.closed = True
            break
        if not data:
            got.closed = True
            break
        got.feed(data)
        if pace:
            time.sleep(pace[1])
    return got
