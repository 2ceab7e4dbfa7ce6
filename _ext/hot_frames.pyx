# cython: language_level=3
"""Hand-written codec for the hottest frames: Heartbeat request (decode), response (encode).

Twin: fastcoord/protocol/hot_frames.py (the schema-driven codec). This module handles the
well-formed common case only. Anything else (another API, a version it does not know, a
truncated or oversized field, invalid UTF-8, tagged fields present) is handed to the
schema-driven codec, so errors are the twin's errors by construction and the returned
objects are the same msgspec Structs. Bytes after the message are counted and not read, as
the schema-driven codec counts them (Kafka ignores them): they cost a well-formed frame
nothing, since the end of the message is where the cursor stops anyway.

Wire layouts (HeartbeatRequest.json, HeartbeatResponse.json, RequestHeader.json):

  request header v1 (Heartbeat v0-3):  api_key:int16 api_version:int16 correlation_id:int32
                                       client_id:nullable int16-length string
  request header v2 (Heartbeat v4):    header v1 + tagged fields (uvarint count)
  HeartbeatRequest v0-2:  group_id:string generation_id:int32 member_id:string
  HeartbeatRequest v3:    v2 + group_instance_id:nullable string
  HeartbeatRequest v4:    as v3 with compact strings, then tagged fields
  response header v0:     correlation_id:int32;  v1 (Heartbeat v4): + tagged fields
  HeartbeatResponse v0:   error_code:int16
  HeartbeatResponse v1-3: throttle_time_ms:int32 error_code:int16
  HeartbeatResponse v4:   v3 + tagged fields
"""

cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize

from fastcoord.protocol import framing
from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import HeartbeatRequest, HeartbeatResponse

include "cursor.pxi"

cdef extern from "debug.h":
    int FASTCOORD_DEBUG

cdef enum:
    HEARTBEAT = 12
    MAX_VERSION = 4
    FIRST_FLEXIBLE = 4
    INT16_MAX = 0x7FFF

cdef object _decode_generic = framing.decode_request
cdef object _encode_generic = framing.encode_response
# C globals: a module global is a dictionary lookup on every use.
cdef object _RequestHeader = RequestHeader
cdef object _HeartbeatRequest = HeartbeatRequest
cdef object _HeartbeatResponse = HeartbeatResponse


cdef inline Py_ssize_t read_uvarint_small(Cursor* c) except -1:
    # Lengths and tag counts of a Heartbeat fit in two varint bytes (up to 16383);
    # anything longer goes to the generic codec.
    need(c, 1)
    cdef uint8_t b0 = c.p[c.pos]
    if b0 < 0x80:
        c.pos += 1
        return b0
    need(c, 2)
    cdef uint8_t b1 = c.p[c.pos + 1]
    if b1 >= 0x80:
        raise _Irregular()
    c.pos += 2
    return (b0 & 0x7F) | (<Py_ssize_t>b1 << 7)


cdef _LastString _client_id = _LastString()
cdef _LastString _group_id = _LastString()
cdef _LastString _member_id = _LastString()


cdef inline object read_compact_string(Cursor* c, bint nullable, _LastString last=None):
    cdef Py_ssize_t n = read_uvarint_small(c) - 1
    if n == -1 and nullable:
        return None
    if n < 0 or n > INT16_MAX:
        raise _Irregular()
    return read_utf8(c, n) if last is None else last.decode(c, n)


cdef inline int expect_no_tagged_fields(Cursor* c) except -1:
    if read_uvarint_small(c) != 0:
        raise _Irregular()
    return 0


cdef struct Numbers:
    int version
    int32_t correlation_id
    int32_t generation_id


cdef tuple _parse_heartbeat(Cursor* c, Numbers* numbers):
    """(client id, group id, member id, instance id) of a well-formed Heartbeat frame, its
    numbers in `numbers`; anything else raises _Irregular. The cursor is left at the end of
    the message: c.end - c.pos bytes follow it. The numbers stay C ints: the fast loop
    needs them as such, and a tuple of four costs less to build and take apart than one
    of seven."""
    cdef int16_t api_key, version
    api_key = read_int16(c)
    version = read_int16(c)
    numbers.version = version
    numbers.correlation_id = read_int32(c)
    if api_key != HEARTBEAT or version < 0 or version > MAX_VERSION:
        raise _Irregular()
    client_id = read_string(c, True, _client_id)
    if version >= FIRST_FLEXIBLE:
        expect_no_tagged_fields(c)
        group_id = read_compact_string(c, False, _group_id)
        numbers.generation_id = read_int32(c)
        member_id = read_compact_string(c, False, _member_id)
        group_instance_id = read_compact_string(c, True)
        expect_no_tagged_fields(c)
    else:
        group_id = read_string(c, False, _group_id)
        numbers.generation_id = read_int32(c)
        member_id = read_string(c, False, _member_id)
        group_instance_id = read_string(c, True) if version >= 3 else None
    return (client_id, group_id, member_id, group_instance_id)


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


