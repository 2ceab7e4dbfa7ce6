"""`--in-memory`: a store that keeps nothing, for throwaway load tests.

It stands where the OffsetsStore stands and acknowledges every write as soon as the event
loop turns, as the appender would report a write that took no time: the core still sees a
write acknowledged after the Result that asked for it, never within it. There is no data
directory, no lock and nothing to load; a restart starts empty.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fastcoord.core.records import LogEntry, Record
from fastcoord.protocol.errors import ErrorCode
from fastcoord.storage.appender import Done


class MemoryStore:
    appender = None  # nothing is ever on its way to disk

    def __init__(self, partitions: int | Iterable[int]) -> None:
        self.partitions = (
            list(range(partitions)) if isinstance(partitions, int) else sorted(partitions)
        )
        self._report: Callable[[Callable[[], None]], None] | None = None
        self._done: Done | None = None
        self._tokens: list[int] = []  # appends not yet acknowledged

    def open(self) -> None:
        pass

    def log_bytes(self) -> dict[int, int]:
        return dict.fromkeys(self.partitions, 0)

    def recover(self, partition: int) -> list[Record]:
        return []

    def start(self, report: Callable[[Callable[[], None]], None], done: Done) -> None:
        self._report = report
        self._done = done

    async def watch_idle(self) -> None:
        pass  # nothing waits for a sync

    def loaded(self, partition: int) -> None:
        pass

    def acquire(self, partition: int) -> None:
        """Nothing to hold: a partition that moves here from memory brings nothing."""

    def release(self, partition: int) -> None:
        pass

    def append(
        self, token: int, records: list[LogEntry], partition_of: Callable[[str], int]
    ) -> None:
        assert self._report is not None, "start() first"
        if not self._tokens:  # the first since the last report: one report takes them all
            self._report(self._acknowledge)
        self._tokens.append(token)

    def _acknowledge(self) -> None:
        assert self._done is not None
        tokens, self._tokens = self._tokens, []
        self._done(tokens, ErrorCode.NONE)

    def close(self) -> None:
        pass
