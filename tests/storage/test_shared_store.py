"""A data directory shared by nodes: each partition's log is held by one node at a time.

Partitions move between nodes, so each is taken and let go under a lock of its own: the
new owner gets the lock only after the old one has written what it had and let go (or
died: the kernel drops a dead process's flock), and then reads every record it wrote.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

from fastcoord.core.records import LogEntry, OffsetCommitKey, OffsetCommitValue, Record
from fastcoord.protocol.errors import ErrorCode
from fastcoord.storage.lock import DataDirLock, PartitionLocked
from fastcoord.storage.log import directory
from fastcoord.storage.store import OffsetsStore

WAIT_S = 30.0  # bounds a real wait, which is over in milliseconds


def record(group: str, n: int) -> Record:
    return Record(OffsetCommitKey(group, "t", n), OffsetCommitValue(n, -1, "", 1))


def shared(data_dir: Path) -> OffsetsStore:
    store = OffsetsStore(data_dir, 50, 1 << 20, "always", 5, shared=True)
    store.open()
    return store


def append_all(
    store: OffsetsStore, appends: list[list[Record]], partition_of: dict[str, int]
) -> None:
    """Run the store's appender until every append is reported durable."""
    reports: list[tuple[list[int], ErrorCode]] = []

    async def main() -> None:
        acknowledged = trio.Event()

        def done(tokens: list[int], error: ErrorCode) -> None:
            reports.append((tokens, error))
            if sum(len(t) for t, _ in reports) == len(appends):
                acknowledged.set()

        store.start(trio.lowlevel.current_trio_token().run_sync_soon, done)
        for token, records in enumerate(appends, 1):
            store.append(token, list[LogEntry](records), partition_of.__getitem__)
        with trio.fail_after(WAIT_S):
            await acknowledged.wait()

    trio.run(main)
    assert all(error == ErrorCode.NONE for _, error in reports)


def test_a_partition_is_held_by_one_store_and_read_whole_by_the_next(tmp_path: Path) -> None:
    first, second = shared(tmp_path), shared(tmp_path)
    try:
        first.acquire(3)
        with pytest.raises(PartitionLocked, match=r"__consumer_offsets-3 is held by pid \d+"):
            second.acquire(3)
        second.acquire(4)  # another partition is free
        append_all(first, [[record("a", 1)], [record("a", 2)]], {"a": 3})
        first.release(3)
        assert 3 not in first.logs
        second.acquire(3)
        assert second.recover(3) == [record("a", 1), record("a", 2)]
    finally:
        first.close()
        second.close()


def test_a_shared_directory_is_not_locked_whole(tmp_path: Path) -> None:
    stores = [shared(tmp_path), shared(tmp_path)]
    try:
        assert stores[0].logs == {} and stores[0].partitions == []
        DataDirLock(tmp_path / "elsewhere").acquire()  # (a lone server's lock still works)
    finally:
        for store in stores:
            store.close()


def test_records_of_a_partition_let_go_are_dropped_and_the_rest_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = shared(tmp_path)
    try:
        store.acquire(1)
        append_all(store, [[record("mine", 1), record("gone", 2)]], {"mine": 1, "gone": 2})
        assert store.recover(1) == [record("mine", 1)]
        assert not directory(tmp_path, 2).exists()
    finally:
        store.close()
    assert "records of offsets partition 2 dropped: not held here" in caplog.text


def test_the_partitions_of_a_killed_holder_can_be_taken_at_once(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path;"
            "from fastcoord.storage.lock import PartitionLock;"
            f"PartitionLock(Path({str(directory(tmp_path, 5))!r})).acquire();"
            "print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    store = shared(tmp_path)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(PartitionLocked, match=f"held by pid {holder.pid}"):
            store.acquire(5)
        holder.kill()
        holder.wait(timeout=WAIT_S)
        store.acquire(5)
        assert 5 in store.logs
    finally:
        holder.kill()
        holder.wait(timeout=WAIT_S)
        if holder.stdout is not None:
            holder.stdout.close()
        store.close()
