"""Pure-Python twin of the lone-heartbeat reactor (_ext/reactor.pyx).

Idle connections' sockets on one epoll descriptor; `drain` reads each ready one once and
answers a read of heartbeats that the member table answers alone with one write, or hands
the socket back to its connection with what it read. The contract is in the compiled
module's docstring; this twin gives the reference hand-overs, built from select.epoll and
the twin of answer_heartbeats, and differential tests check that both give the same.
It runs no thread: `start` leaves `drain` to serve the sockets, as the compiled module does
before its `start` (the Trio side then waits on `fileno()`, the epoll descriptor, and drains).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
from typing import Any

from fastcoord.protocol import hot_frames
from fastcoord.protocol.hot_frames import HeartbeatTable

READ_SIZE = 65536  # as much as a connection reads at a time
MAX_EVENTS = 256  # sockets a drain takes; the rest stay ready for the next
ENDED = -1  # the error of a hand-over when the client closed its end
_RETRY = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR)

# (connection, answers, rest, more, error, trailing)
Handover = tuple[Any, bytes, bytes, bool, int, list[tuple[int, int]] | None]


class Reactor:
    def __init__(self, max_size: int) -> None:
        self._max_size = max_size
        self._epoll: select.epoll | None = select.epoll()
        self._parked: dict[int, Any] = {}  # fd -> the connection parked on it
        self._moved: dict[int, float] = {}  # fd -> when bytes last moved while parked
        self.drained = 0  # heartbeats the last drain answered
        self._failing = 0  # for tests: reads to hand over as if memory had run out

    @property
    def threaded(self) -> bool:
        """Whether a thread serves the parked sockets: never here."""
        return False

    def start(self, table: HeartbeatTable | None, offset: float) -> None:
        """The compiled module starts its thread here; the twin leaves the work to drain."""
        self._open()

    def serve(self, table: HeartbeatTable | None) -> None:
        """The table the thread answers from: drain is given it each time here."""

    def take_pending(self, fd: int) -> tuple[bytes, bytes, bool, int] | None:
        """What a thread had read from `fd` before remove and drain had not handed over:
        never anything here (drain reads and hands over in one call)."""
        return None

    def stop(self) -> None:
        """Stop the thread (the compiled module's); drain serves the sockets from then on."""

    def take_stats(self) -> tuple[int, int]:
        """(heartbeats the thread answered, ns): none without a thread."""
        return 0, 0

    def fileno(self) -> int:
        """The epoll descriptor: readable when a parked socket is."""
        return self._open().fileno()

    def __len__(self) -> int:
        return len(self._parked)

    def close(self) -> None:
        """Close the descriptor. Sockets still parked are forgotten, not closed."""
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
        self._parked.clear()

    def _open(self) -> select.epoll:
        if self._epoll is None:
            raise ValueError("the reactor is closed")
        return self._epoll

    def add(self, fd: int, conn: Any) -> None:
        """Park `conn` on its socket `fd` (non-blocking): its reads are ours until handed back."""
        epoll = self._open()
        if fd < 0:
            raise ValueError(f"bad descriptor {fd}")
        if conn is None:
            raise TypeError("conn must not be None")
        if fd in self._parked:
            raise ValueError(f"descriptor {fd} is parked already")
        epoll.register(fd, select.EPOLLIN)
        self._parked[fd] = conn
        self._moved[fd] = -math.inf

    def remove(self, fd: int) -> float:
        """Take `fd` off the descriptor (nothing if it is not parked); returns when bytes
        last moved on it while it was parked, or -inf."""
        if fd not in self._parked:
            return -math.inf
        self._forget(fd)
        return self._moved[fd]

    def _fail_copies(self, count: int) -> None:
        """For tests: the next `count` reads handed over with their bytes are handed over
        as the compiled module hands over a read it has no memory to copy: without them,
        with ENOMEM."""
        self._failing = count

    def _forget(self, fd: int) -> None:
        # Failure means the registration is gone already (the socket closed behind us).
        with contextlib.suppress(OSError):
            self._open().unregister(fd)
        del self._parked[fd]

    def _hand(
        self,
        handed: list[Handover],
        fd: int,
        answers: bytes,
        rest: bytes,
        more: bool,
        error: int,
        trailing: list[tuple[int, int]] | None,
    ) -> None:
        conn = self._parked[fd]
        self._forget(fd)
        handed.append((conn, answers, rest, more, error, trailing))

    def drain(self, table: HeartbeatTable | None, now_ms: int, now: float) -> list[Handover]:
        """Serve the parked sockets that are ready; returns the hand-overs."""
        handed: list[Handover] = []
        self.drained = 0
        try:
            events = self._open().poll(0, MAX_EVENTS)
        except InterruptedError:
            return handed
        for fd, _ in events:
            if fd not in self._parked:
                continue
            try:
                data = os.read(fd, READ_SIZE)
            except OSError as exc:
                if exc.errno not in _RETRY:
                    self._hand(handed, fd, b"", b"", False, exc.errno or 0, None)
                continue
            if not data:
                self._hand(handed, fd, b"", b"", False, ENDED, None)
                continue
            buf, out = bytearray(data), bytearray()
            trailing: list[tuple[int, int]] = []
            pos = 0
            if table is not None:
                try:
                    host = getattr(self._parked[fd], "client_host", "")
                    pos, answered = hot_frames.answer_heartbeats(
                        buf, 0, self._max_size, table, now_ms, out, trailing, host
                    )
                except Exception:
                    # A bug: the connection handles the read itself, meets it again, and
                    # is closed with its traceback; the other parked sockets are served.
                    pos, out, trailing, answered = 0, bytearray(), [], 0
                self.drained += answered
            more = len(data) == READ_SIZE
            if pos < len(data) or trailing:
                if self._failing:
                    self._failing -= 1
                    self._hand(handed, fd, b"", b"", False, errno.ENOMEM, None)
                else:
                    self._hand(handed, fd, bytes(out), data[pos:], more, 0, trailing or None)
                continue
            try:
                sent = os.write(fd, out)
            except OSError as exc:
                error = 0 if exc.errno in _RETRY else exc.errno or 0
                self._hand(handed, fd, bytes(out), b"", more, error, None)
                continue
            if sent == len(out):
                self._moved[fd] = now
                continue
            # The client is not reading (or has gone): the answers go to its connection,
            # whose writer waits for the socket.
            self._hand(handed, fd, bytes(out[sent:]), b"", more, 0, None)
        return handed
