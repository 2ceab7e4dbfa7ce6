# cython: language_level=3
"""Which records of a segment compaction keeps, in C: the log cleaner's inner loop.

Why it exists: a pass over a log written by a busy coordinator reads millions of records;
decoding each key to hash it cost more CPU than the commits that wrote them. Here a record's
payload is walked as MessagePack without building anything but its key's bytes.

Twin: fastcoord/storage/compaction.py (msgspec, keeping key and value raw). This module
accepts exactly what msgspec accepts there: an array (fix, 16 or 32) of at least two
well-formed values (any MessagePack types; strings are not checked as UTF-8, as msgspec's
Raw does not), of which the first is the key, the second the value and the rest ignored,
and nothing after the array. A record nested deeper than MAX_DEPTH is left to the twin,
whose msgspec stops at Python's recursion limit. Differential tests hold the two together.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.set cimport PySet_Add, PySet_Contains
from libc.stdint cimport uint8_t, uint32_t

from fastcoord.storage import compaction as _twin

cdef object _split_twin = _twin.split_record

cdef enum:
    MALFORMED = -1
    TOO_DEEP = -2
    MAX_DEPTH = 64  # our records nest three deep; deeper ones go to the twin
    NIL = 0xC0


cdef inline uint32_t be(const uint8_t* q, int n) noexcept:
    cdef uint32_t v = 0
    cdef int i
    for i in range(n):
        v = (v << 8) | q[i]
    return v


cdef Py_ssize_t skip(const uint8_t* p, Py_ssize_t pos, Py_ssize_t end, int depth) noexcept:
    """The position after the MessagePack value at pos, MALFORMED if it is invalid or runs
    past end, TOO_DEEP if it nests deeper than MAX_DEPTH."""
    cdef uint8_t b
    cdef Py_ssize_t n, items, i
    cdef int width
    if pos >= end:
        return MALFORMED
    b = p[pos]
    pos += 1
    if b <= 0x7F or b >= 0xE0 or b == 0xC0 or b == 0xC2 or b == 0xC3:
        return pos
    if 0xA0 <= b <= 0xBF:  # fixstr
        n = b & 0x1F
        return pos + n if n <= end - pos else MALFORMED
    if 0x90 <= b <= 0x9F:
        items = b & 0x0F
    elif 0x80 <= b <= 0x8F:
        items = 2 * (b & 0x0F)
    elif b == 0xDC or b == 0xDD or b == 0xDE or b == 0xDF:  # array16/32, map16/32
        width = 2 if b == 0xDC or b == 0xDE else 4
        if width > end - pos:
            return MALFORMED
        items = be(p + pos, width)
        pos += width
        if b >= 0xDE:
            items *= 2
    elif b == 0xC4 or b == 0xC5 or b == 0xC6 or b == 0xD9 or b == 0xDA or b == 0xDB:
        # bin8/16/32, str8/16/32: a length, then the bytes
        width = 1 if b == 0xC4 or b == 0xD9 else (2 if b == 0xC5 or b == 0xDA else 4)
        if width > end - pos:
            return MALFORMED
        n = be(p + pos, width)
        pos += width
        return pos + n if n <= end - pos else MALFORMED
    elif b == 0xC7 or b == 0xC8 or b == 0xC9:  # ext8/16/32: a length, a type, the bytes
        width = 1 if b == 0xC7 else (2 if b == 0xC8 else 4)
        if width > end - pos:
            return MALFORMED
        n = <Py_ssize_t>be(p + pos, width) + 1
        pos += width
        return pos + n if n <= end - pos else MALFORMED
    else:
        if b == 0xCA or b == 0xCE or b == 0xD2:
            n = 4
        elif b == 0xCB or b == 0xCF or b == 0xD3:
            n = 8
        elif b == 0xCC or b == 0xD0:
            n = 1
        elif b == 0xCD or b == 0xD1:
            n = 2
        elif 0xD4 <= b <= 0xD8:  # fixext 1, 2, 4, 8, 16: a type, then the bytes
            n = 1 + (1 << (b - 0xD4))
        else:
            return MALFORMED  # 0xC1: never used
        return pos + n if n <= end - pos else MALFORMED
    # An array or a map of `items` values.
    if items > end - pos:
        return MALFORMED  # each value takes a byte at least
    if depth >= MAX_DEPTH:
        return TOO_DEEP
    for i in range(items):
        pos = skip(p, pos, end, depth + 1)
        if pos < 0:
            return pos
    return pos


def latest_records(bytes data, list spans, set seen, bint drop_tombstones):
    """See the twin, fastcoord/storage/compaction.py."""
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t i, begin, end, pos, key_start, key_end, items, k
    cdef uint8_t b
    cdef bint tombstone
    cdef list kept = []
    cdef Py_ssize_t dropped = 0
    for i in range(len(spans) - 1, -1, -1):
        begin, end = spans[i]
        if not 0 <= begin <= end <= size:
            raise ValueError(f"record {i}: span {begin}-{end} is outside the data")
        pos = begin
        items = -1
        tombstone = False
        if pos < end:
            b = p[pos]
            if 0x90 <= b <= 0x9F:
                items = b & 0x0F
                pos += 1
            elif (b == 0xDC and end - pos >= 3) or (b == 0xDD and end - pos >= 5):
                items = be(p + pos + 1, 2 if b == 0xDC else 4)
                pos += 3 if b == 0xDC else 5
        key_start = pos
        key_end = MALFORMED
        if items >= 2:
            key_end = skip(p, pos, end, 1)
            pos = key_end
            k = 1
            while k < items and pos >= 0:
                if k == 1:
                    tombstone = pos < end and p[pos] == NIL
                pos = skip(p, pos, end, 1)
                k += 1
            if pos >= 0 and pos != end:
                pos = MALFORMED  # bytes after the array
        if key_end == TOO_DEEP or pos == TOO_DEEP:
            key, tombstone = _split_twin(data[begin:end])  # ValueError if it is no record
        elif items < 2 or key_end < 0 or pos < 0:
            raise ValueError(f"record {i}: not an array of a key and a value")
        else:
            key = PyBytes_FromStringAndSize(<const char*>p + key_start, key_end - key_start)
        if PySet_Contains(seen, key):
            continue  # a later record of this key follows
        PySet_Add(seen, key)
        if drop_tombstones and tombstone:
            dropped += 1
            continue
        kept.append(i)
    return kept, dropped
