"""Membership over time: joins, leaves, expirations and removals per 10-second window, as
the server logged them, and members by state per second, as the loadtest's workers saw
them (its `states` table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from fastcoord.loadtest.results import STATES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

KINDS = {
    "member_joined": "joined",
    "member_left": "left",
    "member_expired": "expired",
    "member_removed": "removed",
}
WINDOW_MS = 10_000


def server_changes(events: DataFrame) -> DataFrame:
    """window (its start, a timestamp), joined, left, expired, removed."""
    window = F.timestamp_millis(F.floor(F.unix_millis("at") / WINDOW_MS) * WINDOW_MS)
    counted = events.where(F.col("kind").isin(*KINDS)).groupBy(window.alias("window"))
    return counted.agg(
        *(
            F.sum(F.when(F.col("kind") == kind, 1).otherwise(0)).alias(name)
            for kind, name in KINDS.items()
        )
    ).orderBy("window")


def client_states(states: DataFrame) -> DataFrame:
    """run, elapsed_s and the members in each state (the states table, in order)."""
    return states.select("run", "elapsed_s", *STATES).orderBy("run", "elapsed_s")
