"""The Runtime: timers, appends and the Result being built, for one coordinator.

Kafka's CoordinatorRuntime in small: it owns the timing wheel and the timers that fell due,
the appends waiting to be durable with their callbacks, the Result each entry point fills,
and whether this coordinator serves a group at all (shut down, loading, or not the owner
of its partition). It implements the Context the managers see; it knows nothing of groups
or offsets.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from fastcoord.core.config import GroupConfig
from fastcoord.core.context import AppendCallback
from fastcoord.core.records import LogEntry
from fastcoord.core.result import Event, Result, TimerKey
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
)
from fastcoord.protocol.schema import Request

# APIs whose group id may be empty (Kafka's isValidGroupId): the others need a non-empty id.
EMPTY_GROUP_ID_ALLOWED = (
    OffsetCommitRequest,
    OffsetCommitBatch,
    OffsetFetchRequest,
    DescribeGroupsRequest,
    DeleteGroupsRequest,
    OffsetDeleteRequest,
)


class Runtime:
    def __init__(
        self,
        config: GroupConfig,
        wheel: Any,
        partition_for: Callable[[str, int], int],
        now_ms: int,
    ) -> None:
        self.config = config
        self.wheel = wheel
        self.partition_for = partition_for
        self.active = True
        self.loading_partitions: set[int] = set()
        self.owned_partitions: set[int] | None = None  # None: every partition
        self._appends: dict[int, list[AppendCallback]] = {}
        # completed(token): the callbacks of append `token`, which is now durable or
        # failed; the dict's own pop, bound, as every acknowledged write calls it.
        self.completed: Callable[[int], list[AppendCallback]] = self._appends.pop
        self._next_append = 1
        # The Result the entry point under way fills, None between entry points: begin()
        # sets it, and the entry point sets it back to None when done (an assignment
        # rather than a call, as every request pays for it).
        self.result: Result | None = None
        # Timers the wheel has fired that advance() has not handled yet (it was given a
        # limit): their keys, in deadline order, and which of them are still due (a key
        # scheduled or cancelled meanwhile is not).
        self._due_order: deque[TimerKey] = deque()
        self._due: set[TimerKey] = set()
        self._due_since = now_ms

    def begin(self) -> Result:
        """The Result an entry point fills, until it sets `result` back to None; entry
        points do not nest."""
        if self.result is not None:
            raise RuntimeError("the coordinator is not re-entrant")
        result = self.result = Result()
        return result

    # -- the Context ----------------------------------------------------------------------

    def status(self) -> ErrorCode:
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.loading_partitions:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def serves_all(self) -> bool:
        """Whether every group this coordinator holds is served: then the member table may
        answer heartbeats alone. Owning only some partitions does not stop it: groups of
        the others are never created here, so the table never answers for them."""
        return self.active and not self.loading_partitions

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        if self._due:
            self._due.discard(key)  # the new deadline replaces one that fell due
        self.wheel.schedule(key, deadline_ms)
        if self.result is not None:
            self.result.timers.append((key, deadline_ms))

    def cancel(self, key: TimerKey) -> None:
        if self._due:
            self._due.discard(key)
        if self.wheel.cancel(key) and self.result is not None:
            self.result.timers.append((key, None))

    def deadline(self, key: TimerKey) -> int | None:
        deadline: int | None = self.wheel.deadline(key)
        return deadline

    def append(self, result: Result, records: Sequence[LogEntry], callback: AppendCallback) -> None:
        if result.append is None:
            result.append = self._next_append
            self._next_append += 1
            self._appends[result.append] = []
        result.records.extend(records)
        self._appends[result.append].append(callback)

    def event(self, result: Result, now_ms: int, kind: str, group_id: str, **fields: Any) -> None:
        result.events.append(Event(at_ms=now_ms, kind=kind, group_id=group_id, **fields))

    def group_status_error(
        self, group_id: str, request: Request | OffsetCommitBatch
    ) -> ErrorCode | None:
        if group_id is None or (group_id == "" and not isinstance(request, EMPTY_GROUP_ID_ALLOWED)):
            return ErrorCode.INVALID_GROUP_ID
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(group_id, self.config.offsets_topic_num_partitions)
        # Kafka's runtime: no context for the partition (another node's), then loading.
        if self.owned_partitions is not None and partition not in self.owned_partitions:
            return ErrorCode.NOT_COORDINATOR
        if partition in self.loading_partitions:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None

    # -- for the coordinator's entry points -----------------------------------------------

    def due(self, now_ms: int, limit: int | None) -> Iterator[TimerKey]:
        """Move the wheel to now_ms and yield due timers in deadline order: every one, or at
        most `limit`; the rest stay due and come first next time."""
        order, due = self._due_order, self._due
        for key in self.wheel.advance(now_ms):
            order.append(key)
            due.add(key)
        self._due_since = now_ms
        fired = 0
        while order and (limit is None or fired < limit):
            key = order.popleft()
            if key in due:  # else scheduled again or cancelled since it fell due
                due.remove(key)
                yield key
                fired += 1

    def next_deadline(self) -> int | None:
        if self._due:
            return self._due_since  # timers fell due that advance() has not fired yet
        deadline: int | None = self.wheel.next_deadline()
        return deadline
