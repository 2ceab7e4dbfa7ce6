"""Heartbeat round trips over loopback: the measurement loops of bench_server.py (asv), and
the Measurement and CPU bookkeeping bench_commit.py shares.

One member joins a group through fastcoord.client.blocking (FindCoordinator, JoinGroup with
the MEMBER_ID_REQUIRED dance, SyncGroup as leader), then sends Heartbeat v3 frames on that
blocking socket, either one in flight or with a window of them outstanding, so that every
peer is measured by exactly the same bytes-on-the-wire client. The peers (`fastcoord
serve`, the librdkafka mock cluster, the reference responder) are started and stopped by
fastcoord.testing; SERVE_ARGS are the benchmarks' own settings of `fastcoord serve`.

Nothing here runs at import: asv imports every module in benches/ to look for benchmarks.
"""

from __future__ import annotations

import os
import statistics
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from fastcoord.client import blocking
from fastcoord.client.blocking import Connection, Member, PeerError
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.framing import encode_request
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import HeartbeatRequest
from fastcoord.testing_cpu import sched_seconds

CLIENT_ID = "fastcoord-bench"
HEARTBEAT_VERSION = 3
# Heartbeat v3 response frame: size, correlation id, throttle_time_ms, error_code.
_HB_RESPONSE = struct.Struct(">iiih")
_HB_RESPONSE_SIZE = _HB_RESPONSE.size - 4

# The benchmarks' settings of `fastcoord serve`, before those a benchmark adds: no initial
# rebalance delay (one member joins), and the event log's first write (the join's events;
# it imports pyarrow in a worker thread) in the warm-up rather than in a measurement.
SERVE_ARGS = ("--group-initial-rebalance-delay-ms", "0", "--event-log-flush-ms", "100")


def join_group(
    host: str, port: int, group_id: str, session_timeout_ms: int = 45_000
) -> tuple[Connection, Member]:
    """blocking.join_group, from a peer that must serve the heartbeats measured here (a
    caller that leaves its member silent for long gives it a longer session)."""
    client, member = blocking.join_group(host, port, group_id, session_timeout_ms)
    if client.version(ApiKey.HEARTBEAT, HEARTBEAT_VERSION) != HEARTBEAT_VERSION:
        client.close()
        raise PeerError(f"the peer does not serve Heartbeat v{HEARTBEAT_VERSION}")
    return client, member


def wrong_generation_answer(client: Connection, member: Member) -> int:
    """The error code of a heartbeat with a stale generation (22, ILLEGAL_GENERATION, from a
    peer that checks its heartbeats: answers of 0 prove something only then)."""
    request = HeartbeatRequest(member.group_id, member.generation_id + 1000, member.member_id, None)
    return int(client.request(request, HEARTBEAT_VERSION).error_code)


class HeartbeatRing:
    """`size` Heartbeat v3 frames, correlation ids 0..size-1, back to back in one buffer."""

    def __init__(self, member: Member, size: int = 4096) -> None:
        request = HeartbeatRequest(member.group_id, member.generation_id, member.member_id, None)
        frames = [
            encode_request(
                RequestHeader(ApiKey.HEARTBEAT, HEARTBEAT_VERSION, i, CLIENT_ID), request
            )
            for i in range(size)
        ]
        self.frame_len = len(frames[0])
        if any(len(f) != self.frame_len for f in frames):
            raise AssertionError("heartbeat frames differ in length")
        self.size = size
        self.data = memoryview(b"".join(frames))

    def frames(self, start: int, count: int) -> list[memoryview]:
        """`count` frames from ring position `start`, as one or two contiguous views."""
        n, L = self.size, self.frame_len
        start %= n
        end = start + count
        if end <= n:
            return [self.data[start * L : end * L]]
        return [self.data[start * L :], self.data[: (end - n) * L]]


