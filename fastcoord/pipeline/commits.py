"""Offset commits: answered OffsetCommits per second of each run (the loadtest's latency
rows of OffsetCommit), and per group what the server stored (its `offsets_committed`
events: commits, offsets, the last one's time)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

OFFSET_COMMIT = "OffsetCommit"


def per_second(latency: DataFrame) -> DataFrame:
    """run, elapsed_s, commits (OffsetCommits answered that second)."""
    return (
        latency.where(F.col("api") == OFFSET_COMMIT)
        .groupBy("run", "elapsed_s")
        .agg(F.sum("count").alias("commits"))
    )


def per_group(events: DataFrame) -> DataFrame:
    """group_id, commits, offsets, last_commit: from the server's event log."""
    return (
        events.where(F.col("kind") == "offsets_committed")
        .groupBy("group_id")
        .agg(
            F.count("*").alias("commits"),
            F.sum("members").alias("offsets"),
            F.max("at").alias("last_commit"),
        )
    )
