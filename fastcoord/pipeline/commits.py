"""Offset commits per group, as the server stored them (its `offsets_committed` events:
commits, offsets, the last one's time). The commits the members had answered, per second,
are the OffsetCommit rows of the latency figures."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def per_group(events: DataFrame) -> DataFrame:
    """run, group_id, commits, offsets, last_commit: from events scoped to runs, the
    groups with most commits first."""
    return (
        events.where(F.col("kind") == "offsets_committed")
        .groupBy("run", "group_id")
        .agg(
            F.count("*").alias("commits"),
            F.sum("members").alias("offsets"),
            F.max("at").alias("last_commit"),
        )
        .orderBy("run", F.col("commits").desc(), "group_id")
    )