@dataclass
class Measurement:
    """Requests answered in `seconds`, by bench_server (heartbeats) and bench_commit."""

    mode: str
    requests: int
    seconds: float
    errors: dict[int, int] = field(default_factory=dict)  # error code -> count, nonzero only
    latencies_ns: list[int] = field(default_factory=list)
    # Meanwhile, from schedstat: (on a CPU, waiting for one) seconds of the peer's process
    # and of the client's thread.
    server_sched: tuple[float, float] | None = None
    client_sched: tuple[float, float] | None = None
    # CPU seconds the peer went on using once the measurement was over (settle), until quiet
    background_s: float = 0.0

    def cpu_us_per(self, units_per_request: int = 1) -> float | None:
        """The peer's CPU time per request (or per unit of one: a commit's offsets)."""
        if self.server_sched is None or not self.requests:
            return None
        return self.server_sched[0] * 1e6 / (self.requests * units_per_request)

    def cpu_us_with_background(self, units_per_request: int = 1) -> float | None:
        """cpu_us_per, with the work the requests left the peer to do afterwards."""
        if self.server_sched is None or not self.requests:
            return None
        seconds = self.server_sched[0] + self.background_s
        return seconds * 1e6 / (self.requests * units_per_request)

    def share(self, which: str, index: int) -> float | None:
        """Time on a CPU (index 0) or waiting for one (1) per second of the measurement,
        of the peer ("server") or the client ("client")."""
        sched = self.server_sched if which == "server" else self.client_sched
        return None if sched is None else sched[index] / self.seconds

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def percentile_us(self, q: float) -> float:
        ordered = sorted(self.latencies_ns)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000

    @property
    def p50_us(self) -> float:
        return self.percentile_us(0.5)


M = TypeVar("M", bound=Measurement)


def with_cpu(pid: int, how: Callable[..., M], *args: Any) -> M:
    """One measurement, with the CPU time the peer `pid` and this thread used (and waited
    for) meanwhile."""
    tid = threading.get_native_id()
    server_before = sched_seconds(pid)
    client_before = sched_seconds(os.getpid(), tid)
    m = how(*args)
    server_after = sched_seconds(pid)
    client_after = sched_seconds(os.getpid(), tid)
    if server_before and server_after:
        m.server_sched = (server_after[0] - server_before[0], server_after[1] - server_before[1])
    if client_before and client_after:
        m.client_sched = (client_after[0] - client_before[0], client_after[1] - client_before[1])
    return m


# A peer is quiet when it uses less than this share of a core over QUIET_WINDOW_S.
QUIET_SHARE = 0.03
QUIET_WINDOW_S = 0.25


def settle(pids: Sequence[int], timeout_s: float = 120.0) -> dict[int, float]:
    """Wait until every peer in `pids` is quiet: so that what one peer still does in the
    background (a log compaction after a burst of commits) is not measured as another's
    slowness. Returns the CPU seconds each used while this waited (its background work,
    for the peer whose turn just ended). Gives up after timeout_s, quiet or not."""
    start = {pid: sched_seconds(pid) for pid in pids}
    last = dict(start)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(QUIET_WINDOW_S)
        now = {pid: sched_seconds(pid) for pid in pids}
        busy = [
            pid
            for pid in pids
            if (a := last[pid]) is not None
            and (b := now[pid]) is not None
            and b[0] - a[0] > QUIET_SHARE * QUIET_WINDOW_S
        ]
        last = now
        if not busy:
            break
    return {
        pid: (b[0] - a[0]) if (a := start[pid]) is not None and (b := last[pid]) else 0.0
        for pid in pids
    }


def median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def cpu_shares(piped: Sequence[Measurement]) -> dict[str, float | None]:
    """The pipelined measurements' median shares of a core, as the reports name them."""
    return {
        f"pipelined_{who}_{what}": median([m.share(who, index) for m in piped])
        for who in ("server", "client")
        for index, what in enumerate(("run", "wait"))
    }


def cores_line(figures: dict[str, Any], peers: Sequence[str], labels: dict[str, str]) -> str:
    """The report line of each peer's and its client's share of a core, pipelined."""
    return (
        "pipelined, in cores (on a CPU / runnable but waiting for one, i.e. the host's "
        "contention): "
        + "; ".join(
            f"{labels[name]} {figures[name]['pipelined_server_run']:.2f}/"
            f"{figures[name]['pipelined_server_wait']:.2f}, its client "
            f"{figures[name]['pipelined_client_run']:.2f}/"
            f"{figures[name]['pipelined_client_wait']:.2f}"
            for name in peers
            if figures[name]["pipelined_server_run"] is not None
        )
    )


def _check_frame(size: int, correlation_id: int, expected: int) -> None:
    if size != _HB_RESPONSE_SIZE:
        raise PeerError(f"heartbeat response of {size} bytes, expected {_HB_RESPONSE_SIZE}")
    if correlation_id != expected:
        raise PeerError(f"correlation id {correlation_id}, expected {expected}")


