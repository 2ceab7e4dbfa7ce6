"""The event log: batches become Parquet files that read back as they went in; a disk that
falls behind costs counted, dropped events, never unbounded memory."""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import trio

from fastcoord.core.result import Event
from fastcoord.server import event_log, event_merge
from fastcoord.server.event_files import replaced_by, scan
from fastcoord.server.event_log import EventLog


def events(n: int, start_ms: int = 1_700_000_000_000) -> list[Event]:
    kinds = ["member_joined", "rebalance_started", "rebalance_completed", "offsets_committed"]
    return [
        Event(
            at_ms=start_ms + i,
            kind=kinds[i % len(kinds)],
            group_id=f"g{i % 7}",
            member_id=None if i % 3 == 0 else f"m-{i}",
            generation=i % 5,
            members=i % 11,
            duration_ms=i * 2,
            reason="why" if i % 2 else "",
        )
        for i in range(n)
    ]


def test_batches_read_back_in_order(tmp_path: Path) -> None:
    written = events(2500)

    async def main() -> EventLog:
        log = EventLog(tmp_path / "events", flush_ms=600_000)
        for chunk in range(0, 2500, 1000):
            log.add(written[chunk : chunk + 1000])
            await log.flush()
        await log.flush()  # nothing pending: no empty file
        return log

    log = trio.run(main)
    assert log.written == 2500
    assert len(list((tmp_path / "events").glob("events-*.parquet"))) == 3
    assert not list((tmp_path / "events").glob("*.tmp"))
    rows = event_log.read(tmp_path / "events").to_pylist()
    assert [r["at"].timestamp() * 1000 for r in rows] == [e.at_ms for e in written]
    for row, e in zip(rows, written, strict=True):
        assert (row["kind"], row["group_id"], row["member_id"]) == (e.kind, e.group_id, e.member_id)
        assert (row["generation"], row["members"], row["duration_ms"], row["reason"]) == (
            e.generation,
            e.members,
            e.duration_ms,
            e.reason,
        )


def test_an_empty_directory_reads_as_an_empty_table(tmp_path: Path) -> None:
    table = event_log.read(tmp_path)
    assert table.num_rows == 0 and table.schema == event_log.SCHEMA


def test_a_full_batch_is_written_before_the_interval(tmp_path: Path) -> None:
    async def main() -> int:
        log = EventLog(tmp_path, flush_ms=600_000)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run)
            log.add(events(event_log.BATCH_ROWS))
            with trio.fail_after(30):
                while log.written < event_log.BATCH_ROWS:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        return log.written

    assert trio.run(main) == event_log.BATCH_ROWS


def test_beyond_the_bound_events_are_dropped_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(event_log, "MAX_BUFFERED", 100)
    log = EventLog(tmp_path, flush_ms=1000)
    log.add(events(60))
    log.add(events(60))
    assert (len(log.pending), log.dropped) == (100, 20)
    trio.run(log.flush)
    assert "20 events dropped" in caplog.text
    assert log.written == 100 and log.dropped == 0


def test_an_unwritable_directory_loses_the_batch_not_the_server(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = EventLog(tmp_path / "events", flush_ms=1000)
    (tmp_path / "events").rmdir()
    (tmp_path / "events").write_text("not a directory")
    log.add(events(5))
    trio.run(log.flush)
    assert "cannot write" in caplog.text and "5 events lost" in caplog.text
    assert log.written == 0


# -- rolling, merging, retention -----------------------------------------------------------

T0 = 1_700_000_000_000
DAY_MS = 86_400_000


def flush(log: EventLog, *batches: list[Event]) -> None:
    async def main() -> None:
        for batch in batches:
            log.add(batch)
            await log.flush()

    trio.run(main)


def stamps(directory: Path) -> list[int]:
    """The `at` of every event read back, as ms: the tests give each event its own."""
    return [int(ms) for ms in event_log.read(directory).column("at").cast(pa.int64()).to_pylist()]


def hidden(directory: Path) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.startswith("."))


