"""Heartbeat round trips over loopback: a raw-socket Kafka client and the peers it measures.

Used by bench_server.py (asv). Run as a script, it hosts a peer until SIGTERM (or until its
parent dies), printing `listening on 127.0.0.1:PORT` as fastcoord does:

    python benches/loopback.py mock        # the librdkafka mock cluster
    python benches/loopback.py responder   # answers every frame at once: the client's ceiling

The client is plain Python on a blocking socket; it encodes its requests with
fastcoord.protocol, so that both peers are measured by exactly the same bytes-on-the-wire
client. One member joins a group (FindCoordinator, JoinGroup with the MEMBER_ID_REQUIRED
dance, SyncGroup as leader), then sends Heartbeat v3 frames, either one in flight or with a
window of them outstanding.

Peers, each started as a subprocess pinned to one core and stopped by PID:
- `fastcoord serve` on 127.0.0.1, port 0;
- the librdkafka mock cluster (C), which lives inside a confluent-kafka client: a small
  Python process (this file, `mock`) creates a Producer with test.mock.num.brokers=1 and
  reads the cluster's address from its metadata (see serve_mock);
- the reference responder (this file, `responder`), not a peer: the client's ceiling.

Nothing here runs at import: asv imports every module in benches/ to look for benchmarks.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.framing import decode_response, encode_request
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from fastcoord.protocol.schema import Request, Response

CLIENT_ID = "fastcoord-bench"
HEARTBEAT_VERSION = 3
# Heartbeat v3 response frame: size, correlation id, throttle_time_ms, error_code.
_HB_RESPONSE = struct.Struct(">iiih")
_HB_RESPONSE_SIZE = _HB_RESPONSE.size - 4
_SIZE = struct.Struct(">i")
# Versions the client asks for (capped by what the peer announces): non-flexible ones, as
# the peers' reference figures were taken with Heartbeat v3.
WANTED_VERSIONS = {
    ApiKey.FIND_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 5,
    ApiKey.SYNC_GROUP: 3,
    ApiKey.HEARTBEAT: HEARTBEAT_VERSION,
}
START_TIMEOUT_S = 30.0
IO_TIMEOUT_S = 15.0


# -- the client ---------------------------------------------------------------------------


class PeerError(RuntimeError):
    """The peer answered something the benchmark cannot go on with."""


class KafkaClient:
    """One blocking TCP connection speaking Kafka request/response frames."""

    def __init__(self, host: str, port: int) -> None:
        self.address = (host, port)
        self.sock = socket.create_connection(self.address, timeout=IO_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}

    def close(self) -> None:
        self.sock.close()

    def _read_exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise PeerError(f"{self.address} closed the connection")
            buf += chunk
        return bytes(buf)

    def read_frame(self) -> bytes:
        (size,) = _SIZE.unpack(self._read_exactly(4))
        return self._read_exactly(size)

    def request(self, request: Request, version: int) -> Response:
        self._correlation += 1
        correlation_id = self._correlation
        header = RequestHeader(request.API_KEY, version, correlation_id, CLIENT_ID)
        self.sock.sendall(encode_request(header, request))
        got, response = decode_response(request.API_KEY, version, self.read_frame())
        if got != correlation_id:
            raise PeerError(f"correlation id {got}, expected {correlation_id}")
        return response

    def api_versions(self) -> dict[int, tuple[int, int]]:
        response = self.request(ApiVersionsRequest(), 0)
        if response.error_code != 0:
            raise PeerError(f"ApiVersions: error {response.error_code}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        return self.versions

    def version(self, api_key: ApiKey) -> int:
        wanted = WANTED_VERSIONS[api_key]
        low, high = self.versions.get(api_key, (0, wanted))
        version = min(wanted, high)
        if version < low:
            raise PeerError(f"{api_key.name}: peer serves v{low}-{high}, client wants v{wanted}")
        return version


@dataclass
class Member:
    """A group member that has joined and synced: what its heartbeats need."""

    host: str
    port: int
    group_id: str
    member_id: str
    generation_id: int
    join_attempts: int
    join_ms: float


def join_group(
    host: str, port: int, group_id: str, session_timeout_ms: int = 45_000
) -> tuple[KafkaClient, Member]:
    """Find the coordinator, join (asking again with the member id given), sync as leader."""
    started = time.perf_counter()
    bootstrap = KafkaClient(host, port)
    try:
        bootstrap.api_versions()
        v = bootstrap.version(ApiKey.FIND_COORDINATOR)
        found = bootstrap.request(FindCoordinatorRequest(key=group_id, key_type=0), v)
        if found.error_code != 0:
            raise PeerError(f"FindCoordinator: error {found.error_code}")
        coordinator = (found.host, found.port)
    finally:
        bootstrap.close()
    client = KafkaClient(*coordinator)
    try:
        client.api_versions()
        v_join = client.version(ApiKey.JOIN_GROUP)
        member_id = ""
        attempts = 0
        while True:
            attempts += 1
            joined = client.request(
                JoinGroupRequest(
                    group_id=group_id,
                    session_timeout_ms=session_timeout_ms,
                    rebalance_timeout_ms=60_000,
                    member_id=member_id,
                    group_instance_id=None,
                    protocol_type="consumer",
                    protocols=[JoinGroupRequestProtocol("range", b"")],
                ),
                v_join,
            )
            if joined.error_code == ErrorCode.MEMBER_ID_REQUIRED and attempts < 3:
                member_id = joined.member_id
                continue
            if joined.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and attempts < 200:
                time.sleep(0.05)  # the server is loading its offsets log: retry, as clients do
                continue
            if joined.error_code != 0:
                raise PeerError(f"JoinGroup v{v_join}: error {joined.error_code}")
            break
        member_id = joined.member_id
        if joined.leader != member_id:
            raise PeerError(f"JoinGroup: leader {joined.leader!r}, not this member {member_id!r}")
        synced = client.request(
            SyncGroupRequest(
                group_id=group_id,
                generation_id=joined.generation_id,
                member_id=member_id,
                group_instance_id=None,
                assignments=[SyncGroupRequestAssignment(member_id, b"")],
            ),
            client.version(ApiKey.SYNC_GROUP),
        )
        if synced.error_code != 0:
            raise PeerError(f"SyncGroup: error {synced.error_code}")
        if client.version(ApiKey.HEARTBEAT) != HEARTBEAT_VERSION:
            raise PeerError(f"peer does not serve Heartbeat v{HEARTBEAT_VERSION}")
    except BaseException:
        client.close()
        raise
    member = Member(
        coordinator[0],
        coordinator[1],
        group_id,
        member_id,
        joined.generation_id,
        attempts,
        (time.perf_counter() - started) * 1000,
    )
    return client, member


def wrong_generation_answer(client: KafkaClient, member: Member) -> int:
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

    def cpu_us_per(self, units_per_request: int = 1) -> float | None:
        """The peer's CPU time per request (or per unit of one: a commit's offsets)."""
        if self.server_sched is None or not self.requests:
            return None
        return self.server_sched[0] * 1e6 / (self.requests * units_per_request)

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
    client: KafkaClient, ring: HeartbeatRing, count: int, max_seconds: float
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
    client: KafkaClient, ring: HeartbeatRing, count: int, max_seconds: float, window: int = 256
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


# -- the peers ----------------------------------------------------------------------------


@dataclass
class Peer:
    """A server subprocess on loopback; stop() ends it by PID."""

    name: str
    process: subprocess.Popen[bytes]
    host: str
    port: int
    log_path: Path
    workdir: tempfile.TemporaryDirectory[str]

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM to its PID); stop() waits for it."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)

    def stop(self) -> None:
        try:
            if self.process.poll() is None:
                self.terminate()
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.kill(self.process.pid, signal.SIGKILL)
                    self.process.wait(timeout=10)
        finally:
            self.workdir.cleanup()


_running: dict[int, Peer] = {}  # stopped at exit if a benchmark left anything behind


def _stop_all() -> None:
    for pid in list(_running):
        _running.pop(pid).stop()


atexit.register(_stop_all)


def running(peer: Peer) -> Peer:
    """Keep `peer` to be stopped at exit if nothing stops it before."""
    _running[peer.pid] = peer
    return peer


def stop(peer: Peer) -> None:
    _running.pop(peer.pid, None)
    peer.stop()


def cores() -> tuple[int | None, int | None]:
    """(client core, server core) on a machine with two or more usable cores, else None."""
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) < 2:
        return None, None
    return usable[0], usable[1]


def _start(name: str, argv: list[str], core: int | None) -> Peer:
    workdir = tempfile.TemporaryDirectory(prefix=f"fastcoord-bench-{name.replace(' ', '-')}-")
    log_path = Path(workdir.name) / "out.log"
    if core is not None and shutil.which("taskset"):
        argv = ["taskset", "-c", str(core), *argv]  # taskset execs argv: same PID
    try:
        with open(log_path, "wb") as out:
            process = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=workdir.name,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
    except BaseException:
        workdir.cleanup()
        raise
    if core is not None and not shutil.which("taskset"):
        os.sched_setaffinity(process.pid, {core})
    peer = Peer(name, process, "127.0.0.1", 0, log_path, workdir)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            match = re.search(r"listening on ([\d.]+):(\d+)", peer.log())
            if match:
                peer.host, peer.port = match.group(1), int(match.group(2))
                return peer
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited early:\n{peer.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not start:\n{peer.log()}")
            time.sleep(0.02)
    except BaseException:
        peer.stop()
        raise


def start_fastcoord(core: int | None, extra_args: Sequence[str] = ()) -> Peer:
    """`fastcoord serve` on 127.0.0.1, port 0, its data directory in the peer's temporary
    working directory (on the disk that holds the system's temporary directory); settings
    in `extra_args` (e.g. `("--fsync", "always")`) come after the defaults, and win."""
    data_dir = "data"  # relative to the peer's temporary working directory
    return _start(
        "fastcoord",
        [
            sys.executable,
            "-m",
            "fastcoord",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--data-dir",
            data_dir,
            "--group-initial-rebalance-delay-ms",
            "0",
            # The event log's first write (the join's events; it imports pyarrow in a worker
            # thread) then falls in the warm-up rather than in a measurement.
            "--event-log-flush-ms",
            "100",
            *extra_args,
        ],
        core,
    )


def start_mock(core: int | None) -> Peer:
    return _start("librdkafka mock", [sys.executable, os.path.abspath(__file__), "mock"], core)


def start_responder(core: int | None) -> Peer:
    return _start("responder", [sys.executable, os.path.abspath(__file__), "responder"], core)


def responder_member() -> Member:
    """The responder keeps no groups: any member id and generation will do."""
    return Member("127.0.0.1", 0, "reference-group", "reference-member", 1, 0, 0.0)


def sched_seconds(pid: int, tid: int | None = None) -> tuple[float, float] | None:
    """(time on a CPU, time runnable but waiting for one) of a process's live threads, or
    of one thread, from /proc's schedstat (nanoseconds); None off Linux.

    The wait is the host's contention: time the process was ready to run while something
    else had its core.
    """
    try:
        tids = [str(tid)] if tid is not None else os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    run = wait = 0
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                fields = f.read().split()
            run += int(fields[0])
            wait += int(fields[1])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return run / 1e9, wait / 1e9


@contextlib.contextmanager
def pinned(core: int | None) -> Iterator[None]:
    """Pin the calling thread (the client) to `core`, and restore its affinity after."""
    if core is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# -- the mock host (a subprocess) ---------------------------------------------------------


def serve_mock() -> int:
    """Hold a librdkafka mock cluster until SIGTERM; print its address like fastcoord does.

    The address comes from the cluster's own metadata (its one broker's host and port, the
    same as the bootstrap.servers=HOST:PORT of its debug='mock' log line). Not from that
    log line: debug='mock' would stay on and log every request the mock serves, through a
    Python logger in this process, on the mock's core (it cost the mock about 40% of its
    core and a third of its heartbeat rate).
    """
    import confluent_kafka

    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    producer = confluent_kafka.Producer({"test.mock.num.brokers": 1})
    brokers = producer.list_topics(timeout=START_TIMEOUT_S).brokers
    if len(brokers) != 1:
        print(f"the mock cluster has {len(brokers)} brokers, not 1", flush=True)
        return 1
    (broker,) = brokers.values()
    print(
        f"listening on {broker.host}:{broker.port} "
        f"(librdkafka {confluent_kafka.libversion()[0]} mock cluster)",
        flush=True,
    )
    parent = os.getppid()
    while not stopping and os.getppid() == parent:  # also end if the benchmark died
        producer.poll(0.2)
    del producer
    return 0


def serve_responder() -> int:
    """The client's ceiling: answer each request frame at once with a Heartbeat v3 NONE.

    No Kafka server does less per heartbeat (it keeps no state and decodes nothing but the
    correlation id), so what the client measures against it is the most it can measure on
    this machine. One connection at a time; frames of one length are answered with numpy.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    print(f"listening on 127.0.0.1:{listener.getsockname()[1]} (reference responder)", flush=True)
    parent = os.getppid()
    listener.settimeout(1.0)
    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _respond(conn)
    return 0


