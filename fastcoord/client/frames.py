"""Pure-Python twin of the client's compiled heartbeat path (_ext/client_frames.pyx).

A load test keeps many members on one connection: their heartbeats leave in batches and
their answers arrive in runs. Building each request with the schema-driven codec and
decoding each answer the same way would cost more than the coordinator spends answering,
so the client copies prebuilt request frames with fresh correlation ids, and reads the
error code of a Heartbeat answer straight from the buffer. This twin is the plain
reference; differential property tests check that the compiled module gives the same
bytes, the same lists, the same dict left behind and the same errors for any input.

Heartbeat response layouts (HeartbeatResponse.json; response header v1 from v4 on):
  v0:   correlation_id:int32 error_code:int16
  v1-3: correlation_id:int32 throttle_time_ms:int32 error_code:int16
  v4:   correlation_id:int32 header tags:uvarint throttle_time_ms:int32 error_code:int16
        body tags:uvarint
Only the exact common layout is read here (empty tag sections, no byte left over); any
other frame is left to the caller's full decoder, which reads or refuses it.
"""

from __future__ import annotations

import struct

from fastcoord.protocol.errors import ProtocolError

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
INT32_MAX = 2**31 - 1
CORRELATION_ID_AT = 8  # in a request frame: size, api_key, api_version, then correlation id
FIRST_FLEXIBLE = 4  # Heartbeat v4 added tagged fields, in the response header too


def heartbeat_frames(templates: list[bytes], first_correlation: int) -> bytes:
    """The request frames in `templates` back to back, the i-th with correlation id
    first_correlation + i.

    Each template is a complete request frame, size prefix included, as
    framing.encode_request returns it; its own correlation id is overwritten. ValueError if
    a correlation id would leave 0..2**31-1 or a template is too short to hold one.
    """
    if templates and not 0 <= first_correlation <= INT32_MAX - (len(templates) - 1):
        raise ValueError(
            f"correlation ids {first_correlation}..{first_correlation + len(templates) - 1} "
            f"leave 0..{INT32_MAX}"
        )
    for i, template in enumerate(templates):
        if type(template) is not bytes:
            raise TypeError(f"template {i} is {type(template).__name__}, not bytes")
        if len(template) < CORRELATION_ID_AT + 4:
            raise ValueError(
                f"template {i} has {len(template)} bytes; a request frame has at least 12"
            )
    out = bytearray(b"".join(templates))
    at = CORRELATION_ID_AT
    for i, template in enumerate(templates):
        _INT32.pack_into(out, at, first_correlation + i)
        at += len(template)
    return bytes(out)


def frame_size_error(size: int, max_size: int) -> ProtocolError:
    """The error for a response size prefix that cannot be a frame."""
    if size < 4:
        return ProtocolError(
            f"response frame of {size} bytes: a response holds at least its 4-byte correlation id"
        )
    return ProtocolError(f"response frame of {size} bytes is larger than the {max_size}-byte limit")


def heartbeat_error(buf: bytes | bytearray, start: int, size: int, version: int) -> int | None:
    """The error code of the Heartbeat response frame of `size` bytes at buf[start:] (after
    its size prefix) in the common layout of `version`, or None when it is anything else."""
    if version >= FIRST_FLEXIBLE:
        if size != 12 or buf[start + 4] != 0 or buf[start + 11] != 0:
            return None
        error: int = _INT16.unpack_from(buf, start + 9)[0]
    elif version >= 1:
        if size != 10:
            return None
        error = _INT16.unpack_from(buf, start + 8)[0]
    else:
        if size != 6:
            return None
        error = _INT16.unpack_from(buf, start + 4)[0]
    return error


def read_answers(
    buf: bytearray,
    pos: int,
    max_size: int,
    heartbeats: dict[int, object],
    heartbeat_version: int,
    answered: list[tuple[object, int]],
    others: list[tuple[int, bytes]],
) -> int:
    """Walk the complete response frames at buf[pos:]; returns the position after the last.

    A frame whose correlation id is a key of `heartbeats` is a Heartbeat response of
    `heartbeat_version`: in the common layout, its key is popped and (the popped value,
    its error code) appended to `answered`. Every other frame, and a heartbeat answer in
    any other layout (too short, tagged fields, bytes left over: the full decoder's to read
    or refuse), is appended to `others` as (correlation id, the frame without its size
    prefix). An incomplete last frame stops the walk. A size prefix below 4 or above
    max_size raises ProtocolError; the frames before it stay handled.
    """
    if not 0 <= pos <= len(buf):
        raise ValueError("pos is outside buf")
    if heartbeat_version < 0:
        raise ValueError(f"Heartbeat v{heartbeat_version} does not exist")
    end = len(buf)
    while end - pos >= 4:
        size = _INT32.unpack_from(buf, pos)[0]
        if size < 4 or size > max_size:
            raise frame_size_error(size, max_size)
        if size > end - pos - 4:
            break
        start = pos + 4
        pos = start + size
        correlation_id: int = _INT32.unpack_from(buf, start)[0]
        if correlation_id in heartbeats:
            error = heartbeat_error(buf, start, size, heartbeat_version)
            if error is not None:
                answered.append((heartbeats.pop(correlation_id), error))
                continue
        others.append((correlation_id, bytes(buf[start:pos])))
    return pos
