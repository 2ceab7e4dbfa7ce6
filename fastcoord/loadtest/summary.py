"""summary.json: a run's figures in one document, and its verdict against the thresholds.

The aggregator (aggregate.py) keeps the run's totals in `Totals` and its seconds in
`PerSecond`; `summarize` turns them into the document that is rewritten at every flush
(`complete` false) and once more at the end: the whole run's figures, each phase's
(phases.py), the server's CPU and memory when sampled. Errors and the protocol's signals
are counted apart everywhere. The verdict is `judge`, a plain function of figures, so that
a report can apply the very same rule to a window of its own. docs/loadtest.md lists the
keys.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastcoord.loadtest import results
from fastcoord.loadtest.histogram import Histogram
from fastcoord.loadtest.phases import Phases
from fastcoord.loadtest.results import STATES
from fastcoord.loadtest.seconds import PerSecond
from fastcoord.protocol.api_keys import ApiKey, api_name
from fastcoord.protocol.errors import error_name

SCHEMA_VERSION = 2

# MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS, STALE_MEMBER_EPOCH: defined with the tables,
# whose errors rows carry the same split.
SIGNALS = results.SIGNALS

# Requests that wait for the rest of the group by design: no latency limit applies to them.
WAITING = frozenset({ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP})
WAITING_NAMES = frozenset(api_name(k) for k in WAITING)
PERCENTILES = (("p50_ms", 50.0), ("p99_ms", 99.0), ("p99_9_ms", 99.9))


@dataclass(frozen=True)
class Thresholds:
    """Limits a run must stay within to pass; None: no limit."""

    max_error_rate: float | None = None  # errors (signals never) per answered request, 0..1
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
    # (group, from HOST:PORT, to HOST:PORT) -> [members back, first lost ms, last back ms],
    # wall clock: the coordinator moves the members saw, in the order first seen.
    moves: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)

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

    def moved(self, group: str, old: str, new: str, members: int, lost: int, back: int) -> None:
        """A worker's members of `group` served by `new` after they lost `old`."""
        seen = self.moves.get((group, old, new))
        if seen is None:
            self.moves[group, old, new] = [members, lost, back]
        else:
            seen[0] += members
            seen[1] = min(seen[1], lost)
            seen[2] = max(seen[2], back)

    def moves_section(self) -> list[dict[str, Any]]:
        """Each group's move, as its members saw it: from which node to which, how many
        of them were served at the new one, and how long after the first of them lost the
        old one the last of them was served there."""
        ids = self.node_ids
        return [
            {
                "group": group,
                "from": old,
                "to": new,
                "from_node": ids.get(old),
                "to_node": ids.get(new),
                "members": members,
                "lost": iso(lost),
                "back_ms": back - lost,
            }
            for (group, old, new), (members, lost, back) in self.moves.items()
        ]

    def node_order(self) -> list[str]:
        """The nodes by id (those without one last), then address."""
        ids = self.node_ids
        return sorted(self.nodes, key=lambda a: (a not in ids, ids.get(a, 0), a))

    def requests(self) -> int:
        return sum(h.count for h in self.latency.values())

    def codes(self) -> dict[int, int]:
        """Errors and signals by code, over every API."""
        return summed(self.errors.values())

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


def summed(by_api: Iterable[Mapping[int, int]]) -> dict[int, int]:
    """Counts by code added up over several APIs' (or nodes')."""
    total: defaultdict[int, int] = defaultdict(int)
    for codes in by_api:
        for code, n in codes.items():
            total[code] += n
    return dict(total)


def split(codes: Mapping[int, int]) -> tuple[dict[str, int], dict[str, int]]:
    """Counts by code as (errors, signals), each by name in code order."""
    errors: dict[str, int] = {}
    signals: dict[str, int] = {}
    for code, n in sorted(codes.items()):
        (signals if code in SIGNALS else errors)[error_name(code)] = n
    return errors, signals


def counted(codes: Mapping[int, int]) -> tuple[int, int]:
    """(errors, signals) among counts by code."""
    signals = sum(n for code, n in codes.items() if code in SIGNALS)
    return sum(codes.values()) - signals, signals


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


WHOLE_RUN = "over the whole run"


def steady_words(seconds: range) -> str:
    """Where a steady phase's figures come from, as the verdict and the views say it."""
    return f"in steady state, seconds {seconds[0]}-{seconds[-1]}"


