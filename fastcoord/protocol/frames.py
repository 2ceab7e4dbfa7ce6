"""The protocol's front door: decode request frames and encode response frames.

Heartbeat frames, the most frequent by far, go through the hot-frame codec, and OffsetCommit
frames, the largest of the frequent ones, through the commit codec, which decodes them into
an OffsetCommitBatch and encodes its OffsetCommitAnswer (each compiled, or its twin with
FASTCOORD_NO_EXTENSIONS=1); every other API goes through the schema-driven codec in
framing.py. Both give the same answers; only speed differs.
"""

from __future__ import annotations

from typing import Protocol

from fastcoord import _accel
from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.commit_batch import OffsetCommitAnswer
from fastcoord.protocol.commit_frames import Decoded
from fastcoord.protocol.framing import (
    DecodedRequest,
    FrameBytes,
    decode_response,
    encode_request,
)
from fastcoord.protocol.hot_frames import HeartbeatTable
from fastcoord.protocol.messages import HeartbeatResponse
from fastcoord.protocol.schema import Response

__all__ = [
    "DecodedRequest",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
]


class HotFrames(Protocol):
    """The interface that _ext/hot_frames.pyx and protocol/hot_frames.py share."""

    def decode_heartbeat_request(self, frame: bytes) -> DecodedRequest: ...

    def encode_heartbeat_response(
        self, correlation_id: int, api_version: int, response: HeartbeatResponse
    ) -> bytes: ...

    def answer_heartbeats(
        self,
        buf: bytearray,
        pos: int,
        max_size: int,
        table: HeartbeatTable,
        now_ms: int,
        out: bytearray,
        trailing: list[tuple[int, int]],
        client_host: str = "",
    ) -> tuple[int, int]: ...


class CommitFrames(Protocol):
    """The interface that _ext/commit_frames.pyx and protocol/commit_frames.py share."""

    def decode_offset_commit(self, frame: bytes) -> Decoded: ...

    def encode_offset_commit_response(
        self, correlation_id: int, api_version: int, answer: OffsetCommitAnswer
    ) -> bytes: ...


hot: HotFrames = _accel.load("hot_frames", "fastcoord.protocol.hot_frames")
commit: CommitFrames = _accel.load("commit_frames", "fastcoord.protocol.commit_frames")
_HEARTBEAT_PREFIX = ApiKey.HEARTBEAT.to_bytes(2, "big")
_OFFSET_COMMIT_PREFIX = ApiKey.OFFSET_COMMIT.to_bytes(2, "big")


def decode_request(frame: FrameBytes) -> Decoded:
    """Decode one request frame (without its size prefix): header, body, and the count of
    bytes after the body, which are ignored as Kafka ignores them."""
    if type(frame) is bytes:
        prefix = frame[:2]
        if prefix == _HEARTBEAT_PREFIX:
            return hot.decode_heartbeat_request(frame)
        if prefix == _OFFSET_COMMIT_PREFIX:
            return commit.decode_offset_commit(frame)
    return framing.decode_request(frame)


def encode_response(
    correlation_id: int, api_version: int, response: Response | OffsetCommitAnswer
) -> bytes:
    """Encode a response frame, size prefix and header included."""
    if type(response) is HeartbeatResponse:
        return hot.encode_heartbeat_response(correlation_id, api_version, response)
    if type(response) is OffsetCommitAnswer:
        return commit.encode_offset_commit_response(correlation_id, api_version, response)
    assert not isinstance(response, OffsetCommitAnswer)
    return framing.encode_response(correlation_id, api_version, response)
