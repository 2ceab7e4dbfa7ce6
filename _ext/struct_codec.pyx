# cython: language_level=3
"""Compiled interpreter of the codec's plans: every message body, decoded and encoded in C.

Twin: fastcoord/protocol/struct_codec.py. fastcoord.protocol.codec compiles a message's
schema into a StructPlan whose `regular_wire`/`tagged_wire` describe the layout as data
(Op numbers, mirrored in the enum below; a test checks they agree). This module turns a plan
into typed NStruct/NField objects once (cached in `plan.native`) and walks them.

It answers only what it is sure of. On any irregularity (truncated or oversized field,
invalid UTF-8, null where not allowed, a value out of range or of an unexpected type) it
raises _Irregular internally and hands the whole body to the twin, which gives the answer,
usually a ProtocolError naming the field. Decoding stops at the end of the struct and says
where that is: whether bytes may follow is for the caller to decide (codec.read_message). So errors are the twin's by
construction, and the compiled code only has to be right on valid input, which the
differential tests check.

Layouts follow Kafka's types (org.apache.kafka.common.protocol.types): big-endian integers,
int16-length strings and int32-length bytes and arrays (-1 = null), and in flexible versions
unsigned-varint lengths plus one (0 = null) and a tagged-field section ending every struct:
count, then (tag, size, data) per field.
"""

cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_Check
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.object cimport PyObject_IsTrue
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport (
    INT64_MAX,
    INT64_MIN,
    int8_t,
    int16_t,
    int32_t,
    int64_t,
    uint8_t,
    uint16_t,
    uint32_t,
    uint64_t,
)
from libc.string cimport memcpy

from uuid import UUID

from fastcoord.protocol import struct_codec as _twin

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL

cdef extern from "debug.h":
    int FASTCOORD_DEBUG

cdef enum:
    OP_INT8 = 1
    OP_INT16 = 2
    OP_UINT16 = 3
    OP_INT32 = 4
    OP_INT64 = 5
    OP_FLOAT64 = 6
    OP_BOOL = 7
    OP_UUID = 8
    OP_STRING = 9
    OP_NULLABLE_STRING = 10
    OP_COMPACT_STRING = 11
    OP_COMPACT_NULLABLE_STRING = 12
    OP_BYTES = 13
    OP_NULLABLE_BYTES = 14
    OP_COMPACT_BYTES = 15
    OP_COMPACT_NULLABLE_BYTES = 16
    OP_ARRAY = 17
    OP_STRUCT = 18
    INT16_MAX = 0x7FFF

# Typed here: a literal over 2**31 in an expression would be a Python int, and the
# comparison a Python one.
cdef uint64_t UINT32_MAX = 0xFFFFFFFF

OPS = {
    "INT8": OP_INT8, "INT16": OP_INT16, "UINT16": OP_UINT16, "INT32": OP_INT32,
    "INT64": OP_INT64, "FLOAT64": OP_FLOAT64, "BOOL": OP_BOOL, "UUID": OP_UUID,
    "STRING": OP_STRING, "NULLABLE_STRING": OP_NULLABLE_STRING,
    "COMPACT_STRING": OP_COMPACT_STRING, "COMPACT_NULLABLE_STRING": OP_COMPACT_NULLABLE_STRING,
    "BYTES": OP_BYTES, "NULLABLE_BYTES": OP_NULLABLE_BYTES, "COMPACT_BYTES": OP_COMPACT_BYTES,
    "COMPACT_NULLABLE_BYTES": OP_COMPACT_NULLABLE_BYTES, "ARRAY": OP_ARRAY, "STRUCT": OP_STRUCT,
}


class _Irregular(Exception):
    """Internal: not the common case; the twin answers."""


@cython.final
cdef class NField:
    cdef object name
    cdef int op
    cdef bint nullable
    cdef bint compact
    cdef Py_ssize_t min_item
    cdef NField item
    cdef NStruct struct_
    cdef int tag
    cdef object spec


@cython.final
cdef class NStruct:
    cdef object cls
    cdef bint flexible
    cdef list fields
    cdef dict tagged
    cdef list tagged_order


cdef NField _native_field(object name, object wire, int tag, object spec):
    cdef NField f = NField.__new__(NField)
    f.name = name
    f.op = int(wire.op)
    f.nullable = wire.nullable
    f.compact = wire.compact
    f.min_item = wire.min_item
    f.tag = tag
    f.spec = spec
    if wire.item is not None:
        f.item = _native_field(None, wire.item, -1, None)
    if wire.plan is not None:
        f.struct_ = _native_struct(wire.plan)
    return f


