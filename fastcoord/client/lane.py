"""A connection's members' heartbeats and commits, sent, matched and recorded in bulk; and
the poller that reads many connections' sockets at once.

A load test's stable member does little but heartbeat every few seconds and commit every
few; at a million members that is 333k heartbeats a second, too many for a Python object
or call per heartbeat. So each connection has a lane: per member (its slot) the member's
pre-encoded heartbeat frame and, once it owns partitions, its OffsetCommit frame, each with
when it is next due. `due` copies the due frames into the connection's output with fresh
correlation ids (a commit's offsets advanced by one, as if a record had been consumed
since). `read` walks the answers: those of the lane's requests come in request order, so
each is matched to the oldest request of the lane still unanswered, checked, and a plain
success goes into the latency sink with no Python object made. Anything else comes back as
an `unusual` answer, for the caller to decode with the schema codec and act on: an error,
another layout, an answer for a member that has since left its slot.

A plain success is, for a commit, an answer whose bytes after the correlation id are
exactly those the slot expects. A heartbeat is either kind: a classic Heartbeat (no
expected answer given) is read in the layout every broker sends and is a plain success when
its error is NONE, whatever its throttle; any other heartbeat (the consumer protocol's
ConsumerGroupHeartbeat, whose steady answer repeats the member's id, epoch and interval) is
given the exact answer it expects, as a commit is, and anything else is unusual: a new
epoch, an assignment, another interval, an error. One mechanism, two ways of checking.

A heartbeat is not sent while the member's last is unanswered, as consumers do. A slot's
requests answered after `stop` (the member left the stable state) are stale: a classic
Heartbeat's answer in the common layout is dropped, any other heartbeat's answer and every
commit's is reported, not current (the server stored the commit; the caller ignores the
rest). `confirmed` tells when the slot's last heartbeat answered as a plain success was
sent, by the clock `due` is given: a caller waiting for members to have heard of a change
needs it, since those answers never reach it.

The latency sink is an int64 array of two rows, heartbeats then commits: each row is the
histogram's BUCKETS counts (histogram.py's buckets) then the count, the sum and the maximum
of the latencies in ns. The commit sink counts commits answered and offsets stored.

The poller: a Trio task per connection waking for each read costs more than the read
(tens of microseconds of scheduling, for a read every flush of every connection), so a
fleet waits on one epoll set of all its lanes' sockets and, once woken, reads every socket
ready with one call, each into its lane, which matches and records what it read; the
owners hear only of what their lane leaves to them, and of a socket's end.

This twin is the reference; _ext/client_lane.pyx is the compiled module, and differential
property tests check that both give the same frames, the same answers, the same sinks and
the same errors for any input.
"""

from __future__ import annotations

import contextlib
import os
import select
import struct
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fastcoord.client.frames import frame_size_error, heartbeat_error
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ProtocolError

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
API_KEY_AT = 4  # in a request frame: size, api_key, api_version, then correlation id
CORRELATION_ID_AT = 8
MIN_FRAME = CORRELATION_ID_AT + 4
CORRELATION_MASK = 0x7FFFFFFF
HEARTBEAT = 0  # the rows of the latency sink
COMMIT = 1
CLASSIC_HEARTBEAT = int(ApiKey.HEARTBEAT)  # read by layout when no answer is expected
OFFSET_COMMIT = int(ApiKey.OFFSET_COMMIT)
# The histogram's layout (fastcoord.loadtest.histogram), repeated here so that the client
# does not import the load test: 16 buckets per power of two above 32 us, overflow at 2**30.
BUCKETS = 433
LIMIT_US = 1 << 30
ROW = BUCKETS + 3  # the counts, then count, sum_ns, max_ns
COUNT, SUM, MAX = BUCKETS, BUCKETS + 1, BUCKETS + 2
NEVER = (1 << 63) - 1
READ_BYTES = 256 * 1024  # the most a poller reads from one socket at a time
MAX_EVENTS = 256  # sockets a poll reads at most
# Bounds on what a slot is given, so that no sum of them leaves an int64.
TIME_LIMIT = 1 << 62  # |due_ms|
INTERVAL_LIMIT = (1 << 31) - 1
OFFSET_LIMIT = 1 << 62

# (token, api key, current, latency in ns, error code, frame or None): an answer the lane
# leaves to its caller; the api key is the request's (a heartbeat's, that of its frame).
# `frame` (without its size prefix) is there when the answer must be decoded; otherwise
# `error` is the classic Heartbeat's error code. `current` is False for an answer of a
# request sent before the slot was last stopped or started.
Unusual = tuple[object, int, bool, int, int, bytes | None]
Int64Array = npt.NDArray[np.int64]


