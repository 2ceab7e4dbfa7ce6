"""The Coordinator: Kafka's GroupCoordinator, sans-IO, one instance per server.

Requests come in with the server's opaque handle, the request version and `now_ms`; each
call returns a Result. Time moves only through `advance(now_ms)`, which fires due timers
(delayed joins, heartbeat expiry, pending members, sync timeouts, offset retention). Writes
come back through `complete_append(token, error, now_ms)` once their records are durable
(or failed), and only then are acknowledged and replayed into the durable state.

Timers are keyed (Kafka's new coordinator's CoordinatorTimer): ("heartbeat", group, member),
("pending", group, member), ("join", group), ("sync", group), ("retention",). Scheduling a
key replaces its timer. A heartbeat does not touch the wheel: it moves the member's session
deadline, and the member's timer, when it fires early, re-arms at that deadline.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from fastcoord.core import admin, membership, offsets
from fastcoord.core.config import GroupConfig
from fastcoord.core.group import Group
from fastcoord.core.native import member_table, timing_wheel
from fastcoord.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    LogEntry,
    OffsetCommitKey,
    OffsetCommits,
    OffsetCommitValue,
)
from fastcoord.core.result import Call, Event, Handle, Result, TimerKey
from fastcoord.core.state import DEAD, EMPTY, STABLE
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from fastcoord.protocol.schema import Request

AppendCallback = Callable[[ErrorCode, int, Result], None]

# APIs whose group id may be empty (Kafka's isValidGroupId): the others need a non-empty id.
EMPTY_GROUP_ID_ALLOWED = (
    OffsetCommitRequest,
    OffsetCommitBatch,
    OffsetFetchRequest,
    DescribeGroupsRequest,
    DeleteGroupsRequest,
    OffsetDeleteRequest,
)


def default_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class Coordinator:
    def __init__(
        self,
        config: GroupConfig | None = None,
        now_ms: int = 0,
        new_member_id: Callable[[str], str] = default_member_id,
        partition_for: Callable[[str, int], int] | None = None,
        wheel: Any = None,
        table: Any = None,
    ) -> None:
        from fastcoord.core.native import partition

        self.config = config or GroupConfig()
        self.groups: dict[str, Group] = {}
        # The compiled modules (or their twins with FASTCOORD_NO_EXTENSIONS=1); benchmarks
        # pass either explicitly to compare them in one run.
        self.wheel = wheel if wheel is not None else timing_wheel.TimingWheel(now_ms)
        self.table = table if table is not None else member_table.MemberTable()
        self.new_member_id = new_member_id
        self.partition_for: Callable[[str, int], int] = partition_for or partition.partition_for
        self.active = True
        self.loading_partitions: set[int] = set()
        self.owned_partitions: set[int] | None = None  # None: every partition
        self._appends: dict[int, list[AppendCallback]] = {}
        self._heartbeat_fallbacks: dict[int, int] = {}  # heartbeats the table left, by answer
        self._next_append = 1
        self._result: Result | None = None
        # Timers the wheel has fired that advance() has not handled yet (it was given a
        # limit): their keys, in deadline order, and which of them are still due (a key
        # scheduled or cancelled meanwhile is not).
        self._due_order: deque[TimerKey] = deque()
        self._due: set[TimerKey] = set()
        self._due_since = now_ms
        self.schedule(("retention",), now_ms + self.config.offsets_retention_check_interval_ms)

    # -- entry points -------------------------------------------------------------------

    def handle(
        self,
        handle: Handle,
        request: Request | OffsetCommitBatch,
        version: int,
        now_ms: int,
        client_id: str = "",
        client_host: str = "",
    ) -> Result:
        """Handle one group request; the response may come now or in a later Result."""
        result = self._begin()
        try:
            call = Call(handle, version, now_ms, client_id, client_host, result)
            _HANDLERS[type(request)](self, call, request)
        finally:
            self._result = None
        return result

    def commit_offsets(
        self, requests: list[tuple[Handle, OffsetCommitBatch]], now_ms: int
    ) -> Result:
        """OffsetCommit requests (handle, batch) read one after another, handled in order as
        `handle` would, in one Result: their records go out in one append."""
        result = self._begin()
        try:
            offsets.offset_commits(self, requests, now_ms, result)
        finally:
            self._result = None
        return result

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        group_instance_id: str | None,
        version: int,
        now_ms: int,
    ) -> int:
        """A Heartbeat's error code. Heartbeats produce no records, timers or events, so
        the server calls this directly, without a Result.

        The common case (a known dynamic member, a coordinator with nothing loading) is one
        call into the member table, which does the two id lookups and the checks; anything
        else takes the full path, which gives the same answers.
        """
        if group_instance_id is None and self.table_answers_heartbeats():
            code: int = self.table.heartbeat_id(group_id, member_id, generation, now_ms)
            if code >= 0:
                return code
        code = membership.heartbeat_error(
            self, group_id, member_id, generation, group_instance_id, version, now_ms
        )
        # The table counts what it answers; these are the rest (see heartbeat_answers).
        self._heartbeat_fallbacks[code] = self._heartbeat_fallbacks.get(code, 0) + 1
        return code

    def heartbeat_answers(self) -> dict[int, int]:
        """{error code: heartbeats answered with it}, every path counted once."""
        counts = dict(self._heartbeat_fallbacks)
        for code, n in self.table.heartbeat_answers().items():
            counts[code] = counts.get(code, 0) + n
        return counts

    def table_answers_heartbeats(self) -> bool:
        """Whether table.heartbeat_id may answer dynamic members' heartbeats alone (when it
        returns a code >= 0): nothing is loading, unloaded or shutting down."""
        return self.active and not self.loading_partitions and self.owned_partitions is None

    def advance(self, now_ms: int, limit: int | None = None) -> Result:
        """Move time to now_ms and fire due timers in deadline order: every one, or at most
        `limit`. The rest stay due (next_deadline() is then now_ms) and are fired first by
        the next call, so that a burst (a rebalance of 100k members arms their sessions
        in the same millisecond) is handled in parts, with requests served between them."""
        result = self._begin()
        try:
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
                    self._fire(key, now_ms, result)
                    fired += 1
        finally:
            self._result = None
        return result

    def next_deadline(self) -> int | None:
        if self._due:
            return self._due_since  # timers fell due that advance() has not fired yet
        deadline: int | None = self.wheel.next_deadline()
        return deadline

    def complete_append(self, token: int, error: ErrorCode, now_ms: int) -> Result:
        """The records of Result.append `token` are durable (error NONE) or failed."""
        return self.complete_appends([token], error, now_ms)

    def complete_appends(self, tokens: list[int], error: ErrorCode, now_ms: int) -> Result:
        """complete_append of each token, in order, in one Result."""
        result = self._begin()
        try:
            appends = self._appends
            for token in tokens:
                for callback in appends.pop(token):
                    callback(error, now_ms, result)
        finally:
            self._result = None
        return result

    def shutdown(self, now_ms: int) -> Result:
        """Stop coordinating: answer every waiting JoinGroup and SyncGroup NOT_COORDINATOR;
        later requests get COORDINATOR_NOT_AVAILABLE, as from a Kafka broker shutting down."""
        result = self._begin()
        try:
            self.active = False
            for group in self.groups.values():
                membership.unload_group(group, result)
        finally:
            self._result = None
        return result

    # -- for the handlers ----------------------------------------------------------------

    def _begin(self) -> Result:
        if self._result is not None:
            raise RuntimeError("the coordinator is not re-entrant")
        self._result = Result()
        return self._result

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        if self._due:
            self._due.discard(key)  # the new deadline replaces one that fell due
        self.wheel.schedule(key, deadline_ms)
        if self._result is not None:
            self._result.timers.append((key, deadline_ms))

    def cancel(self, key: TimerKey) -> None:
        if self._due:
            self._due.discard(key)
        if self.wheel.cancel(key) and self._result is not None:
            self._result.timers.append((key, None))

    def append(self, result: Result, records: Sequence[LogEntry], callback: AppendCallback) -> None:
        """Ask for records to be made durable; `callback` runs at complete_append."""
        if result.append is None:
            result.append = self._next_append
            self._next_append += 1
            self._appends[result.append] = []
        result.records.extend(records)
        self._appends[result.append].append(callback)

    def event(self, result: Result, now_ms: int, kind: str, group: Group, **fields: Any) -> None:
        result.events.append(Event(at_ms=now_ms, kind=kind, group_id=group.group_id, **fields))

    def group_status_error(
        self, group_id: str, request: Request | OffsetCommitBatch
    ) -> ErrorCode | None:
        """Kafka's validateGroupStatus: INVALID_GROUP_ID, then coordinator availability."""
        if group_id is None or (group_id == "" and not isinstance(request, EMPTY_GROUP_ID_ALLOWED)):
            return ErrorCode.INVALID_GROUP_ID
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(group_id, self.config.offsets_topic_num_partitions)
        if partition in self.loading_partitions:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if self.owned_partitions is not None and partition not in self.owned_partitions:
            return ErrorCode.NOT_COORDINATOR
        return None

    def get_or_create_group(self, group_id: str, now_ms: int) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, now_ms, self.table)
        return group

    # -- timers --------------------------------------------------------------------------

    def _fire(self, key: TimerKey, now_ms: int, result: Result) -> None:
        kind = key[0]
        if kind == "heartbeat":
            membership.on_heartbeat_timer(self, key[1], key[2], now_ms, result)
        elif kind == "pending":
            membership.on_pending_member_timer(self, key[1], key[2], now_ms, result)
        elif kind == "join":
            membership.on_join_timer(self, key[1], now_ms, result)
        elif kind == "sync":
            membership.on_sync_timer(self, key[1], key[2], now_ms, result)
        elif kind == "retention":
            offsets.expire_offsets(self, now_ms, result)
            self.schedule(key, now_ms + self.config.offsets_retention_check_interval_ms)
        else:
            raise AssertionError(f"unknown timer {key!r}")

    # -- durable state -------------------------------------------------------------------

    def replay(self, record: LogEntry, now_ms: int, loading: bool = False) -> None:
        """Apply one durable record, or an OffsetCommit's records together: the only way
        offsets and group metadata change.

        Used live (loading=False, when a write becomes durable) and at load (replaying the
        log, loading=True).
        """
        if isinstance(record, OffsetCommits):
            offsets.replay_commits(self, record, now_ms)
            return
        key, value = record.key, record.value
        if isinstance(key, OffsetCommitKey):
            assert value is None or isinstance(value, OffsetCommitValue)
            offsets.replay_offset(self, key, value, now_ms)
        elif isinstance(key, GroupMetadataKey):
            assert value is None or isinstance(value, GroupMetadataValue)
            membership.replay_group(self, key.group, value, now_ms, loading)
        else:
            raise TypeError(f"unknown record key {key!r}")

    def remove_group_if_dead(self, group: Group) -> None:
        if group.is_(DEAD) and self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
            group.release()

    def snapshot(self) -> dict[str, Any]:
        """The durable view of every group, for tests that compare replay with live state."""
        out: dict[str, Any] = {}
        for group_id, group in sorted(self.groups.items()):
            if group.is_(DEAD):
                continue
            if group.generation_id == 0 and not group.members and not group.offsets:
                # Created by a JoinGroup that never completed: nothing of it was written
                # (Kafka drops it at the next cleanup, as offsets.expire_offsets does here).
                continue
            stable = group.is_(STABLE) or group.is_(EMPTY)
            out[group_id] = {
                "state": str(group.state) if stable else "rebalancing",
                "generation": group.generation_id,
                "protocol_type": group.protocol_type,
                "protocol": group.protocol_name,
                "leader": group.leader_id,
                "members": {
                    m.member_id: (m.group_instance_id, m.assignment) for m in group.members.values()
                },
                "offsets": dict(sorted(group.offsets.items())),
            }
        return out


_HANDLERS: dict[type[Request | OffsetCommitBatch], Callable[..., None]] = {
    JoinGroupRequest: membership.join_group,
    SyncGroupRequest: membership.sync_group,
    HeartbeatRequest: membership.heartbeat,
    LeaveGroupRequest: membership.leave_group,
    OffsetCommitRequest: offsets.offset_commit,
    OffsetCommitBatch: offsets.offset_commit,
    OffsetFetchRequest: offsets.offset_fetch,
    OffsetDeleteRequest: offsets.offset_delete,
    DescribeGroupsRequest: admin.describe_groups,
    ListGroupsRequest: admin.list_groups,
    DeleteGroupsRequest: admin.delete_groups,
}
