# cython: language_level=3
"""Hand-written codec for the hottest frames: Heartbeat request (decode), response (encode).

Twin: fastcoord/protocol/hot_frames.py (the schema-driven codec). This module handles the
well-formed common case only. Anything else (another API, a version it does not know, a
truncated or oversized field, invalid UTF-8, tagged fields present) is handed to the
schema-driven codec, so errors are the twin's errors by construction and the returned
objects are the same msgspec Structs. Bytes after the message are counted and not read, as
the schema-driven codec counts them (Kafka ignores them): they cost a well-formed frame
nothing, since the end of the message is where the cursor stops anyway.

The decoder, the encoder and the loop that answers a run of heartbeats live in
heartbeat.pxi (with the wire layouts), which the server's reactor (reactor.pyx) includes too.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.mem cimport PyMem_Free, PyMem_Malloc

from fastcoord.protocol import framing
from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import HeartbeatRequest, HeartbeatResponse

include "cursor.pxi"

cdef extern from "debug.h":
    int FASTCOORD_DEBUG

cdef enum:
    STACK_ROOM = 16384  # answers answer_heartbeats writes on its stack: reads up to 16 KB

cdef object _decode_generic = framing.decode_request
cdef object _encode_generic = framing.encode_response
# C globals: a module global is a dictionary lookup on every use.
cdef object _RequestHeader = RequestHeader
cdef object _HeartbeatRequest = HeartbeatRequest
cdef object _HeartbeatResponse = HeartbeatResponse


include "table_core.pxi"
include "heartbeat.pxi"


def decode_heartbeat_request(frame):
    """Decode a Heartbeat request frame (without size prefix) into (RequestHeader, request,
    the count of bytes after the request).

    Any other frame decodes exactly as fastcoord.protocol.framing.decode_request would.
    """
    if type(frame) is not bytes:
        return _decode_generic(frame)
    cdef Cursor cur
    cdef Numbers numbers
    cur.p = <const uint8_t*>PyBytes_AS_STRING(frame)
    cur.pos = 0
    cur.end = PyBytes_GET_SIZE(frame)
    try:
        client_id, group_id, member_id, instance_id = _parse_heartbeat(&cur, &numbers)
    except _Irregular:
        return _decode_generic(frame)
    header = _RequestHeader(HEARTBEAT, numbers.version, numbers.correlation_id, client_id)
    request = _HeartbeatRequest(group_id, numbers.generation_id, member_id, instance_id)
    if cur.pos == cur.end:
        return (header, request, 0)  # a cached int, not a new one
    return (header, request, cur.end - cur.pos)


def encode_heartbeat_response(correlation_id, api_version, response):
    """Encode a Heartbeat response frame, size prefix and header included.

    Anything the fast path does not handle (another type, an out-of-range value) is encoded,
    or refused, by fastcoord.protocol.framing.encode_response.
    """
    if (
        type(response) is not _HeartbeatResponse
        or type(correlation_id) is not int
        or type(api_version) is not int
        or not 0 <= api_version <= MAX_VERSION
        or not -0x80000000 <= correlation_id <= 0x7FFFFFFF
    ):
        return _encode_generic(correlation_id, api_version, response)
    throttle = response.throttle_time_ms
    error = response.error_code
    if (
        type(throttle) is not int
        or type(error) is not int
        or not -0x80000000 <= throttle <= 0x7FFFFFFF
        or not -0x8000 <= error <= 0x7FFF
    ):
        return _encode_generic(correlation_id, api_version, response)
    cdef int version = api_version
    cdef Py_ssize_t size = _response_size(version)
    out = PyBytes_FromStringAndSize(NULL, size + 4)
    cdef char* start = PyBytes_AS_STRING(out)
    cdef char* q = _write_response(start, version, <int32_t>correlation_id, <int32_t>throttle,
                                   <int16_t>error)
    if FASTCOORD_DEBUG and q - start != size + 4:
        raise AssertionError(f"Heartbeat v{version} response: wrote {q - start} of {size + 4} bytes")
    return out


def answer_heartbeats(bytearray buf, Py_ssize_t pos, Py_ssize_t max_size, table, int64_t now_ms,
                      bytearray out, list trailing, str client_host=""):
    """Answer the run of Heartbeat frames (and ConsumerGroupHeartbeats that change nothing)
    at buf[pos:] that the member table answers alone.

    See the twin (fastcoord/protocol/hot_frames.py) for the contract. Frames the fast
    decoder finds irregular are decoded by the schema-driven codec, so the run stops at
    the same frame as the twin's.
    """
    if buf is out:
        raise ValueError("buf and out must be different bytearrays")
    cdef Py_ssize_t end = PyByteArray_GET_SIZE(buf)
    if pos < 0 or pos > end:
        raise ValueError("pos is outside buf")
    cdef Py_ssize_t start = PyByteArray_GET_SIZE(out)
    cdef Py_ssize_t capacity = end - pos + MAX_RESPONSE
    cdef Py_ssize_t written = 0, count = 0
    cdef Py_buffer held_in
    cdef TableCore* core = NULL
    address = getattr(table, "_core_address", None)
    if address is not None:
        core = <TableCore*><size_t>address()
    # Room for every answer the run can give (an answer is smaller than its request), on
    # the stack for the reads of lone and shared connections: growing `out` to a whole
    # read's size and back cost two reallocations a read. `buf` is exported while the table
    # runs, so that nothing can resize (and move) it under the loop.
    cdef char room[STACK_ROOM]
    cdef char* answers = room
    if capacity > STACK_ROOM:
        answers = <char*>PyMem_Malloc(capacity)
        if answers == NULL:
            raise MemoryError()
    try:
        PyObject_GetBuffer(buf, &held_in, PyBUF_SIMPLE)
        try:
            pos = answer_run(
                <const uint8_t*>held_in.buf, pos, end, max_size, table, core, now_ms,
                answers, capacity, &written, &count, trailing, client_host,
            )
        finally:
            PyBuffer_Release(&held_in)
            if written:
                PyByteArray_Resize(out, start + written)
                memcpy(PyByteArray_AS_STRING(out) + start, answers, written)
    finally:
        if answers != room:
            PyMem_Free(answers)
    return pos, count
