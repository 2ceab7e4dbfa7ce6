# cython: language_level=3
"""The log's frames of an OffsetCommit's records, written straight from its batch.

Why it exists: a commit of a hundred partitions is a hundred records, and building each as
a Record of two Structs, encoding it with msgspec and checksumming it apart cost as much as
the rest of the commit. This writes the same bytes in one pass over the batch's arrays.

Twin: fastcoord/storage/offset_records.py, which frames commits.records() one by one with
storage/segment.py. Differential tests hold this module to it byte for byte. Anything this
module does not expect (another type, an inconsistent batch, a value out of its range) is
framed, or refused, by the twin.

Each record, as segment.py frames it: length:uint32 crc32c:uint32 payload, big-endian, the
payload msgspec's MessagePack of
  Record(OffsetCommitKey(group, topic, partition),
         OffsetCommitValue(offset, leader_epoch, metadata, commit_timestamp)),
that is, array_like Structs, the tagged ones with their tag (1) first:
  [[1, group, topic, partition], [1, offset, leader_epoch, metadata, commit_timestamp]]
Integers take MessagePack's shortest form (fixint, then uint or int of 8 to 64 bits, by
sign); strings fixstr, str8, str16 or str32 by length.
"""

cimport cython
from cpython cimport array
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_CheckExact
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from fastcoord.core.records import OffsetCommits
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.storage import offset_records as _twin

cdef extern from "crc32c.h" nogil:
    void fastcoord_crc32c_init()
    uint32_t fastcoord_crc32c_update(uint32_t state, const unsigned char* p, size_t n)

cdef extern from "debug.h":
    int FASTCOORD_DEBUG

cdef enum:
    FRAME_HEADER = 8
    RECORD_TAG = 1  # OffsetCommitKey's and OffsetCommitValue's msgspec tag

fastcoord_crc32c_init()

# Typed here: a literal over 2**31 in an expression would be a Python int, and the
# expression Python arithmetic.
cdef int64_t UINT32_END = 0x100000000
cdef uint32_t MASK32 = 0xFFFFFFFF

cdef object _OffsetCommits = OffsetCommits
cdef object _Batch = OffsetCommitBatch
cdef object _frame_twin = _twin.frame_offset_commits


cdef inline Py_ssize_t int_size(int64_t v) noexcept:
    if v >= 0:
        if v < 128:
            return 1
        if v < 0x100:
            return 2
        if v < 0x10000:
            return 3
        if v < UINT32_END:
            return 5
        return 9
    if v >= -32:
        return 1
    if v >= -0x80:
        return 2
    if v >= -0x8000:
        return 3
    if v >= -0x7FFFFFFF - 1:
        return 5
    return 9


cdef inline uint8_t* put_be(uint8_t* q, uint64_t v, int n) noexcept:
    cdef int i
    for i in range(n):
        q[i] = <uint8_t>(v >> (8 * (n - 1 - i)))
    return q + n


cdef inline uint8_t* put_int(uint8_t* q, int64_t v) noexcept:
    if -32 <= v < 128:  # a fixint, positive or negative: most indexes and epochs
        q[0] = <uint8_t>v
        return q + 1
    return put_wide_int(q, v)


cdef uint8_t* put_wide_int(uint8_t* q, int64_t v) noexcept:
    if v >= 0:
        if v < 0x100:
            q[0] = 0xCC
            return put_be(q + 1, <uint64_t>v, 1)
        if v < 0x10000:
            q[0] = 0xCD
            return put_be(q + 1, <uint64_t>v, 2)
        if v < UINT32_END:
            q[0] = 0xCE
            return put_be(q + 1, <uint64_t>v, 4)
        q[0] = 0xCF
        return put_be(q + 1, <uint64_t>v, 8)
    if v >= -0x80:
        q[0] = 0xD0
        return put_be(q + 1, <uint64_t>v, 1)
    if v >= -0x8000:
        q[0] = 0xD1
        return put_be(q + 1, <uint64_t>v, 2)
    if v >= -0x7FFFFFFF - 1:
        q[0] = 0xD2
        return put_be(q + 1, <uint64_t>v, 4)
    q[0] = 0xD3
    return put_be(q + 1, <uint64_t>v, 8)


cdef inline Py_ssize_t str_size(Py_ssize_t n) noexcept:
    if n < 32:
        return 1 + n
    if n < 0x100:
        return 2 + n
    if n < 0x10000:
        return 3 + n
    return 5 + n


cdef inline uint8_t* put_str(uint8_t* q, const char* s, Py_ssize_t n) noexcept:
    if n < 32:
        q[0] = <uint8_t>(0xA0 | n)
        q += 1
    elif n < 0x100:
        q[0] = 0xD9
        q = put_be(q + 1, <uint64_t>n, 1)
    elif n < 0x10000:
        q[0] = 0xDA
        q = put_be(q + 1, <uint64_t>n, 2)
    else:
        q[0] = 0xDB
        q = put_be(q + 1, <uint64_t>n, 4)
    memcpy(q, s, n)
    return q + n


