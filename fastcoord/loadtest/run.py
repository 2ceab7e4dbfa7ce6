"""`fastcoord loadtest`: check what can be checked, start the workers, gather, report.

The parent process drives no members: it refuses a run that cannot work (an --out that
holds another run, more connections than the open-file limit allows, an unreachable
bootstrap or admin port, shared connections against a server that would deadlock them, a
fault schedule it cannot apply), starts the worker processes, adds the scheduled faults on
time (loadtest/faults.py), samples the server's CPU and memory (loadtest/sampler.py, with
--admin), merges the workers' seconds into the live display and the results under --out,
and ends with the summary and an exit status: 0 passed, 1 a threshold was exceeded, 2 the
run could not start, 3 it was cut short (the server died or stalled, a worker failed), 130
interrupted (Ctrl-C), 143 terminated (SIGTERM). Ctrl-C and SIGTERM end a run alike: the
members are told to stop and leave, and the summary is written. Whatever was measured
before an end of any kind is kept.

Against a cluster the bootstrap is one node, asked for Metadata (the probe's and each
worker's) and FindCoordinator; each member then connects to its group's coordinator, so the
members of one connection index whose groups live on different nodes open one connection
per node, which the open-file check counts once it knows how many nodes there are. With
--admin listing every node's admin port, the faults go to every node.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import resource
import signal
import sys
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection as Pipe
from multiprocessing.connection import wait
from pathlib import Path
from typing import cast

import numpy as np
import trio
from rich.console import Console

from fastcoord.client.connection import Connection, connect_reason, is_fastcoord
from fastcoord.client.consumer_fleet import CONSUMER_WANTED
from fastcoord.client.fleet import FleetConfig
from fastcoord.loadtest import faults, results, sampler, scenarios, worker
from fastcoord.loadtest.aggregate import Aggregator, Thresholds
from fastcoord.loadtest.display import LiveDisplay, print_summary
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.messages import MetadataRequest, MetadataResponse

PASSED, EXCEEDED, CANNOT_START, CUT_SHORT, INTERRUPTED = 0, 1, 2, 3, 130
TERMINATED = 128 + signal.SIGTERM  # 143, as a process ended by SIGTERM
FLUSH_S = 5  # a killed run loses at most this much of its tables
FILES_KEPT = 64  # a worker's own files besides its connections: pipes, logs, libraries
STOP_GRACE_S = worker.LEAVE_TIMEOUT_S + 15  # after the deadline, before workers are told to stop


@dataclass(frozen=True)
class Options:
    bootstrap: str
    scenario: str
    members: int
    groups: int
    members_per_connection: int
    processes: int
    duration_s: float
    heartbeat_interval_ms: int
    session_timeout_ms: int
    rebalance_timeout_ms: int
    commit_interval_ms: int
    request_timeout_ms: int
    topics: list[str]
    partitions: int
    churn_rate: float | None
    wave_size: int | None
    wave_interval_ms: int
    restart_pause_ms: int | None
    group_prefix: str
    seed: int
    out: Path
    max_error_rate: float | None
    max_p99_ms: float | None
    faults: Path | None = None  # a schedule of faults (loadtest/faults.py)
    # The server's admin port, HOST:PORT, that adds them; a cluster's, one per node,
    # HOST:PORT,HOST:PORT,...
    admin: str | None = None
    group_protocol: str = "classic"  # or "consumer": Kafka's consumer group protocol (KIP-848)
    # --warmup: the joining phase's seconds, instead of until every member is stable
    warmup_s: float | None = None


class CannotStart(Exception):
    """The run cannot work as asked; the message says why and what to do."""


def parse_bootstrap(text: str) -> tuple[str, int]:
    first = text.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise CannotStart(f"--bootstrap {text!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def connections_per_worker(o: Options, nodes: int = 1) -> list[int]:
    """The most connections each worker opens to coordinators: one per members_per_connection
    of its members (in the order it adds them), and against `nodes` nodes one per node among
    the groups of those members, which may each have another coordinator."""
    counts = []
    for n in range(o.processes):
        indexes = np.arange(n, o.members, o.processes, dtype=np.int64)
        if nodes == 1 or o.members_per_connection == 1:
            counts.append(-(-len(indexes) // o.members_per_connection))
            continue
        # plan.group_of's rule: a group's members are consecutive, so the groups of the
        # members of one connection are the span from its first member's to its last's.
        groups = indexes * o.groups // max(o.members, 1)
        firsts = groups[:: o.members_per_connection]
        lasts = groups[o.members_per_connection - 1 :: o.members_per_connection]
        if len(lasts) < len(firsts):
            lasts = np.append(lasts, groups[-1])
        counts.append(int(np.minimum(lasts - firsts + 1, nodes).sum()))
    return counts


def check_file_limit(o: Options, nodes: int = 1) -> None:
    """Refuse a run whose workers would run out of file descriptors midway; `nodes` is the
    cluster's size (the coordinators the members' connections may go to)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        return
    counts = connections_per_worker(o, nodes)
    per_worker = max(counts) + 1  # and the bootstrap's
    allowed = hard - FILES_KEPT
    if per_worker <= allowed:
        return
    processes = math.ceil(sum(counts) / (allowed - 1))
    sharing = math.ceil(math.ceil(o.members / o.processes) / (allowed - 1))
    cluster = f" (to their groups' coordinators among {nodes} nodes)" if nodes > 1 else ""
    raise CannotStart(
        f"{o.members} members at {o.members_per_connection} per connection need "
        f"{per_worker} connections{cluster} in each of {o.processes} worker process(es), but a "
        f"process may open {hard} files here ({allowed} for connections): use --processes "
        f"{processes}, or --members-per-connection {sharing} against fastcoord (the server "
        "must accept that many connections too)"
    )


