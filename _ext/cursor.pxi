# A bounds-checked cursor over a request frame, for the hand-written decoders of the hottest
# frames (hot_frames.pyx, commit_frames.pyx), included into each.
#
# These decoders handle the well-formed common case only: anything else (a field that runs
# past the end, invalid UTF-8, a null where none may be, tagged fields present, a varint they
# do not read) raises _Irregular, and the module hands the frame to the schema-driven codec,
# whose answers and errors are the reference. So a reader here may refuse more than the
# codec does, never less.

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy


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


cdef inline int skip(Cursor* c, Py_ssize_t n) except -1:
    need(c, n)
    c.pos += n
    return 0


cdef inline int64_t read_int64(Cursor* c) except? -1:
    need(c, 8)
    cdef const uint8_t* q = c.p + c.pos
    c.pos += 8
    return <int64_t>(
        (<uint64_t>q[0] << 56) | (<uint64_t>q[1] << 48) | (<uint64_t>q[2] << 40)
        | (<uint64_t>q[3] << 32) | (<uint64_t>q[4] << 24) | (<uint64_t>q[5] << 16)
        | (<uint64_t>q[6] << 8) | q[7]
    )


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

    Client id, group id, member id and topic names repeat from one request to the next on a
    connection; comparing bytes and returning the same str saves a decode, an allocation,
    and (the str keeps its hash) hashing it again for the dictionaries that take it. When
    the string changes, it costs one small copy.
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


cdef inline object read_string(Cursor* c, bint nullable, _LastString last=None):
    cdef Py_ssize_t n = read_int16(c)
    if n == -1 and nullable:
        return None
    if n < 0:
        raise _Irregular()
    return read_utf8(c, n) if last is None else last.decode(c, n)
