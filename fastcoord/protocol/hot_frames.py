"""Pure-Python twin of the Cython hot-frame codec (_ext/hot_frames.pyx).

The hottest frames, Heartbeat request and response, get a hand-written Cython decoder and
encoder. This twin gives the reference answers: it is the schema-driven codec itself.
Differential property tests check that the compiled module returns equal objects, equal
bytes and the same errors for any input.
"""

from __future__ import annotations

from fastcoord.protocol.framing import decode_request, encode_response
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import HeartbeatResponse
from fastcoord.protocol.schema import Request


def decode_heartbeat_request(frame: bytes) -> tuple[RequestHeader, Request]:
    """Decode a frame whose API key is Heartbeat (any frame decodes as decode_request would)."""
    return decode_request(frame)


def encode_heartbeat_response(
    correlation_id: int, api_version: int, response: HeartbeatResponse
) -> bytes:
    """Encode a Heartbeat response frame, size prefix and header included."""
    return encode_response(correlation_id, api_version, response)