cdef NStruct _native_struct(object plan):
    cached = plan.native
    if cached is not None:
        return <NStruct>cached
    cdef NField f
    cdef NStruct s = NStruct.__new__(NStruct)
    s.cls = plan.cls
    s.flexible = plan.flexible
    s.fields = [_native_field(name, wire, -1, None) for name, wire in plan.regular_wire]
    s.tagged_order = [
        _native_field(name, wire, tag, spec) for tag, name, wire, spec in plan.tagged_wire
    ]
    s.tagged = {}
    for f in s.tagged_order:
        s.tagged[f.tag] = f
    plan.native = s
    return s


# ---------------------------------------------------------------------------- decoding

cdef struct Cursor:
    const uint8_t* p
    Py_ssize_t pos
    Py_ssize_t end


cdef inline const uint8_t* take(Cursor* c, Py_ssize_t n) except NULL:
    if n < 0 or n > c.end - c.pos:
        raise _Irregular()
    cdef const uint8_t* q = c.p + c.pos
    c.pos += n
    return q


cdef inline uint32_t be32(const uint8_t* q) noexcept:
    return (<uint32_t>q[0] << 24) | (<uint32_t>q[1] << 16) | (<uint32_t>q[2] << 8) | q[3]


cdef inline uint64_t be64(const uint8_t* q) noexcept:
    return (<uint64_t>be32(q) << 32) | be32(q + 4)


cdef inline double _f64(const uint8_t* q) noexcept:
    cdef uint64_t bits = be64(q)
    cdef double d
    memcpy(&d, &bits, 8)
    return d


cdef inline int16_t read_i16(Cursor* c) except? -1:
    cdef const uint8_t* q = take(c, 2)
    return <int16_t>((q[0] << 8) | q[1])


cdef inline int32_t read_i32(Cursor* c) except? -1:
    return <int32_t>be32(take(c, 4))


cdef Py_ssize_t read_uvarint(Cursor* c) except -1:
    # At most 5 bytes and 32 bits, as ByteUtils.readUnsignedVarint.
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef uint8_t b
    cdef int i
    for i in range(5):
        b = take(c, 1)[0]
        value |= <uint64_t>(b & 0x7F) << shift
        if not (b & 0x80):
            if value > UINT32_MAX:
                raise _Irregular()
            return <Py_ssize_t>value
        shift += 7
    raise _Irregular()


cdef inline object read_utf8(Cursor* c, Py_ssize_t n):
    cdef const char* s = <const char*>take(c, n)
    try:
        return PyUnicode_DecodeUTF8(s, n, NULL)
    except UnicodeDecodeError:
        raise _Irregular()


cdef inline object read_blob(Cursor* c, Py_ssize_t n):
    cdef const char* s = <const char*>take(c, n)
    return PyBytes_FromStringAndSize(s, n)


cdef object read_field(NField f, Cursor* c):
    cdef int op = f.op
    cdef Py_ssize_t n, i
    cdef const uint8_t* q
    cdef list out
    if op == OP_INT32:
        return read_i32(c)
    if op == OP_INT16:
        return read_i16(c)
    if op == OP_INT64:
        return <int64_t>be64(take(c, 8))
    if op == OP_STRING or op == OP_NULLABLE_STRING:
        n = read_i16(c)
        if n == -1 and op == OP_NULLABLE_STRING:
            return None
        return read_utf8(c, n)  # a negative length is irregular in take()
    if op == OP_COMPACT_STRING or op == OP_COMPACT_NULLABLE_STRING:
        n = read_uvarint(c) - 1
        if n == -1 and op == OP_COMPACT_NULLABLE_STRING:
            return None
        if n > INT16_MAX:
            raise _Irregular()
        return read_utf8(c, n)
    if op == OP_ARRAY:
        n = read_uvarint(c) - 1 if f.compact else read_i32(c)
        if n < 0:
            if n == -1 and f.nullable:
                return None
            raise _Irregular()
        if n > (c.end - c.pos) // f.min_item:
            raise _Irregular()
        out = []
        for i in range(n):
            out.append(read_field(f.item, c))
        return out
    if op == OP_STRUCT:
        # A nullable struct has an int8 before it: -1 for null, 1 for a struct that follows.
        if f.nullable and <int8_t>take(c, 1)[0] < 0:
            return None
        return read_struct(f.struct_, c)
    if op == OP_BYTES or op == OP_NULLABLE_BYTES:
        n = read_i32(c)
        if n == -1 and op == OP_NULLABLE_BYTES:
            return None
        return read_blob(c, n)
    if op == OP_COMPACT_BYTES or op == OP_COMPACT_NULLABLE_BYTES:
        n = read_uvarint(c) - 1
        if n == -1 and op == OP_COMPACT_NULLABLE_BYTES:
            return None
        return read_blob(c, n)
    if op == OP_INT8:
        return <int8_t>take(c, 1)[0]
    if op == OP_BOOL:
        return take(c, 1)[0] != 0
    if op == OP_UINT16:
        q = take(c, 2)
        return <uint16_t>((q[0] << 8) | q[1])
    if op == OP_FLOAT64:
        return _f64(take(c, 8))
    if op == OP_UUID:
        return UUID(bytes=read_blob(c, 16))
    raise _Irregular()