def bucket_of_ns(ns: int) -> int:
    """The histogram bucket of a latency in ns (histogram.bucket_of, one value)."""
    us = min(max(ns // 1000, 0), LIMIT_US)
    shift = max(us.bit_length() - 5, 0)
    return (shift << 4) + (us >> shift)


@dataclass
class _Slot:
    token: object = None
    generation: int = 0  # raised by every start and stop: requests carry the one they left in
    heartbeat: bytes | None = None  # None: stopped
    heartbeat_api: int = CLASSIC_HEARTBEAT  # the frame's api key
    expected: bytes | None = None  # the heartbeat's plain answer; None: read by layout
    heartbeat_due: int = NEVER
    heartbeat_interval: int = 0
    in_flight: bool = False
    confirmed: int | None = None  # the `due` time of the last heartbeat plainly answered
    commit: bytes | None = None
    offsets_at: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    answer: bytes = b""
    commit_due: int = NEVER
    commit_interval: int = 0


@dataclass
class _Request:
    correlation_id: int
    slot: int
    kind: int
    generation: int
    api: int  # the request's api key
    exact: bool  # answered plainly only by the bytes the slot expects
    due_ms: int  # the time `due` sent it at
    sent_ns: int = 0
    answered: bool = False


class Lane:
    """The heartbeats and commits of up to `slots` members sharing one connection."""

    def __init__(self, slots: int, latency: Int64Array, commits: Int64Array) -> None:
        if slots < 0:
            raise ValueError(f"{slots} slots")
        _check_sink("latency", latency, (2, ROW))
        _check_sink("commit", commits, (2,))
        self._slots = [_Slot() for _ in range(slots)]
        self._latency = latency
        self._commits = commits
        self._queue: deque[_Request] = deque()  # sent, unanswered, in request order
        self._unstamped: list[_Request] = []
        self._in_flight = 0
        self._in = bytearray()  # what the poller read and the walk has not taken
        self.received_at_ns = 0  # when the poller last read something

    @property
    def slots(self) -> int:
        return len(self._slots)

    @property
    def in_flight(self) -> int:
        """The lane's requests sent (or queued) and not answered."""
        return self._in_flight

    def _slot(self, slot: int) -> _Slot:
        if not 0 <= slot < len(self._slots):
            raise IndexError(f"slot {slot} of {len(self._slots)}")
        return self._slots[slot]

    # -- members --------------------------------------------------------------------------

    def start(
        self,
        slot: int,
        token: object,
        heartbeat: bytes,
        due_ms: int,
        interval_ms: int,
        answer: bytes | None = None,
    ) -> None:
        """The member `token` heartbeats in `slot` with the request frame `heartbeat`
        (size prefix included, its correlation id overwritten), first at `due_ms` and then
        every `interval_ms`. An answer whose bytes after the correlation id are `answer` is
        its plain success; with no `answer`, the frame is a classic Heartbeat's, whose
        answers are read by layout. Whatever the slot did before stops. A slot belongs to
        the token that first started it."""
        s = self._slot(slot)
        _check_frame("heartbeat", heartbeat)
        _check_times("heartbeat", due_ms, interval_ms)
        if answer is not None and type(answer) is not bytes:
            raise TypeError(f"the answer is {type(answer).__name__}, not bytes")
        if s.token is not None and s.token is not token:
            raise ValueError(f"slot {slot} belongs to another member")
        self._stop(s)
        s.token = token
        s.heartbeat = heartbeat
        s.heartbeat_api = _INT16.unpack_from(heartbeat, API_KEY_AT)[0]
        s.expected = answer
        s.heartbeat_due = due_ms
        s.heartbeat_interval = interval_ms

    def start_commits(
        self,
        slot: int,
        commit: bytes,
        offsets_at: list[int],
        offsets: list[int],
        answer: bytes,
        due_ms: int,
        interval_ms: int,
    ) -> None:
        """The heartbeating member of `slot` also commits, first at `due_ms` and then
        every `interval_ms`: the OffsetCommit frame `commit` with the int64 at each
        offsets_at[i] set to offsets[i] + n at its n-th commit. An answer whose bytes after
        the correlation id are `answer` is its plain success."""
        s = self._slot(slot)
        if s.heartbeat is None:
            raise ValueError(f"slot {slot} is stopped")
        _check_frame("commit", commit)
        _check_times("commit", due_ms, interval_ms)
        if len(offsets_at) != len(offsets):
            raise ValueError(f"{len(offsets_at)} offset positions for {len(offsets)} offsets")
        for at in offsets_at:
            if not MIN_FRAME <= at <= len(commit) - 8:
                raise ValueError(f"an offset at {at} of a {len(commit)}-byte frame")
        for offset in offsets:
            if not 0 <= offset <= OFFSET_LIMIT:
                raise ValueError(f"an offset of {offset}")
        if type(answer) is not bytes:
            raise TypeError(f"the answer is {type(answer).__name__}, not bytes")
        s.commit = commit
        s.offsets_at = list(offsets_at)
        s.offsets = list(offsets)
        s.answer = answer
        s.commit_due = due_ms
        s.commit_interval = interval_ms

    def stop(self, slot: int) -> list[int]:
        """The slot sends nothing more; the offsets its commits reached (empty if it did
        not commit). Answers still due to it are stale."""
        s = self._slot(slot)
        if s.heartbeat is None:
            return []
        offsets = s.offsets if s.commit is not None else []
        self._stop(s)
        return offsets

    def confirmed(self, slot: int) -> int | None:
        """The `due` time (now_ms) that sent the slot's last heartbeat answered as a plain
        success since it was started; None if none was, or the slot is stopped."""
        return self._slot(slot).confirmed

    def _stop(self, s: _Slot) -> None:
        s.generation += 1
        s.heartbeat = None
        s.expected = None
        s.confirmed = None
        s.heartbeat_due = NEVER
        s.in_flight = False
        s.commit = None
        s.offsets_at = []
        s.offsets = []
        s.answer = b""
        s.commit_due = NEVER

    def lost(self) -> list[object]:
        """The connection is gone: every request unanswered is forgotten; the tokens of
        the heartbeating slots, in slot order, whose caller must stop them."""
        for request in self._queue:
            request.answered = True
        self._queue.clear()
        self._unstamped.clear()
        self._in_flight = 0
        tokens = []
        for s in self._slots:
            if s.heartbeat is not None:
                s.in_flight = False
                tokens.append(s.token)
        return tokens

    # -- sending --------------------------------------------------------------------------

    def due(self, now_ms: int, correlation_id: int, out: bytearray) -> int:
        """Append to `out` every request due at `now_ms`, in slot order (a slot's
        heartbeat before its commit), numbered after `correlation_id`; the last id used.
        A heartbeat whose last is unanswered is skipped. Ids wrap from 2**31-1 to 0."""
        if not 0 <= correlation_id <= CORRELATION_MASK:
            raise ValueError(f"correlation id {correlation_id}")
        frames = bytearray()
        for i, s in enumerate(self._slots):
            if s.heartbeat is not None and s.heartbeat_due <= now_ms:
                s.heartbeat_due = _next(s.heartbeat_due, s.heartbeat_interval, now_ms)
                if not s.in_flight:
                    correlation_id = (correlation_id + 1) & CORRELATION_MASK
                    at = len(frames)
                    frames += s.heartbeat
                    _INT32.pack_into(frames, at + CORRELATION_ID_AT, correlation_id)
                    exact = s.expected is not None
                    self._push(correlation_id, i, HEARTBEAT, s, s.heartbeat_api, exact, now_ms)
                    s.in_flight = True
            if s.commit is not None and s.commit_due <= now_ms:
                s.commit_due = _next(s.commit_due, s.commit_interval, now_ms)
                correlation_id = (correlation_id + 1) & CORRELATION_MASK
                at = len(frames)
                frames += s.commit
                _INT32.pack_into(frames, at + CORRELATION_ID_AT, correlation_id)
                for j, offset_at in enumerate(s.offsets_at):
                    s.offsets[j] += 1
                    _INT64.pack_into(frames, at + offset_at, s.offsets[j])
                self._push(correlation_id, i, COMMIT, s, OFFSET_COMMIT, True, now_ms)
        out += frames
        return correlation_id

    def _push(
        self, correlation_id: int, slot: int, kind: int, s: _Slot, api: int, exact: bool, ms: int
    ) -> None:
        request = _Request(correlation_id, slot, kind, s.generation, api, exact, ms)
        self._queue.append(request)
        self._unstamped.append(request)
        self._in_flight += 1

    def stamp(self, now_ns: int) -> None:
        """Every request `due` has made since the last stamp was written at `now_ns`."""
        for request in self._unstamped:
            request.sent_ns = now_ns
        self._unstamped.clear()

    # -- answers --------------------------------------------------------------------------

    def read(
        self,
        buf: bytearray,
        pos: int,
        max_size: int,
        heartbeat_version: int,
        now_ns: int,
        unusual: list[Unusual],
        others: list[tuple[int, bytes]],
    ) -> int:
        """Walk the complete response frames at buf[pos:], read at `now_ns`; returns the
        position after the last.

        A frame whose correlation id is that of the lane's oldest unanswered request is
        its answer (a Heartbeat's of `heartbeat_version`): a plain success is recorded in
        the sinks, anything else appended to `unusual`. Every other frame is appended to
        `others` as (correlation id, the frame without its size prefix). An incomplete
        last frame stops the walk. A size prefix below 4 or above max_size raises
        ProtocolError; the frames before it stay handled.
        """
        if not 0 <= pos <= len(buf):
            raise ValueError("pos is outside buf")
        if heartbeat_version < 0:
            raise ValueError(f"Heartbeat v{heartbeat_version} does not exist")
        end = len(buf)
        queue = self._queue
        while end - pos >= 4:
            size = _INT32.unpack_from(buf, pos)[0]
            if size < 4 or size > max_size:
                raise frame_size_error(size, max_size)
            if size > end - pos - 4:
                break
            start = pos + 4
            pos = start + size
            correlation_id: int = _INT32.unpack_from(buf, start)[0]
            while queue and queue[0].answered:
                queue.popleft()
            if queue and queue[0].correlation_id == correlation_id:
                self._answer(queue.popleft(), buf, start, size, heartbeat_version, now_ns, unusual)
            else:
                others.append((correlation_id, bytes(buf[start:pos])))
        return pos

    def claim(
        self,
        correlation_id: int,
        frame: bytes,
        heartbeat_version: int,
        now_ns: int,
        unusual: list[Unusual],
    ) -> bool:
        """Answer the lane's request `correlation_id` with `frame` (without its size
        prefix), wherever it is among those unanswered: for an answer that came out of
        order, which `read` leaves in `others`. False if no such request waits."""
        if heartbeat_version < 0:
            raise ValueError(f"Heartbeat v{heartbeat_version} does not exist")
        if len(frame) < 4:
            raise ValueError(f"a frame of {len(frame)} bytes")
        for request in self._queue:
            if not request.answered and request.correlation_id == correlation_id:
                self._answer(request, frame, 0, len(frame), heartbeat_version, now_ns, unusual)
                return True
        return False

    def _answer(
        self,
        request: _Request,
        buf: bytes | bytearray,
        start: int,
        size: int,
        heartbeat_version: int,
        now_ns: int,
        unusual: list[Unusual],
    ) -> None:
        request.answered = True
        self._in_flight -= 1
        s = self._slots[request.slot]
        current = request.generation == s.generation
        latency = now_ns - request.sent_ns
        if request.kind == HEARTBEAT:
            if current:
                s.in_flight = False
            if request.exact:
                if current and _is(buf, start, size, s.expected):
                    self._record(HEARTBEAT, latency)
                    s.confirmed = request.due_ms
                    return
                frame = bytes(buf[start : start + size])
                unusual.append((s.token, request.api, current, latency, 0, frame))
                return
            error = heartbeat_error(buf, start, size, heartbeat_version)
            if error is None:
                frame = bytes(buf[start : start + size])
                unusual.append((s.token, request.api, current, latency, 0, frame))
            elif not current:
                pass  # the member has moved on since: its old heartbeat says nothing now
            elif error == 0:
                self._record(HEARTBEAT, latency)
                s.confirmed = request.due_ms
            else:
                unusual.append((s.token, request.api, True, latency, error, None))
            return
        if current and s.commit is not None and _is(buf, start, size, s.answer):
            self._record(COMMIT, latency)
            self._commits[0] += 1
            self._commits[1] += len(s.offsets)
            return
        frame = bytes(buf[start : start + size])
        unusual.append((s.token, request.api, current, latency, 0, frame))

    def _record(self, kind: int, latency_ns: int) -> None:
        row = self._latency[kind]
        row[bucket_of_ns(latency_ns)] += 1
        row[COUNT] += 1
        row[SUM] += latency_ns
        if latency_ns > row[MAX]:
            row[MAX] = latency_ns


def _is(buf: bytes | bytearray, start: int, size: int, expected: bytes | None) -> bool:
    """Whether the answer of `size` bytes at buf[start:] is, after its correlation id,
    exactly `expected`."""
    return (
        expected is not None
        and size - 4 == len(expected)
        and buf[start + 4 : start + size] == expected
    )


def _next(due: int, interval: int, now_ms: int) -> int:
    """The next due time after one at `due` (a generator that fell behind skips the
    beats it missed rather than sending them in a burst)."""
    due += interval
    return due if due > now_ms else now_ms + interval


def _check_sink(what: str, sink: Int64Array, shape: tuple[int, ...]) -> None:
    if not (
        isinstance(sink, np.ndarray)
        and sink.dtype == np.int64
        and sink.shape == shape
        and sink.flags.c_contiguous
        and sink.flags.writeable
    ):
        raise ValueError(f"the {what} sink must be a writeable int64 array of shape {shape}")


def _check_times(what: str, due_ms: int, interval_ms: int) -> None:
    if not -TIME_LIMIT <= due_ms <= TIME_LIMIT:
        raise ValueError(f"a {what} due at {due_ms} ms")
    if not 1 <= interval_ms <= INTERVAL_LIMIT:
        raise ValueError(f"a {what} interval of {interval_ms} ms")


def _check_frame(what: str, frame: bytes) -> None:
    if type(frame) is not bytes:
        raise TypeError(f"the {what} frame is {type(frame).__name__}, not bytes")
    if len(frame) < MIN_FRAME:
        raise ValueError(f"a {what} frame of {len(frame)} bytes; a request has at least 12")


# What a poll tells an owner: (owner, when its socket was read, its lane's unusual answers,
# the other answers as (correlation id, frame), and the socket's end or None).
Heard = tuple[object, int, list[Unusual], list[tuple[int, bytes]], BaseException | None]


def closed() -> EOFError:
    """A socket's end when its peer closed it."""
    return EOFError("the broker closed the connection")


class Poller:
    """Reads the sockets of many lanes' connections (see the module's docstring). Frames
    longer than `max_size` are refused, as `Lane.read` refuses them."""

    def __init__(self, max_size: int) -> None:
        self._epoll: select.epoll | None = select.epoll()
        self._entries: dict[int, tuple[Lane, object, int]] = {}
        self._max_size = max_size

    def fileno(self) -> int:
        """The epoll set's descriptor: readable when a socket is."""
        if self._epoll is None:
            return -1
        return self._epoll.fileno()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, fd: int, lane: Lane, owner: object, heartbeat_version: int) -> None:
        """Read the socket `fd` (non-blocking) into `lane`, for `owner`; its Heartbeat
        answers are of `heartbeat_version`."""
        if self._epoll is None:
            raise ValueError("the poller is closed")
        if fd in self._entries:
            raise ValueError(f"file descriptor {fd} is polled already")
        if heartbeat_version < 0:
            raise ValueError(f"Heartbeat v{heartbeat_version} does not exist")
        self._epoll.register(fd, select.EPOLLIN)
        self._entries[fd] = (lane, owner, heartbeat_version)

    def remove(self, fd: int) -> None:
        """Stop reading `fd` (before it is closed)."""
        if self._entries.pop(fd, None) is not None and self._epoll is not None:
            with contextlib.suppress(OSError):  # gone already: the descriptor was closed
                self._epoll.unregister(fd)

    def close(self) -> None:
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
        self._entries.clear()

    def poll(self) -> list[Heard]:
        """One read of every socket ready now, each walked by its lane (plain successes
        recorded there); what the owners must hear of: their lane's unusual answers, the
        other answers, and a socket's end (EOFError when the peer closed it, the OSError of
        a failed read, the ProtocolError of a frame that cannot be). A socket with nothing
        of that is not listed."""
        if self._epoll is None:
            raise ValueError("the poller is closed")
        heard: list[Heard] = []
        for fd, _ in self._epoll.poll(0, MAX_EVENTS):
            entry = self._entries.get(fd)
            if entry is None:
                continue
            lane, owner, version = entry
            unusual: list[Unusual] = []
            others: list[tuple[int, bytes]] = []
            end: BaseException | None = None
            try:
                data = os.read(fd, READ_BYTES)
                if not data:
                    end = closed()
                else:
                    lane.received_at_ns = time.perf_counter_ns()
                    lane._in += data
                    pos = lane.read(
                        lane._in, 0, self._max_size, version, lane.received_at_ns, unusual, others
                    )
                    del lane._in[:pos]
            except (BlockingIOError, InterruptedError):
                continue
            except (OSError, ProtocolError) as exc:
                end = exc
            if end is not None or unusual or others:
                heard.append((owner, lane.received_at_ns, unusual, others, end))
        return heard
