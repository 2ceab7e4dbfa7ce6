"""Latency per API, from merged histograms: over time (a point per step of the run's
seconds) and over each phase of a run (joining, steady, leaving, the whole run).

Percentiles are never averaged. The rows' bucket counts are summed per run, API and window
(or per run and API), and each percentile is read off the summed histogram exactly as
summary.json's are (docs/loadtest.md, "The latency histogram"): the upper bound of the
bucket that holds the value of rank ceil(q / 100 * n), or the largest max_us of those rows
when that is lower. All of it runs in Spark; only the result, a row per API and window,
is small. Errors and signals (the protocol's answers that tell a member what to do next,
counted apart since a run's second was taken) are summed beside the requests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from fastcoord.loadtest.histogram import OVERFLOW, SUB_BITS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

QUANTILES = {"p50_ms": 50.0, "p99_ms": 99.0, "p99_9_ms": 99.9}
_SUB = 1 << SUB_BITS  # 16 buckets per power of two
_LINEAR = 2 * _SUB  # below 32 us, a bucket per microsecond


def upper_us(bucket: Column) -> Column:
    """A bucket's upper bound in microseconds (exclusive); null for the overflow bucket."""
    shift = (F.floor(bucket / _SUB) - 1).cast("int")
    mantissa = (bucket % _SUB + _SUB + 1).cast("long")
    return (
        F.when(bucket < _LINEAR, bucket.cast("long") + 1)
        .when(bucket >= OVERFLOW, F.lit(None).cast("long"))
        # mantissa << shift; exact in a double, every bound being below 2^31
        .otherwise((mantissa * F.pow(F.lit(2.0), shift)).cast("long"))
    )


def step_of(elapsed_s: Column, step_s: int) -> Column:
    """The point of the time charts that second `elapsed_s` falls in: the last second of its
    step (step_s, 2 * step_s, ...), so that a point is plotted where its seconds end."""
    return ((F.floor((elapsed_s - 1) / step_s) + 1) * step_s).cast("int")


def percentiles(rows: DataFrame, keys: list[str]) -> DataFrame:
    """Per `keys`: count, errors, signals, mean, the QUANTILES and max, in milliseconds,
    from the latency rows' merged histograms."""
    totals = rows.groupBy(*keys).agg(
        F.sum("count").alias("count"),
        F.sum("errors").alias("errors"),
        F.sum("signals").alias("signals"),
        F.sum("sum_us").alias("sum_us"),
        F.max("max_us").alias("max_us"),
    )
    cells = (
        rows.select(*keys, F.explode(F.arrays_zip("buckets", "counts")).alias("cell"))
        .groupBy(*keys, F.col("cell.buckets").alias("bucket"))
        .agg(F.sum("cell.counts").alias("n"))
    )
    running = (
        Window.partitionBy(*keys)
        .orderBy("bucket")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    cells = cells.withColumn("running", F.sum("n").over(running)).withColumn(
        "total", F.sum("n").over(Window.partitionBy(*keys))
    )
    ranks = cells.groupBy(*keys).agg(
        *(
            F.min(
                F.when(
                    F.col("running")
                    >= F.greatest(F.lit(1), F.ceil(F.lit(q / 100) * F.col("total"))),
                    F.col("bucket"),
                )
            ).alias(name)
            for name, q in QUANTILES.items()
        ),
        F.first("total").alias("measured"),
    )
    out = totals.join(ranks, keys, "left")
    for name in QUANTILES:
        out = out.withColumn(
            name,
            F.when(
                F.col("measured") > 0,
                F.least(upper_us(F.col(name)), F.col("max_us")) / 1000.0,
            ),
        )
    return (
        out.withColumn(
            "mean_ms", F.when(F.col("count") > 0, F.col("sum_us") / F.col("count") / 1000.0)
        )
        .withColumn("max_ms", F.when(F.col("measured") > 0, F.col("max_us") / 1000.0))
        .select(*keys, "count", "errors", "signals", "mean_ms", *QUANTILES, "max_ms")
    )


def series(latency: DataFrame, lengths: DataFrame, step_s: int) -> DataFrame:
    """run, api, t (the step's last second), seconds (of the run in the step), then
    percentiles() and requests_per_s. `lengths`: run, last_s (the run's last second)."""
    rows = latency.withColumn("t", step_of(F.col("elapsed_s"), step_s))
    seconds = F.least(F.lit(step_s), F.col("last_s") - F.col("t") + step_s)
    return (
        percentiles(rows, ["run", "api", "t"])
        .join(F.broadcast(lengths), "run")
        .withColumn("seconds", seconds.cast("int"))
        .withColumn("requests_per_s", F.col("count") / F.col("seconds"))
        .drop("last_s")
    )


def by_phase(latency: DataFrame, windows: DataFrame) -> DataFrame:
    """run, phase, api, seconds, then percentiles() over the phase's seconds and
    requests_per_s. `windows`: run, phase, first_s, last_s, seconds (scope.Window's; a
    phase of several spans, such as the steady phase outside the faults, a row each)."""
    rows = latency.join(F.broadcast(windows), "run").where(
        F.col("elapsed_s").between(F.col("first_s"), F.col("last_s"))
    )
    seconds = windows.groupBy("run", "phase").agg(F.sum("seconds").alias("seconds"))
    return (
        percentiles(rows, ["run", "phase", "api"])
        .join(F.broadcast(seconds), ["run", "phase"])
        .withColumn(
            "requests_per_s",
            F.when(F.col("seconds") > 0, F.col("count") / F.col("seconds")),
        )
        .withColumn("error_rate", F.when(F.col("count") > 0, F.col("errors") / F.col("count")))
    )
