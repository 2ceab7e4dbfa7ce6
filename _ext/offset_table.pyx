# cython: language_level=3
"""A group's committed offsets, (topic, partition) -> OffsetCommitValue, kept in C arrays.

Why it exists: a commit of a hundred partitions is replayed into its group's offsets once
it is durable, and a key tuple, a value Struct and a dictionary entry per partition were
most of what a commit cost after its decoding. Here each topic keeps its rows (offset,
leader epoch, commit timestamp, partition) in one C array, with the metadata strings in a
list beside it and a dictionary from partition to row; replaying a batch costs one lookup
per topic entry and one per partition, and allocates nothing once the partitions are known.
An OffsetCommitValue is built only when one is read (OffsetFetch, retention, snapshots).

Twin: fastcoord/core/offset_table.py (a dictionary). Differential tests hold this module to
it for any sequence of operations. Reads list keys in (topic, partition) order.
"""

cimport cython
from cpython cimport array
from cpython.dict cimport PyDict_GetItem
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_AsSsize_t, PyLong_Check
from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memset

from fastcoord.core.records import OffsetCommitValue
from fastcoord.protocol.commit_batch import OffsetCommitBatch

cdef object _Value = OffsetCommitValue
cdef object _Batch = OffsetCommitBatch


cdef struct Row:
    int64_t offset
    int64_t commit_timestamp
    int32_t partition
    int32_t leader_epoch


cdef enum:
    # Partitions below this are found through an array indexed by partition; others (a
    # client may name any int32) through a dictionary. At most 4 KiB per topic per group.
    DIRECT = 1024


@cython.final
cdef class _Topic:
    """One topic's offsets: rows in C, their metadata beside them, and where each
    partition's row is."""

    cdef list metadata  # row -> str
    cdef Row* rows
    cdef Py_ssize_t n
    cdef Py_ssize_t cap
    cdef int32_t* direct  # partition -> row + 1 (0: none), for 0 <= partition < direct_n
    cdef Py_ssize_t direct_n
    cdef dict others  # partition -> row, for the rest

    def __cinit__(self):
        self.metadata = []
        self.rows = NULL
        self.n = 0
        self.cap = 0
        self.direct = NULL
        self.direct_n = 0
        self.others = {}

    def __dealloc__(self):
        free(self.rows)
        free(self.direct)

    cdef inline Py_ssize_t find(self, int32_t partition) except -2:
        """The row of `partition`, or -1."""
        cdef PyObject* found
        if 0 <= partition < DIRECT:
            return self.direct[partition] - 1 if partition < self.direct_n else -1
        found = PyDict_GetItem(self.others, partition)
        return -1 if found == NULL else PyLong_AsSsize_t(<object>found)

    cdef int place(self, int32_t partition, Py_ssize_t row) except -1:
        """Record that `partition` is at `row` (-1: nowhere)."""
        cdef Py_ssize_t n
        cdef int32_t* direct
        if not 0 <= partition < DIRECT:
            if row < 0:
                del self.others[partition]
            else:
                self.others[partition] = row
            return 0
        if partition >= self.direct_n:
            n = partition + 1
            direct = <int32_t*>realloc(self.direct, n * sizeof(int32_t))
            if direct == NULL:
                raise MemoryError()
            memset(direct + self.direct_n, 0, (n - self.direct_n) * sizeof(int32_t))
            self.direct = direct
            self.direct_n = n
        self.direct[partition] = <int32_t>(row + 1)
        return 0

    cdef Py_ssize_t add(self, int32_t partition) except -1:
        cdef Py_ssize_t cap
        cdef Row* rows
        if self.n == self.cap:
            cap = self.cap * 2 if self.cap else 4
            rows = <Row*>realloc(self.rows, cap * sizeof(Row))
            if rows == NULL:
                raise MemoryError()
            self.rows = rows
            self.cap = cap
        self.place(partition, self.n)
        self.rows[self.n].partition = partition
        self.metadata.append("")
        self.n += 1
        return self.n - 1

    cdef int remove(self, Py_ssize_t row) except -1:
        """Drop `row`; the last row takes its place."""
        cdef Py_ssize_t last = self.n - 1
        self.place(self.rows[row].partition, -1)
        if row != last:
            self.rows[row] = self.rows[last]
            self.metadata[row] = self.metadata[last]
            self.place(self.rows[row].partition, row)
        self.metadata.pop()
        self.n = last
        return 0

    cdef object value(self, Py_ssize_t row):
        cdef Row* r = &self.rows[row]
        return _Value(r.offset, r.leader_epoch, self.metadata[row], r.commit_timestamp)

    cdef list sorted_rows(self):
        """(partition, row) of every row, by partition."""
        return sorted([(self.rows[r].partition, r) for r in range(self.n)])


