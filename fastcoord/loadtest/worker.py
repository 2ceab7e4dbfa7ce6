"""A loadtest worker process: one Trio loop, one fleet, its share of the members.

Workers are processes so that each has its own open-file limit and its own core: 100k
members with a connection each need more sockets than one process may open. A worker
reports once a second over its pipe to the parent (a `Second` of measurements), stops when
the parent says so or its deadline passes, and says why when it cannot go on.

Messages to the parent: ("ready", info), ("second", Second), ("aborted", reason),
("failed", reason), ("done", None). From the parent: "stop".

A worker of a distributed run is started before its run's start is known (the workers
agree on it once all are up: loadtest/barrier.py): it says ("waiting", {"pid", "files"})
and waits for ("start", wall clock) or "stop".

Ctrl-C and SIGTERM are the parent's to act on (it tells the workers to stop, and writes the
summary), so a worker ignores both; it must then end by itself when the parent is gone
(killed, say): its pipe breaking or closing says so, and the worker's members leave and
it ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection as Pipe

import trio

from fastcoord.client.connection import connect_reason
from fastcoord.client.consumer_fleet import ConsumerFleet
from fastcoord.client.fleet import Fleet, FleetAborted, FleetConfig
from fastcoord.client.login import LoginFailed, TlsFailed
from fastcoord.loadtest import scenarios
from fastcoord.loadtest.stats import Recorder
from fastcoord.server import collector
from fastcoord.server.startup import raise_file_limit

LEAVE_TIMEOUT_S = 5.0
FILES_KEPT = 64  # a worker's own files besides its connections: pipes, logs, libraries


@dataclass(frozen=True)
class Job:
    worker: int
    workers: int
    fleet: FleetConfig
    plan: scenarios.Plan
    # time.time() when the run began, shared by every worker; None: the parent will say
    started_wall: float | None


def main(job: Job, pipe: Pipe) -> None:
    """The worker process's entry point."""
    # Ctrl-C reaches the whole process group, and so may SIGTERM (a service manager's stop):
    # the parent decides, and says "stop".
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format=f"worker {job.worker}: %(message)s")
    files, _, _ = raise_file_limit()
    try:
        if job.started_wall is None:
            started = _agreed_start(pipe, files)
            if started is None:
                return
            job = dataclasses.replace(job, started_wall=started)
        trio.run(_run, job, pipe)
    except BaseException as exc:  # the parent must hear why, whatever it was
        with contextlib.suppress(OSError):  # unless it is gone
            pipe.send(("failed", f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        pipe.close()


def _agreed_start(pipe: Pipe, files: int) -> float | None:
    """The run's start, once the parent has it (None: told to stop, or the parent gone);
    until then the worker sleeps, then sleeps on to the start itself."""
    pipe.send(("waiting", {"pid": os.getpid(), "files": files}))
    try:
        message = pipe.recv()
    except (EOFError, OSError):
        return None
    if not (isinstance(message, tuple) and message[0] == "start"):
        return None
    started = float(message[1])
    time.sleep(max(0.0, started - time.time()))
    return started


async def _run(job: Job, pipe: Pipe) -> None:
    assert job.started_wall is not None
    began_ms = round(time.time() * 1000)
    kind = ConsumerFleet if job.fleet.group_protocol == "consumer" else Fleet
    recorder = Recorder(job.worker, heartbeat_api=kind.LANE_HEARTBEAT)
    fleet = kind(job.fleet, recorder)
    deadline = trio.current_time() + job.plan.duration_s - (time.time() - job.started_wall)
    async with trio.open_nursery() as nursery:
        try:
            await nursery.start(fleet.run)
        except LoginFailed as exc:  # an OSError: before the clause below
            host, port = job.fleet.bootstrap
            what = "reach" if isinstance(exc, TlsFailed) else "log in to"
            pipe.send(("failed", f"cannot {what} {host}:{port}: {exc}"))
            nursery.cancel_scope.cancel()
            return
        except (OSError, trio.TooSlowError, FleetAborted) as exc:
            host, port = job.fleet.bootstrap
            pipe.send(("failed", f"cannot reach {host}:{port}: {connect_reason(exc)}"))
            nursery.cancel_scope.cancel()
            return
        ready = {"cluster_id": fleet.cluster_id, "partitions": fleet.partitions}
        pipe.send(("ready", {**ready, "began_ms": began_ms, "pid": os.getpid()}))
        reporter = _Reporter(job, pipe, fleet, recorder)
        nursery.start_soon(reporter.run, nursery.cancel_scope)
        # A fleet of 100k members is a million long-lived objects: full collections over
        # them stalled the loop 0.2-0.5 s every few seconds, latency of the generator's own.
        nursery.start_soon(collector.run)
        with trio.CancelScope() as scenario_scope:
            reporter.scenario_scope = scenario_scope
            await scenarios.run(fleet, job.plan, job.worker, job.workers, deadline)
        if reporter.aborted is None:
            await scenarios.leave_all(fleet, LEAVE_TIMEOUT_S)
        reporter.report()
        reporter.send(("done", None) if reporter.aborted is None else ("aborted", reporter.aborted))
        nursery.cancel_scope.cancel()


class _Reporter:
    """Once a second: the measurements to the parent, a look for a stalled server, and
    a look for the parent's stop (or its end: a parent gone stops the run as its stop
    would)."""

    def __init__(self, job: Job, pipe: Pipe, fleet: Fleet, recorder: Recorder) -> None:
        self.job = job
        self.pipe = pipe
        self.fleet = fleet
        self.recorder = recorder
        self.scenario_scope: trio.CancelScope | None = None
        self.aborted: str | None = None
        self.orphaned = False  # the parent is gone: nothing more is sent
        self._second = 0

    async def run(self, scope: trio.CancelScope) -> None:
        start = self.job.started_wall
        assert start is not None
        while True:
            self._second += 1
            await trio.sleep(max(0.0, start + self._second - time.time()))
            self.report(self._second)
            reason = self.fleet.stalled()
            if reason is not None:
                self.aborted = reason
                self._stop()
            if self.orphaned or self._told_to_stop():
                self._stop()

    def _told_to_stop(self) -> bool:
        try:
            return bool(self.pipe.poll()) and self.pipe.recv() == "stop"
        except (EOFError, OSError):  # the parent's end is closed: it is gone
            self.orphaned = True
            return True

    def _stop(self) -> None:
        if self.scenario_scope is not None:
            self.scenario_scope.cancel()

    def send(self, message: object) -> None:
        """`message` to the parent, unless it is gone (then the run stops)."""
        if self.orphaned:
            return
        try:
            self.pipe.send(message)
        except OSError:  # a broken pipe: the parent is gone
            self.orphaned = True
            self._stop()

    def report(self, elapsed_s: int | None = None) -> None:
        """Send what was measured since the last report (the last, partial, second when
        `elapsed_s` is None)."""
        second = self.recorder.take(
            self._second + 1 if elapsed_s is None else elapsed_s,
            int(time.time() * 1000),
            self.fleet.states(),
            self.fleet.connection_count,
            time.process_time(),  # the Recorder takes each second's share of the total
            self.fleet.node_connections,
        )
        self.send(("second", second))