def leftovers(directory: Path) -> list[str]:
    """Files that a merged file replaced and that are still there."""
    found = scan(directory)
    replaced = {name for f in found if f.merged for name in replaced_by(directory / f.name)}
    return sorted(f.name for f in found if f.name in replaced)


def test_many_flushes_are_merged_into_few_files_by_size(tmp_path: Path) -> None:
    d = tmp_path / "events"
    log = EventLog(d, flush_ms=1000, roll_ms=DAY_MS, clock=lambda: T0)
    expected: list[int] = []
    for i in range(60):
        batch = events(200, T0 + i * 1000)
        flush(log, batch)
        expected += [e.at_ms for e in batch]
        if i == 0:
            one = scan(d)[0].size
            log.merger.roll_bytes = 8 * one
        log.merger.run_pass()
        assert stamps(d) == expected  # at every step: each event once, in order
    files = scan(d)
    rolled = [f for f in files if f.closed]
    assert len(rolled) == 7 and len(files) <= 7 + 7  # and the open roll's few flushes
    for f in rolled:
        inputs = replaced_by(d / f.name)
        assert len(inputs) == 8  # the roll closed with the file that reached roll_bytes
        assert f.size < 8 * one  # one footer instead of eight
        assert pq.read_metadata(d / f.name).num_row_groups == 1
    assert not hidden(d) and not leftovers(d)


def test_a_roll_closes_when_it_spans_roll_ms(tmp_path: Path) -> None:
    d = tmp_path / "events"
    log = EventLog(d, flush_ms=1000, roll_ms=10_000, clock=lambda: T0)
    expected: list[int] = []
    for i in range(50):
        batch = events(20, T0 + i * 1500)
        flush(log, batch)
        expected += [e.at_ms for e in batch]
        if i % 5 == 4:
            log.merger.run_pass()
            assert stamps(d) == expected
    rolled = [f for f in scan(d) if f.closed]
    assert len(rolled) == 7  # 75 s of events in rolls of 10 s, the last still open
    for f, following in itertools.pairwise(rolled):
        at = pq.read_table(d / f.name, columns=["at"]).column("at").cast(pa.int64())
        assert at[-1].as_py() - at[0].as_py() < 10_000
        assert following.first_ms >= f.first_ms + 10_000


def test_the_open_roll_stays_a_few_files(tmp_path: Path) -> None:
    d = tmp_path / "events"
    log = EventLog(d, flush_ms=1000, clock=lambda: T0)
    log.merger.fanin = 4
    expected: list[int] = []
    for i in range(40):
        batch = events(10, T0 + i * 100)
        flush(log, batch)
        expected += [e.at_ms for e in batch]
        log.merger.run_pass()
        assert stamps(d) == expected
        assert len(scan(d)) <= 3 * 3  # fewer than `fanin` of each level
    # 40 flushes, merged 4 at a time, then 4 of those: 40 = 2 * 16 + 2 * 4
    assert [f.level for f in scan(d)] == [2, 2, 1, 1]
    assert not any(f.closed for f in scan(d))


class Crash(BaseException):
    """A stop where a SIGKILL could land: nothing after it runs, no clean-up either."""


STAGES = [("writing", 1), ("written", 1), ("committed", 1), ("input deleted", 1)]
STAGES += [("input deleted", 5)]


