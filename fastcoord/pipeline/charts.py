"""The report's charts, as PNG files (matplotlib, no screen): latency over time, rebalance
duration by group size, members by state over time, errors over time. Each takes small
aggregated rows (collected from Spark) and writes one file."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from fastcoord.loadtest.results import STATES

SIZE = (9, 4)
DPI = 80


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=DPI)
    plt.close(fig)
    return path


def _series(
    rows: Sequence[dict[str, Any]], key: Sequence[str], x: str, y: str
) -> dict[tuple[Any, ...], tuple[list[Any], list[Any]]]:
    out: dict[tuple[Any, ...], tuple[list[Any], list[Any]]] = defaultdict(lambda: ([], []))
    for row in sorted(rows, key=lambda r: (tuple(str(r[k]) for k in key), r[x])):
        if row[y] is None:
            continue
        xs, ys = out[tuple(row[k] for k in key)]
        xs.append(row[x])
        ys.append(row[y])
    return out


def latency_over_time(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """p99 per API and run, per 10-second window (log scale)."""
    fig, ax = plt.subplots(figsize=SIZE)
    for (run, api), (xs, ys) in _series(rows, ("run", "api"), "window_s", "p99_ms").items():
        ax.plot(xs, ys, marker=".", label=f"{api} ({run})")
    ax.set_yscale("log")
    ax.set_xlabel("second of the run (10 s windows)")
    ax.set_ylabel("p99 latency, ms")
    ax.set_title("Latency over time (p99 per 10 s, from merged histograms)")
    if ax.lines:
        ax.legend(fontsize="small", ncol=2)
    return _save(fig, path)


def rebalance_by_size(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """p50 and p99 rebalance duration per group-size bucket, per run (members' view)."""
    fig, ax = plt.subplots(figsize=SIZE)
    sizes = sorted({r["size"] for r in rows}, key=lambda s: int(s.split("-")[0]))
    runs = sorted({r["run"] for r in rows})
    width = 0.8 / max(1, 2 * len(runs))
    for i, run in enumerate(runs):
        by = {r["size"]: r for r in rows if r["run"] == run}
        for j, name in enumerate(("p50_ms", "p99_ms")):
            xs = [k + (2 * i + j) * width for k in range(len(sizes))]
            ys = [(by[s][name] or 0) if s in by else 0 for s in sizes]
            ax.bar(xs, ys, width, label=f"{name.removesuffix('_ms')} ({run})")
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(sizes))], sizes)
    ax.set_xlabel("group size, members")
    ax.set_ylabel("rebalance duration, ms")
    ax.set_title("Rebalance duration by group size (as the members saw it)")
    if sizes:
        ax.legend(fontsize="small")
    return _save(fig, path)


def members_by_state(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Members in each state per second, per run."""
    fig, ax = plt.subplots(figsize=SIZE)
    for state in STATES:
        for (run,), (xs, ys) in _series(rows, ("run",), "elapsed_s", state).items():
            if any(ys):
                ax.plot(xs, ys, label=f"{state} ({run})")
    ax.set_xlabel("second of the run")
    ax.set_ylabel("members")
    ax.set_title("Members by state over time")
    if ax.lines:
        ax.legend(fontsize="small", ncol=2)
    return _save(fig, path)


def errors_over_time(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Errors per 10-second window, per API, error and run."""
    fig, ax = plt.subplots(figsize=SIZE)
    for (run, api, error), (xs, ys) in _series(
        rows, ("run", "api", "error"), "window_s", "count"
    ).items():
        ax.plot(xs, ys, marker=".", label=f"{api} {error} ({run})")
    ax.set_xlabel("second of the run (10 s windows)")
    ax.set_ylabel("errors")
    ax.set_title("Errors over time")
    if ax.lines:
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no errors", ha="center", va="center", transform=ax.transAxes)
    return _save(fig, path)
