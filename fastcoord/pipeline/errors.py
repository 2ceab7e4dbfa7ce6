"""Errors by API and code: over the run, and per 10-second window.

Two sources, as the loadtest keeps them: `latency.errors` counts every error of every
second (signals such as REBALANCE_IN_PROGRESS included), and the `errors` table holds a row
per error with its code, up to 10,000 a second per worker. The totals per API come from
the first; the split by code from the second, with what it could not name (dropped rows)
shown as the difference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from fastcoord.pipeline.clock import elapsed_s
from fastcoord.pipeline.latency import window_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def by_code(errors: DataFrame) -> DataFrame:
    """run, api, error, error_code, count: over the run."""
    return errors.groupBy("run", "api", "error", "error_code").agg(F.count("*").alias("count"))


def by_code_window(errors: DataFrame, starts: DataFrame) -> DataFrame:
    """run, api, error, window_s, count."""
    timed = errors.join(starts, "run").withColumn(
        "window_s", window_of(elapsed_s(F.col("time"), F.col("start_ms")))
    )
    return timed.groupBy("run", "api", "error", "window_s").agg(F.count("*").alias("count"))


def by_api(latency: DataFrame, errors: DataFrame) -> DataFrame:
    """run, api, requests, errors (every code, from latency), named (rows of the errors
    table), error_rate (errors / requests)."""
    counted = latency.groupBy("run", "api").agg(
        F.sum("count").alias("requests"), F.sum("errors").alias("errors")
    )
    named = errors.groupBy("run", "api").agg(F.count("*").alias("named"))
    return (
        counted.join(named, ["run", "api"], "left")
        .fillna(0, ["named"])
        .withColumn(
            "error_rate",
            F.when(F.col("requests") > 0, F.col("errors") / F.col("requests")),
        )
    )