@dataclass(frozen=True)
class Server:
    """What the probe learnt of the server."""

    fastcoord: bool
    nodes: int  # the brokers its Metadata lists: a cluster's nodes, 1 for a lone server


async def _probe(
    address: tuple[str, int], timeout_s: float, wanted: dict[int, int] | None = None
) -> tuple[str | None, dict[int, int], int]:
    """The broker's cluster id, from a Metadata request on a fresh connection, the
    versions of `wanted` (default: the classic members') it serves, and how many brokers
    the cluster has."""
    connection = Connection(address, wanted=wanted)
    await connection.open(timeout_s)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        request = MetadataRequest(topics=[], allow_auto_topic_creation=False)
        response, _ = await connection.ask(request, timeout_s)
        connection.close()
    assert isinstance(response, MetadataResponse)
    return response.cluster_id, connection.versions, max(1, len(response.brokers))


def probe(o: Options, address: tuple[str, int]) -> Server:
    """Whether the server is fastcoord, and its cluster's size; CannotStart when it cannot
    be reached."""
    consumer = o.group_protocol == "consumer"
    try:
        cluster_id, versions, nodes = trio.run(
            _probe, address, 10.0, CONSUMER_WANTED if consumer else None
        )
    except Exception as exc:
        raise CannotStart(
            f"cannot reach the bootstrap {address[0]}:{address[1]} ({connect_reason(exc)}): "
            "is the server running, and is --bootstrap its address?"
        ) from None
    fastcoord = is_fastcoord(cluster_id)
    if consumer and ApiKey.CONSUMER_GROUP_HEARTBEAT not in versions:
        raise CannotStart(
            f"--group-protocol consumer needs ConsumerGroupHeartbeat: the server at "
            f"{address[0]}:{address[1]} (cluster id {cluster_id!r}) does not serve it. Use "
            "--group-protocol classic, or a server of Kafka's consumer group protocol "
            "(fastcoord, Kafka 4)."
        )
    # A consumer-protocol member never waits on a request (no JoinGroup), so members may
    # share a connection whatever the server.
    if o.members_per_connection > 1 and not fastcoord and not consumer:
        raise CannotStart(
            f"--members-per-connection {o.members_per_connection} needs fastcoord: the server at "
            f"{address[0]}:{address[1]} (cluster id {cluster_id!r}) is not, and Kafka mutes a "
            "connection while a JoinGroup on it waits, so members sharing it would wait on each "
            "other for ever. Use --members-per-connection 1 (and --processes for more members)."
        )
    return Server(fastcoord, nodes)


