"""What a load test shows its operator: a live view while it runs, a table at the end.

On a terminal the live view (rich) is redrawn at every update; elsewhere (a CI log, a file)
one plain line every 5 s says the same in brief, so that a log stays readable. The figures
are the newest second that every worker reported (aggregate.py), so the view runs a second
or so behind the workers, and say which phase of the run that second is in. Against a
cluster of two nodes or more, both views and the end's table show each coordinator node's
share too; against a lone server that would only repeat the totals, so it is left out.

The end leads with the steady phase's figures, what a coordinator's life is made of, and
gives the whole run's after them. Errors and the protocol's signals are shown apart, the
signals named as such: a rebalance's REBALANCE_IN_PROGRESS is no failure.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from fastcoord.loadtest.aggregate import NodeView, Snapshot, node_name

PLAIN_EVERY_S = 5.0
MOVES_LISTED = 10  # coordinator moves the end's summary names one by one


def fmt_ms(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if value < 1:
        return f"{value:.3f}"
    if value < 100:
        return f"{value:.2f}"
    return f"{value:,.0f}"


def fmt_errors(errors: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {n:,}" for name, n in errors.items() if n) or "-"


def fmt_rate(value: float | None) -> str:
    return f"{value:,.0f}" if value is not None else "-"


def fmt_seconds(first: int, last: int) -> str:
    return f"seconds {first}-{last}" if last != first else f"second {first}"


def fmt_mb(value: int | None) -> str:
    return f"{value / 1e6:,.0f} MB" if value is not None else "-"


def _clock(snapshot: Snapshot) -> str:
    phase = f" ({snapshot.phase})" if snapshot.phase else ""
    if snapshot.duration_s:
        return f"{snapshot.elapsed_s} s / {snapshot.duration_s:g} s{phase}"
    return f"{snapshot.elapsed_s} s{phase}"


def _members(snapshot: Snapshot) -> str:
    target = f" of {snapshot.target_members:,}" if snapshot.target_members is not None else ""
    states = " ".join(f"{state} {n:,}" for state, n in snapshot.states.items())
    return f"members{target}: {states}"


def _nodes_table(nodes: list[NodeView]) -> Table:
    table = Table(title="coordinator nodes", title_justify="left", expand=False)
    table.add_column("node")
    for name in ("groups", "connections", "requests/s"):
        table.add_column(name, justify="right")
    table.add_column("errors")
    table.add_column("signals")
    for node in nodes:
        table.add_row(
            node_name(node.address, node.node_id),
            f"{node.groups:,}",
            f"{node.connections:,}",
            f"{node.requests:,}",
            fmt_errors(node.errors),
            fmt_errors(node.signals),
        )
    return table


def render(snapshot: Snapshot) -> RenderableType:
    """The live view of one snapshot."""
    head = Text.assemble(
        ("fastcoord loadtest ", "bold"),
        f"{_clock(snapshot)}   workers {snapshot.reporting}/{snapshot.workers}   ",
        f"generator CPU {snapshot.cpu_s * 100:.0f}% of a core   ",
        f"connections {snapshot.connections:,}",
    )
    apis = Table(title="requests in the last second", title_justify="left", expand=False)
    apis.add_column("API")
    for name in ("requests/s", "p50 ms", "p99 ms", "p99.9 ms"):
        apis.add_column(name, justify="right")
    apis.add_column("errors")
    apis.add_column("signals")
    for name, view in snapshot.apis.items():
        apis.add_row(
            name,
            f"{view.requests:,}",
            fmt_ms(view.p50_ms),
            fmt_ms(view.p99_ms),
            fmt_ms(view.p99_9_ms),
            fmt_errors(view.errors),
            fmt_errors(view.signals),
        )
    errors, signals = sum(snapshot.errors.values()), sum(snapshot.signals.values())
    totals = Text(
        f"run so far: {snapshot.requests:,} requests, {errors:,} errors "
        f"({fmt_errors(snapshot.errors)}), {signals:,} signals "
        f"({fmt_errors(snapshot.signals)})\nrebalances {snapshot.rebalances:,} "
        f"({snapshot.unexpected_rebalances:,} unexpected); unexpected expirations "
        f"{snapshot.unexpected_expirations:,}; commits {snapshot.commits:,}"
    )
    parts: list[RenderableType] = [head, Text(_members(snapshot)), apis]
    if len(snapshot.nodes) >= 2:
        parts.append(_nodes_table(snapshot.nodes))
    parts.append(totals)
    if snapshot.moves:
        parts.append(Text(_moves(snapshot)))
    return Group(*parts)


def _moves(snapshot: Snapshot) -> str:
    """The coordinator moves the members saw: how many groups, and the latest ones."""
    latest = "; ".join(
        f"{m.group} {m.old} -> {m.new}: {m.members:,} members served there "
        f"{fmt_ms(m.back_ms)} ms after the first lost it"
        for m in snapshot.latest_moves
    )
    return f"coordinator moves: {snapshot.moves:,} groups; latest: {latest}"


def plain_line(snapshot: Snapshot) -> str:
    """The live view in one line, for output that is not a terminal."""
    rates = sum(v.requests for v in snapshot.apis.values())
    p99 = " ".join(f"{name} {fmt_ms(v.p99_ms)}" for name, v in snapshot.apis.items())
    line = (
        f"{_clock(snapshot)} | {_members(snapshot)} | {rates:,} requests/s | "
        f"p99 ms: {p99 or '-'} | errors: {fmt_errors(snapshot.errors)} | "
        f"signals: {fmt_errors(snapshot.signals)} | "
        f"CPU {snapshot.cpu_s * 100:.0f}% | workers {snapshot.reporting}/{snapshot.workers}"
    )
    if len(snapshot.nodes) >= 2:
        nodes = ", ".join(
            f"{node_name(n.address, n.node_id)} {n.groups:,} groups "
            f"{n.connections:,} connections {n.requests:,}/s"
            for n in snapshot.nodes
        )
        line += f" | nodes: {nodes}"
    if snapshot.moves:
        line += f" | {_moves(snapshot)}"
    return line


class LiveDisplay:
    """`with LiveDisplay() as d: d.update(aggregator.snapshot())`, once a second or so."""

    def __init__(
        self,
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
        plain_every_s: float = PLAIN_EVERY_S,
    ) -> None:
        self.console = console or Console()
        self._clock = clock
        self._every_s = plain_every_s
        self._printed_at: float | None = None
        self._live: Live | None = None

    def __enter__(self) -> LiveDisplay:
        if self.console.is_terminal:
            self._live = Live(
                Text("waiting for the workers' first second"),
                console=self.console,
                auto_refresh=False,
                transient=False,
            )
            self._live.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def update(self, snapshot: Snapshot) -> None:
        if self._live is not None:
            self._live.update(render(snapshot), refresh=True)
            return
        now = self._clock()
        if self._printed_at is None or now - self._printed_at >= self._every_s:
            self._printed_at = now
            self.console.print(plain_line(snapshot), highlight=False, markup=False, soft_wrap=True)


def _fault_head(fault: Mapping[str, Any]) -> str:
    """A fault in a line: when it was due, what it was, and what became of it (on some
    nodes of a cluster, it may have been added and not on others)."""
    name = f"#{fault['id']} " if fault["id"] is not None else ""
    head = f"fault {name}at {fault['at_ms'] / 1000:g} s: {fault['description']}"
    window = fault["window"]
    if window is None:
        return f"{head}; {fault['apply_error'] or 'not added'}"
    injected = f"{fault['injected']:,}" if fault["injected"] is not None else "?"
    state = f" ({fault['state']})" if fault["state"] else ""
    nodes = fault.get("nodes") or []
    where = f" on {len(nodes)} nodes" if len(nodes) > 1 else ""
    head += (
        f"; in force{where} {window['start_ms'] / 1000:.1f}-{window['end_ms'] / 1000:.1f} s, "
        f"injected {injected}{state}"
    )
    for error in (fault["apply_error"], fault["end_error"]):
        if error:
            head += f"; {error}"
    return head


def _fault_nodes(fault: Mapping[str, Any]) -> str | None:
    """Against a cluster, what each node injected of the fault, in a line."""
    nodes = fault.get("nodes") or []
    if len(nodes) < 2:
        return None
    parts = []
    for node in nodes:
        if node["id"] is None:
            parts.append(f"{node['admin']} not added")
            continue
        injected = f"{node['injected']:,}" if node["injected"] is not None else "?"
        parts.append(f"{node['admin']} #{node['id']} injected {injected}")
    return "  per node: " + ", ".join(parts)


def faults_report(faults: list[Mapping[str, Any]]) -> RenderableType:
    """Each scheduled fault, and per API it touched the figures inside its window beside
    those of the run outside every fault's window."""
    parts: list[RenderableType] = []
    for fault in faults:
        parts.append(Text(_fault_head(fault)))
        per_node = _fault_nodes(fault)
        if per_node is not None:
            parts.append(Text(per_node))
        if not fault["effect"]:
            continue
        table = Table(expand=False)
        table.add_column("API")
        table.add_column("seconds")
        for name in ("requests", "requests/s", "p50 ms", "p99 ms"):
            table.add_column(name, justify="right")
        table.add_column("errors")
        table.add_column("signals")
        for api, where in fault["effect"].items():
            for label, figures in where.items():
                table.add_row(
                    api,
                    f"{label} {figures['seconds']:,}",
                    f"{figures['requests']:,}",
                    fmt_rate(figures["requests_per_s"]),
                    fmt_ms(figures["p50_ms"]),
                    fmt_ms(figures["p99_ms"]),
                    fmt_errors(figures["errors"]),
                    fmt_errors(figures["signals"]),
                    end_section=label != "window",
                )
        parts.append(table)
    return Group(*parts)


