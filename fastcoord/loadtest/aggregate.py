"""The parent's side of a load test: the workers' seconds merged into one run.

Workers report each second when they reach it, so the same second arrives from different
workers at different times, and a worker that stalls or dies may never send it. A second's
per-second rows (latency, states) are merged over the workers and written once, when every
worker has reported it or when the newest second is 3 s past it, whichever comes first; what
arrives later still counts in the run's totals (summary.json) but not in those rows. Event
rows (errors, rebalances) need no merging and are written as they come.

Against a cluster, each coordinator node's share (its groups, its members' connections,
what they had answered) is kept beside the whole: workers send each node's counts every
second, and which node coordinates which group only when that changes, so the groups are
counted here, once per group however many workers hold its members.

Every worker's seconds are also kept per second (seconds.py, compacted once merged) for the
run's phases (phases.py), which the merged seconds' stable members decide, and for the
faults' windows. Errors and the protocol's signals (results.SIGNALS) are told apart here,
once a second, never on the workers' hot path.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fastcoord.loadtest import phases, results
from fastcoord.loadtest.histogram import Histogram
from fastcoord.loadtest.results import STATES, Results
from fastcoord.loadtest.sampler import Sample, ServerFigures
from fastcoord.loadtest.seconds import PerSecond
from fastcoord.loadtest.stats import Second
from fastcoord.loadtest.summary import (
    PERCENTILES,
    Thresholds,
    Totals,
    counted,
    split,
    summarize,
)
from fastcoord.protocol.api_keys import api_name

__all__ = ["Aggregator", "ApiView", "NodeView", "Snapshot", "Thresholds"]

# How far the newest second may run ahead before an incomplete one is written without the
# workers that have not reported it.
WAIT_S = 3
MOVES_SHOWN = 3  # the coordinator moves a snapshot names


def node_name(address: str, node_id: int | None) -> str:
    return f"{node_id}@{address}" if node_id is not None else address


# Rows held for the next flush past which they are written at once: memory stays bounded
# however rarely the caller flushes.
MAX_HELD_ROWS = 200_000


@dataclass(frozen=True)
class ApiView:
    """One API in one merged second."""

    requests: int
    errors: dict[str, int]  # error name -> count, signals apart
    signals: dict[str, int]  # signal name -> count
    p50_ms: float
    p99_ms: float
    p99_9_ms: float


@dataclass(frozen=True)
class NodeView:
    """One coordinator node in the newest merged second (groups: the run's so far)."""

    address: str  # HOST:PORT
    node_id: int | None
    groups: int
    connections: int
    requests: int
    errors: dict[str, int]  # error name -> count, signals apart
    signals: dict[str, int]


@dataclass(frozen=True)
class MoveView:
    """A group's coordinator move as its members saw it, so far."""

    group: str
    old: str  # the node it left, as display.node_name names it
    new: str
    members: int  # served at the new node so far
    back_ms: int  # from the first of them losing the old node to the last served at the new


@dataclass(frozen=True)
class Snapshot:
    """What the live display shows: the newest merged second, and the run so far."""

    elapsed_s: int  # of the newest merged second (0: none yet)
    duration_s: float | None  # the run's planned length, from the config
    workers: int
    reporting: int  # workers in the newest merged second
    apis: dict[str, ApiView]  # in the newest merged second
    states: dict[str, int]  # members by state in the newest merged second
    target_members: int | None
    connections: int
    cpu_s: float  # the workers' CPU during the newest merged second
    requests: int  # the run's totals from here on
    errors: dict[str, int]  # by name, signals apart
    signals: dict[str, int]
    rebalances: int
    unexpected_rebalances: int
    unexpected_expirations: int
    commits: int
    nodes: list[NodeView] = field(default_factory=list)  # in id order
    phase: str | None = None  # of the newest merged second: joining, steady or leaving
    moves: int = 0  # groups whose members found their coordinator on another node
    latest_moves: list[MoveView] = field(default_factory=list)  # the last MOVES_SHOWN


@dataclass
class _MergedNode:
    requests: int = 0
    errors: defaultdict[int, int] = field(default_factory=lambda: defaultdict(int))
    connections: int = 0


@dataclass
class _Merged:
    """One second merged over the workers that reported it."""

    elapsed_s: int
    wall_ms: int
    workers: int
    latency: dict[int, Histogram] = field(default_factory=dict)
    errors: defaultdict[int, defaultdict[int, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    states: dict[str, int] = field(default_factory=dict)
    connections: int = 0
    cpu_s: float = 0.0
    nodes: dict[str, _MergedNode] = field(default_factory=dict)


def _merge(elapsed_s: int, seconds: list[Second]) -> _Merged:
    merged = _Merged(elapsed_s, min(s.wall_ms for s in seconds), len({s.worker for s in seconds}))
    for s in seconds:
        for api in s.apis:
            h = api.histogram()
            if api.api_key in merged.latency:
                merged.latency[api.api_key].merge(h)
            else:
                merged.latency[api.api_key] = h
            for code, n in api.errors.items():
                merged.errors[api.api_key][code] += n
        for state, n in s.states.items():
            merged.states[state] = merged.states.get(state, 0) + n
        merged.connections += s.connections
        merged.cpu_s += s.cpu_s
        for share in s.nodes:
            node = merged.nodes.get(share.address)
            if node is None:
                node = merged.nodes[share.address] = _MergedNode()
            node.requests += sum(share.requests.values())
            for codes in share.errors.values():
                for code, count in codes.items():
                    node.errors[code] += count
            node.connections += share.connections
    return merged


class Aggregator:
    """The run's measurements: merged seconds to Parquet under `out` (None: keep nothing),
    totals to summary.json. `config` is the run's settings as given (kept in the summary;
    "members", "duration_s" and "warmup_s", when there, are the target, the planned length
    and --warmup)."""

    def __init__(
        self,
        out: Path | None,
        config: dict[str, object],
        workers: int,
        thresholds: Thresholds,
        *,
        worker: int | None = None,
        tables: Collection[str] = tuple(results.SCHEMAS),
    ) -> None:
        self.config = config
        self.workers = workers
        self.thresholds = thresholds
        # A distributed run's worker writes its own part files (results.Results), and its
        # driver only the tables no worker writes (`tables`: the server's).
        self.results = Results(out, worker) if out is not None else None
        self.tables = frozenset(tables)
        self.rows_elsewhere: Counter[str] = Counter()  # rows the workers wrote themselves
        self.sections: dict[str, Any] = {}  # summary.json's sections the caller keeps
        self.totals = Totals()
        self.per_second = PerSecond()  # the phases' and the faults' figures
        self.server: ServerFigures | None = None  # with --admin
        self.stop_s: float | None = None  # when the parent stopped the scenario, run seconds
        self._stable: dict[int, int] = {}  # merged second -> stable members
        self._pending: dict[int, list[Second]] = {}
        self._written: set[int] = set()
        self._newest = 0
        self._last: _Merged | None = None
        self._rows: dict[str, list[Any]] = {name: [] for name in results.SCHEMAS}
        self._row_workers: dict[str, list[int]] = {"errors": [], "rebalances": []}
        self._created_ms = time.time_ns() // 1_000_000
        self._start_known = False

    def start(self, started_ms: int) -> None:
        """The run's start, wall clock, as the workers count their seconds from it."""
        self.totals.started_ms = started_ms
        self._start_known = True

    def add(self, second: Second) -> None:
        """One worker's second: counted at once, merged when its second is due."""
        self._count(second)
        self.per_second.add(second)
        if second.elapsed_s in self._written:
            self.totals.late_seconds += 1
        else:
            self._pending.setdefault(second.elapsed_s, []).append(second)
        self._newest = max(self._newest, second.elapsed_s)
        for elapsed_s in sorted(self._pending):
            seen = {s.worker for s in self._pending[elapsed_s]}
            if len(seen) >= self.workers or self._newest - elapsed_s >= WAIT_S:
                self._write_second(elapsed_s)
        if sum(map(len, self._rows.values())) > MAX_HELD_ROWS:
            self._flush_tables()

    def _count(self, s: Second) -> None:
        t = self.totals
        for api in s.apis:
            t.latency[api.api_key].merge(api.histogram())
            for code, n in api.errors.items():
                t.errors[api.api_key][code] += n
        t.errors_dropped += s.errors_dropped
        if s.rebalances:  # a join storm brings one row per member at once
            t.rebalances.add_ns(np.array([r[5] - r[4] for r in s.rebalances]) * 1_000_000)
            t.unexpected_rebalances += sum(not r[7] for r in s.rebalances)
        if s.rebalanced is not None:  # a slim second's
            t.rebalances.merge(s.rebalanced.histogram())
            t.unexpected_rebalances += s.rebalanced.unexpected
        t.unexpected_expirations += s.unexpected_expirations
        t.commits += s.commits
        t.offsets += s.offsets
        t.cpu_s += s.cpu_s
        for group, members, sent_ns, answered_ns, generation_ns in s.storms:
            t.storms[group][s.worker] = (members, sent_ns, answered_ns, generation_ns)
        if s.worker not in t.states or t.states[s.worker][0] <= s.elapsed_s:
            t.states[s.worker] = (s.elapsed_s, s.states)
        if not self._start_known:
            # A second's take ends it, so its start is elapsed_s seconds before; the last,
            # partial, second of a worker would put it up to a second too early.
            start = s.wall_ms - s.elapsed_s * 1000
            t.started_ms = start if t.started_ms is None else min(t.started_ms, start)
        t.ended_ms = s.wall_ms if t.ended_ms is None else max(t.ended_ms, s.wall_ms)
        for share in s.nodes:
            node = t.node(share.address)
            for api_key, count in share.requests.items():
                node.requests[api_key] += count
            for api_key, codes in share.errors.items():
                for code, count in codes.items():
                    node.errors[api_key][code] += count
        for address, node_id in s.node_ids.items():
            t.node_ids[address] = node_id
            t.node(address)  # a node the cluster lists, though nothing went to it yet
        for group, address in s.groups.items():
            t.coordinated(group, address)
        for move in s.moves:
            t.moved(*move)
        if self.results is not None:
            for name, rows in (("errors", s.error_rows), ("rebalances", s.rebalances)):
                if rows and name in self.tables:
                    self._rows[name] += rows
                    self._row_workers[name] += [s.worker] * len(rows)

    def _write_second(self, elapsed_s: int) -> None:
        m = _merge(elapsed_s, self._pending.pop(elapsed_s))
        self._written.add(elapsed_s)
        self.per_second.compact(elapsed_s)
        self._stable[elapsed_s] = m.states.get("stable", 0)
        self.totals.peak_stable = max(self.totals.peak_stable, m.states.get("stable", 0))
        for address, merged in m.nodes.items():
            node = self.totals.node(address)
            node.peak_connections = max(node.peak_connections, merged.connections)
        if self._last is None or elapsed_s > self._last.elapsed_s:
            self._last = m
        if self.results is None or "latency" not in self.tables:
            return
        for api_key, h in sorted(m.latency.items()):
            buckets, counts = h.nonzero()
            errors, signals = counted(m.errors.get(api_key, {}))
            self._rows["latency"].append(
                {
                    "time": m.wall_ms,
                    "elapsed_s": elapsed_s,
                    "api": api_name(api_key),
                    "count": h.count,
                    "errors": errors,
                    "signals": signals,
                    "buckets": buckets,
                    "counts": counts,
                    "sum_us": h.sum_us,
                    "max_us": -(-h.max_ns // 1000),  # rounded up: never below the true max
                }
            )
        self._rows["states"].append(
            {
                "time": m.wall_ms,
                "elapsed_s": elapsed_s,
                **{state: m.states.get(state, 0) for state in STATES},
                "connections": m.connections,
                "requests": sum(h.count for h in m.latency.values()),
                "cpu_s": m.cpu_s,
            }
        )

    def watch_server(self, addresses: Sequence[str]) -> None:
        """The server's admin ports are sampled (--admin): summary.json has its section."""
        self.server = ServerFigures(addresses)

    def add_server(self, samples: Sequence[Sample], failed: dict[str, int]) -> None:
        """Samples of the server (sampler.py) and the failed ones' count by node."""
        if self.server is None:
            self.watch_server(list(failed))
        assert self.server is not None
        self.server.add(samples, failed)
        if self.results is not None and "server" in self.tables:
            self._rows["server"] += samples

    def stopped(self, stop_s: float) -> None:
        """The parent stopped the workers `stop_s` seconds into the run: the scenario ends
        there rather than at its planned duration (the first stop counts)."""
        if self.stop_s is None:
            self.stop_s = stop_s

    def phases(self) -> phases.Phases:
        """The run's phases as far as its merged seconds tell."""
        duration = self.config.get("duration_s")
        stop_s = self.stop_s
        if isinstance(duration, int | float):
            stop_s = float(duration) if stop_s is None else min(stop_s, float(duration))
        # While the scenario is still going, no second is the leaving phase's yet.
        last_s = max(self._written, default=0)
        if stop_s is not None and math.floor(stop_s) + 1 > last_s and self.stop_s is None:
            stop_s = None
        target = self.config.get("members")
        warmup = self.config.get("warmup_s")
        return phases.find(
            self._stable,
            last_s,
            target if isinstance(target, int) else None,
            float(warmup) if isinstance(warmup, int | float) else None,
            stop_s,
        )

    def snapshot(self) -> Snapshot:
        m = self._last or _Merged(0, self._created_ms, 0)
        t = self.totals
        errors, signals = split(t.codes())
        apis = {}
        for api_key in sorted(m.latency.keys() | m.errors.keys()):
            h = m.latency.get(api_key, Histogram())
            p50, p99, p999 = (h.percentile_ms(q) for _, q in PERCENTILES)
            apis[api_name(api_key)] = ApiView(
                h.count, *split(m.errors.get(api_key, {})), p50, p99, p999
            )
        duration = self.config.get("duration_s")
        target = self.config.get("members")
        nodes = []
        for address in t.node_order():
            merged = m.nodes.get(address, _MergedNode())
            nodes.append(
                NodeView(
                    address,
                    t.node_ids.get(address),
                    t.nodes[address].groups,
                    merged.connections,
                    merged.requests,
                    *split(merged.errors),
                )
            )
        return Snapshot(
            elapsed_s=m.elapsed_s,
            duration_s=float(duration) if isinstance(duration, int | float) else None,
            workers=self.workers,
            reporting=m.workers,
            apis=apis,
            states={**dict.fromkeys(STATES, 0), **m.states},
            target_members=target if isinstance(target, int) else None,
            connections=m.connections,
            cpu_s=m.cpu_s,
            requests=t.requests(),
            errors=errors,
            signals=signals,
            rebalances=t.rebalances.count,
            unexpected_rebalances=t.unexpected_rebalances,
            unexpected_expirations=t.unexpected_expirations,
            commits=t.commits,
            nodes=nodes,
            phase=self.phases().of(m.elapsed_s),
            moves=len(t.moves),
            latest_moves=[
                MoveView(
                    group,
                    node_name(old, t.node_ids.get(old)),
                    node_name(new, t.node_ids.get(new)),
                    members,
                    back - lost,
                )
                for (group, old, new), (members, lost, back) in list(t.moves.items())[-MOVES_SHOWN:]
            ],
        )

    def summary(
        self, complete: bool = False, outcome: str = "running", message: str | None = None
    ) -> dict[str, Any]:
        found = self.phases()
        summary = summarize(
            self.totals,
            config=self.config,
            workers=self.workers,
            thresholds=self.thresholds,
            complete=complete,
            outcome=outcome,
            message=message,
            now_ms=time.time_ns() // 1_000_000,
            tables=dict(Counter(self.results.rows if self.results else {}) + self.rows_elsewhere),
            per_second=self.per_second,
            phases=found,
            server=self.server.section(found.steady) if self.server is not None else None,
        )
        return {**summary, **self.sections}

    def flush(self) -> None:
        """Write the merged seconds and event rows gathered since the last flush as one part
        file per table, and rewrite summary.json (`complete` false, outcome "running")."""
        self._flush_tables()
        if self.results is not None:
            self.results.write_summary(self.summary())

    def finish(self, outcome: str, message: str | None) -> dict[str, Any]:
        """Merge and write every second still waiting (whoever reported it), and the final
        summary, which is returned: `complete` when the run ran its planned course (outcome
        "completed")."""
        for elapsed_s in sorted(self._pending):
            self._write_second(elapsed_s)
        self._flush_tables()
        summary = self.summary(outcome == "completed", outcome, message)
        if self.results is not None:
            self.results.write_summary(summary)
        return summary

    def _flush_tables(self) -> None:
        rows, self._rows = self._rows, {name: [] for name in results.SCHEMAS}
        workers, self._row_workers = self._row_workers, {"errors": [], "rebalances": []}
        if self.results is None:
            return
        self.results.append("latency", results.latency_rows(rows["latency"]))
        self.results.append("states", results.states_rows(rows["states"]))
        self.results.append("errors", results.error_table(rows["errors"], workers["errors"]))
        self.results.append(
            "rebalances", results.rebalance_table(rows["rebalances"], workers["rebalances"])
        )
        self.results.append("server", results.server_table(rows["server"]))
