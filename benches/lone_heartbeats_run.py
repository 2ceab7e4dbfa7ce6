"""Server CPU per lone heartbeat: many members, a connection each, heartbeats spread evenly.

    python -m benches.lone_heartbeats_run --connections 18000 --rate 6000 --seconds 30

What real clients do to a coordinator: every member on its own connection sends one
Heartbeat every heartbeat.interval.ms, so nearly every read the server makes holds one
heartbeat. Starts `fastcoord serve` (in memory, pinned to one core when there are two),
joins `--connections` members, each alone in its group, on a connection of its own (in
batches, so that the server's listen queue never overflows), then sends `--rate`
heartbeats a second spread evenly over the connections, in round robin (the worst case for
batching: one heartbeat per read, seldom two ready at once), from one plain-Python epoll
loop pinned to the other core. Every answer is checked (its size, correlation id and error
code 0). Over the last `--seconds` it reads the server's CPU time from /proc: CPU per
heartbeat, and the round trips' p50/p99. With `--strace`, `strace -c -f` counts the
server's system calls for 5 s after that window, per heartbeat; with `--perf-stat`, perf
counts them (and context switches) in the window itself; with `--perf-split`, perf record
samples the server through the window and splits its CPU into user space and kernel by the
samples' addresses. Nothing here runs at import.

    python -m benches.lone_heartbeats_run --connections 300 --rate 3000 --server both

drives the librdkafka mock cluster the same way after fastcoord (`--server mock` alone),
and prints the ratio of their CPU per heartbeat, each split into user space and kernel
(/proc/PID/stat). The mock admits a new member without MEMBER_ID_REQUIRED, and joins slowly
(it took 26 s to answer 200 JoinGroups of 200 new groups at once), so its runs stay in the
hundreds of connections; it serves every connection with one poll() over all of them, so
its CPU per heartbeat grows with the connections (the kernel's share: 374 us at 1,000), and
a ratio taken at thousands would flatter fastcoord.
"""

from __future__ import annotations

import argparse
import math
import os
import select
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.framing import decode_response, encode_request
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from fastcoord.protocol.schema import Request, Response
from fastcoord.server.startup import raise_file_limit
from fastcoord.testing import fastcoord_server, mock_cluster
from fastcoord.testing_cpu import cores, sched_seconds, user_system_seconds

CLIENT_ID = "fastcoord-lone"
VERSION = 3  # Heartbeat v3, as librdkafka sends
BATCH = 500  # members joining at once
_ANSWER = struct.Struct(">iiih")  # size, correlation id, throttle time, error code
_CORRELATION = struct.Struct(">i")  # at byte 8 of a request frame: after size, key, version


class Address(Protocol):
    """Where members connect: a ServerProcess, or a node of a cluster known by address."""

    host: str
    port: int


class Members:
    """`count` members, each alone in its group, each on its own connection.

    The groups are `lone-0`, `lone-1`, ... unless `groups` names them (a cluster node
    answers NOT_COORDINATOR for groups it does not own, so a caller driving one node gives
    groups of that node's partitions)."""

    def __init__(self, server: Address, count: int, groups: Sequence[str] | None = None) -> None:
        names = [f"lone-{i}" for i in range(count)] if groups is None else list(groups)
        if len(names) < count:
            raise ValueError(f"{count} members need {count} groups, not {len(names)}")
        self.socks: list[socket.socket] = []
        self.frames: list[bytearray] = []  # each member's heartbeat frame
        self.joined: list[tuple[str, int, str]] = []  # (group, generation, member id) each
        for start in range(0, count, BATCH):
            self._join(server, names[start : min(count, start + BATCH)])

    def _join(self, server: Address, groups: list[str]) -> None:
        socks = [socket.create_connection((server.host, server.port)) for _ in groups]
        for s in socks:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        first = ask_all(socks, [(join(g, ""), 5) for g in groups])
        # fastcoord, as Kafka, asks a new member to join again with the id it was given
        # (MEMBER_ID_REQUIRED); the librdkafka mock admits it at once.
        again = [(s, g, a) for s, g, a in zip(socks, groups, first, strict=True) if a.error_code]
        rejoined = iter(
            ask_all([s for s, _, _ in again], [(join(g, a.member_id), 5) for _, g, a in again])
        )
        joined = [next(rejoined) if a.error_code else a for a in first]
        for a in joined:
            if a.error_code != ErrorCode.NONE:
                raise RuntimeError(f"JoinGroup: error {a.error_code}")
        syncs = [
            (
                SyncGroupRequest(
                    group_id=g,
                    generation_id=a.generation_id,
                    member_id=a.member_id,
                    assignments=[SyncGroupRequestAssignment(a.member_id, b"")],
                ),
                3,
            )
            for g, a in zip(groups, joined, strict=True)
        ]
        for synced in ask_all(socks, syncs):
            if synced.error_code != ErrorCode.NONE:
                raise RuntimeError(f"SyncGroup: error {synced.error_code}")
        for s, g, a in zip(socks, groups, joined, strict=True):
            header = RequestHeader(ApiKey.HEARTBEAT, VERSION, 0, CLIENT_ID)
            request = HeartbeatRequest(g, a.generation_id, a.member_id, None)
            self.frames.append(bytearray(encode_request(header, request)))
            self.joined.append((g, a.generation_id, a.member_id))
            s.setblocking(False)
        self.socks += socks

    def close(self) -> None:
        for s in self.socks:
            s.close()