def plan_of(o: Options) -> scenarios.Plan:
    return scenarios.Plan(
        scenario=o.scenario,
        members=o.members,
        groups=o.groups,
        group_prefix=o.group_prefix,
        duration_s=o.duration_s,
        churn_rate=o.churn_rate if o.churn_rate is not None else max(1.0, o.members / 100),
        wave_size=o.wave_size if o.wave_size is not None else max(1, o.members // 10),
        wave_interval_ms=o.wave_interval_ms,
        restart_pause_ms=o.restart_pause_ms
        if o.restart_pause_ms is not None
        else o.session_timeout_ms // 3,
        settle_timeout_s=max(30.0, o.rebalance_timeout_ms / 1000),
    )


def fleet_config(o: Options, address: tuple[str, int]) -> FleetConfig:
    return FleetConfig(
        bootstrap=address,
        members_per_connection=o.members_per_connection,
        heartbeat_interval_ms=o.heartbeat_interval_ms,
        session_timeout_ms=o.session_timeout_ms,
        rebalance_timeout_ms=o.rebalance_timeout_ms,
        commit_interval_ms=o.commit_interval_ms,
        request_timeout_ms=o.request_timeout_ms,
        topics=list(o.topics),
        partitions=o.partitions,
        seed=o.seed,
        group_protocol=o.group_protocol,
    )


def check_out(out: Path) -> None:
    """Refuse an --out that holds another run's results: two runs must never mix."""
    if out.exists() and not out.is_dir():
        raise CannotStart(f"--out {out} is a file: give a new or empty directory")
    reason = results.earlier_run(out)
    if reason is not None:
        raise CannotStart(f"--out {reason}")


def check_admin(admin: str | None) -> list[str]:
    """--admin's addresses, each asked for /metrics once; [] without --admin."""
    if admin is None:
        return []
    addresses = faults.admin_addresses(admin)
    for address in addresses:
        reason = sampler.unreachable(address)
        if reason is not None:
            raise CannotStart(
                f"cannot read /metrics at the admin port {address} ({reason}): is the server "
                "running with --admin-port, and is --admin its address?"
            )
    return addresses


class _Signals:
    """SIGTERM counted rather than obeyed at once: the loop stops the run as for Ctrl-C."""

    def __init__(self) -> None:
        self.terms = 0

    def on_term(self, signum: int, frame: object) -> None:
        self.terms += 1


def run(o: Options, console: Console | None = None) -> int:
    """The whole run; its exit status. The live view goes to standard error, the summary
    to standard output."""
    console = console or Console(stderr=True)
    out = Console(width=None if sys.stdout.isatty() else 120)

    def refuse(reason: object) -> int:
        console.print(
            f"fastcoord loadtest: {reason}", markup=False, highlight=False, soft_wrap=True
        )
        return CANNOT_START

    try:
        address = parse_bootstrap(o.bootstrap)
        check_out(o.out)
        check_file_limit(o)
        fault_run = faults.prepare(o.faults, o.admin, o.duration_s)
        admin = check_admin(o.admin)
        server = probe(o, address)
        if server.nodes > 1:
            check_file_limit(o, server.nodes)
    except (CannotStart, faults.ScheduleError) as exc:
        return refuse(exc)
    o.out.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(o).items()}
    config["server_is_fastcoord"] = server.fastcoord
    config["server_nodes"] = server.nodes
    thresholds = Thresholds(o.max_error_rate, o.max_p99_ms)
    try:
        aggregator = Aggregator(o.out, config, o.processes, thresholds)
    except FileExistsError as exc:  # another run began writing there meanwhile
        return refuse(f"--out {exc}")
    sampling = None
    if admin:
        sampling = sampler.ServerSampler(admin)
        aggregator.watch_server(admin)
    signals = _Signals()
    previous = signal.signal(signal.SIGTERM, signals.on_term)
    try:
        outcome, message = _drive(o, address, aggregator, console, fault_run, sampling, signals)
        summary = aggregator.finish(outcome, message)
        if fault_run is not None:
            summary["faults"] = fault_run.finish(aggregator.per_second)
            if aggregator.results is not None:
                aggregator.results.write_summary(summary)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print_summary(summary, out)
    if message:
        console.print(
            f"fastcoord loadtest: {message}", markup=False, highlight=False, soft_wrap=True
        )
    out.print(f"results in {o.out}", markup=False, highlight=False, soft_wrap=True)
    if outcome == "interrupted":
        return INTERRUPTED
    if outcome == "terminated":
        return TERMINATED
    if outcome != "completed":
        return CUT_SHORT
    return PASSED if summary["verdict"]["passed"] else EXCEEDED


