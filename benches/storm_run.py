"""A join storm measured: a loadtest's members all joining at once, and a new client meanwhile.

    python -m benches.storm_run --group-protocol both --members 100000 --groups 1000 \\
        --members-per-connection 1000 --duration 60

A storm is the server's worst minute: a hundred connections each bringing a thousand joins at
once, every group rebalancing, and a new client (a restarted consumer, an admin tool) queued
behind all of it for its ApiVersions. The steady figures of benches/loadtest_run.py start once
the storm is over, so this module measures the storm itself, against a fresh
`fastcoord serve` (in memory, pinned to one core when there are two) with the loadtest pinned
to the other:

- the connection attempts of the loadtest that failed (its ApiVersions NETWORK_EXCEPTIONs,
  which it counts once for every member waiting on the connection: divided by the members a
  connection holds);
- when every member was stable (the end of the loadtest's joining phase, from summary.json);
- a new connection probed every 100 ms from a thread (ApiVersions v0, Metadata v1 of every
  topic, FindCoordinator v1 of a group of the run), each request timed, failures counted;
- the storm's busy time: the server's CPU from the run's start until every member was stable,
  plus 2 s, sampled every 0.25 s.

`--group-protocol both` runs classic, then consumer, each against its own fresh server, and
adds the consumer/classic busy-time ratio. Each figure is printed beside its aim. The prober
and the sampler share the loadtest's core, as a client beside the storm would. `--out DIR`
keeps each run's loadtest results, probes, CPU samples and server log in DIR/<protocol>.
Nothing here runs at import (asv imports benches/).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benches.loadtest_run import loadtest_command, run_start, server_args
from fastcoord.client.blocking import Connection
from fastcoord.loadtest.scenarios import Plan
from fastcoord.loadtest.summary import exact_percentile
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
)
from fastcoord.protocol.schema import Request
from fastcoord.testing import child_env, fastcoord_server
from fastcoord.testing_cpu import cores, pinned, sched_seconds

PROBE_EVERY_S = 0.1
# A probe that waits longer has failed: the loadtest's own connect timeout.
PROBE_TIMEOUT_S = 10.0
SAMPLE_EVERY_S = 0.25
# The storm's busy time runs this long past the second every member was stable: the last
# assignments' answers and the first heartbeats of the steady state.
AFTER_STABLE_S = 2.0
# How long past --duration the loadtest may take to leave and write its results.
RUN_GRACE_S = 120.0
PROBED = ("connect", "ApiVersions", "Metadata", "FindCoordinator")
AIM_PROBE_P99_MS = 100.0
AIM_BUSY_RATIO = 2.0


@dataclass
class ProbeRow:
    """One new connection: when it started (monotonic), each step's milliseconds, the error."""

    started: float
    ms: dict[str, float] = field(default_factory=dict)
    error: str | None = None


