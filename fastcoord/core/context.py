"""What a manager may ask of the coordinator: the Context.

The group manager and the offset manager change their own state and nothing else; to arm
a timer, write records, report an event or ask whether this coordinator serves a group,
they go through this small interface (Kafka's CoordinatorShard sees its runtime the same
way). The Runtime implements it; a test can implement it with anything that records calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from fastcoord.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from fastcoord.core.config import GroupConfig
    from fastcoord.core.records import LogEntry
    from fastcoord.core.result import Result, TimerKey
    from fastcoord.protocol.commit_batch import OffsetCommitBatch
    from fastcoord.protocol.schema import Request

# Runs once the records of an append are durable (error NONE) or failed.
AppendCallback = Callable[[ErrorCode, int, "Result"], None]


class Context(Protocol):
    config: GroupConfig

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        """Arm the timer `key` (replacing its deadline if it is armed)."""

    def cancel(self, key: TimerKey) -> None: ...

    def deadline(self, key: TimerKey) -> int | None:
        """When the timer `key` fires, or None if it is not armed."""

    def append(self, result: Result, records: Sequence[LogEntry], callback: AppendCallback) -> None:
        """Ask for records to be made durable; `callback` runs when they are (or failed)."""

    def event(self, result: Result, now_ms: int, kind: str, group_id: str, **fields: Any) -> None:
        """Report a coordinator event for the event log."""

    def status(self) -> ErrorCode:
        """The coordinator's own state: COORDINATOR_NOT_AVAILABLE once shut down,
        COORDINATOR_LOAD_IN_PROGRESS while any partition loads, else NONE."""

    def serves_all(self) -> bool:
        """Whether every group is served: nothing loading, unloaded or shutting down."""

    def group_status_error(
        self, group_id: str, request: Request | OffsetCommitBatch
    ) -> ErrorCode | None:
        """Why this coordinator cannot serve the group now (Kafka's validateGroupStatus),
        or None."""
