# cython: language_level=3
"""The lone-heartbeat reactor: idle connections' sockets on one epoll descriptor.

Twin: fastcoord/server/reactor.py (select.epoll and the twin of answer_heartbeats), with
the same interface and the same hand-overs; differential tests drive both over socket
pairs. The Trio side (fastcoord/server/parking.py) waits on `fileno()` and calls `drain`.

A parked socket belongs to a connection that owes nothing. Its reads are served in two
steps. The first is C without the GIL, `serve_ready`: it takes the sockets that are ready
(epoll_wait, each socket armed for one event at a time), reads each once, and when the read
holds only complete, regular Heartbeat frames (v0-4, dynamic members, nothing after their
messages) that the member table answers alone, it looks their ids up in the table's C
index and writes their answers with one write; that is all a lone heartbeat costs. Every
other read is queued, with its bytes, for the second step, `drain`, on the Trio side, which
answers the run of heartbeats that begins it as the connection would (answer_run: irregular
frames, ConsumerGroupHeartbeats, trailing bytes) and writes, or hands the socket back to its
connection, to be handled the ordinary way:

    (connection, answers, rest, more, error, trailing)

`answers`: bytes of answers the connection must send before any other (those of the run of
heartbeats that began the read, or what a write did not take); `rest`: the bytes read after
that run; `more`: the read filled the buffer, so more bytes may wait in the socket;
`error`: 0, ENDED (the client closed its end) or the errno of a failed read or write;
`trailing`: (version, count) of each answered heartbeat with bytes after its message, for
the connection's log, or None.

Without `start`, `drain` runs the first step itself (epoll_wait with timeout 0) and serves
the sockets that were ready and no more: it never blocks. After `start(table, offset)`, a
thread of the reactor's own runs the first step, blocked in epoll_wait, and `fileno()` is an
eventfd readable when reads wait for `drain`. The thread never takes the GIL: what it shares
with the Trio side (which sockets are parked, the queue, the table to use) is guarded by the
reactor's mutex, which it holds while it serves one socket, so that once `remove(fd)` has
returned it never reads or writes that descriptor again; the member table's columns are
guarded by the table's own lock (taken inside the reactor's).
"""

cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.errno cimport EAGAIN, EINTR, ENOMEM, errno  # EWOULDBLOCK is EAGAIN where epoll is
from libc.math cimport INFINITY
from libc.stdlib cimport malloc, realloc
from libc.string cimport memset, strerror
from posix.time cimport CLOCK_MONOTONIC, CLOCK_REALTIME, clock_gettime, timespec
from posix.unistd cimport close, read, write

from fastcoord.protocol import framing
from fastcoord.protocol.errors import ProtocolError

include "cursor.pxi"

cdef extern from "debug.h":
    int FASTCOORD_DEBUG

include "epoll.pxi"
include "table_core.pxi"

cdef extern from "<sys/socket.h>" nogil:
    ssize_t recv(int fd, void* buf, size_t n, int flags)
    ssize_t send(int fd, const void* buf, size_t n, int flags)

    enum:
        MSG_NOSIGNAL

cdef extern from "<sys/eventfd.h>" nogil:
    int eventfd(unsigned int initval, int flags)

    enum:
        EFD_CLOEXEC
        EFD_NONBLOCK

cdef extern from "<signal.h>" nogil:
    ctypedef struct sigset_t:
        pass
    int sigfillset(sigset_t* s)

cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t
    int pthread_create(pthread_t* thread, void* attr, void* (*start)(void*) noexcept nogil,
                       void* arg)
    int pthread_join(pthread_t thread, void** result)
    int pthread_sigmask(int how, const sigset_t* s, sigset_t* old)

    enum:
        SIG_BLOCK

cdef object _decode_generic = framing.decode_request

include "heartbeat.pxi"

cdef enum:
    READ_CHUNK = 65536  # as much as a connection reads at a time
    MAX_EVENTS = 256  # sockets a pass takes; the rest stay ready for the next
    MAX_RUN = 64  # heartbeats the first step answers in one read; more go to drain
    ENDED_ = -1
    # What a descriptor is to the reactor.
    IDLE = 0  # not parked
    ARMED = 1  # parked, armed for one event: the first step may serve it
    QUEUED = 2  # parked, its read queued for drain: neither step touches it meanwhile

cdef uint64_t STOP_KEY = 0xFFFFFFFFFFFFFFFFULL