cdef inline const char* utf8(object text, Py_ssize_t* n) except? NULL:
    """The UTF-8 of a str (cached in it), or NULL if it is not exactly a str or has none."""
    if not PyUnicode_CheckExact(text):
        return NULL
    try:
        return PyUnicode_AsUTF8AndSize(text, n)
    except UnicodeEncodeError:
        return NULL


cdef inline bint _typed(object a, char typecode, Py_ssize_t length):
    return (
        type(a) is array.array
        and (<array.array>a).ob_descr.typecode == typecode
        and len(a) == length
    )


def frame_offset_commits(commits):
    """The log's frames of every record `commits` (an OffsetCommits) stands for, in order:
    b"".join(segment.encode(r) for r in commits.records())."""
    if type(commits) is not _OffsetCommits or type(commits.batch) is not _Batch:
        return _frame_twin(commits)
    batch = commits.batch
    topics = batch.topics
    metadata = batch.metadata
    stamp = commits.commit_timestamp
    if type(topics) is not list or (metadata is not None and type(metadata) is not list):
        return _frame_twin(commits)
    cdef Py_ssize_t ntopics = len(topics)
    cdef Py_ssize_t nparts = len(batch.partitions)
    if (
        not _typed(batch.ends, c'i', ntopics)
        or not _typed(batch.partitions, c'i', nparts)
        or not _typed(batch.offsets, c'q', nparts)
        or not _typed(batch.leader_epochs, c'i', nparts)
        or (metadata is not None and len(metadata) != nparts)
        or type(stamp) is not int
        or not -0x8000000000000000 <= stamp <= 0x7FFFFFFFFFFFFFFF
    ):
        return _frame_twin(commits)
    cdef const int* ends = (<array.array>batch.ends).data.as_ints
    cdef const int* partitions = (<array.array>batch.partitions).data.as_ints
    cdef const long long* offsets = (<array.array>batch.offsets).data.as_longlongs
    cdef const int* epochs = (<array.array>batch.leader_epochs).data.as_ints
    cdef int64_t timestamp = stamp
    cdef Py_ssize_t group_n, topic_n, meta_n = 0, i, k, start, end, size = 0, payload
    cdef const char* group = utf8(commits.group_id, &group_n)
    cdef const char* topic
    cdef const char* meta = ""
    if group == NULL:
        return _frame_twin(commits)
    # What every record has but its topic, partition, offset, epoch and metadata: the two
    # array headers, the two tags, the group and the timestamp.
    cdef Py_ssize_t fixed = FRAME_HEADER + 1 + 2 + str_size(group_n) + 2 + int_size(timestamp)
    start = 0
    for i in range(ntopics):
        end = ends[i]
        if end < start or end > nparts:
            return _frame_twin(commits)
        topic = utf8(topics[i], &topic_n)
        if topic == NULL:
            return _frame_twin(commits)
        size += (end - start) * (fixed + str_size(topic_n))
        for k in range(start, end):
            size += int_size(partitions[k]) + int_size(offsets[k]) + int_size(epochs[k])
            if metadata is not None:
                meta = utf8(metadata[k], &meta_n)
                if meta == NULL:
                    return _frame_twin(commits)
            size += str_size(meta_n)
        start = end
    if start != nparts:
        return _frame_twin(commits)
    out = PyBytes_FromStringAndSize(NULL, size)
    cdef uint8_t* q0 = <uint8_t*>PyBytes_AS_STRING(out)
    cdef uint8_t* q = q0
    cdef uint8_t* body
    cdef uint8_t* key
    cdef Py_ssize_t key_n
    # The timestamp, the same in every record, is encoded once and copied.
    cdef uint8_t stamp_bytes[9]
    cdef Py_ssize_t stamp_n = put_int(stamp_bytes, timestamp) - stamp_bytes
    start = 0
    for i in range(ntopics):
        end = ends[i]
        if end == start:
            continue
        topic = PyUnicode_AsUTF8AndSize(topics[i], &topic_n)
        # The key's start (array headers, tag, group, topic) is the same for the topic's
        # records: written once in the first, then copied.
        key = q + FRAME_HEADER
        key[0] = 0x92
        key[1] = 0x94
        key[2] = RECORD_TAG
        key_n = put_str(put_str(key + 3, group, group_n), topic, topic_n) - key
        for k in range(start, end):
            body = q + FRAME_HEADER
            if body != key:
                memcpy(body, key, key_n)
            q = put_int(body + key_n, partitions[k])
            q[0] = 0x95
            q[1] = RECORD_TAG
            q = put_int(q + 2, offsets[k])
            q = put_int(q, epochs[k])
            if metadata is not None:
                meta = PyUnicode_AsUTF8AndSize(metadata[k], &meta_n)
            q = put_str(q, meta, meta_n)
            memcpy(q, stamp_bytes, stamp_n)
            q += stamp_n
            payload = q - body
            put_be(body - FRAME_HEADER, <uint64_t>payload, 4)
            put_be(
                body - 4,
                fastcoord_crc32c_update(MASK32, body, <size_t>payload) ^ MASK32,
                4,
            )
        start = end
    if FASTCOORD_DEBUG and q - q0 != size:
        raise AssertionError(f"offset commit frames: wrote {q - q0} of {size} bytes")
    return out
