"""The tables under --out: Parquet part files that pyarrow.dataset (and so Spark) reads with
the documented schema, percentiles recomputable from them with the documented formula, and
only whole files after a run is killed mid-write."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from fastcoord.loadtest import results
from fastcoord.loadtest.aggregate import Aggregator
from fastcoord.loadtest.stats import Recorder
from fastcoord.loadtest.summary import Thresholds
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode

from . import dying_run
from .workers import START_MS, second, server_samples

ROOT = Path(__file__).parent.parent.parent


def run_of(out: Path, seconds: int, flush_every: int = 1) -> dict[str, object]:
    agg = Aggregator(out, {"members": 20}, workers=2, thresholds=Thresholds())
    for elapsed_s in range(1, seconds + 1):
        agg.add(second(0, elapsed_s))
        agg.add(second(1, elapsed_s))
        agg.add_server(*server_samples(elapsed_s))
        if elapsed_s % flush_every == 0:
            agg.flush()
    return agg.finish("completed", None)


def test_tables_read_with_their_schemas(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_of(out, seconds=4, flush_every=2)
    for name, schema in results.SCHEMAS.items():
        parts = sorted(p.name for p in (out / name).iterdir())
        assert parts == ["part-00000.parquet", "part-00001.parquet"], name
        dataset = ds.dataset(out / name, format="parquet")
        assert dataset.schema.remove_metadata().equals(schema), name
    assert ds.dataset(out / "latency").count_rows() == 4 * 2  # Heartbeat, OffsetCommit
    assert ds.dataset(out / "states").count_rows() == 4
    assert ds.dataset(out / "errors").count_rows() == 4 * 2
    assert ds.dataset(out / "rebalances").count_rows() == 4 * 2
    assert ds.dataset(out / "server").count_rows() == 4
    # No temporary file is left: the one hidden file is git's.
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [".gitignore"]


def test_rows_carry_the_names_and_times(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = Recorder(3, cpu_s=0.0)
    r.latencies(ApiKey.HEARTBEAT).append(1_500_000)
    r.error(ApiKey.HEARTBEAT, ErrorCode.ILLEGAL_GENERATION, "orders", "m-7", START_MS + 250)
    r.rebalance("orders", "m-7", "pod-3", 9, START_MS + 100, START_MS + 350, "rejoin", False)
    agg = Aggregator(out, {}, workers=1, thresholds=Thresholds())
    agg.add(r.take(1, START_MS + 1000, {"stable": 1, "syncing": 2}, 1, 0.0))
    agg.finish("completed", None)
    (error,) = ds.dataset(out / "errors").to_table().to_pylist()
    assert error["time"].timestamp() * 1000 == START_MS + 250
    assert (error["api"], error["error_code"], error["error"]) == (
        "Heartbeat",
        22,
        "ILLEGAL_GENERATION",
    )
    assert (error["group"], error["member"]) == ("orders", "m-7")
    (rebalance,) = ds.dataset(out / "rebalances").to_table().to_pylist()
    assert rebalance["started"].timestamp() * 1000 == START_MS + 100
    assert rebalance["time"].timestamp() * 1000 == START_MS + 350
    assert rebalance["duration_ms"] == 250 and rebalance["instance_id"] == "pod-3"
    assert (rebalance["generation"], rebalance["reason"], rebalance["expected"]) == (
        9,
        "rejoin",
        False,
    )
    (state,) = ds.dataset(out / "states").to_table().to_pylist()
    assert [state[s] for s in results.STATES] == [0, 0, 2, 1, 0, 0]
    assert str(state["time"].tzinfo) == "UTC"


def upper_us(bucket: int) -> int:
    """docs/loadtest.md's formula for a bucket's upper bound, written out independently."""
    if bucket < 32:
        return bucket + 1
    shift = bucket // 16 - 1
    return (bucket % 16 + 17) << shift


def test_percentiles_recomputed_from_the_table_match_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = run_of(out, seconds=5)
    rows = [
        r for r in ds.dataset(out / "latency").to_table().to_pylist() if r["api"] == "Heartbeat"
    ]
    merged: dict[int, int] = {}
    for row in rows:
        for b, n in zip(row["buckets"], row["counts"], strict=True):
            merged[b] = merged.get(b, 0) + n
    count = sum(merged.values())
    max_us = max(r["max_us"] for r in rows)
    apis = summary["apis"]
    assert isinstance(apis, dict)
    for key, q in (("p50_ms", 50), ("p99_ms", 99), ("p99_9_ms", 99.9)):
        rank, seen = math.ceil(q / 100 * count), 0
        for b in sorted(merged):
            seen += merged[b]
            if seen >= rank:
                break
        assert min(upper_us(b), max_us) / 1000 == pytest.approx(apis["Heartbeat"][key], abs=1e-3)


def test_a_second_run_in_the_same_directory_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_of(out, seconds=1)
    with pytest.raises(FileExistsError, match="another run"):
        Aggregator(out, {}, workers=1, thresholds=Thresholds())
    assert results.earlier_run(out) == (
        f"{out} holds another run's results (summary.json, latency, rebalances, errors, "
        "states, server): give an empty or new directory"
    )
    Aggregator(tmp_path / "empty-but-there", {}, workers=1, thresholds=Thresholds())
    assert results.earlier_run(tmp_path / "nowhere") is None


def git_ignores(repo: Path, path: Path) -> bool:
    """Whether git, in `repo` (made a repository if need be), ignores `path`."""
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)
    done = subprocess.run(
        ["git", "-C", str(repo), "check-ignore", "-q", str(path.relative_to(repo))], timeout=30
    )
    return done.returncode == 0


def test_a_run_directory_is_ignored_by_git(tmp_path: Path) -> None:
    repo = tmp_path / "checkout"
    out = repo / "runs" / "run1"
    run_of(out, seconds=1)
    assert (out / ".gitignore").read_text().splitlines()[-1] == "*"
    assert git_ignores(repo, out / "latency" / "part-00000.parquet")
    assert git_ignores(repo, out / "summary.json")
    # The .gitignore is no run's: a run that wrote nothing else leaves the directory usable.
    results.Results(repo / "fresh")
    results.Results(repo / "fresh")
    # A directory that already held something is the user's: nothing is added to it.
    (repo / "mine").mkdir()
    (repo / "mine" / "notes.txt").write_text("mine")
    results.Results(repo / "mine")
    assert not (repo / "mine" / ".gitignore").exists()
    assert not git_ignores(repo, repo / "mine" / "notes.txt")


def test_a_killed_run_leaves_whole_files_and_what_it_flushed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.loadtest.dying_run", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == dying_run.EXIT_CODE, done.stderr
    leftovers = [p for p in (out / "latency").iterdir() if p.name.startswith(".")]
    assert [p.name for p in leftovers] == [".part-00003.parquet.tmp"]  # the half-written one
    for name in results.SCHEMAS:
        table = ds.dataset(out / name, format="parquet").to_table()  # skips the hidden file
        expected = {"latency": 2, "states": 1, "errors": 2, "rebalances": 2, "server": 1}[name]
        assert table.num_rows == dying_run.FLUSHED_SECONDS * expected, name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and summary["outcome"] == "running"
    assert summary["requests"]["count"] == dying_run.FLUSHED_SECONDS * 2 * 101
    assert summary["tables"]["latency"] == dying_run.FLUSHED_SECONDS * 2
