"""What security costs the server on one core: logins, TLS, and floods of failed logins.

    python -m benches.security_run                        # every part: about 4 minutes
    python -m benches.security_run --parts logins,timing  # some of them

A client that logs in pays for its connection, its TLS handshake and its SASL exchange
before its first heartbeat, and a server facing many clients pays for all of theirs; a
server under a flood of wrong passwords must go on answering the members it already has.
This measures both on `fastcoord serve` (in memory, pinned to one core), from clients pinned
to the other core, and the librdkafka mock's pipelined heartbeats in the same run, as the
yardstick that the machine's drift moves with every other figure. Parts (`--parts`):

- `mock`: the librdkafka mock's pipelined heartbeats/s and CPU a heartbeat (bench_server's
  measurement, benches/loopback.py), at the start of the run and again at its end;
- `logins`: logins a second, each on a new connection closed after it: PLAIN, SCRAM-SHA-256
  and SCRAM-SHA-512 over SASL_PLAINTEXT and over SASL_SSL (a full TLS handshake each, no
  session resumption), a TLS handshake and one ApiVersions alone (SSL), and a connection
  and one ApiVersions alone (PLAINTEXT); from `--login-clients` processes of
  `--login-concurrency` logins in flight each. Server CPU a login from /proc; the clients'
  CPU too, to show when they, not the server, were the limit;
- `heartbeats`: `--hb-connections` members, each on its own connection, heartbeating at
  `--hb-rate` a second spread evenly, over PLAINTEXT and over SSL (the same server, in
  turn): server CPU a heartbeat, round trip p50/p99;
- `flood`: `--flood-members` members on PLAINTEXT heartbeating at `--flood-member-rate`,
  with no flood, then while `--flooders` processes (SCHED_IDLE, on the client core: they
  never delay the members' client) log in with a wrong password as fast as they can over
  SASL_PLAINTEXT, then with no flood again; twice, each on a server of its own: the flooders
  first wait for each failure's answer, then abandon each connection once its password is
  sent. The members' p50/p99 and errors, the failed logins a second, the server's CPU a
  failed login, and what the flood left in the server (open files, connections in
  CLOSE-WAIT, connections refused for max.connections);
- `timing`: the time from sending the SaslAuthenticate that carries the credentials to its
  failure answer, for an unknown user and a wrong password, PLAIN and SCRAM-SHA-256, with
  connection.failed.authentication.delay.ms 100 and 0: can the answer's timing tell them
  apart?

The clients are plain Python: epoll loops of generator tasks over non-blocking sockets (TLS
through the standard library, the server's certificate not verified: a client's check costs
the client, not the server), SCRAM through scramp, its client-final made by
fastcoord.client.login.scram_final with the salted password cached per salt, as a client
could (PBKDF2 once per password rather than once per login). Every answer is
checked. Nothing runs at import; every measurement is bounded in time and in count; every
server is started and stopped by PID on 127.0.0.1 by fastcoord.testing.
"""

from __future__ import annotations

import argparse
import errno
import functools
import hashlib
import multiprocessing
import os
import platform
import random
import select
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Generator, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import scramp

from fastcoord import testing
from fastcoord.client.blocking import PeerError
from fastcoord.client.login import scram_final, server_final_verified
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode, error_name
from fastcoord.protocol.framing import decode_response, encode_request
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from fastcoord.protocol.schema import Request, Response
from fastcoord.server.startup import raise_file_limit
from fastcoord.testing import ServerProcess
from fastcoord.testing_cpu import cores, sched_seconds

from . import loopback
from .lone_heartbeats_run import ask_all

PARTS = ("mock", "logins", "heartbeats", "flood", "timing")
CLIENT_ID = "fastcoord-security"
USER, PASSWORD, WRONG_PASSWORD, UNKNOWN_USER = "alice", "secret", "not-the-secret", "mallory"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
HANDSHAKE_VERSION, AUTHENTICATE_VERSION, API_VERSIONS_VERSION = 1, 2, 0
HEARTBEAT_VERSION, JOIN_VERSION, SYNC_VERSION = 3, 5, 3
JOIN_BATCH = 250  # members joining at once
TASK_TIMEOUT_S = 15.0  # a login (or a try) not done in this time is given up, and counted
DRAIN_S = 5.0  # after a window, how long the logins in flight may take to finish
_ANSWER = struct.Struct(">iiih")  # a Heartbeat v3 answer: size, correlation id, throttle, error
_CORRELATION = struct.Struct(">i")  # at byte 8 of a request frame

# -- the server -------------------------------------------------------------------------------


def serve_args(certificates: testing.Certificates, delay_ms: int = 100) -> list[str]:
    """`fastcoord serve` with a listener of each security protocol, one user."""
    return [
        "--in-memory",
        "--group-initial-rebalance-delay-ms",
        "0",
        *("--listener", "PLAINTEXT://127.0.0.1:0"),
        *("--listener", "SSL://127.0.0.1:0"),
        *("--listener", "SASL_PLAINTEXT://127.0.0.1:0"),
        *("--listener", "SASL_SSL://127.0.0.1:0"),
        *certificates.server_args(),
        *("--user", f"{USER}:{PASSWORD}"),
        *("--connection-failed-authentication-delay-ms", str(delay_ms)),
    ]


def start_server(args: argparse.Namespace, directory: Path, *serve: str) -> ServerProcess:
    """`fastcoord serve` on the server core, checked: a server sharing the clients' core
    would measure the machine's one core, not security's cost."""
    server = testing.start_fastcoord(directory, *serve, core=args.server_core)
    if args.server_core is not None and os.sched_getaffinity(server.pid) != {args.server_core}:
        server.stop()
        raise RuntimeError(f"the server is not pinned to core {args.server_core}")
    return server


def address(server: ServerProcess, listener: str) -> tuple[str, int]:
    host, _, port = server.listener(listener).rpartition(":")
    return host, int(port)


@dataclass
class ServerLog:
    """What a server's log says after a part: its size, tracebacks, errors, failed logins."""

    lines: int
    tracebacks: int
    errors: list[str]  # ERROR or CRITICAL lines, the first few
    failed_logins_logged: int
    refused: int  # connections refused for max.connections
    exit_code: int | None  # None: it was still running when the part ended

    @classmethod
    def of(cls, server: ServerProcess, name: str) -> ServerLog:
        """Read `server`'s log (and copy it into KEEP_LOGS, if set, as NAME.log)."""
        whole = server.log()
        if KEEP_LOGS:
            Path(KEEP_LOGS[0], f"{name}.log").write_text(whole)
        text = whole.splitlines()
        errors = [line for line in text if " ERROR " in line or " CRITICAL " in line]
        return cls(
            lines=len(text),
            tracebacks=sum("Traceback" in line for line in text),
            errors=errors[:5],
            failed_logins_logged=sum("SASL authentication failed" in line for line in text),
            refused=sum("max.connections" in line and "refusing" in line for line in text),
            exit_code=server.process.poll(),
        )

    def line(self) -> str:
        said = "; ".join(self.errors) if self.errors else "none"
        state = "running" if self.exit_code is None else f"EXITED with {self.exit_code}"
        return (
            f"server log: {self.lines:,} lines, {self.tracebacks} tracebacks, ERROR/CRITICAL "
            f"lines: {said}; {self.failed_logins_logged:,} failed logins logged; "
            f"{self.refused:,} connections refused for max.connections; {state} at the part's end"
        )