def nodes_report(nodes: Mapping[str, Mapping[str, Any]]) -> RenderableType:
    """Each coordinator node's share of the run (summary.json's `nodes`)."""
    table = Table(title="coordinator nodes", title_justify="left", expand=False)
    table.add_column("node")
    for name in ("groups", "connections", "requests", "requests/s"):
        table.add_column(name, justify="right")
    table.add_column("errors")
    table.add_column("signals")
    for address, node in nodes.items():
        table.add_row(
            node_name(address, node["node_id"]),
            f"{node['groups']:,}",
            f"{node['connections']:,}",
            f"{node['requests']:,}",
            fmt_rate(node["requests_per_s"]),
            fmt_errors(node["errors"]),
            fmt_errors(node["signals"]),
        )
    return table


def apis_report(title: str, apis: Mapping[str, Mapping[str, Any]]) -> Table:
    """Per API: count, rate, latency, errors and signals (summary.json's `apis`, or a
    phase's)."""
    table = Table(title=title, title_justify="left", expand=False)
    table.add_column("API")
    for name in ("count", "requests/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms"):
        table.add_column(name, justify="right")
    table.add_column("errors")
    table.add_column("signals")
    for name, api in apis.items():
        table.add_row(
            name,
            f"{api['count']:,}",
            fmt_rate(api["requests_per_s"]),
            fmt_ms(api["p50_ms"]),
            fmt_ms(api["p99_ms"]),
            fmt_ms(api["p99_9_ms"]),
            fmt_ms(api["max_ms"]),
            fmt_errors(api["errors"]),
            fmt_errors(api["signals"]),
        )
    return table


