"""A measured `fastcoord loadtest` against a fresh `fastcoord serve`, with the server's CPU.

    python -m benches.loadtest_run --members 100000 --groups 1000 \\
        --members-per-connection 1000 --duration 150 --window 60

Starts the server (in memory, pinned to one core when there are two) and the loadtest
(pinned to the other), samples the server's CPU and memory over the last `--window`
seconds of the run (the steady part, after the joins), and prints the loadtest's summary
figures for that window beside the server's: heartbeats/s, p50/p99/p99.9, the server's and
the generator's share of a core. `--group-protocol consumer` runs members of the consumer
group protocol instead, `both` runs each in turn against its own fresh server (classic
first), at the same heartbeat interval (the server's `group.consumer.heartbeat.interval.ms`
set to `--heartbeat-interval-ms`), and prints the two side by side. With
`--master URL --workers W` runs the generator's workers as a Spark stage (`local[2]`, ...)
rather than `--processes`: the window is then counted from the start the workers agreed,
read from the running summary.json, and the line adds the start spread. The line always
gives the generator's CPU twice: the workers' own (their tables), and that of every
process of the load test (driver, Spark's JVM and tasks, workers) over the window. With
`--scrape-every S` the server's admin port is on and
scraped (`GET /metrics`) every S seconds through the run, and `GET /v1/groups` once in the
window, each timed: what watching a server of that size costs it. Nothing here runs at
import (asv imports benches/).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from prometheus_client.parser import text_string_to_metric_families

from fastcoord.client.admin import AdminClient
from fastcoord.loadtest.histogram import Histogram
from fastcoord.testing import child_env, fastcoord_server
from fastcoord.testing_cpu import cores, rss_bytes, sched_seconds


def rss_mb(pid: int) -> float:
    return rss_bytes(pid) / (1 << 20)


HEARTBEAT_API = {"classic": "Heartbeat", "consumer": "ConsumerGroupHeartbeat"}


def window_figures(out: Path, first: int, last: int, api: str = "Heartbeat") -> dict[str, Any]:
    """Heartbeat latency and generator CPU over seconds first..last of the run."""
    hb = Histogram()
    for r in ds.dataset(out / "latency", format="parquet").to_table().to_pylist():
        if r["api"] == api and first <= r["elapsed_s"] <= last:
            hb.merge(
                Histogram.from_sparse(
                    r["buckets"], r["counts"], r["sum_us"] * 1000, r["max_us"] * 1000
                )
            )
    # A run on Spark writes a states row per worker per second: added up per second.
    per_second: dict[int, dict[str, Any]] = {}
    for r in ds.dataset(out / "states", format="parquet").to_table().to_pylist():
        if first <= r["elapsed_s"] <= last:
            merged = per_second.setdefault(r["elapsed_s"], {"cpu_s": 0.0, "stable": 0})
            merged["cpu_s"] += r["cpu_s"]
            merged["stable"] += r["stable"]
    seconds = list(per_second.values())
    span = max(1, len(seconds))
    return {
        "heartbeats_per_s": hb.count / span,
        "p50_ms": hb.percentile_ms(50),
        "p99_ms": hb.percentile_ms(99),
        "p99_9_ms": hb.percentile_ms(99.9),
        "max_ms": hb.max_ms,
        "generator_cores": sum(r["cpu_s"] for r in seconds) / span,
        "stable": min((r["stable"] for r in seconds), default=0),
    }


def run_start(out: Path, run: subprocess.Popen[bytes]) -> float:
    """The run's start (wall clock), once its summary.json says it."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and run.poll() is None:
        try:
            started = json.loads((out / "summary.json").read_text())["started"]
        except (OSError, ValueError, KeyError):
            started = None
        if started:
            return datetime.fromisoformat(started).timestamp()
        time.sleep(0.5)
    raise RuntimeError("the load test never started")


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its descendants (the driver, Spark's JVM, its tasks
    and the workers), from /proc; the dead ones are not counted."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        measured = sched_seconds(p)
        total += measured[0] if measured else 0.0
    return total


