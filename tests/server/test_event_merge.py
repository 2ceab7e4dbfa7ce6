"""Merging the event log: which files a merge takes, and, for random flushes, passes, stops
at any moment of a merge and restarts, that reading gives every event once, in order."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from fastcoord.server import event_merge
from fastcoord.server.event_files import EventFile, flush_name, parse, scan
from fastcoord.server.event_log import EventLog
from fastcoord.server.event_merge import Merge, plan, rolls
from tests.server.test_event_log import T0, Crash, events, flush, hidden, leftovers, stamps


def file(n: int, first_ms: int, size: int = 100, level: int = 0, closed: bool = False) -> EventFile:
    name = flush_name(first_ms, 1, n)
    return EventFile(name, first_ms, 1, n, level, closed, size)


def names(merge: Merge | None) -> list[int]:
    assert merge is not None
    return [f.n for f in merge.inputs]


def test_a_roll_closes_at_roll_bytes_or_before_a_file_roll_ms_later() -> None:
    run = [file(i, T0 + i * 10, size=100) for i in range(10)]
    assert [len(r) for r in rolls(run, 250, 10**9)] == [3, 3, 3, 1]
    assert [len(r) for r in rolls(run, 10**9, 35)] == [4, 4, 2]
    assert [len(r) for r in rolls(run, 250, 15)] == [2, 2, 2, 2, 2]


def test_closed_rolls_are_merged_whole_the_open_one_by_levels() -> None:
    files = [file(i, T0 + i * 10) for i in range(12)]
    # The first two rolls are closed: each is one merge; the third is open, too short.
    assert names(plan(files, 10**9, 40, fanin=4)) == [0, 1, 2, 3]
    rolled = [file(0, T0, closed=True), file(4, T0 + 40, closed=True)]
    assert names(plan(rolled + files[8:], 10**9, 40, fanin=4)) == [8, 9, 10, 11]
    assert plan(rolled + files[8:11], 10**9, 40, fanin=4) is None
    # In the open roll, files of one level go `fanin` at a time, a level up.
    tiers = [file(0, T0, level=2), *[file(i, T0 + i, level=1) for i in range(1, 5)]]
    merge = plan(tiers, 10**9, 10**9, fanin=4)
    assert merge is not None and names(merge) == [1, 2, 3, 4] and merge.level == 2
    assert parse(merge.output)[3:] == (2, False)  # type: ignore[index]


def test_a_lone_file_is_not_rewritten_and_barriers_split_rolls() -> None:
    big = file(0, T0, size=1000)
    assert plan([big, file(1, T0 + 1)], 500, 10**9) is None  # closed alone: nothing to merge
    damaged = file(2, T0 + 2)
    files = [file(0, T0), file(1, T0 + 1), damaged, file(3, T0 + 3)]
    # A file that cannot be read ends the roll before it; nothing crosses it.
    assert names(plan(files, 10**9, 10**9, skip={damaged.name})) == [0, 1]
    assert plan(files[2:], 10**9, 10**9, skip={damaged.name}) is None


def test_a_merge_takes_at_most_max_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_merge, "MAX_INPUTS", 5)
    files = [file(i, T0 + i) for i in range(12)] + [file(12, T0 + 10**6)]
    merge = plan(files, 10**9, 10**5)
    assert merge is not None and names(merge) == [0, 1, 2, 3, 4] and not merge.closed


flush_op = st.tuples(st.just("flush"), st.integers(1, 30), st.integers(1, 3000))
pass_op = st.tuples(st.just("pass"), st.integers(0, 12))  # stop at that step; 0: never
ops = st.lists(
    st.one_of(flush_op, flush_op, flush_op, pass_op, st.tuples(st.just("restart"), st.just(0))),
    min_size=5,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(
    ops=ops,
    roll_bytes=st.sampled_from([3000, 12_000, 10**9]),
    roll_ms=st.sampled_from([2000, 6000, 10**9]),
    fanin=st.integers(2, 4),
)
def test_random_flushes_passes_stops_and_restarts_read_each_event_once(
    ops: list[tuple[str, int] | tuple[str, int, int]], roll_bytes: int, roll_ms: int, fanin: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setattr(event_merge, "ROW_GROUP_ROWS", 16)  # a merge writes in several steps
        d = Path(tmp)

        def start() -> EventLog:
            log = EventLog(d, 1000, roll_bytes, roll_ms, clock=lambda: T0)
            log.merger.fanin = fanin
            assert not hidden(d) and not leftovers(d)
            return log

        log = start()
        expected: list[int] = []
        at = T0
        for op in ops:
            if op[0] == "flush":
                _, rows, gap = op  # type: ignore[misc]
                flush(log, events(rows, at))
                expected.extend(range(at, at + rows))
                at += rows + gap
            elif op[0] == "pass":
                seen: list[str] = []

                def step(stage: str, stop_at: int = op[1], seen: list[str] = seen) -> None:
                    seen.append(stage)
                    if len(seen) == stop_at:
                        raise Crash  # a SIGKILL here: the process is gone

                log.merger.step = step
                try:
                    log.merger.run_pass()
                except Crash:
                    event(f"stopped at {seen[-1]}")
                    log = start()  # only a restart follows a crash
                event(f"merges in a pass: {min(seen.count('committed'), 2)}")
            else:
                log = start()
            assert stamps(d) == expected
        log = start()
        log.merger.run_pass()
        assert stamps(d) == expected
        if expected:
            assert plan(scan(d), roll_bytes, roll_ms, fanin) is None  # it does all it can
        assert not [n for n in os.listdir(d) if parse(n) is None]
