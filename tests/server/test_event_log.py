"""The event log: batches become Parquet files that read back as they went in; a disk that
falls behind costs counted, dropped events, never unbounded memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from fastcoord.core.result import Event
from fastcoord.server import event_log
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
