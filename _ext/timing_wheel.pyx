# cython: language_level=3
"""Hierarchical timing wheel, keyed: every delayed operation of the coordinator, in C.

Why: the coordinator arms a timer per member (session expiry) and per group (delayed join,
sync and rebalance timeouts), and re-arms a member's timer on every heartbeat. A busy
coordinator therefore makes millions of re-arms for every timer that fires. A heap of all
timers costs O(log n) per re-arm and leaves cancelled entries behind; the wheel re-arms
and cancels in O(1), and expires in O(1) per timer plus one sort of what expires.

Follows Kafka's kafka.utils.timer.TimingWheel and SystemTimer (now
org.apache.kafka.server.util.timer): tick 1 ms, 20 buckets per wheel, overflow wheels
created on demand (intervals 20 ms, 400 ms, 8 s, 160 s, ...), a bucket is a list of
timers with one expiration, a priority queue of bucket expirations (Kafka's DelayQueue)
says when to advance, and advancing flushes each due bucket, expiring its timers or
re-inserting them one wheel down (Kafka's flush(addTimerTaskEntry)). Keyed as the new
group coordinator's CoordinatorTimer: scheduling a key that is armed replaces its timer.

Differences from Kafka, all visible only through the interface's guarantees:
  * advance(now) expires exactly the timers with deadline <= now (Kafka expires a timer
    anywhere in the current tick), and returns their keys ordered by (deadline, schedule
    order) instead of running tasks from bucket order. Level-0 buckets therefore carry the
    earliest deadline put into them as their expiration (equal to Kafka's for tick 1 ms).
  * Advancing to `now` moves every wheel's clock to `now` at once, and a timer that
    leaves a due overflow bucket goes straight to its bucket at `now` or expires.
  * Times are kept as offsets from start_ms in uint64, so no deadline in int64 overflows.
  * Buckets emptied by cancel are dropped from the queue lazily, by next_deadline().

Twin: fastcoord/core/timing_wheel.py, the same algorithm in plain Python (a dict per
bucket instead of linked lists). tests/core/test_timing_wheel.py checks both against a
reference model and against each other.
"""

# Data layout
#
#   Times inside the wheel are offsets from start_ms:  u = t - start_ms  (uint64).
#   uclock = clock - start_ms. An armed timer is either due (deadline <= clock: the due
#   list, bucket 0) or in a wheel (deadline > clock, so u in (uclock, 2**64)).
#
#   wheel (level) L, made on demand:   tick_L = tick_ms * W**L      span_L = tick_L * W
#     cur_L = uclock floored to tick_L. Wheel L holds u iff u - cur_L < span_L (the top
#     wheel, whose span would pass 2**64, holds every u). A timer goes to the first wheel
#     that holds it, in bucket (u // tick_L) % W of it. Storage for every wheel that can
#     exist is allocated up front (15 wheels x 20 buckets = 301 Buckets for the defaults).
#
#   Example (tick 1 ms, W = 20, clock at 0), as in Kafka's TimingWheel comment: spans are
#   20 ms, 400 ms, 8 s, 160 s. A timer at 45,000 goes to wheel 3 (tick 8 s), bucket
#   45000 // 8000 % 20 = 5, expiration 40,000. Advancing to 40,000 flushes that bucket and
#   the timer moves down to wheel 2 (tick 400 ms), bucket 112 % 20 = 12, expiration 44,800;
#   at 44,800 to wheel 1 (tick 20 ms), bucket 2250 % 20 = 10, expiration 45,000; at 45,000
#   it expires. next_deadline() said 40,000, then 44,800, then 45,000.
#
#   _buckets: Bucket[1 + max_levels * W]
#   +--------+------------------------------+-------------------------------+-- ... --+
#   | 0: due | wheel 0: buckets 1 .. W      | wheel 1: buckets W+1 .. 2W    |         |
#   +--------+------------------------------+-------------------------------+-- ... --+
#     Bucket {exp: uint64, head: int32, heap_pos: int32, count: int32}
#       exp   wheel 0: the earliest u put in since the bucket was last flushed;
#             wheel L > 0: (u // tick_L) * tick_L, Kafka's bucket expiration.
#             Always > uclock for a bucket in the queue after advance() returns.
#       head  first entry slot of the bucket's list, NIL (-1) when empty
#       heap_pos  index in _heap, NIL when the bucket is not queued
#       count  entries in the list;  pad  marks the buckets being flushed (by scan)
#
#   _heap: int32[1 + max_levels * W]   bucket ids, a binary min-heap on _buckets[b].exp
#     (Kafka's DelayQueue). A bucket is queued at most once: lowering a wheel-0 bucket's
#     exp sifts it up. An emptied bucket stays queued until next_deadline() pops it.
#
#   _entries: Entry[cap]      one per slot; cap doubles (16, 32, ..., up to 2**31 - 1)
#   +--------------------+--------------------+------+------+--------+------+
#   | deadline: int64    | seq: uint64        | prev | next | bucket | pad  |  32 bytes
#   +--------------------+--------------------+------+------+--------+------+
#     prev/next: the bucket's doubly linked list (NIL ends); bucket: NIL when not linked
#     (free, or being expired by advance()). seq: order of (re)scheduling.
#   _free: int32[cap], _nfree    stack of free slots, lowest slot on top after a growth
#   _slots: dict   key -> slot (the int object _slot_ints[slot], so no int is allocated)
#   _keys: list    slot -> key, None when free
#   _slot_ints: list  slot -> int(slot)
#   _popped: int32[1 + max_levels * W]   advance()'s scratch: the due buckets' ids
#
#   advance() collects the expired entries as Item {deadline, seq, slot} (24 bytes) in
#   one buffer sized for every entry of the due buckets, twice over for the sort, which
#   is a radix sort (see sort_expired). It reads the due buckets' lists, or scans all
#   entries in slot order when those buckets hold 1/8 of the slots or more.
#
# Keys' __hash__ and __eq__ must not call back into the wheel, nor let another thread in
# that calls it (the wheel is not re-entrant while a dict operation runs); ints, strs and
# tuples of them are fine. Dropping a key's last reference happens only once the wheel
# is consistent again.

