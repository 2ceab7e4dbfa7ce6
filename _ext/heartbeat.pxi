# The Heartbeat fast path, included into hot_frames.pyx (the codec and answer_heartbeats)
# and reactor.pyx (the lone-heartbeat reactor of `fastcoord serve`), so that both answer a
# run of heartbeats with the same compiled loop, `answer_run`. The including module includes
# cursor.pxi and table_core.pxi first and defines `_decode_generic`
# (fastcoord.protocol.framing.decode_request, the reference for irregular frames) and imports
# ProtocolError.
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
#
# And the ConsumerGroupHeartbeat that changes nothing (ConsumerGroupHeartbeatRequest.json,
# ConsumerGroupHeartbeatResponse.json; flexible from v0, so header v2 and response header v1):
#
#   ConsumerGroupHeartbeatRequest v0:  group_id:compact string member_id:compact string
#       member_epoch:int32 instance_id rack_id:compact nullable string (null: 0)
#       rebalance_timeout_ms:int32 (-1) subscribed_topic_names:compact nullable array (null)
#       server_assignor:compact nullable string (null) topic_partitions:compact nullable
#       array (null) tagged fields
#   v1:  as v0 with subscribed_topic_regex:compact nullable string (null) after the names
#   ConsumerGroupHeartbeatResponse v0-1:  throttle_time_ms:int32 error_code:int16
#       error_message:compact nullable string member_id:compact nullable string
#       member_epoch:int32 heartbeat_interval_ms:int32 assignment:nullable struct (int8 -1)
#       tagged fields

from fastcoord.protocol.messages import ConsumerGroupHeartbeatRequest
from fastcoord.protocol.messages.consumer_group_heartbeat import changes_nothing

cdef object _ConsumerGroupHeartbeatRequest = ConsumerGroupHeartbeatRequest
cdef object _changes_nothing = changes_nothing

cdef enum:
    HEARTBEAT = 12
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_MAX_VERSION = 1
    CONSUMER_FIRST_REGEX = 1
    MAX_VERSION = 4
    FIRST_FLEXIBLE = 4
    INT16_MAX = 0x7FFF
    # The largest Heartbeat response frame, size prefix included (v4). The smallest request
    # frame is 22 bytes, so a run's answers never take more room than its requests.
    MAX_RESPONSE = 16


# -- the strict reading of a Heartbeat frame that answers from the table's C index --------
# Without the GIL and without a Python object: the reactor's thread answers with it, and
# answer_run takes it first when the table has C columns.

cdef struct Span:
    int version
    int32_t correlation_id
    int32_t generation
    const char* group_id
    Py_ssize_t group_size
    const char* member_id
    Py_ssize_t member_size
    Py_ssize_t slot
    int code


@cython.profile(False)
@cython.linetrace(False)
cdef inline Py_ssize_t _uvarint(const uint8_t* p, Py_ssize_t* pos, Py_ssize_t end) noexcept nogil:
    # Lengths and tag counts of a heartbeat fit in two varint bytes; -2 for anything else.
    if pos[0] >= end:
        return -2
    cdef uint8_t b0 = p[pos[0]]
    if b0 < 0x80:
        pos[0] += 1
        return b0
    if pos[0] + 1 >= end or p[pos[0] + 1] >= 0x80:
        return -2
    pos[0] += 2
    return (b0 & 0x7F) | (<Py_ssize_t>p[pos[0] - 1] << 7)


@cython.profile(False)
@cython.linetrace(False)
cdef inline int32_t _int32(const uint8_t* q) noexcept nogil:
    return <int32_t>((<uint32_t>q[0] << 24) | (<uint32_t>q[1] << 16) | (<uint32_t>q[2] << 8) | q[3])


@cython.profile(False)
@cython.linetrace(False)
cdef inline int16_t _int16(const uint8_t* q) noexcept nogil:
    return <int16_t>((q[0] << 8) | q[1])


