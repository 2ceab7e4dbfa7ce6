"""One fastcoord node against two, and a node in a cluster against a lone server.

    python -m benches.cluster_run --rounds 4 --seconds 5
    python -m benches.cluster_run --callgrind     # instructions a heartbeat, lone and node

A cluster (docs/cluster.md) is how fastcoord goes past one process's core and open files,
and it only pays if a node costs what a lone server costs per request: a node answers its
own groups' heartbeats through the same compiled paths, but nothing measured that. This
starts, on a 2-core machine, a lone `fastcoord serve` pinned to the server core and a
2-node cluster with node i pinned to core i (node 1 on the lone server's core), both in
memory, and drives them in three configurations:

- (a) the lone server, its drivers pinned to the other core;
- (b) both nodes at once, each its own drivers; the drivers then float over both cores,
  sharing them with the nodes (there is no third core), and their CPU is reported;
- (c) node 1 alone, driven as (a) is, node 0 idle on the drivers' core: (c) against (a)
  is the cost of being a node in a cluster.

Each configuration carries two loads in turn. Shared connections: each driver process holds one
connection carrying the heartbeats of many members (each alone in a group owned by the
node driven), pipelined with loopback.pipelined over a ring of the members' frames, so the
server is saturated or the drivers are. Members on their own connections: each driver
process holds its members' connections and sends heartbeats at a rate (the lone heartbeat
Driver of lone_heartbeats_run), skipping a member whose last heartbeat is unanswered. Every
answer is checked: its size, its correlation id and error code 0 (a flood of
NOT_COORDINATOR cannot pass for throughput). The drivers are long-lived processes that
join their members once, so each node's members stay the same through every round.

In the same run, the librdkafka mock cluster (pinned to the server core) and the lone
server each answer one member's pipelined heartbeats on one connection (bench_server's
pipelined mode, measured from this process on the other core): the mock's rate is the
peer every row is given a ratio against, as docs/benchmarks.md does.

Server CPU is each server process's time on a CPU (/proc's schedstat) over the measured
window, per heartbeat answered in it. Rounds vary the order of the configurations, (a)
and (c) always one after the other; the table gives medians, and (c)/(a) also as the
median of each round's pair, the two measured within seconds of each other. With
--callgrind it counts instead the instructions of a heartbeat of a lone server and of a
node (under callgrind, which no busy host moves). Nothing here runs at import (asv
imports benches/).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection as Pipe
from pathlib import Path

from fastcoord import testing
from fastcoord.client.blocking import Connection
from fastcoord.cluster.routing import Cluster, parse_nodes
from fastcoord.core.partition import partition_for
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.framing import encode_request
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import HeartbeatRequest
from fastcoord.server.startup import raise_file_limit
from fastcoord.testing import ServerProcess
from fastcoord.testing_cpu import cores, pinned, sched_seconds

from . import loopback
from .lone_heartbeats_run import Driver, Members

SERVE_ARGS = ("--in-memory", "--group-initial-rebalance-delay-ms", "0")
GROUP_PREFIX = "cluster-bench-"  # + 7 digits: every group id, so every frame, one length
WINDOW = 256  # heartbeats in flight on a shared connection, as bench_server's pipelined mode
MOCK_GROUP = "cluster-bench-one"  # bench_server's one member, on the mock and the lone server
# Every member heartbeats in one phase of a round and is silent the rest of it (up to two
# rounds, as the order changes): the drivers' members join with a 300 s session
# (lone_heartbeats_run.join), the one member with this, so a round must stay within half.
SESSION_TIMEOUT_MS = 300_000
MAX_ROUND_S = 140.0
PHASE_SLACK_S = 0.5  # a phase's own time beyond its warm-up and window
PARTS = ("shared", "own")
PART_LABELS = {
    "shared": "shared connections, pipelined",
    "own": "members on their own connections",
}
CONFIGS = ("a", "b", "c")
CONFIG_LABELS = {
    "a": "(a) lone server",
    "b": "(b) 2-node cluster, both driven",
    "c": "(c) one node of 2, driven alone",
}
# The rounds' orders: (a) and (c) always next to each other, so that each pair is measured
# within seconds (the host's speed drifts), each first as often; (b) before and after them.
ORDERS = (("a", "c", "b"), ("c", "a", "b"), ("b", "a", "c"), ("b", "c", "a"))


def owned_groups(cluster: str, node_id: int, count: int) -> list[str]:
    """`count` group ids of one length that node `node_id` of `cluster` (a --cluster
    list) coordinates: by the rule every node computes (routing.py)."""
    nodes = parse_nodes(cluster)
    rule = Cluster(nodes, node_id, 50, partition_for)
    groups: list[str] = []
    i = 0
    while len(groups) < count:
        group = f"{GROUP_PREFIX}{i:07d}"
        if rule.coordinator(group).node_id == node_id:
            groups.append(group)
        i += 1
    return groups


class MemberRing(loopback.HeartbeatRing):
    """One Heartbeat v3 frame of each member, correlation ids 0..n-1, back to back:
    loopback.pipelined sends it round and round, so every member heartbeats once a turn
    and none has two heartbeats in flight while the window is at most the ring."""

    def __init__(self, joined: Sequence[tuple[str, int, str]]) -> None:
        frames = [
            encode_request(
                RequestHeader(ApiKey.HEARTBEAT, loopback.HEARTBEAT_VERSION, i, loopback.CLIENT_ID),
                HeartbeatRequest(group, generation, member_id, None),
            )
            for i, (group, generation, member_id) in enumerate(joined)
        ]
        self.frame_len = len(frames[0])
        if any(len(f) != self.frame_len for f in frames):
            raise AssertionError("heartbeat frames differ in length")
        self.size = len(frames)
        self.data = memoryview(b"".join(frames))


# -- the driver processes ------------------------------------------------------------------


@dataclass
class DriverSpec:
    """What one driver process drives: a node's address and the groups of its members."""

    host: str
    port: int
    shared_groups: list[str]  # members heartbeating on one shared connection
    own_groups: list[str]  # members on connections of their own


