"""The driver's side of a load test run on Spark (`--master URL --workers W`).

The workers are the W tasks of one barrier stage (barrier.py), which Spark starts together
or not at all, on `local[N]` or on any cluster it runs on. The driver refuses what cannot
work before it submits anything: fewer task slots than workers (Spark itself would retry
for ten minutes), dynamic allocation (which Spark refuses for a barrier stage). It listens
for its workers on a port of its own (multiprocessing's connections, with their
challenge-response on this run's key: only the workers are heard), and the run's loop
(run.py) reads them as it reads the pipes of --processes' workers.

Spark's own console output is kept to errors; a failed stage is reported by the worker
that failed it, over its connection, and Spark's message is the fallback.
"""

from __future__ import annotations

import functools
import os
import queue
import re
import secrets
import socket
import sys
import threading
import time
from collections.abc import Mapping
from multiprocessing import connection
from multiprocessing.connection import Connection as Pipe
from typing import TYPE_CHECKING, Any

from fastcoord.loadtest import barrier

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

GREETING_S = 10.0  # for a caller to prove it holds the run's key and name its worker
SLOTS_WAIT_S = 20.0  # for a cluster's executors to register before the stage is submitted
LOCAL = re.compile(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")


class SparkRefused(Exception):
    """The run cannot go on this Spark as set: the message says what to change."""


def local_slots(master: str, task_cpus: int) -> int | None:
    """How many tasks `local`, `local[N]`, `local[*]` or `local[N,F]` runs at once; None
    for any other master."""
    match = LOCAL.match(master.strip())
    if match is None:
        return None
    cores = match.group(1)
    threads = 1 if cores is None else (os.cpu_count() or 1) if cores == "*" else int(cores)
    return threads // max(1, task_cpus)


def slots_message(master: str, workers: int, slots: int, task_cpus: int) -> str:
    cpus = f" at spark.task.cpus={task_cpus}" if task_cpus != 1 else ""
    where = (
        f"use --master local[{workers * task_cpus}]"
        if local_slots(master, task_cpus) is not None
        else "add workers or cores to the cluster"
    )
    return (
        f"--workers {workers} needs {workers} task slots at once (a barrier stage), but "
        f"--master {master} has {slots}{cpus}: {where}, or use --workers {max(1, slots)}"
    )


def check_local(master: str, workers: int, conf: Mapping[str, str]) -> None:
    """Refuse at once what a local master cannot run (before a JVM starts)."""
    task_cpus = int(conf.get("spark.task.cpus", "1"))
    slots = local_slots(master, task_cpus)
    if slots is not None and slots < workers:
        raise SparkRefused(slots_message(master, workers, slots, task_cpus))


def session(master: str, conf: Mapping[str, str]) -> SparkSession:
    """A session for the load: the executors run this Python (unless PYSPARK_PYTHON says
    otherwise), and a barrier stage short of slots fails in seconds rather than retrying
    for ten minutes."""
    from fastcoord.pipeline.session import spark_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {
        "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
        "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "3",
        **conf,
    }
    return spark_session(master, "fastcoord loadtest", settings)


def check_cluster(spark: SparkSession, master: str, workers: int) -> None:
    """Refuse dynamic allocation, and too few slots once the executors have registered."""
    sc = spark.sparkContext
    conf = sc.getConf()
    local = local_slots(master, 1) is not None
    if not local and conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        raise SparkRefused(
            "spark.dynamicAllocation.enabled is true, and Spark runs no barrier stage under "
            f"dynamic allocation: the {workers} workers must start together; use --conf "
            "spark.dynamicAllocation.enabled=false"
        )
    task_cpus = int(conf.get("spark.task.cpus", "1"))
    deadline = time.monotonic() + (0 if local else SLOTS_WAIT_S)
    while True:
        slots = _slots(spark)
        if slots is None or slots >= workers:
            return
        if time.monotonic() >= deadline:
            raise SparkRefused(slots_message(master, workers, slots, task_cpus))
        time.sleep(0.5)


def _slots(spark: SparkSession) -> int | None:
    """The tasks Spark can run at once now (what its barrier check counts), or None when
    this Spark does not say."""
    try:
        jsc = spark.sparkContext._jsc.sc()
        profile = jsc.resourceProfileManager().defaultResourceProfile()
        return int(jsc.maxNumConcurrentTasks(profile))
    except Exception:  # an internal call: another Spark may lack it; Spark's check remains
        return None


def failure_text(exc: BaseException) -> str:
    """One line for a failed stage: the slots Spark wanted, or its first line."""
    text = str(exc)
    slots = re.search(r"requires (\d+) slots, but only (\d+) are available", text)
    if slots:
        return f"Spark had {slots.group(2)} task slots for the {slots.group(1)} workers"
    lost = re.search(r"(worker \d+: [^\n]+)", text)
    if lost:
        return lost.group(1)
    for line in text.splitlines():
        if "Exception:" in line or "Error:" in line:
            return line.strip()
    return text.splitlines()[0] if text else type(exc).__name__


class SparkWorkers:
    """The W workers as one barrier stage, and the driver's end of their connections."""

    def __init__(self, spark: SparkSession, job_of: Any, workers: int, host: str) -> None:
        self.spark = spark
        self.workers = workers
        self.authkey = secrets.token_bytes(32)
        self.listener = socket.create_server((host, 0))
        self.job: barrier.TaskJob = job_of(self.listener.getsockname()[:2], self.authkey)
        self.results: list[str] | None = None
        self.failure: str | None = None
        self._arrived: queue.Queue[tuple[Pipe, int]] = queue.Queue()
        self._stage = threading.Thread(target=self._run_stage, name="spark-stage", daemon=True)
        self._accepting = threading.Thread(target=self._accept, name="spark-accept", daemon=True)

    def start(self) -> None:
        self._accepting.start()
        self._stage.start()

    def _run_stage(self) -> None:
        sc = self.spark.sparkContext
        sc.setJobGroup("fastcoord-loadtest", "fastcoord loadtest workers", True)
        rdd = sc.parallelize(range(self.workers), self.workers)
        task = functools.partial(barrier.run_task, self.job)
        try:
            self.results = rdd.barrier().mapPartitions(task).collect()
        except Exception as exc:
            self.failure = failure_text(exc)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:  # closed: the run is over
                return
            threading.Thread(target=self._greet, args=(sock,), daemon=True).start()

    def _greet(self, sock: socket.socket) -> None:
        """Hear one caller: it proves it has the key and names its worker within
        GREETING_S, or is closed (a silent caller holds up no one)."""
        channel = Pipe(sock.detach())
        timer = threading.Timer(GREETING_S, channel.close)
        timer.start()
        try:
            connection.deliver_challenge(channel, self.authkey)
            connection.answer_challenge(channel, self.authkey)
            kind, n = channel.recv()
        except Exception:  # no key, the wrong key, silence, or nonsense
            channel.close()
            return
        finally:
            timer.cancel()
        if kind == "hello" and isinstance(n, int) and 0 <= n < self.workers:
            self._arrived.put((channel, n))
        else:
            channel.close()

    def arrived(self) -> dict[Pipe, int]:
        """The workers' connections made since the last call."""
        found: dict[Pipe, int] = {}
        while True:
            try:
                channel, n = self._arrived.get_nowait()
            except queue.Empty:
                return found
            found[channel] = n

    @property
    def ended(self) -> bool:
        """Whether the stage is over (its tasks all ended, or it failed)."""
        return not self._stage.is_alive()

    def close(self, grace_s: float) -> None:
        """Wait up to `grace_s` for the stage to end, then cancel it; stop listening."""
        self._stage.join(timeout=grace_s)
        if self._stage.is_alive():
            self.spark.sparkContext.cancelJobGroup("fastcoord-loadtest")
            self._stage.join(timeout=30)
        self.listener.close()
        self.spark.stop()