@cython.profile(False)
@cython.linetrace(False)
cdef inline bint _string(
    const uint8_t* p, Py_ssize_t* pos, Py_ssize_t size, bint compact, const char** at,
    Py_ssize_t* length,
) noexcept nogil:
    """A non-null string at pos (compact: a varint of its length + 1; else an int16 length):
    its span in at and length, pos moved past it."""
    cdef Py_ssize_t n
    if compact:
        n = _uvarint(p, pos, size) - 1
    else:
        if pos[0] + 2 > size:
            return False
        n = _int16(p + pos[0])
        pos[0] += 2
    if n < 0 or n > size - pos[0]:
        return False
    at[0] = <const char*>p + pos[0]
    length[0] = n
    pos[0] += n
    return True


@cython.profile(False)
@cython.linetrace(False)
cdef bint parse_heartbeat(const uint8_t* p, Py_ssize_t size, Span* out) noexcept nogil:
    """Whether the frame at p (after its size prefix) is a regular Heartbeat v0-4 of a
    dynamic member with nothing after its message: its numbers and the spans of its ids in
    `out`. Stricter than the codec (an ASCII client id, short varints): anything else goes to
    drain, whose answer_run decides as the connection does."""
    cdef Py_ssize_t pos = 8, n, i
    if size < 8 or _int16(p) != HEARTBEAT:
        return False
    cdef int version = _int16(p + 2)
    if version < 0 or version > MAX_VERSION:
        return False
    out.version = version
    out.correlation_id = _int32(p + 4)
    if pos + 2 > size:
        return False
    n = _int16(p + pos)
    pos += 2
    if n >= 0:
        if n > size - pos:
            return False
        for i in range(pos, pos + n):
            if p[i] >= 0x80:
                return False
        pos += n
    elif n != -1:
        return False
    cdef bint flexible = version >= FIRST_FLEXIBLE
    if flexible and _uvarint(p, &pos, size) != 0:  # the header's tagged fields
        return False
    if not _string(p, &pos, size, flexible, &out.group_id, &out.group_size):
        return False
    if pos + 4 > size:
        return False
    out.generation = _int32(p + pos)
    pos += 4
    if not _string(p, &pos, size, flexible, &out.member_id, &out.member_size):
        return False
    if flexible:
        if _uvarint(p, &pos, size) != 0:  # the instance id: null
            return False
        if _uvarint(p, &pos, size) != 0:  # tagged fields
            return False
    elif version >= 3:
        if pos + 2 > size or _int16(p + pos) != -1:  # the instance id: null
            return False
        pos += 2
    return pos == size


@cython.profile(False)
@cython.linetrace(False)
cdef inline int span_heartbeat(TableCore* t, Span* span, int64_t now_ms) noexcept nogil:
    """The heartbeat of the member a parsed frame names, applied under the table's lock: its
    answer, or CORE_FALLBACK (ids not bound, a state the table does not answer). Untraced
    and without the GIL, so that nothing between lock and unlock can let another thread in."""
    pthread_mutex_lock(&t.lock)
    cdef int code = core_heartbeat(
        t, core_find(t, span.group_id, span.group_size, span.member_id, span.member_size),
        span.generation, now_ms, True,
    )
    pthread_mutex_unlock(&t.lock)
    return code


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


cdef struct Consumer:
    int version
    int32_t correlation_id
    int32_t member_epoch
    Py_ssize_t member_at  # the member id as the request has it (its length first)
    Py_ssize_t member_size


cdef inline int expect_null(Cursor* c) except -1:
    # A compact nullable string or array that is null; anything else is irregular.
    if read_uvarint_small(c) != 0:
        raise _Irregular()
    return 0


