"""Rebalances: per group and generation, as the server ran them and as the members saw them.

Server side (the event log): a rebalance that reached Stable ends with `sync_completed`,
whose `duration_ms` runs from PreparingRebalance (`rebalance_started`) and whose `members`
is the group's size. Who joined last (the last `member_joined` of the group within the
rebalance) and who was expired or removed in it say why a slow one was slow.

Client side (the load test's `rebalances` table, a row per member per rebalance): a group's
rebalance runs from the first member learning of it to the last member's SyncGroup answer.

A group's first rebalance in a run is its formation: its members arriving, the initial
rebalance delay waited out. It is kept apart from the rebalances that come after (a member
lost, one added, a restart), whose durations are what a coordinator is judged on; the
slowest list leaves formations out unless asked.

Durations are compared by group size, in buckets of powers of ten; their percentiles are
exact (Spark's `percentile`, linear between ranks, as numpy's default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, Window
from pyspark.sql import functions as F

from fastcoord.pipeline.clock import epoch_ms

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

QUANTILES = {"p50_ms": 0.5, "p99_ms": 0.99}
SLOWEST = 20
CDF_POINTS = 100  # a distribution's curve: its percentiles 0, 1, ..., 100


def size_bucket(members: Column) -> Column:
    """'1', '2-10', '11-100', ..., by powers of ten."""
    upper = F.pow(F.lit(10), F.ceil(F.log10(F.greatest(members, F.lit(1))))).cast("long")
    lower = (upper / 10).cast("long") + 1
    return F.when(members <= 1, F.lit("1")).otherwise(
        F.concat(lower.cast("string"), F.lit("-"), upper.cast("string"))
    )


def _formation(frame: DataFrame) -> DataFrame:
    """`formation`: the group's first generation in its run."""
    first = F.min("generation").over(Window.partitionBy("run", "group_id"))
    return frame.withColumn("formation", F.col("generation") == first)


def server_side(events: DataFrame) -> DataFrame:
    """run, group_id, generation, started, completed, duration_ms, members, size,
    formation, last_joined, expired (members expired or removed during it): from events
    scoped to runs (scope.py)."""
    syncs = events.where(F.col("kind") == "sync_completed").select(
        "run",
        "group_id",
        "generation",
        (epoch_ms(F.col("at")) - F.col("duration_ms")).alias("started_ms"),
        epoch_ms(F.col("at")).alias("completed_ms"),
        "duration_ms",
        "members",
    )
    keys = ["run", "group_id", "generation"]
    inside = (
        events.where(F.col("kind").isin("member_joined", "member_expired", "member_removed"))
        .select("run", "group_id", "kind", "member_id", epoch_ms(F.col("at")).alias("at_ms"))
        .join(syncs.select(*keys, "started_ms", "completed_ms"), ["run", "group_id"])
        .where(F.col("at_ms").between(F.col("started_ms"), F.col("completed_ms")))
        .groupBy(*keys)
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
    return _formation(
        syncs.join(inside, keys, "left")
        .withColumn("started", F.timestamp_millis("started_ms"))
        .withColumn("completed", F.timestamp_millis("completed_ms"))
        .withColumn("size", size_bucket(F.col("members")))
        .withColumn("expired", F.coalesce("expired", F.array().cast("array<string>")))
    ).select(
        *keys,
        "started",
        "completed",
        "duration_ms",
        "members",
        "size",
        "formation",
        "last_joined",
        "expired",
    )


def client_side(rebalances: DataFrame, starts: DataFrame) -> DataFrame:
    """run, group_id, generation, started, ended, start_s and end_s (seconds since the run's
    start; `starts`: run, start_ms), duration_ms, members, size, formation, unexpected
    (members for whom the test did not cause it)."""
    grouped = (
        rebalances.groupBy("run", F.col("group").alias("group_id"), "generation")
        .agg(
            F.min("started").alias("started"),
            F.max("time").alias("ended"),
            F.countDistinct("member").alias("members"),
            F.sum(F.when(~F.col("expected"), 1).otherwise(0)).alias("unexpected"),
        )
        .join(F.broadcast(starts), "run")
    )
    return _formation(
        grouped.withColumn("duration_ms", epoch_ms(F.col("ended")) - epoch_ms(F.col("started")))
        .withColumn("start_s", (epoch_ms(F.col("started")) - F.col("start_ms")) / 1000.0)
        .withColumn("end_s", (epoch_ms(F.col("ended")) - F.col("start_ms")) / 1000.0)
        .withColumn("size", size_bucket(F.col("members")))
        .drop("start_ms")
    )


def by_size(rebalances: DataFrame, keys: list[str]) -> DataFrame:
    """keys + size + formation: rebalances, and the duration's QUANTILES and max, from a
    server_side() or client_side() frame."""
    return rebalances.groupBy(*keys, "size", "formation").agg(
        F.count("*").alias("rebalances"),
        *(
            F.percentile(F.col("duration_ms").cast("double"), q).alias(name)
            for name, q in QUANTILES.items()
        ),
        F.max("duration_ms").alias("max_ms"),
    )


def distribution(client: DataFrame) -> DataFrame:
    """run, size, formation, q (0..100), duration_ms: each percentile of the durations,
    the curve of their distribution (a CDF: a share q of the rebalances took duration_ms
    or less)."""
    qs = [q / CDF_POINTS for q in range(CDF_POINTS + 1)]
    return (
        client.groupBy("run", "size", "formation")
        .agg(F.percentile(F.col("duration_ms").cast("double"), qs).alias("durations"))
        .select("run", "size", "formation", F.posexplode("durations").alias("q", "duration_ms"))
    )


def in_progress(client: DataFrame, lengths: DataFrame, step_s: int) -> DataFrame:
    """run, t (the step's last second), rebalancing (groups whose rebalance overlaps the
    step), started and completed (in it): the rebalances over time, as the members saw
    them. `lengths`: run, last_s."""
    first = (F.floor(F.greatest(F.col("start_s"), F.lit(0.0)) / step_s) + 1) * step_s
    last = (F.floor(F.greatest(F.col("end_s"), F.lit(0.0)) / step_s) + 1) * step_s
    spans = client.select(
        "run",
        first.cast("int").alias("first_t"),
        last.cast("int").alias("last_t"),
    )
    overlapping = (
        spans.select(
            "run",
            "first_t",
            "last_t",
            F.explode(F.sequence("first_t", "last_t", F.lit(step_s))).alias("t"),
        )
        .groupBy("run", "t")
        .agg(
            F.count("*").alias("rebalancing"),
            F.sum(F.when(F.col("t") == F.col("first_t"), 1).otherwise(0)).alias("started"),
            F.sum(F.when(F.col("t") == F.col("last_t"), 1).otherwise(0)).alias("completed"),
        )
    )
    return (
        overlapping.join(F.broadcast(lengths), "run")
        .where(F.col("t") <= F.col("last_s") + step_s)
        .drop("last_s")
    )


def slowest(server: DataFrame, formation: bool = False, n: int = SLOWEST) -> DataFrame:
    """The n slowest server-side rebalances of each run, slowest first; formations only
    when `formation`."""
    kept = server if formation else server.where(~F.col("formation"))
    rank = F.row_number().over(
        Window.partitionBy("run").orderBy(F.col("duration_ms").desc(), "group_id", "generation")
    )
    return (
        kept.withColumn("rank", rank).where(F.col("rank") <= n).orderBy("run", "rank").drop("rank")
    )
