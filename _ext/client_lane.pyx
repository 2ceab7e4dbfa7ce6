# cython: language_level=3
"""Compiled lane of fastcoord's client: a connection's members' heartbeats and commits,
sent, matched and recorded without a Python object per request; and the poller that reads
many lanes' sockets without a Trio wake-up per read.

Twin: fastcoord/client/lane.py, which states the contract and why the lane exists.
Errors are built by the twin's own helpers or with the twin's texts, and differential
property tests (tests/client/test_lane.py) hold the two to the same answers.

Layout: a slot per member: what an answer reads (its generation and flags) in one small
array, the rest in another; its frames, token and expected answers (heartbeat and commit)
in Python lists, so that the garbage collector sees them. The lane's unanswered requests in
a ring in request order (correlation id, slot, kind, api key, whether only the expected
bytes answer it plainly, the slot's generation when sent, the `due` time that sent it,
when written, and whether `claim` answered it out of order).

Timers: `due` must not walk every slot at every flush (a million members flushed ten
times a second would be ten million slot visits a second), so a slot's next heartbeat and
next commit are nodes in a timing wheel of WHEEL buckets of TICK ms, doubly linked so
that stopping a slot unlinks them at once. A node sits in the bucket of its due time, or
of the last `due` call's time if that is later; `due` visits the buckets from its last
call's time to now (all of them after a revolution, or when the clock went back), takes
the nodes due, and sends them in slot order, as the twin's walk does.

Safety: setup.py turns bounds checks off, so every read of a frame is checked by hand
against its size. `read` holds a buffer export on `buf` for the whole walk: a bytearray
cannot be resized while exported, so Python code run meanwhile cannot move the memory read.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.ref cimport PyObject
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdlib cimport qsort
from libc.string cimport memcmp, memcpy, memmove, memset
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec
from posix.unistd cimport close, read

import os

import numpy as np

from fastcoord.client.frames import frame_size_error
from fastcoord.protocol.errors import ProtocolError
from fastcoord.client.lane import (
    MAX_EVENTS,
    OFFSET_LIMIT,
    READ_BYTES,
    _check_frame,
    _check_sink,
    _check_times,
    closed,
)

include "epoll.pxi"

cdef extern from "debug.h":
    int FASTCOORD_DEBUG

cdef extern from *:
    int __builtin_clzll(unsigned long long) nogil

# The size and bytes of a bytes object held by a list: borrowed, so no reference is taken
# (and no cache line of the object written) for a frame copied or compared.
cdef extern from "Python.h":
    Py_ssize_t _size "Py_SIZE" (PyObject*) nogil
    char* _bytes "PyBytes_AS_STRING" (PyObject*) nogil

cdef enum:
    CORRELATION_ID_AT = 8
    MIN_FRAME = 12
    FIRST_FLEXIBLE = 4
    HEARTBEAT = 0
    COMMIT = 1
    API_OFFSET_COMMIT = 8
    BUCKETS = 433
    OVERFLOW = 432
    COUNT = 433
    SUM = 434
    MAX = 435
    ROW = 436
    SUB_BITS = 4
    INITIAL_RING = 64
    TICK = 8  # ms per bucket of the wheel
    WHEEL = 1024  # buckets: a revolution of 8.2 s holds a heartbeat or commit interval
    NOWHERE = -1
    BEATING = 1  # flags of a slot
    IN_FLIGHT = 2
    COMMITTING = 4
    EXACT = 8  # the heartbeat's plain answer is the expected bytes, not a layout
    CONFIRMED = 16  # a heartbeat was plainly answered since the slot started

cdef int32_t CORRELATION_MASK = 0x7FFFFFFF
cdef int64_t LIMIT_US = 1 << 30
cdef int64_t NEVER = 0x7FFFFFFFFFFFFFFF


cdef struct Hot:
    uint32_t generation  # raised by every start and stop
    uint32_t flags  # BEATING, IN_FLIGHT, COMMITTING


cdef struct Slot:
    int64_t heartbeat_interval
    int64_t confirmed_ms  # when CONFIRMED: the `due` time of the last plainly answered
    int16_t heartbeat_api
    int64_t commit_interval
    int64_t* offsets
    Py_ssize_t* offsets_at
    Py_ssize_t n_offsets


cdef struct Node:
    # A slot's next heartbeat (node 2 * slot) or commit (2 * slot + 1) in the wheel.
    int64_t due
    int32_t next
    int32_t prev
    int32_t bucket  # NOWHERE when not in the wheel


cdef struct Request:
    int64_t sent_ns
    int64_t due_ms
    int32_t correlation_id
    int32_t slot
    uint32_t generation
    int16_t api
    uint8_t kind
    uint8_t exact
    uint8_t answered


cdef inline int64_t _now_ns() noexcept:
    """time.perf_counter_ns(): CLOCK_MONOTONIC, as CPython reads it on Linux."""
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return <int64_t>t.tv_sec * 1000000000 + t.tv_nsec


cdef inline int32_t _get32(const uint8_t* q) noexcept:
    return <int32_t>((<uint32_t>q[0] << 24) | (<uint32_t>q[1] << 16) | (<uint32_t>q[2] << 8) | q[3])


cdef inline int16_t _get16(const uint8_t* q) noexcept:
    return <int16_t>((q[0] << 8) | q[1])


cdef inline void _put32(char* q, int32_t v) noexcept:
    q[0] = <char>((v >> 24) & 0xFF)
    q[1] = <char>((v >> 16) & 0xFF)
    q[2] = <char>((v >> 8) & 0xFF)
    q[3] = <char>(v & 0xFF)


cdef inline void _put64(char* q, int64_t v) noexcept:
    cdef uint64_t u = <uint64_t>v
    cdef int i
    for i in range(8):
        q[i] = <char>((u >> (56 - 8 * i)) & 0xFF)


cdef inline Py_ssize_t _bucket(int64_t ns) noexcept:
    """histogram.bucket_of for one latency in ns."""
    cdef int64_t us = ns // 1000
    cdef int shift
    if us <= 0:
        return 0
    if us >= LIMIT_US:
        return OVERFLOW
    shift = 64 - __builtin_clzll(<unsigned long long>us) - (SUB_BITS + 1)
    if shift < 0:
        shift = 0
    return (shift << SUB_BITS) + (us >> shift)


cdef inline int64_t _next(int64_t due, int64_t interval, int64_t now_ms) noexcept:
    due += interval
    return due if due > now_ms else now_ms + interval


cdef inline Py_ssize_t _bucket_at(int64_t ms) noexcept:
    cdef int64_t tick = ms // TICK
    if ms % TICK < 0:  # C division rounds toward zero; the wheel's ticks are floors
        tick -= 1
    return <Py_ssize_t>(tick & (WHEEL - 1))


cdef int _compare(const void* a, const void* b) noexcept nogil:
    cdef int32_t x = (<const int32_t*>a)[0], y = (<const int32_t*>b)[0]
    return (x > y) - (x < y)


cdef inline bint _heartbeat_error(
    const uint8_t* f, Py_ssize_t size, int version, int16_t* error
) noexcept:
    """frames.heartbeat_error: the error code of the Heartbeat answer of `size` bytes at f
    (after its size prefix) if it has the common layout of `version`. Reads only f[0:size]."""
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


@cython.final
cdef class Lane:
    """The heartbeats and commits of up to `slots` members sharing one connection. See
    the twin for the contract."""

    cdef Hot* _hot
    cdef Slot* _slots
    cdef Node* _nodes
    cdef int32_t* _wheel  # the first node of each bucket, or NOWHERE
    cdef int64_t _last_ms  # the time of the last `due`
    cdef bint _walked  # whether `due` has run: before, nodes may sit anywhere in time
    cdef int32_t* _taken  # the nodes one `due` takes
    cdef Py_ssize_t _n
    cdef list _tokens
    cdef list _heartbeats
    cdef list _expected  # each heartbeat's plain answer after its correlation id, or None
    cdef list _commit_frames
    cdef list _answers
    cdef int64_t[:, ::1] _latency
    cdef int64_t[::1] _commits
    cdef object _latency_array
    cdef object _commits_array
    cdef Request* _ring
    cdef Py_ssize_t _capacity  # a power of two
    cdef Py_ssize_t _head
    cdef Py_ssize_t _count  # requests in the ring, those answered by `claim` included
    cdef Py_ssize_t _unstamped  # the newest requests, not yet written
    cdef Py_ssize_t _in_flight
    cdef char* _out  # where `due` builds its frames
    cdef Py_ssize_t _out_capacity
    cdef char* _in  # what the poller read and the walk has not taken (an incomplete frame)
    cdef Py_ssize_t _in_length
    cdef Py_ssize_t _in_capacity
    cdef readonly int64_t received_at_ns  # when the poller last read something

    def __cinit__(self, Py_ssize_t slots, latency, commits):
        if slots < 0:
            raise ValueError(f"{slots} slots")
        _check_sink("latency", latency, (2, ROW))
        _check_sink("commit", commits, (2,))
        self._latency_array = latency
        self._commits_array = commits
        self._latency = latency
        self._commits = commits
        self._n = slots
        cdef Py_ssize_t room = max(slots, 1), i
        self._hot = <Hot*>PyMem_Malloc(room * sizeof(Hot))
        self._slots = <Slot*>PyMem_Malloc(room * sizeof(Slot))
        self._nodes = <Node*>PyMem_Malloc(2 * room * sizeof(Node))
        self._taken = <int32_t*>PyMem_Malloc(2 * room * sizeof(int32_t))
        self._wheel = <int32_t*>PyMem_Malloc(WHEEL * sizeof(int32_t))
        self._ring = <Request*>PyMem_Malloc(INITIAL_RING * sizeof(Request))
        if (self._hot == NULL or self._slots == NULL or self._nodes == NULL
                or self._taken == NULL or self._wheel == NULL or self._ring == NULL):
            raise MemoryError()
        memset(self._hot, 0, room * sizeof(Hot))
        memset(self._slots, 0, room * sizeof(Slot))
        for i in range(2 * room):
            self._nodes[i].due = NEVER
            self._nodes[i].bucket = NOWHERE
        for i in range(WHEEL):
            self._wheel[i] = NOWHERE
        self._capacity = INITIAL_RING
        self._tokens = [None] * slots
        self._heartbeats = [None] * slots
        self._expected = [None] * slots
        self._commit_frames = [None] * slots
        self._answers = [None] * slots

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self._slots != NULL:
            for i in range(self._n):
                PyMem_Free(self._slots[i].offsets)
                PyMem_Free(self._slots[i].offsets_at)
        PyMem_Free(self._hot)
        PyMem_Free(self._slots)
        PyMem_Free(self._nodes)
        PyMem_Free(self._taken)
        PyMem_Free(self._wheel)
        PyMem_Free(self._ring)
        PyMem_Free(self._out)
        PyMem_Free(self._in)

    @property
    def slots(self):
        return self._n

    @property
    def in_flight(self):
        """The lane's requests sent (or queued) and not answered."""
        return self._in_flight

    cdef inline int _check(self, Py_ssize_t slot) except -1:
        if slot < 0 or slot >= self._n:
            raise IndexError(f"slot {slot} of {self._n}")
        return 0

    # -- the wheel --------------------------------------------------------------------

    cdef void _link(self, Py_ssize_t node, int64_t due) noexcept:
        cdef Node* x = &self._nodes[node]
        cdef Py_ssize_t b = _bucket_at(due if due > self._last_ms or not self._walked
                                       else self._last_ms)
        x.due = due
        x.bucket = <int32_t>b
        x.prev = NOWHERE
        x.next = self._wheel[b]
        if x.next != NOWHERE:
            self._nodes[x.next].prev = <int32_t>node
        self._wheel[b] = <int32_t>node

    cdef void _unlink(self, Py_ssize_t node) noexcept:
        cdef Node* x = &self._nodes[node]
        if x.bucket == NOWHERE:
            return
        if x.prev != NOWHERE:
            self._nodes[x.prev].next = x.next
        else:
            self._wheel[x.bucket] = x.next
        if x.next != NOWHERE:
            self._nodes[x.next].prev = x.prev
        x.bucket = NOWHERE  # its due time stays: `due` computes the next from it

    cdef Py_ssize_t _take_bucket(self, Py_ssize_t b, int64_t now_ms, Py_ssize_t taken) noexcept:
        """Unlink the nodes of bucket b due at now_ms into _taken; how many are there."""
        cdef int32_t node = self._wheel[b], following
        while node != NOWHERE:
            following = self._nodes[node].next
            if self._nodes[node].due <= now_ms:
                self._unlink(node)
                self._taken[taken] = node
                taken += 1
            node = following
        return taken

    # -- members ----------------------------------------------------------------------

    def start(self, Py_ssize_t slot, token, heartbeat, due_ms, interval_ms, answer=None):
        self._check(slot)
        _check_frame("heartbeat", heartbeat)
        _check_times("heartbeat", due_ms, interval_ms)
        if answer is not None and type(answer) is not bytes:
            raise TypeError(f"the answer is {type(answer).__name__}, not bytes")
        held = self._tokens[slot]
        if held is not None and held is not token:
            raise ValueError(f"slot {slot} belongs to another member")
        self._stop(slot)
        self._tokens[slot] = token
        self._heartbeats[slot] = heartbeat
        self._expected[slot] = answer
        # _check_frame made sure of 12 bytes: the api key is there.
        self._slots[slot].heartbeat_api = _get16(<const uint8_t*>PyBytes_AS_STRING(heartbeat) + 4)
        self._slots[slot].heartbeat_interval = interval_ms
        self._hot[slot].flags = BEATING | (EXACT if answer is not None else 0)
        self._link(2 * slot, due_ms)

    def confirmed(self, Py_ssize_t slot):
        """The `due` time that sent the slot's last heartbeat answered as a plain success
        since it was started; None if none was, or the slot is stopped."""
        self._check(slot)
        if not self._hot[slot].flags & CONFIRMED:
            return None
        return self._slots[slot].confirmed_ms

    def start_commits(
        self, Py_ssize_t slot, commit, list offsets_at not None, list offsets not None,
        answer, due_ms, interval_ms,
    ):
        self._check(slot)
        if not self._hot[slot].flags & BEATING:
            raise ValueError(f"slot {slot} is stopped")
        cdef Slot* s = &self._slots[slot]
        _check_frame("commit", commit)
        _check_times("commit", due_ms, interval_ms)
        if len(offsets_at) != len(offsets):
            raise ValueError(f"{len(offsets_at)} offset positions for {len(offsets)} offsets")
        cdef Py_ssize_t size = PyBytes_GET_SIZE(commit)
        for at in offsets_at:
            if not MIN_FRAME <= at <= size - 8:
                raise ValueError(f"an offset at {at} of a {size}-byte frame")
        for offset in offsets:
            if not 0 <= offset <= OFFSET_LIMIT:
                raise ValueError(f"an offset of {offset}")
        if type(answer) is not bytes:
            raise TypeError(f"the answer is {type(answer).__name__}, not bytes")
        cdef Py_ssize_t n = len(offsets), i
        cdef int64_t* values = <int64_t*>PyMem_Realloc(s.offsets, max(n, 1) * sizeof(int64_t))
        if values == NULL:
            raise MemoryError()
        s.offsets = values
        cdef Py_ssize_t* where = <Py_ssize_t*>PyMem_Realloc(
            s.offsets_at, max(n, 1) * sizeof(Py_ssize_t)
        )
        if where == NULL:
            raise MemoryError()
        s.offsets_at = where
        for i in range(n):
            s.offsets[i] = offsets[i]
            s.offsets_at[i] = offsets_at[i]
        s.n_offsets = n
        self._commit_frames[slot] = commit
        self._answers[slot] = answer
        s.commit_interval = interval_ms
        self._hot[slot].flags |= COMMITTING
        self._unlink(2 * slot + 1)
        self._link(2 * slot + 1, due_ms)

    def stop(self, Py_ssize_t slot):
        """The slot sends nothing more; the offsets its commits reached."""
        self._check(slot)
        if not self._hot[slot].flags & BEATING:
            return []
        cdef Slot* s = &self._slots[slot]
        cdef list offsets = []
        cdef Py_ssize_t i
        if self._hot[slot].flags & COMMITTING:
            offsets = [s.offsets[i] for i in range(s.n_offsets)]
        self._stop(slot)
        return offsets

    cdef void _stop(self, Py_ssize_t slot) noexcept:
        self._hot[slot].generation += 1
        self._hot[slot].flags = 0
        self._slots[slot].n_offsets = 0
        self._unlink(2 * slot)
        self._unlink(2 * slot + 1)
        self._heartbeats[slot] = None
        self._expected[slot] = None
        self._commit_frames[slot] = None
        self._answers[slot] = None

    def lost(self):
        """The connection is gone: every request unanswered is forgotten; the tokens of
        the heartbeating slots, in slot order."""
        self._head = 0
        self._count = 0
        self._unstamped = 0
        self._in_flight = 0
        cdef list tokens = []
        cdef Py_ssize_t i
        for i in range(self._n):
            if self._hot[i].flags & BEATING:
                self._hot[i].flags &= ~IN_FLIGHT
                tokens.append(self._tokens[i])
        return tokens

    # -- sending ----------------------------------------------------------------------

    cdef int _room(self, Py_ssize_t need) except -1:
        cdef Py_ssize_t capacity
        cdef char* out
        if need <= self._out_capacity:
            return 0
        capacity = max(need, 2 * self._out_capacity, 4096)
        out = <char*>PyMem_Realloc(self._out, capacity)
        if out == NULL:
            raise MemoryError()
        self._out = out
        self._out_capacity = capacity
        return 0

    cdef int _push(self, int32_t correlation_id, Py_ssize_t slot, int kind, int api, bint exact,
                   int64_t due_ms) except -1:
        cdef Request* ring
        cdef Py_ssize_t i, mask = self._capacity - 1
        if self._count == self._capacity:
            ring = <Request*>PyMem_Malloc(2 * self._capacity * sizeof(Request))
            if ring == NULL:
                raise MemoryError()
            for i in range(self._count):
                ring[i] = self._ring[(self._head + i) & mask]
            PyMem_Free(self._ring)
            self._ring = ring
            self._head = 0
            self._capacity *= 2
            mask = self._capacity - 1
        cdef Request* r = &self._ring[(self._head + self._count) & mask]
        r.sent_ns = 0
        r.correlation_id = correlation_id
        r.slot = <int32_t>slot
        r.generation = self._hot[slot].generation
        r.kind = <uint8_t>kind
        r.api = <int16_t>api
        r.exact = exact
        r.due_ms = due_ms
        r.answered = False
        self._count += 1
        self._unstamped += 1
        self._in_flight += 1
        return 0

    def due(self, int64_t now_ms, int64_t correlation_id, bytearray out not None):
        """Append to `out` every request due at `now_ms`; the last correlation id used."""
        if correlation_id < 0 or correlation_id > CORRELATION_MASK:
            raise ValueError(f"correlation id {correlation_id}")
        cdef int32_t cid = <int32_t>correlation_id
        cdef Py_ssize_t taken = 0, used = 0, size, i, j, slot, node
        cdef int64_t first = self._last_ms // TICK - (self._last_ms % TICK < 0)
        cdef int64_t last = now_ms // TICK - (now_ms % TICK < 0)
        cdef int64_t tick
        if not self._walked or now_ms < self._last_ms or last - first >= WHEEL:
            for i in range(WHEEL):
                taken = self._take_bucket(i, now_ms, taken)
        else:
            tick = first
            while tick <= last:
                taken = self._take_bucket(tick & (WHEEL - 1), now_ms, taken)
                tick += 1
        # The latest time walked: a node due before it goes to its bucket. A clock that goes
        # back leaves it where it was, and every walk is whole until the clock passes it.
        if not self._walked or now_ms > self._last_ms:
            self._last_ms = now_ms
        self._walked = True
        if taken > 1:
            qsort(self._taken, taken, sizeof(int32_t), _compare)
        cdef Slot* s
        cdef Hot* h
        cdef PyObject* frame
        cdef char* q
        for i in range(taken):
            node = self._taken[i]
            slot = node >> 1
            s = &self._slots[slot]
            h = &self._hot[slot]
            if not node & 1:
                self._link(node, _next(self._nodes[node].due, s.heartbeat_interval, now_ms))
                if h.flags & IN_FLIGHT:
                    continue  # the last is unanswered: no second one, as consumers do
                frame = PyList_GET_ITEM(self._heartbeats, slot)
            else:
                self._link(node, _next(self._nodes[node].due, s.commit_interval, now_ms))
                frame = PyList_GET_ITEM(self._commit_frames, slot)
            size = _size(frame)
            self._room(used + size)
            q = self._out + used
            memcpy(q, _bytes(frame), size)
            cid = (cid + 1) & CORRELATION_MASK
            _put32(q + CORRELATION_ID_AT, cid)
            used += size
            if not node & 1:
                self._push(cid, slot, HEARTBEAT, s.heartbeat_api, h.flags & EXACT, now_ms)
                h.flags |= IN_FLIGHT
            else:
                for j in range(s.n_offsets):
                    s.offsets[j] += 1
                    _put64(q + s.offsets_at[j], s.offsets[j])
                self._push(cid, slot, COMMIT, API_OFFSET_COMMIT, True, now_ms)
        if used:
            size = PyByteArray_GET_SIZE(out)
            PyByteArray_Resize(out, size + used)
            memcpy(PyByteArray_AS_STRING(out) + size, self._out, used)
        return cid

    def stamp(self, int64_t now_ns):
        """Every request `due` has made since the last stamp was written at `now_ns`."""
        cdef Py_ssize_t i, mask = self._capacity - 1
        for i in range(self._count - self._unstamped, self._count):
            self._ring[(self._head + i) & mask].sent_ns = now_ns
        self._unstamped = 0

    # -- answers ----------------------------------------------------------------------

    cdef inline void _pop(self) noexcept:
        self._head = (self._head + 1) & (self._capacity - 1)
        self._count -= 1
        if self._unstamped > self._count:
            self._unstamped = self._count

    def read(self, bytearray buf not None, Py_ssize_t pos, Py_ssize_t max_size,
             int heartbeat_version, int64_t now_ns, list unusual not None,
             list others not None):
        """Walk the complete response frames at buf[pos:]; the position after the last.
        See the twin for the contract."""
        cdef Py_buffer view
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            if pos < 0 or pos > view.len:
                raise ValueError("pos is outside buf")
            if heartbeat_version < 0:
                raise ValueError(f"Heartbeat v{heartbeat_version} does not exist")
            return self._walk(
                <const uint8_t*>view.buf, pos, view.len, max_size, heartbeat_version, now_ns,
                unusual, others,
            )
        finally:
            PyBuffer_Release(&view)

    cdef Py_ssize_t _walk(self, const uint8_t* p, Py_ssize_t pos, Py_ssize_t end,
                          Py_ssize_t max_size, int heartbeat_version, int64_t now_ns,
                          list unusual, list others) except -1:
        cdef Py_ssize_t size, start
        cdef int32_t correlation_id
        cdef Request request
        while end - pos >= 4:
            size = _get32(p + pos)
            if size < 4 or size > max_size:
                raise frame_size_error(size, max_size)
            if size > end - pos - 4:
                break
            start = pos + 4
            pos = start + size
            # size >= 4 and start + size <= end: the correlation id is inside the buffer.
            correlation_id = _get32(p + start)
            while self._count and self._ring[self._head].answered:
                self._pop()
            if self._count and self._ring[self._head].correlation_id == correlation_id:
                request = self._ring[self._head]
                self._pop()
                self._answer(&request, p + start, size, heartbeat_version, now_ns, unusual)
            else:
                others.append(
                    (correlation_id, PyBytes_FromStringAndSize(<const char*>(p + start), size))
                )
        return pos

    cdef int _receive(self, int fd, Py_ssize_t max_size, int heartbeat_version,
                      list unusual, list others) except -2:
        """One read of the socket `fd` into the lane's buffer, and the walk of the frames
        now whole: 1 if it read some, 0 if the peer closed, -1 if there was nothing."""
        cdef Py_ssize_t got, pos
        cdef char* grown
        if self._in_capacity - self._in_length < READ_BYTES:
            grown = <char*>PyMem_Realloc(self._in, self._in_length + READ_BYTES)
            if grown == NULL:
                raise MemoryError()
            self._in = grown
            self._in_capacity = self._in_length + READ_BYTES
        cdef int code
        got = read(fd, self._in + self._in_length, self._in_capacity - self._in_length)
        if got < 0:
            code = errno
            if code == EAGAIN or code == EINTR:
                return -1
            raise OSError(code, os.strerror(code))
        if got == 0:
            return 0
        self.received_at_ns = _now_ns()
        self._in_length += got
        pos = self._walk(<const uint8_t*>self._in, 0, self._in_length, max_size,
                         heartbeat_version, self.received_at_ns, unusual, others)
        if pos:
            memmove(self._in, self._in + pos, self._in_length - pos)
            self._in_length -= pos
        return 1

    def claim(self, int64_t correlation_id, bytes frame not None, int heartbeat_version,
              int64_t now_ns, list unusual not None):
        """Answer the lane's request `correlation_id` with `frame`, wherever it is among
        those unanswered; False if no such request waits."""
        if heartbeat_version < 0:
            raise ValueError(f"Heartbeat v{heartbeat_version} does not exist")
        cdef Py_ssize_t size = PyBytes_GET_SIZE(frame), i, mask = self._capacity - 1
        if size < 4:
            raise ValueError(f"a frame of {size} bytes")
        cdef Request* r
        for i in range(self._count):
            r = &self._ring[(self._head + i) & mask]
            if not r.answered and r.correlation_id == correlation_id:
                r.answered = True
                self._answer(
                    r, <const uint8_t*>PyBytes_AS_STRING(frame), size, heartbeat_version,
                    now_ns, unusual,
                )
                return True
        return False

    cdef int _answer(self, Request* r, const uint8_t* f, Py_ssize_t size, int version,
                     int64_t now_ns, list unusual) except -1:
        cdef Hot* h = &self._hot[r.slot]
        cdef bint current = r.generation == h.generation
        cdef int64_t latency = now_ns - r.sent_ns
        cdef int16_t error
        cdef PyObject* answer
        self._in_flight -= 1
        if r.kind == HEARTBEAT:
            if current:
                h.flags &= ~IN_FLIGHT
            if r.exact:
                if current:
                    answer = PyList_GET_ITEM(self._expected, r.slot)
                    if (<object>answer is not None and size - 4 == _size(answer)
                            and memcmp(f + 4, _bytes(answer), size - 4) == 0):
                        self._record(HEARTBEAT, latency)
                        self._confirm(r)
                        return 0
                unusual.append(
                    (self._tokens[r.slot], r.api, current, latency, 0,
                     PyBytes_FromStringAndSize(<const char*>f, size))
                )
                return 0
            if not _heartbeat_error(f, size, version, &error):
                unusual.append(
                    (self._tokens[r.slot], r.api, current, latency, 0,
                     PyBytes_FromStringAndSize(<const char*>f, size))
                )
            elif not current:
                pass  # the member has moved on since: its old heartbeat says nothing now
            elif error == 0:
                self._record(HEARTBEAT, latency)
                self._confirm(r)
            else:
                unusual.append((self._tokens[r.slot], r.api, True, latency, error, None))
            return 0
        if current and h.flags & COMMITTING:
            answer = PyList_GET_ITEM(self._answers, r.slot)
            if size - 4 == _size(answer) and memcmp(f + 4, _bytes(answer), size - 4) == 0:
                self._record(COMMIT, latency)
                self._commits[0] += 1
                self._commits[1] += self._slots[r.slot].n_offsets
                return 0
        token = self._tokens[r.slot]
        unusual.append(
            (token, API_OFFSET_COMMIT, current, latency, 0,
             PyBytes_FromStringAndSize(<const char*>f, size))
        )
        return 0

    cdef inline void _confirm(self, Request* r) noexcept:
        self._slots[r.slot].confirmed_ms = r.due_ms
        self._hot[r.slot].flags |= CONFIRMED

    cdef inline void _record(self, int kind, int64_t latency_ns) noexcept:
        self._latency[kind, _bucket(latency_ns)] += 1
        self._latency[kind, COUNT] += 1
        self._latency[kind, SUM] += latency_ns
        if latency_ns > self._latency[kind, MAX]:
            self._latency[kind, MAX] = latency_ns


