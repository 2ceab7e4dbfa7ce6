# cython: language_level=3
"""The hot columns of every member and group, in C arrays: what a heartbeat touches.

Twin: fastcoord/core/member_table.py (same interface, same answers; differential property
tests in tests/core/test_member_table.py). The coordinator finds a member's slot with its
two id lookups (group id, then member id) and calls `heartbeat(slot, generation, now_ms)`,
which reads the group's state and generation and moves the member's session deadline
without touching a Python object. Slots are reused after removal. Every slot that comes
from Python is checked against the array bounds and the in-use flag before it is read.

What a heartbeat touches also lives in a C struct (table_core.pxi) with a pthread mutex and
an index of the ids' UTF-8 bytes, for the reactor's thread, which answers heartbeats from a
frame's bytes without the GIL: every change to it here, and every read of what that thread
writes (deadlines, the answers counted), holds the mutex.

Layout (one entry per slot, arrays grown by doubling):
  members: deadline int64 | session_timeout int32 | rebalance_timeout int32 |
           group int32 | flags uint8 (awaiting join 1, awaiting sync 2, new 4, steady 8) |
           epoch int32 | in_use uint8;  free member slots: a stack of int32;
           client id, client host: lists of str (consumer members)
  groups:  state uint8 (consumer groups: 5 open, 6 held) | generation int32 (a consumer
           group's epoch) | in_use uint8;  free group slots: a stack
"""

cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcmp, memcpy

cdef extern from "debug.h":
    int FASTCOORD_DEBUG

include "table_core.pxi"

cdef enum:
    STATE_EMPTY_ = 0
    STATE_PREPARING_REBALANCE_ = 1
    STATE_COMPLETING_REBALANCE_ = 2
    STATE_STABLE_ = 3
    STATE_DEAD_ = 4
    STATE_CONSUMER_OPEN_ = 5
    STATE_CONSUMER_HELD_ = 6
    FALLBACK_ = -1
    NONE_ = 0
    ILLEGAL_GENERATION_ = 22
    REBALANCE_IN_PROGRESS_ = 27
    INITIAL_CAPACITY = 64
    AWAITING_JOIN_ = 1
    AWAITING_SYNC_ = 2
    NEW_ = 4
    STEADY_ = 8

STATE_EMPTY = STATE_EMPTY_
STATE_PREPARING_REBALANCE = STATE_PREPARING_REBALANCE_
STATE_COMPLETING_REBALANCE = STATE_COMPLETING_REBALANCE_
STATE_STABLE = STATE_STABLE_
STATE_DEAD = STATE_DEAD_
STATE_CONSUMER_OPEN = STATE_CONSUMER_OPEN_
STATE_CONSUMER_HELD = STATE_CONSUMER_HELD_
FALLBACK = FALLBACK_
NONE = NONE_
ILLEGAL_GENERATION = ILLEGAL_GENERATION_
REBALANCE_IN_PROGRESS = REBALANCE_IN_PROGRESS_
AWAITING_JOIN = AWAITING_JOIN_
AWAITING_SYNC = AWAITING_SYNC_
NEW = NEW_
STEADY = STEADY_


cdef void* grow(void* data, Py_ssize_t count, size_t item) except NULL:
    cdef void* out = PyMem_Realloc(data, count * item)
    if out == NULL:
        raise MemoryError()
    return out


