"""One worker of a load test run on Spark: the body of one task of a barrier stage.

Spark starts every task of a barrier stage at once, or none (the same mechanism XGBoost
and TensorFlowOnSpark start their workers with), so W tasks are W workers that exist
together. Each task starts its worker process (worker.py, as --processes starts them: its
own Trio loop and open-file limit), checks that it reaches the bootstrap broker from its
own host, and tells the others, through the barrier's allGather, what it found: its host,
its worker's pid and open-file limit, the time it was ready, or why it cannot run. Every
task derives the same answer from what was gathered: either why the run cannot start (the
first worker that cannot, and why; every task then fails the stage, and no load starts),
or the start time, a moment after the last worker was ready, which every worker's seconds
count from.

The task then relays: its worker's seconds go into the worker's own tables under --out
(part files of its own, every row marked with the worker: results.py), and a slim copy of
each (its histograms and counts, without the rows: stats.Second.slim) goes to the driver,
which merges them into the live view and summary.json. The driver's "stop" goes to the
worker. A worker process that dies fails the task, and with it the stage: the run ends.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Client, wait
from multiprocessing.connection import Connection as Pipe
from pathlib import Path
from typing import Any

from fastcoord.client.fleet import FleetConfig
from fastcoord.loadtest import results, scenarios, worker
from fastcoord.loadtest.aggregate import Aggregator, Thresholds
from fastcoord.loadtest.stats import Second
from fastcoord.loadtest.summary import split

START_DELAY_S = 1.0  # from the last worker's readiness to the start: the gather's own time
WAITING_TIMEOUT_S = 120.0  # for a worker process to import and say it waits
WORKER_TABLES = ("latency", "states", "errors", "rebalances")


@dataclass(frozen=True)
class TaskJob:
    """What every task of the stage is given (the same for all)."""

    workers: int
    fleet: FleetConfig
    plan: scenarios.Plan
    out: str  # --out, as every executor sees it
    driver: tuple[str, int]  # where the driver listens for its workers
    authkey: bytes  # which they prove they know
    # connections each worker opens at most (run.connections_per_worker), by worker
    connections: tuple[int, ...]
    probe_timeout_s: float = 10.0


class WorkerLost(RuntimeError):
    """The worker process died: the task fails, and with it the stage."""


def run_task(job: TaskJob, _partition: Iterator[Any]) -> Iterator[str]:
    """The task: a JSON line of the worker's own totals, once its run has ended."""
    from pyspark import BarrierTaskContext

    context = BarrierTaskContext.get()
    n = context.partitionId()
    task = _Task(job, n)
    try:
        problem = task.prepare()
        gathered = [json.loads(m) for m in context.allGather(json.dumps(task.found(problem)))]
        refusal = refused(job, gathered)
        if refusal is not None:
            task.tell(("refused", refusal))
            raise RuntimeError(refusal)
        start = max(g["ready_ms"] for g in gathered) / 1000 + START_DELAY_S
        yield json.dumps(task.relay(start))
    finally:
        task.close()


def refused(job: TaskJob, gathered: list[dict[str, Any]]) -> str | None:
    """Why the run cannot start, from what every task found (the first worker's reason, in
    worker order), or None: the same answer in every task."""
    for g in sorted(gathered, key=lambda g: g["worker"]):
        where = f"worker {g['worker']} (on {g['host']})"
        if g.get("problem"):
            return f"{where}: {g['problem']}"
        need = job.connections[g["worker"]] + 1  # and the bootstrap's
        allowed = g["files"] - worker.FILES_KEPT
        if need > allowed:
            return (
                f"{where} may open {g['files']} files ({allowed} for connections), but its "
                f"share of the members needs {need} connections: raise that host's open-file "
                "limit (ulimit -n, LimitNOFILE), or use more --workers, or more "
                "--members-per-connection against fastcoord"
            )
    return None


