"""Each statistic of the report, computed on Spark, equals the same statistic computed
directly in Python from the rows that were written."""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pytest

from fastcoord.pipeline import commits, compare, errors, membership, rebalances, usage
from fastcoord.pipeline.inputs import open_inputs
from fastcoord.pipeline.latency import step_of
from fastcoord.pipeline.scope import MARGIN_MS, group_pattern, scope_of
from fastcoord.pipeline.tables import load

from .generated import PREFIX, START_MS, events, latency_run, other_tables

SECONDS = {"a": 34, "b": 21}
STEP = 5


@pytest.fixture(scope="module")
def data(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    base = tmp_path_factory.mktemp("statistics")
    runs, rows = {}, {}
    for i, (name, seconds) in enumerate(SECONDS.items()):
        runs[name] = latency_run(base / name, seconds, seed=10 + i)
        rows[name] = other_tables(runs[name], seconds, seed=10 + i)
    event_rows = events(base / "events", seed=5)
    inputs = open_inputs([r.path for r in runs.values()], base / "events")
    assert inputs.problems == []
    t = load(spark, inputs)
    starts = spark.createDataFrame([(run, START_MS) for run in runs], "run string, start_ms long")
    lengths = spark.createDataFrame(list(SECONDS.items()), "run string, last_s int")
    return runs, rows, event_rows, t, starts, lengths


def mine(run: str, event_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of `run` by the scope's rule, computed here: its groups, its time."""
    end = START_MS + SECONDS[run] * 1000 + 400
    pattern = re.compile(group_pattern(PREFIX))
    return [
        e
        for e in event_rows
        if pattern.match(str(e["group_id"]))
        and START_MS - MARGIN_MS <= int(e["at"]) <= end + MARGIN_MS
    ]


def t_of(second: int) -> int:
    return (second - 1) // STEP * STEP + STEP


def test_the_step_of_a_second(spark: Any) -> None:
    from pyspark.sql import functions as F

    got = [
        r.t
        for r in spark.range(1, 13)
        .select(step_of(F.col("id").cast("int"), STEP).alias("t"))
        .collect()
    ]
    assert got == [t_of(s) for s in range(1, 13)] == [5] * 5 + [10] * 5 + [15] * 2


def test_errors_and_signals_by_code_and_api(data: Any) -> None:
    runs, rows, _, t, starts, _ = data
    got = {
        (r.run, r.api, r.error, r.signal): r["count"] for r in errors.by_code(t.errors).collect()
    }
    want = Counter(
        (run, e["api"], e["error"], e["signal"]) for run in rows for e in rows[run]["errors"]
    )
    assert got == dict(want)
    by_api = {(r.run, r.api): r for r in errors.by_api(t.latency, t.errors).collect()}
    for run, generated in runs.items():
        for api in {a for a, _ in generated.seconds}:
            row = by_api[(run, api)]
            requests = sum(h.count for (a, _), h in generated.seconds.items() if a == api)
            failed = sum(n for (a, _), n in generated.errors.items() if a == api)
            signals = sum(n for (a, _), n in generated.signals.items() if a == api)
            assert (row.requests, row.errors, row.signals) == (requests, failed, signals)
            named = [e for e in rows[run]["errors"] if e["api"] == api]
            assert row.named_errors == sum(1 for e in named if not e["signal"])
            assert row.named_signals == sum(1 for e in named if e["signal"])
            assert row.error_rate == (failed / requests if requests else None)
    series = {
        (r.run, r.t, r.error, r.signal): r["count"]
        for r in errors.by_code_series(t.errors, starts, STEP).collect()
    }
    want_series: Counter[tuple[str, int, str, bool]] = Counter()
    for run in rows:
        for e in rows[run]["errors"]:
            second = (int(e["time"]) - START_MS) // 1000 + 1
            want_series[(run, t_of(second), e["error"], e["signal"])] += 1
    assert series == dict(want_series)


def test_commits_per_group_of_the_run(data: Any) -> None:
    _, _, event_rows, t, _, _ = data
    got = {(r.run, r.group_id): r for r in commits.per_group(t.events).collect()}
    want = {}
    for run in SECONDS:
        stored = [e for e in mine(run, event_rows) if e["kind"] == "offsets_committed"]
        for group in {e["group_id"] for e in stored}:
            of = [e for e in stored if e["group_id"] == group]
            want[(run, group)] = (
                len(of),
                sum(int(e["members"]) for e in of),
                max(int(e["at"]) for e in of),
            )
    assert (
        want
        and {
            k: (r.commits, r.offsets, int(r.last_commit.timestamp() * 1000)) for k, r in got.items()
        }
        == want
    )
    # Some events are of neither run: the log holds more than the runs' time.
    assert len({(e["group_id"], e["at"]) for run in SECONDS for e in mine(run, event_rows)}) < len(
        event_rows
    )


def test_membership(data: Any) -> None:
    _, rows, event_rows, t, starts, _ = data
    got = {
        (r.run, r.t): (r.joined, r.left, r.expired, r.removed)
        for r in membership.server_changes(t.events, starts, STEP).collect()
    }
    want: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for run in SECONDS:
        for e in mine(run, event_rows):
            if e["kind"] in membership.KINDS:
                index = list(membership.KINDS).index(str(e["kind"]))
                second = (int(e["at"]) - START_MS) // 1000 + 1
                want[(run, t_of(second))][index] += 1
    assert got == {k: tuple(v) for k, v in want.items()}
    states = membership.client_states(t.states).collect()
    assert [(r.run, r.elapsed_s, r.stable) for r in states] == [
        (run, s["elapsed_s"], s["stable"]) for run in sorted(rows) for s in rows[run]["states"]
    ]


def size_of(members: int) -> str:
    if members <= 1:
        return "1"
    upper = 10 ** math.ceil(math.log10(members))
    return f"{upper // 10 + 1}-{upper}"


def client_rebalances(rows: Any) -> dict[tuple[str, str, int], dict[str, Any]]:
    """Each group's rebalance as its members saw it, computed here."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for run in rows:
        for r in rows[run]["rebalances"]:
            groups[(run, r["group"], r["generation"])].append(r)
    first = {}
    for run, group, generation in groups:
        key = (run, group)
        first[key] = min(first.get(key, generation), generation)
    out = {}
    for key, members in groups.items():
        started = min(m["started"] for m in members)
        ended = max(m["time"] for m in members)
        out[key] = {
            "duration_ms": ended - started,
            "start_s": (started - START_MS) / 1000,
            "end_s": (ended - START_MS) / 1000,
            "members": len({m["member"] for m in members}),
            "unexpected": sum(1 for m in members if not m["expected"]),
            "formation": key[2] == first[(key[0], key[1])],
        }
    return out


def test_rebalances_as_the_members_saw_them(data: Any) -> None:
    _, rows, _, t, starts, lengths = data
    client = rebalances.client_side(t.rebalances, starts)
    want = client_rebalances(rows)
    got = {(r.run, r.group_id, r.generation): r for r in client.collect()}
    assert set(got) == set(want)
    durations: dict[tuple[str, str, bool], list[int]] = defaultdict(list)
    for key, w in want.items():
        row = got[key]
        assert row.duration_ms == w["duration_ms"]
        assert row.start_s == pytest.approx(w["start_s"])
        assert row.end_s == pytest.approx(w["end_s"])
        assert (row.members, row.unexpected, row.formation) == (
            w["members"],
            w["unexpected"],
            w["formation"],
        )
        assert row.size == size_of(row.members)
        durations[(key[0], row.size, row.formation)].append(w["duration_ms"])
    sizes = {(r.run, r.size, r.formation): r for r in rebalances.by_size(client, ["run"]).collect()}
    assert set(sizes) == set(durations)
    for key, values in durations.items():
        row = sizes[key]
        assert row.rebalances == len(values)
        assert row.p50_ms == pytest.approx(np.percentile(values, 50))
        assert row.p99_ms == pytest.approx(np.percentile(values, 99))
        assert row.max_ms == max(values)
    curves: dict[tuple[str, str, bool], dict[int, float]] = defaultdict(dict)
    for r in rebalances.distribution(client).collect():
        curves[(r.run, r.size, r.formation)][r.q] = r.duration_ms
    assert set(curves) == set(durations)
    for key, values in durations.items():
        assert sorted(curves[key]) == list(range(rebalances.CDF_POINTS + 1))
        for q, duration in curves[key].items():
            assert duration == pytest.approx(np.percentile(values, q))
    progress = {
        (r.run, r.t): (r.rebalancing, r.started, r.completed)
        for r in rebalances.in_progress(client, lengths, STEP).collect()
    }
    want_progress: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0, 0])
    for (run, _, _), w in want.items():
        first = (math.floor(max(w["start_s"], 0) / STEP) + 1) * STEP
        last = (math.floor(max(w["end_s"], 0) / STEP) + 1) * STEP
        for step in range(first, last + 1, STEP):
            if step <= SECONDS[run] + STEP:
                want_progress[(run, step)][0] += 1
                want_progress[(run, step)][1] += step == first
                want_progress[(run, step)][2] += step == last
    assert progress == {k: tuple(v) for k, v in want_progress.items()}


def test_rebalances_as_the_server_ran_them(data: Any) -> None:
    _, _, event_rows, t, _, _ = data
    server = rebalances.server_side(t.events)
    got = {(r.run, r.group_id, r.generation): r for r in server.collect()}
    want_keys = set()
    durations: dict[str, list[tuple[int, bool]]] = defaultdict(list)
    for run in SECONDS:
        events_of = mine(run, event_rows)
        syncs = [e for e in events_of if e["kind"] == "sync_completed"]
        first = {}
        for e in syncs:
            first[e["group_id"]] = min(first.get(e["group_id"], e["generation"]), e["generation"])
        for sync in syncs:
            key = (run, sync["group_id"], sync["generation"])
            want_keys.add(key)
            row = got[key]
            end = int(sync["at"])
            start = end - int(sync["duration_ms"])
            inside = [
                e
                for e in events_of
                if e["group_id"] == sync["group_id"] and start <= int(e["at"]) <= end
            ]
            joined = [e for e in inside if e["kind"] == "member_joined"]
            formation = sync["generation"] == first[sync["group_id"]]
            assert (row.duration_ms, row.members, row.formation) == (
                sync["duration_ms"],
                sync["members"],
                formation,
            )
            assert row.last_joined == (
                max(joined, key=lambda e: e["at"])["member_id"] if joined else None
            )
            assert row.expired == sorted(
                e["member_id"] for e in inside if e["kind"] in ("member_expired", "member_removed")
            )
            durations[run].append((int(sync["duration_ms"]), formation))
    assert want_keys and set(got) == want_keys
    for formation in (False, True):
        slowest = rebalances.slowest(server, formation, 3).collect()
        for run in SECONDS:
            kept = [d for d, f in durations[run] if formation or not f]
            assert [r.duration_ms for r in slowest if r.run == run] == sorted(kept, reverse=True)[
                :3
            ]


def test_the_servers_cpu_and_memory(data: Any, spark: Any) -> None:
    _, rows, _, t, _, _ = data
    got = {(r.run, r.t): r for r in usage.series(t.server, STEP).collect()}
    for run in SECONDS:
        samples = rows[run]["server"]
        by_step: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
        for prev, cur in itertools.pairwise(samples):
            span = (int(cur["time"]) - int(prev["time"])) / 1000
            by_step[t_of(cur["elapsed_s"])].append((cur["cpu_s"] - prev["cpu_s"], span, 0))
        for step, parts in by_step.items():
            row = got[(run, step)]
            assert row.cores == pytest.approx(sum(p[0] for p in parts) / sum(p[1] for p in parts))
        for step in {t_of(s["elapsed_s"]) for s in samples}:
            assert got[(run, step)].rss_bytes == max(
                s["rss_bytes"] for s in samples if t_of(s["elapsed_s"]) == step
            )
    scope = scope_of("a", None, SECONDS["a"], (10, 20))
    window = scope.windows["steady"]
    windows = spark.createDataFrame(
        [("a", "steady", window.first_s, window.last_s, window.seconds)],
        "run string, phase string, first_s int, last_s int, seconds int",
    )
    (row,) = usage.by_phase(t.server, windows).collect()
    samples = rows["a"]["server"]
    inside = [
        (cur["cpu_s"] - prev["cpu_s"], (int(cur["time"]) - int(prev["time"])) / 1000, cur)
        for prev, cur in itertools.pairwise(samples)
        if window.first_s <= cur["elapsed_s"] <= window.last_s
    ]
    assert (window.first_s, window.last_s) == (11, 20)
    assert row.samples == len(inside) == 10
    assert row.cores == pytest.approx(sum(p[0] for p in inside) / sum(p[1] for p in inside))
    assert row.peak_rss_bytes == max(p[2]["rss_bytes"] for p in inside)


def test_comparison_ratios() -> None:
    rows = compare.figures(
        ["a", "b"],
        [
            {
                "run": "a",
                "api": "Heartbeat",
                "requests_per_s": 10.0,
                "p50_ms": 2.0,
                "p99_ms": 4.0,
                "p99_9_ms": 8.0,
            },
            {
                "run": "b",
                "api": "Heartbeat",
                "requests_per_s": 20.0,
                "p50_ms": 1.0,
                "p99_ms": 6.0,
                "p99_9_ms": None,
            },
        ],
        [
            {"run": "a", "api": "Heartbeat", "error_rate": 0.0},
            {"run": "b", "api": "Heartbeat", "error_rate": 0.1},
        ],
        [],
    )
    by = {r["figure"]: r for r in rows}
    assert by["Heartbeat p50 ms"]["ratio b"] == 0.5
    assert by["Heartbeat p99 ms"]["ratio b"] == 1.5
    assert by["Heartbeat p99.9 ms"]["ratio b"] is None
    assert by["Heartbeat requests/s"]["ratio b"] == 2.0
    assert by["Heartbeat error rate"]["ratio b"] is None  # over a rate of 0
