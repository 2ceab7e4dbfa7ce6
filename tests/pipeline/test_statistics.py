"""Each statistic of the report, computed on Spark, equals the same statistic computed
directly in Python from the rows that were written."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pytest

from fastcoord.pipeline import commits, compare, errors, membership, rebalances
from fastcoord.pipeline.clock import run_starts
from fastcoord.pipeline.inputs import open_inputs
from fastcoord.pipeline.tables import load

from .generated import START_MS, events, latency_run, other_tables

SECONDS = {"a": 34, "b": 21}


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
    return runs, rows, event_rows, load(spark, inputs)


def test_errors_by_code_and_api(data: Any) -> None:
    runs, rows, _, t = data
    got = {(r.run, r.api, r.error): r["count"] for r in errors.by_code(t.errors).collect()}
    want = Counter((run, e["api"], e["error"]) for run in rows for e in rows[run]["errors"])
    assert got == dict(want)
    by_api = {(r.run, r.api): r for r in errors.by_api(t.latency, t.errors).collect()}
    for run, generated in runs.items():
        for api in {a for a, _ in generated.seconds}:
            row = by_api[(run, api)]
            requests = sum(h.count for (a, _), h in generated.seconds.items() if a == api)
            failed = sum(n for (a, _), n in generated.errors.items() if a == api)
            assert (row.requests, row.errors) == (requests, failed)
            assert row.named == sum(1 for e in rows[run]["errors"] if e["api"] == api)
            assert row.error_rate == (failed / requests if requests else None)


def test_errors_per_window(data: Any) -> None:
    _, rows, _, t = data
    starts = run_starts(t.latency, t.states)
    got = {
        (r.run, r.api, r.error, r.window_s): r["count"]
        for r in errors.by_code_window(t.errors, starts).collect()
    }
    want: Counter[tuple[str, str, str, int]] = Counter()
    for run in rows:
        for e in rows[run]["errors"]:
            second = (int(e["time"]) - START_MS) // 1000 + 1
            want[(run, e["api"], e["error"], (second - 1) // 10 * 10 + 1)] += 1
    assert got == dict(want)


def test_commits(data: Any) -> None:
    runs, _, event_rows, t = data
    got = {(r.run, r.elapsed_s): r.commits for r in commits.per_second(t.latency).collect()}
    want = {
        (run, second): h.count
        for run, generated in runs.items()
        for (api, second), h in generated.seconds.items()
        if api == "OffsetCommit"
    }
    assert got == want
    groups = {r.group_id: r for r in commits.per_group(t.events).collect()}
    stored = [e for e in event_rows if e["kind"] == "offsets_committed"]
    assert set(groups) == {e["group_id"] for e in stored}
    for group, row in groups.items():
        mine = [e for e in stored if e["group_id"] == group]
        assert row.commits == len(mine)
        assert row.offsets == sum(int(e["members"]) for e in mine)
        assert int(row.last_commit.timestamp() * 1000) == max(int(e["at"]) for e in mine)


def test_membership(data: Any) -> None:
    _, rows, event_rows, t = data
    got = {
        int(r.window.timestamp() * 1000): (r.joined, r.left, r.expired, r.removed)
        for r in membership.server_changes(t.events).collect()
    }
    want: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for e in event_rows:
        if e["kind"] in membership.KINDS:
            index = list(membership.KINDS).index(str(e["kind"]))
            want[int(e["at"]) // 10_000 * 10_000][index] += 1
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


def test_rebalances_as_the_members_saw_them(data: Any) -> None:
    _, rows, _, t = data
    client = rebalances.client_side(t.rebalances)
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for run in rows:
        for r in rows[run]["rebalances"]:
            groups[(run, r["group"], r["generation"])].append(r)
    got = {(r.run, r.group, r.generation): r for r in client.collect()}
    assert set(got) == set(groups)
    durations: dict[tuple[str, str], list[int]] = defaultdict(list)
    for key, members in groups.items():
        row = got[key]
        duration = max(m["time"] for m in members) - min(m["started"] for m in members)
        assert row.duration_ms == duration
        assert row.members == len({m["member"] for m in members})
        assert row.unexpected == sum(1 for m in members if not m["expected"])
        assert row.size == size_of(row.members)
        durations[(key[0], row.size)].append(duration)
    sizes = {(r.run, r.size): r for r in rebalances.by_size(client, ["run"]).collect()}
    assert set(sizes) == set(durations)
    for key, values in durations.items():
        row = sizes[key]
        assert row.rebalances == len(values)
        assert row.p50_ms == pytest.approx(np.percentile(values, 50))
        assert row.p99_ms == pytest.approx(np.percentile(values, 99))
        assert row.max_ms == max(values)


def test_rebalances_as_the_server_ran_them(data: Any) -> None:
    _, _, event_rows, t = data
    got = {(r.group_id, r.generation): r for r in rebalances.server_side(t.events).collect()}
    syncs = [e for e in event_rows if e["kind"] == "sync_completed"]
    assert set(got) == {(e["group_id"], e["generation"]) for e in syncs}
    for sync in syncs:
        row = got[(sync["group_id"], sync["generation"])]
        end = int(sync["at"])
        start = end - int(sync["duration_ms"])
        inside = [
            e
            for e in event_rows
            if e["group_id"] == sync["group_id"] and start <= int(e["at"]) <= end
        ]
        joined = [e for e in inside if e["kind"] == "member_joined"]
        assert row.duration_ms == sync["duration_ms"]
        assert row.members == sync["members"]
        assert row.last_joined == (
            max(joined, key=lambda e: e["at"])["member_id"] if joined else None
        )
        assert row.expired == sorted(
            e["member_id"] for e in inside if e["kind"] in ("member_expired", "member_removed")
        )
    slowest = rebalances.slowest(rebalances.server_side(t.events), 5).collect()
    assert [r.duration_ms for r in slowest] == sorted(
        (e["duration_ms"] for e in syncs), reverse=True
    )[:5]


def test_comparison_ratios() -> None:
    rows = compare.figures(
        ["a", "b"],
        [
            {
                "run": "a",
                "api": "Heartbeat",
                "count": 10,
                "p50_ms": 2.0,
                "p99_ms": 4.0,
                "p99_9_ms": 8.0,
            },
            {
                "run": "b",
                "api": "Heartbeat",
                "count": 20,
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
        {"a": 5.0, "b": 10.0},
    )
    by = {r["figure"]: r for r in rows}
    assert by["Heartbeat p50 ms"]["ratio b"] == 0.5
    assert by["Heartbeat p99 ms"]["ratio b"] == 1.5
    assert by["Heartbeat p99.9 ms"]["ratio b"] is None
    assert by["Heartbeat requests"]["ratio b"] == 2.0
    assert by["Heartbeat error rate"]["ratio b"] is None  # over a rate of 0
    assert by["OffsetCommits/s"]["ratio b"] == 2.0