class Scraper:
    """GET /metrics every `every` s from a thread while the run goes on; timed."""

    def __init__(self, address: str | None, every: float | None) -> None:
        self.client = AdminClient(address, timeout_s=30.0) if address else None
        self.every = every or 0.0
        self.seconds: list[float] = []
        self.groups_s: float | None = None
        self.groups_count = 0
        self.groups_bytes = 0
        self.metrics_bytes = 0
        self.last = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        assert self.client is not None
        while not self._stop.wait(self.every):
            started = time.perf_counter()
            self.last = self.client.metrics_text()
            self.seconds.append(time.perf_counter() - started)
            self.metrics_bytes = len(self.last)

    def groups(self) -> None:
        if self.client is None:
            return
        started = time.perf_counter()
        status, body = self.client.request("GET", "/v1/groups")
        self.groups_s = time.perf_counter() - started
        assert status == 200, status
        self.groups_bytes = len(body)
        self.groups_count = body.count(b'"group_id"')

    def describe(self) -> str:
        ms = sorted(s * 1000 for s in self.seconds)
        handled = {
            (s.name, s.labels.get("le")): s.value
            for family in text_string_to_metric_families(self.last)
            for s in family.samples
            if s.name.startswith("fastcoord_admin_handling_seconds")
        }
        count = handled[("fastcoord_admin_handling_seconds_count", None)]
        server_ms = handled[("fastcoord_admin_handling_seconds_sum", None)] / count * 1000
        return (
            f"the server's time per admin request {server_ms:.2f} ms (of {count:.0f}); "
            f"admin port: {len(ms)} scrapes of /metrics ({self.metrics_bytes:,} bytes), "
            f"p50 {statistics.median(ms):.1f} ms, max {ms[-1]:.1f} ms; /v1/groups "
            f"({self.groups_count:,} groups, {self.groups_bytes:,} bytes) in "
            f"{(self.groups_s or 0) * 1000:.0f} ms"
        )

    def __enter__(self) -> Scraper:
        if self.client is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--members-per-connection", type=int, default=1_000)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--master", help="the workers as a Spark stage on this master")
    parser.add_argument("--workers", type=int, default=1, help="with --master")
    parser.add_argument("--duration", type=float, default=150)
    parser.add_argument("--window", type=float, default=60, help="seconds sampled at the end")
    parser.add_argument("--heartbeat-interval-ms", type=int, default=3_000)
    parser.add_argument("--commit-interval-ms", type=int, default=5_000)
    parser.add_argument(
        "--group-protocol", choices=["classic", "consumer", "both"], default="classic"
    )
    parser.add_argument(
        "--scrape-every", type=float, metavar="S", help="admin port on, /metrics scraped every S s"
    )
    args = parser.parse_args(argv)
    protocols = ["classic", "consumer"] if args.group_protocol == "both" else [args.group_protocol]
    rows = []
    failed = False
    for protocol in protocols:
        line, returncode = measure(args, protocol)
        rows.append((protocol, line))
        failed |= returncode != 0
    if len(rows) > 1:
        print("side by side, one after the other:")
        for protocol, line in rows:
            print(f"  {protocol}: {line}")
    return 1 if failed else 0


def server_args(protocol: str, heartbeat_interval_ms: int) -> tuple[str, ...]:
    """`fastcoord serve`'s arguments for a run: in memory, 12 partitions, and for the
    consumer protocol the fleet's heartbeat interval as the group's."""
    args: tuple[str, ...] = ("--in-memory", "--num-partitions", "12")
    if protocol == "consumer":
        interval = str(heartbeat_interval_ms)
        args += ("--group-consumer-heartbeat-interval-ms", interval)
        args += ("--group-consumer-min-heartbeat-interval-ms", interval)
    return args


