# cython: language_level=3
"""Kafka's coordinator partition for a group id: which __consumer_offsets partition owns it.

Why it exists: a coordinator must answer FindCoordinator and own exactly the groups that a
real Kafka broker would, so the mapping has to be Kafka's bit for bit, and it is computed
for every group on load and for every FindCoordinator request, hence compiled.

The Java it follows:

  Kafka's GroupCoordinator partitionFor (coordinator.group.GroupCoordinator and
  GroupCoordinatorService):   Utils.abs(groupId.hashCode()) % groupMetadataTopicPartitionCount
  org.apache.kafka.common.utils.Utils.abs:   n == Integer.MIN_VALUE ? 0 : Math.abs(n)
  java.lang.String.hashCode:   h = 31 * h + c over the string's UTF-16 code units, in int32
                               arithmetic that wraps around

UTF-16 code units are read straight from the str's code points (PyUnicode kinds 1, 2 and 4),
never by encoding: a code point above U+FFFF counts as its surrogate pair, and a lone
surrogate (a Python str may hold one) counts as the single code unit it is, as in Java.

Twin: fastcoord/core/partition.py, the same functions in plain Python, which finds the code
units another way (encoding with surrogatepass); tests/core/test_partition.py holds both to
each other and to Java itself.
"""

from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_CheckExact
from cpython.unicode cimport (
    PyUnicode_1BYTE_DATA,
    PyUnicode_1BYTE_KIND,
    PyUnicode_2BYTE_DATA,
    PyUnicode_2BYTE_KIND,
    PyUnicode_4BYTE_DATA,
    PyUnicode_Check,
    PyUnicode_GET_LENGTH,
    PyUnicode_KIND,
    Py_UCS1,
    Py_UCS2,
)
from libc.stdint cimport INT32_MIN, int32_t, uint32_t

import operator

cdef extern from *:
    """
    /* PyUnicode_READY is a deprecated no-op from Python 3.12 on; before that a str made by
       the legacy C API may not be in its canonical (kind, data) form until it is called. */
    #if PY_VERSION_HEX >= 0x030C0000
    #define fastcoord_unicode_ready(op) 0
    #else
    #define fastcoord_unicode_ready(op) PyUnicode_READY(op)
    #endif
    """
    int fastcoord_unicode_ready(object op) except -1

cdef enum:
    MAX_PARTITIONS = 0x7FFFFFFF  # a partition count is a Java int
    FIRST_SUPPLEMENTARY = 0x10000
    HIGH_SURROGATE = 0xD800
    LOW_SURROGATE = 0xDC00
    SURROGATE_BITS = 10
    SURROGATE_MASK = 0x3FF
    POW2 = 961  # 31**2
    POW3 = 29791  # 31**3
    POW4 = 923521  # 31**4

# numpy is imported on the first partitions_for call, so that `import fastcoord` (which
# exports partition_for) does not pay for it.
cdef object _numpy = None


ctypedef fused code_unit:
    Py_UCS1
    Py_UCS2


cdef inline uint32_t _hash_units(const code_unit* p, Py_ssize_t n) noexcept:
    """String.hashCode of n code units, four at a time: h * 31**4 + a * 31**3 + b * 31**2 +
    c * 31 + d puts one multiplication in four on the chain of dependent ones, not four, which
    makes 20-character ids about 1.5 times faster to hash and long strings 2.5 times."""
    cdef uint32_t h = 0
    cdef Py_ssize_t i = 0
    while i + 4 <= n:
        h = (POW4 * h + POW3 * <uint32_t>p[i] + POW2 * <uint32_t>p[i + 1]
             + 31u * <uint32_t>p[i + 2] + <uint32_t>p[i + 3])
        i += 4
    while i < n:
        h = 31u * h + p[i]
        i += 1
    return h


cdef uint32_t _hash_code(str s) noexcept:
    """java.lang.String.hashCode of a ready str, as uint32 (the int32's bits)."""
    cdef Py_ssize_t i
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(s)
    cdef unsigned int kind = PyUnicode_KIND(s)
    cdef uint32_t h = 0
    cdef uint32_t c
    cdef const Py_UCS4* p4
    if kind == PyUnicode_1BYTE_KIND:
        return _hash_units(<const Py_UCS1*>PyUnicode_1BYTE_DATA(s), n)
    if kind == PyUnicode_2BYTE_KIND:
        # Every code point of a 2-byte str is one UTF-16 code unit, lone surrogates included.
        return _hash_units(<const Py_UCS2*>PyUnicode_2BYTE_DATA(s), n)
    p4 = PyUnicode_4BYTE_DATA(s)
    for i in range(n):
        c = p4[i]
        if c >= FIRST_SUPPLEMENTARY:
            c -= FIRST_SUPPLEMENTARY
            h = 31u * h + (HIGH_SURROGATE + (c >> SURROGATE_BITS))
            c = LOW_SURROGATE + (c & SURROGATE_MASK)
        h = 31u * h + c
    return h


cdef inline int32_t _kafka_partition(uint32_t h, int32_t partitions) noexcept:
    """Utils.abs(h) % partitions, with h the bits of a Java int."""
    cdef int32_t n = <int32_t>h
    if n < 0:
        # Utils.abs: Integer.MIN_VALUE, whose Math.abs is itself and negative, becomes 0.
        n = 0 if n == INT32_MIN else -n
    return n % partitions


cdef str _checked_str(object s, str name):
    if not PyUnicode_Check(s):
        raise TypeError(f"{name} must be str, not {type(s).__name__}")
    fastcoord_unicode_ready(s)
    return <str>s


cdef int32_t _checked_partitions(object partitions) except 0:
    """The partition count as a C int, or ValueError (TypeError if it is not an integer)."""
    cdef int overflow = 0
    cdef long long n
    if not PyLong_CheckExact(partitions):
        partitions = operator.index(partitions)
    n = PyLong_AsLongLongAndOverflow(partitions, &overflow)
    if overflow != 0 or n < 1 or n > MAX_PARTITIONS:
        raise ValueError(f"partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}")
    return <int32_t>n


def java_hash_code(object s) -> int:
    """java.lang.String.hashCode of s (a signed int32), over its UTF-16 code units."""
    return <int32_t>_hash_code(_checked_str(s, "s"))


def partition_for(object group_id, object partitions=50) -> int:
    """Kafka's coordinator partition: Utils.abs(group_id.hashCode()) % partitions.

    50 is the default of Kafka's offsets.topic.num.partitions.
    """
    cdef int32_t count = _checked_partitions(partitions)
    return _kafka_partition(_hash_code(_checked_str(group_id, "group_id")), count)


def partitions_for(object group_ids, object partitions=50):
    """partition_for of every id in a list (any iterable of str), as an int32 numpy array."""
    global _numpy
    cdef int32_t count = _checked_partitions(partitions)
    cdef list ids
    cdef Py_ssize_t i
    cdef Py_ssize_t n
    cdef object result
    cdef int32_t[::1] out
    cdef object group_id
    if PyUnicode_Check(group_ids):
        raise TypeError("group_ids must be an iterable of str, not a str")
    ids = group_ids if type(group_ids) is list else list(group_ids)
    n = len(ids)
    if _numpy is None:
        import numpy

        _numpy = numpy
    result = _numpy.empty(n, dtype=_numpy.int32)
    out = result
    for i in range(n):
        group_id = ids[i]
        if not PyUnicode_Check(group_id):
            raise TypeError(f"group_ids[{i}] must be str, not {type(group_id).__name__}")
        fastcoord_unicode_ready(group_id)
        out[i] = _kafka_partition(_hash_code(<str>group_id), count)
    return result
