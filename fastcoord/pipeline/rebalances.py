"""Rebalances: per group and generation, as the server ran them and as the members saw them.

Server side (the event log): a rebalance that reached Stable ends with `sync_completed`,
whose `duration_ms` runs from PreparingRebalance (`rebalance_started`) and whose `members`
is the group's size. Who joined last (the last `member_joined` of the group within the
rebalance) and who was expired or removed in it say why a slow one was slow.

Client side (the loadtest's `rebalances` table, a row per member per rebalance): a group's
rebalance runs from the first member learning of it to the last member's SyncGroup answer.

Durations are compared by group size, in buckets of powers of ten; their percentiles are
exact (Spark's `percentile`, linear between ranks, as numpy's default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column
from pyspark.sql import functions as F

from fastcoord.pipeline.clock import epoch_ms

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

QUANTILES = {"p50_ms": 0.5, "p99_ms": 0.99}
SLOWEST = 20


def size_bucket(members: Column) -> Column:
    """'1', '2-10', '11-100', ..., by powers of ten."""
    upper = F.pow(F.lit(10), F.ceil(F.log10(F.greatest(members, F.lit(1))))).cast("long")
    lower = (upper / 10).cast("long") + 1
    return F.when(members <= 1, F.lit("1")).otherwise(
        F.concat(lower.cast("string"), F.lit("-"), upper.cast("string"))
    )


def server_side(events: DataFrame) -> DataFrame:
    """group_id, generation, started, completed, duration_ms, members, size, last_joined,
    expired (members expired or removed during it)."""
    syncs = events.where(F.col("kind") == "sync_completed").select(
        "group_id",
        "generation",
        (epoch_ms(F.col("at")) - F.col("duration_ms")).alias("started_ms"),
        epoch_ms(F.col("at")).alias("completed_ms"),
        "duration_ms",
        "members",
    )
    inside = (
        events.where(F.col("kind").isin("member_joined", "member_expired", "member_removed"))
        .select("group_id", "kind", "member_id", epoch_ms(F.col("at")).alias("at_ms"))
        .join(syncs.select("group_id", "generation", "started_ms", "completed_ms"), "group_id")
        .where(F.col("at_ms").between(F.col("started_ms"), F.col("completed_ms")))
        .groupBy("group_id", "generation")
        .agg(
            F.max_by(
                F.when(F.col("kind") == "member_joined", F.col("member_id")),
                F.when(F.col("kind") == "member_joined", F.col("at_ms")),
            ).alias("last_joined"),
            F.array_sort(
                F.collect_list(F.when(F.col("kind") != "member_joined", F.col("member_id")))
            ).alias("expired"),
        )
    )
    return (
        syncs.join(inside, ["group_id", "generation"], "left")
        .withColumn("started", F.timestamp_millis("started_ms"))
        .withColumn("completed", F.timestamp_millis("completed_ms"))
        .withColumn("size", size_bucket(F.col("members")))
        .withColumn("expired", F.coalesce("expired", F.array().cast("array<string>")))
        .select(
            "group_id",
            "generation",
            "started",
            "completed",
            "duration_ms",
            "members",
            "size",
            "last_joined",
            "expired",
        )
    )


def client_side(rebalances: DataFrame) -> DataFrame:
    """run, group, generation, started, ended, duration_ms, members, size, unexpected
    (members for whom the test did not cause it)."""
    return (
        rebalances.groupBy("run", "group", "generation")
        .agg(
            F.min("started").alias("started"),
            F.max("time").alias("ended"),
            F.countDistinct("member").alias("members"),
            F.sum(F.when(~F.col("expected"), 1).otherwise(0)).alias("unexpected"),
        )
        .withColumn("duration_ms", epoch_ms(F.col("ended")) - epoch_ms(F.col("started")))
        .withColumn("size", size_bucket(F.col("members")))
    )


def by_size(rebalances: DataFrame, keys: list[str]) -> DataFrame:
    """keys + size: rebalances, and the duration's QUANTILES and max, from a server_side()
    or client_side() frame."""
    return rebalances.groupBy(*keys, "size").agg(
        F.count("*").alias("rebalances"),
        *(
            F.percentile(F.col("duration_ms").cast("double"), q).alias(name)
            for name, q in QUANTILES.items()
        ),
        F.max("duration_ms").alias("max_ms"),
    )


def slowest(server: DataFrame, n: int = SLOWEST) -> DataFrame:
    """The n slowest server-side rebalances, slowest first."""
    return server.orderBy(F.col("duration_ms").desc(), "group_id", "generation").limit(n)
