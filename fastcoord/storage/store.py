"""The offsets store: a log per coordinator partition under the data directory, the lock
that keeps a second server out, the appender that makes writes durable, and the cleaner
that compacts what they wrote.

The server opens it before it listens (a locked or damaged data directory stops the start
with a clear error), recovers each partition's records in a worker thread while clients
are already answered (COORDINATOR_LOAD_IN_PROGRESS for groups not yet loaded), and gives
it each Result's records with their append token. A partition is cleaned only once it has
been loaded (`loaded`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple, Protocol

import trio
import trio.testing

from fastcoord.core.records import LogEntry, OffsetCommits, Record
from fastcoord.storage import segment
from fastcoord.storage.appender import Appender, Done, Policy
from fastcoord.storage.cleaner import LogCleaner
from fastcoord.storage.lock import DataDirLock, PartitionLock
from fastcoord.storage.log import PartitionLog, directory
from fastcoord.storage.native import offset_records

log = logging.getLogger("fastcoord.storage")


class Store(Protocol):
    """What the server needs of a store: this durable one, or MemoryStore (--in-memory)."""

    @property
    def appender(self) -> Appender | None: ...

    def open(self) -> None: ...

    def log_bytes(self) -> dict[int, int]: ...

    def recover(self, partition: int) -> list[Record]: ...

    def start(self, report: Callable[[Callable[[], None]], None], done: Done) -> None: ...

    async def watch_idle(self) -> None: ...

    def loaded(self, partition: int) -> None: ...

    def acquire(self, partition: int) -> None: ...

    def release(self, partition: int) -> None: ...

    def append(
        self, token: int, records: list[LogEntry], partition_of: Callable[[str], int]
    ) -> None: ...

    def close(self) -> None: ...


def owned(partitions: int | Iterable[int]) -> list[int]:
    """The partitions a store keeps, in order: `partitions` of them from 0, or those listed."""
    return list(range(partitions)) if isinstance(partitions, int) else sorted(partitions)


def frames(records: list[LogEntry]) -> tuple[bytes, int]:
    """The log's frames of `records`, and how many records they hold (an OffsetCommits is
    one per partition)."""
    out = []
    count = 0
    for record in records:
        if isinstance(record, OffsetCommits):
            out.append(offset_records.frame_offset_commits(record))
            count += len(record)
        else:
            out.append(segment.encode(record))
            count += 1
    return b"".join(out), count


class LogCleanerSettings(NamedTuple):
    backoff_ms: int
    min_cleanable_ratio: float
    delete_retention_ms: int


class OffsetsStore:
    def __init__(
        self,
        data_dir: Path,
        partitions: int | Iterable[int],
        segment_bytes: int,
        policy: Policy,
        linger_ms: int,
        truncate_damaged: bool = False,
        cleaner: LogCleanerSettings | None = None,
        shared: bool = False,
    ) -> None:
        """`partitions`: the coordinator partitions this node owns (a count: all of them,
        from 0); the logs of others are neither opened nor created. `cleaner`: None keeps
        every record (log.cleaner.enable false). `shared`: nodes share the data directory
        and partitions move between them: none is held at start, each is taken
        (`acquire`) and let go (`release`) under a lock of its own, and the directory as a
        whole is not locked."""
        self.data_dir = data_dir
        self.segment_bytes = segment_bytes
        self.shared = shared
        self.partitions = [] if shared else owned(partitions)
        self._partition_locks: dict[int, PartitionLock] = {}
        self.policy = policy
        self.linger_ms = linger_ms
        self.truncate_damaged = truncate_damaged
        self.logs = {
            p: PartitionLog(directory(data_dir, p), segment_bytes) for p in self.partitions
        }
        self.lock = DataDirLock(data_dir)
        self.appender: Appender | None = None
        # fsync batch: set by each append the appender holds, for watch_idle to hand
        # them over when the event loop has gone idle after it.
        self._appended = trio.Event() if policy == "batch" else None
        self.cleaner = (
            None
            if cleaner is None
            else LogCleaner(
                self.logs,
                cleaner.backoff_ms,
                cleaner.min_cleanable_ratio,
                cleaner.delete_retention_ms,
            )
        )

    def open(self) -> None:
        """Take the data directory (DataDirLocked if another server has it); a shared one
        is only created."""
        if self.shared:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        else:
            self.lock.acquire()

    def acquire(self, partition: int) -> None:
        """Take `partition`'s log (shared directories): PartitionLocked while another node
        holds it. Blocking: call it from a worker thread, then recover it."""
        assert self.shared, "partitions move only in a shared data directory"
        if partition in self.logs:
            return
        lock = PartitionLock(directory(self.data_dir, partition))
        lock.acquire()
        self._partition_locks[partition] = lock
        self.logs[partition] = PartitionLog(directory(self.data_dir, partition), self.segment_bytes)

    def release(self, partition: int) -> None:
        """Let `partition`'s log go, once the core has said it is unloaded (nothing more is
        written to it): the cleaner stops on it, the log is closed, the lock released.
        Blocking: call it from a worker thread."""
        if self.cleaner is not None:
            self.cleaner.unload(partition)
        partition_log = self.logs.pop(partition, None)
        if partition_log is not None:
            partition_log.close()
        lock = self._partition_locks.pop(partition, None)
        if lock is not None:
            lock.release()

    def log_bytes(self) -> dict[int, int]:
        """The size of each partition's log (what a load will read)."""
        out = {}
        for partition, partition_log in self.logs.items():
            segments = partition_log.segments() if partition_log.path.exists() else []
            out[partition] = sum(file.stat().st_size for _, file in segments)
        return out

    def recover(self, partition: int) -> list[Record]:
        """The partition's records, in order (blocking: call it from a worker thread)."""
        return self.logs[partition].recover(self.truncate_damaged)

    def start(self, report: Callable[[Callable[[], None]], None], done: Done) -> None:
        self.appender = Appender(self.logs, self.policy, report, done)
        self.appender.start()
        if self.cleaner is not None:
            self.cleaner.start()

    async def watch_idle(self) -> None:
        """fsync batch, until cancelled: each time the event loop has nothing left to run
        after appends the appender holds, or the linger has passed since the first of them,
        hand them over to be written and synced together (appender.py says why)."""
        if self._appended is None:
            return
        linger_s = self.linger_ms / 1000
        while True:
            await self._appended.wait()
            self._appended = trio.Event()
            # Woken in the loop's pass after the append's: with nothing else to run then,
            # the loop is idle already (a pass fewer for a lone commit); else wait for it.
            stats = trio.lowlevel.current_statistics()
            if stats.tasks_runnable or stats.run_sync_soon_queue_size:
                with trio.move_on_after(linger_s):
                    await trio.testing.wait_all_tasks_blocked()
            if self.appender is not None:
                self.appender.idle()

    def loaded(self, partition: int) -> None:
        """`partition` has been recovered: the cleaner may now rewrite its closed segments."""
        if self.cleaner is not None:
            self.cleaner.loaded(partition)

    def append(
        self, token: int, records: list[LogEntry], partition_of: Callable[[str], int]
    ) -> None:
        assert self.appender is not None, "start() first"
        by_partition: dict[int, list[LogEntry]] = defaultdict(list)
        partitions: dict[str, int] = {}  # a Result's records mostly share one group
        for record in records:
            group = record.group_id
            partition = partitions.get(group)
            if partition is None:
                partition = partitions[group] = partition_of(group)
            by_partition[partition].append(record)
        if self.shared:
            for partition in [p for p in by_partition if p not in self.logs]:
                # A record of a partition let go: its owner now keeps it, and writes its own.
                del by_partition[partition]
                log.warning("records of offsets partition %d dropped: not held here", partition)
        held = self.appender.submit(token, {p: frames(rs) for p, rs in by_partition.items()})
        appended = self._appended
        if held and appended is not None and not appended.is_set():
            appended.set()

    def close(self) -> None:
        """Stop the cleaner (a pass cut short changes nothing), finish queued writes, close
        the logs, release the directory."""
        if self.cleaner is not None:
            self.cleaner.close()
        if self.appender is not None:
            self.appender.close()
        else:
            for partition_log in self.logs.values():
                partition_log.close()
        for lock in self._partition_locks.values():
            lock.release()
        self._partition_locks.clear()
        self.lock.release()
