"""The wire layouts the client's lane reads without the schema codec (lane.py and
_ext/client_lane.pyx).

A load test keeps many members on one connection: their heartbeats leave in batches and
their answers arrive in runs. Decoding each answer with the schema-driven codec would cost
more than the coordinator spends answering, so the lane reads the error code of a Heartbeat
answer straight from the buffer, in the one layout every broker sends; any other frame is
left to the full decoder, which reads or refuses it. The compiled lane has its own copy of
`heartbeat_error`; the differential tests hold the two to the same answers.

Heartbeat response layouts (HeartbeatResponse.json; response header v1 from v4 on):
  v0:   correlation_id:int32 error_code:int16
  v1-3: correlation_id:int32 throttle_time_ms:int32 error_code:int16
  v4:   correlation_id:int32 header tags:uvarint throttle_time_ms:int32 error_code:int16
        body tags:uvarint
Only the exact common layout is read here (empty tag sections, no byte left over).
"""

from __future__ import annotations

import struct

from fastcoord.protocol.errors import ProtocolError

_INT16 = struct.Struct(">h")
FIRST_FLEXIBLE = 4  # Heartbeat v4 added tagged fields, in the response header too


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
