# cython: language_level=3
"""The lone-heartbeat reactor: idle connections' sockets on one epoll descriptor.

Twin: fastcoord/server/reactor.py (select.epoll and the twin of answer_heartbeats), with
the same interface and the same hand-overs; differential tests drive both over socket
pairs. The Trio side (fastcoord/server/parking.py) waits on `fileno()` and calls `drain`.

A parked socket belongs to a connection that owes nothing. `drain` takes the sockets that
are ready (epoll_wait with timeout 0, level-triggered, at most MAX_EVENTS a call), reads
each once, and when the read holds only complete Heartbeat frames that the member table
answers alone, with no bytes after their messages, writes their answers with one write;
that is all a lone heartbeat costs. Anything else, the socket leaves the descriptor and is
handed back to its connection, to be handled the ordinary way:

    (connection, answers, rest, more, error, trailing)

`answers`: bytes of answers the connection must send before any other (those of the run of
heartbeats that began the read, or what a write did not take); `rest`: the bytes read after
that run; `more`: the read filled the buffer, so more bytes may wait in the socket;
`error`: 0, ENDED (the client closed its end) or the errno of a failed read or write;
`trailing`: (version, count) of each answered heartbeat with bytes after its message, for
the connection's log, or None. Nothing here ever blocks or waits: every call returns
at once, with the sockets that were ready and no more.
"""

cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.errno cimport EAGAIN, EINTR, errno  # EWOULDBLOCK is EAGAIN where epoll is
from libc.math cimport INFINITY
from libc.string cimport strerror
from posix.unistd cimport close

from fastcoord.protocol import framing
from fastcoord.protocol.errors import ProtocolError

include "cursor.pxi"

cdef extern from "debug.h":
    int FASTCOORD_DEBUG

include "epoll.pxi"

cdef extern from "<sys/socket.h>" nogil:
    ssize_t recv(int fd, void* buf, size_t n, int flags)
    ssize_t send(int fd, const void* buf, size_t n, int flags)

    enum:
        MSG_NOSIGNAL

cdef object _decode_generic = framing.decode_request

include "heartbeat.pxi"

cdef enum:
    READ_CHUNK = 65536  # as much as a connection reads at a time
    MAX_EVENTS = 256  # sockets a drain takes; the rest stay ready for the next
    ENDED_ = -1

ENDED = ENDED_
READ_SIZE = READ_CHUNK


cdef inline object _os_error(int err):
    return OSError(err, strerror(err).decode(errors="replace"))


