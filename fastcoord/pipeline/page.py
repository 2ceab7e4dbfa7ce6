"""report.html: the run's story, read top to bottom.

First the verdict and the headline figures (the steady window's: the figures a load tester
quotes), then the run over time on one time axis, its phases and faults shaded (requests
per second, latency, members, rebalances, errors and signals, the server's CPU and
memory), then the distributions and the long tables (their first rows; the whole of each
is in its Parquet beside the page). Every figure on the page comes from the report's
tables, which tests check against the run's own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from fastcoord.loadtest.results import STATES
from fastcoord.loadtest.summary import WHOLE_RUN, Thresholds, judge
from fastcoord.pipeline import html
from fastcoord.pipeline.scope import CALM, Scope, headline

if TYPE_CHECKING:
    from fastcoord.pipeline.report import Options, Report

Rows = list[dict[str, Any]]
HEARTBEATS = ("Heartbeat", "ConsumerGroupHeartbeat")
MB = 1 << 20


def heartbeat_api(scope: Scope) -> str:
    return HEARTBEATS[1] if scope.config("group_protocol") == "consumer" else HEARTBEATS[0]


def _of(rows: Rows, **match: Any) -> Rows:
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def _one(rows: Rows, **match: Any) -> dict[str, Any] | None:
    found = _of(rows, **match)
    return found[0] if found else None


def headline_figures(scope: Scope, rows: dict[str, Rows]) -> dict[str, Any]:
    """The verdict's figures of one run, each from the report's tables: members reached,
    the headline window's heartbeat percentiles, the whole run's errors, signals and
    error rate, rebalances, the server's CPU and memory."""
    window = headline(scope)
    run = scope.run
    latency = _of(rows["latency_phases"], run=run, phase=window.phase)
    whole = _of(rows["latency_phases"], run=run, phase="run")
    beat = _one(latency, api=heartbeat_api(scope)) or {}
    requests = sum(r["count"] for r in whole)
    errors = sum(r["errors"] for r in whole)
    states = _of(rows["member_states"], run=run)
    later = _of(rows["rebalance_sizes_client"], run=run, formation=False)
    usage = _of(rows["server_phases"], run=run, phase=window.phase)
    target = scope.config("members")
    return {
        "window": window,
        "members_target": target if isinstance(target, int) else None,
        "members_reached": max((r["stable"] for r in states), default=None),
        "heartbeat_api": heartbeat_api(scope),
        "heartbeat_p50_ms": beat.get("p50_ms"),
        "heartbeat_p99_ms": beat.get("p99_ms"),
        "heartbeat_p99_9_ms": beat.get("p99_9_ms"),
        "requests": requests,
        "errors": errors,
        "signals": sum(r["signals"] for r in whole),
        "error_rate": errors / requests if requests else None,
        "rebalances": sum(r["rebalances"] for r in later),
        "formations": sum(r["rebalances"] for r in _of(rows["rebalance_sizes_client"], run=run))
        - sum(r["rebalances"] for r in later),
        "server_cores": sum(r["cores"] for r in usage if r["cores"] is not None) if usage else None,
        "server_peak_rss_bytes": sum(r["peak_rss_bytes"] or 0 for r in usage) if usage else None,
        "p99_by_api": {r["api"]: r["p99_ms"] for r in latency},
        "calm": _one(_of(rows["latency_phases"], run=run, phase=CALM), api=heartbeat_api(scope))
        if scope.calm and window.phase == "steady"
        else None,
    }


def verdict(scope: Scope, figures: dict[str, Any]) -> dict[str, Any]:
    """The run's thresholds (from its summary) applied to the report's own figures, by the
    load test's rule: p99 in the headline window, errors over the whole run."""
    limits = (scope.summary or {}).get("thresholds") or {}
    window = figures["window"]
    where = (
        WHOLE_RUN
        if window.phase == "run"
        else f"in the steady window, seconds {window.first_s}-{window.last_s} ({window.source})"
    )
    verdict: dict[str, Any] = judge(
        Thresholds(limits.get("max_error_rate"), limits.get("max_p99_ms")),
        figures["p99_by_api"],
        figures["errors"],
        figures["requests"],
        where,
    )
    return verdict


