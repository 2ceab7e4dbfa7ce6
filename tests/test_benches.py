"""Every asv benchmark runs once, so that benches/ cannot rot between benchmark runs."""

from __future__ import annotations

import importlib
import inspect
import itertools
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["FASTCOORD_BENCH_SMOKE"] = "1"  # before the benchmark modules are imported

import benches

# asv's kinds of benchmark that this suite runs (track_ ones return a figure they measured).
PREFIXES = ("time_", "track_")

BENCHMARK_CLASSES = [
    cls
    for info in pkgutil.iter_modules(benches.__path__)
    if info.name.startswith("bench_")
    for _, cls in inspect.getmembers(
        importlib.import_module(f"benches.{info.name}"), inspect.isclass
    )
    if any(name.startswith(PREFIXES) for name in vars(cls))
]


def test_there_are_benchmarks() -> None:
    assert BENCHMARK_CLASSES


@pytest.mark.parametrize("cls", BENCHMARK_CLASSES, ids=lambda c: c.__name__)
def test_benchmark_runs(cls: type, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # as asv, which runs benchmarks in a scratch directory
    params = getattr(cls, "params", ())
    # As asv does: setup_cache runs once, and its result comes first to setup and benchmarks.
    cache = (cls().setup_cache(),) if hasattr(cls, "setup_cache") else ()
    for combo in itertools.product(*params) if params else [()]:
        bench = cls()
        if hasattr(bench, "setup"):
            bench.setup(*cache, *combo)
        for name in sorted(vars(cls)):
            if name.startswith(PREFIXES):
                getattr(bench, name)(*cache, *combo)


def run_script(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """One of benches/' scripts (not asv benchmarks) run from the repository's root; it must
    exit 0."""
    run = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run


@pytest.mark.slow  # saturates both cores for a while: not beside the other suite's timings
def test_cluster_run_smoke() -> None:
    """benches/cluster_run.py is a script, not an asv benchmark: run it tiny (half a
    second a phase, a few members a node) to prove that every phase and the report work."""
    run = run_script(
        "benches.cluster_run",
        *("--rounds", "1", "--seconds", "0.5", "--warmup", "0.2"),
        *("--drivers", "1", "--shared-members", "40", "--own-connections", "40"),
        *("--own-rate", "5000"),
        timeout=120,
    )
    for row in ("librdkafka mock", "(a) lone server", "(b) 2-node cluster", "(c) one node of 2"):
        assert row in run.stdout
    assert "| members on their own connections |" in run.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_cluster_run_callgrind_smoke() -> None:
    """The script's instruction counts (two servers under callgrind): about a minute, its
    heartbeat counts being fixed; few members, as the smoke test's question is whether the
    mode runs and reports, not what it counts."""
    run = run_script(
        "benches.cluster_run",
        *("--callgrind", "--shared-members", "60", "--own-connections", "20"),
        timeout=900,
    )
    assert "| node / lone |" in run.stdout


@pytest.mark.slow  # a server and a loadtest on both cores for the run's seconds
def test_loadtest_run_smoke() -> None:
    """benches/loadtest_run.py, tiny: the server and the fleet it starts, and the steady
    window's line."""
    run = run_script(
        "benches.loadtest_run",
        *("--members", "200", "--groups", "4", "--members-per-connection", "50"),
        *("--duration", "8", "--window", "3"),
        timeout=120,
    )
    assert "classic: steady window 3 s: " in run.stdout, run.stdout
    assert "; exit 0" in run.stdout, run.stdout


@pytest.mark.slow  # a server and the mock driven on both cores for the run's seconds
def test_lone_heartbeats_run_smoke() -> None:
    """benches/lone_heartbeats_run.py against fastcoord and the librdkafka mock, tiny: both
    peers' lines and their ratios come out, and with perf present the samples split each
    peer's CPU (what the user-space aim is judged by)."""
    split = ("--perf-split",) if shutil.which("perf") else ()
    run = run_script(
        "benches.lone_heartbeats_run",
        *("--connections", "20", "--rate", "500", "--seconds", "2", "--warmup", "0.5"),
        *("--server", "both", *split),
        timeout=120,
    )
    assert "fastcoord: 20 connections" in run.stdout, run.stdout
    assert "librdkafka mock: 20 connections" in run.stdout, run.stdout
    assert "fastcoord / mock, CPU per heartbeat: " in run.stdout, run.stdout
    if split:
        assert run.stdout.count("perf record in the window: ") == 2, run.stdout
        assert "(perf record's samples)" in run.stdout, run.stdout


@pytest.mark.slow  # a server and a loadtest on both cores for the run's seconds
def test_storm_run_smoke(tmp_path: Path) -> None:
    """benches/storm_run.py is a script, not an asv benchmark: a storm of a few hundred
    members proves that the run, the prober, the CPU sampler and the report work."""
    run = run_script(
        "benches.storm_run",
        *("--group-protocol", "classic", "--members", "200", "--groups", "4"),
        *("--members-per-connection", "50", "--duration", "8", "--out", str(tmp_path)),
        timeout=120,
    )
    assert "all members stable: at " in run.stdout, run.stdout
    assert "connection attempts timed out: 0 " in run.stdout, run.stdout
    probes = json.loads((tmp_path / "classic" / "probes.json").read_text())
    assert probes and not [p for p in probes if p["error"]], probes
    assert all("FindCoordinator" in p for p in probes)


@pytest.mark.cluster  # ZooKeeper and three nodes, for the run's seconds
def test_coordinator_moves_run_smoke() -> None:
    """benches/coordinator_moves_run.py, tiny: three nodes kept in ZooKeeper, a group of ten
    moved once under the load test; the move is seen on the new node and in the summary."""
    run = run_script(
        "benches.coordinator_moves_run",
        *("--members", "10", "--duration", "20"),
        timeout=180,
    )
    assert "moves-10-0000: loaded Stable on its new node" in run.stdout, run.stdout
    # Every member was served at the new node, and had heard NOT_COORDINATOR from the old one
    # on whichever of its requests came first: at least once each, at most once for each
    # request it had in flight (a heartbeat and a commit).
    served = r"moves-10-0000: \S+ -> \S+ at \S+, 10 members served there"
    assert re.search(served, run.stdout), run.stdout
    told = re.search(r"steady phase NOT_COORDINATOR answers: (\d+)", run.stdout)
    assert told and 10 <= int(told[1]) <= 20, run.stdout