@cython.final
cdef class Reactor:
    cdef int _epfd
    cdef Py_ssize_t _max_size  # socket.request.max.bytes
    cdef list _parked  # fd -> the connection parked on it, or None
    cdef double* _moved  # fd -> when bytes last moved on it while parked (Trio's clock)
    cdef Py_ssize_t _capacity  # len(self._parked), and the entries of self._moved
    cdef Py_ssize_t _count  # connections parked
    cdef uint8_t* _in
    cdef char* _out
    cdef epoll_event* _events

    def __cinit__(self, Py_ssize_t max_size):
        self._epfd = -1
        self._max_size = max_size
        self._parked = []
        self._in = <uint8_t*>PyMem_Malloc(READ_CHUNK)
        self._out = <char*>PyMem_Malloc(READ_CHUNK + MAX_RESPONSE)
        self._events = <epoll_event*>PyMem_Malloc(MAX_EVENTS * sizeof(epoll_event))
        if self._in == NULL or self._out == NULL or self._events == NULL:
            raise MemoryError()
        self._epfd = epoll_create1(EPOLL_CLOEXEC)
        if self._epfd < 0:
            raise _os_error(errno)

    def __dealloc__(self):
        if self._epfd >= 0:
            close(self._epfd)
        PyMem_Free(self._in)
        PyMem_Free(self._out)
        PyMem_Free(self._events)
        PyMem_Free(self._moved)

    def fileno(self):
        """The epoll descriptor: readable when a parked socket is."""
        if self._epfd < 0:
            raise ValueError("the reactor is closed")
        return self._epfd

    def __len__(self):
        return self._count

    def close(self):
        """Close the descriptor. Sockets still parked are forgotten, not closed."""
        if self._epfd >= 0:
            close(self._epfd)
            self._epfd = -1
        for fd in range(self._capacity):
            self._parked[fd] = None
        self._count = 0

    cdef int _grow(self, Py_ssize_t fd) except -1:
        cdef Py_ssize_t capacity = max(64, self._capacity)
        while capacity <= fd:
            capacity *= 2
        cdef double* moved = <double*>PyMem_Realloc(self._moved, capacity * sizeof(double))
        if moved == NULL:
            raise MemoryError()
        self._moved = moved
        self._parked.extend([None] * (capacity - self._capacity))
        self._capacity = capacity
        return 0

    def add(self, int fd, conn not None):
        """Park `conn` on its socket `fd` (non-blocking): its reads are ours until handed back."""
        if self._epfd < 0:
            raise ValueError("the reactor is closed")
        if fd < 0:
            raise ValueError(f"bad descriptor {fd}")
        if fd >= self._capacity:
            self._grow(fd)
        if self._parked[fd] is not None:
            raise ValueError(f"descriptor {fd} is parked already")
        cdef epoll_event event
        event.events = EPOLLIN
        event.data.u64 = <uint64_t>fd
        if epoll_ctl(self._epfd, EPOLL_CTL_ADD, fd, &event) < 0:
            raise _os_error(errno)
        self._parked[fd] = conn
        self._moved[fd] = -INFINITY
        self._count += 1

    def remove(self, int fd):
        """Take `fd` off the descriptor (nothing if it is not parked); returns when bytes
        last moved on it while it was parked, or -inf."""
        if fd < 0 or fd >= self._capacity or self._parked[fd] is None:
            return -INFINITY
        self._forget(fd)
        return self._moved[fd]

    cdef inline void _forget(self, int fd) noexcept:
        # Failure means the registration is gone already (the socket closed behind us).
        epoll_ctl(self._epfd, EPOLL_CTL_DEL, fd, NULL)
        self._parked[fd] = None
        self._count -= 1

    cdef inline void _hand(
        self, list handed, int fd, object conn, object answers, object rest, bint more,
        int error, object trailing,
    ) noexcept:
        self._forget(fd)
        handed.append((conn, answers, rest, more, error, trailing))

    def drain(self, table, int64_t now_ms, double now):
        """Serve the parked sockets that are ready; returns the hand-overs (see the module's
        docstring). `table` is the member table when it may answer heartbeats alone, else
        None (every read is then handed over); `now_ms` is the coordinator's clock, `now`
        Trio's, stamped on each socket served here as the time bytes last moved."""
        if self._epfd < 0:
            raise ValueError("the reactor is closed")
        cdef int ready = epoll_wait(self._epfd, self._events, MAX_EVENTS, 0)
        if ready < 0:
            if errno == EINTR:
                return []
            raise _os_error(errno)
        cdef list handed = []
        cdef list trailing = []
        cdef int i, fd, err
        cdef ssize_t got, sent
        cdef Py_ssize_t pos, written, count
        for i in range(ready):
            fd = <int>self._events[i].data.u64
            if fd >= self._capacity:
                continue
            conn = self._parked[fd]
            if conn is None:
                continue
            got = recv(fd, self._in, READ_CHUNK, 0)
            if got < 0:
                err = errno
                if err != EAGAIN and err != EINTR:
                    self._hand(handed, fd, conn, b"", b"", False, err, None)
                continue
            if got == 0:
                self._hand(handed, fd, conn, b"", b"", False, ENDED_, None)
                continue
            written = 0
            count = 0
            pos = 0
            if table is not None:
                try:
                    pos = answer_run(
                        self._in, 0, got, self._max_size, table, now_ms, self._out,
                        READ_CHUNK + MAX_RESPONSE, &written, &count, trailing,
                        getattr(conn, "client_host", ""),
                    )
                except Exception:
                    # A bug: the connection handles the read itself, meets it again, and
                    # is closed with its traceback; the other parked sockets are served.
                    pos = written = 0
                    del trailing[:]
            if pos < got or trailing:
                self._hand(
                    handed, fd, conn, PyBytes_FromStringAndSize(self._out, written),
                    PyBytes_FromStringAndSize(<char*>self._in + pos, got - pos),
                    got == READ_CHUNK, 0, trailing if trailing else None,
                )
                if trailing:
                    trailing = []
                continue
            sent = send(fd, self._out, written, MSG_NOSIGNAL)
            if sent == written:
                self._moved[fd] = now
                continue
            err = 0
            if sent < 0:
                err = errno
                sent = 0
                if err == EAGAIN or err == EINTR:
                    err = 0
            # The client is not reading (or has gone): the answers go to its connection,
            # whose writer waits for the socket.
            self._hand(
                handed, fd, conn, PyBytes_FromStringAndSize(self._out + sent, written - sent),
                b"", got == READ_CHUNK, err, None,
            )
        return handed