@dataclass
class DriverResult:
    """One driver's measured window."""

    requests: int
    seconds: float
    errors: dict[int, int]
    cpu_s: float  # the driver process's time on a CPU meanwhile
    wait_s: float  # and runnable but waiting for one
    late: int = 0  # own connections: heartbeats skipped, the member's last unanswered


def driver_main(pipe: Pipe, spec: DriverSpec) -> None:
    """A driver process: join the members, then run each load the parent asks for."""
    raise_file_limit()
    try:
        own = Members(spec, len(spec.own_groups), spec.own_groups)
        # Shared members join as lone_heartbeats_run's do, a connection each, which then
        # close: a member is not bound to the connection it joined on, as in Kafka.
        joining = Members(spec, len(spec.shared_groups), spec.shared_groups)
        joining.close()
        ring = MemberRing(joining.joined) if joining.joined else None
        client = Connection(spec.host, spec.port)
    except Exception as exc:
        pipe.send(f"failed: {exc!r}")
        raise
    driver = Driver(own, 1.0)
    pipe.send("ready")
    try:
        while True:
            try:
                command = pipe.recv()
            except EOFError:  # the parent is gone
                return
            if command is None:
                return
            part, start_at, end_at, rate = command
            if part == "shared":
                assert ring is not None
                pipe.send(_shared(client, ring, start_at, end_at))
            else:
                pipe.send(_own(driver, rate, start_at, end_at))
    finally:
        client.close()
        own.close()


def _sleep_until(at: float) -> None:
    delay = at - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _own_cpu() -> tuple[float, float]:
    sched = sched_seconds(os.getpid())
    return sched if sched is not None else (0.0, 0.0)