@cython.final
cdef class Poller:
    """Reads the sockets of many lanes' connections: one epoll set, one call per wake-up.
    See the twin for the contract."""

    cdef int _epfd
    cdef Py_ssize_t _max_size
    cdef dict _entries  # fd -> (lane, owner, heartbeat version)
    cdef epoll_event* _events

    def __cinit__(self, Py_ssize_t max_size):
        self._epfd = -1
        self._entries = {}
        self._max_size = max_size
        self._events = <epoll_event*>PyMem_Malloc(MAX_EVENTS * sizeof(epoll_event))
        if self._events == NULL:
            raise MemoryError()
        self._epfd = epoll_create1(EPOLL_CLOEXEC)
        if self._epfd < 0:
            code = errno
            raise OSError(code, os.strerror(code))

    def __dealloc__(self):
        if self._epfd >= 0:
            close(self._epfd)
        PyMem_Free(self._events)

    def fileno(self):
        return self._epfd

    def __len__(self):
        return len(self._entries)

    def add(self, int fd, Lane lane not None, owner, int heartbeat_version):
        """Read the socket `fd` (non-blocking) into `lane`, for `owner`."""
        cdef epoll_event event
        if self._epfd < 0:
            raise ValueError("the poller is closed")
        if fd in self._entries:
            raise ValueError(f"file descriptor {fd} is polled already")
        if heartbeat_version < 0:
            raise ValueError(f"Heartbeat v{heartbeat_version} does not exist")
        event.events = EPOLLIN
        event.data.u64 = 0
        event.data.fd = fd
        cdef int code
        if epoll_ctl(self._epfd, EPOLL_CTL_ADD, fd, &event) < 0:
            code = errno
            raise OSError(code, os.strerror(code))
        self._entries[fd] = (lane, owner, heartbeat_version)

    def remove(self, int fd):
        """Stop reading `fd` (before it is closed)."""
        cdef epoll_event event
        if self._entries.pop(fd, None) is not None and self._epfd >= 0:
            epoll_ctl(self._epfd, EPOLL_CTL_DEL, fd, &event)  # gone already if fd was closed

    def close(self):
        if self._epfd >= 0:
            close(self._epfd)
            self._epfd = -1
        self._entries.clear()

    def poll(self):
        """One read of every socket ready now; what the owners must hear of."""
        cdef int ready, i, fd, status, code
        cdef Lane lane
        cdef list heard = []
        cdef list unusual = [], others = []
        if self._epfd < 0:
            raise ValueError("the poller is closed")
        ready = epoll_wait(self._epfd, self._events, MAX_EVENTS, 0)
        if ready < 0:
            code = errno
            if code == EINTR:
                return heard
            raise OSError(code, os.strerror(code))
        for i in range(ready):
            fd = self._events[i].data.fd
            entry = self._entries.get(fd)
            if entry is None:
                continue
            lane = <Lane>entry[0]
            end = None
            try:
                status = lane._receive(fd, self._max_size, entry[2], unusual, others)
                if status == 0:
                    end = closed()
            except (OSError, ProtocolError) as exc:
                end = exc
            if end is not None or unusual or others:
                heard.append((entry[1], lane.received_at_ns, unusual, others, end))
                unusual = []
                others = []
        return heard