cdef object read_struct(NStruct s, Cursor* c):
    cdef dict values = {}
    cdef NField f
    cdef Py_ssize_t count, tag, size, end, k
    for f in s.fields:
        values[f.name] = read_field(f, c)
    if s.flexible:
        count = read_uvarint(c)
        if count > c.end - c.pos:
            raise _Irregular()
        for k in range(count):
            tag = read_uvarint(c)
            size = read_uvarint(c)
            if size > c.end - c.pos:
                raise _Irregular()
            f = s.tagged.get(tag)
            if f is None:
                c.pos += size
                continue
            end = c.end
            c.end = c.pos + size
            values[f.name] = read_field(f, c)
            if c.pos != c.end:
                raise _Irregular()
            c.end = end
            if FASTCOORD_DEBUG and c.pos > c.end:
                raise AssertionError("tagged field read past the end of its frame")
    return s.cls(**values)


def decode_body(plan, data, Py_ssize_t pos):
    """Decode the struct that starts at `pos`: the object and the position after it."""
    if type(data) is not bytes or pos < 0 or pos > PyBytes_GET_SIZE(data):
        return _twin.decode_body(plan, data, pos)
    cdef Cursor cur
    cur.p = <const uint8_t*>PyBytes_AS_STRING(data)
    cur.pos = pos
    cur.end = PyBytes_GET_SIZE(data)
    try:
        obj = read_struct(_native_struct(plan), &cur)
    except _Irregular:
        return _twin.decode_body(plan, data, pos)
    return obj, cur.pos


# ---------------------------------------------------------------------------- encoding

cdef struct Buf:
    char* data
    Py_ssize_t len
    Py_ssize_t cap


cdef int buf_init(Buf* b, Py_ssize_t cap) except -1:
    b.data = <char*>PyMem_Malloc(cap)
    if b.data == NULL:
        raise MemoryError()
    b.len = 0
    b.cap = cap
    return 0


cdef int reserve(Buf* b, Py_ssize_t n) except -1:
    cdef Py_ssize_t cap
    cdef char* data
    if b.len + n <= b.cap:
        return 0
    cap = b.cap * 2
    if cap < b.len + n:
        cap = b.len + n
    data = <char*>PyMem_Realloc(b.data, cap)
    if data == NULL:
        raise MemoryError()
    b.data = data
    b.cap = cap
    return 0


cdef inline int put(Buf* b, const void* src, Py_ssize_t n) except -1:
    reserve(b, n)
    memcpy(b.data + b.len, src, n)
    b.len += n
    if FASTCOORD_DEBUG and b.len > b.cap:
        raise AssertionError(f"encode buffer overrun: {b.len} > {b.cap}")
    return 0


cdef inline int put_be(Buf* b, uint64_t v, int width) except -1:
    reserve(b, width)
    cdef int i
    for i in range(width):
        b.data[b.len + i] = <char>((v >> (8 * (width - 1 - i))) & 0xFF)
    b.len += width
    return 0


cdef inline int put_uvarint(Buf* b, uint64_t v) except -1:
    reserve(b, 10)
    while v >= 0x80:
        b.data[b.len] = <char>((v & 0x7F) | 0x80)
        b.len += 1
        v >>= 7
    b.data[b.len] = <char>v
    b.len += 1
    return 0


cdef inline int64_t as_int(object v, int64_t lo, int64_t hi) except? -1:
    cdef int64_t x
    if not PyLong_Check(v):
        raise _Irregular()
    try:
        x = v
    except OverflowError:
        raise _Irregular()
    if x < lo or x > hi:
        raise _Irregular()
    return x


cdef int put_length(Buf* b, Py_ssize_t n, bint compact) except -1:
    # n == -1: null
    if compact:
        return put_uvarint(b, <uint64_t>(n + 1))
    return put_be(b, <uint64_t><uint32_t><int32_t>n, 4)