# The API whose p99 a phase's line shows: the members' heartbeats, of either protocol.
HEARTBEATS = ("Heartbeat", "ConsumerGroupHeartbeat")


def phase_line(name: str, phase: Mapping[str, Any]) -> str:
    """A phase in a line: its seconds, requests, errors and signals, the heartbeats' p99."""
    r = phase["requests"]
    line = (
        f"{name}: {fmt_seconds(phase['first_s'], phase['last_s'])}, {r['count']:,} requests, "
        f"{r['errors']:,} errors, {r['signals']:,} signals"
    )
    for api in HEARTBEATS:
        if api in phase["apis"]:
            line += f", {api} p99 {fmt_ms(phase['apis'][api]['p99_ms'])} ms"
            break
    return line


def no_steady_phase(summary: Mapping[str, Any]) -> str:
    """Why a run has no steady phase, in a line."""
    config = summary.get("config", {})
    warmup = config.get("warmup_s")
    if warmup is not None:
        return f"no steady phase: --warmup {warmup:g} s reached the end of the scenario"
    m = summary["members"]
    target = m["target"]
    if isinstance(target, int) and m["peak_stable"] >= target:
        return (
            "no steady phase: every member was stable only as the scenario ended; the whole "
            "run's figures include its joins and leaves"
        )
    of = f" of {target:,}" if isinstance(target, int) else ""
    return (
        f"no steady phase: the members were never all stable at once ({m['peak_stable']:,}"
        f"{of} at most); the whole run's figures include its joins and leaves"
    )


def server_line(address: str, node: Mapping[str, Any], steady: bool) -> str:
    """The server's CPU and memory as one admin port reported them."""
    cpu = f"{node['cpu_s']:.1f} s" if node["cpu_s"] is not None else "-"
    cores = f"{node['cores']:.2f}" if node["cores"] is not None else "-"
    over = "in steady state" if steady else "over the whole run"
    failed = f" ({node['failed']:,} failed)" if node["failed"] else ""
    return (
        f"server {address}: CPU {cpu}, {cores} cores {over}, peak RSS "
        f"{fmt_mb(node['peak_rss_bytes'])}, {fmt_mb(node['rss_bytes_at_end'])} at the end; "
        f"{node['samples']:,} samples{failed}"
    )