def _cards(scope: Scope, f: dict[str, Any]) -> list[html.Figure]:
    run = scope.run
    window = f["window"]
    where = f"{window.phase}, s {window.first_s}-{window.last_s}"
    target = f["members_target"]
    cards = [
        html.Figure(
            f"{run}.members_reached",
            "members stable (most at once)",
            f["members_reached"],
            note=f"of {target:,} in the run" if target is not None else "",
            tone=None if target is None else "good" if f["members_reached"] == target else "bad",
        ),
        *(
            html.Figure(
                f"{run}.heartbeat_{name}",
                f"{f['heartbeat_api']} {label}",
                f[f"heartbeat_{name}"],
                unit="ms",
                note=where,
            )
            for name, label in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p99_9_ms", "p99.9"))
        ),
        *(
            html.Figure(
                f"{run}.calm_heartbeat_{name}",
                f"{f['heartbeat_api']} {label} outside the faults",
                f["calm"].get(name),
                unit="ms",
                note=f"steady, {sum(w.seconds for w in scope.calm)} s untouched by a fault",
            )
            for name, label in (("p99_ms", "p99"),)
            if f["calm"] is not None
        ),
        html.Figure(
            f"{run}.error_rate",
            "error rate (whole run)",
            f["error_rate"],
            text=f"{f['error_rate']:.3%}" if f["error_rate"] is not None else None,
            note=f"{f['errors']:,} errors in {f['requests']:,} requests; "
            f"{f['signals']:,} signals apart",
            tone="good" if not f["errors"] else "bad",
        ),
        html.Figure(
            f"{run}.rebalances",
            "rebalances after formation",
            f["rebalances"],
            note=f"and {f['formations']:,} formations",
        ),
    ]
    if f["server_cores"] is not None:
        cards.append(
            html.Figure(
                f"{run}.server_cores",
                "server CPU",
                f["server_cores"],
                unit="cores",
                note=where,
            )
        )
        rss = f["server_peak_rss_bytes"]
        cards.append(
            html.Figure(
                f"{run}.server_peak_rss_bytes",
                "server memory (peak RSS)",
                rss,
                text=f"{rss / MB:,.0f} MB" if rss is not None else None,
                note=where,
            )
        )
    return cards


def _bands(scope: Scope) -> list[dict[str, Any]]:
    return [
        {"from": b.start_s, "to": b.end_s, "label": b.label, "kind": b.kind} for b in scope.bands()
    ]


def _time_chart(
    chart_id: str,
    title: str,
    y_label: str,
    series: Iterable[dict[str, Any]],
    bands: list[dict[str, Any]],
    *,
    kind: str = "line",
    log: bool = False,
    stacked: bool = False,
    note: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "id": chart_id,
        "title": title,
        "type": kind,
        "x": {"label": "seconds since the run's start", "kind": "time"},
        "y": {"label": y_label, "log": log},
        "series": [s for s in series if s["x"]],
        "bands": bands,
        "stacked": stacked,
    }
    if note:
        spec["note"] = note
    return spec


def _series(rows: Rows, x: str, y: str, name: str) -> dict[str, Any]:
    ordered = sorted(rows, key=lambda r: r[x])
    return {"name": name, "x": [r[x] for r in ordered], "y": [r[y] for r in ordered]}


def _label(name: str, run: str, runs: int) -> str:
    return f"{name} ({run})" if runs > 1 else name