cdef inline void _put32(char* q, int32_t v) noexcept:
    q[0] = <char>((v >> 24) & 0xFF)
    q[1] = <char>((v >> 16) & 0xFF)
    q[2] = <char>((v >> 8) & 0xFF)
    q[3] = <char>(v & 0xFF)


cdef inline void _put16(char* q, int16_t v) noexcept:
    q[0] = <char>((v >> 8) & 0xFF)
    q[1] = <char>(v & 0xFF)


cdef inline Py_ssize_t _response_size(int version) noexcept:
    """The size field of a Heartbeat response: header and body, without the prefix."""
    cdef Py_ssize_t size = 4 + 2  # correlation id, error code
    if version >= 1:
        size += 4  # throttle time
    if version >= FIRST_FLEXIBLE:
        size += 2  # tagged-field counts of the header and the body
    return size


cdef inline char* _write_response(
    char* q, int version, int32_t correlation_id, int32_t throttle, int16_t error
) noexcept:
    """Write a Heartbeat response frame at q, size prefix included; returns its end."""
    _put32(q, <int32_t>_response_size(version))
    _put32(q + 4, correlation_id)
    q += 8
    if version >= FIRST_FLEXIBLE:
        q[0] = 0
        q += 1
    if version >= 1:
        _put32(q, throttle)
        q += 4
    _put16(q, error)
    q += 2
    if version >= FIRST_FLEXIBLE:
        q[0] = 0
        q += 1
    return q


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
                      bytearray out, list trailing):
    """Answer the run of Heartbeat frames at buf[pos:] that the member table answers alone.

    See the twin (fastcoord/protocol/hot_frames.py) for the contract. Frames the fast
    decoder finds irregular are decoded by the schema-driven codec, so the run stops at
    the same frame as the twin's.
    """
    if buf is out:
        raise ValueError("buf and out must be different bytearrays")
    cdef Py_ssize_t end = PyByteArray_GET_SIZE(buf)
    cdef Py_ssize_t count = 0, size, n, extra
    cdef const uint8_t* p
    cdef Cursor cur
    cdef Numbers numbers
    cdef int code
    cdef char* q
    if pos < 0 or pos > end:
        raise ValueError("pos is outside buf")
    while end - pos >= 4:
        p = <const uint8_t*>PyByteArray_AS_STRING(buf) + pos
        size = <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])
        if size < 2 or size > max_size or size > end - pos - 4:
            break
        if ((p[4] << 8) | p[5]) != HEARTBEAT:
            break
        cur.p = p + 4
        cur.pos = 0
        cur.end = size
        try:
            strings = _parse_heartbeat(&cur, &numbers)
            extra = cur.end - cur.pos
        except _Irregular:
            try:
                header, request, extra = _decode_generic(bytes(buf[pos + 4 : pos + 4 + size]))
            except ProtocolError:
                break
            numbers.version = header.api_version
            numbers.correlation_id = header.correlation_id
            numbers.generation_id = request.generation_id
            strings = (
                header.client_id, request.group_id, request.member_id, request.group_instance_id
            )
        if strings[3] is not None:
            break  # static members take the full path
        code = table.heartbeat_id(strings[1], strings[2], numbers.generation_id, now_ms)
        if code < 0:
            break
        n = PyByteArray_GET_SIZE(out)
        PyByteArray_Resize(out, n + 4 + _response_size(numbers.version))
        q = PyByteArray_AS_STRING(out) + n
        q = _write_response(q, numbers.version, numbers.correlation_id, 0, <int16_t>code)
        if FASTCOORD_DEBUG and q - PyByteArray_AS_STRING(out) != PyByteArray_GET_SIZE(out):
            raise AssertionError("Heartbeat response written at the wrong length")
        if extra:
            trailing.append((numbers.version, extra))
        pos += 4 + size
        count += 1
    return pos, count