cdef tuple _parse_consumer_heartbeat(Cursor* c, Consumer* numbers):
    """(client id, group id, member id) of a well-formed ConsumerGroupHeartbeat frame whose
    optional fields are all null, its numbers in `numbers`; anything else (another frame, or
    one that changes something) raises _Irregular. The cursor is left at the end of the
    message."""
    cdef int16_t api_key, version
    api_key = read_int16(c)
    version = read_int16(c)
    numbers.version = version
    numbers.correlation_id = read_int32(c)
    if api_key != CONSUMER_GROUP_HEARTBEAT or version < 0 or version > CONSUMER_MAX_VERSION:
        raise _Irregular()
    client_id = read_string(c, True, _client_id)
    expect_no_tagged_fields(c)
    group_id = read_compact_string(c, False, _group_id)
    numbers.member_at = c.pos
    member_id = read_compact_string(c, False, _member_id)
    numbers.member_size = c.pos - numbers.member_at
    numbers.member_epoch = read_int32(c)
    expect_null(c)  # instance id
    expect_null(c)  # rack id
    if read_int32(c) != -1:  # rebalance timeout
        raise _Irregular()
    expect_null(c)  # subscribed topic names
    if version >= CONSUMER_FIRST_REGEX:
        expect_null(c)  # subscribed topic regex
    expect_null(c)  # server assignor
    expect_null(c)  # topic partitions
    expect_no_tagged_fields(c)
    return (client_id, group_id, member_id)


@cython.profile(False)
@cython.linetrace(False)
cdef inline void _put32(char* q, int32_t v) noexcept nogil:
    q[0] = <char>((v >> 24) & 0xFF)
    q[1] = <char>((v >> 16) & 0xFF)
    q[2] = <char>((v >> 8) & 0xFF)
    q[3] = <char>(v & 0xFF)


@cython.profile(False)
@cython.linetrace(False)
cdef inline void _put16(char* q, int16_t v) noexcept nogil:
    q[0] = <char>((v >> 8) & 0xFF)
    q[1] = <char>(v & 0xFF)


@cython.profile(False)
@cython.linetrace(False)
cdef inline Py_ssize_t _response_size(int version) noexcept nogil:
    """The size field of a Heartbeat response: header and body, without the prefix."""
    cdef Py_ssize_t size = 4 + 2  # correlation id, error code
    if version >= 1:
        size += 4  # throttle time
    if version >= FIRST_FLEXIBLE:
        size += 2  # tagged-field counts of the header and the body
    return size


@cython.profile(False)
@cython.linetrace(False)
cdef inline char* _write_response(
    char* q, int version, int32_t correlation_id, int32_t throttle, int16_t error
) noexcept nogil:
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

cdef inline char* _write_consumer_response(
    char* q, int32_t correlation_id, const uint8_t* member, Py_ssize_t member_size,
    int32_t member_epoch, int32_t interval,
) noexcept:
    """Write the answer to a ConsumerGroupHeartbeat that changes nothing at q, size prefix
    included (the member id copied as the request encoded it); returns its end."""
    _put32(q, <int32_t>(22 + member_size))
    _put32(q + 4, correlation_id)
    q[8] = 0  # the header's tagged fields
    _put32(q + 9, 0)  # throttle time
    _put16(q + 13, 0)  # error code
    q[15] = 0  # error message: null
    memcpy(q + 16, member, member_size)
    q += 16 + member_size
    _put32(q, member_epoch)
    _put32(q + 4, interval)
    q[8] = <char>0xFF  # assignment: null, unchanged
    q[9] = 0  # tagged fields
    return q + 10