cdef inline bint as_partition(object partition, int32_t* out):
    """`partition` as an int32, False if it is not one (no such key can be in a table)."""
    cdef int overflow = 0
    cdef long long v
    if not PyLong_Check(partition):
        return False
    v = PyLong_AsLongLongAndOverflow(partition, &overflow)
    if overflow or not -0x7FFFFFFF - 1 <= v <= 0x7FFFFFFF:
        return False
    out[0] = <int32_t>v
    return True


@cython.final
cdef class OffsetTable:
    cdef dict _topics  # topic -> _Topic
    cdef Py_ssize_t _count

    def __cinit__(self):
        self._topics = {}
        self._count = 0

    def __len__(self):
        return self._count

    cdef _Topic _find(self, object tp, Py_ssize_t* row):
        """The topic of key `tp` and, in `row`, its partition's row (-1 if none); None if
        the topic has no offsets or `tp` is not a (topic, partition) key."""
        row[0] = -1
        if type(tp) is not tuple or len(tp) != 2:
            return None
        topic, partition = tp
        cdef int32_t p = 0
        found = self._topics.get(topic)
        if found is None or not as_partition(partition, &p):
            return None
        cdef _Topic t = <_Topic>found
        row[0] = t.find(p)
        return t

    def __contains__(self, tp):
        cdef Py_ssize_t row
        self._find(tp, &row)
        return row >= 0

    def get(self, tp):
        cdef Py_ssize_t row
        cdef _Topic t = self._find(tp, &row)
        return None if row < 0 else t.value(row)

    def pop(self, topic, partition):
        """Remove the offset of (topic, partition); returns it, or None if there was none."""
        cdef int32_t p = 0
        found = self._topics.get(topic)
        if found is None or not as_partition(partition, &p):
            return None
        cdef _Topic t = <_Topic>found
        cdef Py_ssize_t row = t.find(p)
        if row < 0:
            return None
        value = t.value(row)
        t.remove(row)
        self._count -= 1
        if t.n == 0:
            del self._topics[topic]
        return value

    def put(self, topic, int32_t partition, value):
        """The offset of (topic, partition) is `value` (replaying one record)."""
        cdef _Topic t = self._topic(topic)
        cdef Py_ssize_t row = t.find(partition)
        if row < 0:
            row = t.add(partition)
            self._count += 1
        cdef Row* r = &t.rows[row]
        r.offset = value.offset
        r.leader_epoch = value.leader_epoch
        r.commit_timestamp = value.commit_timestamp
        t.metadata[row] = value.metadata

    cdef _Topic _topic(self, object topic):
        found = self._topics.get(topic)
        if found is not None:
            return <_Topic>found
        t = _Topic()
        self._topics[topic] = t
        return t

    def items(self):
        """Every ((topic, partition), OffsetCommitValue), in (topic, partition) order."""
        cdef _Topic t
        cdef Py_ssize_t row
        out = []
        for topic in sorted(self._topics):
            t = <_Topic>self._topics[topic]
            for partition, row in t.sorted_rows():
                out.append(((topic, partition), t.value(row)))
        return out

    def __iter__(self):
        """The keys, in (topic, partition) order."""
        return iter([tp for tp, _ in self.items()])

    def replay_commits(self, batch, int64_t commit_timestamp):
        """Every partition of `batch` committed at `commit_timestamp`, in order (a partition
        named twice ends with its last offset)."""
        if type(batch) is not _Batch:
            raise TypeError(f"an OffsetCommitBatch, not {type(batch).__name__}")
        cdef list topics = batch.topics
        cdef array.array ends = batch.ends
        cdef array.array partitions = batch.partitions
        cdef array.array offsets = batch.offsets
        cdef array.array epochs = batch.leader_epochs
        metadata = batch.metadata
        cdef Py_ssize_t ntopics = len(topics), nparts = len(partitions)
        if (
            len(ends) != ntopics
            or len(offsets) != nparts
            or len(epochs) != nparts
            or (metadata is not None and len(metadata) != nparts)
            or ends.ob_descr.typecode != c'i'
            or partitions.ob_descr.typecode != c'i'
            or offsets.ob_descr.typecode != c'q'
            or epochs.ob_descr.typecode != c'i'
        ):
            raise ValueError("an inconsistent OffsetCommitBatch")
        cdef Py_ssize_t i, k = 0, end, row
        cdef int32_t partition
        cdef _Topic t
        cdef Row* r
        for i in range(ntopics):
            end = ends.data.as_ints[i]
            if end < k or end > nparts:
                raise ValueError("an inconsistent OffsetCommitBatch")
            if k == end:
                continue
            t = self._topic(topics[i])
            while k < end:
                partition = partitions.data.as_ints[k]
                row = t.find(partition)
                if row < 0:
                    row = t.add(partition)
                    self._count += 1
                r = &t.rows[row]
                r.offset = offsets.data.as_longlongs[k]
                r.leader_epoch = epochs.data.as_ints[k]
                r.commit_timestamp = commit_timestamp
                t.metadata[row] = "" if metadata is None else metadata[k]
                k += 1
