"""Latency per API, from merged histograms: per 10-second window and over the run.

Percentiles are never averaged. The rows' bucket counts are summed per run, API and window
(or per run and API), and each percentile is read off the summed histogram exactly as
summary.json's are (docs/loadtest.md, "The latency histogram"): the upper bound of the
bucket that holds the value of rank ceil(q / 100 * n), or the largest max_us of those rows
when that is lower. All of it runs in Spark; only the result, a row per API and window,
is small.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from fastcoord.loadtest.histogram import OVERFLOW, SUB_BITS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

WINDOW_S = 10
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


def window_of(elapsed_s: Column) -> Column:
    """The first second of the 10-second window that holds `elapsed_s` (1, 11, 21, ...)."""
    return (F.floor((elapsed_s - 1) / WINDOW_S) * WINDOW_S + 1).cast("int")


def percentiles(rows: DataFrame, keys: list[str]) -> DataFrame:
    """Per `keys`: count, errors, mean, the QUANTILES and max, in milliseconds, from the
    latency rows' merged histograms."""
    totals = rows.groupBy(*keys).agg(
        F.sum("count").alias("count"),
        F.sum("errors").alias("errors"),
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
        .select(*keys, "count", "errors", "mean_ms", *QUANTILES, "max_ms")
    )


def by_window(latency: DataFrame) -> DataFrame:
    """run, api, window_s (its first second), then percentiles()."""
    rows = latency.withColumn("window_s", window_of(F.col("elapsed_s")))
    return percentiles(rows, ["run", "api", "window_s"])


def over_run(latency: DataFrame) -> DataFrame:
    """run, api, then percentiles() over the whole run."""
    return percentiles(latency, ["run", "api"])
