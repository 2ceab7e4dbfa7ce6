"""Coordinator moves: each group whose offsets partition moved to another node, and how long
it took to be Stable again there.

The node that lets a partition go unloads its groups (`group_unloaded`, in its own event
log); the node that takes the partition loads them (`group_loaded`, the state it loaded in
`reason`). From the unload until the load, the group's members are answered NOT_COORDINATOR
and then COORDINATOR_LOAD_IN_PROGRESS. A group loaded Stable is Stable again at its load; one
loaded in the middle of a rebalance is Stable at its next `sync_completed` on the new node.
A node that died unloads nothing: its groups' moves have a load and no unload.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from fastcoord.pipeline.clock import epoch_ms

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

STABLE = "Stable"


def per_group(events: DataFrame, starts: DataFrame) -> DataFrame:
    """run, group_id, from_node (null: its node died), to_node, unloaded_s and loaded_s
    (seconds since the run's start), loaded_as (the state it was loaded in), members,
    stable_after_load_ms, stable_after_unload_ms (null when not Stable within the events, or
    with no unload): from events scoped to runs (scope.py); `starts`: run, start_ms."""
    loads = events.where(F.col("kind") == "group_loaded").select(
        "run",
        "group_id",
        F.col("node_id").alias("to_node"),
        epoch_ms(F.col("at")).alias("loaded_ms"),
        F.col("reason").alias("loaded_as"),
        "members",
    )
    unloads = events.where(F.col("kind") == "group_unloaded").select(
        F.col("run").alias("u_run"),
        F.col("group_id").alias("u_group"),
        F.col("node_id").alias("from_node"),
        epoch_ms(F.col("at")).alias("unloaded_ms"),
    )
    syncs = events.where(F.col("kind") == "sync_completed").select(
        F.col("run").alias("s_run"),
        F.col("group_id").alias("s_group"),
        F.col("node_id").alias("s_node"),
        epoch_ms(F.col("at")).alias("sync_ms"),
    )
    keys = ["run", "group_id", "to_node", "loaded_ms", "loaded_as", "members"]
    # Each load's move began at the group's last unload before it.
    began = (
        loads.join(
            unloads,
            (F.col("run") == F.col("u_run"))
            & (F.col("group_id") == F.col("u_group"))
            & (F.col("unloaded_ms") <= F.col("loaded_ms")),
            "left",
        )
        .groupBy(*keys)
        .agg(
            F.max("unloaded_ms").alias("unloaded_ms"),
            F.max_by("from_node", "unloaded_ms").alias("from_node"),
        )
    )
    # Stable again: at the load, or at the first sync on the new node after it.
    stable = (
        began.join(
            syncs,
            (F.col("run") == F.col("s_run"))
            & (F.col("group_id") == F.col("s_group"))
            & (F.col("sync_ms") >= F.col("loaded_ms"))
            & F.col("s_node").eqNullSafe(F.col("to_node")),
            "left",
        )
        .groupBy(*keys, "unloaded_ms", "from_node")
        .agg(F.min("sync_ms").alias("synced_ms"))
        .withColumn(
            "stable_ms",
            F.when(F.col("loaded_as") == STABLE, F.col("loaded_ms")).otherwise(F.col("synced_ms")),
        )
    )
    return (
        stable.join(F.broadcast(starts), "run")
        .select(
            "run",
            "group_id",
            "from_node",
            "to_node",
            ((F.col("unloaded_ms") - F.col("start_ms")) / 1000.0).alias("unloaded_s"),
            ((F.col("loaded_ms") - F.col("start_ms")) / 1000.0).alias("loaded_s"),
            "loaded_as",
            "members",
            (F.col("stable_ms") - F.col("loaded_ms")).alias("stable_after_load_ms"),
            (F.col("stable_ms") - F.col("unloaded_ms")).alias("stable_after_unload_ms"),
        )
        .orderBy("run", "loaded_s", "group_id")
    )