def judge(
    thresholds: Thresholds,
    p99_by_api: Mapping[str, float | None],
    errors: int,
    requests: int,
    where: str,
    error_names: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The verdict, from figures alone: passed, or the reasons not, as sentences.

    `p99_by_api`: each API's p99 in ms (None: no request) over the window the latency limit
    applies to, which `where` names ("in steady state, seconds 31-290", or WHOLE_RUN);
    JoinGroup and SyncGroup, which wait for their group by design, are left out. `errors`
    (signals never count) of `requests` answered: the error rate's, over the whole run;
    `error_names` (errors by name) names the commonest in the sentence."""
    failures: list[str] = []
    if requests == 0:
        failures.append("No request was answered.")
    limit = thresholds.max_error_rate
    if limit is not None and requests and errors / requests > limit:
        worst = sorted(((n, name) for name, n in (error_names or {}).items()), reverse=True)
        named = ", ".join(f"{name} {n:,}" for n, name in worst[:3])
        failures.append(
            f"The error rate {errors / requests:.3%} is above the limit {limit:.3%}: "
            f"{errors:,} errors in {requests:,} requests" + (f" ({named})." if named else ".")
        )
    if thresholds.max_p99_ms is not None:
        for name, p99 in p99_by_api.items():
            if name in WAITING_NAMES or p99 is None or math.isnan(p99):
                continue
            if p99 > thresholds.max_p99_ms:
                failures.append(
                    f"{name} p99 {p99:.3f} ms is above the limit {thresholds.max_p99_ms:g} ms "
                    f"{where}."
                )
    return {"passed": not failures, "failures": failures}


def api_figures(h: Histogram, codes: Mapping[int, int], seconds: float) -> dict[str, Any]:
    """One API over a window of `seconds`: a phase's entry in summary.json."""
    errors, signals = split(codes)
    return {
        "count": h.count,
        "requests_per_s": h.count / seconds if seconds else None,
        **percentiles(h),
        "errors": errors,
        "signals": signals,
        "error_rate": rate(counted(codes)[0], h.count),
    }


def requests_figures(count: int, codes: Mapping[int, int], seconds: float) -> dict[str, Any]:
    """Every API's requests over a window of `seconds`."""
    errors, signals = counted(codes)
    return {
        "count": count,
        "requests_per_s": count / seconds if seconds else None,
        "errors": errors,
        "signals": signals,
        "error_rate": rate(errors, count),
    }


def phase_section(per_second: PerSecond, seconds: range | None) -> dict[str, Any] | None:
    """One phase's figures, from every worker's seconds it holds (late ones too)."""
    if seconds is None:
        return None
    apis = {}
    count = 0
    codes: list[dict[int, int]] = []
    for api_key in per_second.api_keys(seconds):
        h, api_codes = per_second.over(api_key, seconds)
        apis[api_name(api_key)] = api_figures(h, api_codes, len(seconds))
        count += h.count
        codes.append(api_codes)
    return {
        "first_s": seconds[0],
        "last_s": seconds[-1],
        "seconds": len(seconds),
        "requests": requests_figures(count, summed(codes), len(seconds)),
        "apis": apis,
    }


def nodes_section(totals: Totals, elapsed_s: float) -> dict[str, Any]:
    """summary.json's `nodes`: each coordinator node's share, by HOST:PORT, in id order."""
    section = {}
    for address in totals.node_order():
        n = totals.nodes[address]
        count = n.count()
        codes = summed(n.errors.values())
        errors, signals = split(codes)
        apis = {}
        for api_key in sorted(n.requests.keys() | n.errors.keys()):
            api_errors, api_signals = split(n.errors.get(api_key, {}))
            apis[api_name(api_key)] = {
                "count": n.requests.get(api_key, 0),
                "errors": api_errors,
                "signals": api_signals,
            }
        section[address] = {
            "node_id": totals.node_ids.get(address),
            "groups": n.groups,
            "connections": n.peak_connections,
            "requests": count,
            "requests_per_s": count / elapsed_s if elapsed_s else None,
            "errors": errors,
            "signals": signals,
            "error_rate": rate(counted(codes)[0], count),
            "apis": apis,
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
    per_second: PerSecond | None = None,
    phases: Phases | None = None,
    server: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The document; `per_second` and `phases` give the phases' figures (none without
    them), `server` is the server's section (None: not sampled)."""
    started = totals.started_ms if totals.started_ms is not None else now_ms
    ended = totals.ended_ms if totals.ended_ms is not None else now_ms
    elapsed = max(0.0, (ended - started) / 1000)
    requests = totals.requests()
    apis = {}
    for api_key in sorted(totals.latency.keys() | totals.errors.keys()):
        h = totals.latency.get(api_key, Histogram())
        codes: Mapping[int, int] = totals.errors.get(api_key, {})
        api_errors, api_signals = split(codes)
        apis[api_name(api_key)] = {
            "api_key": api_key,
            "count": h.count,
            "requests_per_s": h.count / elapsed if elapsed else None,
            "errors": api_errors,
            "signals": api_signals,
            "error_rate": rate(counted(codes)[0], h.count),
            **percentiles(h),
        }
    sections: dict[str, dict[str, Any] | None] = dict.fromkeys(("joining", "steady", "leaving"))
    if per_second is not None and phases is not None:
        sections = {name: phase_section(per_second, s) for name, s in phases.named().items()}
    steady = sections["steady"]
    if steady is not None and phases is not None and phases.steady is not None:
        p99s = {name: api["p99_ms"] for name, api in steady["apis"].items()}
        where = steady_words(phases.steady)
    else:
        p99s = {name: api["p99_ms"] for name, api in apis.items()}
        where = WHOLE_RUN
    all_codes = totals.codes()
    errors_count = counted(all_codes)[0]
    commit_errors, commit_signals = counted(totals.errors.get(ApiKey.OFFSET_COMMIT, {}))
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
        "requests": requests_figures(requests, all_codes, elapsed),
        "apis": apis,
        "phases": sections,
        "steady_by": phases.steady_by if phases is not None else None,
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
        "coordinator_moves": totals.moves_section(),
        "commits": {
            "count": totals.commits,
            "offsets": totals.offsets,
            "errors": commit_errors,
            "signals": commit_signals,
        },
        "generator": {
            "workers": workers,
            "cpu_s": round(totals.cpu_s, 3),
            "cores": totals.cpu_s / elapsed if elapsed else None,
            "cpu_us_per_request": totals.cpu_s * 1e6 / requests if requests else None,
        },
        "members": members,
        "nodes": nodes_section(totals, elapsed),
        "server": server,
        "tables": {**tables, "errors_dropped": totals.errors_dropped},
        "late_seconds": totals.late_seconds,
        # With --faults, loadtest/faults.py's section, set once the run is over (reading
        # the faults' counts takes the server's admin port, which the aggregator has not).
        "faults": None,
        "thresholds": {
            "max_error_rate": thresholds.max_error_rate,
            "max_p99_ms": thresholds.max_p99_ms,
        },
        "verdict": judge(thresholds, p99s, errors_count, requests, where, split(all_codes)[0]),
    }
