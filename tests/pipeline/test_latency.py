"""Latency percentiles on Spark equal those of the loadtest's own Histogram, merged in
Python from the same seconds: per step of the time charts and over each phase."""

from __future__ import annotations

import math
from typing import Any

import pytest

from fastcoord.loadtest.histogram import BUCKETS, Histogram, bucket_bounds_us
from fastcoord.pipeline import latency
from fastcoord.pipeline.inputs import open_inputs
from fastcoord.pipeline.tables import load

from .generated import GeneratedRun, latency_run


def merged(run: GeneratedRun, api: str, seconds: range | None = None) -> Histogram:
    hist = Histogram()
    for (a, second), h in run.seconds.items():
        if a == api and (seconds is None or second in seconds):
            hist.merge(h)
    return hist


def close(a: float | None, b: float) -> bool:
    if math.isnan(b):
        return a is None
    return a is not None and math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)


def test_bucket_upper_bounds_match_the_histogram(spark: Any) -> None:
    from pyspark.sql import functions as F

    _, upper = bucket_bounds_us()
    rows = (
        spark.range(BUCKETS)
        .select(F.col("id").cast("int").alias("b"))
        .select("b", latency.upper_us(F.col("b")).alias("u"))
        .collect()
    )
    for row in rows:
        if math.isinf(upper[row.b]):
            assert row.u is None
        else:
            assert row.u == upper[row.b], row.b


@pytest.fixture(scope="module")
def two_runs(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    base = tmp_path_factory.mktemp("latency")
    runs = [latency_run(base / "a", 35, seed=1), latency_run(base / "b", 23, seed=2)]
    inputs = open_inputs([r.path for r in runs], None)
    return runs, load(spark, inputs)


PHASES = {"a": {"joining": (1, 8), "steady": (9, 33), "run": (1, 35)}, "b": {"run": (1, 23)}}


def test_percentiles_over_each_phase(spark: Any, two_runs: Any) -> None:
    runs, tables = two_runs
    windows = spark.createDataFrame(
        [
            (run, phase, first, last, last - first + 1)
            for run, phases in PHASES.items()
            for phase, (first, last) in phases.items()
        ],
        "run string, phase string, first_s int, last_s int, seconds int",
    )
    got = {(r.run, r.phase, r.api): r for r in latency.by_phase(tables.latency, windows).collect()}
    checked = 0
    for run in runs:
        name = run.path.name
        for phase, (first, last) in PHASES[name].items():
            seconds = range(first, last + 1)
            for api in {a for a, s in run.seconds if s in seconds}:
                want = merged(run, api, seconds)
                row = got[(name, phase, api)]
                assert row["count"] == want.count
                assert row.seconds == len(seconds)
                assert row.requests_per_s == want.count / len(seconds)
                for table, column in ((run.errors, "errors"), (run.signals, "signals")):
                    assert row[column] == sum(
                        n for (a, s), n in table.items() if a == api and s in seconds
                    )
                assert row.error_rate == (row.errors / want.count if want.count else None)
                for figure, q in latency.QUANTILES.items():
                    assert close(row[figure], want.percentile_ms(q)), (name, phase, api, figure)
                assert close(row.max_ms, want.max_ms)
                checked += 1
    assert checked == len(got) > 10


def test_percentiles_per_step(spark: Any, two_runs: Any) -> None:
    runs, tables = two_runs
    lengths = spark.createDataFrame([("a", 35), ("b", 23)], "run string, last_s int")
    rows = latency.series(tables.latency, lengths, 10).collect()
    assert {r.t for r in rows} == {10, 20, 30, 40}
    checked = 0
    for row in rows:
        run = next(r for r in runs if r.path.name == row.run)
        want = merged(run, row.api, range(row.t - 9, row.t + 1))
        assert row["count"] == want.count
        assert row.seconds == min(10, {"a": 35, "b": 23}[row.run] - row.t + 10)
        assert row.requests_per_s == want.count / row.seconds
        for name, q in latency.QUANTILES.items():
            assert close(row[name], want.percentile_ms(q)), (row.run, row.api, row.t)
        checked += 1
    assert checked == len({(r.path.name, a, (s - 1) // 10) for r in runs for a, s in r.seconds})