ENDED = ENDED_
READ_SIZE = READ_CHUNK


cdef inline object _os_error(int err):
    return OSError(err, strerror(err).decode(errors="replace"))


cdef struct Handed:
    # A read (process: for drain to answer) or what a write did not take (not process).
    int fd
    uint32_t gen
    int error
    int more
    int process
    char* data
    Py_ssize_t size


cdef struct Loop:
    # Everything the first step reads and writes: it runs without the GIL, so nothing here
    # is a Python object. `mutex` guards all of it but the buffers, which only the step
    # running (the thread, or drain without it) uses.
    pthread_mutex_t mutex
    int epfd
    int wake_fd  # eventfd: reads wait for drain (the thread's)
    int stop_fd  # eventfd: the thread stops
    Py_ssize_t max_size  # socket.request.max.bytes
    Py_ssize_t capacity  # entries of state, gen and moved
    uint8_t* state  # fd -> IDLE, ARMED or QUEUED
    uint32_t* gen  # fd -> parked how many times: events of an earlier park are stale
    double* moved  # fd -> when bytes last moved on it while parked (Trio's clock)
    Handed* queue  # a place for every socket parked (reserved by add and drain)
    Py_ssize_t queued
    Py_ssize_t queue_capacity
    Py_ssize_t fail_copies  # for tests: copies to fail as if memory had run out
    TableCore* table  # NULL: the first step answers nothing
    bint threaded
    double offset  # Trio's clock minus CLOCK_MONOTONIC, for the thread's stamps
    double fixed_now  # without the thread: drain's `now` and `now_ms`
    int64_t fixed_now_ms
    int failed  # an errno the first step met (memory, epoll_wait): drain raises it
    int64_t answered  # heartbeats the first step answered, not yet taken by take_stats
    int64_t answered_ns
    uint8_t* inbuf
    char* outbuf
    epoll_event* events
    Span* spans


@cython.profile(False)
@cython.linetrace(False)
cdef inline int64_t _ns(int clock) noexcept nogil:
    cdef timespec ts
    clock_gettime(clock, &ts)
    return <int64_t>ts.tv_sec * 1000000000 + ts.tv_nsec


@cython.profile(False)
@cython.linetrace(False)
cdef inline int _rearm(Loop* s, int fd) noexcept nogil:
    # The mutex is held.
    cdef epoll_event event
    event.events = EPOLLIN | EPOLLONESHOT
    event.data.u64 = <uint64_t>fd | (<uint64_t>s.gen[fd] << 32)
    s.state[fd] = ARMED
    return epoll_ctl(s.epfd, EPOLL_CTL_MOD, fd, &event)


@cython.profile(False)
@cython.linetrace(False)
cdef inline void _queue(
    Loop* s, int fd, int error, int more, int process, const char* data, Py_ssize_t size
) noexcept nogil:
    # The mutex is held. The descriptor is the Trio side's until drain has seen it. The
    # queue has a place for it: add and drain reserve one for every socket parked, and a
    # socket is queued once until drain has seen it.
    cdef char* copy = NULL
    if s.queued == s.queue_capacity:
        s.failed = ENOMEM  # not reached: the places are reserved; drain raises it
        return
    if size > 0:
        if s.fail_copies > 0:
            s.fail_copies -= 1
        else:
            copy = <char*>malloc(size)
        if copy == NULL:
            # The bytes are gone from the socket and cannot be kept: the connection is
            # handed back with the error, and closes, rather than reading on from the
            # middle of a request.
            error = ENOMEM
            more = process = False
            size = 0
        else:
            memcpy(copy, data, size)
    s.queue[s.queued].fd = fd
    s.queue[s.queued].gen = s.gen[fd]
    s.queue[s.queued].error = error
    s.queue[s.queued].more = more
    s.queue[s.queued].process = process
    s.queue[s.queued].data = copy
    s.queue[s.queued].size = size
    s.queued += 1
    s.state[fd] = QUEUED
    cdef uint64_t one = 1
    if s.queued == 1 and s.threaded:
        write(s.wake_fd, &one, 8)


