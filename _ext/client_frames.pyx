# cython: language_level=3
"""Compiled heartbeat path of fastcoord's client: batches of Heartbeat requests out, runs
of answers in.

Twin: fastcoord/client/frames.py, which states the contract and the wire layouts. Errors
are built by the twin's own helpers, so their texts are the same by construction.

Safety: setup.py turns bounds checks off, so every read below is checked by hand against
the size of the buffer. read_answers holds a buffer export on `buf` for the whole walk:
a bytearray cannot be resized while exported, so Python code run by the dict lookups (a
key's __eq__) cannot move or shrink the memory being read.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_DelItem, PyDict_GetItemWithError
from cpython.list cimport PyList_AsTuple
from cpython.ref cimport PyObject
from libc.stdint cimport int16_t, int32_t, uint8_t, uint32_t
from libc.string cimport memcpy

from fastcoord.client.frames import frame_size_error

cdef extern from "debug.h":
    int FASTCOORD_DEBUG

cdef enum:
    CORRELATION_ID_AT = 8
    FIRST_FLEXIBLE = 4

cdef object INT32_MAX = 2**31 - 1
cdef object _frame_size_error = frame_size_error


cdef inline int32_t _get32(const uint8_t* q) noexcept:
    return <int32_t>((<uint32_t>q[0] << 24) | (<uint32_t>q[1] << 16) | (<uint32_t>q[2] << 8) | q[3])


cdef inline int16_t _get16(const uint8_t* q) noexcept:
    return <int16_t>((q[0] << 8) | q[1])


cdef inline void _put32(char* q, int32_t v) noexcept:
    q[0] = <char>((v >> 24) & 0xFF)
    q[1] = <char>((v >> 16) & 0xFF)
    q[2] = <char>((v >> 8) & 0xFF)
    q[3] = <char>(v & 0xFF)


def heartbeat_frames(list templates not None, first_correlation):
    """The request frames in `templates` back to back, the i-th with correlation id
    first_correlation + i. See the twin for the contract."""
    # A tuple cannot change under us, whatever runs while the output is allocated.
    cdef tuple items = PyList_AsTuple(templates)
    cdef Py_ssize_t n = len(items), i, total = 0, size
    if n and not 0 <= first_correlation <= INT32_MAX - (n - 1):
        raise ValueError(
            f"correlation ids {first_correlation}..{first_correlation + n - 1} "
            f"leave 0..{INT32_MAX}"
        )
    for i in range(n):
        template = items[i]
        if type(template) is not bytes:
            raise TypeError(f"template {i} is {type(template).__name__}, not bytes")
        size = PyBytes_GET_SIZE(template)
        if size < CORRELATION_ID_AT + 4:
            raise ValueError(f"template {i} has {size} bytes; a request frame has at least 12")
        total += size
    cdef int32_t correlation_id = <int32_t>first_correlation if n else 0
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef char* q = PyBytes_AS_STRING(out)
    cdef Py_ssize_t at = 0
    for i in range(n):
        template = items[i]
        size = PyBytes_GET_SIZE(template)
        memcpy(q + at, PyBytes_AS_STRING(template), size)
        _put32(q + at + CORRELATION_ID_AT, correlation_id)
        correlation_id += 1  # cannot pass INT32_MAX: the range was checked above
        at += size
    if FASTCOORD_DEBUG and at != total:
        raise AssertionError(f"heartbeat_frames wrote {at} of {total} bytes")
    return out


cdef inline bint _heartbeat_error(
    const uint8_t* f, Py_ssize_t size, int version, int16_t* error
) noexcept:
    """The error code of the Heartbeat response frame of `size` bytes at f (after its size
    prefix), if it has the common layout of `version`. Reads only within f[0:size]."""
    if version >= FIRST_FLEXIBLE:
        if size != 12 or f[4] != 0 or f[11] != 0:
            return False
        error[0] = _get16(f + 9)
    elif version >= 1:
        if size != 10:
            return False
        error[0] = _get16(f + 8)
    else:
        if size != 6:
            return False
        error[0] = _get16(f + 4)
    return True


def read_answers(bytearray buf not None, Py_ssize_t pos, Py_ssize_t max_size,
                 dict heartbeats not None, int heartbeat_version, list answered not None,
                 list others not None):
    """Walk the complete response frames at buf[pos:]; returns the position after the last.
    See the twin for the contract."""
    cdef Py_buffer view
    cdef const uint8_t* p
    cdef Py_ssize_t end, size, start
    cdef int32_t correlation_id
    cdef int16_t error
    cdef PyObject* found
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        end = view.len
        if pos < 0 or pos > end:
            raise ValueError("pos is outside buf")
        if heartbeat_version < 0:
            raise ValueError(f"Heartbeat v{heartbeat_version} does not exist")
        while end - pos >= 4:
            size = _get32(p + pos)
            if size < 4 or size > max_size:
                raise _frame_size_error(size, max_size)
            if size > end - pos - 4:
                break
            start = pos + 4
            pos = start + size
            # size >= 4 and start + size <= end: the correlation id is inside the buffer.
            correlation_id = _get32(p + start)
            key = correlation_id
            found = PyDict_GetItemWithError(heartbeats, key)
            if found is not NULL and _heartbeat_error(p + start, size, heartbeat_version, &error):
                member = <object>found  # a reference of our own before the key goes
                PyDict_DelItem(heartbeats, key)
                answered.append((member, error))
            else:
                others.append((key, PyBytes_FromStringAndSize(<const char*>(p + start), size)))
        return pos
    finally:
        PyBuffer_Release(&view)
