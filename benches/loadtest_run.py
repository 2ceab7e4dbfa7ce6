"""A measured `fastcoord loadtest` against a fresh `fastcoord serve`, with the server's CPU.

    python -m benches.loadtest_run --members 100000 --groups 1000 \\
        --members-per-connection 1000 --duration 150 --window 60

Starts the server (in memory, pinned to one core when there are two) and the loadtest
(pinned to the other), samples the server's CPU and memory over the last `--window`
seconds of the run (the steady part, after the joins), and prints the loadtest's summary
figures for that window beside the server's: heartbeats/s, p50/p99/p99.9, the server's and
the generator's share of a core. Nothing here runs at import (asv imports benches/).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from fastcoord.loadtest.histogram import Histogram
from fastcoord.testing import child_env, fastcoord_server
from fastcoord.testing_cpu import cores, rss_bytes, sched_seconds


def rss_mb(pid: int) -> float:
    return rss_bytes(pid) / (1 << 20)


def window_figures(out: Path, first: int, last: int) -> dict[str, Any]:
    """Heartbeat latency and generator CPU over seconds first..last of the run."""
    hb = Histogram()
    for r in ds.dataset(out / "latency", format="parquet").to_table().to_pylist():
        if r["api"] == "Heartbeat" and first <= r["elapsed_s"] <= last:
            hb.merge(
                Histogram.from_sparse(
                    r["buckets"], r["counts"], r["sum_us"] * 1000, r["max_us"] * 1000
                )
            )
    states = ds.dataset(out / "states", format="parquet").to_table().to_pylist()
    seconds = [r for r in states if first <= r["elapsed_s"] <= last]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--members-per-connection", type=int, default=1_000)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--duration", type=float, default=150)
    parser.add_argument("--window", type=float, default=60, help="seconds sampled at the end")
    parser.add_argument("--heartbeat-interval-ms", type=int, default=3_000)
    parser.add_argument("--commit-interval-ms", type=int, default=5_000)
    args = parser.parse_args(argv)
    client_core, server_core = cores()
    with tempfile.TemporaryDirectory(prefix="fastcoord-loadtest-run-") as tmp:
        out = Path(tmp) / "run"
        server_args = ("--in-memory", "--num-partitions", "12")
        with fastcoord_server(Path(tmp), *server_args, core=server_core) as server:
            command = [
                *(["taskset", "-c", str(client_core)] if client_core is not None else []),
                sys.executable,
                *("-m", "fastcoord", "loadtest", "--bootstrap", server.bootstrap),
                *("--members", str(args.members), "--groups", str(args.groups)),
                *("--members-per-connection", str(args.members_per_connection)),
                *("--processes", str(args.processes), "--duration", str(args.duration)),
                *("--heartbeat-interval-ms", str(args.heartbeat_interval_ms)),
                *("--commit-interval-ms", str(args.commit_interval_ms)),
                *("--out", str(out)),
            ]
            started = time.monotonic()
            run = subprocess.Popen(
                command, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
            time.sleep(max(0.0, args.duration - args.window - 2))
            before = sched_seconds(server.pid)
            t0 = time.monotonic()
            time.sleep(args.window)
            after = sched_seconds(server.pid)
            t1 = time.monotonic()
            rss = rss_mb(server.pid)
            output, _ = run.communicate(timeout=args.duration + 120)
        first = int(t0 - started)
        figures = window_figures(out, first + 1, int(t1 - started))
        summary = json.loads((out / "summary.json").read_text())
    server_cores = (after[0] - before[0]) / (t1 - t0) if before and after else None
    print(output.decode(errors="replace"))
    per_heartbeat = (
        f"{server_cores / figures['heartbeats_per_s'] * 1e6:.1f} us of server CPU a heartbeat "
        "(commits included); "
        if server_cores is not None and figures["heartbeats_per_s"]
        else ""
    )
    print(
        f"steady window {args.window:.0f} s: {figures['stable']:,} members stable, "
        f"{figures['heartbeats_per_s']:,.0f} heartbeats/s, p50 {figures['p50_ms']:.2f} ms, "
        f"p99 {figures['p99_ms']:.2f} ms, p99.9 {figures['p99_9_ms']:.2f} ms, "
        f"max {figures['max_ms']:.2f} ms; server "
        f"{server_cores if server_cores is None else f'{server_cores:.2f}'} cores, "
        f"RSS {rss:.0f} MB; {per_heartbeat}generator {figures['generator_cores']:.2f} cores "
        f"(whole run {summary['generator']['cores']:.2f}); exit {run.returncode}"
    )
    return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