class Prober:
    """A new connection every PROBE_EVERY_S from a thread, its bootstrap requests timed."""

    def __init__(self, host: str, port: int, groups: list[str]) -> None:
        self.host, self.port, self.groups = host, port, groups
        self.rows: list[ProbeRow] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        due = time.monotonic()
        while not self._stop.is_set():
            self.rows.append(self.probe(self.groups[len(self.rows) % len(self.groups)]))
            # Every tick, on time: ticks missed while a probe hung are skipped, not bunched.
            due += PROBE_EVERY_S * max(1, -(-(time.monotonic() - due) // PROBE_EVERY_S))
            self._stop.wait(max(0.0, due - time.monotonic()))

    def probe(self, group: str) -> ProbeRow:
        row = ProbeRow(time.monotonic())
        steps: list[tuple[str, Request, int]] = [
            ("ApiVersions", ApiVersionsRequest(), 0),
            ("Metadata", MetadataRequest(topics=None), 1),
            ("FindCoordinator", FindCoordinatorRequest(key=group, key_type=0), 1),
        ]
        try:
            start = time.perf_counter()
            with Connection(self.host, self.port, timeout=PROBE_TIMEOUT_S) as connection:
                row.ms["connect"] = (time.perf_counter() - start) * 1000
                for name, request, version in steps:
                    start = time.perf_counter()
                    response = connection.request(request, version)
                    row.ms[name] = (time.perf_counter() - start) * 1000
                    if (
                        isinstance(response, ApiVersionsResponse | FindCoordinatorResponse)
                        and response.error_code != 0
                    ):
                        row.error = f"{name}: error {response.error_code}"
                        break
        except Exception as exc:  # a timeout, a reset, a bad answer: what the client saw
            row.error = f"{type(exc).__name__}: {exc}"
        return row

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(PROBE_TIMEOUT_S * (len(PROBED) + 1))


class CpuSampler:
    """A process's CPU and its wait for a core, every SAMPLE_EVERY_S from a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, float, float]] = []  # (monotonic, cpu s, wait s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(SAMPLE_EVERY_S):
                break
        self.sample()

    def sample(self) -> None:
        measured = sched_seconds(self.pid)
        if measured is not None:
            self.samples.append((time.monotonic(), *measured))

    def at(self, moment: float) -> tuple[float, float]:
        """(CPU, wait) at `moment`, interpolated between the samples around it."""
        if not self.samples:
            return 0.0, 0.0
        before = [s for s in self.samples if s[0] <= moment] or self.samples[:1]
        after = [s for s in self.samples if s[0] >= moment] or self.samples[-1:]
        (t0, cpu0, wait0), (t1, cpu1, wait1) = before[-1], after[0]
        share = (moment - t0) / (t1 - t0) if t1 > t0 else 0.0
        return cpu0 + (cpu1 - cpu0) * share, wait0 + (wait1 - wait0) * share

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@dataclass
class Storm:
    """One protocol's storm, as printed."""

    protocol: str
    returncode: int
    stable_s: int | None  # the second every member was stable in; None: not in the run
    busy_s: float  # server CPU until stable + AFTER_STABLE_S (until the end when never)
    wait_s: float  # the server's wait for a core meanwhile
    failed_connections: float
    failed_members: int
    probes: list[ProbeRow]


def stable_second(summary: dict[str, Any]) -> int | None:
    """The second every member was stable in: the joining phase's last, when the steady
    phase was found by the members (not by --warmup, nor the run's end)."""
    joining = (summary.get("phases") or {}).get("joining")
    if summary.get("steady_by") != "members" or joining is None:
        return None
    return int(joining["last_s"])


def failed_attempts(summary: dict[str, Any]) -> int:
    """The loadtest's connection attempts that failed, in members: it counts an
    ApiVersions NETWORK_EXCEPTION for each member that waited on the connection."""
    api = summary.get("apis", {}).get("ApiVersions") or {}
    return int(api.get("errors", {}).get("NETWORK_EXCEPTION", 0))


def probe_groups(args: argparse.Namespace) -> list[str]:
    """The run's group names, as the loadtest names them."""
    plan = Plan(
        scenario="steady",
        members=args.members,
        groups=args.groups,
        group_prefix="loadtest",
        duration_s=args.duration,
        churn_rate=0.0,
        wave_size=0,
        wave_interval_ms=0,
        restart_pause_ms=0,
        settle_timeout_s=0.0,
    )
    first = (g * args.members // args.groups for g in range(min(args.groups, args.members)))
    return sorted({plan.group_of(member) for member in first})


@contextmanager
def directory(out: str | None, protocol: str) -> Iterator[Path]:
    """Where a run keeps its files: --out's, kept, or a temporary one."""
    if out is not None:
        path = Path(out) / protocol
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix=f"fastcoord-storm-{protocol}-") as tmp:
        yield Path(tmp)


def measure(args: argparse.Namespace, protocol: str) -> Storm:
    """One storm against a fresh server."""
    client_core, server_core = cores()
    serving = server_args(protocol, args.heartbeat_interval_ms)
    # The prober's and the sampler's threads inherit the client's core.
    with (
        pinned(client_core),
        directory(args.out, protocol) as where,
        fastcoord_server(where, *serving, core=server_core) as server,
    ):
        out = where / "run"
        command = loadtest_command(server.bootstrap, protocol, args, out, client_core)
        with (
            CpuSampler(server.pid) as cpu,
            Prober(server.host, server.port, probe_groups(args)) as prober,
            open(where / "loadtest.out", "wb") as output,
        ):
            run = subprocess.Popen(
                command, env=child_env(), stdout=output, stderr=subprocess.STDOUT
            )
            try:
                started = run_start(out, run) - time.time() + time.monotonic()
                run.wait(timeout=args.duration + RUN_GRACE_S)
            finally:
                if run.poll() is None:
                    run.kill()
                    run.wait()
        if not (out / "summary.json").exists():
            raise RuntimeError(f"the {protocol} loadtest wrote no summary: {output.name}")
        summary = json.loads((out / "summary.json").read_text())
        (where / "probes.json").write_text(
            json.dumps([{"t": r.started - started, **r.ms, "error": r.error} for r in prober.rows])
        )
        (where / "cpu.json").write_text(
            json.dumps([(t - started, c, w) for t, c, w in cpu.samples])
        )
    stable = stable_second(summary)
    end = started + (stable + AFTER_STABLE_S if stable is not None else args.duration)
    cpu0, wait0 = cpu.at(started)
    cpu1, wait1 = cpu.at(end)
    members = failed_attempts(summary)
    return Storm(
        protocol=protocol,
        returncode=run.returncode,
        stable_s=stable,
        busy_s=cpu1 - cpu0,
        wait_s=wait1 - wait0,
        failed_connections=members / max(1, min(args.members_per_connection, args.members)),
        failed_members=members,
        probes=[r for r in prober.rows if started <= r.started <= end],
    )


def verdict(met: bool) -> str:
    return "met" if met else "NOT MET"


def report(storm: Storm, args: argparse.Namespace) -> list[str]:
    """The storm's lines, each beside its aim."""
    per_connection = min(args.members_per_connection, args.members)
    stable = (
        f"at {storm.stable_s} s"
        if storm.stable_s is not None
        else f"not within the run's {args.duration:g} s"
    )
    window = (
        f"start until every member was stable + {AFTER_STABLE_S:g} s"
        if storm.stable_s is not None
        else "the whole run, as none was stable: a floor"
    )
    failures = [r.error for r in storm.probes if r.error]
    lines = [
        f"{storm.protocol}: {args.members:,} members in {args.groups:,} groups, "
        f"{per_connection:,} a connection, {args.duration:g} s (loadtest exit {storm.returncode})",
        f"  connection attempts timed out: {storm.failed_connections:g} "
        f"({storm.failed_members:,} ApiVersions NETWORK_EXCEPTIONs: the loadtest counts one "
        f"per member of the connection, {per_connection:,} a connection); "
        f"aim: none timed out, {verdict(storm.failed_members == 0)}",
        f"  all members stable: {stable}",
        f"  new connections probed during the storm ({window}): {len(storm.probes)}, "
        f"{len(failures)} failed{': ' + '; '.join(sorted(set(failures))[:3]) if failures else ''}",
    ]
    worst = 0.0
    for name in PROBED:
        ms = [r.ms[name] for r in storm.probes if name in r.ms]
        if not ms:
            lines.append(f"    {name:16s} none answered")
            continue
        p99 = exact_percentile(ms, 99)
        worst = max(worst, p99) if name != "connect" else worst
        lines.append(
            f"    {name:16s} p50 {exact_percentile(ms, 50):8.1f} ms  p99 {p99:8.1f} ms  "
            f"max {max(ms):8.1f} ms"
        )
    answered = bool(storm.probes) and not failures
    lines.append(
        f"    aim: each request's p99 <= {AIM_PROBE_P99_MS:g} ms, none failed: "
        f"{verdict(answered and worst <= AIM_PROBE_P99_MS)}"
    )
    lines.append(
        f"  the storm's server CPU: {storm.busy_s:.2f} s ({window}; "
        f"the server waited {storm.wait_s:.2f} s for its core meanwhile)"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--group-protocol", choices=["classic", "consumer", "both"], default="both")
    parser.add_argument("--members", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--members-per-connection", type=int, default=1_000)
    parser.add_argument("--duration", type=float, default=60, help="the loadtest's seconds")
    parser.add_argument("--heartbeat-interval-ms", type=int, default=3_000)
    parser.add_argument("--commit-interval-ms", type=int, default=5_000)
    parser.add_argument("--out", metavar="DIR", help="keep each run's files in DIR/<protocol>")
    args = parser.parse_args(argv)
    if args.members < 1 or args.groups < 1 or args.members_per_connection < 1:
        parser.error("--members, --groups and --members-per-connection must be positive")
    protocols = ["classic", "consumer"] if args.group_protocol == "both" else [args.group_protocol]
    storms: dict[str, Storm] = {}
    for protocol in protocols:
        storms[protocol] = storm = measure(args, protocol)
        print("\n".join(report(storm, args)), flush=True)
    if len(storms) == 2:
        classic, consumer = storms["classic"], storms["consumer"]
        if classic.stable_s is None or consumer.stable_s is None or not classic.busy_s:
            print("consumer/classic busy time: none, a storm did not end within the run")
        else:
            ratio = consumer.busy_s / classic.busy_s
            print(
                f"consumer/classic busy time: {ratio:.2f}x "
                f"({consumer.busy_s:.2f} / {classic.busy_s:.2f} s); "
                f"aim: <= {AIM_BUSY_RATIO:g}x, {verdict(ratio <= AIM_BUSY_RATIO)}"
            )
    return 1 if any(s.returncode != 0 for s in storms.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
