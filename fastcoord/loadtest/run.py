"""`fastcoord loadtest`: check what can be checked, start the workers, gather, report.

The parent process drives no members: it refuses a run that cannot work (more connections
than the open-file limit allows, an unreachable bootstrap, shared connections against a
server that would deadlock them, a fault schedule it cannot apply), starts the worker
processes, adds the scheduled faults on time (loadtest/faults.py), merges the workers'
seconds into the live display and the results under --out, and ends with the summary and
an exit status: 0 passed, 1 a threshold was exceeded, 2 the run could not start, 3 it was
cut short (the server died or stalled, a worker failed), 130 interrupted. Whatever was
measured before an end of any kind is kept.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import resource
import sys
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection as Pipe
from multiprocessing.connection import wait
from pathlib import Path
from typing import cast

import trio
from rich.console import Console

from fastcoord.client.connection import Connection, connect_reason, is_fastcoord
from fastcoord.client.consumer_fleet import CONSUMER_WANTED
from fastcoord.client.fleet import FleetConfig
from fastcoord.loadtest import faults, scenarios, worker
from fastcoord.loadtest.aggregate import Aggregator, Thresholds
from fastcoord.loadtest.display import LiveDisplay, print_summary
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.messages import MetadataRequest, MetadataResponse

PASSED, EXCEEDED, CANNOT_START, CUT_SHORT, INTERRUPTED = 0, 1, 2, 3, 130
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
    admin: str | None = None  # the server's admin port, HOST:PORT, that adds them
    group_protocol: str = "classic"  # or "consumer": Kafka's consumer group protocol (KIP-848)


class CannotStart(Exception):
    """The run cannot work as asked; the message says why and what to do."""


def parse_bootstrap(text: str) -> tuple[str, int]:
    first = text.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise CannotStart(f"--bootstrap {text!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def check_file_limit(o: Options) -> None:
    """Refuse a run whose workers would run out of file descriptors midway."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        return
    per_worker = math.ceil(math.ceil(o.members / o.processes) / o.members_per_connection) + 1
    allowed = hard - FILES_KEPT
    if per_worker <= allowed:
        return
    processes = math.ceil(o.members / o.members_per_connection / (allowed - 1))
    sharing = math.ceil(math.ceil(o.members / o.processes) / (allowed - 1))
    raise CannotStart(
        f"{o.members} members at {o.members_per_connection} per connection need {per_worker} "
        f"connections in each of {o.processes} worker process(es), but a process may open "
        f"{hard} files here ({allowed} for connections): use --processes {processes}, or "
        f"--members-per-connection {sharing} against fastcoord (the server must accept that "
        "many connections too)"
    )


async def _probe(
    address: tuple[str, int], timeout_s: float, wanted: dict[int, int] | None = None
) -> tuple[str | None, dict[int, int]]:
    """The broker's cluster id, from a Metadata request on a fresh connection, and the
    versions of `wanted` (default: the classic members') it serves."""
    connection = Connection(address, wanted=wanted)
    await connection.open(timeout_s)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        request = MetadataRequest(topics=[], allow_auto_topic_creation=False)
        response, _ = await connection.ask(request, timeout_s)
        connection.close()
    assert isinstance(response, MetadataResponse)
    return response.cluster_id, connection.versions


def probe(o: Options, address: tuple[str, int]) -> bool:
    """Whether the server is fastcoord; CannotStart when it cannot be reached."""
    consumer = o.group_protocol == "consumer"
    try:
        cluster_id, versions = trio.run(
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
    return fastcoord


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


def run(o: Options, console: Console | None = None) -> int:
    """The whole run; its exit status. The live view goes to standard error, the summary
    to standard output."""
    console = console or Console(stderr=True)
    out = Console(width=None if sys.stdout.isatty() else 120)
    try:
        address = parse_bootstrap(o.bootstrap)
        check_file_limit(o)
        fault_run = faults.prepare(o.faults, o.admin, o.duration_s)
        server_is_fastcoord = probe(o, address)
    except (CannotStart, faults.ScheduleError) as exc:
        console.print(f"fastcoord loadtest: {exc}", markup=False, highlight=False, soft_wrap=True)
        return CANNOT_START
    o.out.mkdir(parents=True, exist_ok=True)
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(o).items()}
    config["server_is_fastcoord"] = server_is_fastcoord
    aggregator = Aggregator(o.out, config, o.processes, Thresholds(o.max_error_rate, o.max_p99_ms))
    outcome, message = _drive(o, address, aggregator, console, fault_run)
    summary = aggregator.finish(outcome, message)
    if fault_run is not None:
        summary["faults"] = fault_run.finish()
        if aggregator.results is not None:
            aggregator.results.write_summary(summary)
    print_summary(summary, out)
    if message:
        console.print(
            f"fastcoord loadtest: {message}", markup=False, highlight=False, soft_wrap=True
        )
    out.print(f"results in {o.out}", markup=False, highlight=False, soft_wrap=True)
    if outcome == "interrupted":
        return INTERRUPTED
    if outcome != "completed":
        return CUT_SHORT
    return PASSED if summary["verdict"]["passed"] else EXCEEDED


def _drive(
    o: Options,
    address: tuple[str, int],
    aggregator: Aggregator,
    console: Console,
    fault_run: faults.FaultRun | None = None,
) -> tuple[str, str | None]:
    """Run the workers to their end, adding the scheduled faults; (outcome, message)."""
    context = multiprocessing.get_context("spawn")
    started = time.time()
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
    outcome, message = "completed", None
    done: set[int] = set()
    stopping_at: float | None = None
    deadline = started + o.duration_s + STOP_GRACE_S

    def stop_all() -> None:
        nonlocal stopping_at
        if stopping_at is None:
            stopping_at = time.time()
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
                        if fault_run is not None:
                            fault_run.record(body)
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
                    aggregator.flush()
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
    return outcome, message
