"""The offsets store under Trio, fsync batch: appends are handed to the appender, written
and synced when the event loop has nothing left to run (the store's watcher), or once the
linger has passed for a loop that stays busy."""

from __future__ import annotations

from pathlib import Path

import trio

from fastcoord.core.records import OffsetCommitKey, OffsetCommitValue, Record
from fastcoord.protocol.errors import ErrorCode
from fastcoord.storage import segment
from fastcoord.storage.store import OffsetsStore

WAIT_S = 30.0  # bounds a real wait, which is over in milliseconds


def record(n: int) -> Record:
    return Record(OffsetCommitKey("g", "t", n), OffsetCommitValue(n, -1, "", 1))


def synced_records(tmp_path: Path) -> int:
    log_file = next((tmp_path / "__consumer_offsets-0").glob("*.log"))
    return len(segment.scan(log_file.read_bytes()).records)


def test_batch_syncs_appends_once_the_loop_is_idle(tmp_path: Path) -> None:
    """1 finds nothing under way and goes at once; 2 and 3, handed over in the same pass,
    are held until the loop is idle: with a linger of an hour, only that can have them
    synced."""
    reports: list[tuple[list[int], ErrorCode]] = []
    store = OffsetsStore(tmp_path, 1, 1 << 20, "batch", 3_600_000)
    store.open()

    async def main() -> None:
        acknowledged = trio.Event()

        def done(tokens: list[int], error: ErrorCode) -> None:
            reports.append((tokens, error))
            if sum(len(t) for t, _ in reports) == 3:
                acknowledged.set()

        store.start(trio.lowlevel.current_trio_token().run_sync_soon, done)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.watch_idle)
            for token in (1, 2, 3):  # handed over in one pass of the loop
                store.append(token, [record(token)], lambda group: 0)
            with trio.fail_after(WAIT_S):
                await acknowledged.wait()
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        store.close()
    assert [t for tokens, _ in reports for t in tokens] == [1, 2, 3]
    assert all(error == ErrorCode.NONE for _, error in reports)
    assert synced_records(tmp_path) == 3


def test_batch_syncs_no_later_than_the_linger_for_a_loop_that_stays_busy(
    tmp_path: Path,
) -> None:
    """A task that never blocks keeps the loop from going idle: 2, held behind 1, is
    handed over when the linger (50 ms) has passed, while that task still runs."""
    reports: list[tuple[list[int], ErrorCode]] = []
    gave_up: list[bool] = []  # the busy task ran out of time before the acknowledgement
    store = OffsetsStore(tmp_path, 1, 1 << 20, "batch", 50)
    store.open()

    async def main() -> None:
        acknowledged = trio.Event()

        def done(tokens: list[int], error: ErrorCode) -> None:
            reports.append((tokens, error))
            if 2 in tokens:
                acknowledged.set()

        async def busy() -> None:
            try:
                with trio.move_on_after(WAIT_S):
                    while not acknowledged.is_set():
                        await trio.sleep(0)  # always runnable: the loop is never idle
            finally:
                gave_up.append(not acknowledged.is_set())

        store.start(trio.lowlevel.current_trio_token().run_sync_soon, done)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.watch_idle)
            nursery.start_soon(busy)
            for token in (1, 2):
                store.append(token, [record(token)], lambda group: 0)
            await acknowledged.wait()
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        store.close()
    assert gave_up == [False]
    assert [t for tokens, _ in reports for t in tokens] == [1, 2]
    assert all(error == ErrorCode.NONE for _, error in reports)
    assert synced_records(tmp_path) == 2
