"""`fastcoord report`: read the runs and the event logs (one server's, or each node's of a
cluster, as one), compute every table on Spark, write them as Parquet under --out, write
report.html (pipeline/page.py), print a summary.

Spark does the work that grows with the data (every row of every run); what comes back to
this process is small: a row per API and phase, a point per API and step of the time
charts, per group-size bucket; the long tables (every rebalance, every group's commits)
stay in Parquet, and the page reads their first rows only.
"""

from __future__ import annotations

import json
import math
import re
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
from fastcoord.pipeline import compare, html
from fastcoord.pipeline.inputs import Inputs, open_inputs
from fastcoord.pipeline.offsets import nodes_offsets
from fastcoord.pipeline.scope import Scope, headline, scope_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from fastcoord.pipeline.tables import Tables

MAX_POINTS = 600  # per series of the time charts: a long run's seconds are stepped
TOP = 20  # rows of a long table on the page (the whole table is in its Parquet)
# The long tables: the page reads their first TOP rows (each is written in its order).
LONG = ("rebalances_client", "rebalances_server", "group_commits", "committed_offsets")


@dataclass
class Report:
    out: Path
    tables: dict[str, Path] = field(default_factory=dict)  # name -> Parquet directory
    html: Path | None = None
    problems: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # where the time went
    scopes: list[Scope] = field(default_factory=list)
    step_s: int = 1
    totals: dict[str, int] = field(default_factory=dict)  # rows of each long table


@dataclass(frozen=True)
class Options:
    """What the command line asks of the report beyond its inputs."""

    window: tuple[float, float | None] | None = None  # --window: the steady window
    formation: bool = False  # --formation: the slowest list includes groups' formation
    top: int = TOP


def _computations(
    t: Tables,
    spark: SparkSession,
    scopes: list[Scope],
    step_s: int,
    options: Options,
) -> dict[str, Callable[[], DataFrame]]:
    from pyspark.sql import functions as F

    from fastcoord.pipeline import (
        commits,
        errors,
        latency,
        membership,
        moves,
        nodes,
        rebalances,
        usage,
    )
    from fastcoord.pipeline.clock import run_starts

    # Small frames every job joins: built once here from what came back.
    starts = spark.createDataFrame(
        [(r.run, r.start_ms) for r in run_starts(t.latency, t.states).collect()],
        "run string, start_ms long",
    )
    lengths = spark.createDataFrame(
        [(s.run, s.windows["run"].last_s) for s in scopes], "run string, last_s int"
    )
    windows = spark.createDataFrame(
        [
            (s.run, w.phase, w.first_s, w.last_s, w.seconds, w.source)
            for s in scopes
            for w in [*s.windows.values(), *s.calm]
        ],
        "run string, phase string, first_s int, last_s int, seconds int, source string",
    )
    client = rebalances.client_side(t.rebalances, starts).cache()
    server = rebalances.server_side(t.events).cache()
    return {
        "phases": lambda: windows,
        "latency_phases": lambda: latency.by_phase(t.latency, windows),
        "latency_series": lambda: latency.series(t.latency, lengths, step_s),
        "errors_by_api": lambda: errors.by_api(t.latency, t.errors),
        "errors_by_code": lambda: errors.by_code(t.errors),
        "errors_series": lambda: errors.by_code_series(t.errors, starts, step_s),
        "member_states": lambda: membership.client_states(t.states),
        "rebalances_client": lambda: client.orderBy("run", F.col("duration_ms").desc()),
        "rebalance_sizes_client": lambda: rebalances.by_size(client, ["run"]),
        "rebalance_distribution": lambda: rebalances.distribution(client),
        "rebalances_over_time": lambda: rebalances.in_progress(client, lengths, step_s),
        "rebalances_server": lambda: server.orderBy("run", F.col("duration_ms").desc()),
        "rebalance_sizes_server": lambda: rebalances.by_size(server, ["run"]),
        "slowest_rebalances": lambda: rebalances.slowest(server, options.formation, options.top),
        "membership_server": lambda: membership.server_changes(t.events, starts, step_s),
        "coordinator_moves": lambda: moves.per_group(t.events, starts),
        "group_commits": lambda: commits.per_group(t.events),
        "events_by_node": lambda: nodes.per_node(t.events),
        "event_scope": lambda: _event_scope(t),
        "server_series": lambda: usage.series(t.server, step_s),
        "server_phases": lambda: usage.by_phase(t.server, windows),
    }