@cython.final
cdef class MemberTable:
    # What a heartbeat touches (deadline, session timeout, group, in use; the groups' state,
    # generation and in use; the id index; the answers counted), with the lock that guards
    # it: every change to it, and every read of what the reactor's thread writes, holds it.
    cdef TableCore* _c
    cdef int32_t* _rebalance_timeout
    cdef uint8_t* _flags
    cdef int32_t* _epoch
    cdef list _client_id
    cdef list _client_host
    cdef int32_t* _free
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t _free_count
    cdef Py_ssize_t _members

    cdef int32_t* _group_free
    cdef Py_ssize_t _group_capacity
    cdef Py_ssize_t _group_free_count
    cdef dict _index  # group id -> {member id -> slot}
    cdef int64_t _consumer_answered
    # What consumer_heartbeat_id's answers carry (the group manager sets it).
    cdef public int32_t consumer_heartbeat_interval_ms

    def __cinit__(self):
        self._c = <TableCore*>calloc(1, sizeof(TableCore))
        if self._c == NULL:
            raise MemoryError()
        pthread_mutex_init(&self._c.lock, NULL)
        self._c.index = <IndexEntry*>calloc(INITIAL_CAPACITY, sizeof(IndexEntry))
        if self._c.index == NULL:
            raise MemoryError()
        self._c.index_capacity = INITIAL_CAPACITY
        self._index = {}
        self._client_id = []
        self._client_host = []
        self._grow_members(INITIAL_CAPACITY)
        self._grow_groups(INITIAL_CAPACITY)

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self._c == NULL:
            return
        if self._c.index != NULL:
            for i in range(self._c.index_capacity):
                free(self._c.index[i].key)
            free(self._c.index)
        PyMem_Free(self._c.deadline)
        PyMem_Free(self._c.session_timeout)
        PyMem_Free(self._rebalance_timeout)
        PyMem_Free(self._c.group)
        PyMem_Free(self._flags)
        PyMem_Free(self._epoch)
        PyMem_Free(self._c.in_use)
        PyMem_Free(self._free)
        PyMem_Free(self._c.group_state)
        PyMem_Free(self._c.group_generation)
        PyMem_Free(self._c.group_in_use)
        PyMem_Free(self._group_free)
        pthread_mutex_destroy(&self._c.lock)
        free(self._c)

    def _core_address(self):
        """The address of the columns a heartbeat touches (for the reactor's thread, which
        holds this table while it runs)."""
        return <size_t>self._c

    cdef inline void _lock(self) noexcept:
        # With the GIL: the reactor's thread never takes it, and holds the lock briefly.
        pthread_mutex_lock(&self._c.lock)

    cdef inline void _unlock(self) noexcept:
        pthread_mutex_unlock(&self._c.lock)

    cdef int _grow_members(self, Py_ssize_t capacity) except -1:
        self._c.deadline = <int64_t*>grow(self._c.deadline, capacity, sizeof(int64_t))
        self._c.session_timeout = <int32_t*>grow(self._c.session_timeout, capacity, sizeof(int32_t))
        self._rebalance_timeout = <int32_t*>grow(
            self._rebalance_timeout, capacity, sizeof(int32_t)
        )
        self._c.group = <int32_t*>grow(self._c.group, capacity, sizeof(int32_t))
        self._flags = <uint8_t*>grow(self._flags, capacity, sizeof(uint8_t))
        self._epoch = <int32_t*>grow(self._epoch, capacity, sizeof(int32_t))
        self._c.in_use = <uint8_t*>grow(self._c.in_use, capacity, sizeof(uint8_t))
        self._free = <int32_t*>grow(self._free, capacity, sizeof(int32_t))
        self._capacity = capacity
        return 0

    cdef int _grow_groups(self, Py_ssize_t capacity) except -1:
        self._c.group_state = <uint8_t*>grow(self._c.group_state, capacity, sizeof(uint8_t))
        self._c.group_generation = <int32_t*>grow(self._c.group_generation, capacity, sizeof(int32_t))
        self._c.group_in_use = <uint8_t*>grow(self._c.group_in_use, capacity, sizeof(uint8_t))
        self._group_free = <int32_t*>grow(self._group_free, capacity, sizeof(int32_t))
        self._group_capacity = capacity
        return 0

    def __len__(self):
        return self._members

    # -- groups ------------------------------------------------------------------------

    cdef inline int _check_group(self, Py_ssize_t slot) except -1:
        if slot < 0 or slot >= self._c.group_used or not self._c.group_in_use[slot]:
            raise KeyError(f"no group in slot {slot}")
        return 0

    def add_group(self, int state, int32_t generation):
        cdef Py_ssize_t slot
        if self._group_free_count:
            self._group_free_count -= 1
            slot = self._group_free[self._group_free_count]
        else:
            if self._c.group_used == self._group_capacity:
                self._lock()
                try:
                    self._grow_groups(self._group_capacity * 2)
                finally:
                    self._unlock()
            slot = self._c.group_used
        self._lock()
        self._c.group_state[slot] = <uint8_t>state
        self._c.group_generation[slot] = generation
        self._c.group_in_use[slot] = 1
        if slot == self._c.group_used:
            self._c.group_used += 1
        self._unlock()
        return slot

    def remove_group(self, Py_ssize_t slot):
        self._check_group(slot)
        self._lock()
        self._c.group_in_use[slot] = 0
        self._unlock()
        self._group_free[self._group_free_count] = <int32_t>slot
        self._group_free_count += 1

    def set_group(self, Py_ssize_t slot, int state, int32_t generation):
        self._check_group(slot)
        self._lock()
        self._c.group_state[slot] = <uint8_t>state
        self._c.group_generation[slot] = generation
        self._unlock()

    def group_state(self, Py_ssize_t slot):
        self._check_group(slot)
        return self._c.group_state[slot]

    def group_generation(self, Py_ssize_t slot):
        self._check_group(slot)
        return self._c.group_generation[slot]

    # -- members -----------------------------------------------------------------------

    cdef inline int _check_member(self, Py_ssize_t slot) except -1:
        if slot < 0 or slot >= self._c.used or not self._c.in_use[slot]:
            raise KeyError(f"no member in slot {slot}")
        if FASTCOORD_DEBUG and not self._c.group_in_use[self._c.group[slot]]:
            raise AssertionError(
                f"member slot {slot} points at a free group slot {self._c.group[slot]}"
            )
        return 0

    def add_member(self, Py_ssize_t group_slot, int32_t session_timeout_ms,
                   int32_t rebalance_timeout_ms):
        self._check_group(group_slot)
        cdef Py_ssize_t slot
        if self._free_count:
            self._free_count -= 1
            slot = self._free[self._free_count]
        else:
            if self._c.used == self._capacity:
                self._lock()
                try:
                    self._grow_members(self._capacity * 2)
                finally:
                    self._unlock()
            slot = self._c.used
            self._client_id.append("")
            self._client_host.append("")
        self._rebalance_timeout[slot] = rebalance_timeout_ms
        self._flags[slot] = 0
        self._epoch[slot] = 0
        self._client_id[slot] = ""
        self._client_host[slot] = ""
        self._lock()
        self._c.deadline[slot] = 0
        self._c.session_timeout[slot] = session_timeout_ms
        self._c.group[slot] = <int32_t>group_slot
        self._c.in_use[slot] = 1
        if slot == self._c.used:
            self._c.used += 1
        self._unlock()
        self._members += 1
        return slot

    def remove_member(self, Py_ssize_t slot):
        self._check_member(slot)
        self._lock()
        self._c.in_use[slot] = 0
        self._unlock()
        # The free stack has room: it holds at most the number of slots handed out.
        self._free[self._free_count] = <int32_t>slot
        self._free_count += 1
        self._members -= 1

    def deadline(self, Py_ssize_t slot):
        self._check_member(slot)
        self._lock()
        cdef int64_t deadline = self._c.deadline[slot]
        self._unlock()
        return deadline

    def set_deadline(self, Py_ssize_t slot, int64_t deadline_ms):
        self._check_member(slot)
        self._lock()
        self._c.deadline[slot] = deadline_ms
        self._unlock()

    def timeouts(self, Py_ssize_t slot):
        self._check_member(slot)
        return self._c.session_timeout[slot], self._rebalance_timeout[slot]

    def set_timeouts(self, Py_ssize_t slot, int32_t session_timeout_ms,
                     int32_t rebalance_timeout_ms):
        self._check_member(slot)
        self._lock()
        self._c.session_timeout[slot] = session_timeout_ms
        self._unlock()
        self._rebalance_timeout[slot] = rebalance_timeout_ms

    def flags(self, Py_ssize_t slot):
        self._check_member(slot)
        return self._flags[slot]

    def set_flag(self, Py_ssize_t slot, int flag, bint on):
        self._check_member(slot)
        if on:
            self._flags[slot] |= <uint8_t>flag
        else:
            self._flags[slot] &= <uint8_t>~flag

    def satisfied(self, Py_ssize_t slot):
        """Kafka's hasSatisfiedHeartbeat at session expiry (see the twin)."""
        self._check_member(slot)
        cdef uint8_t flags = self._flags[slot]
        return not (flags & NEW_) and (flags & (AWAITING_JOIN_ | AWAITING_SYNC_)) != 0

    def group_of(self, Py_ssize_t slot):
        self._check_member(slot)
        return self._c.group[slot]

    def bind(self, str group_id, str member_id, Py_ssize_t slot):
        """Make (group id, member id) find `slot` in heartbeat_id."""
        self._check_member(slot)
        members = self._index.get(group_id)
        if members is None:
            members = self._index[group_id] = {}
        members[member_id] = slot
        cdef bytes group_key, member_key
        try:
            group_key = group_id.encode("utf-8")
            member_key = member_id.encode("utf-8")
        except UnicodeEncodeError:
            return  # no frame carries these ids as UTF-8: only the dictionaries know them
        self._lock()
        try:
            self._index_put(group_key, member_key, <int32_t>slot)
        finally:
            self._unlock()

    def unbind(self, str group_id, str member_id):
        members = self._index.get(group_id)
        if members is not None:
            (<dict>members).pop(member_id, None)
            if not members:
                del self._index[group_id]
        cdef bytes group_key, member_key
        try:
            group_key = group_id.encode("utf-8")
            member_key = member_id.encode("utf-8")
        except UnicodeEncodeError:
            return
        cdef Py_ssize_t i
        self._lock()
        i = core_probe(
            self._c, core_hash(group_key, len(group_key), member_key, len(member_key)),
            group_key, len(group_key), member_key, len(member_key),
        )
        if i >= 0:
            free(self._c.index[i].key)
            self._c.index[i].key = NULL
            self._c.index[i].state = CORE_GONE
        self._unlock()

    cdef int _index_put(self, bytes group_key, bytes member_key, int32_t slot) except -1:
        # The caller holds the lock.
        cdef Py_ssize_t group_size = len(group_key), member_size = len(member_key)
        cdef uint64_t h = core_hash(group_key, group_size, member_key, member_size)
        cdef Py_ssize_t i = core_probe(self._c, h, group_key, group_size, member_key, member_size)
        if i >= 0:
            self._c.index[i].slot = slot
            return 0
        if 2 * (self._c.index_filled + 1) > self._c.index_capacity:
            self._index_rehash()
        cdef char* key = <char*>malloc(group_size + member_size + 1)
        if key == NULL:
            raise MemoryError()
        memcpy(key, <const char*>group_key, group_size)
        memcpy(key + group_size, <const char*>member_key, member_size)
        cdef Py_ssize_t mask = self._c.index_capacity - 1
        i = <Py_ssize_t>(h & <uint64_t>mask)
        while self._c.index[i].state == CORE_LIVE:
            i = (i + 1) & mask
        if self._c.index[i].state == CORE_EMPTY:
            self._c.index_filled += 1
        self._c.index[i].hash = h
        self._c.index[i].key = key
        self._c.index[i].group_size = <int32_t>group_size
        self._c.index[i].member_size = <int32_t>member_size
        self._c.index[i].slot = slot
        self._c.index[i].state = CORE_LIVE
        return 0

    cdef int _index_rehash(self) except -1:
        # Room for twice the live entries and more, without the gone ones.
        cdef Py_ssize_t live = 0, i, j, mask
        for i in range(self._c.index_capacity):
            if self._c.index[i].state == CORE_LIVE:
                live += 1
        cdef Py_ssize_t capacity = INITIAL_CAPACITY
        while capacity < 4 * (live + 1):
            capacity *= 2
        cdef IndexEntry* fresh = <IndexEntry*>calloc(capacity, sizeof(IndexEntry))
        if fresh == NULL:
            raise MemoryError()
        mask = capacity - 1
        for i in range(self._c.index_capacity):
            if self._c.index[i].state == CORE_LIVE:
                j = <Py_ssize_t>(self._c.index[i].hash & <uint64_t>mask)
                while fresh[j].state == CORE_LIVE:
                    j = (j + 1) & mask
                fresh[j] = self._c.index[i]
        free(self._c.index)
        self._c.index = fresh
        self._c.index_capacity = capacity
        self._c.index_filled = live
        return 0

    cdef inline Py_ssize_t _find(self, str group_id, str member_id) except -2:
        # The two id lookups of every heartbeat: -1 if the ids are not bound.
        cdef object members = self._index.get(group_id)
        if members is None:
            return -1
        cdef object found = (<dict>members).get(member_id)
        if found is None:
            return -1
        return <Py_ssize_t>found

    def slot_of(self, str group_id, str member_id):
        """The slot bound to (group id, member id), or -1."""
        return self._find(group_id, member_id)

    def heartbeat_id(self, str group_id, str member_id, int64_t generation, int64_t now_ms):
        """heartbeat() for a member found by its ids (see the twin)."""
        cdef Py_ssize_t slot = self._find(group_id, member_id)
        if slot < 0:
            return FALLBACK_
        self._check_member(slot)
        self._lock()
        cdef int code = self._heartbeat(slot, generation, now_ms)
        if code == NONE_:
            self._c.answered_none += 1
        elif code == REBALANCE_IN_PROGRESS_:
            self._c.answered_rebalance += 1
        elif code == ILLEGAL_GENERATION_:
            self._c.answered_illegal += 1
        self._unlock()
        return code

    def group_states(self):
        """[groups in use in state 0, 1, ... 4] (see the twin)."""
        cdef int64_t counts[5]
        cdef Py_ssize_t i
        for i in range(5):
            counts[i] = 0
        for i in range(self._c.group_used):
            if self._c.group_in_use[i] and self._c.group_state[i] < 5:
                counts[self._c.group_state[i]] += 1
        return [counts[i] for i in range(5)]

    def heartbeat_answers(self):
        """{error code: heartbeats heartbeat_id answered with it} (see the twin)."""
        self._lock()
        cdef int64_t none = self._c.answered_none
        cdef int64_t rebalance = self._c.answered_rebalance
        cdef int64_t illegal = self._c.answered_illegal
        self._unlock()
        return {NONE_: none, REBALANCE_IN_PROGRESS_: rebalance, ILLEGAL_GENERATION_: illegal}

    def heartbeat(self, Py_ssize_t slot, int64_t generation, int64_t now_ms):
        """A heartbeat of a known dynamic member: an error code, or FALLBACK (see the twin)."""
        self._check_member(slot)
        self._lock()
        cdef int code = self._heartbeat(slot, generation, now_ms)
        self._unlock()
        return code

    cdef int _heartbeat(self, Py_ssize_t slot, int64_t generation, int64_t now_ms) noexcept:
        # The caller checked the slot, and holds the lock.
        cdef int32_t group = self._c.group[slot]
        cdef uint8_t state = self._c.group_state[group]
        if state == STATE_PREPARING_REBALANCE_:
            if generation == self._c.group_generation[group]:
                self._c.deadline[slot] = now_ms + self._c.session_timeout[slot]
            return REBALANCE_IN_PROGRESS_
        if state == STATE_STABLE_ or state == STATE_COMPLETING_REBALANCE_:
            if generation != self._c.group_generation[group]:
                return ILLEGAL_GENERATION_
            self._c.deadline[slot] = now_ms + self._c.session_timeout[slot]
            return NONE_
        return FALLBACK_

    # -- consumer group members ------------------------------------------------------------

    def set_consumer(self, Py_ssize_t slot, int32_t epoch, bint steady, str client_id,
                     str client_host):
        """A consumer member's epoch, whether it is steady, and where it heartbeats from."""
        self._check_member(slot)
        self._epoch[slot] = epoch
        self._client_id[slot] = client_id
        self._client_host[slot] = client_host
        if steady:
            self._flags[slot] |= STEADY_
        else:
            self._flags[slot] &= <uint8_t>~STEADY_

    def consumer(self, Py_ssize_t slot):
        """(epoch, steady, client id, client host) of a consumer member."""
        self._check_member(slot)
        return (
            self._epoch[slot], (self._flags[slot] & STEADY_) != 0,
            self._client_id[slot], self._client_host[slot],
        )

    def consumer_heartbeat_id(self, str group_id, str member_id, int64_t epoch, client_id,
                              str client_host, int64_t now_ms):
        """A ConsumerGroupHeartbeat that changes nothing: NONE, else FALLBACK (see the twin)."""
        cdef Py_ssize_t slot = self._find(group_id, member_id)
        if slot < 0:
            return FALLBACK_
        self._check_member(slot)
        cdef int32_t group = self._c.group[slot]
        if (
            self._c.group_state[group] != STATE_CONSUMER_OPEN_
            or not (self._flags[slot] & STEADY_)
            or epoch != self._epoch[slot]
            or epoch != self._c.group_generation[group]
        ):
            return FALLBACK_
        if client_id is None:
            client_id = ""
        if client_id != self._client_id[slot] or client_host != self._client_host[slot]:
            return FALLBACK_
        self._lock()
        self._c.deadline[slot] = now_ms + self._c.session_timeout[slot]
        self._unlock()
        self._consumer_answered += 1
        return NONE_

    def consumer_heartbeat_answers(self):
        """ConsumerGroupHeartbeats consumer_heartbeat_id answered (all NONE)."""
        return self._consumer_answered