@cython.profile(False)
@cython.linetrace(False)
cdef Py_ssize_t answer_lone(Loop* s, Py_ssize_t got, int64_t now_ms) noexcept nogil:
    """The answers to the read in s.inbuf, written at s.outbuf, if it holds only regular
    heartbeats the table answers alone: their size, else -1 (nothing changed: drain
    decides). The table's lock is held across the lookups and the heartbeats, so that the
    answers are those of one state of the table."""
    cdef Py_ssize_t pos = 0, size, count = 0, i
    cdef const uint8_t* p
    cdef TableCore* t = s.table
    while pos < got:
        if got - pos < 4 or count == MAX_RUN:
            return -1
        p = s.inbuf + pos
        size = _int32(p)
        if size < 2 or size > s.max_size or size > got - pos - 4:
            return -1
        if not parse_heartbeat(p + 4, size, &s.spans[count]):
            return -1
        count += 1
        pos += 4 + size
    if count == 0:
        return -1
    pthread_mutex_lock(&t.lock)
    for i in range(count):
        s.spans[i].slot = core_find(
            t, s.spans[i].group_id, s.spans[i].group_size, s.spans[i].member_id,
            s.spans[i].member_size,
        )
        if s.spans[i].slot < 0:
            pthread_mutex_unlock(&t.lock)
            return -1
        if core_heartbeat(t, s.spans[i].slot, s.spans[i].generation, now_ms, False) < 0:
            pthread_mutex_unlock(&t.lock)
            return -1
    for i in range(count):
        s.spans[i].code = core_heartbeat(t, s.spans[i].slot, s.spans[i].generation, now_ms, True)
    pthread_mutex_unlock(&t.lock)
    cdef char* q = s.outbuf
    for i in range(count):
        q = _write_response(q, s.spans[i].version, s.spans[i].correlation_id, 0,
                            <int16_t>s.spans[i].code)
    s.answered += count
    return q - s.outbuf


@cython.profile(False)
@cython.linetrace(False)
cdef inline int _send(int fd, const char* data, ssize_t size, ssize_t* sent) noexcept nogil:
    """Send without blocking: the bytes the socket took in sent[0], and the error that ends
    the connection (0 when the socket was only full)."""
    cdef ssize_t n = send(fd, data, size, MSG_NOSIGNAL)
    if n >= 0:
        sent[0] = n
        return 0
    sent[0] = 0
    cdef int err = errno
    return 0 if err == EAGAIN or err == EINTR else err


@cython.profile(False)
@cython.linetrace(False)
cdef void serve_fd(Loop* s, uint64_t key, int64_t now_ms, double now) noexcept nogil:
    """The first step for one ready descriptor. The mutex is held."""
    cdef int fd = <int>(key & <uint64_t>0xFFFFFFFFU)
    cdef int err
    cdef ssize_t got, sent, written = -1
    if fd >= s.capacity or s.state[fd] != ARMED or s.gen[fd] != <uint32_t>(key >> 32):
        return  # removed, or parked again since the event (it is armed afresh)
    got = recv(fd, s.inbuf, READ_CHUNK, 0)
    if got < 0:
        err = errno
        if err == EAGAIN or err == EINTR:
            _rearm(s, fd)
        else:
            _queue(s, fd, err, False, False, NULL, 0)
        return
    if got == 0:
        _queue(s, fd, ENDED_, False, False, NULL, 0)
        return
    if s.table != NULL:
        written = answer_lone(s, got, now_ms)
    if written < 0:
        _queue(s, fd, 0, got == READ_CHUNK, True, <const char*>s.inbuf, got)
        return
    err = _send(fd, s.outbuf, written, &sent)
    if sent == written:
        s.moved[fd] = now
        _rearm(s, fd)
        return
    # The client is not reading (or has gone): the answers go to its connection, whose
    # writer waits for the socket.
    _queue(s, fd, err, got == READ_CHUNK, False, s.outbuf + sent, written - sent)