def join(group: str, member_id: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=300_000,
        rebalance_timeout_ms=300_000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol("range", b"")],
    )


def ask_all(socks: list[socket.socket], requests: list[tuple[Request, int]]) -> list[Any]:
    """One request on each socket, all sent before any answer is read."""
    for s, (request, version) in zip(socks, requests, strict=True):
        s.sendall(encode_request(RequestHeader(request.API_KEY, version, 1, CLIENT_ID), request))
    answers: list[Response] = []
    for s, (request, version) in zip(socks, requests, strict=True):
        size = struct.unpack(">i", read_exactly(s, 4))[0]
        answers.append(decode_response(request.API_KEY, version, read_exactly(s, size))[1])
    return answers


def read_exactly(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the server closed a member's connection")
        buf += chunk
    return buf


class Driver:
    """Heartbeats in round robin at an even pace; the answers checked as they come."""

    def __init__(self, members: Members, rate: float) -> None:
        self.members = members
        self.interval = 1.0 / rate
        self.epoll = select.epoll()
        self.by_fd = {s.fileno(): i for i, s in enumerate(members.socks)}
        for s in members.socks:
            self.epoll.register(s.fileno(), select.EPOLLIN)
        self.sent_at = [0.0] * len(members.socks)  # 0: no heartbeat in flight
        self.correlation = [0] * len(members.socks)
        self.next = 0
        self.answered = 0
        self.late = 0  # due while the member's last heartbeat was still unanswered
        self.latencies: list[float] = []

    def run(self, seconds: float, record: bool = False) -> None:
        start = time.monotonic()
        due = start
        end = start + seconds
        socks = self.members.socks
        count = len(socks)
        while True:
            now = time.monotonic()
            if now >= end:
                break
            while due <= now:
                i = self.next
                self.next = (i + 1) % count
                due += self.interval
                if self.sent_at[i]:
                    self.late += 1
                    continue
                self.correlation[i] += 1
                frame = self.members.frames[i]
                _CORRELATION.pack_into(frame, 8, self.correlation[i])
                self.sent_at[i] = time.monotonic()
                socks[i].send(frame)  # 46 bytes on an idle socket: always whole
            for fd, _ in self.epoll.poll(max(0.0, min(due, end) - time.monotonic()), 1024):
                i = self.by_fd[fd]
                data = socks[i].recv(64)
                if len(data) != _ANSWER.size:
                    raise RuntimeError(f"member {i}: an answer of {len(data)} bytes")
                _, correlation, _, error = _ANSWER.unpack(data)
                if correlation != self.correlation[i] or error != ErrorCode.NONE:
                    raise RuntimeError(f"member {i}: answer {correlation} with error {error}")
                if record:
                    self.latencies.append(time.monotonic() - self.sent_at[i])
                self.sent_at[i] = 0.0
                self.answered += 1


def strace_calls(pid: int, seconds: float, driver: Driver) -> tuple[dict[str, int], int]:
    """The server's system calls over `seconds` of the load (strace -c -f), and the
    heartbeats answered meanwhile."""
    out = Path(tempfile.mkdtemp(prefix="fastcoord-strace-")) / "calls"
    tracer = subprocess.Popen(
        ["strace", "-c", "-f", "-p", str(pid), "-o", str(out)], stderr=subprocess.DEVNULL
    )
    try:
        time.sleep(0.5)  # attached
        before = driver.answered
        driver.run(seconds)
        answered = driver.answered - before
    finally:
        tracer.send_signal(2)
        tracer.wait(timeout=30)
    calls: dict[str, int] = {}
    for line in out.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[-1].isidentifier() and fields[3].isdigit():
            calls[fields[-1]] = int(fields[3])
    return calls, answered


EVENTS = ("epoll_wait", "epoll_ctl", "recvfrom", "sendto", "read", "write")


def perf_stat(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """perf stat counting the server's system calls and context switches until SIGINT:
    cheap enough to run in the measured window (strace is not)."""
    events = [f"syscalls:sys_enter_{e}" for e in EVENTS] + ["context-switches"]
    return subprocess.Popen(
        ["perf", "stat", "-x", ",", "-e", ",".join(events), "-p", str(pid), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def perf_sampler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """perf record sampling the server's threads on a timer (cpu-clock, 999 a second) until
    SIGINT. /proc's user and system times are themselves sampled, a tick at a time, and
    at a few percent of a core their split moved from run to run by more than the aim's
    margin; thousands of samples, each with its instruction address, split it steadily."""
    return subprocess.Popen(
        ["perf", "record", "-e", "cpu-clock", "-F", "999", "-p", str(pid), "-o", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


KERNEL_SPACE = 0xFFFF_8000_0000_0000  # x86-64: addresses at and above are the kernel's


def sample_split(out: Path) -> tuple[int, int]:
    """(user-space samples, kernel samples) in a perf record file."""
    done = subprocess.run(
        ["perf", "script", "-i", str(out), "-F", "ip"], capture_output=True, text=True
    )
    user = kernel = 0
    for line in done.stdout.split():
        if int(line, 16) >= KERNEL_SPACE:
            kernel += 1
        else:
            user += 1
    return user, kernel


def perf_counts(out: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in out.read_text().splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[0].isdigit():
            counts[fields[2].removeprefix("syscalls:sys_enter_")] = int(fields[0])
    return counts


@dataclass
class Measured:
    """One peer's figures over the measured window."""

    peer: str
    connections: int
    joined_s: float
    seconds: float
    answered: int
    asked: float
    late: int
    cpu: float  # seconds on a CPU (schedstat)
    waited: float  # seconds runnable, waiting for a core
    user: float  # seconds of user-space CPU (/proc/PID/stat)
    system: float  # seconds of kernel CPU on the process's behalf
    latencies_us: np.ndarray[Any, Any]
    counts: dict[str, int]
    calls: dict[str, int]
    traced: int
    samples: tuple[int, int] | None  # perf record's (user, kernel) samples, --perf-split

    @property
    def sampled(self) -> bool:
        """Whether perf record's samples split the CPU (taken, and some)."""
        return bool(self.samples and sum(self.samples))

    def user_share(self) -> float:
        """User-space CPU over kernel CPU: by perf record's samples when taken (/proc's
        tick-sampled split moved from 0.25 to 1.2 between runs where the samples said
        0.09 to 0.10), else by /proc."""
        if self.samples and self.sampled:
            user, kernel = self.samples
            return user / max(kernel, 1)
        return self.user / self.system if self.system else math.inf

    def split_by(self) -> str:
        return "perf record's samples" if self.sampled else "/proc"

    def per_heartbeat_us(self, seconds: float) -> float:
        return seconds / self.answered * 1e6

    def line(self) -> str:
        lat = self.latencies_us
        return (
            f"{self.peer}: {self.connections:,} connections (joined in {self.joined_s:.1f} s), "
            f"{self.answered / self.seconds:,.0f} heartbeats/s answered (asked "
            f"{self.asked:,.0f}/s, {self.late} skipped: still in flight); server "
            f"{self.cpu / self.seconds:.3f} cores, {self.per_heartbeat_us(self.cpu):.1f} us CPU "
            f"per heartbeat (user {self.per_heartbeat_us(self.user):.1f}, kernel "
            f"{self.per_heartbeat_us(self.system):.1f}), waited {self.waited:.2f} s for a core "
            f"in {self.seconds:.0f} s; round trip p50 {np.percentile(lat, 50):.0f} us, "
            f"p99 {np.percentile(lat, 99):.0f} us"
        )


def measure(
    peer: str, server: Any, args: argparse.Namespace, tmp: Path, groups: Sequence[str] | None
) -> Measured:
    """Join the members to `server` (a ServerProcess), drive them through the warm-up and
    the window, and read the server's CPU over the window."""
    started = time.monotonic()
    members = Members(server, args.connections, groups)
    joined_s = time.monotonic() - started
    counter = sampler = None
    try:
        driver = Driver(members, args.rate)
        driver.run(args.warmup)
        stat = tmp / f"perf-stat-{peer}"
        counter = perf_stat(server.pid, stat) if args.perf_stat else None
        record = tmp / f"perf-record-{peer}"
        sampler = perf_sampler(server.pid, record) if args.perf_split else None
        before, answered, t0 = sched_seconds(server.pid), driver.answered, time.monotonic()
        split = user_system_seconds(server.pid)
        driver.run(args.seconds, record=True)
        after, t1 = sched_seconds(server.pid), time.monotonic()
        split_after = user_system_seconds(server.pid)
        if counter is not None:
            counter.send_signal(2)
            counter.wait(timeout=30)
        counts = perf_counts(stat) if counter is not None else {}
        if sampler is not None:
            sampler.send_signal(2)
            sampler.wait(timeout=60)
        samples = sample_split(record) if sampler is not None else None
        answered = driver.answered - answered
        calls, traced = strace_calls(server.pid, 5, driver) if args.strace else ({}, 0)
    finally:
        members.close()
        for perf in (counter, sampler):  # stopped above, unless the window failed
            if perf is not None and perf.poll() is None:
                perf.kill()
                perf.wait()
    assert before is not None and after is not None
    return Measured(
        peer=peer,
        connections=args.connections,
        joined_s=joined_s,
        seconds=t1 - t0,
        answered=answered,
        asked=args.rate,
        late=driver.late,
        cpu=after[0] - before[0],
        waited=after[1] - before[1],
        user=split_after[0] - split[0],
        system=split_after[1] - split[1],
        latencies_us=np.array(driver.latencies) * 1e6,
        counts=counts,
        calls=calls,
        traced=traced,
        samples=samples,
    )


def report(measured: Measured) -> None:
    print(measured.line(), flush=True)
    if measured.counts:
        per = ", ".join(
            f"{name} {n / measured.answered:.2f}" for name, n in measured.counts.items()
        )
        print(f"  per heartbeat in the window (perf stat): {per}")
    if measured.samples is not None and not measured.sampled:
        print("  perf record in the window: no samples")
    elif measured.samples:
        user, kernel = measured.samples
        cpu_us = measured.per_heartbeat_us(measured.cpu)
        share = user / (user + kernel)
        print(
            f"  perf record in the window: {user + kernel:,} samples, user space {share:.1%} "
            f"(user {cpu_us * share:.1f} us, kernel {cpu_us * (1 - share):.1f} us a "
            f"heartbeat): user/kernel {measured.user_share():.2f}"
        )
    if measured.calls:
        per = ", ".join(
            f"{name} {n / measured.traced:.2f}" for name, n in sorted(measured.calls.items()) if n
        )
        print(f"  system calls per heartbeat (strace -c -f, {measured.traced:,} heartbeats): {per}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=18_000)
    parser.add_argument("--rate", type=float, default=6_000, help="heartbeats per second")
    parser.add_argument("--seconds", type=float, default=30, help="the measured window")
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument(
        "--server",
        choices=("fastcoord", "mock", "both"),
        default="fastcoord",
        help="the peer: fastcoord serve, the librdkafka mock cluster, or both in turn (the "
        "mock second), with their ratios",
    )
    parser.add_argument("--strace", action="store_true", help="count system calls after")
    parser.add_argument(
        "--perf-stat", action="store_true", help="count system calls in the window (perf)"
    )
    parser.add_argument(
        "--perf-split",
        action="store_true",
        help="split the window's CPU into user space and kernel by perf record's samples",
    )
    args = parser.parse_args(argv)
    if (args.perf_stat or args.perf_split) and shutil.which("perf") is None:
        parser.error("--perf-stat and --perf-split need perf (Debian's linux-perf)")
    raise_file_limit()  # the peers inherit it: the mock's host does not raise its own
    client_core, server_core = cores()
    if client_core is not None:
        os.sched_setaffinity(0, {client_core})
    results: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="fastcoord-lone-") as name:
        tmp = Path(name)
        if args.server in ("fastcoord", "both"):
            serve_args = ("--in-memory", "--group-initial-rebalance-delay-ms", "0")
            with fastcoord_server(tmp, *serve_args, core=server_core) as server:
                results.append(measure("fastcoord", server, args, tmp, None))
            report(results[-1])
        if args.server in ("mock", "both"):
            with mock_cluster(server_core) as server:
                results.append(measure("librdkafka mock", server, args, tmp, None))
            report(results[-1])
    if len(results) == 2:
        ours, mock = results
        ratio = ours.per_heartbeat_us(ours.cpu) / mock.per_heartbeat_us(mock.cpu)
        print(
            f"fastcoord / mock, CPU per heartbeat: {ratio:.2f}x (aim <= 1); fastcoord's "
            f"user-space CPU / its kernel CPU: {ours.user_share():.2f} ({ours.split_by()}; "
            f"aim <= 0.25); the mock's: {mock.user_share():.2f} ({mock.split_by()})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