def cpu_of(pid: int) -> tuple[float, float]:
    """(on a CPU, waiting for one) seconds of a process so far."""
    found = sched_seconds(pid)
    if found is None:
        raise RuntimeError(f"no schedstat for process {pid}: this needs Linux's /proc")
    return found


def delta(after: tuple[float, float], before: tuple[float, float]) -> tuple[float, float]:
    return after[0] - before[0], after[1] - before[1]


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def client_context() -> ssl.SSLContext:
    """TLS as a client without verification: the server's work is the same either way."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def pin(core: int | None, idle: bool = False) -> None:
    """Pin this process to `core`; with `idle`, let it run only when nothing else on that
    core wants to (SCHED_IDLE: a flooder must not delay the members' client)."""
    if core is not None:
        os.sched_setaffinity(0, {core})
    if idle:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


# -- frames -----------------------------------------------------------------------------------


def handshake_frame(mechanism: str) -> bytes:
    header = RequestHeader(ApiKey.SASL_HANDSHAKE, HANDSHAKE_VERSION, 1, CLIENT_ID)
    return encode_request(header, SaslHandshakeRequest(mechanism=mechanism))


def authenticate_frame(token: bytes, correlation_id: int) -> bytes:
    header = RequestHeader(
        ApiKey.SASL_AUTHENTICATE, AUTHENTICATE_VERSION, correlation_id, CLIENT_ID
    )
    return encode_request(header, SaslAuthenticateRequest(auth_bytes=token))


@functools.cache
def api_versions_frame() -> bytes:
    header = RequestHeader(ApiKey.API_VERSIONS, API_VERSIONS_VERSION, 1, CLIENT_ID)
    return encode_request(header, ApiVersionsRequest())


def plain_token(user: str, password: str) -> bytes:
    return f"\0{user}\0{password}".encode()


# -- generator tasks on an epoll loop ---------------------------------------------------------
#
# A task is a generator that does its socket's non-blocking work and yields (socket, events)
# when it must wait; the loop resumes it when epoll says so. It returns its result.

Wait = tuple[socket.socket, int]
Task = Generator[Wait, None, Any]
IN, OUT = select.EPOLLIN, select.EPOLLOUT


def connect(sock: socket.socket, to: tuple[str, int], context: ssl.SSLContext | None) -> Task:
    """Connect, then the TLS handshake if `context`: the socket to use from then on."""
    err = sock.connect_ex(to)
    if err in (errno.EINPROGRESS, errno.EAGAIN):
        yield sock, OUT
        err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, os.strerror(err))
    if context is None:
        return sock
    tls = context.wrap_socket(sock, do_handshake_on_connect=False)
    while True:
        try:
            tls.do_handshake()
            return tls
        except ssl.SSLWantReadError:
            yield tls, IN
        except ssl.SSLWantWriteError:
            yield tls, OUT


def send(sock: socket.socket, frame: bytes) -> Task:
    view = memoryview(frame)
    while view:
        try:
            view = view[sock.send(view) :]
        except (BlockingIOError, ssl.SSLWantWriteError):
            yield sock, OUT
        except ssl.SSLWantReadError:
            yield sock, IN


def read_frame(sock: socket.socket) -> Task:
    """One response frame, without its size: the only one the server may send now."""
    buf = b""
    while True:
        if len(buf) >= 4:
            size = int.from_bytes(buf[:4], "big")
            if len(buf) >= 4 + size:
                if len(buf) > 4 + size:
                    raise PeerError(f"{len(buf) - 4 - size} bytes after the answer")
                return buf[4:]
        try:
            chunk = sock.recv(65536)
        except (BlockingIOError, ssl.SSLWantReadError):
            yield sock, IN
            continue
        except ssl.SSLWantWriteError:
            yield sock, OUT
            continue
        if not chunk:
            raise ConnectionError("the server closed the connection before answering")
        buf += chunk


R = TypeVar("R", bound=Response)


def answer(kind: type[R], version: int, body: bytes) -> R:
    """A response frame's body, decoded as `kind`."""
    _, decoded = decode_response(kind.API_KEY, version, body)
    if not isinstance(decoded, kind):
        raise PeerError(f"{type(decoded).__name__}, not {kind.__name__}")
    return decoded


def ask(sock: socket.socket, frame: bytes) -> Task:
    yield from send(sock, frame)
    return (yield from read_frame(sock))


@dataclass
class Login:
    """One login's outcome: the answer's error code to the SaslAuthenticate that carried
    the credentials, how long that answer took, and what the exchange showed on the way."""

    error_code: int
    answer_s: float  # from sending the credentials to their answer; 0: not waited for
    first_s: float = 0.0  # SCRAM: client-first to server-first
    salt_bytes: int = 0  # SCRAM: the server-first's salt
    iterations: int = 0  # SCRAM: the server-first's iteration count
    tls: str = ""  # the TLS version and cipher, when over TLS
    connect_s: float = 0.0  # the connection (and its TLS handshake) made
    handshake_s: float = 0.0  # SaslHandshake sent to its answer


def login(
    sock: socket.socket,
    to: tuple[str, int],
    context: ssl.SSLContext | None,
    mechanism: str,
    user: str,
    password: str,
    abandon: bool = False,
) -> Task:
    """A connection, its TLS handshake if `context`, and a SASL login (SaslHandshake v1,
    SaslAuthenticate v2). `mechanism` "API_VERSIONS" sends one ApiVersions instead. With
    `abandon`, returns once the credentials are sent, without waiting for their answer."""
    began = time.perf_counter()
    conn = yield from connect(sock, to, context)
    connect_s = time.perf_counter() - began
    tls = ""
    if isinstance(conn, ssl.SSLSocket):
        cipher = conn.cipher()
        resumed = " resumed" if conn.session_reused else ""
        tls = f"{conn.version()} {cipher[0] if cipher else '?'}{resumed}"
    if mechanism == "API_VERSIONS":
        started = time.perf_counter()
        body = yield from ask(conn, api_versions_frame())
        answered = time.perf_counter()
        versions = answer(ApiVersionsResponse, API_VERSIONS_VERSION, body)
        return Login(int(versions.error_code), answered - started, tls=tls, connect_s=connect_s)
    started = time.perf_counter()
    body = yield from ask(conn, handshake_frame(mechanism))
    handshake_s = time.perf_counter() - started
    handshake = answer(SaslHandshakeResponse, HANDSHAKE_VERSION, body)
    if handshake.error_code != ErrorCode.NONE:
        raise PeerError(f"SaslHandshake {mechanism}: {error_name(handshake.error_code)}")
    first_s, salt_bytes, iterations = 0.0, 0, 0
    scram: scramp.ScramClient | None = None
    signature = ""  # what a SCRAM server-final must carry
    if mechanism == "PLAIN":
        credentials = plain_token(user, password)
    else:
        scram = scramp.ScramClient([mechanism], user, password)
        started = time.perf_counter()
        body = yield from ask(conn, authenticate_frame(scram.get_client_first().encode(), 2))
        first_s = time.perf_counter() - started
        first = answer(SaslAuthenticateResponse, AUTHENTICATE_VERSION, body)
        if first.error_code != ErrorCode.NONE:
            return Login(int(first.error_code), 0.0, first_s, tls=tls)
        scram.set_server_first(first.auth_bytes.decode())
        salt_bytes, iterations = len(bytes(scram.salt)), int(scram.iterations)
        # The salted password once per salt (login.scram_final): the server's cost of a
        # login is measured, not this client's PBKDF2.
        final_text, signature = scram_final(scram)
        credentials = final_text.encode()
    frame = authenticate_frame(credentials, 3)
    if abandon:
        yield from send(conn, frame)
        return Login(-1, 0.0, first_s, salt_bytes, iterations, tls, connect_s, handshake_s)
    started = time.perf_counter()
    body = yield from ask(conn, frame)
    answer_s = time.perf_counter() - started
    final = answer(SaslAuthenticateResponse, AUTHENTICATE_VERSION, body)
    proven = scram is None or server_final_verified(final.auth_bytes, signature)
    if final.error_code == ErrorCode.NONE and not proven:
        raise PeerError(f"{mechanism}: the server's final message does not prove it")
    return Login(
        int(final.error_code),
        answer_s,
        first_s,
        salt_bytes,
        iterations,
        tls,
        connect_s,
        handshake_s,
    )


