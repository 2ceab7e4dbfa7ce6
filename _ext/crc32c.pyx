# cython: language_level=3
"""CRC-32C (Castagnoli), the checksum of Kafka's record batches, in C.

Why it exists: fastcoord's durable log (fastcoord/storage/) keeps __consumer_offsets records
in batches that carry a CRC-32C as Kafka's do, so that a torn or corrupted write is found when
the log is read back; every batch is checksummed once when written and once when read.

The standard CRC-32C (iSCSI, RFC 3720; Kafka's org.apache.kafka.common.utils.Crc32C):
reflected polynomial 0x82F63B78, initial value and final XOR 0xFFFFFFFF, so that
crc32c(b"123456789") == 0xE3069283. Passing a result back as `crc` continues it:
crc32c(a + b) == crc32c(b, crc32c(a)).

Computed with the CPU's CRC32 instruction (SSE4.2) when it has one, found at import, else
with a slicing-by-8 table (both in _ext/crc32c.h). Inputs above NOGIL_BYTES are checksummed
without the GIL. Inputs are bytes, bytearray or a C-contiguous memoryview of one-byte items; anything
else raises the TypeError or ValueError that the twin raises, checked in the same order.

Twin: fastcoord/storage/crc32c.py, the same function in plain Python. tests/storage/
test_crc32c.py holds this module (both paths) to the twin, to RFC 3720's vectors and to
aiokafka's and kafka-python's implementations.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_Check
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_Check, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.memoryview cimport PyMemoryView_Check
from libc.stdint cimport uint32_t, uint64_t

import operator

cdef extern from "crc32c.h" nogil:
    void fastcoord_crc32c_init()
    int fastcoord_crc32c_use_sse42
    uint32_t fastcoord_crc32c_table_update(uint32_t state, const unsigned char* p, size_t n)
    uint32_t fastcoord_crc32c_update(uint32_t state, const unsigned char* p, size_t n)

cdef enum:
    # Above this many bytes the GIL is released: 64 KiB take about 8 us with SSE4.2 and
    # 30 us with the table, against the ~0.1 us that releasing and taking it back costs.
    NOGIL_BYTES = 65536

cdef uint32_t MASK32 = 0xFFFFFFFF

fastcoord_crc32c_init()
cdef bint _sse42 = fastcoord_crc32c_use_sse42 != 0

# Whether crc32c uses the CRC32 instruction (for tests and benchmarks; not in the twin).
_SSE42: bool = _sse42


cdef inline uint32_t _update(
    uint32_t state, const unsigned char* p, size_t n, bint sse42
) noexcept nogil:
    if sse42:
        return fastcoord_crc32c_update(state, p, n)
    return fastcoord_crc32c_table_update(state, p, n)


cdef long long _checked_crc(object crc) except -1:
    """crc as a C integer in [0, 2**32), or ValueError (TypeError if it is not an integer)."""
    cdef int overflow = 0
    cdef long long n
    if not PyLong_CheckExact(crc):
        crc = operator.index(crc)
    n = PyLong_AsLongLongAndOverflow(crc, &overflow)
    if overflow != 0 or n < 0 or n > MASK32:
        raise ValueError(f"crc must be between 0 and {MASK32}, got {crc}")
    return n


cdef object _crc32c(object data, object crc, bint sse42):
    cdef Py_buffer view
    cdef uint32_t state
    cdef const unsigned char* p
    cdef size_t n
    # The twin's checks, in its order and with its predicates (memoryview.c_contiguous, not
    # PyBuffer_IsContiguous, which differ on an empty strided view).
    if PyMemoryView_Check(data):
        if data.itemsize != 1:
            raise TypeError(
                f"data must be bytes, bytearray or a memoryview of one-byte items, "
                f"not a memoryview of format {data.format!r}"
            )
        if not data.c_contiguous:
            raise ValueError("data must be C-contiguous")
    elif not (PyBytes_Check(data) or PyByteArray_Check(data)):
        raise TypeError(
            f"data must be bytes, bytearray or memoryview, not {type(data).__name__}"
        )
    state = <uint32_t>_checked_crc(crc) ^ MASK32
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)  # C-contiguous: view.len bytes at view.buf
    p = <const unsigned char*>view.buf
    n = <size_t>view.len
    if n > NOGIL_BYTES:
        with nogil:
            state = _update(state, p, n, sse42)
    else:
        state = _update(state, p, n, sse42)
    PyBuffer_Release(&view)
    return state ^ MASK32


def crc32c(object data, object crc=0) -> int:
    """The CRC-32C of data (bytes, bytearray or memoryview), continuing `crc` if given.

    crc32c(a + b) == crc32c(b, crc32c(a)); crc32c(b"123456789") == 0xE3069283.
    """
    return _crc32c(data, crc, _sse42)


def _crc32c_table(object data, object crc=0) -> int:
    """crc32c by the slicing-by-8 table even on a CPU with SSE4.2, so that tests reach it."""
    return _crc32c(data, crc, False)


cdef inline uint32_t _load_be32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


def walk_frames(bytes data, Py_ssize_t start=0, Py_ssize_t max_payload=0x7FFFFFFF):
    """Walk CRC-framed records (see the twin, fastcoord/storage/crc32c.py): the payload
    spans of the good frames from `start`, where the walk stopped, and why."""
    cdef const unsigned char* p = <const unsigned char*>PyBytes_AS_STRING(data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t pos = start
    cdef uint32_t length, expected, actual
    spans = []
    reason = None
    if start < 0 or start > n:
        raise ValueError("start is outside data")
    while pos < n:
        if n - pos < 8:
            reason = f"{n - pos} bytes, less than a frame header"
            break
        length = _load_be32(p + pos)
        expected = _load_be32(p + pos + 4)
        if length > <uint64_t>max_payload:
            reason = f"a length of {length} bytes"
            break
        if <uint64_t>(n - pos - 8) < length:
            reason = f"a frame of {length} bytes with only {n - pos - 8} written"
            break
        actual = _update(MASK32, p + pos + 8, length, _sse42) ^ MASK32
        if actual != expected:
            reason = f"CRC32C {actual:#010x}, expected {expected:#010x}"
            break
        spans.append((pos + 8, pos + 8 + length))
        pos += 8 + length
    return spans, pos, reason