def _drive(
    o: Options,
    address: tuple[str, int],
    aggregator: Aggregator,
    console: Console,
    fault_run: faults.FaultRun | None = None,
    sampling: sampler.ServerSampler | None = None,
    signals: _Signals | None = None,
) -> tuple[str, str | None]:
    """Run the workers to their end, adding the scheduled faults and sampling the server;
    (outcome, message)."""
    signals = signals or _Signals()
    context = multiprocessing.get_context("spawn")
    started = time.time()
    aggregator.start(round(started * 1000))
    fleet = fleet_config(o, address)
    plan = plan_of(o)
    pipes: dict[Pipe, int] = {}
    processes = []
    for n in range(o.processes):
        ours, theirs = context.Pipe()
        job = worker.Job(n, o.processes, fleet, plan, started)
        process = context.Process(
            target=worker.main, args=(job, theirs), name=f"loadtest-worker-{n}", daemon=True
        )
        process.start()
        theirs.close()
        pipes[ours] = n
        processes.append(process)
    if fault_run is not None:
        fault_run.start(started)
    if sampling is not None:
        sampling.start(started)
    outcome, message = "completed", None
    terms = 0
    done: set[int] = set()
    stopping_at: float | None = None
    deadline = started + o.duration_s + STOP_GRACE_S

    def stop_all() -> None:
        nonlocal stopping_at
        if stopping_at is None:
            stopping_at = time.time()
            aggregator.stopped(stopping_at - started)
            for pipe in pipes:
                with contextlib.suppress(OSError):  # that worker has ended
                    pipe.send("stop")

    next_show = next_flush = time.time() + 1
    with LiveDisplay(console) as display:
        while len(done) < len(pipes):
            try:
                live = [p for p, n in pipes.items() if n not in done]
                for ready in wait(live, timeout=0.25):
                    pipe = cast(Pipe, ready)
                    n = pipes[pipe]
                    try:
                        kind, body = pipe.recv()
                    except (EOFError, OSError):
                        done.add(n)
                        if outcome == "completed" and stopping_at is None:
                            outcome, message = "cut short", f"worker {n} ended without a word"
                            stop_all()
                        continue
                    if kind == "second":
                        aggregator.add(body)
                    elif kind in ("aborted", "failed"):
                        if outcome == "completed":
                            outcome = "cut short"
                            message = str(body) if kind == "aborted" else f"worker {n}: {body}"
                        stop_all()
                        if kind == "failed":
                            done.add(n)
                    elif kind == "done":
                        done.add(n)
                now = time.time()
                if now >= next_show:
                    next_show = now + 1
                    display.update(aggregator.snapshot())
                if now >= next_flush:
                    # Each flush is a file per table: every few seconds, not every second.
                    next_flush = now + FLUSH_S
                    if sampling is not None:
                        aggregator.add_server(*sampling.take())
                    aggregator.flush()
                if signals.terms > terms:
                    terms = signals.terms
                    if stopping_at is not None:
                        break
                    outcome = "terminated"
                    message = "terminated by SIGTERM: the members were told to stop"
                    stop_all()
                if now > deadline:
                    stop_all()
                if stopping_at is not None and now > stopping_at + STOP_GRACE_S:
                    break
            except KeyboardInterrupt:
                if stopping_at is not None:
                    break
                outcome, message = "interrupted", "interrupted: the members were told to stop"
                stop_all()
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)
    if fault_run is not None:
        fault_run.stop()
    if sampling is not None:
        sampling.stop()
        aggregator.add_server(*sampling.take())
    return outcome, message