@cython.profile(False)
@cython.linetrace(False)
cdef int serve_ready(Loop* s, int timeout) noexcept nogil:
    """One pass of the first step: the ready descriptors (waiting up to `timeout` ms for
    one); -1 when told to stop, else 0."""
    cdef int ready = epoll_wait(s.epfd, s.events, MAX_EVENTS, timeout)
    cdef int i
    cdef uint64_t key
    cdef int64_t now_ms, answered
    cdef int64_t started = 0  # read only when threaded, set then (the compiler cannot tell)
    cdef double now
    if ready < 0:
        if errno != EINTR:
            pthread_mutex_lock(&s.mutex)
            s.failed = errno
            pthread_mutex_unlock(&s.mutex)
            return -1
        return 0
    for i in range(ready):
        key = s.events[i].data.u64
        if key == STOP_KEY:
            return -1
        pthread_mutex_lock(&s.mutex)
        if s.threaded:
            started = _ns(CLOCK_MONOTONIC)
            now_ms = _ns(CLOCK_REALTIME) // 1000000  # the server's clock (app.now_ms)
            now = s.offset + started * 1e-9
        else:
            now_ms = s.fixed_now_ms
            now = s.fixed_now
        answered = s.answered
        serve_fd(s, key, now_ms, now)
        if s.threaded and s.answered != answered:
            s.answered_ns += _ns(CLOCK_MONOTONIC) - started
        pthread_mutex_unlock(&s.mutex)
    return 0


@cython.profile(False)
@cython.linetrace(False)
cdef void* run_thread(void* arg) noexcept nogil:
    cdef Loop* s = <Loop*>arg
    cdef sigset_t signals
    sigfillset(&signals)
    pthread_sigmask(SIG_BLOCK, &signals, NULL)  # signals are the main thread's
    cdef uint64_t one = 1
    while serve_ready(s, -1) == 0:
        pass
    pthread_mutex_lock(&s.mutex)
    if s.failed:
        write(s.wake_fd, &one, 8)  # drain raises it
    pthread_mutex_unlock(&s.mutex)
    return NULL


cdef int _reserve(Handed** queue, Py_ssize_t* capacity, Py_ssize_t need) noexcept:
    """Grow *queue to at least `need` places (doubling); 0, or ENOMEM with it unchanged."""
    if capacity[0] >= need:
        return 0
    cdef Py_ssize_t places = max(need, capacity[0] * 2, 16)
    cdef Handed* grown = <Handed*>realloc(queue[0], places * sizeof(Handed))
    if grown == NULL:
        return ENOMEM
    queue[0] = grown
    capacity[0] = places
    return 0


