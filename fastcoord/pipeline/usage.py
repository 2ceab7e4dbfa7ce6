"""The server's CPU and resident memory during a run, as the load test read them from its
admin port once a second (the `server` table): a point per step of the run, and each
phase's average CPU and peak memory, node by node.

The server reports its CPU as a running total; what a step used is the difference
between samples, over the time between them. A node that restarted mid-run starts its
total again, so a drop counts the new total, not a negative.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Window
from pyspark.sql import functions as F

from fastcoord.pipeline.clock import epoch_ms
from fastcoord.pipeline.latency import step_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def _intervals(server: DataFrame) -> DataFrame:
    """Each sample with the CPU used since the node's previous one and the seconds
    between them (null for a node's first sample)."""
    order = Window.partitionBy("run", "node").orderBy("time")
    used = F.col("cpu_s") - F.lag("cpu_s").over(order)
    return server.withColumn("used_s", F.when(used < 0, F.col("cpu_s")).otherwise(used)).withColumn(
        "span_s", (epoch_ms(F.col("time")) - F.lag(epoch_ms(F.col("time"))).over(order)) / 1000.0
    )


def series(server: DataFrame, step_s: int) -> DataFrame:
    """run, node, t (the step's last second), cores (CPU seconds per second over the
    step), rss_bytes (its largest sample)."""
    return (
        _intervals(server)
        .withColumn("t", step_of(F.col("elapsed_s"), step_s))
        .groupBy("run", "node", "t")
        .agg(
            (F.sum("used_s") / F.sum("span_s")).alias("cores"),
            F.max("rss_bytes").alias("rss_bytes"),
        )
    )


def by_phase(server: DataFrame, windows: DataFrame) -> DataFrame:
    """run, phase, node, samples, cores (CPU seconds per second over the phase), peak_rss_bytes."""
    rows = (
        _intervals(server)
        .join(F.broadcast(windows.select("run", "phase", "first_s", "last_s")), "run")
        .where(F.col("elapsed_s").between(F.col("first_s"), F.col("last_s")))
    )
    return rows.groupBy("run", "phase", "node").agg(
        F.count("*").alias("samples"),
        (F.sum("used_s") / F.sum("span_s")).alias("cores"),
        F.max("rss_bytes").alias("peak_rss_bytes"),
    )