@dataclass(eq=False)
class _Running:
    task: Task
    sock: socket.socket
    fd: int  # registered with epoll; -1: not yet
    deadline: float


def run_tasks(
    new_task: Callable[[socket.socket], Task],
    concurrency: int,
    until: float,
    done: Callable[[Any, float], None],
    *,
    tick: Callable[[float], None] = lambda now: None,
    limit: int | None = None,
    drain_s: float = DRAIN_S,
) -> None:
    """Keep `concurrency` tasks running, each on a new socket, until time.monotonic()
    reaches `until` or `limit` tasks have started; then let those in flight finish, for up
    to `drain_s`. `done(result, now)` gets each result, or the exception that ended it (a
    TimeoutError after TASK_TIMEOUT_S). `tick(now)` is called at least every 50 ms."""
    epoll = select.epoll()
    by_fd: dict[int, _Running] = {}
    running: set[_Running] = set()
    started = 0

    def finish(r: _Running, outcome: Any) -> None:
        running.discard(r)
        if r.fd >= 0:
            by_fd.pop(r.fd, None)
            with suppress(OSError, ValueError):
                epoll.unregister(r.fd)
        r.sock.close()
        done(outcome, time.monotonic())

    def advance(r: _Running) -> None:
        try:
            sock, events = r.task.send(None)
        except StopIteration as stop:
            finish(r, stop.value)
            return
        except Exception as exc:
            finish(r, exc)
            return
        fd = sock.fileno()
        if fd != r.fd:
            if r.fd >= 0:
                by_fd.pop(r.fd, None)
                with suppress(OSError, ValueError):
                    epoll.unregister(r.fd)
            epoll.register(fd, events)
            by_fd[fd] = r
        else:
            epoll.modify(fd, events)
        r.sock, r.fd = sock, fd

    def begin(now: float) -> None:
        nonlocal started
        while len(running) < concurrency and now < until and (limit is None or started < limit):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            r = _Running(new_task(sock), sock, -1, now + TASK_TIMEOUT_S)
            running.add(r)
            started += 1
            advance(r)

    next_check = time.monotonic() + 0.5
    try:
        while True:
            now = time.monotonic()
            tick(now)
            begin(now)
            if not running or now >= until + drain_s:
                break
            if now >= next_check:
                next_check = now + 0.5
                for r in [r for r in running if r.deadline <= now]:
                    r.task.close()
                    finish(r, TimeoutError(f"not done within {TASK_TIMEOUT_S:.0f} s"))
            for fd, _ in epoll.poll(0.05, 1024):
                ready = by_fd.get(fd)
                if ready is not None:
                    advance(ready)
    finally:
        for r in list(running):
            r.task.close()
            r.sock.close()
        epoll.close()


# -- logins a second, from client processes ---------------------------------------------------


@dataclass(frozen=True)
class LoginSpec:
    """What a client process does: logins of one kind from `start_at` to `t1`, counted
    from `t0` (time.monotonic(), which is the machine's, not the process's)."""

    to: tuple[str, int]
    tls: bool
    mechanism: str  # or "API_VERSIONS": a connection and one ApiVersions
    user: str
    password: str
    expect: int  # the error code a login must end with (0, or 58 for a flood)
    concurrency: int
    start_at: float
    t0: float
    t1: float
    limit: int
    core: int | None
    idle: bool = False  # SCHED_IDLE
    abandon: bool = False


@dataclass
class LoginTally:
    """A client process's report."""

    in_window: int = 0  # logins that ended as expected within [t0, t1)
    total: int = 0
    other: Counter[str] = field(default_factory=Counter)  # outcomes not expected, by name
    cpu: tuple[float, float] = (0.0, 0.0)  # (on a CPU, waiting) in the window
    started_late_s: float = 0.0  # how long after start_at its first login began
    tls: str = ""
    # seconds each stage of the logins that ended in the window took, the first STAGE_SAMPLES
    stages: dict[str, list[float]] = field(default_factory=dict)


STAGE_SAMPLES = 50_000
STAGES = ("connect", "SaslHandshake", "credentials")


def login_client(spec: LoginSpec, results: Any) -> None:
    """A client process (spawned): logins as `spec` says, its tally put on `results`."""
    pin(spec.core, spec.idle)
    context = client_context() if spec.tls else None
    tally = LoginTally()
    marks: dict[str, tuple[float, float]] = {}

    def tick(now: float) -> None:
        for name, at in (("t0", spec.t0), ("t1", spec.t1)):
            if name not in marks and now >= at:
                marks[name] = cpu_of(os.getpid())

    def done(outcome: Any, now: float) -> None:
        tally.total += 1
        if isinstance(outcome, Login):
            tally.tls = tally.tls or outcome.tls
            if outcome.error_code == spec.expect or (spec.abandon and outcome.error_code == -1):
                if spec.t0 <= now < spec.t1:
                    tally.in_window += 1
                    if tally.in_window <= STAGE_SAMPLES:
                        took = (outcome.connect_s, outcome.handshake_s, outcome.answer_s)
                        for stage, seconds in zip(STAGES, took, strict=True):
                            tally.stages.setdefault(stage, []).append(seconds)
                return
            tally.other[f"answered {error_name(outcome.error_code)}"] += 1
        else:
            tally.other[f"{type(outcome).__name__}: {outcome}"[:120]] += 1

    while time.monotonic() < spec.start_at:
        time.sleep(min(0.01, spec.start_at - time.monotonic()))
    tally.started_late_s = time.monotonic() - spec.start_at
    run_tasks(
        lambda sock: login(
            sock, spec.to, context, spec.mechanism, spec.user, spec.password, spec.abandon
        ),
        spec.concurrency,
        spec.t1,
        done,
        tick=tick,
        limit=spec.limit,
    )
    tick(float("inf"))
    tally.cpu = delta(marks["t1"], marks["t0"])
    results.put(tally)