@cython.final
cdef class Reactor:
    cdef Loop* _s
    cdef list _parked  # fd -> the connection parked on it, or None
    cdef Py_ssize_t _count  # connections parked
    cdef object _table  # the table the first step answers from (kept alive), or None
    cdef bint _running  # the thread runs
    cdef pthread_t _thread
    cdef char* _out  # drain's answers
    cdef public Py_ssize_t drained  # heartbeats the last drain answered itself (answer_run)
    cdef dict _pending  # fd -> what the thread read or left unsent before remove (take_pending)
    cdef Handed* _spare  # the queue drain took last, emptied: the thread's next one
    cdef Py_ssize_t _spare_capacity

    def __cinit__(self, Py_ssize_t max_size):
        self._parked = []
        self._pending = {}
        self._s = <Loop*>calloc(1, sizeof(Loop))
        if self._s == NULL:
            raise MemoryError()
        cdef Loop* s = self._s
        pthread_mutex_init(&s.mutex, NULL)
        s.epfd = s.wake_fd = s.stop_fd = -1
        s.max_size = max_size
        s.inbuf = <uint8_t*>PyMem_Malloc(READ_CHUNK)
        s.outbuf = <char*>PyMem_Malloc(READ_CHUNK + MAX_RESPONSE)
        s.events = <epoll_event*>PyMem_Malloc(MAX_EVENTS * sizeof(epoll_event))
        s.spans = <Span*>PyMem_Malloc(MAX_RUN * sizeof(Span))
        self._out = <char*>PyMem_Malloc(READ_CHUNK + MAX_RESPONSE)
        if s.inbuf == NULL or s.outbuf == NULL or s.events == NULL or s.spans == NULL or self._out == NULL:
            raise MemoryError()
        s.epfd = epoll_create1(EPOLL_CLOEXEC)
        if s.epfd < 0:
            raise _os_error(errno)
        s.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)
        if s.wake_fd < 0:
            raise _os_error(errno)

    def __dealloc__(self):
        if self._s == NULL:
            return
        self._stop()
        cdef Loop* s = self._s
        cdef Py_ssize_t i
        for fd in (s.epfd, s.wake_fd, s.stop_fd):
            if fd >= 0:
                close(fd)
        for i in range(s.queued):
            free(s.queue[i].data)
        free(s.queue)
        free(self._spare)
        PyMem_Free(s.inbuf)
        PyMem_Free(s.outbuf)
        PyMem_Free(s.events)
        PyMem_Free(s.spans)
        PyMem_Free(self._out)
        PyMem_Free(s.state)
        PyMem_Free(s.gen)
        PyMem_Free(s.moved)
        pthread_mutex_destroy(&s.mutex)
        free(s)

    def fileno(self):
        """Readable when drain has work: the epoll descriptor, or with the thread its eventfd."""
        if self._s.epfd < 0:
            raise ValueError("the reactor is closed")
        return self._s.wake_fd if self._running else self._s.epfd

    def __len__(self):
        return self._count

    @property
    def threaded(self):
        """Whether the thread serves the parked sockets (see start)."""
        return self._running

    def start(self, table, double offset):
        """Serve the parked sockets from a thread of the reactor's own, answering from
        `table` (see serve); `offset` is Trio's clock minus time.monotonic(), for the times
        bytes move. fileno() is then the eventfd drain waits on."""
        cdef Loop* s = self._s
        if s.epfd < 0:
            raise ValueError("the reactor is closed")
        if self._running:
            raise ValueError("the reactor's thread runs already")
        self.serve(table)
        s.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)
        if s.stop_fd < 0:
            raise _os_error(errno)
        cdef epoll_event event
        event.events = EPOLLIN
        event.data.u64 = STOP_KEY
        if epoll_ctl(s.epfd, EPOLL_CTL_ADD, s.stop_fd, &event) < 0:
            raise _os_error(errno)
        s.offset = offset
        s.threaded = True
        cdef int err = pthread_create(&self._thread, NULL, run_thread, <void*>s)
        if err:
            s.threaded = False
            raise _os_error(err)
        self._running = True

    cdef void _stop(self) noexcept:
        cdef uint64_t one = 1
        if not self._running:
            return
        write(self._s.stop_fd, &one, 8)
        with nogil:
            pthread_join(self._thread, NULL)
        self._running = False
        self._s.threaded = False

    def stop(self):
        """Stop the thread (nothing if none runs): drain serves the sockets from then on,
        and fileno() is the epoll descriptor again."""
        self._stop()

    def serve(self, table):
        """The member table the first step answers from, or None (it then answers nothing
        and every read goes to drain): what Server.heartbeat_table() says, given again each
        time it may have changed. A table without C columns (the twin) answers in drain."""
        cdef size_t address = 0
        if table is not None:
            core = getattr(table, "_core_address", None)
            if core is not None:
                address = core()
        pthread_mutex_lock(&self._s.mutex)
        self._s.table = <TableCore*>address
        pthread_mutex_unlock(&self._s.mutex)
        self._table = table  # after the thread lets go of the table before it

    def take_stats(self):
        """(heartbeats answered by the thread, ns it took them) since the last call."""
        pthread_mutex_lock(&self._s.mutex)
        answered, ns = self._s.answered, self._s.answered_ns
        self._s.answered = self._s.answered_ns = 0
        pthread_mutex_unlock(&self._s.mutex)
        return answered, ns

    def close(self):
        """Stop the thread and close the descriptors. Sockets still parked are forgotten,
        not closed."""
        self._stop()
        cdef Loop* s = self._s
        pthread_mutex_lock(&s.mutex)
        for fd in (s.epfd, s.wake_fd, s.stop_fd):
            if fd >= 0:
                close(fd)
        s.epfd = s.wake_fd = s.stop_fd = -1
        for fd in range(s.capacity):
            s.state[fd] = IDLE
            self._parked[fd] = None
        pthread_mutex_unlock(&s.mutex)
        self._pending.clear()
        self._count = 0

    cdef int _grow(self, Py_ssize_t fd) except -1:
        # The mutex is held.
        cdef Loop* s = self._s
        cdef Py_ssize_t capacity = max(64, s.capacity)
        while capacity <= fd:
            capacity *= 2
        cdef double* moved = <double*>PyMem_Realloc(s.moved, capacity * sizeof(double))
        if moved == NULL:
            raise MemoryError()
        s.moved = moved
        cdef uint8_t* state = <uint8_t*>PyMem_Realloc(s.state, capacity)
        if state == NULL:
            raise MemoryError()
        s.state = state
        cdef uint32_t* gen = <uint32_t*>PyMem_Realloc(s.gen, capacity * sizeof(uint32_t))
        if gen == NULL:
            raise MemoryError()
        s.gen = gen
        memset(s.state + s.capacity, 0, capacity - s.capacity)
        memset(s.gen + s.capacity, 0, (capacity - s.capacity) * sizeof(uint32_t))
        self._parked.extend([None] * (capacity - s.capacity))
        s.capacity = capacity
        return 0

    def add(self, int fd, conn not None):
        """Park `conn` on its socket `fd` (non-blocking): its reads are ours until handed back."""
        cdef Loop* s = self._s
        if s.epfd < 0:
            raise ValueError("the reactor is closed")
        if fd < 0:
            raise ValueError(f"bad descriptor {fd}")
        if fd < s.capacity and self._parked[fd] is not None:
            raise ValueError(f"descriptor {fd} is parked already")
        self._pending.pop(fd, None)  # never taken: its connection has gone
        cdef epoll_event event
        cdef int err = 0
        pthread_mutex_lock(&s.mutex)
        try:
            if fd >= s.capacity:
                self._grow(fd)
            # A place in the queue for this socket beside every other parked, so that the
            # thread never allocates one.
            err = _reserve(&s.queue, &s.queue_capacity, s.queued + self._count + 1)
            if err:
                raise _os_error(err)
            s.gen[fd] += 1
            event.events = EPOLLIN | EPOLLONESHOT
            event.data.u64 = <uint64_t>fd | (<uint64_t>s.gen[fd] << 32)
            if epoll_ctl(s.epfd, EPOLL_CTL_ADD, fd, &event) < 0:
                err = errno
            else:
                s.state[fd] = ARMED
                s.moved[fd] = -INFINITY
        finally:
            pthread_mutex_unlock(&s.mutex)
        if err:
            raise _os_error(err)
        self._parked[fd] = conn
        self._count += 1

    def remove(self, int fd):
        """Take `fd` off the descriptor (nothing if it is not parked); returns when bytes
        last moved on it while it was parked, or -inf. Once it returns, the thread never
        touches `fd` again. What the thread had read from it (or left unsent) for drain is
        kept for take_pending."""
        cdef Loop* s = self._s
        if fd < 0 or fd >= s.capacity or self._parked[fd] is None:
            return -INFINITY
        cdef Py_ssize_t i
        pthread_mutex_lock(&s.mutex)
        if s.state[fd] == QUEUED:
            for i in range(s.queued):
                if s.queue[i].fd == fd and s.queue[i].gen == s.gen[fd]:
                    data = PyBytes_FromStringAndSize(s.queue[i].data, s.queue[i].size)
                    self._pending[fd] = (
                        b"" if s.queue[i].process else data,
                        data if s.queue[i].process else b"",
                        bool(s.queue[i].more), s.queue[i].error,
                    )
                    s.queue[i].fd = -1  # drain skips it
                    break
        pthread_mutex_unlock(&s.mutex)
        self._forget(fd)
        return s.moved[fd]

    def take_pending(self, int fd):
        """After remove(fd): (answers, rest, more, error) the thread had taken from the
        socket for drain and drain had not handed over yet, or None. The bytes are gone
        from the socket: the connection must take them first (rest is to be handled whole)."""
        return self._pending.pop(fd, None)

    def _fail_copies(self, Py_ssize_t count):
        """For tests: the next `count` reads the first step copies for drain fail to be
        copied, as when memory runs out."""
        pthread_mutex_lock(&self._s.mutex)
        self._s.fail_copies = count
        pthread_mutex_unlock(&self._s.mutex)

    cdef inline void _forget(self, int fd) noexcept:
        cdef Loop* s = self._s
        pthread_mutex_lock(&s.mutex)
        s.state[fd] = IDLE
        # Failure means the registration is gone already (the socket closed behind us).
        epoll_ctl(s.epfd, EPOLL_CTL_DEL, fd, NULL)
        pthread_mutex_unlock(&s.mutex)
        self._parked[fd] = None
        self._count -= 1

    cdef inline void _hand(
        self, list handed, int fd, object conn, object answers, object rest, bint more,
        int error, object trailing,
    ) noexcept:
        self._forget(fd)
        handed.append((conn, answers, rest, more, error, trailing))

    def serve_ready(self, table, int64_t now_ms, double now):
        """One pass of the first step on the calling thread (without the thread; for drain
        and the performance gate): the ready sockets' lone heartbeats answered from `table`,
        the rest queued for drain. Returns the heartbeats answered."""
        cdef Loop* s = self._s
        if s.epfd < 0:
            raise ValueError("the reactor is closed")
        if self._running:
            raise ValueError("the reactor's thread serves the sockets")
        self.serve(table)
        s.fixed_now_ms = now_ms
        s.fixed_now = now
        cdef int64_t answered = s.answered
        with nogil:
            serve_ready(s, 0)
        answered = s.answered - answered
        s.answered = 0
        return answered

    def drain(self, table, int64_t now_ms, double now):
        """Serve the reads that wait (without the thread: the parked sockets that are ready
        first); returns the hand-overs (see the module's docstring). `table` is the member
        table when it may answer heartbeats alone, else None (every read is then handed
        over); `now_ms` is the coordinator's clock, `now` Trio's, stamped on each socket
        served here as the time bytes last moved."""
        cdef Loop* s = self._s
        if s.epfd < 0:
            raise ValueError("the reactor is closed")
        cdef uint64_t count
        if self._running:
            self.serve(table)
            read(s.wake_fd, &count, 8)  # before the queue is taken: a later read wakes us
        else:
            self.serve_ready(table, now_ms, now)
        # The thread's next queue, with a place for every socket parked: allocated here,
        # where failing raises, before anything is taken.
        cdef int err = _reserve(&self._spare, &self._spare_capacity, self._count + 1)
        if err:
            raise _os_error(err)
        pthread_mutex_lock(&s.mutex)
        cdef Handed* queue = s.queue
        cdef Py_ssize_t queued = s.queued
        cdef Py_ssize_t capacity = s.queue_capacity
        cdef int failed = s.failed
        s.queue = self._spare
        s.queue_capacity = self._spare_capacity
        s.queued = 0
        s.failed = 0
        pthread_mutex_unlock(&s.mutex)
        self._spare = NULL
        self._spare_capacity = 0
        try:
            if failed:
                raise _os_error(failed)
            return self._handle(queue, queued, table, now_ms, now)
        finally:
            for i in range(queued):
                free(queue[i].data)
            self._spare = queue
            self._spare_capacity = capacity

    cdef list _handle(self, Handed* queue, Py_ssize_t queued, table, int64_t now_ms, double now):
        cdef Loop* s = self._s
        cdef list handed = []
        cdef list trailing = []
        cdef int fd, err
        cdef ssize_t got, sent
        cdef Py_ssize_t pos, written, count, i
        cdef const uint8_t* data
        cdef TableCore* core = NULL
        address = getattr(table, "_core_address", None)
        if address is not None:
            core = <TableCore*><size_t>address()
        self.drained = 0
        for i in range(queued):
            fd = queue[i].fd
            if fd < 0 or fd >= s.capacity or s.state[fd] != QUEUED or s.gen[fd] != queue[i].gen:
                continue  # removed since (a cancelled park)
            conn = self._parked[fd]
            if not queue[i].process:
                self._hand(
                    handed, fd, conn, PyBytes_FromStringAndSize(queue[i].data, queue[i].size),
                    b"", queue[i].more, queue[i].error, None,
                )
                continue
            data = <const uint8_t*>queue[i].data
            got = queue[i].size
            written = 0
            count = 0
            pos = 0
            if table is not None:
                try:
                    pos = answer_run(
                        data, 0, got, s.max_size, table, core, now_ms, self._out,
                        READ_CHUNK + MAX_RESPONSE, &written, &count, trailing,
                        getattr(conn, "client_host", ""),
                    )
                except Exception:
                    # A bug: the connection handles the read itself, meets it again, and
                    # is closed with its traceback; the other parked sockets are served.
                    pos = written = count = 0
                    del trailing[:]
            self.drained += count
            if pos < got or trailing:
                self._hand(
                    handed, fd, conn, PyBytes_FromStringAndSize(self._out, written),
                    PyBytes_FromStringAndSize(<const char*>data + pos, got - pos),
                    queue[i].more, 0, trailing if trailing else None,
                )
                if trailing:
                    trailing = []
                continue
            err = _send(fd, self._out, written, &sent)
            if sent == written:
                pthread_mutex_lock(&s.mutex)
                s.moved[fd] = now
                _rearm(s, fd)
                pthread_mutex_unlock(&s.mutex)
                continue
            self._hand(
                handed, fd, conn, PyBytes_FromStringAndSize(self._out + sent, written - sent),
                b"", queue[i].more, err, None,
            )
        return handed