def loadtest_command(
    bootstrap: str,
    protocol: str,
    args: argparse.Namespace,
    out: Path,
    client_core: int | None,
    *extra: str,
) -> list[str]:
    """`fastcoord loadtest` against `bootstrap`, pinned to `client_core` when there is one,
    with the run's shape from `args` (members, groups, sharing, duration, intervals)."""
    return [
        *(["taskset", "-c", str(client_core)] if client_core is not None else []),
        sys.executable,
        *("-m", "fastcoord", "loadtest", "--bootstrap", bootstrap),
        *("--group-protocol", protocol),
        *("--members", str(args.members), "--groups", str(args.groups)),
        *("--members-per-connection", str(args.members_per_connection)),
        *extra,
        *("--duration", str(args.duration)),
        *("--heartbeat-interval-ms", str(args.heartbeat_interval_ms)),
        *("--commit-interval-ms", str(args.commit_interval_ms)),
        *("--out", str(out)),
    ]


def measure(args: argparse.Namespace, protocol: str) -> tuple[str, int]:
    """One run against a fresh server: its summary printed, and the steady window's line."""
    client_core, server_core = cores()
    with tempfile.TemporaryDirectory(prefix="fastcoord-loadtest-run-") as tmp:
        out = Path(tmp) / "run"
        serving = server_args(protocol, args.heartbeat_interval_ms)
        if args.scrape_every:
            serving += ("--admin-port", "0")
        with fastcoord_server(Path(tmp), *serving, core=server_core) as server:
            workers = (
                ("--master", args.master, "--workers", str(args.workers))
                if args.master
                else ("--processes", str(args.processes))
            )
            command = loadtest_command(server.bootstrap, protocol, args, out, client_core, *workers)
            run = subprocess.Popen(
                command, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
            # The run's seconds count from its start, which a run on Spark agrees on only
            # once its session is up and its workers ready: read from the running summary.
            started = run_start(out, run) - time.time() + time.monotonic()
            with Scraper(server.admin if args.scrape_every else None, args.scrape_every) as scrape:
                time.sleep(max(0.0, started + args.duration - args.window - 2 - time.monotonic()))
                before = sched_seconds(server.pid)
                tree_before = tree_cpu_s(run.pid)
                t0 = time.monotonic()
                time.sleep(args.window / 2)
                scrape.groups()
                time.sleep(args.window / 2)
                after = sched_seconds(server.pid)
                tree_after = tree_cpu_s(run.pid)
            t1 = time.monotonic()
            rss = rss_mb(server.pid)
            output, _ = run.communicate(timeout=args.duration + 120)
            # Within the server's block: a server still busy with the fleet's leaves may
            # outlast its stop's 10 s, and the run's figures are printed either way.
            first = int(t0 - started)
            figures = window_figures(out, first + 1, int(t1 - started), HEARTBEAT_API[protocol])
            summary = json.loads((out / "summary.json").read_text())
            server_cores = (after[0] - before[0]) / (t1 - t0) if before and after else None
            workers = summary.get("workers")
            spread = f", start spread {workers['start_spread_ms']} ms" if workers else ""
            print(output.decode(errors="replace"))
            per_heartbeat = (
                f"{server_cores / figures['heartbeats_per_s'] * 1e6:.1f} us of server CPU a "
                "heartbeat (commits included); "
                if server_cores is not None and figures["heartbeats_per_s"]
                else ""
            )
            generator = figures["generator_cores"]
            line = (
                f"steady window {args.window:.0f} s: {figures['stable']:,} members stable, "
                f"{figures['heartbeats_per_s']:,.0f} heartbeats/s, p50 {figures['p50_ms']:.2f} ms, "
                f"p99 {figures['p99_ms']:.2f} ms, p99.9 {figures['p99_9_ms']:.2f} ms, "
                f"max {figures['max_ms']:.2f} ms; server "
                f"{server_cores if server_cores is None else f'{server_cores:.2f}'} cores, "
                f"RSS {rss:.0f} MB; {per_heartbeat}generator {generator:.2f} cores "
                f"(whole run {summary['generator']['cores']:.2f}), "
                f"{generator / max(1, figures['stable']) * 1e6:.2f} us CPU/s a member; "
                f"the loadtest's processes {(tree_after - tree_before) / (t1 - t0):.2f} cores"
                f"{spread}; exit {run.returncode}"
            )
            print(f"{protocol}: {line}")
            if scrape.seconds:
                print(scrape.describe())
    return line, run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
