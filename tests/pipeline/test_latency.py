"""Latency percentiles on Spark equal those of the loadtest's own Histogram, merged in
Python from the same seconds: per 10-second window and over the run."""

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


def test_percentiles_over_the_run(two_runs: Any) -> None:
    runs, tables = two_runs
    got = {(r.run, r.api): r for r in latency.over_run(tables.latency).collect()}
    for run in runs:
        for api in {a for a, _ in run.seconds}:
            want = merged(run, api)
            row = got[(run.path.name, api)]
            assert row["count"] == want.count
            assert row.errors == sum(e for (a, _), e in run.errors.items() if a == api)
            for name, q in latency.QUANTILES.items():
                assert close(row[name], want.percentile_ms(q)), (run.path.name, api, name)
            assert close(row.max_ms, want.max_ms)


def test_percentiles_per_window(two_runs: Any) -> None:
    runs, tables = two_runs
    rows = latency.by_window(tables.latency).collect()
    assert {r.window_s for r in rows} == {1, 11, 21, 31}
    checked = 0
    for row in rows:
        run = next(r for r in runs if r.path.name == row.run)
        want = merged(run, row.api, range(row.window_s, row.window_s + latency.WINDOW_S))
        assert row["count"] == want.count
        for name, q in latency.QUANTILES.items():
            assert close(row[name], want.percentile_ms(q)), (row.run, row.api, row.window_s)
        checked += 1
    assert checked == len({(r.path.name, a, (s - 1) // 10) for r in runs for a, s in r.seconds})
