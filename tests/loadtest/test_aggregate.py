"""The parent's merge: seconds from several workers, in any order, become one row per
second and API, written once; late and missing workers are handled as documented; join
storms merge across the workers that saw a group."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest

from fastcoord.loadtest.aggregate import WAIT_S, Aggregator
from fastcoord.loadtest.histogram import Histogram
from fastcoord.loadtest.stats import Recorder
from fastcoord.loadtest.summary import Thresholds
from fastcoord.protocol.api_keys import ApiKey

from .workers import START_MS, heartbeat_ns, second

CONFIG: dict[str, object] = {"members": 30, "duration_s": 60}


def table(out: Path, name: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = ds.dataset(out / name, format="parquet").to_table().to_pylist()
    return sorted(rows, key=lambda r: (r.get("elapsed_s", 0), str(r.get("api", ""))))


def test_out_of_order_seconds_merge_into_one_row_each(tmp_path: Path) -> None:
    out = tmp_path / "out"
    agg = Aggregator(out, CONFIG, workers=3, thresholds=Thresholds())
    order = [(0, 1), (1, 2), (0, 2), (2, 1), (1, 1), (2, 2), (2, 3), (0, 3)]
    for worker, elapsed_s in order:
        agg.add(second(worker, elapsed_s, heartbeats=100 + worker))
    agg.flush()
    latency = [r for r in table(out, "latency") if r["api"] == "Heartbeat"]
    assert [r["elapsed_s"] for r in latency] == [1, 2]  # second 3 waits for worker 1
    for row in latency:
        assert isinstance(row["elapsed_s"], int)
        values = [v for w in range(3) for v in heartbeat_ns(w, row["elapsed_s"], 100 + w)]
        whole = Histogram()
        whole.add_ns(values)
        buckets, counts = whole.nonzero()
        assert row["count"] == len(values) == 303
        # One in ten of 100, 101, 102 (the first of ten) answered REBALANCE_IN_PROGRESS: a
        # signal, no error.
        assert (row["errors"], row["signals"]) == (0, 10 + 11 + 11)
        assert row["buckets"] == buckets.tolist() and row["counts"] == counts.tolist()
        assert row["sum_us"] == sum(values) // 1000
        assert row["max_us"] == -(-max(values) // 1000)
        assert row["time"].timestamp() * 1000 == START_MS + row["elapsed_s"] * 1000
    states = table(out, "states")
    assert [(s["elapsed_s"], s["stable"], s["joining"], s["unjoined"]) for s in states] == [
        (1, 30, 3, 0),
        (2, 30, 3, 0),
    ]
    assert states[0]["requests"] == 303 + 3 and states[0]["connections"] == 15
    assert states[0]["cpu_s"] == pytest.approx(0.3)
    commits = [r for r in table(out, "latency") if r["api"] == "OffsetCommit"]
    assert [(r["errors"], r["signals"]) for r in commits] == [(3, 0), (3, 0)]  # NOT_COORDINATOR
    # Event rows are written as they come, seconds complete or not.
    errors = table(out, "errors")
    assert len(errors) == len(order) == len(table(out, "rebalances"))
    assert {(r["error"], r["signal"]) for r in errors} == {("NOT_COORDINATOR", False)}

    agg.add(second(1, 3, heartbeats=101))
    summary = agg.finish("completed", None)
    assert [r["elapsed_s"] for r in table(out, "states")] == [1, 2, 3]
    assert summary["requests"]["count"] == 9 * 101 + 9  # 100, 101, 102 heartbeats; commits
    assert summary["apis"]["Heartbeat"]["count"] == 9 * 101
    heartbeats = summary["apis"]["Heartbeat"]
    assert heartbeats["errors"] == {} and heartbeats["error_rate"] == 0
    assert heartbeats["signals"] == {"REBALANCE_IN_PROGRESS": 3 * 32}
    assert summary["apis"]["OffsetCommit"]["errors"] == {"NOT_COORDINATOR": 9}
    assert summary["apis"]["OffsetCommit"]["signals"] == {}
    assert summary["commits"] == {"count": 9, "offsets": 36, "errors": 9, "signals": 0}
    assert summary["requests"] == {
        "count": 9 * 101 + 9,
        "requests_per_s": pytest.approx((9 * 101 + 9) / summary["elapsed_s"]),
        "errors": 9,
        "signals": 3 * 32,
        "error_rate": 9 / (9 * 101 + 9),
    }
    assert summary["members"] == {
        "target": 30,
        "final": {
            "unjoined": 0,
            "joining": 3,
            "syncing": 0,
            "stable": 30,
            "leaving": 0,
            "stopped": 0,
        },
        "peak_stable": 30,
    }
    assert summary["rebalances"]["count"] == 9 and summary["rebalances"]["max_ms"] == 500
    assert summary["generator"]["cpu_s"] == pytest.approx(0.9)
    assert summary["late_seconds"] == 0
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary)) and on_disk["complete"] is True


def test_a_silent_worker_holds_a_second_back_3_s_then_counts_late(tmp_path: Path) -> None:
    out = tmp_path / "out"
    agg = Aggregator(out, CONFIG, workers=2, thresholds=Thresholds())
    for elapsed_s in range(1, 2 + WAIT_S):
        agg.add(second(0, elapsed_s))
        if elapsed_s == 1:
            agg.add(second(1, 1))
    agg.flush()
    assert [r["elapsed_s"] for r in table(out, "states")] == [1]
    agg.add(second(0, 2 + WAIT_S))  # second 2 is now 3 s behind the newest
    agg.flush()
    rows = table(out, "states")
    assert [r["elapsed_s"] for r in rows] == [1, 2]
    assert rows[1]["stable"] == 10  # worker 0 alone
    requests = agg.summary()["requests"]["count"]

    agg.add(second(1, 2, heartbeats=50))  # late: counted, not merged into written rows
    agg.flush()
    assert [r["elapsed_s"] for r in table(out, "states")] == [1, 2]
    heartbeat_2 = [r for r in table(out, "latency") if r["elapsed_s"] == 2]
    assert [r["count"] for r in heartbeat_2 if r["api"] == "Heartbeat"] == [100]
    summary = agg.summary()
    assert summary["requests"]["count"] == requests + 51
    assert summary["late_seconds"] == 1 and summary["complete"] is False


def test_join_storms_merge_over_the_workers_that_saw_a_group() -> None:
    agg = Aggregator(None, CONFIG, workers=3, thresholds=Thresholds())
    ms = 1_000_000
    storms = {
        0: [("g", 10, 100 * ms, 900 * ms, 650 * ms), ("h", 5, 50 * ms, 250 * ms, 0)],
        1: [("g", 12, 300 * ms, 700 * ms, 600 * ms)],
        2: [],
    }
    for worker, seen in storms.items():
        r = Recorder(worker, cpu_s=0.0)
        for group, members, sent, answered, first_join in seen:
            r.storm(group, members, sent, answered, first_join)
        agg.add(r.take(1, START_MS + 1000, {}, 0, 0.0))
    storm = agg.summary()["join_storm"]
    # g: max(900, 700) - max(100, 300) = 600 ms; h: 200 ms. After the delay, g only (h
    # saw no JoinGroup answered): max(900, 700) - min(650, 600) = 300 ms.
    assert storm == {
        "groups": 2,
        "p50_ms": 200.0,
        "p99_ms": 600.0,
        "max_ms": 600.0,
        "after_delay": {"p50_ms": 300.0, "p99_ms": 300.0, "max_ms": 300.0},
    }


def test_no_storm_no_storm_section() -> None:
    agg = Aggregator(None, CONFIG, workers=1, thresholds=Thresholds())
    agg.add(second(0, 1))
    assert agg.summary()["join_storm"] is None


def test_the_snapshot_shows_the_newest_merged_second_and_the_run_so_far() -> None:
    agg = Aggregator(None, CONFIG, workers=2, thresholds=Thresholds())
    assert agg.snapshot().elapsed_s == 0 and agg.snapshot().apis == {}
    for elapsed_s in (1, 2):
        agg.add(second(0, elapsed_s, heartbeats=200))
        agg.add(second(1, elapsed_s, heartbeats=300))
    agg.add(second(0, 3, heartbeats=7))  # not merged yet: worker 1 has not reported 3
    snap = agg.snapshot()
    assert (snap.elapsed_s, snap.reporting, snap.workers) == (2, 2, 2)
    assert snap.duration_s == 60 and snap.target_members == 30
    hb = snap.apis["Heartbeat"]
    assert hb.requests == 500 and hb.errors == {} and hb.signals == {"REBALANCE_IN_PROGRESS": 50}
    assert snap.apis["OffsetCommit"].errors == {"NOT_COORDINATOR": 2}
    values = heartbeat_ns(0, 2, 200) + heartbeat_ns(1, 2, 300)
    assert hb.p99_ms >= np.percentile(values, 99, method="inverted_cdf") / 1e6
    assert hb.p50_ms <= hb.p99_ms <= hb.p99_9_ms
    assert snap.states["stable"] == 20 and snap.states["leaving"] == 0
    assert snap.cpu_s == pytest.approx(0.2) and snap.connections == 10
    assert snap.requests == 2 * (500 + 2) + 8  # totals include the unmerged second
    assert snap.errors == {"NOT_COORDINATOR": 5}
    assert snap.signals == {"REBALANCE_IN_PROGRESS": 20 + 30 + 20 + 30 + 1}
    assert snap.rebalances == 5 and snap.commits == 5


def test_an_api_with_only_errors_gets_a_row_without_latency(tmp_path: Path) -> None:
    out = tmp_path / "out"
    agg = Aggregator(out, CONFIG, workers=1, thresholds=Thresholds())
    r = Recorder(0, cpu_s=0.0)
    r.error_code(ApiKey.SYNC_GROUP, 25)
    agg.add(r.take(1, START_MS + 1000, {}, 0, 0.0))
    summary = agg.finish("completed", None)
    (row,) = table(out, "latency")
    assert (row["api"], row["count"], row["errors"], row["signals"], row["buckets"]) == (
        "SyncGroup",
        0,
        1,
        0,
        [],
    )
    assert summary["apis"]["SyncGroup"]["p99_ms"] is None
    assert summary["apis"]["SyncGroup"]["errors"] == {"UNKNOWN_MEMBER_ID": 1}


def test_coordinator_moves_merge_over_the_workers_and_their_seconds() -> None:
    """Each worker's members of a moved group, back at its new node in several seconds,
    make one move: every member counted, from the first lost to the last back."""
    agg = Aggregator(None, CONFIG, workers=2, thresholds=Thresholds())
    old, new = ("127.0.0.1", 9092), ("127.0.0.1", 9093)
    seen = {  # worker -> seconds -> (lost, back) of each member back in that second
        0: {1: [(1000, 1040), (1010, 1030)], 2: [(1005, 1900)]},
        1: {1: [(990, 1060)]},
    }
    for worker, seconds in seen.items():
        r = Recorder(worker, cpu_s=0.0)
        r.node(old, 0)
        r.node(new, 1)
        for elapsed_s in (1, 2):
            for lost, back in seconds.get(elapsed_s, []):
                r.moved("g", old, new, START_MS + lost, START_MS + back)
            agg.add(r.take(elapsed_s, START_MS + elapsed_s * 1000, {}, 0, 0.0))
    (move,) = agg.summary()["coordinator_moves"]
    assert move["group"] == "g" and (move["from_node"], move["to_node"]) == (0, 1)
    assert (move["from"], move["to"]) == ("127.0.0.1:9092", "127.0.0.1:9093")
    assert move["members"] == 4 and move["back_ms"] == 1900 - 990
    snapshot = agg.snapshot()
    assert snapshot.moves == 1
    assert [(m.group, m.old, m.new, m.members, m.back_ms) for m in snapshot.latest_moves] == [
        ("g", "0@127.0.0.1:9092", "1@127.0.0.1:9093", 4, 910)
    ]


def test_no_moves_no_moves_listed() -> None:
    agg = Aggregator(None, CONFIG, workers=1, thresholds=Thresholds())
    agg.add(second(0, 1))
    assert agg.summary()["coordinator_moves"] == []
    assert agg.snapshot().moves == 0