@dataclass
class LoginRate:
    """Logins of one kind from all clients in one window."""

    label: str
    seconds: float
    logins: int
    server: tuple[float, float]  # (on a CPU, waiting) seconds in the window
    clients: tuple[float, float]  # summed over the client processes
    other: Counter[str]
    tls: str
    started_late_s: float
    stages: dict[str, list[float]] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.logins / self.seconds

    def stages_line(self) -> str:
        """p50/p99 of each stage of the logins, in ms."""
        return ", ".join(
            f"{stage} p50 {np.percentile(v, 50) * 1e3:.2f} / p99 {np.percentile(v, 99) * 1e3:.2f}"
            for stage, v in self.stages.items()
            if v and max(v) > 0
        )

    @property
    def server_ms(self) -> float:
        return self.server[0] * 1e3 / self.logins if self.logins else float("nan")

    @property
    def client_ms(self) -> float:
        return self.clients[0] * 1e3 / self.logins if self.logins else float("nan")


def run_clients(
    server: ServerProcess, specs: Sequence[LoginSpec], label: str, t0: float, t1: float
) -> LoginRate:
    """Spawn a client process per spec, measure the server from t0 to t1, gather."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    procs = [context.Process(target=login_client, args=(s, results), daemon=True) for s in specs]
    for p in procs:
        p.start()
    try:
        wait_until(t0)
        before = cpu_of(server.pid)
        wait_until(t1)
        server_cpu = delta(cpu_of(server.pid), before)
        tallies = [results.get(timeout=TASK_TIMEOUT_S + DRAIN_S + 30) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return gather(label, t1 - t0, server_cpu, tallies)


def gather(
    label: str, seconds: float, server_cpu: tuple[float, float], tallies: list[LoginTally]
) -> LoginRate:
    """The client processes' tallies of one window, as one figure."""
    other: Counter[str] = Counter()
    stages: dict[str, list[float]] = {}
    for t in tallies:
        other.update(t.other)
        for stage, samples in t.stages.items():
            stages.setdefault(stage, []).extend(samples)
    return LoginRate(
        label,
        seconds,
        sum(t.in_window for t in tallies),
        server_cpu,
        (sum(t.cpu[0] for t in tallies), sum(t.cpu[1] for t in tallies)),
        other,
        next((t.tls for t in tallies if t.tls), ""),
        max(t.started_late_s for t in tallies),
        stages,
    )


def wait_until(at: float) -> None:
    while (left := at - time.monotonic()) > 0:
        time.sleep(min(left, 0.05))


SPAWN_LEAD_S = 3.0  # a spawned client imports numpy and fastcoord before its start


def measure_logins(args: argparse.Namespace, certs: testing.Certificates) -> list[LoginRate]:
    client_core = args.client_core
    kinds = [
        ("PLAINTEXT", "connection + ApiVersions", "API_VERSIONS", False),
        ("SSL", "TLS handshake + ApiVersions", "API_VERSIONS", True),
        *(
            (listener, f"{mechanism}, {listener}", mechanism, listener == "SASL_SSL")
            for listener in ("SASL_PLAINTEXT", "SASL_SSL")
            for mechanism in MECHANISMS
        ),
    ]
    rates = []
    with tempfile.TemporaryDirectory(prefix="fastcoord-security-") as tmp:
        server = start_server(args, Path(tmp), *serve_args(certs))
        try:
            for listener, label, mechanism, tls in kinds:
                start_at = time.monotonic() + SPAWN_LEAD_S
                t0 = start_at + args.warmup
                t1 = t0 + args.login_seconds
                spec = LoginSpec(
                    address(server, listener),
                    tls,
                    mechanism,
                    USER,
                    PASSWORD,
                    ErrorCode.NONE,
                    args.login_concurrency,
                    start_at,
                    t0,
                    t1,
                    args.max_logins,
                    client_core,
                )
                rate = run_clients(server, [spec] * args.login_clients, label, t0, t1)
                rates.append(rate)
                print(f"  {label}: {rate.rate:,.0f}/s, server {rate.server_ms:.3f} ms", flush=True)
        finally:
            log = ServerLog.of(server, "logins")
            server.stop()
    print(f"  logins: {log.line()}", flush=True)
    LOGS["logins"] = log
    return rates


# -- members heartbeating, each on its own connection -----------------------------------------


def join_request(group: str, member_id: str, session_timeout_ms: int) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=session_timeout_ms,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol("range", b"")],
    )


class Members:
    """`count` members, each alone in its group, each on its own connection (TLS when
    `context`), joined in batches with blocking sockets, then left non-blocking."""

    def __init__(
        self,
        to: tuple[str, int],
        count: int,
        prefix: str,
        context: ssl.SSLContext | None,
        session_timeout_ms: int,
    ) -> None:
        self.to, self.context, self.session_timeout_ms = to, context, session_timeout_ms
        self.socks: list[socket.socket] = []
        self.frames: list[bytearray] = []
        names = [f"{prefix}-{i}" for i in range(count)]
        for start in range(0, count, JOIN_BATCH):
            self._join(names[start : start + JOIN_BATCH])

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.to, timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock if self.context is None else self.context.wrap_socket(sock)

    def _join(self, groups: list[str]) -> None:
        socks = [self._connect() for _ in groups]
        session = self.session_timeout_ms
        first = ask_all(socks, [(join_request(g, "", session), JOIN_VERSION) for g in groups])
        joined = ask_all(
            socks,
            [
                (join_request(g, a.member_id, session), JOIN_VERSION)
                for g, a in zip(groups, first, strict=True)
            ],
        )
        syncs: list[tuple[Request, int]] = []
        for g, a in zip(groups, joined, strict=True):
            if a.error_code != ErrorCode.NONE:
                raise PeerError(f"JoinGroup {g}: {error_name(a.error_code)}")
            assignment = [SyncGroupRequestAssignment(a.member_id, b"")]
            sync = SyncGroupRequest(
                group_id=g,
                generation_id=a.generation_id,
                member_id=a.member_id,
                assignments=assignment,
            )
            syncs.append((sync, SYNC_VERSION))
        for synced in ask_all(socks, syncs):
            if synced.error_code != ErrorCode.NONE:
                raise PeerError(f"SyncGroup: {error_name(synced.error_code)}")
        for s, g, a in zip(socks, groups, joined, strict=True):
            header = RequestHeader(ApiKey.HEARTBEAT, HEARTBEAT_VERSION, 0, CLIENT_ID)
            request = HeartbeatRequest(g, a.generation_id, a.member_id, None)
            self.frames.append(bytearray(encode_request(header, request)))
            s.setblocking(False)
        self.socks += socks

    def close(self) -> None:
        for s in self.socks:
            s.close()


