"""A run's phases: where joining ends (every member stable, or --warmup) and leaving begins
(the scenario's end, planned or not), each phase's figures equal to those merged directly
from the same seconds, the verdict's latency limit applied to the steady phase, and the
views that lead with it."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import pytest
from rich.console import Console

from fastcoord.loadtest import phases
from fastcoord.loadtest.aggregate import Aggregator
from fastcoord.loadtest.display import plain_line, print_summary
from fastcoord.loadtest.histogram import Histogram
from fastcoord.loadtest.seconds import PerSecond
from fastcoord.loadtest.stats import Recorder, Second
from fastcoord.loadtest.summary import Thresholds, judge, percentiles, split
from fastcoord.protocol.api_keys import ApiKey, api_name
from fastcoord.protocol.errors import ErrorCode

from .workers import START_MS, server_samples

MS = 1_000_000
TARGET = 30
DURATION_S = 8
LAST_S = 10  # the members leave in seconds 9 and 10
# Each worker's stable members at the end of each second: the merged count reaches the
# target (30) in second 4, and falls as they leave.
STABLE = {1: 5, 2: 10, 3: 14, 4: 15, 5: 15, 6: 15, 7: 15, 8: 15, 9: 6, 10: 0}


def worker_second(worker: int, elapsed_s: int, heartbeats: int = 100) -> Second:
    """One worker's second: joining seconds (1-4) slow heartbeats (80 ms) and JoinGroups
    answered MEMBER_ID_REQUIRED; steady seconds fast ones (1-2 ms) and an UNKNOWN_MEMBER_ID;
    leaving seconds LeaveGroups and 20 ms heartbeats."""
    r = Recorder(worker, cpu_s=0.0)
    for i in range(heartbeats):
        if elapsed_s <= 4:
            ns = 80 * MS + i * 1000
        elif elapsed_s <= DURATION_S:
            ns = MS + (i % 7) * 150_000 + worker * 10_000 + elapsed_s * 1000
        else:
            ns = 20 * MS
        r.record(ApiKey.HEARTBEAT, ns, 0)
    if elapsed_s <= 4:
        for _ in range(5):
            r.record(ApiKey.JOIN_GROUP, 3 * MS, ErrorCode.MEMBER_ID_REQUIRED)
            r.record(ApiKey.JOIN_GROUP, 900 * MS, 0)
    elif elapsed_s <= DURATION_S:
        r.record(ApiKey.HEARTBEAT, 2 * MS, ErrorCode.UNKNOWN_MEMBER_ID)
        r.record(ApiKey.HEARTBEAT, 2 * MS, ErrorCode.REBALANCE_IN_PROGRESS)
    else:
        for _ in range(3):
            r.record(ApiKey.LEAVE_GROUP, 4 * MS, 0)
    wall_ms = START_MS + elapsed_s * 1000 + worker
    return r.take(elapsed_s, wall_ms, {"stable": STABLE[elapsed_s]}, 15, 0.1)


def run_seconds() -> list[Second]:
    """Two workers' seconds 1 to 10, worker 1's second 6 held back (sent late)."""
    seconds = []
    for elapsed_s in range(1, LAST_S + 1):
        seconds.append(worker_second(0, elapsed_s))
        if elapsed_s != 6:
            seconds.append(worker_second(1, elapsed_s))
    return seconds


def aggregator(config: dict[str, object] | None = None, **kw: Any) -> Aggregator:
    base: dict[str, object] = {"members": TARGET, "duration_s": DURATION_S}
    agg = Aggregator(None, {**base, **(config or {})}, workers=2, thresholds=Thresholds(**kw))
    for second in run_seconds():
        agg.add(second)
    agg.add(worker_second(1, 6))  # late: second 6 was written without it
    assert agg.totals.late_seconds == 1
    return agg


# The boundaries, from the merged seconds


def test_joining_ends_when_every_member_is_stable() -> None:
    stable = {s: 2 * n for s, n in STABLE.items()}
    found = phases.find(stable, LAST_S, TARGET, stop_s=DURATION_S)
    assert found == phases.Phases(range(1, 5), range(5, 9), range(9, 11), "members")
    assert [found.of(s) for s in (1, 4, 5, 8, 9, 10, 11)] == [
        "joining",
        "joining",
        "steady",
        "steady",
        "leaving",
        "leaving",
        None,
    ]


def test_a_target_never_reached_is_all_joining_and_no_steady_phase() -> None:
    stable = {s: 2 * n for s, n in STABLE.items()}
    found = phases.find(stable, LAST_S, TARGET + 1, stop_s=DURATION_S)
    assert found == phases.Phases(range(1, 9), None, range(9, 11), None)
    # No target known at all: the same.
    assert phases.find(stable, LAST_S, None, stop_s=DURATION_S) == found


def test_warmup_decides_whatever_the_members_did() -> None:
    stable = {s: 2 * n for s, n in STABLE.items()}
    assert phases.find(stable, LAST_S, TARGET, 2.0, DURATION_S) == phases.Phases(
        range(1, 3), range(3, 9), range(9, 11), "warmup"
    )
    # A fraction of a second rounds up: second 3 covers (2, 3], part of the warmup.
    assert phases.find(stable, LAST_S, TARGET + 1, 2.5, DURATION_S).steady == range(4, 9)
    # No joining phase at all.
    assert phases.find(stable, LAST_S, TARGET, 0.0, DURATION_S) == phases.Phases(
        None, range(1, 9), range(9, 11), "warmup"
    )
    # A warmup past the scenario's end leaves no steady phase.
    assert phases.find(stable, LAST_S, TARGET, 30.0, DURATION_S) == phases.Phases(
        range(1, 9), None, range(9, 11), None
    )


def test_a_run_stopped_early_leaves_from_the_stop() -> None:
    stable = {s: 2 * n for s, n in STABLE.items()}
    # Stopped 5.5 s in: second 6 covers (5, 6], the stop in it; the target was reached in 4.
    assert phases.find(stable, LAST_S, TARGET, stop_s=5.5) == phases.Phases(
        range(1, 5), range(5, 6), range(6, 11), "members"
    )
    # Stopped in second 4, as the target was reached: no steady second before the stop.
    assert phases.find(stable, LAST_S, TARGET, stop_s=3.2) == phases.Phases(
        range(1, 4), None, range(4, 11), None
    )
    # Stopped within the first second: all leaving.
    assert phases.find(stable, LAST_S, TARGET, stop_s=0.4) == phases.Phases(
        None, None, range(1, 11), None
    )


def test_while_the_scenario_goes_on_no_second_is_leaving() -> None:
    stable = {s: 2 * n for s in range(1, 7) for n in [STABLE[s]]}
    assert phases.find(stable, 6, TARGET) == phases.Phases(
        range(1, 5), range(5, 7), None, "members"
    )
    assert phases.find({1: 10, 2: 20}, 2, TARGET) == phases.Phases(range(1, 3), None, None, None)
    assert phases.find({}, 0, TARGET) == phases.Phases(None, None, None, None)


# The figures, from every worker's seconds


def direct(seconds: list[Second], first: int, last: int) -> dict[str, Any]:
    """A phase's figures merged here, from the workers' seconds themselves."""
    histograms: defaultdict[int, Histogram] = defaultdict(Histogram)
    codes: defaultdict[int, defaultdict[int, int]] = defaultdict(lambda: defaultdict(int))
    for second in seconds:
        if first <= second.elapsed_s <= last:
            for api in second.apis:
                histograms[api.api_key].merge(api.histogram())
                for code, n in api.errors.items():
                    codes[api.api_key][code] += n
    return {"histograms": histograms, "codes": codes}


def test_each_phases_figures_are_its_seconds_merged() -> None:
    agg = aggregator()
    summary = agg.finish("completed", None)
    assert summary["steady_by"] == "members"
    every = [*run_seconds(), worker_second(1, 6)]
    expected = {"joining": (1, 4), "steady": (5, 8), "leaving": (9, 10)}
    for name, (first, last) in expected.items():
        phase = summary["phases"][name]
        seconds = last - first + 1
        assert (phase["first_s"], phase["last_s"], phase["seconds"]) == (first, last, seconds)
        merged = direct(every, first, last)
        assert set(phase["apis"]) == {api_name(k) for k in merged["histograms"]}
        count = 0
        for api_key, h in merged["histograms"].items():
            api = phase["apis"][api_name(api_key)]
            assert api["count"] == h.count
            assert api["requests_per_s"] == h.count / seconds
            assert {k: api[k] for k in ("p50_ms", "p99_ms", "p99_9_ms", "max_ms")} == (
                percentiles(h)
            )
            assert (api["errors"], api["signals"]) == split(merged["codes"][api_key])
            count += h.count
        assert phase["requests"]["count"] == count
        assert phase["requests"]["requests_per_s"] == count / seconds
    # The late worker second counts in its phase: two workers' heartbeats in every second.
    assert summary["phases"]["steady"]["apis"]["Heartbeat"]["count"] == 4 * 2 * 102
    # Errors and signals apart, as everywhere.
    steady = summary["phases"]["steady"]
    heartbeat = steady["apis"]["Heartbeat"]
    assert heartbeat["errors"] == {"UNKNOWN_MEMBER_ID": 8}
    assert heartbeat["signals"] == {"REBALANCE_IN_PROGRESS": 8}
    assert heartbeat["error_rate"] == 8 / (4 * 2 * 102)
    assert steady["requests"] == {
        "count": 4 * 2 * 102,
        "requests_per_s": 2 * 102,
        "errors": 8,
        "signals": 8,
        "error_rate": 8 / (4 * 2 * 102),
    }
    joining = summary["phases"]["joining"]
    assert joining["apis"]["JoinGroup"]["signals"] == {"MEMBER_ID_REQUIRED": 4 * 2 * 5}
    assert joining["apis"]["JoinGroup"]["errors"] == {}
    assert joining["apis"]["JoinGroup"]["error_rate"] == 0
    # The steady heartbeats are fast, the whole run's are not.
    assert heartbeat["p99_ms"] < 3 < 80 < summary["apis"]["Heartbeat"]["p99_ms"]


def test_a_compacted_second_keeps_its_figures() -> None:
    seconds = run_seconds()
    kept, compacted = PerSecond(), PerSecond()
    for second in seconds:
        kept.add(second)
        compacted.add(second)
    for s in range(1, LAST_S + 1):
        compacted.compact(s)
    compacted.add(worker_second(1, 6))  # a late one folds in at once
    kept.add(worker_second(1, 6))
    assert kept.parts(6) == 2 and compacted.parts(6) == 1  # two workers' Heartbeats
    assert compacted.parts(3) == 2 and compacted.parts(9) == 2  # one per API
    for api_key in kept.api_keys():
        for window in (range(1, 5), range(5, 9), range(1, 11), range(6, 7)):
            h1, codes1 = kept.over(api_key, window)
            h2, codes2 = compacted.over(api_key, window)
            assert codes1 == codes2
            assert (h1.count, h1.sum_ns, h1.max_ns) == (h2.count, h2.sum_ns, h2.max_ns)
            assert (h1.counts == h2.counts).all()
    assert kept.api_keys(range(9, 11)) == [ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP]


def test_the_aggregator_compacts_a_second_once_merged() -> None:
    agg = Aggregator(None, {"members": TARGET}, workers=2, thresholds=Thresholds())
    agg.add(worker_second(0, 1))
    assert agg.per_second.parts(1) == 2  # Heartbeat, JoinGroup: one worker so far
    agg.add(worker_second(1, 1))  # merged and written now: one part per API, not per worker
    assert agg.per_second.parts(1) == 2
    agg.add(worker_second(0, 2))
    agg.add(worker_second(0, 3))
    assert agg.per_second.parts(3) == 2


def test_a_run_that_never_reached_its_target_has_no_steady_phase() -> None:
    summary = aggregator({"members": 100}).finish("completed", None)
    assert summary["phases"]["steady"] is None and summary["steady_by"] is None
    assert (summary["phases"]["joining"]["first_s"], summary["phases"]["joining"]["last_s"]) == (
        1,
        8,
    )
    assert summary["phases"]["leaving"]["first_s"] == 9


def test_warmup_and_an_early_stop_in_the_summary() -> None:
    agg = aggregator({"warmup_s": 2})
    agg.stopped(6.4)
    summary = agg.finish("interrupted", "interrupted")
    assert summary["steady_by"] == "warmup"
    named = {k: (v["first_s"], v["last_s"]) for k, v in summary["phases"].items()}
    assert named == {"joining": (1, 2), "steady": (3, 6), "leaving": (7, 10)}
    assert summary["complete"] is False and summary["outcome"] == "interrupted"


def test_the_live_view_names_the_phase_of_its_second() -> None:
    agg = Aggregator(None, {"members": TARGET, "duration_s": DURATION_S}, 2, Thresholds())
    seen = {}
    for elapsed_s in range(1, LAST_S + 1):
        agg.add(worker_second(0, elapsed_s))
        agg.add(worker_second(1, elapsed_s))
        snapshot = agg.snapshot()
        seen[snapshot.elapsed_s] = snapshot.phase
        assert agg.summary()["complete"] is False
    assert seen == {s: "joining" if s <= 4 else "steady" if s <= 8 else "leaving" for s in seen}
    assert "10 s / 8 s (leaving)" in plain_line(agg.snapshot())


# The verdict


def test_the_latency_limit_applies_to_the_steady_phase() -> None:
    summary = aggregator(max_p99_ms=10, max_error_rate=0.05).finish("completed", None)
    # The joins' 80 ms heartbeats are over the limit in the whole run, not in steady state.
    assert summary["apis"]["Heartbeat"]["p99_ms"] > 10
    assert summary["verdict"] == {"passed": True, "failures": []}
    strict = aggregator(max_p99_ms=1).finish("completed", None)
    (sentence,) = strict["verdict"]["failures"]
    assert (
        sentence == "Heartbeat p99 2.000 ms is above the limit 1 ms in steady state, seconds 5-8."
    )


def test_without_a_steady_phase_the_limit_applies_to_the_whole_run() -> None:
    summary = aggregator({"members": 100}, max_p99_ms=10).finish("completed", None)
    (sentence,) = summary["verdict"]["failures"]
    p99 = summary["apis"]["Heartbeat"]["p99_ms"]
    assert sentence == f"Heartbeat p99 {p99:.3f} ms is above the limit 10 ms over the whole run."


def test_the_error_rate_is_the_whole_runs_errors_never_its_signals() -> None:
    # 8 errors (UNKNOWN_MEMBER_ID) in 2,108 requests; 48 signals beside them.
    summary = aggregator(max_error_rate=0.003).finish("completed", None)
    requests = summary["requests"]
    assert (requests["errors"], requests["signals"]) == (8, 4 * 2 * 5 + 8)
    (sentence,) = summary["verdict"]["failures"]
    assert sentence == (
        f"The error rate {8 / requests['count']:.3%} is above the limit 0.300%: 8 errors in "
        f"{requests['count']:,} requests (UNKNOWN_MEMBER_ID 8)."
    )
    assert aggregator(max_error_rate=0.004).finish("completed", None)["verdict"]["passed"]


def test_judge_is_a_rule_of_figures_alone() -> None:
    limits = Thresholds(max_error_rate=0.01, max_p99_ms=5)
    p99s = {"JoinGroup": 3000.0, "SyncGroup": 900.0, "Heartbeat": 4.5, "OffsetCommit": None}
    assert judge(limits, p99s, 10, 1000, "over the whole run") == {
        "passed": True,
        "failures": [],
    }
    verdict = judge(limits, {**p99s, "Heartbeat": 6.0}, 11, 1000, "in steady state, seconds 3-9")
    assert verdict == {
        "passed": False,
        "failures": [
            "The error rate 1.100% is above the limit 1.000%: 11 errors in 1,000 requests.",
            "Heartbeat p99 6.000 ms is above the limit 5 ms in steady state, seconds 3-9.",
        ],
    }
    assert judge(Thresholds(), {}, 0, 0, "over the whole run") == {
        "passed": False,
        "failures": ["No request was answered."],
    }
    assert math.isnan(Histogram().percentile_ms(99))
    assert judge(limits, {"Heartbeat": math.nan}, 0, 10, "here")["passed"]


# The end's report


def test_the_end_leads_with_the_steady_phase() -> None:
    agg = aggregator()
    agg.watch_server(["127.0.0.1:9644"])
    for elapsed_s in range(1, LAST_S + 1):
        agg.add_server(*server_samples(elapsed_s))
    agg.add_server([], {"127.0.0.1:9644": 2})
    summary = agg.finish("completed", None)
    console = Console(record=True, width=160)
    print_summary(summary, console)
    text = console.export_text()
    steady = text.index("steady state, seconds 5-8 (4 s)")
    whole = text.index("whole run, 2,108 requests, 8 errors, 48 signals")
    assert steady < whole < text.index("joining: seconds 1-4") < text.index("leaving: seconds")
    lines = text.splitlines()
    heartbeats = [line for line in lines if line.startswith("│ Heartbeat")]
    assert len(heartbeats) == 2  # the steady phase's, then the whole run's
    joining = next(line for line in lines if line.startswith("joining: "))
    assert joining == (
        "joining: seconds 1-4, 880 requests, 0 errors, 40 signals, Heartbeat p99 80.10 ms"
    )
    assert any(line.startswith("leaving: seconds 9-10, 412 requests, 0 errors") for line in lines)
    server = summary["server"]["127.0.0.1:9644"]
    assert server == {
        "samples": 10,
        "failed": 2,
        "cpu_s": 2.25,
        "cores": pytest.approx(0.25),
        "peak_rss_bytes": 110_000_000,
        "rss_bytes_at_end": 110_000_000,
    }
    assert (
        "server 127.0.0.1:9644: CPU 2.2 s, 0.25 cores in steady state, peak RSS 110 MB, "
        "110 MB at the end; 10 samples (2 failed)"
    ) in lines
