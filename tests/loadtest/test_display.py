"""What the operator sees: the live view and the end table hold the run's figures, and off a
terminal the view becomes one plain line every 5 s (virtual time)."""

from __future__ import annotations

import io

from rich.console import Console

from fastcoord.loadtest.aggregate import Aggregator, Snapshot
from fastcoord.loadtest.display import LiveDisplay, plain_line, print_summary, render
from fastcoord.loadtest.stats import Recorder
from fastcoord.loadtest.summary import Thresholds
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode

from .workers import START_MS

MS = 1_000_000


def aggregator(thresholds: Thresholds | None = None) -> Aggregator:
    """Two seconds of one worker: 1,200 Heartbeats a second (1 ms, 5 of them 7 ms), three
    OffsetCommits (4 ms), errors and a rebalance; 900 members stable of 1,000."""
    agg = Aggregator(
        None,
        {"members": 1000, "duration_s": 30},
        workers=1,
        thresholds=thresholds or Thresholds(),
    )
    for elapsed_s in (1, 2):
        r = Recorder(0, cpu_s=0.0)
        for i in range(1200):
            r.record(ApiKey.HEARTBEAT, 7 * MS if i < 5 else MS, 0)
        for _ in range(3):
            r.record(ApiKey.OFFSET_COMMIT, 4 * MS, 0)
            r.commit(2)
        r.record(ApiKey.HEARTBEAT, MS, ErrorCode.REBALANCE_IN_PROGRESS)
        r.error(ApiKey.SYNC_GROUP, ErrorCode.UNKNOWN_MEMBER_ID, "g", "m", START_MS)
        r.rebalance("g", "m", None, 2, START_MS, START_MS + 120, "join", False)
        r.unexpected_expiration()
        states = {"stable": 900, "joining": 60, "syncing": 40}
        agg.add(r.take(elapsed_s, START_MS + elapsed_s * 1000, states, 1000, 0.45))
    return agg


def text_of(renderable: object) -> str:
    console = Console(record=True, width=160)
    console.print(renderable)
    return console.export_text()


def test_the_live_view_holds_the_newest_seconds_figures() -> None:
    text = text_of(render(aggregator().snapshot()))
    assert "2 s / 30 s (joining)" in text and "workers 1/1" in text
    assert "generator CPU 45% of a core" in text and "connections 1,000" in text
    assert "members of 1,000: unjoined 0 joining 60 syncing 40 stable 900" in text
    heartbeat = next(line for line in text.splitlines() if "Heartbeat" in line)
    # 1,201 requests; p50 and p99 in 1 ms's bucket, [992, 1024) us; p99.9 among the 7 ms.
    cells = [cell.strip() for cell in heartbeat.split("│")[1:-1]]
    assert cells == ["Heartbeat", "1,201", "1.02", "1.02", "7.00", "-", "REBALANCE_IN_PROGRESS 1"]
    sync = next(x for x in text.splitlines() if "SyncGroup" in x)
    assert [cell.strip() for cell in sync.split("│")[1:-1]][-2:] == ["UNKNOWN_MEMBER_ID 1", "-"]
    assert (
        "2,408 requests, 2 errors (UNKNOWN_MEMBER_ID 2), 2 signals (REBALANCE_IN_PROGRESS 2)"
        in text
    )
    assert "rebalances 2 (2 unexpected)" in text and "commits 6" in text


def test_off_a_terminal_one_plain_line_every_5_s() -> None:
    now = [100.0]
    out = io.StringIO()
    console = Console(file=out, width=300)
    assert not console.is_terminal
    snapshot = aggregator().snapshot()
    with LiveDisplay(console, clock=lambda: now[0]) as display:
        for _ in range(11):  # 10 s in steps of 1
            display.update(snapshot)
            now[0] += 1
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # at 0, 5 and 10 s
    assert lines[0] == plain_line(snapshot)
    assert "2 s / 30 s" in lines[0] and "1,204 requests/s" in lines[0]
    assert "Heartbeat 1.02" in lines[0] and "OffsetCommit 4.00" in lines[0]
    assert "stable 900" in lines[0] and "CPU 45%" in lines[0]
    assert "errors: UNKNOWN_MEMBER_ID 2 | signals: REBALANCE_IN_PROGRESS 2" in lines[0]


def test_on_a_terminal_the_view_is_redrawn_live() -> None:
    console = Console(record=True, width=120, force_terminal=True)
    snapshot: Snapshot = aggregator().snapshot()
    with LiveDisplay(console) as display:
        display.update(snapshot)
    assert "members of 1,000" in console.export_text()


def test_the_end_table_holds_the_summary() -> None:
    limits = Thresholds(max_error_rate=0.5, max_p99_ms=0.5)
    summary = aggregator(limits).finish("completed", None)
    console = Console(record=True, width=160)
    print_summary(summary, console)
    text = console.export_text()
    assert "completed after 2 s, 2,408 requests" in text
    assert (
        "no steady phase: the members were never all stable at once (900 of 1,000 at most)" in text
    )
    assert "whole run, 2,408 requests, 2 errors, 2 signals" in text
    heartbeat = next(line for line in text.splitlines() if "Heartbeat" in line)
    cells = [cell.strip() for cell in heartbeat.split("│")[1:-1]]
    assert cells == [
        "Heartbeat",
        "2,402",
        "1,201",
        "1.02",
        "1.02",
        "7.00",
        "7.00",
        "-",
        "REBALANCE_IN_PROGRESS 2",
    ]
    assert "rebalances seen by members: 2 (2 unexpected)" in text and "max 120 ms" in text
    assert "unexpected expirations: 2" in text
    assert "commits: 6 of 12 offsets, 0 errors, 0 signals" in text
    assert "generator: workers 1, CPU 0.9 s, 0.45 cores" in text
    assert "peak stable 900" in text and "target 1,000" in text
    assert "verdict: failed" in text
    assert "Heartbeat p99 1.024 ms is above the limit 0.5 ms over the whole run." in text
    assert "OffsetCommit p99 4.000 ms is above the limit 0.5 ms over the whole run." in text


def test_coordinator_moves_are_shown_live_and_at_the_end() -> None:
    agg = aggregator()
    r = Recorder(0, cpu_s=0.0)
    old, new = ("127.0.0.1", 9092), ("127.0.0.1", 9093)
    r.node(old, 0)
    r.node(new, 1)
    r.moved("g", old, new, START_MS + 3000, START_MS + 3058)
    agg.add(r.take(3, START_MS + 3000, {"stable": 1000}, 1000, 0.1))
    snapshot = agg.snapshot()
    moves = "coordinator moves: 1 groups; latest: g 0@127.0.0.1:9092 -> 1@127.0.0.1:9093: "
    moves += "1 members served there 58.00 ms after the first lost it"
    assert moves in text_of(render(snapshot)).replace("\n", " ")
    assert plain_line(snapshot).endswith(moves)
    console = Console(record=True, width=200)
    print_summary(agg.summary(complete=True, outcome="completed"), console)
    text = console.export_text()
    assert "coordinator moves seen by members: 1 groups, each served at its new node 58.00" in text
    assert "  g: 0@127.0.0.1:9092 -> 1@127.0.0.1:9093 at " in text
    # Without moves, nothing is said of them.
    assert "coordinator moves" not in text_of(render(aggregator().snapshot()))
