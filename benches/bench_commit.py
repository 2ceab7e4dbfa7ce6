"""OffsetCommit throughput over loopback: `fastcoord serve` under each fsync policy against the
librdkafka mock cluster, measured in the same run by the same client.

Peers, each a subprocess pinned to the same core (the client to another), started and stopped
by PID (fastcoord.testing):
- `fastcoord serve --fsync always`, `--fsync batch` (the default, linger 5 ms) and
  `--fsync never`, each with its data directory in its own temporary working directory, on
  the disk that holds the system's temporary directory (so that fsync is real; the report
  names the file system);
- the librdkafka mock cluster (`python -m fastcoord.testing mock`), which keeps offsets in
  memory.

The client commits offsets for one group that has no members ("standalone" commits:
generation -1, member id ""), which Kafka, fastcoord and the mock all accept (the mock
checks members only of groups that have joined). Each OffsetCommit v8 request carries 100
partitions: 25 topics of 4 partitions, because the mock refuses partitions it does not
have (UNKNOWN_TOPIC_OR_PART) and the topics it creates on a Metadata request have 4
partitions (it serves no CreateTopics). Every request of a ring of 512 commits its own
offsets (1,000,000 + its place in the ring), so that consecutive requests change every
offset.

Two measurements per peer:
- pipelined: 64 requests (6,400 offsets) in flight on one connection for 2 s; offsets
  committed per second;
- one in flight: send, wait for the answer, repeat for 1.5 s; p50 and p99 round trip.

Every answer is checked: the first one is decoded in full (every partition's error code must
be NONE, 0); each later one must then be byte for byte that answer (with its own correlation
id, in order), or it is decoded in full and its error codes are counted. Any error code
other than NONE from any peer fails the benchmark. After the measurements, an OffsetFetch
checks that each peer holds, for all 100 partitions, the offsets of the last request it
answered. Each round rotates the peers' order; figures are medians over rounds. Before each
measurement every peer must be quiet (under 3% of a core): the peers share a core, and a
fastcoord compacting its log after a burst of commits would otherwise slow whichever peer
came next. The CPU time of each peer per committed offset and the time the processes waited
for a core (the host's contention, or the peer's own threads) are measured from /proc's
schedstat, and also the CPU a burst of commits leaves the peer to spend afterwards (its log
compaction); a plain write+fsync of a 4 KiB block in a temporary directory on the same disk
is timed for reference.

asv: `setup_cache` starts the peers, takes every measurement, stops the peers (also at exit)
and returns the figures, which the `track_*` methods report:

    .venv/bin/asv run --python=same --bench bench_commit --show-stderr

Directly, with a table of every peer and the ratios fastcoord / mock:

    .venv/bin/python -m benches.bench_commit [--rounds N] [--window W]

To profile the server under the pipelined load (it prints the server's PID, then loads it;
--window 1 for one request in flight):

    .venv/bin/python -m benches.bench_commit --load 30 --fsync never &
    .venv/bin/py-spy record --pid <PID> --duration 20 --nonblocking --format raw -o /tmp/c.raw
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from fastcoord import testing
from fastcoord.client.blocking import Connection, PeerError
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.framing import decode_response, encode_request
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)
from fastcoord.testing import ServerProcess
from fastcoord.testing_cpu import cores, pinned

from . import loopback
from .common import SMOKE, scaled

GROUP_ID = "bench-commit-group"
TOPICS = tuple(f"bench-commit-{t:02d}" for t in range(25))
PARTITIONS_PER_TOPIC = 4  # what the mock gives a topic it creates on a Metadata request
PARTITIONS = len(TOPICS) * PARTITIONS_PER_TOPIC  # offsets per OffsetCommit request
COMMIT_VERSION = 8
FETCH_VERSION = 3
METADATA_VERSION = 4  # the first with allow_auto_topic_creation
FIND_COORDINATOR_VERSION = 2
FIRST_OFFSET = 1_000_000
RING = 512  # distinct request frames (correlation ids 0..RING-1)
WINDOW = 64  # requests in flight, pipelined
ROUNDS = 1 if SMOKE else 3
# Each measurement stops at a count (of requests) or a time, whichever comes first.
ONE_IN_FLIGHT_COUNT = scaled(50_000)
ONE_IN_FLIGHT_SECONDS = 0.05 if SMOKE else 1.5
PIPELINED_COUNT = scaled(1_000_000)
PIPELINED_SECONDS = 0.1 if SMOKE else 2.0
WARMUP_SECONDS = 0.02 if SMOKE else 0.5
FSYNC_SAMPLES = 5 if SMOKE else 50
LOAD_TIMEOUT_S = 30.0

POLICIES = ("always", "batch", "never")
PEERS = (*(f"fsync-{p}" for p in POLICIES), "mock")
LABELS = {
    **{f"fsync-{p}": f"fastcoord --fsync {p}" for p in POLICIES},
    "mock": "librdkafka mock",
}

# -- the requests and the checks of their answers -----------------------------------------


def commit_request(offset: int) -> OffsetCommitRequest:
    """A standalone commit of `offset` for every partition of every benchmark topic."""
    return OffsetCommitRequest(
        group_id=GROUP_ID,
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            OffsetCommitRequestTopic(
                topic,
                [
                    OffsetCommitRequestPartition(p, offset, -1, -1, "")
                    for p in range(PARTITIONS_PER_TOPIC)
                ],
            )
            for topic in TOPICS
        ],
    )


def _header(api_key: ApiKey, version: int, correlation_id: int) -> RequestHeader:
    return RequestHeader(api_key, version, correlation_id, loopback.CLIENT_ID)


class CommitRing:
    """`size` OffsetCommit frames back to back: frame i has correlation id i and commits
    FIRST_OFFSET + i to every partition."""

    def __init__(self, size: int = RING) -> None:
        frames = [
            encode_request(
                _header(ApiKey.OFFSET_COMMIT, COMMIT_VERSION, i),
                commit_request(FIRST_OFFSET + i),
            )
            for i in range(size)
        ]
        self.frame_len = len(frames[0])
        if any(len(f) != self.frame_len for f in frames):
            raise AssertionError("commit frames differ in length")
        self.size = size
        self.data = memoryview(b"".join(frames))
        self.single = [bytes(f) for f in frames]

    def frames(self, start: int, count: int) -> list[memoryview]:
        """`count` frames from ring position `start`, as one or two contiguous views."""
        n, length = self.size, self.frame_len
        start %= n
        end = start + count
        if end <= n:
            return [self.data[start * length : end * length]]
        return [self.data[start * length :], self.data[: (end - n) * length]]


def commit_errors(response: OffsetCommitResponse) -> dict[int, int]:
    """{error code: partitions} of an OffsetCommit answer, NONE included."""
    codes: dict[int, int] = {}
    for topic in response.topics:
        for p in topic.partitions:
            codes[p.error_code] = codes.get(p.error_code, 0) + 1
    return codes


def _tally(errors: dict[int, int], codes: dict[int, int]) -> None:
    for code, n in codes.items():
        if code != ErrorCode.NONE:
            errors[code] = errors.get(code, 0) + n


@dataclass
class Expected:
    """The answer every commit must get: `body` follows the correlation id (for v8, the
    header's tagged fields, throttle time and every topic and partition with error 0)."""

    body: bytes

    @property
    def frame_len(self) -> int:  # size field included
        return 8 + len(self.body)


def _check_slowly(frame: bytes, expected_id: int, errors: dict[int, int]) -> None:
    """Decode one answer (without its size) in full and tally its error codes in `errors`.
    Raises on a wrong correlation id or a wrong shape."""
    correlation_id, response = decode_response(ApiKey.OFFSET_COMMIT, COMMIT_VERSION, frame)
    if correlation_id != expected_id:
        raise PeerError(f"correlation id {correlation_id}, expected {expected_id}")
    assert isinstance(response, OffsetCommitResponse)
    codes = commit_errors(response)
    if sum(codes.values()) != PARTITIONS:
        raise PeerError(f"an OffsetCommit answer of {sum(codes.values())} partitions")
    _tally(errors, codes)


def walk_answers(
    data: bytes, first: int, n: int, expected: Expected, errors: dict[int, int]
) -> tuple[int, int]:
    """Check the complete answers at the start of `data`, the first with correlation id
    `first` (mod n), the next first + 1, ...: (answers walked, bytes walked).

    The expected answer (`expected`) is compared with every answer of its length at once;
    any other answer is decoded in full and its error codes tallied in `errors`.
    """
    length = expected.frame_len
    count = len(data) // length
    if count:
        frames = np.frombuffer(data, dtype=np.uint8, count=count * length).reshape(count, length)
        head = frames[:, :8].copy().view(">i4")
        ids = (np.arange(first, first + count) % n).astype(np.int32)
        if (
            (head[:, 0] == length - 4).all()
            and (head[:, 1] == ids).all()
            and (frames[:, 8:] == np.frombuffer(expected.body, dtype=np.uint8)).all()
        ):
            return count, count * length
    pos = got = 0
    end = len(data)
    while end - pos >= 4:
        size = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        if end - pos < 4 + size:
            break
        frame = data[pos + 4 : pos + 4 + size]
        if size != length - 4 or frame[4:] != expected.body:
            _check_slowly(frame, (first + got) % n, errors)
        elif int.from_bytes(frame[:4], "big", signed=True) != (first + got) % n:
            raise PeerError(
                f"correlation id {int.from_bytes(frame[:4], 'big', signed=True)}, "
                f"expected {(first + got) % n}"
            )
        pos += 4 + size
        got += 1
    return got, pos


# -- a peer's session ---------------------------------------------------------------------


@dataclass
class Measurement(loopback.Measurement):
    last_frame: int = -1  # ring position of the last request answered

    @property
    def offsets(self) -> int:
        return self.requests * PARTITIONS

    @property
    def offsets_rate(self) -> float:
        return self.offsets / self.seconds

    @property
    def cpu_us_per_offset(self) -> float | None:
        return self.cpu_us_per(PARTITIONS)


@dataclass
class Session:
    name: str
    peer: ServerProcess
    client: Connection
    ring: CommitRing
    expected: Expected
    load_ms: float  # from the peer's start to its first commit answered NONE
    last_frame: int = 0


def _served(client: Connection, api_key: ApiKey, version: int) -> None:
    low, high = client.versions.get(api_key, (0, -1))
    if not low <= version <= high:
        raise PeerError(f"{api_key.name} v{version} not served (v{low}-{high})")


def _create_topics(client: Connection) -> None:
    """A Metadata request names the topics: both peers create them (the mock with 4
    partitions each); check that each has the partitions the commits name."""
    request = MetadataRequest(
        topics=[MetadataRequestTopic(name=t) for t in TOPICS], allow_auto_topic_creation=True
    )
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    while True:
        response = client.request(request, METADATA_VERSION)
        assert isinstance(response, MetadataResponse)
        partitions = {t.name: (t.error_code, len(t.partitions)) for t in response.topics}
        short = [
            t
            for t in TOPICS
            if t not in partitions
            or partitions[t][0] != 0
            or partitions[t][1] < PARTITIONS_PER_TOPIC
        ]
        if not short:
            return
        if time.monotonic() > deadline:
            raise PeerError(
                f"topics without {PARTITIONS_PER_TOPIC} partitions: "
                + ", ".join(f"{t} {partitions.get(t)}" for t in short[:3])
            )
        time.sleep(0.05)


def _first_commit(client: Connection, ring: CommitRing) -> Expected:
    """Commit ring frame 0 until the peer answers it (fastcoord answers
    COORDINATOR_LOAD_IN_PROGRESS while it loads its offsets log); every partition must be
    answered NONE. That answer is the one every later commit must get."""
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    while True:
        client.sock.sendall(ring.single[0])
        frame = client.read_frame()
        correlation_id, response = decode_response(ApiKey.OFFSET_COMMIT, COMMIT_VERSION, frame)
        assert isinstance(response, OffsetCommitResponse)
        codes = commit_errors(response)
        if correlation_id != 0 or sum(codes.values()) != PARTITIONS:
            raise PeerError(f"first commit: id {correlation_id}, codes {codes}")
        if codes == {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: PARTITIONS}:
            if time.monotonic() > deadline:
                raise PeerError("the peer is still loading its offsets")
            time.sleep(0.02)
            continue
        if codes != {ErrorCode.NONE: PARTITIONS}:
            raise PeerError(f"a standalone commit was answered {codes}")
        return Expected(frame[4:])


def _start(name: str, core: int | None) -> ServerProcess:
    if name == "mock":
        return testing.start_mock(core)
    return testing.start_fastcoord(
        None,  # a temporary directory: on the disk that holds the system's temporary directory
        *loopback.SERVE_ARGS,
        extra_args=(
            "--fsync",
            name.removeprefix("fsync-"),
            "--num-partitions",
            str(PARTITIONS_PER_TOPIC),
        ),
        wait_loaded=False,  # load_ms counts the load: _first_commit waits for it
        core=core,
        name=LABELS[name],
    )


def _open(name: str, core: int | None) -> Session:
    """Start a peer, find the group's coordinator, create the topics, commit once."""
    started = time.perf_counter()
    peer = _start(name, core)
    client = None
    try:
        bootstrap = Connection(peer.host, peer.port)
        try:
            bootstrap.api_versions()
            _served(bootstrap, ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION)
            found = bootstrap.request(
                FindCoordinatorRequest(key=GROUP_ID, key_type=0), FIND_COORDINATOR_VERSION
            )
            assert isinstance(found, FindCoordinatorResponse)
            if found.error_code != 0:
                raise PeerError(f"FindCoordinator: error {found.error_code}")
        finally:
            bootstrap.close()
        client = Connection(found.host, found.port)
        client.api_versions()
        for api_key, version in (
            (ApiKey.METADATA, METADATA_VERSION),
            (ApiKey.OFFSET_COMMIT, COMMIT_VERSION),
            (ApiKey.OFFSET_FETCH, FETCH_VERSION),
        ):
            _served(client, api_key, version)
        _create_topics(client)
        ring = CommitRing()
        expected = _first_commit(client, ring)
        load_ms = (time.perf_counter() - started) * 1000
        if name != "mock":
            policy = name.removeprefix("fsync-")
            if f"fsync {policy}" not in peer.log():
                raise PeerError(f"{peer.name} does not log its policy:\n{peer.log()}")
    except BaseException:
        if client is not None:
            client.close()
        peer.stop()
        raise
    return Session(name, peer, client, ring, expected, load_ms)


def committed(session: Session) -> dict[tuple[str, int], int]:
    """The group's committed offsets, by OffsetFetch."""
    request = OffsetFetchRequest(
        group_id=GROUP_ID,
        topics=[OffsetFetchRequestTopic(t, list(range(PARTITIONS_PER_TOPIC))) for t in TOPICS],
    )
    response = session.client.request(request, FETCH_VERSION)
    assert isinstance(response, OffsetFetchResponse)
    if response.error_code != 0:
        raise PeerError(f"OffsetFetch: error {response.error_code}")
    offsets: dict[tuple[str, int], int] = {}
    for topic in response.topics:
        for p in topic.partitions:
            if p.error_code != 0:
                raise PeerError(f"OffsetFetch {topic.name}[{p.partition_index}]: error")
            offsets[(topic.name, p.partition_index)] = p.committed_offset
    return offsets


def check_committed(session: Session) -> None:
    """Every partition holds the offset of the last request the peer answered."""
    offsets = committed(session)
    want = FIRST_OFFSET + session.last_frame
    wrong = {tp: o for tp, o in offsets.items() if o != want}
    if len(offsets) != PARTITIONS or wrong:
        raise PeerError(
            f"{session.peer.name}: {len(offsets)} partitions fetched, "
            f"{len(wrong)} not at {want}: {dict(list(wrong.items())[:3])}"
        )


# -- the measurements ---------------------------------------------------------------------


def one_in_flight(session: Session, count: int, max_seconds: float) -> Measurement:
    """Commit, wait for the answer, repeat: `count` times or `max_seconds`."""
    sock, ring, expected = session.client.sock, session.ring, session.expected
    frames, n = ring.single, ring.size
    need = expected.frame_len
    buf = bytearray(need)
    view = memoryview(buf)
    body = expected.body
    errors: dict[int, int] = {}
    latencies: list[int] = []
    clock = time.perf_counter_ns
    started = clock()
    deadline = started + int(max_seconds * 1e9)
    done = 0
    while done < count:
        t0 = clock()
        sock.sendall(frames[done % n])
        got = sock.recv_into(view, need)
        while got < 4 or got < 4 + int.from_bytes(buf[:4], "big", signed=True):
            if got == need:  # a longer answer than the expected one
                break
            more = sock.recv_into(view[got:], need - got)
            if not more:
                raise PeerError("peer closed the connection")
            got += more
        t1 = clock()
        latencies.append(t1 - t0)
        if got != need or view[8:] != body or int.from_bytes(buf[4:8], "big") != done % n:
            _read_slowly(sock, view[:got], done % n, errors)
        done += 1
        if t1 >= deadline:
            break
    session.last_frame = (done - 1) % n
    return Measurement(
        "one in flight",
        done,
        (clock() - started) / 1e9,
        errors,
        latencies,
        last_frame=session.last_frame,
    )


def _read_slowly(
    sock: socket.socket, head: memoryview, expected_id: int, errors: dict[int, int]
) -> None:
    """An answer that is not the expected one: read the rest of it, if longer, and decode."""
    size = int.from_bytes(head[:4], "big", signed=True)
    frame = bytes(head[4:])
    while len(frame) < size:
        chunk = sock.recv(size - len(frame))
        if not chunk:
            raise PeerError("peer closed the connection")
        frame += chunk
    _check_slowly(frame, expected_id, errors)


def pipelined(session: Session, count: int, max_seconds: float, window: int) -> Measurement:
    """Keep `window` commits outstanding: `count` answers or `max_seconds`, then drain.

    A new commit goes out for each answer read; every answer is checked (walk_answers).
    """
    sock, ring, expected = session.client.sock, session.ring, session.expected
    n = ring.size
    window = max(1, min(window, count, n))
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
        data = sock.recv(1 << 20)
        if not data:
            raise PeerError("peer closed the connection")
        if pending:
            data = pending + data
        got, used = walk_answers(data, received, n, expected, errors)
        pending = data[used:]
        received += got
        if sending and (received >= count or clock() >= deadline):
            sending = False
        if sending and got:
            more = min(got, count - sent)
            if more > 0:
                for part in ring.frames(sent, more):
                    sock.sendall(part)
                sent += more
    session.last_frame = (received - 1) % n
    return Measurement(
        f"pipelined ({window} in flight)",
        received,
        (clock() - started) / 1e9,
        errors,
        last_frame=session.last_frame,
    )


def fsync_latency_us(samples: int = FSYNC_SAMPLES) -> float:
    """p50 of a 4 KiB append and fsync, in a temporary directory (the peers' disk)."""
    block = os.urandom(4096)
    times: list[int] = []
    with tempfile.TemporaryDirectory(prefix="fastcoord-bench-fsync-") as d:
        fd = os.open(os.path.join(d, "f"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            for _ in range(samples):
                t0 = time.perf_counter_ns()
                os.write(fd, block)
                os.fsync(fd)
                times.append(time.perf_counter_ns() - t0)
        finally:
            os.close(fd)
    return statistics.median(times) / 1000


def file_system(path: str) -> str:
    """The type and device of the file system that holds `path` (from /proc/self/mounts)."""
    best, found = -1, "unknown"
    real = os.path.realpath(path)
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                device, mount, kind = line.split()[:3]
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) > best:
                    best, found = len(mount), f"{kind} on {device} ({mount})"
    except OSError:
        pass
    return found


def _load() -> list[float]:
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return []


def measure(rounds: int = ROUNDS, window: int = WINDOW) -> dict[str, Any]:
    """Start the peers, measure both modes `rounds` times, stop the peers: the figures."""
    if window > RING:
        raise ValueError(f"window {window} over the ring of {RING} requests")
    client_core, server_core = cores()
    load_before = _load()
    sessions: dict[str, Session] = {}
    samples: dict[str, dict[str, list[Measurement]]] = {
        name: {"one": [], "pipelined": []} for name in PEERS
    }
    figures: dict[str, Any] = {
        "rounds": rounds,
        "window": window,
        "partitions_per_request": PARTITIONS,
        "topics": len(TOPICS),
        "client_core": client_core,
        "server_core": server_core,
        "load_before": load_before,
        "data_fs": file_system(tempfile.gettempdir()),
        "fsync_p50_us": fsync_latency_us(),
    }
    try:
        with ThreadPoolExecutor(len(PEERS)) as pool:
            opening = {name: pool.submit(_open, name, server_core) for name in PEERS}
        sessions = {name: f.result() for name, f in opening.items() if f.exception() is None}
        failed = [e for f in opening.values() if (e := f.exception()) is not None]
        if failed:
            raise failed[0]
        pids = [s.peer.pid for s in sessions.values()]
        with pinned(client_core):
            for name in PEERS:  # warm-up, not counted
                pipelined(sessions[name], PIPELINED_COUNT, WARMUP_SECONDS, window)
            for r in range(rounds):
                for name in PEERS[r % len(PEERS) :] + PEERS[: r % len(PEERS)]:
                    s = sessions[name]
                    # Every peer quiet first: a compaction after the last peer's burst of
                    # commits must not slow this one (it shares the core).
                    loopback.settle(pids)
                    samples[name]["one"].append(
                        loopback.with_cpu(
                            s.peer.pid, one_in_flight, s, ONE_IN_FLIGHT_COUNT, ONE_IN_FLIGHT_SECONDS
                        )
                    )
                    loopback.settle(pids)
                    m = loopback.with_cpu(
                        s.peer.pid, pipelined, s, PIPELINED_COUNT, PIPELINED_SECONDS, window
                    )
                    # What the burst left this peer to do (compaction), counted as its own.
                    m.background_s = loopback.settle([s.peer.pid])[s.peer.pid]
                    samples[name]["pipelined"].append(m)
        for s in sessions.values():
            check_committed(s)
    finally:
        for s in sessions.values():
            s.client.close()
            s.peer.terminate()  # all at once: each takes a moment to shut down
        for s in sessions.values():
            s.peer.stop()

    figures["load_after"] = _load()
    for name in PEERS:
        one, piped = samples[name]["one"], samples[name]["pipelined"]
        errors: dict[int, int] = {}
        for m in one + piped:
            _tally(errors, m.errors)
        figures[name] = {
            "pipelined_rate": statistics.median(m.offsets_rate for m in piped),
            "p50_us": statistics.median(m.percentile_us(0.5) for m in one),
            "p99_us": statistics.median(m.percentile_us(0.99) for m in one),
            "one_in_flight_rate": statistics.median(m.offsets_rate for m in one),
            "pipelined_cpu_us": loopback.median([m.cpu_us_per_offset for m in piped]),
            "pipelined_cpu_us_with_background": loopback.median(
                [m.cpu_us_with_background(PARTITIONS) for m in piped]
            ),
            "one_in_flight_cpu_us": loopback.median([m.cpu_us_per_offset for m in one]),
            # In cores: on a CPU, and runnable but waiting for one (the host's contention).
            **loopback.cpu_shares(piped),
            "rounds_pipelined_rate": [m.offsets_rate for m in piped],
            "rounds_p50_us": [m.percentile_us(0.5) for m in one],
            "rounds_p99_us": [m.percentile_us(0.99) for m in one],
            "requests": sum(m.requests for m in one + piped),
            "errors": errors,
            "load_ms": sessions[name].load_ms,
        }
    failing = {LABELS[n]: figures[n]["errors"] for n in PEERS if figures[n]["errors"]}
    if failing:
        raise PeerError(
            f"commits answered with errors (error code: partitions): {failing}; "
            "timing error answers proves nothing"
        )
    for policy in POLICIES:
        fc, mock = figures[f"fsync-{policy}"], figures["mock"]
        figures[f"ratio_pipelined_{policy}"] = fc["pipelined_rate"] / mock["pipelined_rate"]
        figures[f"ratio_p50_{policy}"] = fc["p50_us"] / mock["p50_us"]
        figures[f"ratio_p99_{policy}"] = fc["p99_us"] / mock["p99_us"]
    return figures


# -- asv ----------------------------------------------------------------------------------


def _track(attr: str, get: Callable[[dict[str, Any]], Any], unit: str, doc: str) -> Any:
    """A track_* method of CommitLoopback: the figure `get` picks from setup_cache's."""

    def track(self: object, figures: dict[str, Any]) -> float:
        value = get(figures)
        return float("nan") if value is None else float(value)

    track.__name__ = track.__qualname__ = attr
    track.__doc__ = doc
    track.unit = unit  # type: ignore[attr-defined]
    return track


def _figure(*path: str) -> Callable[[dict[str, Any]], Any]:
    def get(figures: dict[str, Any]) -> Any:
        value: Any = figures
        for key in path:
            value = value[key]
        return value

    return get


def _error_partitions(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda figures: sum(figures[name]["errors"].values())


class CommitLoopback:
    """OffsetCommit v8 of 100 partitions, one connection, each peer pinned to one core.

    Its track_* methods (one per figure, for every peer and every fsync policy) are added
    below the class."""

    timeout = 300

    def setup_cache(self) -> dict[str, Any]:
        return measure()

    setup_cache.timeout = 300  # type: ignore[attr-defined]


def _add_tracks() -> None:
    tracks: list[tuple[str, Callable[[dict[str, Any]], Any], str, str]] = []
    for name in PEERS:
        label, key = LABELS[name], name.replace("-", "_")
        tracks += [
            (
                f"track_{key}_pipelined_rate",
                _figure(name, "pipelined_rate"),
                "offsets/s",
                f"{label}: offsets committed per second, {WINDOW} requests in flight.",
            ),
            (
                f"track_{key}_one_in_flight_p50",
                _figure(name, "p50_us"),
                "us",
                f"{label}: p50 commit round trip, one request in flight.",
            ),
            (
                f"track_{key}_one_in_flight_p99",
                _figure(name, "p99_us"),
                "us",
                f"{label}: p99 commit round trip, one request in flight.",
            ),
            (
                f"track_{key}_pipelined_cpu_per_offset",
                _figure(name, "pipelined_cpu_us"),
                "us",
                f"{label}: the peer's CPU time per committed offset, pipelined.",
            ),
            (
                f"track_{key}_pipelined_cpu_per_offset_with_compaction",
                _figure(name, "pipelined_cpu_us_with_background"),
                "us",
                f"{label}: the peer's CPU time per committed offset, pipelined, with the work "
                "the burst left it to do afterwards (its log compaction).",
            ),
            (
                f"track_{key}_error_partitions",
                _error_partitions(name),
                "partitions",
                f"{label}: partitions answered with an error (any fails the benchmark).",
            ),
        ]
    for policy in POLICIES:
        tracks += [
            (
                f"track_ratio_pipelined_fsync_{policy}_over_mock",
                _figure(f"ratio_pipelined_{policy}"),
                "ratio",
                f"Offsets committed per second, fastcoord --fsync {policy} / mock.",
            ),
            (
                f"track_ratio_p50_fsync_{policy}_over_mock",
                _figure(f"ratio_p50_{policy}"),
                "ratio",
                f"p50 commit round trip, fastcoord --fsync {policy} / mock.",
            ),
            (
                f"track_ratio_p99_fsync_{policy}_over_mock",
                _figure(f"ratio_p99_{policy}"),
                "ratio",
                f"p99 commit round trip, fastcoord --fsync {policy} / mock.",
            ),
        ]
    for attr, get, unit, doc in tracks:
        setattr(CommitLoopback, attr, _track(attr, get, unit, doc))


_add_tracks()


# -- command line -------------------------------------------------------------------------


def report(figures: dict[str, Any]) -> str:
    mock = figures["mock"]
    lines = [
        f"OffsetCommit v{COMMIT_VERSION} over loopback, {figures['partitions_per_request']} "
        f"partitions ({figures['topics']} topics) per request, standalone commits of one group, "
        f"one connection; server core {figures['server_core']}, client core "
        f"{figures['client_core']}; median of {figures['rounds']} round(s)",
        f"data directories: {figures['data_fs']}; write+fsync of 4 KiB there: "
        f"p50 {figures['fsync_p50_us']:.0f} us; load average before "
        f"{figures['load_before']}, after {figures['load_after']}",
        "",
        f"| peer | pipelined ({figures['window']} in flight) offsets/s | / mock | "
        "one in flight p50 | / mock | p99 | / mock | one in flight offsets/s | server CPU per "
        "offset, pipelined (cores used) | error partitions |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in PEERS:
        f = figures[name]
        cpu = (
            f"{f['pipelined_cpu_us']:.2f} us ({f['pipelined_server_run']:.2f})"
            if f["pipelined_cpu_us"] is not None
            else "n/a"
        )
        errors = ", ".join(f"{n} x error {c}" for c, n in sorted(f["errors"].items())) or "none"
        rate_ratio = f["pipelined_rate"] / mock["pipelined_rate"]
        p50_ratio = f["p50_us"] / mock["p50_us"]
        p99_ratio = f["p99_us"] / mock["p99_us"]
        lines.append(
            f"| {LABELS[name]} | {f['pipelined_rate']:,.0f} | {rate_ratio:.2f}x | "
            f"{f['p50_us']:,.0f} us | {p50_ratio:.2f}x | {f['p99_us']:,.0f} us | "
            f"{p99_ratio:.2f}x | "
            f"{f['one_in_flight_rate']:,.0f} | {cpu} | {errors} of "
            f"{f['requests'] * PARTITIONS:,} |"
        )
    lines += [
        "",
        *(
            f"rounds, {LABELS[name]}: pipelined "
            + ", ".join(f"{v:,.0f}" for v in figures[name]["rounds_pipelined_rate"])
            + " offsets/s; p50 "
            + ", ".join(f"{v:,.0f}" for v in figures[name]["rounds_p50_us"])
            + " us; p99 "
            + ", ".join(f"{v:,.0f}" for v in figures[name]["rounds_p99_us"])
            + " us"
            for name in PEERS
        ),
        loopback.cores_line(figures, PEERS, LABELS),
        "server CPU per offset, pipelined, with what the burst left it to do afterwards "
        "(compaction): "
        + "; ".join(
            f"{LABELS[name]} {figures[name]['pipelined_cpu_us_with_background']:.2f} us"
            for name in PEERS
            if figures[name]["pipelined_cpu_us_with_background"] is not None
        ),
        "server CPU per offset, one in flight: "
        + "; ".join(
            f"{LABELS[name]} {figures[name]['one_in_flight_cpu_us']:.2f} us"
            for name in PEERS
            if figures[name]["one_in_flight_cpu_us"] is not None
        ),
        "start to first commit answered: "
        + "; ".join(f"{LABELS[n]} {figures[n]['load_ms']:.0f} ms" for n in PEERS),
    ]
    return "\n".join(lines)


def load(seconds: float, policy: str, window: int = WINDOW) -> None:
    """Pipelined commits against `fastcoord serve --fsync policy` for `seconds` (window 1:
    one in flight), printing the server's PID first, for a profiler to watch."""
    client_core, server_core = cores()
    session = _open(f"fsync-{policy}", server_core)
    try:
        print(f"fastcoord serve pid {session.peer.pid} (--fsync {policy})", flush=True)
        done = 0
        started = time.monotonic()
        with pinned(client_core):
            while time.monotonic() - started < seconds:
                if window <= 1:
                    m = one_in_flight(session, 10**9, 1.0)
                else:
                    m = pipelined(session, 10**9, 1.0, window)
                if m.errors:
                    raise PeerError(f"commits answered with errors: {m.errors}")
                done += m.offsets
        elapsed = time.monotonic() - started
        check_committed(session)
        print(f"{done:,} offsets committed in {elapsed:.1f} s: {done / elapsed:,.0f}/s")
    finally:
        session.client.close()
        session.peer.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benches.bench_commit",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per peer and mode")
    parser.add_argument(
        "--window", type=int, default=WINDOW, help=f"requests in flight, pipelined (<= {RING})"
    )
    parser.add_argument(
        "--load",
        type=float,
        metavar="SECONDS",
        help="only load fastcoord with commits (print its PID) for a profiler",
    )
    parser.add_argument(
        "--fsync", choices=POLICIES, default="batch", help="with --load: the server's policy"
    )
    args = parser.parse_args(argv)
    if args.load is not None:
        load(args.load, args.fsync, args.window)
        return 0
    print(report(measure(args.rounds, args.window)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
