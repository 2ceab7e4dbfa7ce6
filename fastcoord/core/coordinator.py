"""The Coordinator: Kafka's GroupCoordinator, sans-IO, one instance per server.

Requests come in with the server's opaque handle, the request version and `now_ms`; each
call returns a Result. Time moves only through `advance(now_ms)`, which fires due timers
(delayed joins, heartbeat expiry, pending members, sync timeouts, offset retention). Writes
come back through `complete_append(token, error, now_ms)` once their records are durable
(or failed), and only then are acknowledged and replayed into the durable state.

Like Kafka's GroupCoordinatorShard it holds the parts and routes between them: the group
manager owns the groups and the member table, the offset manager owns the offsets, and
the runtime owns timers and appends. The coordinator routes requests, timers and replayed
records to them, and does what spans both (cleanup.py: DeleteGroups, offset expiry). The
ACLs that clients create live in the same log, and their part (acls.py) here too.

Timers are keyed (Kafka's new coordinator's CoordinatorTimer): ("heartbeat", group, member),
("pending", group, member), ("join", group), ("sync", group), ("retention",), and for
consumer groups ("consumer_session", group, member) and ("consumer_revocation", group,
member). Scheduling a key replaces its timer. A heartbeat does not touch the wheel: it
moves the member's session deadline, and the member's timer, when it fires early, re-arms
at that deadline.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from types import MethodType
from typing import Any

from fastcoord.core import admin, cleanup, offsets, resignation
from fastcoord.core.acls import AclManager
from fastcoord.core.classic import join, leave, rebalance, records, responses, session, sync
from fastcoord.core.config import GroupConfig
from fastcoord.core.consumer import describe as consumer_describe
from fastcoord.core.consumer import heartbeat as consumer_heartbeat
from fastcoord.core.consumer import leave as consumer_leave
from fastcoord.core.consumer.batching import Batches
from fastcoord.core.consumer.topics import TopicImage
from fastcoord.core.context import AppendCallback
from fastcoord.core.group import Group
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.groups_view import GroupsView
from fastcoord.core.native import member_table, timing_wheel
from fastcoord.core.offset_manager import OffsetManager
from fastcoord.core.records import (
    ACL_PARTITION,
    CONSUMER_GROUP_KEYS,
    AclKey,
    AclValue,
    GroupMetadataKey,
    GroupMetadataValue,
    LogEntry,
    OffsetCommitKey,
    OffsetCommits,
    OffsetCommitValue,
)
from fastcoord.core.result import Call, Handle, Result, TimerKey
from fastcoord.core.runtime import Runtime
from fastcoord.core.state import DEAD, EMPTY, STABLE
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreateAclsRequest,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DescribeAclsRequest,
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
        topics: TopicImage | None = None,
    ) -> None:
        from fastcoord.core.native import partition

        self.config = config or GroupConfig()
        # The compiled modules (or their twins with FASTCOORD_NO_EXTENSIONS=1); benchmarks
        # pass either explicitly to compare them in one run.
        self.wheel = wheel if wheel is not None else timing_wheel.TimingWheel(now_ms)
        self.table = table if table is not None else member_table.MemberTable()
        self.partition_for: Callable[[str, int], int] = partition_for or partition.partition_for
        self.runtime = Runtime(self.config, self.wheel, self.partition_for, now_ms)
        self.group_manager = GroupManager(self.runtime, self.table, new_member_id, topics)
        self.offset_manager = OffsetManager(self.runtime, GroupsView(self.group_manager))
        self.acls = AclManager(self.runtime)
        self.groups: dict[str, Group] = self.group_manager.groups
        self.consumer_groups = self.group_manager.consumer_groups
        # heartbeat(group_id, member_id, generation, group_instance_id, version, now_ms): a
        # Heartbeat's error code. Heartbeats produce no records, timers or events, so the
        # server calls this directly, without a Result; bound to the group manager here
        # rather than wrapped in a method (a frame less), as it is the server's most
        # frequent call into the core.
        self.heartbeat: Callable[[str, str, int, str | None, int, int], int] = MethodType(
            session.heartbeat_code, self.group_manager
        )
        self._handlers: dict[type[Request | OffsetCommitBatch], Callable[[Call, Any], None]] = {
            JoinGroupRequest: self._on(join.join_group, self.group_manager),
            SyncGroupRequest: self._on(sync.sync_group, self.group_manager),
            HeartbeatRequest: self._on(session.heartbeat, self.group_manager),
            LeaveGroupRequest: self._on(leave.leave_group, self.group_manager),
            OffsetCommitRequest: self._on(offsets.offset_commit, self.offset_manager),
            OffsetCommitBatch: self._on(offsets.offset_commit, self.offset_manager),
            OffsetFetchRequest: self._on(offsets.offset_fetch, self.offset_manager),
            OffsetDeleteRequest: self._on(offsets.offset_delete, self.offset_manager),
            DescribeGroupsRequest: self._on(admin.describe_groups, self.group_manager),
            ListGroupsRequest: self._on(admin.list_groups, self.group_manager),
            DeleteGroupsRequest: self._delete_groups,
            ConsumerGroupHeartbeatRequest: self._on(
                consumer_heartbeat.consumer_group_heartbeat, self.group_manager
            ),
            ConsumerGroupDescribeRequest: self._on(
                consumer_describe.consumer_group_describe, self.group_manager
            ),
            DescribeAclsRequest: self._on(AclManager.describe_acls, self.acls),
            CreateAclsRequest: self._on(AclManager.create_acls, self.acls),
            DeleteAclsRequest: self._on(AclManager.delete_acls, self.acls),
        }
        self.schedule(("retention",), now_ms + self.config.offsets_retention_check_interval_ms)

    @staticmethod
    def _on(handler: Callable[[Any, Call, Any], None], part: object) -> Callable[[Call, Any], None]:
        return lambda call, request: handler(part, call, request)

    # The coordinator's own state, kept by the runtime; the server sets it while loading.

    @property
    def active(self) -> bool:
        return self.runtime.active

    @active.setter
    def active(self, active: bool) -> None:
        self.runtime.active = active

    @property
    def loading_partitions(self) -> set[int]:
        return self.runtime.loading_partitions

    @property
    def owned_partitions(self) -> set[int] | None:
        return self.runtime.owned_partitions

    @owned_partitions.setter
    def owned_partitions(self, partitions: set[int] | None) -> None:
        self.runtime.owned_partitions = partitions

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
        result = self.runtime.begin()
        try:
            call = Call(handle, version, now_ms, client_id, client_host, result)
            self._handlers[type(request)](call, request)
        finally:
            self.runtime.result = None
        return result

    def commit_offsets(
        self, requests: list[tuple[Handle, OffsetCommitBatch]], now_ms: int
    ) -> Result:
        """OffsetCommit requests (handle, batch) read one after another, handled in order as
        `handle` would, in one Result: their records go out in one append."""
        result = self.runtime.begin()
        try:
            offsets.offset_commits(self.offset_manager, requests, now_ms, result)
        finally:
            self.runtime.result = None
        return result

    def heartbeat_answers(self) -> dict[int, int]:
        """{error code: heartbeats answered with it}, every path counted once."""
        return self.group_manager.heartbeat_answers()

    def batch_assignments(self) -> None:
        """From now on a consumer group's target assignment is computed once for the
        heartbeats that find it due between two calls of run_assignments, not in each
        (consumer/batching.py). The caller runs them once it has handled what it read."""
        if self.group_manager.batches is None:
            self.group_manager.batches = Batches()

    def assignments_due(self) -> bool:
        """Whether heartbeats wait for run_assignments."""
        return bool(self.group_manager.batches)

    def run_assignments(self, now_ms: int, budget: int | None = None) -> Result:
        """Compute the target assignments due and answer the heartbeats that waited for
        them: every one, or groups worth about `budget` members of work (at least one);
        the rest stay due (assignments_due())."""
        result = self.runtime.begin()
        try:
            consumer_heartbeat.run_batches(self.group_manager, now_ms, result, budget)
        finally:
            self.runtime.result = None
        return result

    def topics_changed(self) -> None:
        """A topic was added: see GroupManager.topics_changed."""
        self.group_manager.topics_changed()

    def table_answers_heartbeats(self) -> bool:
        """Whether table.heartbeat_id may answer dynamic members' heartbeats alone (when it
        returns a code >= 0): nothing is loading, unloaded or shutting down."""
        return self.runtime.serves_all()

    def advance(self, now_ms: int, limit: int | None = None) -> Result:
        """Move time to now_ms and fire due timers in deadline order: every one, or at most
        `limit`. The rest stay due (next_deadline() is then now_ms) and are fired first by
        the next call, so that a burst (a rebalance of 100k members arms their sessions
        in the same millisecond) is handled in parts, with requests served between them."""
        result = self.runtime.begin()
        try:
            for key in self.runtime.due(now_ms, limit):
                self._fire(key, now_ms, result)
        finally:
            self.runtime.result = None
        return result

    def next_deadline(self) -> int | None:
        return self.runtime.next_deadline()

    def complete_append(self, token: int, error: ErrorCode, now_ms: int) -> Result:
        """The records of Result.append `token` are durable (error NONE) or failed."""
        return self.complete_appends([token], error, now_ms)

    def complete_appends(self, tokens: list[int], error: ErrorCode, now_ms: int) -> Result:
        """complete_append of each token, in order, in one Result."""
        result = self.runtime.begin()
        try:
            for token in tokens:
                for callback in self.runtime.completed(token):
                    callback(error, now_ms, result)
        finally:
            self.runtime.result = None
        return result

    def shutdown(self, now_ms: int) -> Result:
        """Stop coordinating: answer every waiting JoinGroup and SyncGroup NOT_COORDINATOR;
        later requests get COORDINATOR_NOT_AVAILABLE, as from a Kafka broker shutting down."""
        result = self.runtime.begin()
        try:
            # Heartbeats waiting for their target assignment get it, as if it had run first.
            consumer_heartbeat.run_batches(self.group_manager, now_ms, result)
            self.runtime.active = False
            for group in self.groups.values():
                responses.unload_group(group, result)
        finally:
            self.runtime.result = None
        return result

    def take(self, partition: int) -> None:
        """Offsets partition `partition` is this coordinator's from now on (it moved here):
        its groups are answered COORDINATOR_LOAD_IN_PROGRESS until the caller has replayed
        its log (replay(..., loading=True)) and discarded it from loading_partitions."""
        owned = self.runtime.owned_partitions
        if owned is not None:
            owned.add(partition)
        self.runtime.loading_partitions.add(partition)

    def resign(
        self, partition: int, now_ms: int, unloaded: Callable[[int], None] | None = None
    ) -> Result:
        """Offsets partition `partition` moved to another coordinator (Kafka's
        onResignation): its groups are answered NOT_COORDINATOR from now on and unloaded
        (resignation.py). Once every append made before is complete, what their callbacks
        put back is unloaded too, and `unloaded(partition)` is called: nothing of the
        partition is written here after that, and its log may be closed. (The caller takes
        the partition back only after that call: taken back before, neither happens.)"""
        runtime = self.runtime
        partitions = self.config.offsets_topic_num_partitions
        if runtime.owned_partitions is None:
            runtime.owned_partitions = set(range(partitions))
        runtime.owned_partitions.discard(partition)
        runtime.loading_partitions.discard(partition)
        if partition == ACL_PARTITION:
            self.acls.resign()
        partition_for = runtime.partition_for

        def in_partition(group_id: str) -> bool:
            return partition_for(group_id, partitions) == partition

        gm, om = self.group_manager, self.offset_manager

        def settled(error: ErrorCode, now_ms: int, result: Result) -> None:
            owned = runtime.owned_partitions
            if owned is not None and partition in owned:
                return  # taken back meanwhile: what it holds now is its load's
            resignation.unload_partition(gm, om, in_partition, now_ms, result, report=False)
            if unloaded is not None:
                unloaded(partition)

        result = runtime.begin()
        try:
            resignation.unload_partition(gm, om, in_partition, now_ms, result, report=True)
            # An append of nothing completes after every append before it.
            runtime.append(result, [], settled)
        finally:
            runtime.result = None
        return result

    # The runtime's timers and appends, for tests and tools that drive them directly.

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        self.runtime.schedule(key, deadline_ms)

    def cancel(self, key: TimerKey) -> None:
        self.runtime.cancel(key)

    def append(self, result: Result, records: Sequence[LogEntry], callback: AppendCallback) -> None:
        self.runtime.append(result, records, callback)

    # -- routing --------------------------------------------------------------------------

    def _delete_groups(self, call: Call, request: DeleteGroupsRequest) -> None:
        cleanup.delete_groups(self.group_manager, self.offset_manager, call, request)

    def _fire(self, key: TimerKey, now_ms: int, result: Result) -> None:
        kind, gm = key[0], self.group_manager
        if kind == "heartbeat":
            leave.on_heartbeat_timer(gm, key[1], key[2], now_ms, result)
        elif kind == "pending":
            leave.on_pending_member_timer(gm, key[1], key[2], now_ms, result)
        elif kind == "join":
            rebalance.on_join_timer(gm, key[1], now_ms, result)
        elif kind == "sync":
            sync.on_sync_timer(gm, key[1], key[2], now_ms, result)
        elif kind == "consumer_session":
            consumer_leave.on_session_timer(gm, key[1], key[2], now_ms, result)
        elif kind == "consumer_revocation":
            consumer_leave.on_revocation_timer(gm, key[1], key[2], now_ms, result)
        elif kind == "retention":
            cleanup.expire_offsets(gm, self.offset_manager, self.runtime, now_ms, result)
            self.schedule(key, now_ms + self.config.offsets_retention_check_interval_ms)
        else:
            raise AssertionError(f"unknown timer {key!r}")

    def replay(self, record: LogEntry, now_ms: int, loading: bool = False) -> None:
        """Apply one durable record, or an OffsetCommit's records together: the only way
        offsets, group metadata and the ACLs of the log change.

        Used live (loading=False, when a write becomes durable) and at load (replaying the
        log, loading=True).
        """
        om = self.offset_manager
        if isinstance(record, OffsetCommits):
            om.replay_commits(record, now_ms)
            return
        key, value = record.key, record.value
        if isinstance(key, OffsetCommitKey):
            assert value is None or isinstance(value, OffsetCommitValue)
            om.replay_offset(key, value, now_ms)
        elif isinstance(key, CONSUMER_GROUP_KEYS):
            self.group_manager.replay_consumer(record, now_ms)
        elif isinstance(key, GroupMetadataKey):
            assert value is None or isinstance(value, GroupMetadataValue)
            has_offsets = om.has_offsets(key.group)
            records.replay_group(self.group_manager, key.group, value, now_ms, loading, has_offsets)
        elif isinstance(key, AclKey):
            assert value is None or isinstance(value, AclValue)
            self.acls.replay(key, value is not None, loading)
        else:
            raise TypeError(f"unknown record key {key!r}")

    def snapshot(self) -> dict[str, Any]:
        """The durable view of every group, for tests that compare replay with live state."""
        out: dict[str, Any] = {}
        for group_id, group in sorted(self.groups.items()):
            if group.is_(DEAD):
                continue
            group_offsets = self.offset_manager.offsets(group_id)
            if group.generation_id == 0 and not group.members and not len(group_offsets):
                # Created by a JoinGroup that never completed: nothing of it was written
                # (Kafka drops it at the next cleanup, as expire_offsets does here).
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
                "offsets": dict(sorted(group_offsets.items())),
            }
        for group_id, cgroup in sorted(self.consumer_groups.items()):
            out[group_id] = {
                "type": "consumer",
                "epoch": cgroup.group_epoch,
                "metadata_hash": cgroup.metadata_hash,
                "assignment_epoch": cgroup.assignment_epoch,
                "state": str(cgroup.state),
                "members": {
                    m.member_id: (*m.metadata(), m.current) for m in cgroup.members.values()
                },
                "target": dict(sorted(cgroup.target.items())),
                "partition_epochs": dict(sorted(cgroup.partition_epochs.items())),
                "offsets": dict(sorted(self.offset_manager.offsets(group_id).items())),
            }
        return out