@pytest.mark.parametrize(("stage", "nth"), STAGES)
def test_a_merge_stopped_at_any_stage_loses_nothing_and_is_finished_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str, nth: int
) -> None:
    monkeypatch.setattr(event_merge, "ROW_GROUP_ROWS", 100)  # several row groups to write
    d = tmp_path / "events"
    batches = [events(60, T0 + i * 1000) for i in range(6)] + [events(5, T0 + 20_000)]
    expected = [e.at_ms for b in batches for e in b]
    log = EventLog(d, flush_ms=1000, roll_ms=10_000, clock=lambda: T0)
    flush(log, *batches)
    seen = 0

    def step(name: str) -> None:
        nonlocal seen
        seen += name == stage
        if name == stage and seen == nth:
            raise Crash

    log.merger.step = step
    with pytest.raises(Crash):
        log.merger.run_pass()
    before = {f.name for f in scan(d)}
    if stage in ("writing", "written"):
        assert len(hidden(d)) == 1 and not any(f.closed for f in scan(d))
    else:
        assert not hidden(d) and len(leftovers(d)) == 6 - (nth if stage != "committed" else 0)
    assert stamps(d) == expected

    restarted = EventLog(d, flush_ms=1000, roll_ms=10_000, clock=lambda: T0)
    assert not hidden(d) and not leftovers(d)
    assert {f.name for f in scan(d)} <= before
    assert stamps(d) == expected
    restarted.merger.run_pass()
    assert [f.closed for f in scan(d)] == [True, False]
    assert stamps(d) == expected


def test_leftover_temporary_files_are_never_read_and_go_at_start(tmp_path: Path) -> None:
    d = tmp_path / "events"
    log = EventLog(d, flush_ms=1000, clock=lambda: T0)
    flush(log, events(10, T0))
    name = scan(d)[0].name
    # A half-written file as this version names it, and as earlier versions did.
    (d / f".events-{T0:013d}-1-000002.parquet.tmp").write_bytes(b"PAR1 half a file")
    (d / f"events-{T0 + 5:013d}-1-000003.parquet.tmp").write_bytes(b"PAR1 half a file")
    (d / f".{name}.tmp").write_bytes(b"PAR1")
    assert stamps(d) == list(range(T0, T0 + 10))
    EventLog(d, flush_ms=1000, clock=lambda: T0)
    assert os.listdir(d) == [name]


