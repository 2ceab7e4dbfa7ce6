"""The event log node by node: how much each node of a cluster logged, and over what time.

A group lives on one node, so the per-group tables are the same whether a cluster's logs
are read one by one or as one; this table says where the rows came from, so that a node
whose log is missing or short shows as such rather than as fewer groups.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def per_node(events: DataFrame) -> DataFrame:
    """run, node_id, events, groups, rebalances (completed: sync_completed), commits (stored:
    offsets_committed), first and last (the times of its first and last event). A null
    node_id: rows whose file and directory both do not say."""
    return (
        events.groupBy("run", "node_id")
        .agg(
            F.count("*").alias("events"),
            F.countDistinct("group_id").alias("groups"),
            F.sum(F.when(F.col("kind") == "sync_completed", 1).otherwise(0)).alias("rebalances"),
            F.sum(F.when(F.col("kind") == "offsets_committed", 1).otherwise(0)).alias("commits"),
            F.min("at").alias("first"),
            F.max("at").alias("last"),
        )
        .orderBy("run", "node_id")
    )