def _respond(conn: socket.socket) -> None:
    answer = np.frombuffer(_HB_RESPONSE.pack(_HB_RESPONSE_SIZE, 0, 0, 0), dtype=np.uint8)
    pending = b""
    while True:
        data = conn.recv(262144)
        if not data:
            return
        if pending:
            data = pending + data
        pos = 0
        out: list[bytes] = []
        if len(data) >= 4:
            length = 4 + _SIZE.unpack_from(data)[0]
            count = len(data) // length
            if count >= 8:
                frames = np.frombuffer(data, dtype=np.uint8, count=count * length)
                frames = frames.reshape(count, length)
                sizes = frames[:, :4].copy().view(">i4").ravel()
                if (sizes == length - 4).all():
                    answers = np.empty((count, answer.size), dtype=np.uint8)
                    answers[:] = answer
                    answers[:, 4:8] = frames[:, 8:12]
                    out.append(answers.tobytes())
                    pos = count * length
        while len(data) - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            if len(data) - pos < 4 + size:
                break
            out.append(
                _HB_RESPONSE.pack(_HB_RESPONSE_SIZE, *_SIZE.unpack_from(data, pos + 8), 0, 0)
            )
            pos += 4 + size
        pending = data[pos:]
        if out:
            conn.sendall(b"".join(out))


COMMANDS: dict[str, Callable[[], int]] = {"mock": serve_mock, "responder": serve_responder}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: {sys.argv[0]} {'|'.join(COMMANDS)}", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(COMMANDS[sys.argv[1]]())
