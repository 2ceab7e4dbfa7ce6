# The Heartbeat fast path, included into hot_frames.pyx (the codec and answer_heartbeats)
# and reactor.pyx (the lone-heartbeat reactor of `fastcoord serve`), so that both answer a
# run of heartbeats with the same compiled loop, `answer_run`. The including module includes
# cursor.pxi first and defines `_decode_generic` (fastcoord.protocol.framing.decode_request,
# the reference for irregular frames) and imports ProtocolError.
#
# Wire layouts (HeartbeatRequest.json, HeartbeatResponse.json, RequestHeader.json):
#
#   request header v1 (Heartbeat v0-3):  api_key:int16 api_version:int16 correlation_id:int32
#                                        client_id:nullable int16-length string
#   request header v2 (Heartbeat v4):    header v1 + tagged fields (uvarint count)
#   HeartbeatRequest v0-2:  group_id:string generation_id:int32 member_id:string
#   HeartbeatRequest v3:    v2 + group_instance_id:nullable string
#   HeartbeatRequest v4:    as v3 with compact strings, then tagged fields
#   response header v0:     correlation_id:int32;  v1 (Heartbeat v4): + tagged fields
#   HeartbeatResponse v0:   error_code:int16
#   HeartbeatResponse v1-3: throttle_time_ms:int32 error_code:int16
#   HeartbeatResponse v4:   v3 + tagged fields

cdef enum:
    HEARTBEAT = 12
    MAX_VERSION = 4
    FIRST_FLEXIBLE = 4
    INT16_MAX = 0x7FFF
    # The largest Heartbeat response frame, size prefix included (v4). The smallest request
    # frame is 22 bytes, so a run's answers never take more room than its requests.
    MAX_RESPONSE = 16


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



cdef Py_ssize_t answer_run(
    const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t max_size, object table,
    int64_t now_ms, char* out, Py_ssize_t capacity, Py_ssize_t* written, Py_ssize_t* count,
    list trailing,
) except -1:
    """Answer the run of Heartbeat frames at buf[pos:end] that the member table answers
    alone; returns the position after the last frame answered.

    The contract is answer_heartbeats' (see the twin, fastcoord/protocol/hot_frames.py).
    Each answer is written at out + written[0], which moves past it, within `capacity`
    bytes of out; count[0] counts the frames answered. The caller holds buf and out still:
    the table is Python code, and nothing it does may move them. Frames the fast decoder
    finds irregular are decoded by the schema-driven codec, so the run stops at the same
    frame as the twin's.
    """
    cdef Py_ssize_t size, extra
    cdef const uint8_t* p
    cdef Cursor cur
    cdef Numbers numbers
    cdef int code
    cdef char* q
    while end - pos >= 4:
        p = buf + pos
        size = <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])
        if size < 2 or size > max_size or size > end - pos - 4:
            break
        if ((p[4] << 8) | p[5]) != HEARTBEAT:
            break
        if capacity - written[0] < MAX_RESPONSE:
            break  # never for a caller that gives room for end - pos bytes and one more answer
        cur.p = p + 4
        cur.pos = 0
        cur.end = size
        try:
            strings = _parse_heartbeat(&cur, &numbers)
            extra = cur.end - cur.pos
        except _Irregular:
            try:
                header, request, extra = _decode_generic(
                    PyBytes_FromStringAndSize(<const char*>p + 4, size)
                )
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
        q = out + written[0]
        written[0] = _write_response(
            q, numbers.version, numbers.correlation_id, 0, <int16_t>code
        ) - out
        if FASTCOORD_DEBUG and written[0] - (q - out) != 4 + _response_size(numbers.version):
            raise AssertionError("Heartbeat response written at the wrong length")
        if extra:
            trailing.append((numbers.version, extra))
        pos += 4 + size
        count[0] += 1
    return pos
