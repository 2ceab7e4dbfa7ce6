"""Pure-Python twin of the Cython hot-frame codec (_ext/hot_frames.pyx).

The hottest frames, Heartbeat request and response, get a hand-written Cython decoder and
encoder, and a loop that answers a run of heartbeats straight from the receive buffer into
the send buffer (ConsumerGroupHeartbeats that change nothing among them). This twin gives
the reference answers: it is the schema-driven codec itself, and the loop written plainly.
Differential property tests check that the compiled module returns equal objects, equal
bytes and the same errors for any input.
"""

from __future__ import annotations

from typing import Protocol

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.framing import DecodedRequest, decode_request, encode_response
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    HeartbeatRequest,
    HeartbeatResponse,
)
from fastcoord.protocol.messages.consumer_group_heartbeat import changes_nothing

_HEARTBEAT = ApiKey.HEARTBEAT.to_bytes(2, "big")
_CONSUMER_GROUP_HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT.to_bytes(2, "big")


def decode_heartbeat_request(frame: bytes) -> DecodedRequest:
    """Decode a frame whose API key is Heartbeat (any frame decodes as decode_request would):
    header, body, and the count of bytes after the body."""
    return decode_request(frame)


def encode_heartbeat_response(
    correlation_id: int, api_version: int, response: HeartbeatResponse
) -> bytes:
    """Encode a Heartbeat response frame, size prefix and header included."""
    return encode_response(correlation_id, api_version, response)


class HeartbeatTable(Protocol):
    consumer_heartbeat_interval_ms: int

    def heartbeat_id(self, group_id: str, member_id: str, generation: int, now_ms: int) -> int: ...

    def consumer_heartbeat_id(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        client_id: str | None,
        client_host: str,
        now_ms: int,
    ) -> int: ...


def answer_heartbeats(
    buf: bytearray,
    pos: int,
    max_size: int,
    table: HeartbeatTable,
    now_ms: int,
    out: bytearray,
    trailing: list[tuple[int, int]],
    client_host: str = "",
) -> tuple[int, int]:
    """Answer the run of Heartbeat frames at buf[pos:] that the member table answers alone.

    The server's fast path: a client sends heartbeats back to back, and most need nothing
    but the member table. Each answer is appended to `out`. The run stops before the first
    frame that is incomplete, larger than max_size, not a Heartbeat, malformed, from a
    static member, or that the table leaves to the full path (a negative code); the caller
    handles that frame the ordinary way, with the same result. Bytes after a frame's
    message are ignored, as decode_request ignores them; for each answered frame that had
    some, (its version, how many) is appended to `trailing`, for the server's log. Returns
    (the position after the last frame answered, how many were answered).

    A ConsumerGroupHeartbeat in the run is answered too when it changes nothing: every
    optional field null, a member epoch above 0, no bytes after the message, and the
    table's consumer_heartbeat_id answers it (NONE) for a client at `client_host`.
    """
    if buf is out:
        raise ValueError("buf and out must be different bytearrays")
    if not 0 <= pos <= len(buf):
        raise ValueError("pos is outside buf")
    count = 0
    while len(buf) - pos >= 4:
        size = int.from_bytes(buf[pos : pos + 4], "big", signed=True)
        if size < 2 or size > max_size or size > len(buf) - pos - 4:
            break
        if buf[pos + 4 : pos + 6] == _CONSUMER_GROUP_HEARTBEAT:
            if not _answer_consumer(
                bytes(buf[pos + 4 : pos + 4 + size]), table, now_ms, client_host, out
            ):
                break
            pos += 4 + size
            count += 1
            continue
        if buf[pos + 4 : pos + 6] != _HEARTBEAT:
            break
        try:
            header, request, extra = decode_request(bytes(buf[pos + 4 : pos + 4 + size]))
        except ProtocolError:
            break
        assert isinstance(request, HeartbeatRequest)
        if request.group_instance_id is not None:
            break
        generation = request.generation_id
        code = table.heartbeat_id(request.group_id, request.member_id, generation, now_ms)
        if code < 0:
            break
        out += encode_response(
            header.correlation_id, header.api_version, HeartbeatResponse(error_code=code)
        )
        if extra:
            trailing.append((header.api_version, extra))
        pos += 4 + size
        count += 1
    return pos, count


def _answer_consumer(
    frame: bytes, table: HeartbeatTable, now_ms: int, client_host: str, out: bytearray
) -> bool:
    try:
        header, request, extra = decode_request(frame)
    except ProtocolError:
        return False
    assert isinstance(request, ConsumerGroupHeartbeatRequest)
    if extra or request.member_epoch <= 0 or not changes_nothing(request):
        return False
    code = table.consumer_heartbeat_id(
        request.group_id,
        request.member_id,
        request.member_epoch,
        header.client_id,
        client_host,
        now_ms,
    )
    if code != 0:
        return False
    out += encode_response(
        header.correlation_id,
        header.api_version,
        ConsumerGroupHeartbeatResponse(
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            heartbeat_interval_ms=table.consumer_heartbeat_interval_ms,
        ),
    )
    return True
