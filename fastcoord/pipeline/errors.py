"""Errors and signals by API and code: over the run, and over time.

One meaning of "error" everywhere: an answer that says something went wrong. The
protocol's signals (MEMBER_ID_REQUIRED: join again with this id; REBALANCE_IN_PROGRESS:
rejoin; STALE_MEMBER_EPOCH: commit again with the epoch the heartbeat brought) tell a
member what to do next, and are counted apart, as the load test counts them.

Two sources, as the load test keeps them: the latency rows count every error and signal
of every second, and the `errors` table holds a row per answer with its code, up to
10,000 a second per worker. The totals come from the first; the split by code from the
second, with what it could not name (rows dropped) shown as the difference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from fastcoord.pipeline.clock import elapsed_s
from fastcoord.pipeline.latency import step_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def by_code(errors: DataFrame) -> DataFrame:
    """run, api, error, error_code, signal, count: over the run."""
    return errors.groupBy("run", "api", "error", "error_code", "signal").agg(
        F.count("*").alias("count")
    )


def by_code_series(errors: DataFrame, starts: DataFrame, step_s: int) -> DataFrame:
    """run, t (the step's last second), error, signal, count."""
    timed = errors.join(F.broadcast(starts), "run").withColumn(
        "t", step_of(elapsed_s(F.col("time"), F.col("start_ms")), step_s)
    )
    return timed.groupBy("run", "t", "error", "signal").agg(F.count("*").alias("count"))


def by_api(latency: DataFrame, errors: DataFrame) -> DataFrame:
    """run, api, requests, errors and signals (every one, from the latency rows), the rows
    of each the errors table holds (named_errors, named_signals), error_rate (errors per
    request: signals are not errors)."""
    counted = latency.groupBy("run", "api").agg(
        F.sum("count").alias("requests"),
        F.sum("errors").alias("errors"),
        F.sum("signals").alias("signals"),
    )
    named = errors.groupBy("run", "api").agg(
        F.sum(F.when(~F.col("signal"), 1).otherwise(0)).alias("named_errors"),
        F.sum(F.when(F.col("signal"), 1).otherwise(0)).alias("named_signals"),
    )
    return (
        counted.join(named, ["run", "api"], "left")
        .fillna(0, ["named_errors", "named_signals"])
        .withColumn(
            "error_rate",
            F.when(F.col("requests") > 0, F.col("errors") / F.col("requests")),
        )
    )
