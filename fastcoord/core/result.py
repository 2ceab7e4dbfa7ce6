"""What a core handler returns: responses, records, timer changes and events.

A handler never sends anything or sleeps. It returns a Result: the responses that are
ready now (keyed by the opaque handle the server gave with each request; a JoinGroup that
waits for its rebalance is answered in a later Result), the records to persist (with an
append token when acknowledgements wait for them to be durable), the timers it armed or
disarmed, and coordinator events for the event log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from fastcoord.core.records import LogEntry
from fastcoord.protocol.commit_batch import OffsetCommitAnswer
from fastcoord.protocol.schema import Message

Handle = Any  # the server's token for one request awaiting its response
# A response: a Message, or the compact answer to an OffsetCommit.
Answer = Message | OffsetCommitAnswer
TimerKey = Any  # hashable: a member's slot (heartbeats) or a tuple (kind, group, ...)


class Event(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One coordinator event: member joined, left or expired; rebalance started or completed."""

    at_ms: int
    kind: str
    group_id: str
    member_id: str | None = None
    generation: int = -1
    members: int = 0
    duration_ms: int = 0
    reason: str = ""


@dataclass(slots=True)
class Result:
    responses: list[tuple[Handle, Answer]] = field(default_factory=list)
    records: list[LogEntry] = field(default_factory=list)
    # When set, the records must be durable before the server calls
    # Coordinator.complete_append(append, error), which gives the acknowledgements.
    append: int | None = None
    timers: list[tuple[TimerKey, int | None]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def respond(self, handle: Handle, response: Answer) -> None:
        self.responses.append((handle, response))

    def extend(self, other: Result) -> None:
        self.responses.extend(other.responses)
        self.records.extend(other.records)
        self.timers.extend(other.timers)
        self.events.extend(other.events)
        if other.append is not None:
            raise ValueError("an append token cannot be merged into another Result")


@dataclass(slots=True)
class Call:
    """One request being handled: who asked, at which version and time, and where its
    answer and side effects go."""

    handle: Handle
    version: int
    now_ms: int
    client_id: str
    client_host: str
    result: Result

    def respond(self, response: Answer) -> None:
        self.result.respond(self.handle, response)
