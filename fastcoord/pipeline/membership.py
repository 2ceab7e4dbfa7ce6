"""Membership over time: members by state per second, as the load test's workers saw them
(its `states` table), and members joined, left, expired and removed per step of the run,
as the server logged them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from fastcoord.loadtest.results import STATES
from fastcoord.pipeline.clock import elapsed_s
from fastcoord.pipeline.latency import step_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

KINDS = {
    "member_joined": "joined",
    "member_left": "left",
    "member_expired": "expired",
    "member_removed": "removed",
}


def server_changes(events: DataFrame, starts: DataFrame, step_s: int) -> DataFrame:
    """run, t (the step's last second of the run), joined, left, expired, removed: from
    events scoped to runs (scope.py)."""
    timed = (
        events.where(F.col("kind").isin(*KINDS))
        .join(F.broadcast(starts), "run")
        .withColumn("t", step_of(elapsed_s(F.col("at"), F.col("start_ms")), step_s))
    )
    return (
        timed.groupBy("run", "t")
        .agg(
            *(
                F.sum(F.when(F.col("kind") == kind, 1).otherwise(0)).alias(name)
                for kind, name in KINDS.items()
            )
        )
        .orderBy("run", "t")
    )


def client_states(states: DataFrame) -> DataFrame:
    """run, elapsed_s and the members in each state (the states table, in order)."""
    return states.select("run", "elapsed_s", *STATES).orderBy("run", "elapsed_s")
