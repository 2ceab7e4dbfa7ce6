"""Two or more runs side by side: each headline figure of each run, and its ratio to the
first run's, so that two versions of a consumer, or two coordinators, compare run by run.
The latency figures are each run's headline window's (its steady phase, or --window); it
works on the small per-run aggregates only (a few rows per API), never on raw rows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

LATENCY_FIGURES = ("p50_ms", "p99_ms", "p99_9_ms")


def figures(
    runs: Sequence[str],
    latency: list[dict[str, Any]],
    errors_by_api: list[dict[str, Any]],
    rebalance_sizes: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Rows of {figure, <run>: value, ..., ratio <run>: value / first run's}. `latency`:
    each run's headline rows of latency_phases; `rebalance_sizes`: the rows to compare of
    rebalance_sizes_client."""
    table: dict[str, dict[str, Any]] = {}

    def put(figure: str, run: str, value: float | None) -> None:
        table.setdefault(figure, {"figure": figure})[run] = value

    for row in latency:
        for name in LATENCY_FIGURES:
            put(
                f"{row['api']} {name.removesuffix('_ms').replace('_', '.')} ms",
                row["run"],
                row[name],
            )
        put(f"{row['api']} requests/s", row["run"], row["requests_per_s"])
    for row in errors_by_api:
        put(f"{row['api']} error rate", row["run"], row["error_rate"])
    for row in rebalance_sizes:
        put(f"rebalance p50 ms ({row['size']} members)", row["run"], row["p50_ms"])
        put(f"rebalance p99 ms ({row['size']} members)", row["run"], row["p99_ms"])
    rows = []
    first = runs[0]
    for figure in sorted(table):
        row = table[figure]
        for run in runs[1:]:
            a, b = row.get(first), row.get(run)
            row[f"ratio {run}"] = b / a if a and b is not None else None
        rows.append(row)
    return rows
