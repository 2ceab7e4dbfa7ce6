"""Coordinator moves in the report: each moved group's unload, load and Stable again, from
the nodes' event logs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastcoord.pipeline import moves

START_MS = 1_790_000_000_000
SCHEMA = (
    "run string, at timestamp, kind string, group_id string, node_id int, reason string, "
    "members int"
)


def at(ms: int) -> datetime:
    return datetime.fromtimestamp((START_MS + ms) / 1000, UTC)


def event(
    ms: int, kind: str, group: str, node: int | None, reason: str = "", members: int = 0
) -> tuple[Any, ...]:
    return ("r", at(ms), kind, group, node, reason, members)


def test_each_move_from_its_unload_to_stable_again(spark: Any) -> None:
    events = spark.createDataFrame(
        [
            # Moved by an operator, loaded Stable: Stable at its load.
            event(10_000, "group_unloaded", "stays-stable", 0, members=3),
            event(10_040, "group_loaded", "stays-stable", 1, "Stable", 3),
            # Loaded mid-rebalance: Stable at the new node's next sync (not the old node's).
            event(5_000, "sync_completed", "rebalancing", 0),
            event(20_000, "group_unloaded", "rebalancing", 0, members=2),
            event(20_100, "group_loaded", "rebalancing", 2, "CompletingRebalance", 2),
            event(20_500, "sync_completed", "rebalancing", 0),  # the old node's log, late
            event(20_900, "sync_completed", "rebalancing", 2),
            event(25_000, "sync_completed", "rebalancing", 2),
            # Its node died: loaded with no unload before it.
            event(30_000, "group_loaded", "orphan", 1, "Stable", 4),
            # Moved twice: each load pairs with the unload just before it.
            event(40_000, "group_unloaded", "twice", 0, members=1),
            event(40_050, "group_loaded", "twice", 1, "Stable", 1),
            event(50_000, "group_unloaded", "twice", 1, members=1),
            event(50_070, "group_loaded", "twice", 2, "PreparingRebalance", 1),
        ],
        SCHEMA,
    )
    starts = spark.createDataFrame([("r", START_MS)], "run string, start_ms long")
    rows = [r.asDict() for r in moves.per_group(events, starts).collect()]
    got = [
        (
            r["group_id"],
            r["from_node"],
            r["to_node"],
            r["unloaded_s"],
            r["loaded_s"],
            r["loaded_as"],
            r["stable_after_unload_ms"],
            r["stable_after_load_ms"],
        )
        for r in rows
    ]
    assert got == [
        ("stays-stable", 0, 1, 10.0, 10.04, "Stable", 40, 0),
        ("rebalancing", 0, 2, 20.0, 20.1, "CompletingRebalance", 900, 800),
        ("orphan", None, 1, None, 30.0, "Stable", None, 0),
        ("twice", 0, 1, 40.0, 40.05, "Stable", 50, 0),
        ("twice", 1, 2, 50.0, 50.07, "PreparingRebalance", None, None),
    ]


def test_a_run_without_moves_has_none(spark: Any) -> None:
    events = spark.createDataFrame([event(1_000, "sync_completed", "g", 0)], SCHEMA)
    starts = spark.createDataFrame([("r", START_MS)], "run string, start_ms long")
    assert moves.per_group(events, starts).collect() == []
