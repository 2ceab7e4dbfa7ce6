# cython: language_level=3
"""Hand-written codec for OffsetCommit: request frames to an OffsetCommitBatch, and an
OffsetCommitAnswer to a response frame.

Twin: fastcoord/protocol/commit_frames.py (the schema-driven codec, then the conversion).
The decoder reads the well-formed common case of every served version (0-9) straight into
the batch's arrays; anything else (another API, tagged fields present, a field that runs
past the end, invalid UTF-8) is handed to the twin, so errors are the twin's errors by
construction. The encoder writes the answer in one pass over the batch; an answer it does
not expect (a wrong type, an out-of-range value) is encoded, or refused, by the twin.

Wire layouts (OffsetCommitRequest.json, OffsetCommitResponse.json, RequestHeader.json):

  request header v1 (v0-7):  api_key:int16 api_version:int16 correlation_id:int32
                             client_id:nullable int16-length string
  request header v2 (v8-9):  header v1 + tagged fields
  OffsetCommitRequest:  group_id:string
                        generation_id_or_member_epoch:int32      v1+
                        member_id:string                         v1+
                        group_instance_id:nullable string        v7+
                        retention_time_ms:int64                  v2-4
                        topics:[name:string
                                partitions:[partition_index:int32
                                            committed_offset:int64
                                            committed_leader_epoch:int32   v6+
                                            commit_timestamp:int64         v1
                                            committed_metadata:nullable string]]
  response header v0 (v0-7): correlation_id:int32;  v1 (v8-9): + tagged fields
  OffsetCommitResponse: throttle_time_ms:int32 (v3+)
                        topics:[name:string partitions:[partition_index:int32 error_code:int16]]

Flexible versions (8+) have compact strings and arrays (unsigned varint length + 1) and end
every struct with tagged fields.
"""

cimport cython
from cpython cimport array
from cpython.list cimport PyList_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_Check
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_CheckExact
from libc.string cimport memcpy

import array as _array

from fastcoord.protocol import commit_frames as _twin
from fastcoord.protocol.commit_batch import OffsetCommitAnswer, OffsetCommitBatch
from fastcoord.protocol.headers import RequestHeader

include "cursor.pxi"

cdef extern from "debug.h":
    int FASTCOORD_DEBUG

cdef enum:
    OFFSET_COMMIT = 8
    MAX_VERSION = 9
    FIRST_FLEXIBLE = 8
    INT16_MAX = 0x7FFF
    # The fewest bytes a partition of a request takes (v0: index, offset, metadata length).
    MIN_PARTITION_BYTES = 14
    TOPIC_CACHE = 256  # topic names remembered by their place in the request

# Typed here: a literal over 2**31 in an expression would be a Python int.
cdef uint64_t UINT32_MAX = 0xFFFFFFFF

cdef object _decode_twin = _twin.decode_offset_commit
cdef object _encode_twin = _twin.encode_offset_commit_response
cdef object _RequestHeader = RequestHeader
cdef object _OffsetCommitBatch = OffsetCommitBatch
cdef object _OffsetCommitAnswer = OffsetCommitAnswer
cdef array.array _INTS = _array.array("i")
cdef array.array _LONGS = _array.array("q")

cdef _LastString _client_id = _LastString()
cdef _LastString _group_id = _LastString()
cdef _LastString _member_id = _LastString()
cdef _LastString _instance_id = _LastString()
cdef list _topic_names = [_LastString() for _ in range(TOPIC_CACHE)]