def _steps(scope: Scope, step: int) -> range:
    """The points of a run's time charts: the last second of each step."""
    last = scope.windows["run"].last_s
    return range(step, -(-last // step) * step + 1, step)


def _counts(
    rows: Rows, y: str, name: str, steps: range, per_second: bool = False
) -> dict[str, Any]:
    """A series of counts per step (per second of the step if `per_second`: the last step
    of a run may be short), with 0 where no row was (nothing counted there): a line drawn
    between two distant counts would show counts that were never there."""
    by = {r["t"]: r[y] / (r.get("seconds") or steps.step) if per_second else r[y] for r in rows}
    return {"name": name, "x": list(steps), "y": [by.get(t, 0) for t in steps]}


def time_charts(report: Report, rows: dict[str, Rows]) -> list[dict[str, Any]]:
    """Every chart over the run's time, on one time axis."""
    scopes = report.scopes
    n = len(scopes)
    bands = _bands(scopes[0]) if scopes else []
    step = report.step_s
    per = f"per second ({step}-second steps)" if step > 1 else "per second"
    series = rows["latency_series"]
    volume: dict[str, int] = defaultdict(int)
    points: dict[str, set[int]] = defaultdict(set)
    for r in series:
        volume[r["api"]] += r["count"]
        points[r["api"]].add(r["t"])
    apis = sorted(volume, key=lambda api: (-volume[api], api))
    longest = max((len(_steps(s, step)) for s in scopes), default=1)
    # An API answered through most of a run (heartbeats, commits) has a chart of its own;
    # those of the join and the leave (bursts) share one.
    steady = [api for api in apis if len(points[api]) * 2 >= longest]
    bursts = [api for api in apis if api not in steady and len(points[api]) >= 2]
    charts = [
        _time_chart(
            "requests",
            f"Requests {per}, by API",
            "requests/s",
            (
                _counts(
                    _of(series, run=s.run, api=api),
                    "count",
                    _label(api, s.run, n),
                    _steps(s, step),
                    per_second=True,
                )
                for s in scopes
                for api in apis
            ),
            bands,
        )
    ]
    for api in steady:
        charts.append(
            _time_chart(
                f"latency-{api.lower()}",
                f"{api} latency: p50, p99 and max (ms)",
                "ms",
                (
                    _series(_of(series, run=s.run, api=api), "t", figure, _label(label, s.run, n))
                    for s in scopes
                    for figure, label in (("p50_ms", "p50"), ("p99_ms", "p99"), ("max_ms", "max"))
                ),
                bands,
                log=True,
            )
        )
    if bursts:
        charts.append(
            _time_chart(
                "latency-bursts",
                f"{', '.join(bursts)} latency: p99 (ms)",
                "ms",
                (
                    _series(_of(series, run=s.run, api=api), "t", "p99_ms", _label(api, s.run, n))
                    for s in scopes
                    for api in bursts
                ),
                bands,
                log=True,
                note="the APIs of the join and the leave, which come in bursts",
            )
        )
    for i, s in enumerate(scopes):
        states = _of(rows["member_states"], run=s.run)
        if not states:
            continue
        charts.append(
            _time_chart(
                f"members-{i}",
                _label("Members by state", s.run, n),
                "members",
                (_series(states, "elapsed_s", state, state) for state in STATES),
                _bands(s),
                kind="area",
                stacked=True,
            )
        )
    charts.append(
        _time_chart(
            "rebalancing",
            "Rebalances in progress (groups), as the members saw them",
            "groups",
            (
                _counts(
                    _of(rows["rebalances_over_time"], run=s.run),
                    "rebalancing",
                    _label("in progress", s.run, n),
                    _steps(s, step),
                )
                for s in scopes
            ),
            bands,
            kind="step",
        )
    )
    notes = {
        "errors": "answers that say something went wrong",
        "signals": "MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS, STALE_MEMBER_EPOCH: answers that "
        "tell a member what to do next, not errors",
    }
    for what in ("errors", "signals"):
        counted = []
        for s in scopes:
            for api in apis:
                mine = _of(series, run=s.run, api=api)
                if any(r[what] for r in mine):
                    counted.append(
                        _counts(mine, what, _label(api, s.run, n), _steps(s, step), True)
                    )
        charts.append(
            _time_chart(
                what,
                f"{what.capitalize()} {per}, by API",
                "answers/s",
                counted,
                bands,
                note=notes[what],
            )
        )
    usage = rows["server_series"]
    if usage:
        nodes = sorted({r["node"] for r in usage})
        for figure, title, unit, scale in (
            ("cores", "The server's CPU (cores)", "cores", 1.0),
            ("rss_bytes", "The server's resident memory (MB)", "MB", 1 / MB),
        ):
            charts.append(
                _time_chart(
                    f"server-{figure.replace('_', '-')}",
                    title,
                    unit,
                    (
                        _series(
                            [
                                {
                                    "t": r["t"],
                                    "v": r[figure] * scale if r[figure] is not None else None,
                                }
                                for r in _of(usage, run=s.run, node=node)
                            ],
                            "t",
                            "v",
                            _label(node, s.run, n),
                        )
                        for s in scopes
                        for node in nodes
                    ),
                    bands,
                )
            )
    changes = rows["membership_server"]
    if changes:
        charts.append(
            _time_chart(
                "membership-server",
                f"Members joined, left and expired {per}, as the server logged them",
                "members/s",
                (
                    _counts(
                        _of(changes, run=s.run),
                        kind,
                        _label(kind, s.run, n),
                        _steps(s, step),
                        per_second=True,
                    )
                    for s in scopes
                    for kind in ("joined", "left", "expired", "removed")
                    if any(r[kind] for r in _of(changes, run=s.run))
                ),
                bands,
            )
        )
    return charts


def distribution_chart(report: Report, rows: dict[str, Rows]) -> dict[str, Any]:
    """The rebalances' durations as a CDF, by group size, formation apart."""
    n = len(report.scopes)
    curves: dict[tuple[str, str, bool], list[dict[str, Any]]] = defaultdict(list)
    for r in rows["rebalance_distribution"]:
        curves[(r["run"], r["size"], r["formation"])].append(r)
    series = []
    for (run, size, formation), points in sorted(curves.items()):
        points.sort(key=lambda r: r["q"])
        kind = "formation" if formation else "later"
        series.append(
            {
                "name": _label(f"{size} members, {kind}", run, n),
                "x": [max(p["duration_ms"], 0.001) for p in points],
                "y": [p["q"] for p in points],
            }
        )
    return {
        "id": "rebalance-cdf",
        "title": "Rebalance durations: the share that took at most x ms (by group size)",
        "type": "line",
        "x": {"label": "ms, first member's start to the last SyncGroup answer", "kind": "log"},
        "y": {"label": "% of rebalances", "log": False, "min": 0},
        "series": series,
        "bands": [],
        "stacked": False,
    }


PHASE_COLUMNS = ["run", "phase", "first_s", "last_s", "seconds", "source"]
LATENCY_COLUMNS = [
    "run",
    "phase",
    "api",
    "count",
    "requests_per_s",
    "errors",
    "signals",
    "error_rate",
    "p50_ms",
    "p99_ms",
    "p99_9_ms",
    "max_ms",
]
SIZE_COLUMNS = ["run", "size", "formation", "rebalances", "p50_ms", "p99_ms", "max_ms"]
MOVE_COLUMNS = [
    "run",
    "group_id",
    "from_node",
    "to_node",
    "unloaded_s",
    "loaded_s",
    "loaded_as",
    "members",
    "stable_after_unload_ms",
    "stable_after_load_ms",
]
SLOWEST_COLUMNS = [
    "run",
    "group_id",
    "generation",
    "started",
    "duration_ms",
    "members",
    "formation",
    "last_joined",
    "expired",
]
PHASE_ORDER = {"joining": 0, "steady": 1, "leaving": 2, "run": 3}


def _phase_key(r: Mapping[str, Any]) -> tuple[Any, ...]:
    return (r["run"], PHASE_ORDER.get(r["phase"], 9), r.get("api", ""))


def _faults(scope: Scope, several: bool) -> Rows:
    """Each fault of a run, its window and what it injected, and per API it touched the
    load test's p99 and requests per second inside the window beside those outside every
    fault's window."""
    out = []
    for fault in (scope.summary or {}).get("faults") or []:
        window = fault.get("window") or {}
        head = {
            **({"run": scope.run} if several else {}),
            "fault": fault.get("description"),
            "window_s": f"{window['start_ms'] / 1000:.1f}-{window['end_ms'] / 1000:.1f}"
            if window
            else fault.get("apply_error") or "not added",
            "injected": fault.get("injected"),
        }
        effects = (fault.get("effect") or {}).items()
        if not effects:
            out.append(head)
        for api, where in effects:
            inside, outside = where.get("window") or {}, where.get("outside") or {}
            out.append(
                {
                    **head,
                    "api": api,
                    "p99 ms in": inside.get("p99_ms"),
                    "p99 ms out": outside.get("p99_ms"),
                    "req/s in": inside.get("requests_per_s"),
                    "req/s out": outside.get("requests_per_s"),
                    "errors in": sum((inside.get("errors") or {}).values()),
                }
            )
    return out


def _long(
    report: Report, rows: dict[str, Rows], name: str, columns: list[str] | None = None
) -> str:
    return html.table(
        rows[name],
        columns,
        limit=len(rows[name]),
        total=report.totals.get(name, len(rows[name])),
        source=f"tables/{name}/",
    )


def render(report: Report, rows: dict[str, Rows], comparison: Rows, options: Options) -> str:
    runs = ", ".join(s.run for s in report.scopes)
    page = html.Page(f"fastcoord report: {runs}")
    page.problems(report.problems)
    measured = {r["run"] for r in rows["latency_phases"]}
    several = len(report.scopes) > 1
    for scope in report.scopes:
        if scope.run not in measured:
            continue  # nothing of it could be read: "Inputs left out" says why
        figures = headline_figures(scope, rows)
        judged = verdict(scope, figures)
        window = figures["window"]
        where = (
            f"the {window.phase} window, seconds {window.first_s}-{window.last_s} ({window.source})"
        )
        page.verdict(
            judged["passed"],
            f"{scope.run}: {'passed' if judged['passed'] else 'failed'}; headline figures of "
            + where,
            judged["failures"] + scope.notes,
        )
        page.figures(_cards(scope, figures), f"{scope.run}: {where}" if several else None)
    if comparison:
        page.section("Runs compared (ratio: against the first)", html.table(comparison))
    page.section(
        "Phases",
        html.table(sorted(rows["phases"], key=_phase_key), PHASE_COLUMNS)
        + html.table(
            sorted(
                (r for r in rows["latency_phases"] if r["api"] in HEARTBEATS),
                key=_phase_key,
            ),
            LATENCY_COLUMNS,
        ),
    )
    faults = [f for s in report.scopes for f in _faults(s, several)]
    if faults:
        page.section(
            "Faults",
            html.table(faults, list(dict.fromkeys(k for f in faults for k in f)))
            + "<p>In: the seconds of the fault's window; out: the run's seconds outside "
            "every fault's window (the load test's figures). A fault ends after its duration, "
            "or with the run.</p>",
        )
    page.section(
        "Over time",
        "".join(page.chart(spec) for spec in time_charts(report, rows)),
    )
    slowest = rows["slowest_rebalances"]
    which = "" if options.formation else " (formations left out: --formation takes them in)"
    page.section(
        "Rebalances",
        page.chart(distribution_chart(report, rows))
        + html.table(
            sorted(
                rows["rebalance_sizes_client"], key=lambda r: (r["run"], r["formation"], r["size"])
            ),
            SIZE_COLUMNS,
        )
        + f"<h3>The slowest, as the server ran them{which}</h3>"
        + html.table(
            slowest,
            SLOWEST_COLUMNS,
            limit=options.top,
            total=report.totals.get("rebalances_server", len(slowest)),
            source="tables/rebalances_server/",
        ),
    )
    moved = rows.get("coordinator_moves") or []
    if moved:
        page.section(
            "Coordinator moves",
            html.table(moved, MOVE_COLUMNS)
            + "<p>Each group whose offsets partition moved to another node: unloaded by the "
            "node that let it go (none when that node died), loaded by the node that took it, "
            "and Stable again there: at the load when it was loaded Stable, else at its next "
            "SyncGroup's completion. Meanwhile its members are answered NOT_COORDINATOR, "
            "then COORDINATOR_LOAD_IN_PROGRESS.</p>",
        )
    page.section(
        "Latency by phase and API",
        html.table(sorted(rows["latency_phases"], key=_phase_key), LATENCY_COLUMNS),
    )
    page.section(
        "Errors and signals",
        html.table(sorted(rows["errors_by_api"], key=lambda r: (r["run"], r["api"])))
        + html.table(
            sorted(rows["errors_by_code"], key=lambda r: (r["run"], r["signal"], -r["count"]))
        ),
    )
    left_out = sum(r["events"] for r in rows["event_scope"] if r["run"] is None)
    kept = sum(r["events"] for r in rows["event_scope"] if r["run"] is not None)
    page.section(
        "The server's event log",
        f"<p>{kept:,} events of these runs' groups within their time; "
        f"{left_out:,} events of other groups or times left out.</p>"
        + html.table(rows["events_by_node"])
        + html.table(rows["rebalance_sizes_server"])
        + "<h3>Groups with the most commits</h3>"
        + _long(report, rows, "group_commits")
        + "<h3>Final committed offsets (from the offsets log)</h3>"
        + _long(report, rows, "committed_offsets"),
    )
    page.section(
        "How long the report took",
        html.table([{"step": k, "seconds": v} for k, v in report.seconds.items()]),
    )
    return page.render()
