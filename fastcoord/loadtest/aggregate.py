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
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fastcoord.loadtest import results
from fastcoord.loadtest.histogram import Histogram
from fastcoord.loadtest.results import STATES, Results
from fastcoord.loadtest.stats import Second
from fastcoord.loadtest.summary import PERCENTILES, Thresholds, Totals, summarize
from fastcoord.protocol.api_keys import api_name
from fastcoord.protocol.errors import error_name

__all__ = ["Aggregator", "ApiView", "NodeView", "Snapshot", "Thresholds"]

# How far the newest second may run ahead before an incomplete one is written without the
# workers that have not reported it.
WAIT_S = 3
# Rows held for the next flush past which they are written at once: memory stays bounded
# however rarely the caller flushes.
MAX_HELD_ROWS = 200_000


@dataclass(frozen=True)
class ApiView:
    """One API in one merged second."""

    requests: int
    errors: dict[str, int]  # error name -> count
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
    errors: dict[str, int]  # error name -> count


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
    errors: dict[str, int]
    failures: int
    rebalances: int
    unexpected_rebalances: int
    unexpected_expirations: int
    commits: int
    nodes: list[NodeView] = field(default_factory=list)  # in id order


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
    "members" and "duration_s", when there, are the target and the planned length)."""

    def __init__(
        self,
        out: Path | None,
        config: dict[str, object],
        workers: int,
        thresholds: Thresholds,
    ) -> None:
        self.config = config
        self.workers = workers
        self.thresholds = thresholds
        self.results = Results(out) if out is not None else None
        self.totals = Totals()
        self._pending: dict[int, list[Second]] = {}
        self._written: set[int] = set()
        self._newest = 0
        self._last: _Merged | None = None
        self._rows: dict[str, list[Any]] = {name: [] for name in results.SCHEMAS}
        self._created_ms = time.time_ns() // 1_000_000

    def add(self, second: Second) -> None:
        """One worker's second: counted at once, merged when its second is due."""
        self._count(second)
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
        t.unexpected_expirations += s.unexpected_expirations
        t.commits += s.commits
        t.offsets += s.offsets
        t.cpu_s += s.cpu_s
        for group, members, sent_ns, answered_ns, generation_ns in s.storms:
            t.storms[group][s.worker] = (members, sent_ns, answered_ns, generation_ns)
        if s.worker not in t.states or t.states[s.worker][0] <= s.elapsed_s:
            t.states[s.worker] = (s.elapsed_s, s.states)
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
        if self.results is not None:
            self._rows["errors"] += s.error_rows
            self._rows["rebalances"] += s.rebalances

    def _write_second(self, elapsed_s: int) -> None:
        m = _merge(elapsed_s, self._pending.pop(elapsed_s))
        self._written.add(elapsed_s)
        self.totals.peak_stable = max(self.totals.peak_stable, m.states.get("stable", 0))
        for address, merged in m.nodes.items():
            node = self.totals.node(address)
            node.peak_connections = max(node.peak_connections, merged.connections)
        if self._last is None or elapsed_s > self._last.elapsed_s:
            self._last = m
        if self.results is None:
            return
        for api_key, h in sorted(m.latency.items()):
            buckets, counts = h.nonzero()
            self._rows["latency"].append(
                {
                    "time": m.wall_ms,
                    "elapsed_s": elapsed_s,
                    "api": api_name(api_key),
                    "count": h.count,
                    "errors": sum(m.errors.get(api_key, {}).values()),
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

    def snapshot(self) -> Snapshot:
        m = self._last or _Merged(0, self._created_ms, 0)
        t = self.totals
        errors: defaultdict[str, int] = defaultdict(int)
        for codes in t.errors.values():
            for code, n in codes.items():
                errors[error_name(code)] += n
        apis = {}
        for api_key in sorted(m.latency.keys() | m.errors.keys()):
            h = m.latency.get(api_key, Histogram())
            p50, p99, p999 = (h.percentile_ms(q) for _, q in PERCENTILES)
            apis[api_name(api_key)] = ApiView(
                h.count,
                {error_name(c): n for c, n in sorted(m.errors.get(api_key, {}).items())},
                p50,
                p99,
                p999,
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
                    {error_name(c): n for c, n in sorted(merged.errors.items())},
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
            errors=dict(sorted(errors.items())),
            failures=t.failures(),
            rebalances=t.rebalances.count,
            unexpected_rebalances=t.unexpected_rebalances,
            unexpected_expirations=t.unexpected_expirations,
            commits=t.commits,
            nodes=nodes,
        )

    def summary(
        self, complete: bool = False, outcome: str | None = None, message: str | None = None
    ) -> dict[str, Any]:
        return summarize(
            self.totals,
            config=self.config,
            workers=self.workers,
            thresholds=self.thresholds,
            complete=complete,
            outcome=outcome,
            message=message,
            now_ms=time.time_ns() // 1_000_000,
            tables=dict(self.results.rows) if self.results else {},
        )

    def flush(self) -> None:
        """Write the merged seconds and event rows gathered since the last flush as one part
        file per table, and rewrite summary.json (`complete` false)."""
        self._flush_tables()
        if self.results is not None:
            self.results.write_summary(self.summary())

    def finish(self, outcome: str, message: str | None) -> dict[str, Any]:
        """Merge and write every second still waiting (whoever reported it), and the final
        summary (`complete` true), which is returned."""
        for elapsed_s in sorted(self._pending):
            self._write_second(elapsed_s)
        self._flush_tables()
        summary = self.summary(complete=True, outcome=outcome, message=message)
        if self.results is not None:
            self.results.write_summary(summary)
        return summary

    def _flush_tables(self) -> None:
        rows, self._rows = self._rows, {name: [] for name in results.SCHEMAS}
        if self.results is None:
            return
        self.results.append("latency", results.latency_rows(rows["latency"]))
        self.results.append("states", results.states_rows(rows["states"]))
        self.results.append("errors", results.error_table(rows["errors"]))
        self.results.append("rebalances", results.rebalance_table(rows["rebalances"]))