class _Task:
    def __init__(self, job: TaskJob, n: int) -> None:
        self.job = job
        self.n = n
        self.driver: Pipe | None = None
        self.child: Pipe | None = None
        self.process: Any = None
        self.pid: int | None = None
        self.files = 0
        self.ready_ms = 0

    def prepare(self) -> str | None:
        """Start the worker process, reach the driver and the bootstrap; why this task
        cannot run, or None."""
        try:
            self.driver = Client(self.job.driver, authkey=self.job.authkey)
            self.driver.send(("hello", self.n))
        except (OSError, EOFError) as exc:
            host, port = self.job.driver
            return f"cannot reach the driver at {host}:{port} ({exc})"
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe()
        job = worker.Job(self.n, self.job.workers, self.job.fleet, self.job.plan, None)
        self.process = context.Process(
            target=worker.main, args=(job, theirs), name=f"loadtest-worker-{self.n}", daemon=True
        )
        self.process.start()
        theirs.close()
        self.child = ours
        if not ours.poll(WAITING_TIMEOUT_S):
            return f"its worker process did not start within {WAITING_TIMEOUT_S:.0f} s"
        try:
            kind, body = ours.recv()
        except (EOFError, OSError):
            return f"its worker process ended as it started ({self._death()})"
        if kind != "waiting":
            return f"its worker process said {kind}: {body}"
        self.pid, self.files = body["pid"], body["files"]
        problem = _unreachable(self.job.fleet, self.job.probe_timeout_s)
        self.ready_ms = round(time.time() * 1000)
        return problem

    def found(self, problem: str | None) -> dict[str, Any]:
        """What this task tells the others."""
        return {
            "worker": self.n,
            "host": socket.gethostname(),
            "pid": self.pid,
            "files": self.files,
            "ready_ms": self.ready_ms or round(time.time() * 1000),
            "problem": problem,
        }

    def tell(self, message: object) -> None:
        """`message` to the driver, if it can be told."""
        if self.driver is not None:
            with contextlib.suppress(OSError):
                self.driver.send(message)

    def relay(self, start: float) -> dict[str, Any]:
        """Start the worker at `start` and carry its messages until it is done; the
        worker's own totals."""
        assert self.child is not None and self.driver is not None
        found = self.found(None)
        self.tell(("started", {**found, "start_ms": round(start * 1000)}))
        self.child.send(("start", start))
        share = len(range(self.n, self.job.plan.members, self.job.workers))
        config: dict[str, object] = {"members": share}
        aggregator = Aggregator(
            Path(self.job.out),
            config,
            1,
            Thresholds(None, None),
            worker=self.n,
            tables=WORKER_TABLES,
        )
        aggregator.start(round(start * 1000))
        next_flush = time.time() + results.FLUSH_S
        driver_gone = False
        while True:
            channels: list[Any] = [self.child] if driver_gone else [self.child, self.driver]
            for ready in wait(channels, timeout=0.5):
                if ready is self.driver:
                    try:
                        message = self.driver.recv()
                    except (EOFError, OSError):  # the driver is gone: the run ends
                        driver_gone, message = True, "stop"
                    if message == "stop":
                        with contextlib.suppress(OSError):
                            self.child.send("stop")
                    continue
                try:
                    kind, body = self.child.recv()
                except (EOFError, OSError):
                    aggregator.finish("cut short", None)
                    reason = f"its worker process (pid {self.pid}) died: {self._death()}"
                    self.tell(("failed", reason))
                    raise WorkerLost(f"worker {self.n}: {reason}") from None
                if kind == "second":
                    assert isinstance(body, Second)
                    aggregator.add(body)
                    self.tell(("second", body.slim()))
                    continue
                if kind == "done" or kind == "aborted":
                    aggregator.finish("completed" if kind == "done" else "cut short", None)
                    totals = _totals(self.n, aggregator)
                    self.tell(("result", totals))
                    self.tell((kind, body))
                    return totals
                self.tell((kind, body))  # ready, failed
            if time.time() >= next_flush:
                next_flush = time.time() + results.FLUSH_S
                aggregator.flush()

    def _death(self) -> str:
        if self.process is None:
            return "not started"
        self.process.join(timeout=5)
        code = self.process.exitcode
        if code is None:
            return "it stopped answering"
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"

    def close(self) -> None:
        if self.child is not None:
            with contextlib.suppress(OSError):
                self.child.send("stop")
        if self.process is not None:
            self.process.join(timeout=worker.LEAVE_TIMEOUT_S + 5)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=5)
        for channel in (self.child, self.driver):
            if channel is not None:
                channel.close()


def _totals(n: int, aggregator: Aggregator) -> dict[str, Any]:
    """What the worker itself counted: the driver sets it beside its own merge."""
    t = aggregator.totals
    errors, signals = split(t.codes())
    return {
        "worker": n,
        "requests": t.requests(),
        "errors": sum(errors.values()),
        "signals": sum(signals.values()),
        "commits": t.commits,
        "rebalances": t.rebalances.count,
        "cpu_s": round(t.cpu_s, 3),
        "rows": {
            name: count
            for name, count in (aggregator.results.rows if aggregator.results else {}).items()
            if name in WORKER_TABLES
        },
        "errors_dropped": t.errors_dropped,
    }


def _unreachable(fleet: FleetConfig, timeout_s: float) -> str | None:
    """Why this host cannot reach the bootstrap broker (a Metadata request, over TLS and
    logged in as the members' settings say: their CA and certificate files are this
    host's), or None."""
    import trio

    from fastcoord.loadtest.run import ask_metadata, unreachable

    try:
        trio.run(ask_metadata, fleet.bootstrap, timeout_s, None, fleet.security)
    except Exception as exc:
        return unreachable(fleet.bootstrap, fleet.security, exc)
    return None