cdef uint32_t read_uvarint(Cursor* c) except? 0xFFFFFFFF:
    """An unsigned varint of at most 5 bytes that fits in 32 bits (the codec's rule). Not
    inline: the callers inline their one-byte case and call this for the rest."""
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        need(c, 1)
        b = c.p[c.pos]
        c.pos += 1
        value |= <uint64_t>(b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift >= 35:
            raise _Irregular()
    if value > UINT32_MAX:
        raise _Irregular()
    return <uint32_t>value


cdef inline uint32_t read_small_uvarint(Cursor* c) except? 0xFFFFFFFF:
    """read_uvarint, with the one-byte case (lengths under 127, empty tag sections) inline."""
    cdef uint8_t b
    if c.pos < c.end:
        b = c.p[c.pos]
        if b < 0x80:
            c.pos += 1
            return b
    return read_uvarint(c)


cdef inline object read_text(Cursor* c, bint flexible, bint nullable, _LastString last):
    """A string field: int16 length, or in flexible versions a compact length."""
    cdef Py_ssize_t n
    if not flexible:
        return read_string(c, nullable, last)
    n = <Py_ssize_t>read_small_uvarint(c) - 1
    if n == -1 and nullable:
        return None
    if n < 0 or n > INT16_MAX:
        raise _Irregular()
    return read_utf8(c, n) if last is None else last.decode(c, n)


cdef inline Py_ssize_t read_count(Cursor* c, bint flexible, Py_ssize_t min_item) except -1:
    """A non-null array's count, no more than the bytes left can hold."""
    cdef Py_ssize_t n
    if flexible:
        n = <Py_ssize_t>read_small_uvarint(c) - 1
    else:
        n = read_int32(c)
    if n < 0 or n * min_item > c.end - c.pos:
        raise _Irregular()
    return n


cdef inline int expect_no_tagged_fields(Cursor* c) except -1:
    if c.pos < c.end and c.p[c.pos] == 0:
        c.pos += 1
        return 0
    return _tagged_fields(c)


cdef int _tagged_fields(Cursor* c) except -1:
    if read_uvarint(c) != 0:
        raise _Irregular()
    return 0


cdef inline uint32_t load_be32(const uint8_t* q) noexcept:
    return (<uint32_t>q[0] << 24) | (<uint32_t>q[1] << 16) | (<uint32_t>q[2] << 8) | q[3]


cdef inline uint64_t load_be64(const uint8_t* q) noexcept:
    return (<uint64_t>load_be32(q) << 32) | load_be32(q + 4)


cdef tuple _parse(Cursor* c):
    """(header, batch) of a well-formed OffsetCommit frame, the cursor left at the end of
    the message; anything else raises _Irregular."""
    cdef int16_t api_key = read_int16(c)
    cdef int16_t version = read_int16(c)
    cdef int32_t correlation_id = read_int32(c)
    cdef bint flexible
    cdef int32_t generation = -1
    cdef Py_ssize_t ntopics, nparts, i, j, k, total = 0, n
    cdef array.array ends, partitions, offsets, epochs
    cdef int* ends_p
    cdef int* parts_p
    cdef long long* offsets_p
    cdef int* epochs_p
    cdef const uint8_t* q
    cdef list metadata = None
    cdef _LastString name_cache
    if api_key != OFFSET_COMMIT or version < 0 or version > MAX_VERSION:
        raise _Irregular()
    flexible = version >= FIRST_FLEXIBLE
    # A partition's fixed fields: index, offset, the leader epoch (v6+), v1's timestamp.
    cdef Py_ssize_t fixed = 12 + (4 if version >= 6 else 0) + (8 if version == 1 else 0)
    client_id = read_string(c, True, _client_id)
    if flexible:
        expect_no_tagged_fields(c)
    group_id = read_text(c, flexible, False, _group_id)
    member_id = ""
    instance_id = None
    if version >= 1:
        generation = read_int32(c)
        member_id = read_text(c, flexible, False, _member_id)
    if version >= 7:
        instance_id = read_text(c, flexible, True, _instance_id)
    if 2 <= version <= 4:
        skip(c, 8)  # retention_time_ms: the broker's retention applies (KIP-211)
    ntopics = read_count(c, flexible, 1 if flexible else 6)
    topics = []
    ends = array.clone(_INTS, ntopics, False)
    ends_p = ends.data.as_ints
    partitions = array.clone(_INTS, 0, False)
    offsets = array.clone(_LONGS, 0, False)
    epochs = array.clone(_INTS, 0, False)
    for i in range(ntopics):
        name_cache = <_LastString>_topic_names[i] if i < TOPIC_CACHE else None
        topics.append(read_text(c, flexible, False, name_cache))
        nparts = read_count(c, flexible, MIN_PARTITION_BYTES)
        array.resize_smart(partitions, total + nparts)
        array.resize_smart(offsets, total + nparts)
        array.resize_smart(epochs, total + nparts)
        parts_p = partitions.data.as_ints + total
        offsets_p = offsets.data.as_longlongs + total
        epochs_p = epochs.data.as_ints + total
        for j in range(nparts):
            # The fixed fields at once: one bounds check, loads without checks.
            need(c, fixed)
            q = c.p + c.pos
            parts_p[j] = <int32_t>load_be32(q)
            offsets_p[j] = <int64_t>load_be64(q + 4)
            epochs_p[j] = <int32_t>load_be32(q + 12) if version >= 6 else -1
            c.pos += fixed  # and v1's commit_timestamp: the broker's clock applies
            if flexible and metadata is None and c.end - c.pos >= 2 and c.p[c.pos] <= 1 and (
                c.p[c.pos + 1] == 0
            ):
                c.pos += 2  # the common case: no metadata (empty or null), no tagged fields
                continue
            if flexible:
                n = <Py_ssize_t>read_small_uvarint(c) - 1
                if n > INT16_MAX:
                    raise _Irregular()
            else:
                n = read_int16(c)
                if n < -1:
                    raise _Irregular()
            if n > 0:
                if metadata is None:
                    metadata = [""] * (total + j)
                metadata.append(read_utf8(c, n))
            elif metadata is not None:
                metadata.append("")  # empty, or null: Kafka's NoMetadata
            if flexible:
                expect_no_tagged_fields(c)
        total += nparts
        ends_p[i] = <int>total
        if flexible:
            expect_no_tagged_fields(c)
    if flexible:
        expect_no_tagged_fields(c)
    header = _RequestHeader(OFFSET_COMMIT, version, correlation_id, client_id)
    batch = _OffsetCommitBatch(
        group_id, generation, member_id, instance_id, topics, ends, partitions, offsets,
        epochs, metadata,
    )
    return header, batch


def decode_offset_commit(frame):
    """Decode a request frame (without its size prefix) as decode_request would, except
    that an OffsetCommit body comes as an OffsetCommitBatch: (header, body, the count of
    bytes after the body)."""
    if type(frame) is not bytes:
        return _decode_twin(frame)
    cdef Cursor cur
    cur.p = <const uint8_t*>PyBytes_AS_STRING(frame)
    cur.pos = 0
    cur.end = PyBytes_GET_SIZE(frame)
    try:
        header, batch = _parse(&cur)
    except _Irregular:
        return _decode_twin(frame)
    if cur.pos == cur.end:
        return (header, batch, 0)
    return (header, batch, cur.end - cur.pos)


# -- the response ---------------------------------------------------------------------------


cdef inline Py_ssize_t uvarint_size(uint32_t v) noexcept:
    cdef Py_ssize_t n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline char* put_uvarint(char* q, uint32_t v) noexcept:
    while v >= 0x80:
        q[0] = <char>((v & 0x7F) | 0x80)
        v >>= 7
        q += 1
    q[0] = <char>v
    return q + 1


cdef inline char* put32(char* q, int32_t v) noexcept:
    q[0] = <char>((v >> 24) & 0xFF)
    q[1] = <char>((v >> 16) & 0xFF)
    q[2] = <char>((v >> 8) & 0xFF)
    q[3] = <char>(v & 0xFF)
    return q + 4


cdef inline char* put16(char* q, int16_t v) noexcept:
    q[0] = <char>((v >> 8) & 0xFF)
    q[1] = <char>(v & 0xFF)
    return q + 2


cdef inline char* put_count(char* q, Py_ssize_t n, bint flexible) noexcept:
    if flexible:
        return put_uvarint(q, <uint32_t>(n + 1))
    return put32(q, <int32_t>n)


cdef inline bint _typed(object a, char typecode, Py_ssize_t length):
    return (
        type(a) is array.array
        and (<array.array>a).ob_descr.typecode == typecode
        and len(a) == length
    )


cdef inline bint _in_range(object v, long long low, long long high):
    cdef int overflow = 0
    cdef long long n
    if not PyLong_Check(v):
        return False
    n = PyLong_AsLongLongAndOverflow(v, &overflow)
    return overflow == 0 and low <= n <= high


def encode_offset_commit_response(correlation_id, api_version, answer):
    """Encode the OffsetCommit response frame of `answer` (an OffsetCommitAnswer), size
    prefix and header included; see the twin."""
    if (
        type(answer) is not _OffsetCommitAnswer
        or type(answer.batch) is not _OffsetCommitBatch
        or type(correlation_id) is not int
        or type(api_version) is not int
        or not 0 <= api_version <= MAX_VERSION
        or not -0x80000000 <= correlation_id <= 0x7FFFFFFF
        or not _in_range(answer.error_code, -0x8000, 0x7FFF)
    ):
        return _encode_twin(correlation_id, api_version, answer)
    batch = answer.batch
    topics = batch.topics
    ends_obj = batch.ends
    parts_obj = batch.partitions
    errors_obj = answer.errors
    if type(topics) is not list:
        return _encode_twin(correlation_id, api_version, answer)
    cdef Py_ssize_t ntopics = PyList_GET_SIZE(topics)
    if not _typed(ends_obj, c'i', ntopics) or type(parts_obj) is not array.array:
        return _encode_twin(correlation_id, api_version, answer)
    cdef array.array ends = ends_obj
    cdef array.array parts = parts_obj
    cdef Py_ssize_t nparts = len(parts)
    if parts.ob_descr.typecode != c'i' or (
        errors_obj is not None and not _typed(errors_obj, c'h', nparts)
    ):
        return _encode_twin(correlation_id, api_version, answer)
    cdef int version = api_version
    cdef bint flexible = version >= FIRST_FLEXIBLE
    cdef const int* ends_p = ends.data.as_ints
    cdef const int* parts_p = parts.data.as_ints
    cdef const short* errors_p = NULL
    if errors_obj is not None:
        errors_p = (<array.array>errors_obj).data.as_shorts
    cdef int16_t code = <int16_t>answer.error_code
    cdef Py_ssize_t i, k, start = 0, end, n, size
    cdef const char* name
    # First pass: the size, and that the batch is consistent (else the twin decides).
    size = 4 + (1 if flexible else 0) + (4 if version >= 3 else 0)
    size += uvarint_size(<uint32_t>(ntopics + 1)) if flexible else 4
    for i in range(ntopics):
        text = topics[i]
        end = ends_p[i]
        if not PyUnicode_CheckExact(text) or end < start or end > nparts:
            return _encode_twin(correlation_id, api_version, answer)
        try:
            PyUnicode_AsUTF8AndSize(text, &n)
        except UnicodeEncodeError:
            return _encode_twin(correlation_id, api_version, answer)
        if n > INT16_MAX:
            return _encode_twin(correlation_id, api_version, answer)
        size += (uvarint_size(<uint32_t>(n + 1)) if flexible else 2) + n
        size += uvarint_size(<uint32_t>(end - start + 1)) if flexible else 4
        size += (end - start) * (7 if flexible else 6) + (1 if flexible else 0)
        start = end
    if start != nparts:
        return _encode_twin(correlation_id, api_version, answer)
    size += 1 if flexible else 0
    out = PyBytes_FromStringAndSize(NULL, size + 4)
    cdef char* q0 = PyBytes_AS_STRING(out)
    cdef char* q = put32(q0, <int32_t>size)
    q = put32(q, <int32_t>correlation_id)
    if flexible:
        q[0] = 0
        q += 1
    if version >= 3:
        q = put32(q, 0)  # throttle_time_ms
    q = put_count(q, ntopics, flexible)
    start = 0
    for i in range(ntopics):
        name = PyUnicode_AsUTF8AndSize(topics[i], &n)
        if flexible:
            q = put_uvarint(q, <uint32_t>(n + 1))
        else:
            q = put16(q, <int16_t>n)
        memcpy(q, name, n)
        q += n
        end = ends_p[i]
        q = put_count(q, end - start, flexible)
        for k in range(start, end):
            q = put32(q, parts_p[k])
            q = put16(q, <int16_t>errors_p[k] if errors_p != NULL else code)
            if flexible:
                q[0] = 0
                q += 1
        if flexible:
            q[0] = 0
            q += 1
        start = end
    if flexible:
        q[0] = 0
        q += 1
    if FASTCOORD_DEBUG and q - q0 != size + 4:
        raise AssertionError(f"OffsetCommit response: wrote {q - q0} of {size + 4} bytes")
    return out