@dataclass
class Window:
    """Heartbeats in one measured window, and the server's CPU meanwhile."""

    label: str
    seconds: float
    answered: int
    late: int  # due while the member's last was unanswered: skipped
    latencies_us: np.ndarray
    errors: Counter[str]
    closed: int  # members' connections the server closed
    server: tuple[float, float]
    client: tuple[float, float]

    @property
    def rate(self) -> float:
        return self.answered / self.seconds

    @property
    def server_us(self) -> float:
        return self.server[0] * 1e6 / self.answered if self.answered else float("nan")

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies_us, q)) if self.latencies_us.size else 0.0


class Driver:
    """Heartbeats in round robin at an even pace (lone_heartbeats_run's Driver, over TLS
    too); every answer checked, errors and closed connections counted, not raised: a
    flood's effect on members is what is measured."""

    def __init__(self, members: Members, rate: float) -> None:
        self.members = members
        self.interval = 1.0 / rate
        self.epoll = select.epoll()
        self.by_fd = {s.fileno(): i for i, s in enumerate(members.socks)}
        for s in members.socks:
            self.epoll.register(s.fileno(), IN)
        count = len(members.socks)
        self.sent_at = [0.0] * count  # 0: no heartbeat in flight
        self.correlation = [0] * count
        self.partial = [b""] * count
        self.open = [True] * count
        self.next = 0
        self.answered = 0
        self.late = 0
        self.closed = 0
        self.errors: Counter[str] = Counter()
        self.latencies: list[float] = []

    def run(self, seconds: float, record: bool = False) -> None:
        start = time.monotonic()
        due, end = start, start + seconds
        socks, count = self.members.socks, len(self.members.socks)
        while (now := time.monotonic()) < end:
            while due <= now:
                i = self.next
                self.next = (i + 1) % count
                due += self.interval
                if self.sent_at[i] or not self.open[i]:
                    self.late += 1
                    continue
                self.correlation[i] += 1
                frame = self.members.frames[i]
                _CORRELATION.pack_into(frame, 8, self.correlation[i])
                self.sent_at[i] = time.monotonic()
                try:
                    if socks[i].send(frame) != len(frame):
                        raise PeerError(f"member {i}: a heartbeat sent in part")
                except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                    self.errors["send would block"] += 1
                    self.sent_at[i] = 0.0
            for fd, _ in self.epoll.poll(max(0.0, min(due, end) - time.monotonic()), 1024):
                self._receive(self.by_fd[fd], record)

    def _receive(self, i: int, record: bool) -> None:
        sock = self.members.socks[i]
        try:
            data = sock.recv(64)
        except (BlockingIOError, ssl.SSLWantReadError):
            return
        except OSError as exc:
            data = b""
            self.errors[f"{type(exc).__name__} on read"] += 1
        if not data:
            self.closed += 1
            self.open[i] = False
            self.epoll.unregister(sock.fileno())
            return
        data = self.partial[i] + data
        if len(data) < _ANSWER.size:
            self.partial[i] = data
            return
        self.partial[i] = b""
        size, correlation, _, error = _ANSWER.unpack(data)
        if len(data) != _ANSWER.size or size != _ANSWER.size - 4:
            raise PeerError(f"member {i}: an answer of {len(data)} bytes")
        if correlation != self.correlation[i]:
            raise PeerError(f"member {i}: answer {correlation}, not {self.correlation[i]}")
        if error != ErrorCode.NONE:
            self.errors[error_name(error)] += 1
        if record:
            self.latencies.append(time.monotonic() - self.sent_at[i])
        self.sent_at[i] = 0.0
        self.answered += 1

    def window(self, label: str, server: ServerProcess, seconds: float) -> Window:
        """Run for `seconds`, recording: the window's figures."""
        answered, late, closed = self.answered, self.late, self.closed
        errors = Counter(self.errors)
        self.latencies = []
        before, client_before, t0 = cpu_of(server.pid), cpu_of(os.getpid()), time.monotonic()
        self.run(seconds, record=True)
        after, client_after, t1 = cpu_of(server.pid), cpu_of(os.getpid()), time.monotonic()
        return Window(
            label,
            t1 - t0,
            self.answered - answered,
            self.late - late,
            np.array(self.latencies) * 1e6,
            self.errors - errors,
            self.closed - closed,
            delta(after, before),
            delta(client_after, client_before),
        )


def measure_heartbeats(args: argparse.Namespace, certs: testing.Certificates) -> list[Window]:
    """The same members' heartbeats over PLAINTEXT and over SSL, in turn, two rounds."""
    windows = []
    with tempfile.TemporaryDirectory(prefix="fastcoord-security-") as tmp:
        server = start_server(args, Path(tmp), *serve_args(certs))
        sets: dict[str, Members] = {}
        try:
            started = time.monotonic()
            sets["PLAINTEXT"] = Members(
                (server.host, server.port), args.hb_connections, "sec-plain", None, 120_000
            )
            sets["SSL"] = Members(
                address(server, "SSL"), args.hb_connections, "sec-tls", client_context(), 120_000
            )
            print(
                f"  joined 2 x {args.hb_connections:,} members in "
                f"{time.monotonic() - started:.1f} s",
                flush=True,
            )
            drivers = {name: Driver(members, args.hb_rate) for name, members in sets.items()}
            for listener in ("PLAINTEXT", "SSL", "SSL", "PLAINTEXT"):
                driver = drivers[listener]
                driver.run(args.warmup)
                w = driver.window(listener, server, args.hb_seconds)
                windows.append(w)
                print(
                    f"  {listener}: {w.rate:,.0f}/s, {w.server_us:.1f} us a heartbeat, "
                    f"p50 {w.percentile(50):.0f} us, p99 {w.percentile(99):.0f} us",
                    flush=True,
                )
        finally:
            for members in sets.values():
                members.close()
            log = ServerLog.of(server, "heartbeats")
            server.stop()
    print(f"  heartbeats: {log.line()}", flush=True)
    LOGS["heartbeats"] = log
    return windows


# -- a flood of failed logins beside healthy members ------------------------------------------


@dataclass
class FloodPhase:
    members: Window
    flood: LoginRate | None


