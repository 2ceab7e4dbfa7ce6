"""The offsets store: a log per coordinator partition under the data directory, the lock
that keeps a second server out, and the appender that makes writes durable.

The server opens it before it listens (a locked or damaged data directory stops the start
with a clear error), recovers each partition's records in a worker thread while clients
are already answered (COORDINATOR_LOAD_IN_PROGRESS for groups not yet loaded), and gives
it each Result's records with their append token.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from fastcoord.core.records import Record
from fastcoord.storage import segment
from fastcoord.storage.appender import Appender, Done, Policy
from fastcoord.storage.lock import DataDirLock
from fastcoord.storage.log import PartitionLog, directory


class OffsetsStore:
    def __init__(
        self,
        data_dir: Path,
        partitions: int,
        segment_bytes: int,
        policy: Policy,
        linger_ms: int,
        truncate_damaged: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.partitions = partitions
        self.policy = policy
        self.linger_ms = linger_ms
        self.truncate_damaged = truncate_damaged
        self.logs = {
            p: PartitionLog(directory(data_dir, p), segment_bytes) for p in range(partitions)
        }
        self.lock = DataDirLock(data_dir)
        self.appender: Appender | None = None

    def open(self) -> None:
        """Take the data directory (DataDirLocked if another server has it)."""
        self.lock.acquire()

    def recover(self, partition: int) -> list[Record]:
        """The partition's records, in order (blocking: call it from a worker thread)."""
        return self.logs[partition].recover(self.truncate_damaged)

    def start(self, report: Callable[[Callable[[], None]], None], done: Done) -> None:
        self.appender = Appender(self.logs, self.policy, self.linger_ms, report, done)
        self.appender.start()

    def append(self, token: int, records: list[Record], partition_of: Callable[[str], int]) -> None:
        assert self.appender is not None, "start() first"
        by_partition: dict[int, list[Record]] = defaultdict(list)
        for record in records:
            by_partition[partition_of(record.group_id)].append(record)
        self.appender.submit(
            token,
            {p: (segment.encode_all(rs), len(rs)) for p, rs in by_partition.items()},
        )

    def close(self) -> None:
        """Finish queued writes, close the logs, release the directory."""
        if self.appender is not None:
            self.appender.close()
        else:
            for partition_log in self.logs.values():
                partition_log.close()
        self.lock.release()
