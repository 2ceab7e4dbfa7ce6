"""Where a run's seconds begin, so that rows stamped with a time (errors) fall into the
same seconds and windows as rows stamped with a second (latency, states)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def epoch_ms(time: Column) -> Column:
    return F.unix_millis(time)


def run_starts(latency: DataFrame, states: DataFrame) -> DataFrame:
    """run, start_ms: a second's row is stamped when it ended, `elapsed_s` seconds after
    the run's start, so start = time - 1000 * elapsed_s (the earliest over the rows)."""
    stamped = latency.select("run", "time", "elapsed_s").unionByName(
        states.select("run", "time", "elapsed_s")
    )
    return stamped.groupBy("run").agg(
        F.min(epoch_ms(F.col("time")) - F.col("elapsed_s").cast("long") * 1000).alias("start_ms")
    )


def elapsed_s(time: Column, start_ms: Column) -> Column:
    """The second (1 for the first) that holds `time`."""
    return (F.floor((epoch_ms(time) - start_ms) / 1000) + 1).cast("int")