def _shared(client: Connection, ring: MemberRing, start_at: float, end_at: float) -> DriverResult:
    warmup = start_at - time.monotonic()
    if warmup > 0:
        loopback.pipelined(client, ring, 10**12, warmup, WINDOW)
    _sleep_until(start_at)
    before = _own_cpu()
    m = loopback.pipelined(client, ring, 10**12, max(0.0, end_at - time.monotonic()), WINDOW)
    after = _own_cpu()
    return DriverResult(m.requests, m.seconds, m.errors, after[0] - before[0], after[1] - before[1])


def _own(driver: Driver, rate: float, start_at: float, end_at: float) -> DriverResult:
    driver.interval = 1.0 / rate
    driver.run(max(0.0, start_at - time.monotonic()))  # warm-up, and last phase's answers
    before, answered, late = _own_cpu(), driver.answered, driver.late
    started = time.monotonic()
    driver.run(max(0.0, end_at - started))  # raises on an answer not NONE
    after = _own_cpu()
    return DriverResult(
        driver.answered - answered,
        time.monotonic() - started,
        {},
        after[0] - before[0],
        after[1] - before[1],
        driver.late - late,
    )


@dataclass(eq=False)
class DriverProcess:
    process: multiprocessing.process.BaseProcess
    pipe: Pipe
    target: str  # the name of the node it drives

    @property
    def pid(self) -> int:
        pid = self.process.pid
        assert pid is not None
        return pid

    def stop(self) -> None:
        """Ask it to end; SIGTERM by its PID if it does not within 10 s."""
        with contextlib.suppress(OSError):
            self.pipe.send(None)
        self.process.join(10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(10)
        self.pipe.close()


@contextlib.contextmanager
def drivers(
    specs: Sequence[tuple[str, DriverSpec]], core: int | None
) -> Iterator[list[DriverProcess]]:
    """A driver process per spec, pinned to `core`, joined and ready; stopped after."""
    context = multiprocessing.get_context("spawn")  # no copy of this process's state
    started: list[DriverProcess] = []
    try:
        for target, spec in specs:
            parent, child = context.Pipe()
            process = context.Process(target=driver_main, args=(child, spec), daemon=True)
            process.start()
            child.close()
            started.append(DriverProcess(process, parent, target))
            if core is not None:
                os.sched_setaffinity(started[-1].pid, {core})
        for d in started:
            if not d.pipe.poll(300):
                raise TimeoutError(f"a driver of {d.target} took over 300 s to join its members")
            said = d.pipe.recv()
            if said != "ready":
                raise RuntimeError(f"a driver of {d.target} could not start: {said}")
        yield started
    finally:
        for d in started:
            d.stop()


# -- a phase: some nodes driven at once -------------------------------------------------------


@dataclass
class Row:
    """One node's figures in one phase."""

    rate: float  # heartbeats answered per second
    server_cores: float  # its share of a core on a CPU
    server_wait: float  # runnable, waiting for a core (the host's contention)
    driver_cores: float  # its drivers' share of a core on a CPU, together
    driver_wait: float
    asked: float | None = None  # own connections: heartbeats per second asked for
    late: int = 0

    @property
    def cpu_us(self) -> float:
        """The server's CPU time per heartbeat answered."""
        return self.server_cores / self.rate * 1e6 if self.rate else float("nan")


def run_phase(
    part: str,
    targets: dict[str, ServerProcess],
    pool: Sequence[DriverProcess],
    driver_cores: set[int] | None,
    warmup: float,
    seconds: float,
    rate: float,
) -> dict[str, Row]:
    """Drive the nodes of `targets` at once (shared or own connections) for `seconds` after
    `warmup`: each node's rate, its CPU per heartbeat, its drivers' CPU."""
    chosen = [d for d in pool if d.target in targets]
    per_driver = {name: sum(d.target == name for d in chosen) for name in targets}
    if driver_cores is not None:
        for d in chosen:
            os.sched_setaffinity(d.pid, driver_cores)
    start_at = time.monotonic() + warmup + 0.05
    end_at = start_at + seconds
    for d in chosen:
        d.pipe.send((part, start_at, end_at, rate / per_driver[d.target]))
    _sleep_until(start_at)
    before = {name: sched_seconds(s.pid) for name, s in targets.items()}
    t0 = time.monotonic()
    _sleep_until(end_at)
    after = {name: sched_seconds(s.pid) for name, s in targets.items()}
    elapsed = time.monotonic() - t0
    results: dict[str, list[DriverResult]] = {name: [] for name in targets}
    for d in chosen:
        if not d.pipe.poll(seconds + warmup + 120):
            raise TimeoutError(f"a driver of {d.target} did not report")
        results[d.target].append(d.pipe.recv())
    rows: dict[str, Row] = {}
    for name in targets:
        got = results[name]
        errors: dict[int, int] = {}
        for r in got:
            for code, n in r.errors.items():
                errors[code] = errors.get(code, 0) + n
        if errors:
            raise RuntimeError(
                f"{name} answered heartbeats with errors {errors}: error answers are not throughput"
            )
        b, a = before[name], after[name]
        assert a is not None and b is not None
        rows[name] = Row(
            rate=sum(r.requests / r.seconds for r in got if r.seconds),
            server_cores=(a[0] - b[0]) / elapsed,
            server_wait=(a[1] - b[1]) / elapsed,
            driver_cores=sum(r.cpu_s / r.seconds for r in got if r.seconds),
            driver_wait=sum(r.wait_s / r.seconds for r in got if r.seconds),
            asked=rate if part == "own" else None,
            late=sum(r.late for r in got),
        )
    return rows


def one_member(
    peer: ServerProcess,
    session: tuple[Connection, loopback.HeartbeatRing],
    core: int | None,
    warmup: float,
    seconds: float,
) -> Row:
    """bench_server's pipelined mode: one member, one connection, from this process."""
    client, ring = session
    with pinned(core):
        loopback.pipelined(client, ring, 10**12, warmup, WINDOW)
        m = loopback.with_cpu(peer.pid, loopback.pipelined, client, ring, 10**12, seconds, WINDOW)
    if peer.name.startswith("fastcoord") and m.errors:
        raise RuntimeError(f"{peer.name} answered heartbeats with errors {m.errors}")
    server = m.server_sched or (float("nan"), float("nan"))
    mine = m.client_sched or (float("nan"), float("nan"))
    return Row(
        m.rate,
        server[0] / m.seconds,
        server[1] / m.seconds,
        mine[0] / m.seconds,
        mine[1] / m.seconds,
    )


# -- the run -------------------------------------------------------------------------------


@dataclass
class Figures:
    """Every phase's rows, round by round: (part, config, node) -> a Row per round."""

    rows: dict[tuple[str, str, str], list[Row]] = field(default_factory=dict)
    load: list[tuple[float, float, float]] = field(default_factory=list)  # at each round's start

    def add(self, part: str, config: str, node: str, row: Row) -> None:
        self.rows.setdefault((part, config, node), []).append(row)

    def median(self, key: tuple[str, str, str], what: str) -> float:
        return statistics.median(float(getattr(r, what)) for r in self.rows[key])

    def paired(self, part: str, w: str) -> list[float]:
        """(c) over (a), round by round."""
        a, c = self.rows[(part, "a", "lone")], self.rows[(part, "c", "node 1")]
        return [float(getattr(y, w)) / float(getattr(x, w)) for x, y in zip(a, c, strict=True)]


def measure(args: argparse.Namespace) -> Figures:
    client_core, server_core = cores()
    solo = None if client_core is None else {client_core}
    both = None if client_core is None or server_core is None else {client_core, server_core}
    figures = Figures()
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(2) as pool_of_joins:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fastcoord-cluster-")))
        (tmp / "lone").mkdir()
        lone = testing.start_fastcoord(tmp / "lone", *SERVE_ARGS, core=server_core)
        stack.callback(lone.stop)
        node_cores = None if client_core is None else [client_core, server_core]
        nodes = stack.enter_context(
            testing.fastcoord_cluster(tmp / "cluster", 2, *SERVE_ARGS, cores=node_cores)
        )
        mock = testing.start_mock(server_core)
        stack.callback(mock.stop)
        # bench_server's member on the mock and on the lone server, joined meanwhile (the
        # mock holds a first JoinGroup for 3 s); silent through most of each round.
        joins = {
            name: (peer, pool_of_joins.submit(_join_one, peer))
            for name, peer in (("mock", mock), ("lone", lone))
        }
        cluster = testing.cluster_list([n.port for n in nodes])
        targets = {"lone": lone, "node 0": nodes[0], "node 1": nodes[1]}
        owner = {"lone": 1, "node 0": 0, "node 1": 1}  # the lone server gets node 1's groups
        # Members only for the loads run: others would expire in the middle of a window.
        shared_count = args.shared_members if "shared" in args.parts else 0
        own_count = args.own_connections if "own" in args.parts else 0
        members = shared_count + own_count
        groups = {n: owned_groups(cluster, n, args.drivers * members) for n in (0, 1)}
        specs = []
        for name, server in targets.items():
            mine = iter(groups[owner[name]])
            for _ in range(args.drivers):
                shared = [next(mine) for _ in range(shared_count)]
                own = [next(mine) for _ in range(own_count)]
                specs.append((name, DriverSpec(server.host, server.port, shared, own)))
        started = time.monotonic()
        pool = stack.enter_context(drivers(specs, client_core))
        print(
            f"{len(pool)} driver processes joined {len(specs) * members:,} members in "
            f"{time.monotonic() - started:.1f} s",
            flush=True,
        )
        sessions = {}
        for name, (peer, joining) in joins.items():
            client, ring = joining.result()
            stack.callback(client.close)
            sessions[name] = (peer, (client, ring))
        placement: dict[str, tuple[dict[str, ServerProcess], set[int] | None]] = {
            "a": ({"lone": lone}, solo),
            "b": ({"node 0": nodes[0], "node 1": nodes[1]}, both),
            "c": ({"node 1": nodes[1]}, solo),
        }
        for r in range(args.rounds):
            figures.load.append(os.getloadavg())
            round_started = time.monotonic()
            for name, (peer, session) in sessions.items():
                row = one_member(peer, session, client_core, args.warmup, args.seconds)
                figures.add("one", "a" if name == "lone" else "mock", name, row)
            for part in args.parts:
                for config in ORDERS[r % len(ORDERS)]:
                    chosen, where = placement[config]
                    rows = run_phase(
                        part, chosen, pool, where, args.warmup, args.seconds, args.own_rate
                    )
                    for node, row in rows.items():
                        figures.add(part, config, node, row)
            print(
                f"round {r + 1} of {args.rounds} in {time.monotonic() - round_started:.0f} s, "
                f"load average at its start {figures.load[-1][0]:.2f}",
                flush=True,
            )
    return figures


def _join_one(peer: ServerProcess) -> tuple[Connection, loopback.HeartbeatRing]:
    client, member = loopback.join_group(
        peer.host, peer.port, MOCK_GROUP, session_timeout_ms=SESSION_TIMEOUT_MS
    )
    return client, loopback.HeartbeatRing(member)


# -- the report ------------------------------------------------------------------------------

# A server on a CPU or runnable for this share of the window was never idle: saturated.
SATURATED = 0.95


def _rows(config: str) -> tuple[str, ...]:
    return {"a": ("lone",), "b": ("node 0", "node 1"), "c": ("node 1",)}[config]


def report(figures: Figures, args: argparse.Namespace) -> str:
    mock = ("one", "mock", "mock")
    mock_rate = figures.median(mock, "rate")
    mock_cpu = figures.median(mock, "cpu_us")
    client_core, server_core = cores()
    lines = [
        f"{os.cpu_count()} cores; the lone server, node 1 and the mock on core {server_core}, "
        f"node 0 on core {client_core}; drivers on core {client_core} in (a) and (c), on "
        f"both in (b). {args.drivers} driver processes a node; shared: "
        f"{args.shared_members:,} members on each driver's connection, {WINDOW} in flight; "
        f"own: {args.own_connections:,} connections a driver, {args.own_rate:,.0f} "
        f"heartbeats/s asked of a node. Medians of {args.rounds} round(s) of "
        f"{args.seconds:g} s, each after {args.warmup:g} s of warm-up.",
        "",
        "| load | configuration | node | heartbeats/s | / mock | server CPU a heartbeat | "
        "/ mock | server cores: on a CPU + waiting | drivers' cores: on a CPU + waiting |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def line(load: str, config: str, node: str, key: tuple[str, str, str]) -> str:
        rate, cpu = figures.median(key, "rate"), figures.median(key, "cpu_us")
        m = {
            w: figures.median(key, w)
            for w in ("server_cores", "server_wait", "driver_cores", "driver_wait")
        }
        return (
            f"| {load} | {config} | {node} | {rate:,.0f} | {rate / mock_rate:.2f}x | "
            f"{cpu:.2f} us | {cpu / mock_cpu:.2f}x | "
            f"{m['server_cores']:.2f} + {m['server_wait']:.2f} | "
            f"{m['driver_cores']:.2f} + {m['driver_wait']:.2f} |"
        )

    one = "one member, one connection"
    lines.append(line(one, "librdkafka mock", "", mock))
    lines.append(line(one, CONFIG_LABELS["a"], "", ("one", "a", "lone")))
    for part in args.parts:
        for config in CONFIGS:
            for node in _rows(config):
                lines.append(
                    line(PART_LABELS[part], CONFIG_LABELS[config], node, (part, config, node))
                )
        pairs = zip(
            figures.rows[(part, "b", "node 0")], figures.rows[(part, "b", "node 1")], strict=True
        )
        total = statistics.median(x.rate + y.rate for x, y in pairs)
        lines.append(
            f"| {PART_LABELS[part]} | {CONFIG_LABELS['b']} | both | {total:,.0f} | "
            f"{total / mock_rate:.2f}x | | | | |"
        )
    lines += [
        "",
        "(c) over (a), the median of the rounds' pairs (each pair measured within seconds):",
        "",
        "| load | CPU a heartbeat | heartbeats/s | CPU within 10% |",
        "|---|---|---|---|",
    ]
    for part in args.parts:
        cpu, rate = figures.paired(part, "cpu_us"), figures.paired(part, "rate")
        lines.append(
            f"| {PART_LABELS[part]} | {statistics.median(cpu):.3f} (rounds "
            + ", ".join(f"{v:.3f}" for v in cpu)
            + f") | {statistics.median(rate):.3f} (rounds "
            + ", ".join(f"{v:.3f}" for v in rate)
            + f") | {'yes' if statistics.median(cpu) <= 1.10 else 'no'} |"
        )
    lines.append("")
    for part in args.parts:
        for config in CONFIGS:
            for node in _rows(config):
                rows = figures.rows[(part, config, node)]
                busy = [r.server_cores + r.server_wait for r in rows]
                saturated = sum(b >= SATURATED for b in busy)
                late = (
                    "; heartbeats skipped, the member's last unanswered: "
                    + ", ".join(f"{r.late:,}" for r in rows)
                    if part == "own"
                    else ""
                )
                lines.append(
                    f"{PART_LABELS[part]}, {CONFIG_LABELS[config]}, {node}: rounds "
                    + ", ".join(f"{r.rate:,.0f}/s at {r.cpu_us:.2f} us" for r in rows)
                    + f"; server saturated (busy >= {SATURATED:.0%}) in {saturated} of "
                    f"{len(rows)}{late}"
                )
    lines.append(
        "load average (1, 5, 15 min) at each round's start: "
        + "; ".join(f"{a:.2f} {b:.2f} {c:.2f}" for a, b, c in figures.load)
        + f"; at the end {' '.join(f'{v:.2f}' for v in os.getloadavg())}"
    )
    return "\n".join(lines)


# -- instructions a heartbeat, under callgrind -------------------------------------------------

# Heartbeats counted in each of the two runs whose difference is the figure, per load.
CALLGRIND_COUNTS = {"shared": (20_000, 120_000), "own": (2_000, 12_000)}
_ANSWER = struct.Struct(">iiih")  # Heartbeat v3 answer: size, correlation id, throttle, error


def _under_callgrind(name: str, directory: Path, core: int | None, *args: str) -> ServerProcess:
    """`fastcoord serve` under callgrind, instrumentation off until callgrind_control turns
    it on: start-up and joins run at valgrind's uninstrumented speed, and only the
    heartbeats counted are instrumented."""
    directory.mkdir(parents=True)
    argv = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={directory}/callgrind.%p",
        *testing.serve_command(directory, *SERVE_ARGS, *args),
    ]
    # A Python start-up under valgrind takes longer than testing's default wait.
    waited, testing.START_TIMEOUT_S = testing.START_TIMEOUT_S, 600.0
    try:
        return testing.start(name, argv, directory, ready=[testing.LOADED], core=core)
    finally:
        testing.START_TIMEOUT_S = waited


def _instructions(server: ServerProcess, run: Callable[[], None], dump: int) -> int:
    """The instructions `server` executed (user space) while `run` ran: counters zeroed,
    instrumentation on, run, off, dumped as callgrind.PID.`dump`, whose totals are read."""

    def control(*args: str) -> None:
        subprocess.run(
            ["callgrind_control", *args, str(server.pid)],
            check=True,
            capture_output=True,
            timeout=300,
        )

    control("--zero")
    control("--instr=on")
    run()
    control("--instr=off")
    control("--dump")
    out = server.log_path.parent / f"callgrind.{server.pid}.{dump}"  # its directory
    for line in out.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {out}")


def _one_at_a_time(members: Members, count: int) -> None:
    """`count` heartbeats, one in flight at a time, each on the next member's connection in
    turn: every read the server makes holds one heartbeat, as at a real heartbeat interval."""
    socks, frames = members.socks, members.frames
    for i in range(count):
        k = i % len(socks)
        struct.pack_into(">i", frames[k], 8, i)
        socks[k].sendall(frames[k])
        answer = b""
        while len(answer) < _ANSWER.size:
            chunk = socks[k].recv(_ANSWER.size - len(answer))
            if not chunk:
                raise ConnectionError("the server closed a member's connection")
            answer += chunk
        size, correlation, _, error = _ANSWER.unpack(answer)
        if size != _ANSWER.size - 4 or correlation != i or error != 0:
            raise RuntimeError(f"answer {correlation} with error {error}, expected {i} and 0")


def count_instructions(args: argparse.Namespace) -> str:
    """Instructions a heartbeat of a lone server and of node 1 of a 2-node cluster, each
    under callgrind: what no busy host moves. Node 0 is not started: nothing passes between
    nodes while they serve (node 1 finds its peer down at start and serves its own)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("--callgrind needs valgrind (callgrind_control) installed")
    _, server_core = cores()
    cluster = testing.cluster_list(testing.free_ports(2))
    groups = owned_groups(cluster, 1, args.shared_members + args.own_connections)
    results: dict[tuple[str, str], list[float]] = {}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fastcoord-cg-")))
        servers = {
            "lone": _under_callgrind("lone (callgrind)", tmp / "lone", server_core),
            "node 1": _under_callgrind(
                "node 1 (callgrind)",
                tmp / "node-1",
                server_core,
                *("--node-id", "1", "--cluster", cluster),
            ),
        }
        for server in servers.values():
            stack.callback(server.stop)
        for name, server in servers.items():
            for part, per in _count(server, groups, args).items():
                results[(part, name)] = per
    lines = [
        "Instructions a heartbeat (user space, callgrind; the difference of "
        + " and ".join(f"{a:,} and {b:,} ({p})" for p, (a, b) in CALLGRIND_COUNTS.items())
        + " heartbeats, twice each):",
        "",
        "| load | lone server | node 1 of 2 | node / lone |",
        "|---|---|---|---|",
    ]
    for part in CALLGRIND_COUNTS:
        lone, node = results[(part, "lone")], results[(part, "node 1")]
        label = (
            f"{args.shared_members:,} members sharing one connection, pipelined"
            if part == "shared"
            else f"{args.own_connections:,} members on their own connections, one at a time"
        )
        lines.append(
            f"| {label} | {' and '.join(f'{v:,.0f}' for v in lone)} | "
            f"{' and '.join(f'{v:,.0f}' for v in node)} | "
            f"{statistics.median(node) / statistics.median(lone):.4f} |"
        )
    return "\n".join(lines)


def _count(
    server: ServerProcess, groups: list[str], args: argparse.Namespace
) -> dict[str, list[float]]:
    """Instructions a heartbeat of `server`, each load measured twice."""
    joining = Members(server, args.shared_members, groups[: args.shared_members])
    joining.close()
    ring = MemberRing(joining.joined)
    own = Members(server, args.own_connections, groups[args.shared_members :])
    client = Connection(server.host, server.port, timeout=300)
    try:
        for sock in own.socks:
            sock.setblocking(True)

        def shared(n: int) -> None:
            _checked(loopback.pipelined(client, ring, n, 1e9, WINDOW), n)

        def one_each(n: int) -> None:
            _one_at_a_time(own, n)

        loads = {"shared": shared, "own": one_each}
        for load in loads.values():  # warm-up: every member once, uninstrumented
            load(max(ring.size, len(own.socks)))
        dumps = 0
        per: dict[str, list[float]] = {}
        for part, load in loads.items():
            first, second = CALLGRIND_COUNTS[part]
            for _ in range(2):
                counted = []
                for n in (first, second):
                    dumps += 1
                    counted.append(_instructions(server, functools.partial(load, n), dumps))
                per.setdefault(part, []).append((counted[1] - counted[0]) / (second - first))
        return per
    finally:
        client.close()
        own.close()


def _checked(m: loopback.Measurement, n: int) -> None:
    if m.requests != n or m.errors:
        raise RuntimeError(f"{m.requests:,} of {n:,} heartbeats answered, errors {m.errors}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benches.cluster_run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0, help="each measured window")
    parser.add_argument("--warmup", type=float, default=1.0, help="before each window")
    parser.add_argument("--drivers", type=int, default=2, help="driver processes a node")
    parser.add_argument(
        "--shared-members", type=int, default=2_000, help="members on each driver's connection"
    )
    parser.add_argument(
        "--own-connections", type=int, default=1_500, help="members with their own, a driver"
    )
    parser.add_argument(
        "--own-rate", type=float, default=200_000, help="heartbeats/s asked of a node, own"
    )
    parser.add_argument(
        "--parts",
        type=lambda text: tuple(p for p in PARTS if p in text.split(",")),
        default=PARTS,
        help="which loads: shared,own (both by default)",
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="instead: instructions a heartbeat, lone server and node, under callgrind",
    )
    args = parser.parse_args(argv)
    if args.callgrind:
        print(count_instructions(args))
        return 0
    round_s = (2 + 3 * len(args.parts)) * (args.warmup + args.seconds + PHASE_SLACK_S)
    if round_s > MAX_ROUND_S:
        parser.error(f"a round of {round_s:.0f} s would outlast the members' sessions")
    raise_file_limit()
    started = time.monotonic()
    figures = measure(args)
    print(report(figures, args))
    print(f"({time.monotonic() - started:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