@dataclass
class Leftovers:
    """What a flood left in the server: its open files and the connections it has not
    closed though the client has (CLOSE-WAIT) on the SASL listener, a few seconds after."""

    label: str
    open_files: int
    close_wait: int
    refused: int  # connections refused for max.connections, from its log


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def close_wait(port: int) -> int:
    """Sockets in CLOSE-WAIT (state 08 in /proc/net/tcp) whose local port is `port`."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "08":
            count += 1
    return count


def measure_flood(
    args: argparse.Namespace, certs: testing.Certificates
) -> tuple[list[FloodPhase], list[Leftovers]]:
    """For each way of flooding, a server of its own: its members without a flood, with
    it, and after it."""
    client_core = args.client_core
    phases, leftovers = [], []
    for mode, abandon in (("answers awaited", False), ("connections abandoned", True)):
        with tempfile.TemporaryDirectory(prefix="fastcoord-security-") as tmp:
            server = start_server(args, Path(tmp), *serve_args(certs))
            members = None
            try:
                members = Members(
                    (server.host, server.port),
                    args.flood_members,
                    "sec-healthy",
                    None,
                    args.flood_session_ms,
                )
                driver = Driver(members, args.flood_member_rate)
                driver.run(args.warmup)
                to = address(server, "SASL_PLAINTEXT")
                before = open_files(server.pid)
                phases.append(
                    FloodPhase(driver.window(f"{mode}: no flood", server, args.flood_seconds), None)
                )
                phases.append(
                    flood_phase(args, server, driver, to, f"{mode}: flood", abandon, client_core)
                )
                phases.append(
                    FloodPhase(driver.window(f"{mode}: after", server, args.flood_seconds), None)
                )
                for phase in phases[-3:]:
                    w, f = phase.members, phase.flood
                    print(
                        f"  {w.label}: members p50 {w.percentile(50):.0f} us, p99 "
                        f"{w.percentile(99):.0f} us, errors {dict(w.errors)}, closed {w.closed}"
                        + (f"; {f.rate:,.0f} failed logins/s, {f.stages_line()}" if f else ""),
                        flush=True,
                    )
                log = ServerLog.of(server, f"flood-{'abandoned' if abandon else 'awaited'}")
                leftovers.append(
                    Leftovers(
                        mode,
                        open_files(server.pid) - before,
                        close_wait(to[1]),
                        log.refused,
                    )
                )
                print(f"  {mode}: {leftovers_note(leftovers[-1])}", flush=True)
            finally:
                if members is not None:
                    members.close()
                log = ServerLog.of(server, f"flood-{'abandoned' if abandon else 'awaited'}")
                server.stop()
        print(f"  flood, {mode}: {log.line()}", flush=True)
        LOGS[f"flood, {mode}"] = log
    return phases, leftovers


def flood_phase(
    args: argparse.Namespace,
    server: ServerProcess,
    driver: Driver,
    to: tuple[str, int],
    label: str,
    abandon: bool,
    client_core: int | None,
) -> FloodPhase:
    """Flooders spawned, the members driven meanwhile; both measured over one window."""
    start_at = time.monotonic() + SPAWN_LEAD_S
    t0 = start_at + args.warmup
    t1 = t0 + args.flood_seconds
    spec = LoginSpec(
        to,
        False,
        "PLAIN",
        USER,
        WRONG_PASSWORD,
        ErrorCode.SASL_AUTHENTICATION_FAILED,
        args.flood_concurrency,
        start_at,
        t0,
        t1,
        args.max_logins,
        client_core,
        idle=True,
        abandon=abandon,
    )
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    procs = [
        context.Process(target=login_client, args=(spec, results), daemon=True)
        for _ in range(args.flooders)
    ]
    for p in procs:
        p.start()
    try:
        driver.run(max(0.0, t0 - time.monotonic()))
        before = cpu_of(server.pid)
        members = driver.window(label, server, t1 - time.monotonic())
        server_cpu = delta(cpu_of(server.pid), before)
        # the members go on heartbeating while the flood drains
        tallies: list[LoginTally] = []
        while len(tallies) < len(procs):
            driver.run(0.2)
            with suppress(Exception):
                tallies.append(results.get_nowait())
            if time.monotonic() > t1 + TASK_TIMEOUT_S + DRAIN_S + 30:
                raise TimeoutError("a flooder did not report")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return FloodPhase(members, gather(label, t1 - t0, server_cpu, tallies))


# -- how long a failure takes to be answered --------------------------------------------------


@dataclass
class Tries:
    label: str
    delay_ms: int
    answer_us: list[float] = field(default_factory=list)
    first_us: list[float] = field(default_factory=list)  # SCRAM's server-first
    codes: Counter[str] = field(default_factory=Counter)
    server_first: Counter[str] = field(default_factory=Counter)  # salt bytes, iterations


CASES = (
    ("PLAIN", "unknown user", UNKNOWN_USER, PASSWORD),
    ("PLAIN", "wrong password", USER, WRONG_PASSWORD),
    ("PLAIN", "right password", USER, PASSWORD),
    ("SCRAM-SHA-256", "unknown user", UNKNOWN_USER, PASSWORD),
    ("SCRAM-SHA-256", "wrong password", USER, WRONG_PASSWORD),
    ("SCRAM-SHA-256", "right password", USER, PASSWORD),
)


def measure_timing(args: argparse.Namespace, certs: testing.Certificates) -> list[Tries]:
    """Each case `--tries` times, the cases interleaved in a seeded random order, over
    SASL_PLAINTEXT; with the default delay, 10 tries in flight (they mostly wait out the
    delay), with no delay one at a time."""
    return [
        *timing_round(args, certs, delay_ms=100, concurrency=10),
        *timing_round(args, certs, delay_ms=0, concurrency=1),
    ]


def timing_round(
    args: argparse.Namespace, certs: testing.Certificates, delay_ms: int, concurrency: int
) -> list[Tries]:
    order = iter(
        random.Random(20261126 + delay_ms).sample(
            range(len(CASES) * args.tries), k=len(CASES) * args.tries
        )
    )
    tries = [Tries(f"{mechanism}, {case}", delay_ms) for mechanism, case, _, _ in CASES]
    lost: Counter[str] = Counter()  # tries that ended with no case to count them under
    with tempfile.TemporaryDirectory(prefix="fastcoord-security-") as tmp:
        server = start_server(args, Path(tmp), *serve_args(certs, delay_ms))
        to = address(server, "SASL_PLAINTEXT")

        def new_task(sock: socket.socket) -> Task:
            case = next(order) % len(CASES)
            mechanism, _, user, password = CASES[case]
            return _tagged(login(sock, to, None, mechanism, user, password), case)

        def done(outcome: Any, now: float) -> None:
            if not isinstance(outcome, tuple):
                lost[f"{type(outcome).__name__}: {outcome}"] += 1
                return
            case, result = outcome
            t = tries[case]
            if isinstance(result, Login):
                t.codes[error_name(result.error_code)] += 1
                t.answer_us.append(result.answer_s * 1e6)
                if result.first_s:
                    t.first_us.append(result.first_s * 1e6)
                    t.server_first[f"salt {result.salt_bytes} B, i={result.iterations}"] += 1
            else:
                t.codes[f"{type(result).__name__}: {result}"[:80]] += 1

        try:
            run_tasks(
                new_task,
                concurrency,
                time.monotonic() + args.timing_max_seconds,
                done,
                limit=len(CASES) * args.tries,
            )
        finally:
            log = ServerLog.of(server, f"timing-{delay_ms}")
            server.stop()
    print(f"  timing, delay {delay_ms} ms: {log.line()}", flush=True)
    if lost:
        print(f"  timing, delay {delay_ms} ms: tries lost: {dict(lost)}", flush=True)
    LOGS[f"timing, delay {delay_ms} ms"] = log
    return tries


def _tagged(task: Task, case: int) -> Task:
    """The task, its outcome (or the exception that ended it) paired with its case."""
    try:
        result = yield from task
    except Exception as exc:
        return case, exc
    return case, result


# -- the mock, as a yardstick -----------------------------------------------------------------


@dataclass
class MockRate:
    rounds: list[float]  # pipelined heartbeats/s
    cpu_us: list[float]  # the mock's CPU a heartbeat

    @property
    def rate(self) -> float:
        return statistics.median(self.rounds)

    @property
    def heartbeat_us(self) -> float:
        return statistics.median(self.cpu_us)


def measure_mock(args: argparse.Namespace, rounds: int = 3, seconds: float = 2.0) -> MockRate:
    """bench_server's pipelined measurement of the librdkafka mock (256 in flight)."""
    server_core = args.server_core
    mock = testing.start_mock(server_core)
    client = None
    try:
        client, member = loopback.join_group(mock.host, mock.port, "security-yardstick")
        ring = loopback.HeartbeatRing(member)
        loopback.pipelined(client, ring, 10**7, 0.5)
        found = MockRate([], [])
        for _ in range(rounds):
            m = loopback.with_cpu(mock.pid, loopback.pipelined, client, ring, 10**7, seconds)
            if m.errors:
                raise PeerError(f"the mock answered heartbeats with errors {m.errors}")
            found.rounds.append(m.rate)
            found.cpu_us.append(m.cpu_us_per() or float("nan"))
    finally:
        if client is not None:
            client.close()
        mock.stop()
    return found


