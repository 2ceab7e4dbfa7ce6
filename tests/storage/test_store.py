"""The offsets store under Trio: with fsync batch, a write is synced when the event loop
has nothing left to run (the store's watcher tells the appender), not when the linger is
over."""

from __future__ import annotations

from pathlib import Path

import trio

from fastcoord.core.records import OffsetCommitKey, OffsetCommitValue, Record
from fastcoord.protocol.errors import ErrorCode
from fastcoord.storage import segment
from fastcoord.storage.store import OffsetsStore

WAIT_S = 30.0  # bounds a real wait, which is over in milliseconds; the linger is an hour


def test_batch_syncs_appends_once_the_loop_is_idle(tmp_path: Path) -> None:
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
                record = Record(
                    OffsetCommitKey("g", "t", token), OffsetCommitValue(token, -1, "", 1)
                )
                store.append(token, [record], lambda group: 0)
            with trio.fail_after(WAIT_S):
                await acknowledged.wait()
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        store.close()
    assert [t for tokens, _ in reports for t in tokens] == [1, 2, 3]
    assert all(error == ErrorCode.NONE for _, error in reports)
    log_file = next((tmp_path / "__consumer_offsets-0").glob("*.log"))
    assert len(segment.scan(log_file.read_bytes()).records) == 3