def print_summary(summary: Mapping[str, Any], console: Console) -> None:
    """The end of a run: per API in the steady phase, then over the whole run, a line per
    other phase, rebalances, expirations, commits, CPU (the generator's, and the server's
    with --admin), the faults (with --faults), the verdict."""
    requests = summary["requests"]
    console.print(
        Text.assemble(
            ("fastcoord loadtest: ", "bold"),
            f"{summary['outcome'] or 'running'} after {summary['elapsed_s']:g} s, ",
            f"{requests['count']:,} requests",
            (f" ({summary['message']})" if summary.get("message") else ""),
        )
    )
    phases = summary.get("phases") or {}
    steady = phases.get("steady")
    if steady is not None:
        seconds = fmt_seconds(steady["first_s"], steady["last_s"])
        console.print(
            apis_report(f"steady state, {seconds} ({steady['seconds']:,} s)", steady["apis"])
        )
    else:
        console.print(no_steady_phase(summary), highlight=False, markup=False)
    whole = (
        f"whole run, {requests['count']:,} requests, {requests['errors']:,} errors, "
        f"{requests['signals']:,} signals"
    )
    console.print(apis_report(whole, summary["apis"]))
    for name in ("joining", "leaving"):
        if phases.get(name) is not None:
            console.print(phase_line(name, phases[name]), highlight=False, markup=False)
    r = summary["rebalances"]
    lines = [
        f"rebalances seen by members: {r['count']:,} ({r['unexpected']:,} unexpected), "
        f"duration p50 {fmt_ms(r['p50_ms'])} ms, p99 {fmt_ms(r['p99_ms'])} ms, "
        f"max {fmt_ms(r['max_ms'])} ms"
    ]
    storm = summary.get("join_storm")
    if storm:
        lines.append(
            f"join storm: groups {storm['groups']:,}, p50 {fmt_ms(storm['p50_ms'])} ms, "
            f"p99 {fmt_ms(storm['p99_ms'])} ms, max {fmt_ms(storm['max_ms'])} ms"
        )
        after = storm["after_delay"]
        # The consumer protocol has no rebalance delay, and its groups settle in heartbeats.
        consumer = summary.get("config", {}).get("group_protocol") == "consumer"
        span = (
            "from the first join answered to the group's last move"
            if consumer
            else "after the rebalance delay (first JoinGroup answered to last SyncGroup answered)"
        )
        if after:
            lines.append(
                f"  {span}: p50 {fmt_ms(after['p50_ms'])} ms, p99 {fmt_ms(after['p99_ms'])} ms, "
                f"max {fmt_ms(after['max_ms'])} ms"
            )
    c, g, m = summary["commits"], summary["generator"], summary["members"]
    cores = f"{g['cores']:.2f}" if g["cores"] is not None else "-"
    per_request = f"{g['cpu_us_per_request']:.1f}" if g["cpu_us_per_request"] is not None else "-"
    final = " ".join(f"{state} {n:,}" for state, n in m["final"].items())
    target = f"target {m['target']:,}, " if isinstance(m["target"], int) else ""
    lines += [
        f"unexpected expirations: {summary['unexpected_expirations']:,}",
        f"commits: {c['count']:,} of {c['offsets']:,} offsets, {c['errors']:,} errors, "
        f"{c['signals']:,} signals",
        f"generator: workers {g['workers']}, CPU {g['cpu_s']:.1f} s, {cores} cores, "
        f"{per_request} us CPU per request",
        f"members: {target}final {final}, peak stable {m['peak_stable']:,}",
    ]
    moves = summary.get("coordinator_moves") or []
    if moves:
        backs = sorted(move["back_ms"] for move in moves)
        lines.append(
            f"coordinator moves seen by members: {len(moves):,} groups, each served at its "
            f"new node {fmt_ms(backs[0])} to {fmt_ms(backs[-1])} ms after its first member "
            "lost the old one"
        )
        for move in moves[:MOVES_LISTED]:
            old = node_name(move["from"], move["from_node"])
            new = node_name(move["to"], move["to_node"])
            lines.append(
                f"  {move['group']}: {old} -> {new} at {move['lost']}, {move['members']:,} "
                f"members served there {fmt_ms(move['back_ms'])} ms after"
            )
        if len(moves) > MOVES_LISTED:
            lines.append(f"  ... {len(moves) - MOVES_LISTED:,} more in summary.json")
    for address, node in (summary.get("server") or {}).items():
        lines.append(server_line(address, node, steady is not None))
    for line in lines:
        console.print(line, highlight=False, markup=False)
    nodes = summary.get("nodes") or {}
    if len(nodes) >= 2:
        console.print(nodes_report(nodes))
    if summary.get("faults"):
        console.print(faults_report(summary["faults"]))
    verdict = summary["verdict"]
    if verdict["passed"]:
        console.print(Text("verdict: passed", style="bold green"))
    else:
        console.print(Text("verdict: failed", style="bold red"))
        for failure in verdict["failures"]:
            console.print(f"  {failure}", highlight=False, markup=False)
