"""`fastcoord report`: read the runs and the event logs (one server's, or each node's of a
cluster, as one), compute every table on Spark, write them as Parquet under --out, draw the
charts, write report.html, print a summary.

Spark does the work that grows with the data (every row of every run); what comes back to
this process is the tables it wrote, which are aggregates: a row per API and 10-second
window, per group-size bucket, per second of a run, the slowest rebalances.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from fastcoord.output_dir import make_output_dir
from fastcoord.pipeline import charts, compare, html
from fastcoord.pipeline.inputs import Inputs, open_inputs
from fastcoord.pipeline.offsets import nodes_offsets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from fastcoord.pipeline.tables import Tables


@dataclass
class Report:
    out: Path
    tables: dict[str, Path] = field(default_factory=dict)  # name -> Parquet directory
    charts: dict[str, Path] = field(default_factory=dict)
    html: Path | None = None
    problems: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # where the time went


def _computations(t: Tables) -> dict[str, Callable[[], DataFrame]]:
    from fastcoord.pipeline import commits, errors, latency, membership, nodes, rebalances
    from fastcoord.pipeline.clock import run_starts

    def starts() -> DataFrame:
        return run_starts(t.latency, t.states)

    def server() -> DataFrame:
        return rebalances.server_side(t.events)

    def client() -> DataFrame:
        return rebalances.client_side(t.rebalances)

    return {
        "latency_run": lambda: latency.over_run(t.latency),
        "latency_windows": lambda: latency.by_window(t.latency),
        "errors_by_api": lambda: errors.by_api(t.latency, t.errors),
        "errors_by_code": lambda: errors.by_code(t.errors),
        "errors_windows": lambda: errors.by_code_window(t.errors, starts()),
        "commits_per_second": lambda: commits.per_second(t.latency),
        "group_commits": lambda: commits.per_group(t.events),
        "member_states": lambda: membership.client_states(t.states),
        "membership_server": lambda: membership.server_changes(t.events),
        "rebalances_client": client,
        "rebalance_sizes_client": lambda: rebalances.by_size(client(), ["run"]),
        "rebalances_server": server,
        "rebalance_sizes_server": lambda: rebalances.by_size(server(), []),
        "slowest_rebalances": lambda: rebalances.slowest(server()),
        "events_by_node": lambda: nodes.per_node(t.events),
    }


def _rows(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist() if path.exists() else []


def make_report(
    run_dirs: list[Path],
    events: Path | Sequence[Path] | None,
    out: Path,
    master: str,
    console: Console | None = None,
) -> Report:
    console = console or Console(stderr=True)
    report = Report(out)
    clock = time.monotonic()
    inputs: Inputs = open_inputs(run_dirs, events)
    report.problems = inputs.problems
    for problem in inputs.problems:
        console.print(f"[yellow]left out:[/] {problem}", highlight=False)
    make_output_dir(out)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(f"starting Spark ({master})", total=None)
        from pyspark.sql import SparkSession

        from fastcoord.pipeline.session import spark_session
        from fastcoord.pipeline.tables import load

        ours = SparkSession.getActiveSession() is None  # else the caller's: left running
        spark = spark_session(master)
        report.seconds["spark start"] = time.monotonic() - clock
        try:
            tables = load(spark, inputs)
            for name, compute in _computations(tables).items():
                started = time.monotonic()
                progress.update(task, description=f"computing {name}")
                path = out / "tables" / name
                compute().write.mode("overwrite").parquet(str(path))
                report.tables[name] = path
                report.seconds[name] = time.monotonic() - started
        finally:
            if ours:
                spark.stop()
        started = time.monotonic()
        progress.update(task, description="drawing the charts")
        rows = {name: _rows(path) for name, path in report.tables.items()}
        _charts(report, rows)
        report.seconds["charts"] = time.monotonic() - started
    # Each node's offsets log is beside its event log, in its data directory.
    data_dirs = [(d.path.parent, d.node) for d in inputs.event_dirs if d.path.is_dir()]
    if data_dirs:
        final = nodes_offsets(data_dirs, report.problems)
        if final is not None:
            path = out / "tables" / "committed_offsets"
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
            pq.write_table(final, path / "part-00000.parquet")
            report.tables["committed_offsets"] = path
            rows["committed_offsets"] = final.to_pylist()
    rows.setdefault("committed_offsets", [])
    comparison = _comparison(inputs, rows)
    if comparison:
        path = out / "tables" / "comparison"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        pq.write_table(_arrow(comparison), path / "part-00000.parquet")
        report.tables["comparison"] = path
    report.html = out / "report.html"
    report.html.write_text(_page(report, inputs, rows, comparison))
    report.seconds["total"] = time.monotonic() - clock
    (out / "timings.json").write_text(json.dumps(report.seconds, indent=1) + "\n")
    _summary(console, inputs, rows, comparison, report)
    return report


def _arrow(rows: list[dict[str, Any]]) -> pa.Table:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return pa.table(
        {
            c: pa.array([r.get(c) for r in rows], pa.string() if c == "figure" else pa.float64())
            for c in columns
        }
    )


def _charts(report: Report, rows: dict[str, list[dict[str, Any]]]) -> None:
    directory = report.out / "charts"
    directory.mkdir(exist_ok=True)
    report.charts = {
        "latency": charts.latency_over_time(rows["latency_windows"], directory / "latency.png"),
        "rebalances": charts.rebalance_by_size(
            rows["rebalance_sizes_client"], directory / "rebalances.png"
        ),
        "members": charts.members_by_state(rows["member_states"], directory / "members.png"),
        "errors": charts.errors_over_time(rows["errors_windows"], directory / "errors.png"),
    }


def _commit_rates(inputs: Inputs, rows: dict[str, list[dict[str, Any]]]) -> dict[str, float | None]:
    rates: dict[str, float | None] = {}
    for run in inputs.runs:
        seconds = [r["commits"] for r in rows["commits_per_second"] if r["run"] == run.name]
        rates[run.name] = sum(seconds) / len(seconds) if seconds else None
    return rates


def _comparison(inputs: Inputs, rows: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    names = [run.name for run in inputs.runs]
    if len(names) < 2:
        return []
    return compare.figures(
        names,
        rows["latency_run"],
        rows["errors_by_api"],
        rows["rebalance_sizes_client"],
        _commit_rates(inputs, rows),
    )


LATENCY_COLUMNS = [
    "run",
    "api",
    "count",
    "errors",
    "mean_ms",
    "p50_ms",
    "p99_ms",
    "p99_9_ms",
    "max_ms",
]


def _page(
    report: Report,
    inputs: Inputs,
    rows: dict[str, list[dict[str, Any]]],
    comparison: list[dict[str, Any]],
) -> str:
    sections = [
        ("Latency over the run", html.table(rows["latency_run"], LATENCY_COLUMNS)),
        ("Latency over time", html.chart(report.charts["latency"], "p99 per 10 s")),
        (
            "Rebalances as the members saw them",
            html.table(rows["rebalance_sizes_client"])
            + html.chart(report.charts["rebalances"], "rebalance duration by group size"),
        ),
        ("The event log, node by node", html.table(rows["events_by_node"])),
        ("Rebalances as the server ran them", html.table(rows["rebalance_sizes_server"])),
        ("Slowest rebalances", html.table(rows["slowest_rebalances"])),
        (
            "Members",
            html.chart(report.charts["members"], "members by state")
            + html.table(rows["membership_server"][:200]),
        ),
        (
            "Errors",
            html.table(rows["errors_by_api"])
            + html.table(rows["errors_by_code"])
            + html.chart(report.charts["errors"], "errors per 10 s"),
        ),
        (
            "Commits",
            html.table(
                [{"run": k, "OffsetCommits/s": v} for k, v in _commit_rates(inputs, rows).items()]
            )
            + html.table(sorted(rows["group_commits"], key=lambda r: r["group_id"])[:500]),
        ),
        (
            "Final committed offsets (from the offsets log; the first 500)",
            html.table(rows["committed_offsets"][:500]),
        ),
    ]
    if comparison:
        sections.insert(0, ("Runs compared (ratio: against the first)", html.table(comparison)))
    runs = ", ".join(run.name for run in inputs.runs)
    return html.page(f"fastcoord report: {runs}", sections, report.problems)


def _summary(
    console: Console,
    inputs: Inputs,
    rows: dict[str, list[dict[str, Any]]],
    comparison: list[dict[str, Any]],
    report: Report,
) -> None:
    out = Console()
    if not out.is_terminal:  # a log or a pipe: wide enough that no column is cut
        out = Console(width=160)
    table = Table(title="latency over the run (ms, from merged histograms)")
    for column in LATENCY_COLUMNS:
        table.add_column(column, justify="left" if column in ("run", "api") else "right")
    for row in sorted(rows["latency_run"], key=lambda r: (r["run"], r["api"])):
        table.add_row(*(html.cell(row[c]) for c in LATENCY_COLUMNS))
    out.print(table)
    if rows["rebalance_sizes_client"]:
        sizes = Table(title="rebalances as the members saw them (ms)")
        columns = ["run", "size", "rebalances", "p50_ms", "p99_ms", "max_ms"]
        for column in columns:
            sizes.add_column(column, justify="left" if column in ("run", "size") else "right")
        for row in rows["rebalance_sizes_client"]:
            sizes.add_row(*(html.cell(row[c]) for c in columns))
        out.print(sizes)
    if len(rows["events_by_node"]) > 1:  # a cluster's logs: what each node gave
        by_node = Table(title="the event log, node by node")
        columns = ["node_id", "events", "groups", "rebalances", "commits"]
        for column in columns:
            by_node.add_column(column, justify="right")
        for row in rows["events_by_node"]:
            by_node.add_row(*(html.cell(row[c]) for c in columns))
        out.print(by_node)
    if comparison:
        runs = [run.name for run in inputs.runs]
        compared = Table(title="runs compared")
        columns = ["figure", *runs, *(f"ratio {r}" for r in runs[1:])]
        for column in columns:
            compared.add_column(column, justify="left" if column == "figure" else "right")
        for row in comparison:
            compared.add_row(*(html.cell(row.get(c)) for c in columns))
        out.print(compared)
    out.print(
        f"report: {report.html} ({len(report.tables)} tables under {report.out / 'tables'}) "
        f"in {report.seconds['total']:.1f} s"
    )