cdef Py_ssize_t answer_consumer(
    const uint8_t* p, Py_ssize_t size, object table, int64_t now_ms, object client_host,
    char* out, Py_ssize_t* written, int32_t* interval,
) except -2:
    """Answer the ConsumerGroupHeartbeat frame at p (after its size prefix) if the member
    table answers it alone: 1 if answered (its answer written at out + written[0]), 0 if
    the full path must. `interval` is the table's heartbeat interval, read on first use."""
    cdef Cursor cur
    cdef Consumer numbers
    cur.p = p
    cur.pos = 0
    cur.end = size
    cdef const uint8_t* member
    cdef bytes encoded = None
    try:
        strings = _parse_consumer_heartbeat(&cur, &numbers)
        if cur.pos != cur.end:
            return 0  # bytes after the message: the full path logs them
        member = p + numbers.member_at
    except _Irregular:
        # The schema-driven codec decides, as in the twin (tagged fields, say, are no
        # change); the member id is then encoded afresh.
        try:
            header, request, extra = _decode_generic(PyBytes_FromStringAndSize(<const char*>p, size))
        except ProtocolError:
            return 0
        if extra or type(request) is not _ConsumerGroupHeartbeatRequest or not _changes_nothing(
            request
        ):
            return 0
        numbers.version = header.api_version
        numbers.correlation_id = header.correlation_id
        numbers.member_epoch = request.member_epoch
        strings = (header.client_id, request.group_id, request.member_id)
        encoded = _compact_string(request.member_id)
        member = <const uint8_t*>PyBytes_AS_STRING(encoded)
        numbers.member_size = PyBytes_GET_SIZE(encoded)
    if numbers.member_epoch <= 0:
        return 0
    cdef int code = table.consumer_heartbeat_id(
        strings[1], strings[2], numbers.member_epoch, strings[0], client_host, now_ms
    )
    if code != 0:
        return 0
    if interval[0] < 0:
        interval[0] = table.consumer_heartbeat_interval_ms
    cdef char* q = out + written[0]
    written[0] = _write_consumer_response(
        q, numbers.correlation_id, member, numbers.member_size, numbers.member_epoch,
        interval[0],
    ) - out
    return 1


cdef bytes _compact_string(str value):
    cdef bytes data = value.encode("utf-8")
    cdef Py_ssize_t n = len(data) + 1
    cdef bytearray out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + data


cdef Py_ssize_t answer_run(
    const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t max_size, object table,
    TableCore* core, int64_t now_ms, char* out, Py_ssize_t capacity, Py_ssize_t* written,
    Py_ssize_t* count, list trailing, object client_host,
) except -1:
    """Answer the run of Heartbeat frames at buf[pos:end] that the member table answers
    alone; returns the position after the last frame answered.

    The contract is answer_heartbeats' (see the twin, fastcoord/protocol/hot_frames.py).
    Each answer is written at out + written[0], which moves past it, within `capacity`
    bytes of out; count[0] counts the frames answered (ConsumerGroupHeartbeats that change
    nothing among them, answered from `client_host`). The caller holds buf and out still:
    the table is Python code, and nothing it does may move them. Frames the fast decoder
    finds irregular are decoded by the schema-driven codec, so the run stops at the same
    frame as the twin's.

    `core` is the table's C columns (MemberTable._core_address()) or NULL. A frame that
    parse_heartbeat reads and whose ids the C index holds is answered there, as the
    reactor's thread answers it, with no Python object made: at 100k members a Python
    lookup of the ids (two dicts, two new strings) was a tenth of the server's CPU. Any
    other frame takes the Python path, which decides as before.
    """
    cdef Span span
    cdef Py_ssize_t size, extra
    cdef const uint8_t* p
    cdef Cursor cur
    cdef Numbers numbers
    cdef int code
    cdef char* q
    cdef int32_t interval = -1
    while end - pos >= 4:
        p = buf + pos
        size = <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])
        if size < 2 or size > max_size or size > end - pos - 4:
            break
        if ((p[4] << 8) | p[5]) == CONSUMER_GROUP_HEARTBEAT:
            # Its answer is never longer than the frame: the caller's room suffices.
            if capacity - written[0] < 4 + size:
                break
            if not answer_consumer(p + 4, size, table, now_ms, client_host, out, written,
                                   &interval):
                break
            pos += 4 + size
            count[0] += 1
            continue
        if ((p[4] << 8) | p[5]) != HEARTBEAT:
            break
        if capacity - written[0] < MAX_RESPONSE:
            break  # never for a caller that gives room for end - pos bytes and one more answer
        if core != NULL and parse_heartbeat(p + 4, size, &span):
            code = span_heartbeat(core, &span, now_ms)
            if code >= 0:
                q = out + written[0]
                written[0] = _write_response(q, span.version, span.correlation_id, 0,
                                             <int16_t>code) - out
                pos += 4 + size
                count[0] += 1
                continue
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
