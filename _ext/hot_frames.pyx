# cython: language_level=3
"""Hand-written codec for the hottest frames: Heartbeat request (decode), response (encode).

Twin: fastcoord/protocol/hot_frames.py (the schema-driven codec). This module handles the
well-formed common case only. Anything else (another API, a version it does not know, a
truncated or oversized field, invalid UTF-8, tagged fields present, bytes left over) is
handed to the schema-driven codec, so errors are the twin's errors by construction and the
returned objects are the same msgspec Structs.

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
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, uint8_t, uint32_t
from libc.string cimport memcmp

from fastcoord.protocol import framing
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import HeartbeatRequest, HeartbeatResponse

cdef extern from "debug.h":
    int FASTCOORD_DEBUG

cdef enum:
    HEARTBEAT = 12
    MAX_VERSION = 4
    FIRST_FLEXIBLE = 4
    INT16_MAX = 0x7FFF

cdef object _decode_generic = framing.decode_request
cdef object _encode_generic = framing.encode_response


class _Irregular(Exception):
    """Internal: the frame is not the common case; let the schema-driven codec answer."""


cdef struct Cursor:
    const uint8_t* p
    Py_ssize_t pos
    Py_ssize_t end


cdef inline int need(Cursor* c, Py_ssize_t n) except -1:
    if n > c.end - c.pos:
        raise _Irregular()
    return 0


cdef inline int32_t read_int32(Cursor* c) except? -1:
    need(c, 4)
    cdef const uint8_t* q = c.p + c.pos
    c.pos += 4
    return <int32_t>((<uint32_t>q[0] << 24) | (<uint32_t>q[1] << 16) | (<uint32_t>q[2] << 8) | q[3])


cdef inline int16_t read_int16(Cursor* c) except? -1:
    need(c, 2)
    cdef const uint8_t* q = c.p + c.pos
    c.pos += 2
    return <int16_t>((q[0] << 8) | q[1])


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


cdef inline object read_utf8(Cursor* c, Py_ssize_t n):
    need(c, n)
    cdef const char* s = <const char*>(c.p + c.pos)
    c.pos += n
    try:
        return PyUnicode_DecodeUTF8(s, n, NULL)
    except UnicodeDecodeError:
        raise _Irregular()


@cython.final
cdef class _LastString:
    """The last string decoded in one position of the frame, with its UTF-8 bytes.

    Client id and group id repeat from one heartbeat to the next on a connection; comparing
    bytes and returning the same str saves a decode and an allocation. Member ids differ
    when many members share a connection, so they are not cached.
    """

    cdef bytes raw
    cdef object text

    cdef object decode(self, Cursor* c, Py_ssize_t n):
        need(c, n)
        cdef const char* s = <const char*>(c.p + c.pos)
        if (
            self.raw is not None
            and PyBytes_GET_SIZE(self.raw) == n
            and memcmp(PyBytes_AS_STRING(self.raw), s, n) == 0
        ):
            c.pos += n
            return self.text
        text = read_utf8(c, n)
        self.raw = PyBytes_FromStringAndSize(s, n)
        self.text = text
        return text


cdef _LastString _client_id = _LastString()
cdef _LastString _group_id = _LastString()


cdef inline object read_string(Cursor* c, bint nullable, _LastString last=None):
    cdef Py_ssize_t n = read_int16(c)
    if n == -1 and nullable:
        return None
    if n < 0:
        raise _Irregular()
    return read_utf8(c, n) if last is None else last.decode(c, n)


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


def decode_heartbeat_request(frame):
    """Decode a Heartbeat request frame (without size prefix) into (RequestHeader, request).

    Any other frame decodes exactly as fastcoord.protocol.framing.decode_request would.
    """
    if type(frame) is not bytes:
        return _decode_generic(frame)
    cdef Cursor cur
    cdef Cursor* c = &cur
    cur.p = <const uint8_t*>PyBytes_AS_STRING(frame)
    cur.pos = 0
    cur.end = PyBytes_GET_SIZE(frame)
    cdef int16_t api_key, version
    cdef int32_t correlation_id, generation_id
    cdef bint flexible
    try:
        api_key = read_int16(c)
        version = read_int16(c)
        correlation_id = read_int32(c)
        if api_key != HEARTBEAT or version < 0 or version > MAX_VERSION:
            raise _Irregular()
        flexible = version >= FIRST_FLEXIBLE
        client_id = read_string(c, True, _client_id)
        if flexible:
            expect_no_tagged_fields(c)
            group_id = read_compact_string(c, False, _group_id)
            generation_id = read_int32(c)
            member_id = read_compact_string(c, False)
            group_instance_id = read_compact_string(c, True)
            expect_no_tagged_fields(c)
        else:
            group_id = read_string(c, False, _group_id)
            generation_id = read_int32(c)
            member_id = read_string(c, False)
            group_instance_id = read_string(c, True) if version >= 3 else None
        if cur.pos != cur.end:
            raise _Irregular()
    except _Irregular:
        return _decode_generic(frame)
    return (
        RequestHeader(api_key, version, correlation_id, client_id),
        HeartbeatRequest(group_id, generation_id, member_id, group_instance_id),
    )


cdef inline void _put32(char* q, int32_t v) noexcept:
    q[0] = <char>((v >> 24) & 0xFF)
    q[1] = <char>((v >> 16) & 0xFF)
    q[2] = <char>((v >> 8) & 0xFF)
    q[3] = <char>(v & 0xFF)


cdef inline void _put16(char* q, int16_t v) noexcept:
    q[0] = <char>((v >> 8) & 0xFF)
    q[1] = <char>(v & 0xFF)


def encode_heartbeat_response(correlation_id, api_version, response):
    """Encode a Heartbeat response frame, size prefix and header included.

    Anything the fast path does not handle (another type, an out-of-range value) is encoded,
    or refused, by fastcoord.protocol.framing.encode_response.
    """
    if (
        type(response) is not HeartbeatResponse
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
    cdef Py_ssize_t size = 4 + 2  # correlation id, error code
    if version >= 1:
        size += 4  # throttle time
    if version >= FIRST_FLEXIBLE:
        size += 2  # tagged-field counts of the header and the body
    out = PyBytes_FromStringAndSize(NULL, size + 4)
    cdef char* q = PyBytes_AS_STRING(out)
    cdef char* start = q
    _put32(q, <int32_t>size)
    _put32(q + 4, <int32_t>correlation_id)
    q += 8
    if version >= FIRST_FLEXIBLE:
        q[0] = 0
        q += 1
    if version >= 1:
        _put32(q, <int32_t>throttle)
        q += 4
    _put16(q, <int16_t>error)
    q += 2
    if version >= FIRST_FLEXIBLE:
        q[0] = 0
        q += 1
    if FASTCOORD_DEBUG and q - start != size + 4:
        raise AssertionError(f"Heartbeat v{version} response: wrote {q - start} of {size + 4} bytes")
    return out