def one_in_flight(
    client: Connection, ring: HeartbeatRing, count: int, max_seconds: float
) -> Measurement:
    """Send a heartbeat, wait for its answer, repeat: `count` times or `max_seconds`."""
    sock = client.sock
    frames = [bytes(ring.frames(i, 1)[0]) for i in range(ring.size)]
    need = _HB_RESPONSE.size
    buf = bytearray(need)
    view = memoryview(buf)
    errors: dict[int, int] = {}
    latencies: list[int] = []
    clock = time.perf_counter_ns
    n = ring.size
    started = clock()
    deadline = started + int(max_seconds * 1e9)
    done = 0
    while done < count:
        t0 = clock()
        sock.sendall(frames[done % n])
        got = sock.recv_into(view, need)
        while got < need:
            more = sock.recv_into(view[got:], need - got)
            if not more:
                raise PeerError("peer closed the connection")
            got += more
        t1 = clock()
        latencies.append(t1 - t0)
        size, correlation_id, _throttle, error = _HB_RESPONSE.unpack(buf)
        if size != _HB_RESPONSE_SIZE or correlation_id != done % n:
            _check_frame(size, correlation_id, done % n)
        if error:
            errors[error] = errors.get(error, 0) + 1
        done += 1
        if t1 >= deadline:
            break
    return Measurement("one in flight", done, (clock() - started) / 1e9, errors, latencies)


_HB_RESPONSE_DTYPE = np.dtype(
    [("size", ">i4"), ("correlation_id", ">i4"), ("throttle", ">i4"), ("error", ">i2")]
)
# Below this many answers in one read, a Python loop is cheaper than numpy's call overheads.
_VECTOR_MIN = 48


def _walk_answers(data: bytes, first: int, n: int, errors: dict[int, int]) -> int:
    """Walk the complete Heartbeat v3 answers at the start of `data` by their 4-byte sizes.

    The first is expected to carry correlation id `first` (mod n), the next first + 1, ...
    Each must be a 10-byte Heartbeat v3 response; error codes other than 0 are tallied in
    `errors`. Returns how many answers were walked (the rest of `data` is a partial one).
    """
    total = _HB_RESPONSE.size
    count = len(data) // total
    if count >= _VECTOR_MIN:
        # Every answer has the same size, so the walk visits offsets 0, 14, 28, ... exactly
        # when every size read there is 10: check that and the rest for all at once.
        answers = np.frombuffer(data, dtype=_HB_RESPONSE_DTYPE, count=count)
        expected = (np.arange(first, first + count) % n).astype(np.int32)
        if (answers["size"] == _HB_RESPONSE_SIZE).all() and (
            answers["correlation_id"] == expected
        ).all():
            codes = answers["error"]
            if codes.any():
                for code, k in zip(*np.unique(codes[codes != 0], return_counts=True), strict=True):
                    errors[int(code)] = errors.get(int(code), 0) + int(k)
            return count
    unpack_from = _HB_RESPONSE.unpack_from
    pos = 0
    got = 0
    end = len(data)
    while end - pos >= total:
        size, correlation_id, _throttle, error = unpack_from(data, pos)
        expected_id = (first + got) % n
        if size != _HB_RESPONSE_SIZE or correlation_id != expected_id:
            _check_frame(size, correlation_id, expected_id)
        if error:
            errors[error] = errors.get(error, 0) + 1
        pos += total
        got += 1
    return got


def pipelined(
    client: Connection, ring: HeartbeatRing, count: int, max_seconds: float, window: int = 256
) -> Measurement:
    """Keep `window` heartbeats outstanding: `count` answers or `max_seconds`, then drain.

    Answers are counted by walking their 4-byte sizes; each is checked (size, correlation id
    in order) and its error code tallied. A new heartbeat goes out for each answer read.
    """
    sock = client.sock
    window = max(1, min(window, count, ring.size))
    n = ring.size
    total = _HB_RESPONSE.size
    errors: dict[int, int] = {}
    clock = time.perf_counter_ns
    started = clock()
    deadline = started + int(max_seconds * 1e9)
    for part in ring.frames(0, window):
        sock.sendall(part)
    sent = window
    received = 0
    pending = b""
    sending = True
    while received < sent:
        data = sock.recv(262144)
        if not data:
            raise PeerError("peer closed the connection")
        if pending:
            data = pending + data
        got = _walk_answers(data, received, n, errors)
        pending = data[got * total :]
        received += got
        if sending and (received >= count or clock() >= deadline):
            sending = False
        if sending and got:
            more = min(got, count - sent)
            if more > 0:
                for part in ring.frames(sent, more):
                    sock.sendall(part)
                sent += more
    return Measurement(
        f"pipelined ({window} in flight)", received, (clock() - started) / 1e9, errors
    )


def responder_member() -> Member:
    """The responder keeps no groups: any member id and generation will do."""
    return Member("127.0.0.1", 0, "reference-group", "reference-member", 1, 0, 0.0)