# -- the report -------------------------------------------------------------------------------

LOGS: dict[str, ServerLog] = {}
KEEP_LOGS: list[str] = []  # a directory to copy each server's log into (--keep-logs)


def source_digest() -> str:
    """A digest of fastcoord's sources: the same at the start and the end of a run, or the
    server measured changed under it (others edit the tree)."""
    root = Path(testing.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".pyx", ".pxd") and path.is_file():
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return (
        f"{os.cpu_count()} cores ({model}), Linux {platform.release()}, "
        f"CPython {platform.python_version()}, OpenSSL {ssl.OPENSSL_VERSION.split()[1]}, "
        f"scramp {scramp.__version__ if hasattr(scramp, '__version__') else '?'}"
    )


def report_logins(rates: list[LoginRate], mock: MockRate | None) -> list[str]:
    lines = [
        "| login | logins/s | / mock's heartbeats/s | server CPU a login | / mock's CPU a "
        "heartbeat | server cores, on a CPU + waiting | clients' cores, on a CPU + waiting "
        "| not as expected |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rates:
        ratio = f"{r.rate / mock.rate:.4f}x" if mock else ""
        cpu_ratio = f"{r.server_ms * 1e3 / mock.heartbeat_us:,.0f}x" if mock else ""
        other = ", ".join(f"{n} x {k}" for k, n in r.other.most_common(3)) or "none"
        lines.append(
            f"| {r.label} | {r.rate:,.0f} | {ratio} | {r.server_ms:.3f} ms | {cpu_ratio} | "
            f"{r.server[0] / r.seconds:.2f} + {r.server[1] / r.seconds:.2f} | "
            f"{r.clients[0] / r.seconds:.2f} + {r.clients[1] / r.seconds:.2f} | {other} |"
        )
    tls = next((r.tls for r in rates if r.tls), "")
    late = max((r.started_late_s for r in rates), default=0.0)
    lines += [
        "",
        f"TLS: {tls or '?'}; clients started at most {late:.2f} s late (of the warm-up's start)",
        "client CPU a login (ms): " + ", ".join(f"{r.label} {r.client_ms:.3f}" for r in rates),
    ]
    return lines


def report_windows(windows: list[Window], mock: MockRate | None) -> list[str]:
    lines = [
        "| heartbeats over | heartbeats/s | skipped (in flight) | server CPU a heartbeat | "
        "/ mock's | p50 | p99 | max | server cores, on a CPU + waiting | client's | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in windows:
        ratio = f"{w.server_us / mock.heartbeat_us:.2f}x" if mock else ""
        errors = dict(w.errors) or "none"
        if w.closed:
            errors = f"{errors}, {w.closed} connections closed by the server"
        lines.append(
            f"| {w.label} | {w.rate:,.0f} | {w.late:,} | {w.server_us:.1f} us | {ratio} | "
            f"{w.percentile(50):,.0f} us | {w.percentile(99):,.0f} us | "
            f"{w.latencies_us.max() if w.latencies_us.size else 0:,.0f} us | "
            f"{w.server[0] / w.seconds:.3f} + {w.server[1] / w.seconds:.3f} | "
            f"{w.client[0] / w.seconds:.2f} + {w.client[1] / w.seconds:.2f} | {errors} |"
        )
    return lines


def report_tls_ratio(windows: list[Window]) -> list[str]:
    by: dict[str, list[Window]] = {"PLAINTEXT": [], "SSL": []}
    for w in windows:
        by[w.label].append(w)
    if not by["PLAINTEXT"] or not by["SSL"]:
        return []
    cpu = [t.server_us / p.server_us for p, t in zip(by["PLAINTEXT"], by["SSL"], strict=False)]
    p50 = [
        t.percentile(50) / p.percentile(50)
        for p, t in zip(by["PLAINTEXT"], by["SSL"], strict=False)
    ]
    p99 = [
        t.percentile(99) / p.percentile(99)
        for p, t in zip(by["PLAINTEXT"], by["SSL"], strict=False)
    ]
    return [
        "SSL over PLAINTEXT, each round's pair: server CPU a heartbeat "
        + ", ".join(f"{r:.2f}x" for r in cpu)
        + "; p50 "
        + ", ".join(f"{r:.2f}x" for r in p50)
        + "; p99 "
        + ", ".join(f"{r:.2f}x" for r in p99)
    ]


def flood(
    args: argparse.Namespace,
    certs: testing.Certificates,
    phases: list[FloodPhase],
    leftovers: list[Leftovers],
) -> None:
    found, left = measure_flood(args, certs)
    phases += found
    leftovers += left


def report_flood(
    phases: list[FloodPhase], leftovers: list[Leftovers], mock: MockRate | None
) -> list[str]:
    lines = [
        "| phase | members' heartbeats/s | p50 | p99 | max | members' errors | failed "
        "logins/s | / mock's heartbeats/s | server cores, on a CPU + waiting | flooders' "
        "cores | flood's other outcomes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for phase in phases:
        w, f = phase.members, phase.flood
        errors = dict(w.errors) or "none"
        if w.closed:
            errors = f"{errors}, {w.closed} closed"
        server = f.server if f else w.server
        seconds = f.seconds if f else w.seconds
        flood_rate = f"{f.rate:,.0f}" if f else "0"
        ratio = f"{f.rate / mock.rate:.4f}x" if f and mock else ""
        flooders = f"{f.clients[0] / f.seconds:.2f} + {f.clients[1] / f.seconds:.2f}" if f else ""
        other = (", ".join(f"{n} x {k}" for k, n in f.other.most_common(3)) or "none") if f else ""
        lines.append(
            f"| {w.label} | {w.rate:,.0f} | {w.percentile(50):,.0f} us | "
            f"{w.percentile(99):,.0f} us | "
            f"{w.latencies_us.max() if w.latencies_us.size else 0:,.0f} us | {errors} | "
            f"{flood_rate} | {ratio} | {server[0] / seconds:.2f} + {server[1] / seconds:.2f} | "
            f"{flooders} | {other} |"
        )
    quiet = [p.members for p in phases if p.members.label.endswith("no flood")]
    base = statistics.mean(w.server[0] / w.seconds for w in quiet) if quiet else 0.0
    lines.append("")
    for phase in phases:
        f = phase.flood
        if f is not None and f.logins:
            extra_ms = (f.server[0] / f.seconds - base) * f.seconds * 1e3 / f.logins
            lines.append(
                f"- {f.label}: server CPU a failed login, over the no-flood windows' "
                f"{base:.3f} cores: {extra_ms:.3f} ms; each login's stages (ms): "
                f"{f.stages_line()}; flooders started at most {f.started_late_s:.2f} s late"
            )
    for left in leftovers:
        lines.append(f"- {left.label}: {leftovers_note(left)}")
    return lines


def leftovers_note(left: Leftovers) -> str:
    return (
        f"after the flood (its answers all due), the server held {left.open_files:,} more open "
        f"files than before it; {left.close_wait:,} connections on the SASL listener were in "
        "CLOSE-WAIT (closed by the client, never by the server); its log counted "
        f"{left.refused:,} connections refused for max.connections"
    )


def report_timing(tries: list[Tries]) -> list[str]:
    lines = [
        "| delay | mechanism, case | tries | answers | p50 | p99 | min | max | SCRAM "
        "server-first p50 | server-first |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in tries:
        a = np.array(t.answer_us)
        first = f"{np.percentile(t.first_us, 50):,.0f} us" if t.first_us else ""
        shapes = ", ".join(t.server_first) if t.server_first else ""
        codes = ", ".join(f"{n} {k}" for k, n in t.codes.items())
        stats = (
            f"{np.percentile(a, 50):,.0f} us | {np.percentile(a, 99):,.0f} us | "
            f"{a.min():,.0f} us | {a.max():,.0f} us"
            if a.size
            else "| | |"
        )
        lines.append(
            f"| {t.delay_ms} ms | {t.label} | {a.size} | {codes} | {stats} | {first} | {shapes} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benches.security_run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--parts", default=",".join(PARTS), help="comma-separated, of " + ", ".join(PARTS)
    )
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds before each window")
    parser.add_argument("--login-seconds", type=float, default=4.0)
    parser.add_argument("--login-clients", type=int, default=2, help="client processes")
    parser.add_argument("--login-concurrency", type=int, default=16, help="logins in flight each")
    parser.add_argument("--max-logins", type=int, default=200_000, help="per client and window")
    parser.add_argument("--hb-connections", type=int, default=2000)
    parser.add_argument("--hb-rate", type=float, default=4000, help="heartbeats/s")
    parser.add_argument("--hb-seconds", type=float, default=8.0)
    parser.add_argument("--flood-members", type=int, default=1000)
    parser.add_argument("--flood-member-rate", type=float, default=1000, help="heartbeats/s")
    parser.add_argument("--flood-session-ms", type=int, default=10_000, help="members' session")
    parser.add_argument("--flood-seconds", type=float, default=10.0)
    parser.add_argument("--flooders", type=int, default=2, help="flooding processes")
    parser.add_argument("--flood-concurrency", type=int, default=250, help="logins in flight each")
    parser.add_argument("--tries", type=int, default=300, help="per case and delay")
    parser.add_argument("--timing-max-seconds", type=float, default=120.0)
    parser.add_argument("--keep-logs", metavar="DIR", help="copy each server's log into DIR")
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown parts {unknown}: choose among {', '.join(PARTS)}")
    if args.keep_logs:
        Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
        KEEP_LOGS.append(args.keep_logs)
    raise_file_limit()
    # Read once, before anything is pinned: pinned, this process sees one core, and a server
    # started from it would share the clients' core.
    client_core, server_core = args.client_core, args.server_core = cores()
    pin(client_core)
    print(f"machine: {machine()}; client core {client_core}, server core {server_core}")
    digest = source_digest()
    print(
        f"started {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {loadavg()}, "
        f"fastcoord sources {digest}",
        flush=True,
    )
    began = time.monotonic()
    mocks: list[MockRate] = []
    rates: list[LoginRate] = []
    windows: list[Window] = []
    phases: list[FloodPhase] = []
    leftovers: list[Leftovers] = []
    tries: list[Tries] = []
    loads: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fastcoord-security-certs-") as tmp:
        certs = testing.certificates(Path(tmp))
        if "mock" in parts:
            mocks.append(measure_mock(args))
            print(f"  mock: {mocks[-1].rate:,.0f} heartbeats/s", flush=True)
        steps: tuple[tuple[str, Callable[[], None]], ...] = (
            ("logins", lambda: rates.extend(measure_logins(args, certs))),
            ("heartbeats", lambda: windows.extend(measure_heartbeats(args, certs))),
            ("flood", lambda: flood(args, certs, phases, leftovers)),
            ("timing", lambda: tries.extend(measure_timing(args, certs))),
        )
        for part, how in steps:
            if part in parts:
                loads.append(f"{part} {loadavg()}")
                print(f"{part} (load average {loadavg()})", flush=True)
                how()
        if "mock" in parts:
            mocks.append(measure_mock(args))
            print(f"  mock: {mocks[-1].rate:,.0f} heartbeats/s", flush=True)
    mock = MockRate([r for m in mocks for r in m.rounds], [c for m in mocks for c in m.cpu_us])
    yardstick = mock if mocks else None
    lines = [
        "",
        f"finished {time.strftime('%Y-%m-%d %H:%M:%S %Z')} after "
        f"{time.monotonic() - began:.0f} s; load average before each part: {'; '.join(loads)}; "
        f"at the end {loadavg()}",
        f"fastcoord sources {digest} at the start, {source_digest()} at the end"
        + (" (CHANGED during the run)" if source_digest() != digest else ""),
    ]
    if mocks:
        lines.append(
            "librdkafka mock, pipelined heartbeats (256 in flight), rounds at the start and "
            "at the end: "
            + "; ".join(", ".join(f"{r:,.0f}/s" for r in m.rounds) for m in mocks)
            + f"; median {mock.rate:,.0f}/s, {mock.heartbeat_us:.2f} us of its CPU a heartbeat"
        )
    if rates:
        lines += ["", *report_logins(rates, yardstick)]
    if windows:
        lines += ["", *report_windows(windows, yardstick), "", *report_tls_ratio(windows)]
    if phases:
        lines += ["", *report_flood(phases, leftovers, yardstick)]
    if tries:
        lines += ["", *report_timing(tries)]
    lines += ["", *(f"{part}: {log.line()}" for part, log in LOGS.items())]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
