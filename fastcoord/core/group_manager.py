"""The GroupManager: Kafka's GroupMetadataManager, the owner of the groups.

It holds the groups, the member table their hot fields live in, and the member id
generator, and hands the handlers of each job (core/classic/: join, rebalance, sync,
session, leave, records; core/consumer/: heartbeat, members, target, sessions, leave,
writes) what they need: the groups, and the Context to arm timers, write records and
report events. It knows nothing of offsets: the offset manager sees groups only through
their GroupView (core/classic/offsets_view.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastcoord.core.consumer import columns as consumer_columns
from fastcoord.core.consumer import records as consumer_records
from fastcoord.core.consumer.batching import Batches
from fastcoord.core.consumer.group import ConsumerGroup
from fastcoord.core.consumer.topics import StaticTopics, TopicImage
from fastcoord.core.context import AppendCallback, Context
from fastcoord.core.group import Group
from fastcoord.core.records import (
    CONSUMER_GROUP_KEYS,
    CONSUMER_GROUP_VALUES,
    GroupMetadataKey,
    LogEntry,
    Record,
)
from fastcoord.core.result import Result, TimerKey
from fastcoord.core.state import DEAD, EMPTY
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.schema import Request


class GroupManager:
    def __init__(
        self,
        ctx: Context,
        table: Any,
        new_member_id: Callable[[str], str],
        topics: TopicImage | None = None,
    ) -> None:
        self.ctx = ctx
        self.config = ctx.config
        # A group id names a classic group or a consumer group, never both.
        self.groups: dict[str, Group] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.topics: TopicImage = topics if topics is not None else StaticTopics()
        # Consumer group id -> its appends not yet durable: a heartbeat that writes nothing
        # waits for them, as its answer reflects them.
        self.unsettled_writes: dict[str, int] = {}
        self.table = table
        # Consumer group id -> its slot in the member table (columns.py keeps them).
        self.consumer_slots: dict[str, int] = {}
        table.consumer_heartbeat_interval_ms = self.config.group_consumer_heartbeat_interval_ms
        self.new_member_id = new_member_id
        self.heartbeat_fallbacks: dict[int, int] = {}  # heartbeats the table left, by answer
        # Whether the member table may answer heartbeats alone (nothing loading or
        # unloaded): the runtime's, bound, as every heartbeat asks.
        self.serves_all: Callable[[], bool] = ctx.serves_all
        # Consumer groups whose target assignment waits for the end of the batch of
        # heartbeats being read (consumer/batching.py); None: computed in each heartbeat.
        self.batches: Batches | None = None

    # -- groups ---------------------------------------------------------------------------

    def get_or_create_group(self, group_id: str, now_ms: int) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, now_ms, self.table)
        return group

    def remove_group_if_dead(self, group: Group) -> None:
        if group.is_(DEAD) and self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
            group.release()

    def remove_empty_group(
        self, group: Group, has_offsets: bool, now_ms: int, result: Result
    ) -> None:
        """An Empty group with no offsets left is removed, with a tombstone for its
        metadata (Kafka's maybeDeleteGroup)."""
        if not (
            group.is_(EMPTY) and not has_offsets and not group.members and not group.pending_members
        ):
            return
        group.transition_to(DEAD, now_ms, "empty with no offsets")
        self.remove_group_if_dead(group)
        self.ctx.append(result, [Record(GroupMetadataKey(group.group_id), None)], _ignore)

    def replay_consumer(self, record: Record, now_ms: int) -> None:
        """Apply a consumer group record. A consumer group takes the place of an Empty
        classic group of the same id (one with offsets alone, say), as Kafka converts it."""
        key, value = record.key, record.value
        assert isinstance(key, CONSUMER_GROUP_KEYS), key
        assert value is None or isinstance(value, CONSUMER_GROUP_VALUES), value
        if value is not None and key.group not in self.consumer_groups:
            classic = self.groups.pop(key.group, None)
            if classic is not None:
                assert not classic.members, f"{key.group}: a classic group with members"
                classic.release()
        consumer_records.replay(self.consumer_groups, key, value, now_ms)
        consumer_columns.replayed(self, key, now_ms)

    def topics_changed(self) -> None:
        """A topic was added (the server's broker says): consumer groups resolve their
        subscriptions again."""
        consumer_columns.topics_changed(self)

    def heartbeat_answers(self) -> dict[int, int]:
        """{error code: heartbeats answered with it}, every path counted once."""
        counts = dict(self.heartbeat_fallbacks)
        for code, n in self.table.heartbeat_answers().items():
            counts[code] = counts.get(code, 0) + n
        return counts

    # -- the Context, as the handlers use it ----------------------------------------------

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        self.ctx.schedule(key, deadline_ms)

    def cancel(self, key: TimerKey) -> None:
        self.ctx.cancel(key)

    def append(self, result: Result, records: Sequence[LogEntry], callback: AppendCallback) -> None:
        self.ctx.append(result, records, callback)

    def event(self, result: Result, now_ms: int, kind: str, group: Group, **fields: Any) -> None:
        self.ctx.event(result, now_ms, kind, group.group_id, **fields)

    def group_status_error(
        self, group_id: str, request: Request | OffsetCommitBatch
    ) -> ErrorCode | None:
        return self.ctx.group_status_error(group_id, request)


def _ignore(error: ErrorCode, now_ms: int, result: Result) -> None:
    return
