"""The pieces of a load test on Spark that need no Spark: the slim seconds a worker sends its
driver, the driver's merge of them against the merge of whole seconds, each worker's own
part files, the answer every task derives from what was gathered, and the refusals of
masters that cannot run the stage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from fastcoord.client.fleet import FleetConfig
from fastcoord.loadtest import spark
from fastcoord.loadtest.aggregate import Aggregator, Thresholds
from fastcoord.loadtest.barrier import TaskJob, refused
from fastcoord.loadtest.scenarios import Plan
from fastcoord.loadtest.worker import FILES_KEPT
from tests.loadtest.workers import second

THRESHOLDS = Thresholds(None, None)


def test_a_slim_second_counts_what_the_whole_one_does() -> None:
    whole = [second(w, s) for s in range(1, 6) for w in range(3)]
    config: dict[str, object] = {"members": 33, "duration_s": 5.0}
    by_whole = Aggregator(None, config, 3, THRESHOLDS)
    by_slim = Aggregator(None, config, 3, THRESHOLDS)
    by_whole.start(whole[0].wall_ms - 1000)
    by_slim.start(whole[0].wall_ms - 1000)
    for s in whole:
        slim = s.slim()
        assert slim.error_rows == [] and slim.rebalances == []
        assert slim.rebalanced is not None and slim.rebalanced.histogram().count == 1
        by_whole.add(s)
        by_slim.add(slim)
    a = by_whole.finish("completed", None)
    b = by_slim.finish("completed", None)
    for key in ("requests", "apis", "phases", "rebalances", "commits", "members", "generator"):
        assert a[key] == b[key], key
    assert a["rebalances"]["count"] == 15


def test_a_slim_second_is_small_whatever_a_join_storm_brings() -> None:
    s = second(0, 1)
    s.rebalances = [
        ("g", f"m{i}", None, 1, 1000, 1000 + i % 5000, "join", True) for i in range(100_000)
    ]
    slim = s.slim()
    assert len(json.dumps(slim.rebalanced.counts.tolist())) < 2000  # type: ignore[union-attr]
    assert slim.rebalanced is not None and slim.rebalanced.histogram().count == 100_000


def test_a_worker_writes_its_own_part_files_marked_with_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # The driver makes and checks --out first, and writes the server's table only.
    driver = Aggregator(out, {"members": 22}, 2, THRESHOLDS, tables=("server",))
    tables = ("latency", "states", "errors", "rebalances")
    for worker in (0, 1):
        a = Aggregator(out, {"members": 11}, 1, THRESHOLDS, worker=worker, tables=tables)
        a.start(second(worker, 1).wall_ms - 1000)
        for s in range(1, 4):
            a.add(second(worker, s))
        a.finish("completed", None)
        assert a.results is not None and a.results.rows["latency"] == 6  # 2 APIs, 3 seconds
        driver.rows_elsewhere.update(a.results.rows)
    assert not (out / "summary.json").exists()  # the driver's to write
    for name in tables:
        parts = sorted(p.name for p in (out / name).glob("*.parquet"))
        assert parts == ["part-w0000-00000.parquet", "part-w0001-00000.parquet"], name
        rows = ds.dataset(out / name).to_table().to_pylist()
        assert sorted({r["worker"] for r in rows}) == [0, 1], name
    assert driver.finish("completed", None)["tables"]["latency"] == 12
    assert (out / "summary.json").exists()


def test_a_run_of_processes_marks_the_rows_of_one_worker(tmp_path: Path) -> None:
    a = Aggregator(tmp_path / "run", {"members": 22}, 2, THRESHOLDS)
    a.start(second(0, 1).wall_ms - 1000)
    for s in range(1, 3):
        for w in (0, 1):
            a.add(second(w, s))
    a.finish("completed", None)
    errors = ds.dataset(tmp_path / "run" / "errors").to_table().to_pylist()
    assert sorted(r["worker"] for r in errors) == [0, 0, 1, 1]
    latency = ds.dataset(tmp_path / "run" / "latency").to_table().to_pylist()
    assert {r["worker"] for r in latency} == {None}  # merged over the workers


def job(workers: int, connections: tuple[int, ...]) -> TaskJob:
    plan = Plan("steady", 100, 10, "g", 10.0, 1.0, 10, 1000, 1000, 30.0)
    return TaskJob(
        workers, FleetConfig(("127.0.0.1", 9092)), plan, "/x", ("h", 1), b"k", connections
    )


def found(worker: int, files: int = 20_000, problem: str | None = None) -> dict[str, Any]:
    return {
        "worker": worker,
        "host": f"host{worker}",
        "files": files,
        "ready_ms": 1,
        "problem": problem,
    }


def test_every_task_derives_the_same_refusal_from_what_was_gathered() -> None:
    j = job(3, (500, 500, 500))
    assert refused(j, [found(2), found(0), found(1)]) is None
    # The first worker in worker order that cannot run, whatever order they were gathered in.
    low = 500 + FILES_KEPT  # one file short: 500 connections and the bootstrap's
    gathered = [
        found(2, problem="cannot reach the bootstrap h:1 (refused)"),
        found(1, low),
        found(0),
    ]
    assert refused(j, gathered) == (
        f"worker 1 (on host1) may open {low} files (500 for connections), but its share of "
        "the members needs 501 connections: raise that host's open-file limit (ulimit -n, "
        "LimitNOFILE), or use more --workers, or more --members-per-connection against "
        "fastcoord"
    )
    assert refused(j, [found(2, problem="it said no"), found(0), found(1)]) == (
        "worker 2 (on host2): it said no"
    )
    assert refused(j, [found(0, low + 1), found(1), found(2)]) is None


@pytest.mark.parametrize(
    ("master", "cpus", "slots"),
    [
        ("local", 1, 1),
        ("local[4]", 1, 4),
        ("local[4]", 2, 2),
        ("local[3,2]", 1, 3),
        ("spark://h:7077", 1, None),
    ],
)
def test_the_slots_of_a_local_master(master: str, cpus: int, slots: int | None) -> None:
    assert spark.local_slots(master, cpus) == slots


def test_too_few_local_slots_are_refused_with_what_to_change() -> None:
    with pytest.raises(spark.SparkRefused) as refusal:
        spark.check_local("local[2]", 3, {})
    assert str(refusal.value) == (
        "--workers 3 needs 3 task slots at once (a barrier stage), but --master local[2] has "
        "2: use --master local[3], or use --workers 2"
    )
    with pytest.raises(
        spark.SparkRefused, match=r"has 2 at spark.task.cpus=2: use --master local\[6\]"
    ):
        spark.check_local("local[4]", 3, {"spark.task.cpus": "2"})
    spark.check_local("local[3]", 3, {})
    spark.check_local("spark://h:7077", 300, {})  # counted once its executors register


def test_a_failed_stage_in_one_line() -> None:
    slots = "Barrier stage in job 0 requires 3 slots, but only 2 are available. Will retry"
    assert spark.failure_text(RuntimeError(slots)) == "Spark had 2 task slots for the 3 workers"
    lost = (
        "Job aborted\nfastcoord.loadtest.barrier.WorkerLost: worker 1: its worker process "
        "(pid 7) died: killed by signal 9\n\tat x"
    )
    assert spark.failure_text(RuntimeError(lost)) == (
        "worker 1: its worker process (pid 7) died: killed by signal 9"
    )