cimport cython
from cpython.dict cimport PyDict_DelItem, PyDict_Next, PyDict_SetDefault
from cpython.list cimport PyList_GET_ITEM, PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_Check
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.number cimport PyNumber_Index
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from cpython.sequence cimport PySequence_Fast_ITEMS
from libc.stdint cimport INT32_MAX, UINT64_MAX, int32_t, int64_t, uint64_t
from libc.string cimport memcpy, memset

cdef extern from *:
    void __builtin_prefetch(const void* address) noexcept nogil

cdef enum:
    NIL = -1
    DUE = 0                 # bucket id of the due list
    MAX_LEVELS = 64         # tick_L >= 2**L, so wheel 63 at the latest spans 2**64
    MAX_WHEEL_SIZE = 65536
    SMALL_SORT = 32         # insertion sort up to this many expired timers
    SLOT_BITS = 31          # a slot is below 2**31
    SCAN_RATIO = 8          # flush by a pass over the entries when 1/8 of them or more
    PREFETCH = 16           # _release() prefetches the key list this many items ahead
    FIRST_CAPACITY = 16

cdef enum:
    UNIT = 0
    SPLIT = 1
    TOP = 2

cdef struct Entry:
    int64_t deadline
    uint64_t seq
    int32_t prev
    int32_t next
    int32_t bucket
    int32_t pad

cdef struct Bucket:
    uint64_t exp
    int32_t head
    int32_t heap_pos
    int32_t count
    int32_t pad

cdef struct Level:
    uint64_t tick           # tick_L
    uint64_t max            # span_L - 1; UINT64_MAX for the top wheel
    uint64_t cur            # uclock floored to tick_L
    uint64_t cur_idx        # (cur // tick) % W: the bucket index of cur
    double inv              # 1.0 / tick, for quotient()
    int32_t kind            # UNIT (tick 1: no division), SPLIT (quotient()), TOP (a division)
    int32_t pad

cdef struct Item:
    uint64_t dkey           # deadline with the sign bit flipped: unsigned order = signed order
    uint64_t skey           # seq
    int32_t slot
    int32_t pad

cdef uint64_t SIGN = (<uint64_t>1) << 63


cdef inline void put_expired(Item* item, Entry* e, int32_t slot) noexcept:
    """An expired timer's sort record: (deadline, schedule order), then its slot."""
    item.dkey = <uint64_t>e.deadline ^ SIGN
    item.skey = e.seq
    item.slot = slot
    item.pad = 0
cdef uint64_t SLOT_MASK = ((<uint64_t>1) << SLOT_BITS) - 1


cdef inline int64_t as_int64(object value) except? -1:
    # As the twin's operator.index: an int (or an object with __index__), never a float.
    if not PyLong_Check(value):
        value = PyNumber_Index(value)
    return value


