"""summary.json: a run's figures in one document, and its verdict against the thresholds.

The aggregator (aggregate.py) keeps the run's totals in `Totals`; `summarize` turns them
into the document that is rewritten at every flush (`complete` false) and once more at the
end. docs/loadtest.md lists its keys.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastcoord.loadtest.histogram import Histogram
from fastcoord.loadtest.results import STATES
from fastcoord.protocol.api_keys import ApiKey, api_name
from fastcoord.protocol.errors import ErrorCode, error_name

SCHEMA_VERSION = 1

# The protocol's signals to a member (join again with this id; rejoin; commit again with the
# member epoch the heartbeat just brought), not failures: listed with the errors but left
# out of the error rate.
SIGNALS = frozenset(
    {
        ErrorCode.MEMBER_ID_REQUIRED,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.STALE_MEMBER_EPOCH,
    }
)
# Requests that wait for the rest of the group by design: no latency limit applies to them.
WAITING = frozenset({ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP})
PERCENTILES = (("p50_ms", 50.0), ("p99_ms", 99.0), ("p99_9_ms", 99.9))


@dataclass(frozen=True)
class Thresholds:
    """Limits a run must stay within to pass; None: no limit."""

    max_error_rate: float | None = None  # failures per answered request, 0..1
    max_p99_ms: float | None = None  # every API's p99 but JoinGroup's and SyncGroup's


@dataclass
class NodeTotals:
    """One coordinator node's share of a run: what its members' connections to it had
    answered, the most of those connections open at once, and the groups it coordinates."""

    requests: defaultdict[int, int] = field(default_factory=lambda: defaultdict(int))
    errors: defaultdict[int, defaultdict[int, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    peak_connections: int = 0  # in one written second, over the workers that reported it
    groups: int = 0

    def count(self) -> int:
        return sum(self.requests.values())

    def failures(self) -> int:
        return sum(
            n for codes in self.errors.values() for code, n in codes.items() if code not in SIGNALS
        )


@dataclass
class Totals:
    """Everything a run measured, added up as the workers' seconds arrive."""

    latency: defaultdict[int, Histogram] = field(default_factory=lambda: defaultdict(Histogram))
    errors: defaultdict[int, defaultdict[int, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    errors_dropped: int = 0
    rebalances: Histogram = field(default_factory=Histogram)  # durations
    unexpected_rebalances: int = 0
    unexpected_expirations: int = 0
    commits: int = 0
    offsets: int = 0
    cpu_s: float = 0.0
    # group -> worker -> (members, last_join_sent_ns, last_sync_answered_ns,
    # first_join_answered_ns)
    storms: defaultdict[str, dict[int, tuple[int, int, int, int]]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    # worker -> (elapsed_s, states) of its newest second
    states: dict[int, tuple[int, dict[str, int]]] = field(default_factory=dict)
    peak_stable: int = 0
    started_ms: int | None = None  # wall clock of the run's start, from the workers' takes
    ended_ms: int | None = None  # the newest take
    late_seconds: int = 0  # worker seconds that came after their second was written
    nodes: dict[str, NodeTotals] = field(default_factory=dict)  # HOST:PORT -> its share
    node_ids: dict[str, int] = field(default_factory=dict)  # HOST:PORT -> node id
    group_nodes: dict[str, str] = field(default_factory=dict)  # group -> HOST:PORT

    def node(self, address: str) -> NodeTotals:
        totals = self.nodes.get(address)
        if totals is None:
            totals = self.nodes[address] = NodeTotals()
        return totals

    def coordinated(self, group: str, address: str) -> None:
        """`group` is `address`'s, as a worker's FindCoordinator last said."""
        old = self.group_nodes.get(group)
        if old == address:
            return
        if old is not None:
            self.nodes[old].groups -= 1
        self.group_nodes[group] = address
        self.node(address).groups += 1

    def node_order(self) -> list[str]:
        """The nodes by id (those without one last), then address."""
        ids = self.node_ids
        return sorted(self.nodes, key=lambda a: (a not in ids, ids.get(a, 0), a))

    def requests(self) -> int:
        return sum(h.count for h in self.latency.values())

    def failures(self, api_key: int | None = None) -> int:
        keys = self.errors.keys() if api_key is None else [api_key]
        return sum(
            n for k in keys for code, n in self.errors.get(k, {}).items() if code not in SIGNALS
        )

    def storm_durations_ms(self) -> dict[str, float]:
        """Each group's join storm: max(last answered) - max(last sent) over its workers."""
        return {
            group: max(0, max(s[2] for s in seen.values()) - max(s[1] for s in seen.values())) / 1e6
            for group, seen in self.storms.items()
        }

    def storm_after_delay_ms(self) -> dict[str, float]:
        """Each group's join storm after its rebalance delay: max(last SyncGroup answered) -
        min(first JoinGroup answered with a generation), over the workers that saw one. The
        coordinator holds every JoinGroup of a new group for group.initial.rebalance.delay.ms
        after the last; this is what the rebalance itself costs over the wire."""
        out = {}
        for group, seen in self.storms.items():
            firsts = [s[3] for s in seen.values() if s[3]]
            if firsts:
                out[group] = max(0, max(s[2] for s in seen.values()) - min(firsts)) / 1e6
        return out

    def final_states(self) -> dict[str, int]:
        final = dict.fromkeys(STATES, 0)
        for _, states in self.states.values():
            for state, n in states.items():
                final[state] = final.get(state, 0) + n
        return final


def ms(value: float) -> float | None:
    """A figure for JSON: rounded to the microsecond, None when there is none."""
    return None if math.isnan(value) else round(value, 3)


def rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds")


def percentiles(h: Histogram) -> dict[str, float | None]:
    figures = {name: ms(h.percentile_ms(q)) for name, q in PERCENTILES}
    figures["max_ms"] = ms(h.max_ms) if h.count else None
    return figures


def exact_percentile(values: list[float], q: float) -> float:
    """The q-th value of `values` (the same rank rule as Histogram.percentile_ms)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def verdict(totals: Totals, thresholds: Thresholds) -> dict[str, Any]:
    """Passed, or the reasons not, as sentences."""
    failures: list[str] = []
    requests = totals.requests()
    if requests == 0:
        failures.append("No request was answered.")
    if thresholds.max_error_rate is not None and requests:
        failed = totals.failures()
        if failed / requests > thresholds.max_error_rate:
            worst = sorted(
                (
                    (n, error_name(code))
                    for codes in totals.errors.values()
                    for code, n in codes.items()
                    if code not in SIGNALS
                ),
                reverse=True,
            )[:3]
            failures.append(
                f"The error rate {failed / requests:.3%} is above the limit "
                f"{thresholds.max_error_rate:.3%}: {failed:,} errors in {requests:,} requests "
                f"({', '.join(f'{name} {n:,}' for n, name in worst)})."
            )
    if thresholds.max_p99_ms is not None:
        for api_key, h in sorted(totals.latency.items()):
            if api_key in WAITING or h.count == 0:
                continue
            p99 = h.percentile_ms(99)
            if p99 > thresholds.max_p99_ms:
                failures.append(
                    f"{api_name(api_key)} p99 {p99:.3f} ms is above the limit "
                    f"{thresholds.max_p99_ms:g} ms."
                )
    return {"passed": not failures, "failures": failures}


def nodes_section(totals: Totals, elapsed_s: float) -> dict[str, Any]:
    """summary.json's `nodes`: each coordinator node's share, by HOST:PORT, in id order."""
    section = {}
    for address in totals.node_order():
        n = totals.nodes[address]
        count = n.count()
        errors: defaultdict[int, int] = defaultdict(int)
        for codes in n.errors.values():
            for code, c in codes.items():
                errors[code] += c
        section[address] = {
            "node_id": totals.node_ids.get(address),
            "groups": n.groups,
            "connections": n.peak_connections,
            "requests": count,
            "requests_per_s": count / elapsed_s if elapsed_s else None,
            "errors": {error_name(c): k for c, k in sorted(errors.items())},
            "failures": n.failures(),
            "error_rate": rate(n.failures(), count),
            "apis": {
                api_name(api_key): {
                    "count": n.requests.get(api_key, 0),
                    "errors": {
                        error_name(c): k for c, k in sorted(n.errors.get(api_key, {}).items())
                    },
                }
                for api_key in sorted(n.requests.keys() | n.errors.keys())
            },
        }
    return section


def summarize(
    totals: Totals,
    *,
    config: dict[str, object],
    workers: int,
    thresholds: Thresholds,
    complete: bool,
    outcome: str | None,
    message: str | None,
    now_ms: int,
    tables: dict[str, int],
) -> dict[str, Any]:
    started = totals.started_ms if totals.started_ms is not None else now_ms
    ended = totals.ended_ms if totals.ended_ms is not None else now_ms
    elapsed = max(0.0, (ended - started) / 1000)
    requests = totals.requests()
    apis = {}
    for api_key in sorted(totals.latency.keys() | totals.errors.keys()):
        h = totals.latency.get(api_key, Histogram())
        codes: Mapping[int, int] = totals.errors.get(api_key, {})
        apis[api_name(api_key)] = {
            "api_key": api_key,
            "count": h.count,
            "requests_per_s": h.count / elapsed if elapsed else None,
            "errors": {error_name(c): n for c, n in sorted(codes.items())},
            "error_rate": rate(totals.failures(api_key), h.count),
            **percentiles(h),
        }
    stable = sorted(totals.storm_durations_ms().values())
    after_delay = sorted(totals.storm_after_delay_ms().values())
    members: dict[str, Any] = {
        "target": config.get("members"),
        "final": totals.final_states(),
        "peak_stable": totals.peak_stable,
    }
    return {
        "schema_version": SCHEMA_VERSION,
        "complete": complete,
        "outcome": outcome,
        "message": message,
        "config": config,
        "started": iso(started),
        "ended": iso(ended),
        "elapsed_s": round(elapsed, 3),
        "requests": {
            "count": requests,
            "requests_per_s": requests / elapsed if elapsed else None,
            "errors": sum(n for codes in totals.errors.values() for n in codes.values()),
            "failures": totals.failures(),
            "error_rate": rate(totals.failures(), requests),
        },
        "apis": apis,
        "rebalances": {
            "count": totals.rebalances.count,
            "unexpected": totals.unexpected_rebalances,
            **{k: v for k, v in percentiles(totals.rebalances).items() if k != "p99_9_ms"},
        },
        "join_storm": {
            "groups": len(stable),
            "p50_ms": ms(exact_percentile(stable, 50)),
            "p99_ms": ms(exact_percentile(stable, 99)),
            "max_ms": ms(stable[-1]),
            "after_delay": {
                "p50_ms": ms(exact_percentile(after_delay, 50)),
                "p99_ms": ms(exact_percentile(after_delay, 99)),
                "max_ms": ms(after_delay[-1]),
            }
            if after_delay
            else None,
        }
        if stable
        else None,
        "unexpected_expirations": totals.unexpected_expirations,
        "commits": {
            "count": totals.commits,
            "offsets": totals.offsets,
            "errors": sum(totals.errors.get(ApiKey.OFFSET_COMMIT, {}).values()),
        },
        "generator": {
            "workers": workers,
            "cpu_s": round(totals.cpu_s, 3),
            "cores": totals.cpu_s / elapsed if elapsed else None,
            "cpu_us_per_request": totals.cpu_s * 1e6 / requests if requests else None,
        },
        "members": members,
        "nodes": nodes_section(totals, elapsed),
        "tables": {**tables, "errors_dropped": totals.errors_dropped},
        "late_seconds": totals.late_seconds,
        # With --faults, loadtest/faults.py's section, set once the run is over (reading
        # the faults' counts takes the server's admin port, which the aggregator has not).
        "faults": None,
        "thresholds": {
            "max_error_rate": thresholds.max_error_rate,
            "max_p99_ms": thresholds.max_p99_ms,
        },
        "verdict": verdict(totals, thresholds),
    }