def test_files_written_by_earlier_versions_are_read_merged_and_numbered_past(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "events"
    d.mkdir()
    old = [events(30, T0 + i * 1000) for i in range(3)]
    for n, batch in enumerate(old, start=1):
        # As earlier versions wrote them: without the node's column.
        table = event_log.to_table(batch).drop_columns(["node_id"])
        pq.write_table(table, d / f"events-{batch[0].at_ms:013d}-77-{n:06d}.parquet")
    log = EventLog(d, flush_ms=1000, roll_ms=10_000, clock=lambda: T0, node_id=4)
    new = [events(30, T0 + 3000), events(5, T0 + 20_000)]
    flush(log, *new)
    assert [f.n for f in scan(d)] == [1, 2, 3, 4, 5]  # numbered past the old ones
    expected = [e.at_ms for b in old + new for e in b]
    nodes = [None] * 90 + [4] * 35  # an older file's rows: no node
    assert stamps(d) == expected
    assert event_log.read(d).column("node_id").to_pylist() == nodes
    log.merger.run_pass()
    assert "cannot" not in caplog.text
    rolled, last = scan(d)
    assert rolled.closed and rolled.pid == 77 and len(replaced_by(d / rolled.name)) == 4
    assert last.n == 5 and not last.merged
    assert stamps(d) == expected
    assert event_log.read(d).column("node_id").to_pylist() == nodes


def test_each_row_names_the_node_that_wrote_it(tmp_path: Path) -> None:
    flush(EventLog(tmp_path / "a", flush_ms=1000), events(5))
    flush(EventLog(tmp_path / "b", flush_ms=1000, node_id=7), events(5))
    assert event_log.read(tmp_path / "a").column("node_id").to_pylist() == [0] * 5
    assert event_log.read(tmp_path / "b").column("node_id").to_pylist() == [7] * 5


def test_retention_deletes_only_files_whose_newest_event_is_older(tmp_path: Path) -> None:
    d = tmp_path / "events"
    now = T0 + 10 * DAY_MS
    log = EventLog(d, flush_ms=1000, retention_ms=DAY_MS, clock=lambda: now)
    old = events(10, T0)
    straddling = [*events(5, now - DAY_MS - 60_000), *events(5, now - DAY_MS + 60_000)]
    recent = events(10, now - 1000)
    flush(log, old, straddling, recent)
    log.merger.run_pass()
    assert stamps(d) == [e.at_ms for e in straddling + recent]
    now += 30_000  # not yet due again: nothing is looked at
    log.merger.run_pass()
    assert len(scan(d)) == 2
    now += event_merge.RETENTION_CHECK_MS  # now the straddling file's newest event is old
    log.merger.run_pass()
    assert stamps(d) == [e.at_ms for e in recent]


def test_run_merges_in_a_worker_thread_and_close_writes_the_rest(tmp_path: Path) -> None:
    d = tmp_path / "events"
    expected: list[int] = []

    async def main() -> None:
        log = EventLog(d, flush_ms=10, roll_ms=200, clock=lambda: T0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run)
            with trio.fail_after(30):
                i = 0
                while sum(f.closed for f in scan(d)) < 3:
                    batch = events(10, T0 + i * 50)
                    log.add(batch)
                    expected.extend(e.at_ms for e in batch)
                    i += 1
                    await trio.sleep(0.01)
            log.add(events(10, T0 + i * 50))
            expected.extend(range(T0 + i * 50, T0 + i * 50 + 10))
            await log.close()
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert stamps(d) == expected
    assert not hidden(d) and not leftovers(d)


def test_close_stops_a_merge_under_way(tmp_path: Path) -> None:
    d = tmp_path / "events"
    batches = [events(10, T0 + i * 1000) for i in range(4)] + [events(1, T0 + 20_000)]
    in_merge = threading.Event()

    async def main() -> None:
        log = EventLog(d, flush_ms=600_000, roll_ms=10_000, clock=lambda: T0)

        def step(name: str) -> None:
            if name == "written":
                in_merge.set()
                assert log.merger.stop.wait(30)

        log.merger.step = step
        async with trio.open_nursery() as nursery:
            nursery.start_soon(log.run)
            for batch in batches:
                log.add(batch)
                await log.flush()
            with trio.fail_after(30):
                while not in_merge.is_set():
                    await trio.sleep(0.01)
            await log.close()
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert not hidden(d) and not any(f.merged for f in scan(d))  # stopped before its commit
    assert stamps(d) == [e.at_ms for b in batches for e in b]


def test_a_reader_during_merges_sees_each_event_once(tmp_path: Path) -> None:
    d = tmp_path / "events"
    log = EventLog(d, flush_ms=1000, roll_ms=2000, clock=lambda: T0)
    log.merger.fanin = 3
    done = threading.Event()
    reads: list[list[int]] = []

    def reader() -> None:
        while not done.is_set():
            reads.append(stamps(d))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(60):
            flush(log, events(20, T0 + i * 100))
            log.merger.run_pass()
    finally:
        done.set()
        thread.join()
    expected = [T0 + i * 100 + j for i in range(60) for j in range(20)]
    assert stamps(d) == expected
    assert len(reads) > 5
    for got in reads:
        assert got == sorted(set(got)) and set(got) <= set(expected)


def test_an_unreadable_file_is_left_alone_and_the_rest_merged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "events"
    log = EventLog(d, flush_ms=1000, roll_ms=10_000, clock=lambda: T0)
    flush(log, *[events(10, T0 + i * 1000) for i in range(5)])
    damaged = scan(d)[2]
    (d / damaged.name).write_bytes(b"PAR1 not a Parquet file")
    flush(log, events(10, T0 + 20_000))
    log.merger.run_pass()
    log.merger.run_pass()
    assert caplog.text.count("cannot read") == 1
    files = scan(d)
    assert [(f.name == damaged.name, f.closed) for f in files] == [
        (False, True),  # the two before it
        (True, False),
        (False, True),  # the two after it
        (False, False),
    ]