cdef inline uint64_t quotient(uint64_t x, uint64_t t, double inv) noexcept nogil:
    """x // t for x < t * W, where t * W < 2**64, without a 64-bit division.

    The quotient is below W <= 2**16 and the double estimate x * (1/t) is within 1e-10 of
    it (three roundings of 2**-53 each), so truncating it is off by at most one: fix that.
    """
    cdef uint64_t q = <uint64_t>(<double>x * inv)
    if q * t > x:           # q <= W here, and W * t < 2**64
        q -= 1
    elif x - q * t >= t:
        q += 1
    return q


cdef inline bint item_less(const Item* a, const Item* b) noexcept nogil:
    return a.dkey < b.dkey or (a.dkey == b.dkey and a.skey < b.skey)


cdef inline int bit_length(uint64_t x) noexcept nogil:
    cdef int n = 0
    while x:
        n += 1
        x >>= 1
    return n


cdef void radix_sort_u64(
    uint64_t* keys, uint64_t* tmp, Py_ssize_t n, int lo, int hi
) noexcept nogil:
    """LSD radix sort of keys on bits [lo, hi), 11 bits a pass; the result is in `keys`."""
    cdef Py_ssize_t counts[2048]
    cdef Py_ssize_t i, total, c
    cdef int shift, k, passes = 0
    cdef uint64_t* src = keys
    cdef uint64_t* dst = tmp
    cdef uint64_t* swap
    for shift in range(lo, hi, 11):
        memset(counts, 0, sizeof(counts))
        for i in range(n):
            counts[(src[i] >> shift) & 0x7FF] += 1
        if counts[(src[0] >> shift) & 0x7FF] == n:
            continue                        # all alike in these bits
        total = 0
        for k in range(2048):
            c = counts[k]
            counts[k] = total
            total += c
        for i in range(n):
            k = <int>((src[i] >> shift) & 0x7FF)
            dst[counts[k]] = src[i]
            counts[k] += 1
        swap = src
        src = dst
        dst = swap
        passes += 1
    if passes & 1:
        memcpy(keys, src, n * sizeof(uint64_t))


cdef Item* radix_sort_items(
    Item* items, Item* tmp, Py_ssize_t n, int sbytes, int dbytes
) noexcept nogil:
    """LSD radix sort of rebased items on bytes, seq bytes first; returns items or tmp."""
    cdef Py_ssize_t counts[256]
    cdef Py_ssize_t i, total, c
    cdef int p, shift, k
    cdef bint on_seq
    cdef Item* src = items
    cdef Item* dst = tmp
    cdef Item* swap
    cdef uint64_t key
    for p in range(sbytes + dbytes):
        on_seq = p < sbytes
        shift = 8 * (p if on_seq else p - sbytes)
        memset(counts, 0, sizeof(counts))
        for i in range(n):
            key = src[i].skey if on_seq else src[i].dkey
            counts[(key >> shift) & 0xFF] += 1
        total = 0
        for k in range(256):
            c = counts[k]
            counts[k] = total
            total += c
        for i in range(n):
            key = src[i].skey if on_seq else src[i].dkey
            k = <int>((key >> shift) & 0xFF)
            dst[counts[k]] = src[i]
            counts[k] += 1
        swap = src
        src = dst
        dst = swap
    return src