cdef int write_field(NField f, object v, Buf* b) except -1:
    cdef int op = f.op
    cdef Py_ssize_t n
    cdef const char* s
    cdef double d
    cdef uint64_t bits
    cdef bint compact
    if op == OP_INT32:
        return put_be(b, <uint64_t><uint32_t><int32_t>as_int(v, -0x80000000, 0x7FFFFFFF), 4)
    if op == OP_INT16:
        return put_be(b, <uint64_t><uint16_t><int16_t>as_int(v, -0x8000, 0x7FFF), 2)
    if op == OP_INT64:
        return put_be(b, <uint64_t>as_int(v, INT64_MIN, INT64_MAX), 8)
    if OP_STRING <= op <= OP_COMPACT_NULLABLE_STRING:
        compact = op >= OP_COMPACT_STRING
        if v is None:
            if op != OP_NULLABLE_STRING and op != OP_COMPACT_NULLABLE_STRING:
                raise _Irregular()
            if compact:
                return put_uvarint(b, 0)
            return put_be(b, 0xFFFF, 2)
        if type(v) is not str:
            raise _Irregular()
        try:
            s = PyUnicode_AsUTF8AndSize(v, &n)
        except UnicodeEncodeError:
            raise _Irregular()
        if n > INT16_MAX:
            raise _Irregular()
        if compact:
            put_uvarint(b, <uint64_t>(n + 1))
        else:
            put_be(b, <uint64_t>n, 2)
        return put(b, s, n)
    if OP_BYTES <= op <= OP_COMPACT_NULLABLE_BYTES:
        compact = op >= OP_COMPACT_BYTES
        if v is None:
            if op != OP_NULLABLE_BYTES and op != OP_COMPACT_NULLABLE_BYTES:
                raise _Irregular()
            return put_length(b, -1, compact)
        if type(v) is not bytes:
            raise _Irregular()
        n = PyBytes_GET_SIZE(v)
        put_length(b, n, compact)
        return put(b, PyBytes_AS_STRING(v), n)
    if op == OP_ARRAY:
        if v is None:
            if not f.nullable:
                raise _Irregular()
            return put_length(b, -1, f.compact)
        if type(v) is not list:
            raise _Irregular()
        put_length(b, len(<list>v), f.compact)
        for item in <list>v:
            write_field(f.item, item, b)
        return 0
    if op == OP_STRUCT:
        if f.nullable:
            if v is None:
                return put_be(b, 0xFF, 1)
            put_be(b, 1, 1)
        return write_struct(f.struct_, v, b)
    if op == OP_INT8:
        return put_be(b, <uint64_t><uint8_t><int8_t>as_int(v, -0x80, 0x7F), 1)
    if op == OP_UINT16:
        return put_be(b, <uint64_t>as_int(v, 0, 0xFFFF), 2)
    if op == OP_BOOL:
        return put_be(b, 1 if PyObject_IsTrue(v) else 0, 1)
    if op == OP_FLOAT64:
        if type(v) is not float:
            raise _Irregular()
        d = v
        memcpy(&bits, &d, 8)
        return put_be(b, bits, 8)
    if op == OP_UUID:
        if type(v) is not UUID:
            raise _Irregular()
        return put(b, PyBytes_AS_STRING(v.bytes), 16)
    raise _Irregular()


cdef object field_of(object obj, object name):
    try:
        return getattr(obj, name)
    except AttributeError:
        raise _Irregular()


cdef int write_struct(NStruct s, object obj, Buf* b) except -1:
    cdef NField f
    cdef list present
    cdef Buf sub
    for f in s.fields:
        write_field(f, field_of(obj, f.name), b)
    if not s.flexible:
        return 0
    present = []
    for f in s.tagged_order:
        value = field_of(obj, f.name)
        if value != f.spec.default_value():
            present.append((f, value))
    put_uvarint(b, len(present))
    for f, value in present:
        buf_init(&sub, 64)
        try:
            write_field(f, value, &sub)
            put_uvarint(b, <uint64_t>f.tag)
            put_uvarint(b, <uint64_t>sub.len)
            put(b, sub.data, sub.len)
        finally:
            PyMem_Free(sub.data)
    return 0


def encode_body(plan, obj):
    """Encode a struct's body."""
    cdef Buf b
    buf_init(&b, 256)
    try:
        try:
            write_struct(_native_struct(plan), obj, &b)
        except _Irregular:
            return _twin.encode_body(plan, obj)
        return PyBytes_FromStringAndSize(b.data, b.len)
    finally:
        PyMem_Free(b.data)
