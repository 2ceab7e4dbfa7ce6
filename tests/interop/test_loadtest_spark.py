"""`fastcoord loadtest --master`: the workers as a Spark barrier stage, the real command
against the real `fastcoord serve`, on `local[4]`. The workers start together, each writes
its own tables, the driver's summary adds up to theirs and to what the server counted, the
report reads the run; too few slots are refused at once, and a worker killed mid-run ends
the run naming it, its tables left readable."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fastcoord.client.admin import AdminClient
from fastcoord.testing import ServerProcess, child_env, fastcoord_server
from tests.interop.test_loadtest import (
    FAST,
    SERVER_ARGS,
    loadtest,
    loadtest_command,
    summary,
    table,
)

pytestmark = pytest.mark.spark

WORKERS = 4
TABLES = ("latency", "states", "errors", "rebalances")
# Every worker's members commit while this holds, so every worker has rows of errors.
SCHEDULE = """
[[fault]]
at_ms = 4000
api = "OffsetCommit"
error = "OFFSET_METADATA_TOO_LARGE"
duration_ms = 2000
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    (tmp_path / "server").mkdir()
    with fastcoord_server(tmp_path / "server", *SERVER_ARGS, "--admin-port", "0") as running:
        yield running


def spark_args(server: ServerProcess, master: str, workers: int, *args: str) -> tuple[str, ...]:
    """A load test's arguments for `workers` workers on `master`, with FAST timings."""
    return ("--master", master, "--workers", str(workers), "--admin", server.admin, *args, *FAST)


def served(server: ServerProcess) -> dict[str, int]:
    """Requests the server answered, by API, as its /metrics counts them."""
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(AdminClient(server.admin).metrics_text()):
        for s in family.samples:
            if s.name == "fastcoord_requests_total":
                counts[s.labels["api"]] = int(s.value)
    return counts


def check_distributed_run(
    server: ServerProcess, tmp_path: Path, master: str, workers: int
) -> dict[str, Any]:
    """A run of `workers` workers on `master` that must pass, checked against its own tables
    and the server's count: its summary."""
    schedule = tmp_path / "faults.toml"
    schedule.write_text(SCHEDULE)
    out = tmp_path / "run"
    before = served(server)
    args = ("--members", str(50 * workers), "--groups", str(2 * workers), "--duration", "10")
    result = loadtest(
        server.bootstrap,
        out,
        *spark_args(server, master, workers, *args, "--faults", str(schedule)),
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    s = summary(out)
    assert s["outcome"] == "completed" and s["complete"]

    # They started together: the agreed start, each worker's own, and each one's first
    # second in its tables.
    each = s["workers"]["each"]
    assert [w["worker"] for w in each] == list(range(workers))
    began = [w["began_ms"] for w in each]
    assert max(began) - min(began) < 1000
    assert s["workers"]["start_spread_ms"] == max(began) - min(began)
    assert all(0 <= w["began_ms"] - w["start_ms"] < 1000 for w in each)
    assert all(w["start_ms"] > w["ready_ms"] for w in each)
    firsts = collections.defaultdict(list)
    for row in table(out, "states"):
        firsts[row["worker"]].append(row["time"])
    first = [min(firsts[n]).timestamp() for n in range(workers)]
    assert max(first) - min(first) < 1.0

    # Every table has rows from every worker, each in the worker's own part files.
    for name in TABLES:
        rows = table(out, name)
        assert {r["worker"] for r in rows} == set(range(workers)), name
        parts = sorted(p.name for p in (out / name).glob("*.parquet"))
        assert {p[: len("part-w0000")] for p in parts} == {
            f"part-w{n:04d}" for n in range(workers)
        }, name
        for w in each:
            assert w["rows"][name] == sum(r["worker"] == w["worker"] for r in rows), name
        assert s["tables"][name] == len(rows), name

    # The summary's totals are the workers' own, added up, and what the server counted.
    assert s["requests"]["count"] == sum(w["requests"] for w in each)
    assert s["requests"]["errors"] == sum(w["errors"] for w in each) > 0
    assert s["requests"]["signals"] == sum(w["signals"] for w in each)
    assert s["commits"]["count"] == sum(w["commits"] for w in each)
    counted = {api: a["count"] for api, a in s["apis"].items()}
    from_rows: collections.Counter[str] = collections.Counter()
    for row in table(out, "latency"):
        from_rows[row["api"]] += row["count"]
    assert dict(from_rows) == counted
    after = served(server)
    answered = {
        api: after[api] - before.get(api, 0) for api in after if after[api] > before.get(api, 0)
    }
    # The driver's probe and each worker's check of the bootstrap ask Metadata as well, and
    # every connection opens with ApiVersions, which the load test does not time: a
    # connection per member, each worker's to the bootstrap, the probes'.
    assert answered.pop("Metadata") == counted.pop("Metadata") + 1 + workers
    assert answered.pop("ApiVersions") == 50 * workers + 2 * workers + 1
    # Heartbeats in flight when the members leave are answered but never heard.
    heartbeats = counted.pop("Heartbeat")
    assert heartbeats <= answered.pop("Heartbeat") <= heartbeats * 1.01
    assert answered == counted

    # The report reads the run as it reads any: its figures are the summary's.
    report = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "fastcoord", "report", str(out), "--out", str(report)],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    by_api = {r["api"]: r for r in table(report / "tables", "errors_by_api")}
    assert {api: r["requests"] for api, r in by_api.items()} == {
        api: a["count"] for api, a in s["apis"].items()
    }
    assert sum(r["errors"] for r in by_api.values()) == s["requests"]["errors"]
    # Its percentiles too: the workers' histograms, merged by the report per second, give
    # the driver's (from the same buckets, to the microsecond).
    whole = [r for r in table(report / "tables", "latency_phases") if r["phase"] == "run"]
    assert {r["api"] for r in whole} == set(s["apis"])
    for r in whole:
        api = s["apis"][r["api"]]
        for figure in ("p50_ms", "p99_ms", "max_ms"):
            assert r[figure] == pytest.approx(api[figure], abs=0.0011), (r["api"], figure)
    states = table(report / "tables", "member_states")
    assert max(r["stable"] for r in states) == 50 * workers
    return s