cdef int32_t* sort_expired(Item* items, Py_ssize_t n, void* scratch) noexcept nogil:
    """The slots of items[:n] ordered by (deadline, seq), in `scratch` or over `items`.

    `scratch` has room for n Items. A few items: insertion sort. Otherwise both keys are
    rebased to their minimum; when the deadline range, the seq range and a slot fit in 64
    bits together (the usual case: seconds of deadlines, millions of schedules), one uint64
    per timer, carrying the slot in its low 31 bits, is radix-sorted on the deadline and
    seq bits, 11 bits a pass. Otherwise the Items are radix-sorted on bytes.
    """
    cdef Py_ssize_t i, j
    cdef Item x
    cdef int32_t* out
    if n <= SMALL_SORT:
        for i in range(1, n):
            x = items[i]
            j = i
            while j > 0 and item_less(&x, &items[j - 1]):
                items[j] = items[j - 1]
                j -= 1
            items[j] = x
        out = <int32_t*>scratch
        for i in range(n):
            out[i] = items[i].slot
        return out

    cdef uint64_t dmin = items[0].dkey, dmax = items[0].dkey
    cdef uint64_t smin = items[0].skey, smax = items[0].skey
    for i in range(1, n):
        if items[i].dkey < dmin:
            dmin = items[i].dkey
        if items[i].dkey > dmax:
            dmax = items[i].dkey
        if items[i].skey < smin:
            smin = items[i].skey
        if items[i].skey > smax:
            smax = items[i].skey
    cdef int dbits = bit_length(dmax - dmin), sbits = bit_length(smax - smin)
    cdef uint64_t* keys
    if dbits + sbits <= 64 - SLOT_BITS:
        keys = <uint64_t*>scratch           # n keys, then n more for the sort: 16n <= 24n
        for i in range(n):
            keys[i] = ((items[i].skey - smin) << SLOT_BITS) | <uint64_t>items[i].slot
            if dbits:                       # (a shift by 64 would be undefined)
                keys[i] |= (items[i].dkey - dmin) << (sbits + SLOT_BITS)
        radix_sort_u64(keys, keys + n, n, SLOT_BITS, SLOT_BITS + sbits + dbits)
        out = <int32_t*>items
        for i in range(n):
            out[i] = <int32_t>(keys[i] & SLOT_MASK)
        return out

    for i in range(n):
        items[i].dkey -= dmin
        items[i].skey -= smin
    cdef Item* tmp = <Item*>scratch
    cdef Item* result = radix_sort_items(items, tmp, n, (sbits + 7) // 8, (dbits + 7) // 8)
    out = <int32_t*>(tmp if result == items else items)
    for i in range(n):
        out[i] = result[i].slot
    return out


@cython.final
cdef class TimingWheel:
    """Keyed hierarchical timing wheel (Kafka's TimingWheel + SystemTimer), times in ms.

    schedule(key, deadline_ms) arms or re-arms `key`; cancel(key) disarms it; advance(now)
    returns the keys of every timer with deadline <= now, by (deadline, schedule order);
    next_deadline() says when to call advance() next.
    """

    cdef int64_t _start
    cdef int64_t _clock
    cdef uint64_t _uclock
    cdef uint64_t _tick
    cdef uint64_t _wsize
    cdef int _nlevels
    cdef int _max_levels
    cdef Level _levels[MAX_LEVELS]
    cdef Bucket* _buckets
    cdef int32_t _nbuckets
    cdef int32_t* _heap
    cdef int32_t _heap_len
    cdef int32_t* _popped               # scratch for advance(): due buckets, then their heads
    cdef Entry* _entries
    cdef int32_t* _free
    cdef int32_t _cap
    cdef int32_t _nfree
    cdef uint64_t _seq
    cdef int64_t _due_min
    cdef dict _slots
    cdef list _keys
    cdef list _slot_ints

    def __cinit__(self, start_ms, tick_ms=1, wheel_size=20):
        cdef int64_t start = as_int64(start_ms)
        cdef int64_t tick = as_int64(tick_ms)
        cdef int64_t size = as_int64(wheel_size)
        if tick < 1:
            raise ValueError(f"tick_ms must be at least 1, not {tick}")
        if size < 2 or size > MAX_WHEEL_SIZE:
            raise ValueError(f"wheel_size must be in [2, {MAX_WHEEL_SIZE}], not {size}")
        self._start = start
        self._clock = start
        self._uclock = 0
        self._tick = <uint64_t>tick
        self._wsize = <uint64_t>size
        # Count the wheels that can exist: the top one is the first whose span reaches 2**64.
        cdef int levels = 1
        cdef uint64_t t = self._tick
        while t <= UINT64_MAX // self._wsize:
            t *= self._wsize
            levels += 1
        self._max_levels = levels
        self._nbuckets = <int32_t>(1 + levels * size)
        self._buckets = <Bucket*>PyMem_Malloc(self._nbuckets * sizeof(Bucket))
        self._heap = <int32_t*>PyMem_Malloc(self._nbuckets * sizeof(int32_t))
        self._popped = <int32_t*>PyMem_Malloc(self._nbuckets * sizeof(int32_t))
        if self._buckets == NULL or self._heap == NULL or self._popped == NULL:
            raise MemoryError()
        cdef int32_t b
        for b in range(self._nbuckets):
            self._buckets[b].exp = 0
            self._buckets[b].head = NIL
            self._buckets[b].heap_pos = NIL
            self._buckets[b].count = 0
            self._buckets[b].pad = 0
        self._heap_len = 0
        self._nlevels = 0
        self._add_level()
        self._entries = NULL
        self._free = NULL
        self._cap = 0
        self._nfree = 0
        self._seq = 0
        self._due_min = 0
        self._slots = {}
        self._keys = []
        self._slot_ints = []

    def __dealloc__(self):
        PyMem_Free(self._buckets)
        PyMem_Free(self._heap)
        PyMem_Free(self._popped)
        PyMem_Free(self._entries)
        PyMem_Free(self._free)

    # ---------------------------------------------------------------- wheels and buckets

    cdef void _add_level(self) noexcept:
        # Only called while _nlevels < _max_levels: the top wheel holds every offset.
        cdef int L = self._nlevels
        cdef Level* lv = &self._levels[L]
        lv.tick = self._tick if L == 0 else self._levels[L - 1].tick * self._wsize
        lv.inv = 1.0 / <double>lv.tick
        lv.pad = 0
        if L + 1 == self._max_levels:
            lv.max = UINT64_MAX
            lv.kind = TOP
        else:
            lv.max = lv.tick * self._wsize - 1
            lv.kind = UNIT if lv.tick == 1 else SPLIT
        self._set_level_clock(lv)
        self._nlevels = L + 1

    cdef inline void _set_level_clock(self, Level* lv) noexcept:
        lv.cur = self._uclock - self._uclock % lv.tick
        lv.cur_idx = (lv.cur / lv.tick) % self._wsize

    cdef inline void _link(self, int32_t slot, int32_t b) noexcept:
        cdef Entry* e = &self._entries[slot]
        cdef Bucket* bk = &self._buckets[b]
        e.prev = NIL
        e.next = bk.head
        e.bucket = b
        if bk.head != NIL:
            self._entries[bk.head].prev = slot
        bk.head = slot
        bk.count += 1

    cdef inline void _unlink(self, int32_t slot) noexcept:
        cdef Entry* e = &self._entries[slot]
        cdef int32_t b = e.bucket
        if b == NIL:
            return
        if e.prev != NIL:
            self._entries[e.prev].next = e.next
        else:
            self._buckets[b].head = e.next
        if e.next != NIL:
            self._entries[e.next].prev = e.prev
        self._buckets[b].count -= 1
        e.bucket = NIL

    cdef inline void _heap_place(self, int32_t i, int32_t b) noexcept:
        self._heap[i] = b
        self._buckets[b].heap_pos = i

    cdef void _sift_up(self, int32_t i) noexcept:
        cdef int32_t b = self._heap[i]
        cdef uint64_t exp = self._buckets[b].exp
        cdef int32_t parent
        while i > 0:
            parent = (i - 1) >> 1
            if self._buckets[self._heap[parent]].exp <= exp:
                break
            self._heap_place(i, self._heap[parent])
            i = parent
        self._heap_place(i, b)

    cdef void _sift_down(self, int32_t i) noexcept:
        cdef int32_t n = self._heap_len
        cdef int32_t b = self._heap[i]
        cdef uint64_t exp = self._buckets[b].exp
        cdef int32_t child
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            if (
                child + 1 < n
                and self._buckets[self._heap[child + 1]].exp < self._buckets[self._heap[child]].exp
            ):
                child += 1
            if self._buckets[self._heap[child]].exp >= exp:
                break
            self._heap_place(i, self._heap[child])
            i = child
        self._heap_place(i, b)

    cdef inline void _heap_push(self, int32_t b) noexcept:
        # A bucket is queued at most once, so _heap_len < _nbuckets here.
        cdef int32_t i = self._heap_len
        self._heap_len = i + 1
        self._heap_place(i, b)
        self._sift_up(i)

    cdef inline int32_t _heap_pop(self) noexcept:
        # Only called with _heap_len > 0.
        cdef int32_t b = self._heap[0]
        self._buckets[b].heap_pos = NIL
        self._heap_len -= 1
        if self._heap_len > 0:
            self._heap_place(0, self._heap[self._heap_len])
            self._sift_down(0)
        return b

    cdef inline void _arm(self, int32_t slot) noexcept:
        """Put an unlinked entry into the due list or its wheel's bucket (addTimerTaskEntry)."""
        cdef int64_t d = self._entries[slot].deadline
        if d <= self._clock:
            if self._buckets[DUE].head == NIL or d < self._due_min:
                self._due_min = d
            self._link(slot, DUE)
            return
        # The first wheel that holds u: u - cur_L < span_L. Then q = the bucket's distance
        # from cur_L's bucket, below W, so that (cur_idx + q) mod W = (u // tick_L) % W.
        cdef uint64_t u = <uint64_t>d - <uint64_t>self._start
        cdef int L = 0
        cdef Level* lv = &self._levels[0]
        cdef uint64_t x = u - lv.cur
        while x > lv.max:
            L += 1
            if L == self._nlevels:
                self._add_level()
            lv = &self._levels[L]
            x = u - lv.cur
        cdef uint64_t q
        if lv.kind == UNIT:
            q = x
        elif lv.kind == SPLIT:
            q = quotient(x, lv.tick, lv.inv)
        else:
            q = x / lv.tick
        cdef uint64_t idx = lv.cur_idx + q
        if idx >= self._wsize:
            idx -= self._wsize
        cdef int32_t b = <int32_t>(1 + <uint64_t>L * self._wsize + idx)
        cdef uint64_t exp = u if L == 0 else lv.cur + q * lv.tick
        self._link(slot, b)
        cdef Bucket* bk = &self._buckets[b]
        if bk.heap_pos == NIL:
            bk.exp = exp
            self._heap_push(b)
        elif exp < bk.exp:
            bk.exp = exp
            self._sift_up(bk.heap_pos)

    # ---------------------------------------------------------------- slots

    cdef int _grow(self) except -1:
        cdef int32_t old = self._cap
        if old == INT32_MAX:
            raise OverflowError("TimingWheel cannot hold more than 2**31 - 1 timers")
        cdef int32_t new = FIRST_CAPACITY if old == 0 else (
            INT32_MAX if old > INT32_MAX // 2 else old * 2
        )
        cdef Entry* entries = <Entry*>PyMem_Realloc(self._entries, new * sizeof(Entry))
        if entries == NULL:
            raise MemoryError()
        self._entries = entries
        cdef int32_t* free_slots = <int32_t*>PyMem_Realloc(self._free, new * sizeof(int32_t))
        if free_slots == NULL:
            raise MemoryError()
        self._free = free_slots
        # Lists first: if they fail, nothing else has changed (slice assignment fixes
        # their length whatever an earlier failed attempt left).
        self._keys[old:] = [None] * (new - old)
        self._slot_ints[old:] = range(old, new)
        cdef int32_t s
        for s in range(old, new):
            self._entries[s].bucket = NIL
            self._entries[s].pad = 0
        for s in range(new - old):
            self._free[self._nfree + s] = new - 1 - s
        self._nfree += new - old
        self._cap = new
        return 0

    cdef inline int32_t _slot_of(self, object value) except -2:
        cdef Py_ssize_t slot = value
        if slot < 0 or slot >= self._cap:
            raise RuntimeError("TimingWheel: corrupt slot map")
        return <int32_t>slot

    # ---------------------------------------------------------------- interface

    def schedule(self, object key, object deadline_ms):
        """Arm the timer `key` to fire at deadline_ms; an armed key is re-armed (replaced)."""
        cdef int64_t deadline = as_int64(deadline_ms)
        if self._nfree == 0:
            self._grow()
        cdef int32_t slot = self._free[self._nfree - 1]
        cdef PyObject* fresh = PyList_GET_ITEM(self._slot_ints, slot)
        cdef PyObject* got = PyDict_SetDefault(self._slots, key, <object>fresh)
        cdef PyObject* old
        if got == fresh:
            self._nfree -= 1
            old = PyList_GET_ITEM(self._keys, slot)         # None
            Py_INCREF(key)
            PyList_SET_ITEM(self._keys, slot, key)
            Py_DECREF(<object>old)
        else:
            slot = self._slot_of(<object>got)
            self._unlink(slot)
        cdef Entry* e = &self._entries[slot]
        e.deadline = deadline
        e.seq = self._seq
        self._seq += 1
        self._arm(slot)

    def cancel(self, object key):
        """Disarm; True if it was armed. O(1)."""
        value = self._slots.pop(key, None)
        if value is None:
            return False
        cdef int32_t slot = self._slot_of(value)
        self._unlink(slot)
        self._free[self._nfree] = slot
        self._nfree += 1
        cdef PyObject* old = PyList_GET_ITEM(self._keys, slot)
        Py_INCREF(None)
        PyList_SET_ITEM(self._keys, slot, None)
        Py_DECREF(<object>old)              # the key's last reference may go: wheel is consistent
        return True

    def advance(self, object now_ms):
        """Move time to now_ms; return the keys of every armed timer with deadline <= now_ms.

        They are disarmed and ordered by (deadline, order of (re)scheduling). A now_ms below
        the current time changes nothing: what is due at the current time is returned.
        """
        cdef int64_t now = as_int64(now_ms)
        cdef int L
        if now > self._clock:
            self._clock = now
            self._uclock = <uint64_t>now - <uint64_t>self._start
            for L in range(self._nlevels):
                self._set_level_clock(&self._levels[L])

        # 1. Take every due bucket off the queue (DelayQueue.poll), and the due list.
        cdef int32_t npopped = 0
        cdef int32_t b, i
        cdef Py_ssize_t total = 0
        if self._buckets[DUE].head != NIL:
            self._popped[npopped] = DUE
            npopped += 1
            total += self._buckets[DUE].count
        while self._heap_len > 0 and self._buckets[self._heap[0]].exp <= self._uclock:
            b = self._heap_pop()
            if self._buckets[b].head != NIL:
                self._popped[npopped] = b
                npopped += 1
                total += self._buckets[b].count
        if total == 0:
            return []
        # Room for every timer of those buckets, and as much again for the sort. On
        # failure, queue the buckets again: nothing has changed.
        cdef Item* items = <Item*>PyMem_Malloc(2 * total * sizeof(Item))
        if items == NULL:
            for i in range(npopped):
                if self._popped[i] != DUE:
                    self._heap_push(self._popped[i])
            raise MemoryError()

        # 2. Flush them (Kafka's bucket.flush(addTimerTaskEntry)): expire each timer that
        # is due; put the others back, one wheel down or more. Every list is detached
        # first, so that no timer put back lands in a bucket still to be flushed.
        cdef Py_ssize_t n
        if total * SCAN_RATIO >= self._cap:
            n = self._flush_by_scan(npopped, items, total)
        else:
            n = self._flush_by_lists(npopped, items)
        # (Keeping the GIL: another thread must not see timers half expired.)
        cdef int32_t* order = sort_expired(items, n, items + total)
        try:
            return self._release(order, n)
        finally:
            PyMem_Free(items)

    cdef Py_ssize_t _flush_by_lists(self, int32_t npopped, Item* items) noexcept:
        """Follow the popped buckets' lists; returns the count of expired items."""
        cdef Py_ssize_t n = 0
        cdef int32_t i, b, slot, nxt
        cdef Entry* e
        for i in range(npopped):
            b = self._popped[i]
            self._popped[i] = self._buckets[b].head
            self._buckets[b].head = NIL
            self._buckets[b].count = 0
        for i in range(npopped):
            slot = self._popped[i]
            while slot != NIL:
                e = &self._entries[slot]
                nxt = e.next
                e.bucket = NIL
                if e.deadline <= self._clock:
                    put_expired(&items[n], e, slot)
                    n += 1
                else:
                    self._arm(slot)
                slot = nxt
        return n

    cdef Py_ssize_t _flush_by_scan(self, int32_t npopped, Item* items, Py_ssize_t total) noexcept:
        """As _flush_by_lists, reading the entries in slot order instead of list order.

        When the popped buckets hold a good part of all timers, one sequential pass over
        the entries beats following their lists from one cache miss to the next. Timers to
        put back are kept at the end of `items` and put back after the pass, so that none
        is seen twice. Bucket.pad marks the popped buckets during the pass.
        """
        cdef Py_ssize_t n = 0, back = total
        cdef int32_t i, b, slot
        cdef Entry* e
        for i in range(npopped):
            b = self._popped[i]
            self._buckets[b].head = NIL
            self._buckets[b].count = 0
            self._buckets[b].pad = 1
        for slot in range(self._cap):
            e = &self._entries[slot]
            if e.bucket == NIL or not self._buckets[e.bucket].pad:
                continue
            e.bucket = NIL
            if e.deadline <= self._clock:
                put_expired(&items[n], e, slot)
                n += 1
            else:
                back -= 1
                items[back].slot = slot
        for i in range(npopped):
            self._buckets[self._popped[i]].pad = 0
        for i in range(<int32_t>back, <int32_t>total):
            self._arm(items[i].slot)
        return n

    cdef list _release(self, int32_t* order, Py_ssize_t n):
        """Disarm the expired entries, in order, and return their keys."""
        cdef Py_ssize_t i = 0, j, pos = 0
        cdef int32_t slot
        cdef PyObject* key
        cdef PyObject* value
        cdef PyObject** keys
        cdef list result
        cdef dict rest = None
        try:
            result = PyList_New(n)
            if 2 * n >= len(self._slots):
                # Most keys go: deleting them one by one, in deadline order, costs a cache
                # miss or two each in a big dict; build the dict of the others instead.
                rest = {}
                if n < len(self._slots):
                    while PyDict_Next(self._slots, &pos, &key, &value):
                        if self._entries[self._slot_of(<object>value)].bucket != NIL:
                            rest[<object>key] = <object>value
            keys = PySequence_Fast_ITEMS(self._keys)
            for i in range(n):
                if i + PREFETCH < n:
                    __builtin_prefetch(keys + order[i + PREFETCH])
                slot = order[i]
                key = keys[slot]
                if rest is None:
                    PyDict_DelItem(self._slots, <object>key)
                    keys = PySequence_Fast_ITEMS(self._keys)
                # Move the key's reference from _keys into the result.
                PyList_SET_ITEM(result, i, <object>key)
                Py_INCREF(None)
                keys[slot] = <PyObject*>None
                self._free[self._nfree] = slot
                self._nfree += 1
        except BaseException:
            # Keep the wheel consistent: what was not released fires at the next advance.
            for j in range(i, n):
                self._arm(order[j])
            raise
        if rest is not None:
            self._slots = rest
        return result

    def next_deadline(self):
        """A time never later than the earliest armed deadline at which advance() progresses.

        advance(next_deadline()) expires timers or moves timers down from an overflow wheel;
        None when no timer is armed. (With tick_ms > 1, a cancel can leave a first-wheel
        bucket's expiration early: advance() to it then only recomputes it.)
        """
        if self._buckets[DUE].head != NIL:
            return self._due_min
        cdef int32_t b
        while self._heap_len > 0:
            b = self._heap[0]
            if self._buckets[b].head != NIL:
                return <int64_t>(<uint64_t>self._start + self._buckets[b].exp)
            self._heap_pop()                # emptied by cancel: drop it now
        return None

    def deadline(self, object key):
        """The deadline of the armed timer `key`, or None."""
        value = self._slots.get(key)
        if value is None:
            return None
        return self._entries[self._slot_of(value)].deadline

    def __len__(self):
        return len(self._slots)

    def __contains__(self, object key):
        return key in self._slots

    @property
    def current_ms(self):
        """The wheel's time: start_ms, then the last advance, floored to a tick."""
        return <int64_t>(<uint64_t>self._start + self._levels[0].cur)

    # ---------------------------------------------------------------- checks

    def _check(self):
        """Raise AssertionError unless every invariant of the layout above holds (tests)."""
        cdef int32_t b, slot, prev, count, i, L, idx
        cdef Py_ssize_t armed = 0
        cdef uint64_t u, v
        cdef Entry* e
        if len(self._keys) != self._cap or len(self._slot_ints) != self._cap:
            raise AssertionError("list lengths")
        for b in range(self._nbuckets):
            slot = self._buckets[b].head
            prev = NIL
            count = 0
            while slot != NIL:
                if slot < 0 or slot >= self._cap:
                    raise AssertionError("slot out of range")
                e = &self._entries[slot]
                if e.bucket != b or e.prev != prev:
                    raise AssertionError("links")
                if self._slots.get(self._keys[slot]) is not self._slot_ints[slot]:
                    raise AssertionError("slot map")
                if b == DUE:
                    if e.deadline > self._clock or e.deadline < self._due_min:
                        raise AssertionError("due list")
                else:
                    if e.deadline <= self._clock:
                        raise AssertionError("due timer in a wheel")
                    L = (b - 1) // <int32_t>self._wsize
                    idx = (b - 1) % <int32_t>self._wsize
                    if L >= self._nlevels:
                        raise AssertionError("timer in a wheel not made")
                    u = <uint64_t>e.deadline - <uint64_t>self._start
                    v = u / self._levels[L].tick
                    if <int32_t>(v % self._wsize) != idx:
                        raise AssertionError("bucket index")
                    if self._buckets[b].heap_pos == NIL or self._buckets[b].exp > u:
                        raise AssertionError("bucket expiration")
                    if L > 0 and self._buckets[b].exp != v * self._levels[L].tick:
                        raise AssertionError("overflow bucket expiration")
                prev = slot
                slot = e.next
                count += 1
                armed += 1
            if count != self._buckets[b].count:
                raise AssertionError("bucket count")
        if armed != len(self._slots) or armed + self._nfree != self._cap:
            raise AssertionError("slot accounting")
        for i in range(self._nfree):
            slot = self._free[i]
            if self._entries[slot].bucket != NIL or self._keys[slot] is not None:
                raise AssertionError("free slot in use")
        for i in range(self._heap_len):
            b = self._heap[i]
            if b <= DUE or b >= self._nbuckets or self._buckets[b].heap_pos != i:
                raise AssertionError("heap position")
            if self._buckets[b].exp <= self._uclock:
                raise AssertionError("due bucket left in the queue")
            if i > 0 and self._buckets[self._heap[(i - 1) >> 1]].exp > self._buckets[b].exp:
                raise AssertionError("heap order")
