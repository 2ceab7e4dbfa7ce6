# The member table's columns that a heartbeat reads and writes, in one C struct with its lock
# and an index of (group id, member id) UTF-8 bytes -> member slot, so that a thread without
# the GIL (the reactor's, _ext/reactor.pyx) answers a heartbeat from the bytes of its frame.
# Included into member_table.pyx, which owns the struct and mutates it under `lock`, and into
# reactor.pyx and hot_frames.pyx, which reach it through the address
# MemberTable._core_address() gives.
# Included, not cimported: the extensions are built one module each. The including module
# cimports int32_t, int64_t, uint8_t, uint64_t and memcmp, memcpy.
#
# Functions without the GIL here, in heartbeat.pxi and in reactor.pyx are never traced
# (profile, linetrace off): the debug build's tracing would take the GIL in them, and the
# reactor's thread, holding the reactor's mutex, would then wait for a GIL whose holder
# waits for that mutex.

from libc.stdlib cimport calloc, free, malloc

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t* mutex, void* attr)
    int pthread_mutex_destroy(pthread_mutex_t* mutex)
    int pthread_mutex_lock(pthread_mutex_t* mutex)
    int pthread_mutex_unlock(pthread_mutex_t* mutex)

cdef enum:
    CORE_EMPTY = 0
    CORE_LIVE = 1
    CORE_GONE = 2  # a removed entry: probes go on past it
    CORE_FALLBACK = -1
    CORE_NONE = 0
    CORE_ILLEGAL_GENERATION = 22
    CORE_REBALANCE_IN_PROGRESS = 27
    CORE_STATE_PREPARING_REBALANCE = 1
    CORE_STATE_COMPLETING_REBALANCE = 2
    CORE_STATE_STABLE = 3


cdef struct IndexEntry:
    uint64_t hash
    char* key  # the group id's bytes, then the member id's
    int32_t group_size
    int32_t member_size
    int32_t slot
    uint8_t state


cdef struct TableCore:
    # Held by whoever reads or writes what a heartbeat touches: the coordinator's side (with
    # the GIL; never contended but by the reactor's thread, which holds it for one lookup and
    # one heartbeat) and the reactor's thread (without the GIL, which it never takes).
    pthread_mutex_t lock
    int64_t* deadline
    int32_t* session_timeout
    int32_t* group
    uint8_t* in_use
    Py_ssize_t used
    uint8_t* group_state
    int32_t* group_generation
    uint8_t* group_in_use
    Py_ssize_t group_used
    IndexEntry* index  # open addressing, linear probes; capacity a power of two
    Py_ssize_t index_capacity
    Py_ssize_t index_filled  # live and gone entries
    int64_t answered_none
    int64_t answered_rebalance
    int64_t answered_illegal


@cython.profile(False)
@cython.linetrace(False)
cdef inline uint64_t core_hash(
    const char* group_id, Py_ssize_t group_size, const char* member_id, Py_ssize_t member_size
) noexcept nogil:
    # FNV-1a over both ids, the group id's length between them.
    cdef uint64_t h = 14695981039346656037ULL
    cdef Py_ssize_t i
    for i in range(group_size):
        h = (h ^ <uint8_t>group_id[i]) * 1099511628211ULL
    h = (h ^ <uint64_t>(group_size + 0x100)) * 1099511628211ULL
    for i in range(member_size):
        h = (h ^ <uint8_t>member_id[i]) * 1099511628211ULL
    return h ^ (h >> 29)


@cython.profile(False)
@cython.linetrace(False)
cdef inline Py_ssize_t core_probe(
    TableCore* t, uint64_t h, const char* group_id, Py_ssize_t group_size,
    const char* member_id, Py_ssize_t member_size,
) noexcept nogil:
    """The index entry holding the ids, or -1. The caller holds the lock."""
    cdef Py_ssize_t mask = t.index_capacity - 1
    cdef Py_ssize_t i = <Py_ssize_t>(h & <uint64_t>mask)
    cdef IndexEntry* e
    while True:
        e = &t.index[i]
        if e.state == CORE_EMPTY:
            return -1
        if (
            e.state == CORE_LIVE and e.hash == h and e.group_size == group_size
            and e.member_size == member_size
            and memcmp(e.key, group_id, group_size) == 0
            and memcmp(e.key + group_size, member_id, member_size) == 0
        ):
            return i
        i = (i + 1) & mask


@cython.profile(False)
@cython.linetrace(False)
cdef inline Py_ssize_t core_find(
    TableCore* t, const char* group_id, Py_ssize_t group_size, const char* member_id,
    Py_ssize_t member_size,
) noexcept nogil:
    """The slot bound to the ids, or -1. The caller holds the lock."""
    cdef Py_ssize_t i = core_probe(
        t, core_hash(group_id, group_size, member_id, member_size), group_id, group_size,
        member_id, member_size,
    )
    return -1 if i < 0 else t.index[i].slot


@cython.profile(False)
@cython.linetrace(False)
cdef inline int core_heartbeat(
    TableCore* t, Py_ssize_t slot, int64_t generation, int64_t now_ms, bint apply
) noexcept nogil:
    """MemberTable._heartbeat's answer for a slot the index gave (so in use), without its
    checks' exceptions: FALLBACK for anything but the three answers. With `apply`, the
    session deadline moves and the answer is counted. The caller holds the lock."""
    if slot < 0 or slot >= t.used or not t.in_use[slot]:
        return CORE_FALLBACK
    cdef int32_t group = t.group[slot]
    if group < 0 or group >= t.group_used or not t.group_in_use[group]:
        return CORE_FALLBACK
    cdef uint8_t state = t.group_state[group]
    cdef int code
    if state == CORE_STATE_PREPARING_REBALANCE:
        if apply and generation == t.group_generation[group]:
            t.deadline[slot] = now_ms + t.session_timeout[slot]
        code = CORE_REBALANCE_IN_PROGRESS
    elif state == CORE_STATE_STABLE or state == CORE_STATE_COMPLETING_REBALANCE:
        if generation != t.group_generation[group]:
            code = CORE_ILLEGAL_GENERATION
        else:
            if apply:
                t.deadline[slot] = now_ms + t.session_timeout[slot]
            code = CORE_NONE
    else:
        return CORE_FALLBACK
    if apply:
        if code == CORE_NONE:
            t.answered_none += 1
        elif code == CORE_REBALANCE_IN_PROGRESS:
            t.answered_rebalance += 1
        else:
            t.answered_illegal += 1
    return code