def test_four_workers_on_local_spark(server: ServerProcess, tmp_path: Path) -> None:
    s = check_distributed_run(server, tmp_path, f"local[{WORKERS}]", WORKERS)
    assert s["workers"]["master"] == f"local[{WORKERS}]"


def test_too_few_slots_are_refused_at_once(server: ServerProcess, tmp_path: Path) -> None:
    began = time.monotonic()
    args = spark_args(server, "local[2]", 3, "--members", "30")
    result = loadtest(server.bootstrap, tmp_path / "run", *args, timeout=60)
    assert time.monotonic() - began < 10
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "fastcoord loadtest: --workers 3 needs 3 task slots at once (a barrier stage), but "
        "--master local[2] has 2: use --master local[3], or use --workers 2"
    )
    assert not (tmp_path / "run").exists()


def test_a_killed_worker_ends_the_run_naming_it(server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = spark_args(server, f"local[{WORKERS}]", WORKERS, "--members", "120", "--duration", "60")
    command = loadtest_command(server.bootstrap, out, *args)
    with subprocess.Popen(
        command, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as run:
        try:
            pid = _worker_pid(out, 2, run)
            # Mid-run, every worker's members heartbeating, and every worker's tables
            # flushed once: Spark then kills the other tasks, which keep what they flushed.
            _flushed_by_every_worker(out, run)
            os.kill(pid, signal.SIGKILL)
            stdout, stderr = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
    assert run.returncode == 3, stdout + stderr
    assert (
        f"fastcoord loadtest: worker 2: its worker process (pid {pid}) died: killed by signal 9"
        in stderr
    )
    s = summary(out)
    assert s["outcome"] == "cut short"
    assert s["message"].startswith("worker 2: ")
    for name in ("latency", "states"):  # what was written opens, every worker's
        assert {r["worker"] for r in table(out, name)} == set(range(WORKERS))


def _flushed_by_every_worker(out: Path, run: subprocess.Popen[str]) -> None:
    """Until every worker's rows are in the run's tables, however long a busy machine takes
    to get its workers there (each flushes every few seconds)."""
    deadline = time.monotonic() + 120
    while True:
        assert run.poll() is None, run.communicate()
        try:
            if all(
                {r["worker"] for r in table(out, name)} == set(range(WORKERS))
                for name in ("latency", "states")
            ):
                return
        except (OSError, pyarrow.ArrowInvalid):
            pass  # no part yet, or one being written
        assert time.monotonic() < deadline, "not every worker's tables were flushed"
        time.sleep(0.5)


def _worker_pid(out: Path, n: int, run: subprocess.Popen[str]) -> int:
    """Worker n's process, once the running summary names it."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert run.poll() is None, run.communicate()
        try:
            each = json.loads((out / "summary.json").read_text())["workers"]["each"]
            return int(next(w["pid"] for w in each if w["worker"] == n))
        except (OSError, ValueError, KeyError, StopIteration):
            time.sleep(0.5)
    raise AssertionError("the running summary never named the workers")