def _event_scope(t: Tables) -> DataFrame:
    """run, events: each run's share of the event logs, and a row with run null for the
    events of no run (other groups, other times), which the report left out."""
    from pyspark.sql import functions as F

    from fastcoord.pipeline.tables import of_no_run

    kept = t.events.groupBy("run").agg(F.count("*").alias("events"))
    left_out = of_no_run(t.every_event, t.scopes).agg(F.count("*").alias("events"))
    return kept.unionByName(left_out.select(F.lit(None).cast("string").alias("run"), "events"))


def _rows(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """A Parquet directory's rows in its part files' order (Spark writes a sorted frame's
    parts in order), the first `limit` of them."""
    if not path.exists():
        return []
    rows: list[dict[str, Any]] = []
    for part in sorted(path.glob("part-*.parquet")):
        rows += pq.read_table(part).to_pylist()
        if limit is not None and len(rows) >= limit:
            return rows[:limit]
    return rows


def _count(path: Path) -> int:
    return sum(pq.read_metadata(p).num_rows for p in path.glob("part-*.parquet"))


def _last_seconds(spark: SparkSession, t: Tables) -> dict[str, int]:
    """Each run's last second (of its latency and states rows)."""
    from pyspark.sql import functions as F

    stamped = t.latency.select("run", "elapsed_s").unionByName(t.states.select("run", "elapsed_s"))
    return {
        r.run: int(r.last_s or 0)
        for r in stamped.groupBy("run").agg(F.max("elapsed_s").alias("last_s")).collect()
    }


def _write(path: Path, table: pa.Table) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    pq.write_table(table, path / "part-00000.parquet")


def make_report(
    run_dirs: list[Path],
    events: Path | Sequence[Path] | None,
    out: Path,
    master: str,
    console: Console | None = None,
    options: Options | None = None,
) -> Report:
    options = options or Options()
    console = console or Console(stderr=True)
    report = Report(out)
    clock = time.monotonic()
    inputs: Inputs = open_inputs(run_dirs, events)
    report.problems = inputs.problems
    for problem in inputs.problems:
        console.print(f"[yellow]left out:[/] {problem}", highlight=False)
    make_output_dir(out)
    rows: dict[str, list[dict[str, Any]]] = {}
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
            started = time.monotonic()
            progress.update(task, description="reading the runs' lengths")
            summaries = {run.name: run.summary for run in inputs.runs}
            tables = load(spark, inputs)
            last = _last_seconds(spark, tables)
            report.scopes = [
                scope_of(run, summaries[run], last.get(run, 1), options.window) for run in summaries
            ]
            report.step_s = max(1, math.ceil(max(last.values(), default=1) / MAX_POINTS))
            report.seconds["lengths"] = time.monotonic() - started
            computations = _computations(tables, spark, report.scopes, report.step_s, options)
            for name, compute in computations.items():
                started = time.monotonic()
                progress.update(task, description=f"computing {name}")
                path = out / "tables" / name
                compute().write.mode("overwrite").parquet(str(path))
                report.tables[name] = path
                report.seconds[name] = time.monotonic() - started
        finally:
            if ours:
                spark.stop()
    for name, path in report.tables.items():
        rows[name] = _rows(path, options.top if name in LONG else None)
        if name in LONG:
            report.totals[name] = _count(path)
    _offsets(report, inputs, rows, options)
    comparison = _comparison(report.scopes, rows)
    if comparison:
        path = out / "tables" / "comparison"
        _write(path, _arrow(comparison))
        report.tables["comparison"] = path
    started = time.monotonic()
    from fastcoord.pipeline.page import render

    report.html = out / "report.html"
    report.html.write_text(render(report, rows, comparison, options))
    report.seconds["page"] = time.monotonic() - started
    report.seconds["total"] = time.monotonic() - clock
    (out / "timings.json").write_text(json.dumps(report.seconds, indent=1) + "\n")
    _summary(report, rows, comparison)
    return report


def _offsets(
    report: Report, inputs: Inputs, rows: dict[str, list[dict[str, Any]]], options: Options
) -> None:
    """The final committed offsets of each run's groups, from each node's offsets log
    (beside its event log, in its data directory)."""
    rows["committed_offsets"] = []
    data_dirs = [(d.path.parent, d.node) for d in inputs.event_dirs if d.path.is_dir()]
    if not data_dirs:
        return
    final = nodes_offsets(data_dirs, report.problems)
    if final is None:
        return
    parts = []
    for scope in report.scopes:
        if scope.summary is None:
            continue  # which groups were its, it does not say
        pattern = re.compile(scope.group_pattern) if scope.group_pattern else None
        mine = [r for r in final.to_pylist() if pattern is None or pattern.match(r["group_id"])]
        parts += [{"run": scope.run, **r} for r in mine]
    schema = pa.schema([pa.field("run", pa.string()), *final.schema])
    path = report.out / "tables" / "committed_offsets"
    _write(path, pa.Table.from_pylist(parts, schema=schema))
    report.tables["committed_offsets"] = path
    report.totals["committed_offsets"] = len(parts)
    rows["committed_offsets"] = parts[: options.top]


def _arrow(rows: list[dict[str, Any]]) -> pa.Table:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return pa.table(
        {
            c: pa.array([r.get(c) for r in rows], pa.string() if c == "figure" else pa.float64())
            for c in columns
        }
    )


def _comparison(scopes: list[Scope], rows: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The runs side by side: those with figures (a run left out whole has none)."""
    measured = {r["run"] for r in rows["latency_phases"]}
    scopes = [s for s in scopes if s.run in measured]
    if len(scopes) < 2:
        return []
    headlines = {s.run: headline(s).phase for s in scopes}
    return compare.figures(
        [s.run for s in scopes],
        [r for r in rows["latency_phases"] if headlines.get(r["run"]) == r["phase"]],
        [r for r in rows["errors_by_api"] if r["run"] in headlines],
        [r for r in rows["rebalance_sizes_client"] if not r["formation"]],
    )


def _summary(
    report: Report, rows: dict[str, list[dict[str, Any]]], comparison: list[dict[str, Any]]
) -> None:
    """The terminal's summary: each run's headline window, per API."""
    from fastcoord.pipeline.page import LATENCY_COLUMNS

    out = Console()
    if not out.is_terminal:  # a log or a pipe: wide enough that no column is cut
        out = Console(width=160)
    measured = {r["run"] for r in rows["latency_phases"]}
    for scope in report.scopes:
        if scope.run not in measured:
            continue
        window = headline(scope)
        table = Table(
            title=f"{scope.run}: {window.phase}, seconds {window.first_s}-{window.last_s} "
            f"({window.source}) (ms, from merged histograms)"
        )
        columns = [c for c in LATENCY_COLUMNS if c not in ("run", "phase", "error_rate")]
        for column in columns:
            table.add_column(column, justify="left" if column == "api" else "right")
        for row in sorted(
            (
                r
                for r in rows["latency_phases"]
                if r["run"] == scope.run and r["phase"] == window.phase
            ),
            key=lambda r: r["api"],
        ):
            table.add_row(*(html.cell(row[c]) for c in columns))
        out.print(table)
        for note in scope.notes:
            out.print(note, highlight=False, markup=False)
    sizes = [r for r in rows["rebalance_sizes_client"] if not r["formation"]]
    if sizes:
        table = Table(title="rebalances after the groups formed, as the members saw them (ms)")
        columns = ["run", "size", "rebalances", "p50_ms", "p99_ms", "max_ms"]
        for column in columns:
            table.add_column(column, justify="left" if column in ("run", "size") else "right")
        for row in sizes:
            table.add_row(*(html.cell(row[c]) for c in columns))
        out.print(table)
    if len({r["node_id"] for r in rows["events_by_node"]}) > 1:  # a cluster's logs
        by_node = Table(title="the event log, node by node")
        columns = ["run", "node_id", "events", "groups", "rebalances", "commits"]
        for column in columns:
            by_node.add_column(column, justify="left" if column == "run" else "right")
        for row in rows["events_by_node"]:
            by_node.add_row(*(html.cell(row[c]) for c in columns))
        out.print(by_node)
    if comparison:
        runs = [s.run for s in report.scopes if any(s.run in r for r in comparison)]
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
