"""A test harness for the coordinator: virtual time, requests by name, answers by handle.

Like the mock timer of Kafka's new group coordinator tests: `sleep(ms)` moves virtual time,
firing every timer at its own deadline on the way. Appends are acknowledged at once unless
`hold_appends` is set, in which case `ack(error)` completes the oldest one.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

from fastcoord.core.config import GroupConfig
from fastcoord.core.coordinator import Coordinator
from fastcoord.core.records import Record
from fastcoord.core.result import Event, Result
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from fastcoord.protocol.schema import Message, Request

FAST = GroupConfig(group_initial_rebalance_delay_ms=0)


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        data = t.encode()
        out += struct.pack(">h", len(data)) + data
    return out + struct.pack(">i", -1)


class Harness:
    def __init__(self, config: GroupConfig | None = None, start_ms: int = 1_000_000) -> None:
        ids = itertools.count(1)
        self.now = start_ms
        self.co = Coordinator(
            config or GroupConfig(),
            now_ms=start_ms,
            new_member_id=lambda prefix: f"{prefix}-{next(ids)}",
        )
        self.answers: dict[int, Message] = {}
        self.records: list[Record] = []
        self.events: list[Event] = []
        self.hold_appends = False
        self.held: list[int] = []
        self._handles = itertools.count(1)

    # -- plumbing ---------------------------------------------------------------------

    def absorb(self, result: Result) -> None:
        for handle, response in result.responses:
            assert handle not in self.answers, f"request {handle} answered twice"
            self.answers[handle] = response
        self.records.extend(result.records)
        self.events.extend(result.events)
        if result.append is not None:
            if self.hold_appends:
                self.held.append(result.append)
            else:
                self.absorb(self.co.complete_append(result.append, ErrorCode.NONE, self.now))

    def ack(self, error: ErrorCode = ErrorCode.NONE) -> None:
        self.absorb(self.co.complete_append(self.held.pop(0), error, self.now))

    def send(self, request: Request, version: int, client_id: str = "client") -> int:
        handle = next(self._handles)
        self.absorb(self.co.handle(handle, request, version, self.now, client_id, "/127.0.0.1"))
        return handle

    def answer(self, handle: int) -> Any:
        """The response to a request, or None while it waits."""
        return self.answers.get(handle)

    def sleep(self, ms: int) -> None:
        target = self.now + ms
        while (deadline := self.co.next_deadline()) is not None and deadline <= target:
            self.now = max(self.now, deadline)
            self.absorb(self.co.advance(self.now))
        self.now = target
        self.absorb(self.co.advance(target))

    def group(self, group_id: str = "g") -> Any:
        return self.co.groups.get(group_id)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    # -- client calls -----------------------------------------------------------------

    def join(
        self,
        member_id: str = "",
        group_id: str = "g",
        instance_id: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
        version: int = 7,
        protocol_type: str = "consumer",
        client_id: str = "client",
    ) -> int:
        protocols = protocols if protocols is not None else [("range", subscription("t"))]
        return self.send(
            JoinGroupRequest(
                group_id=group_id,
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=rebalance_ms,
                member_id=member_id,
                group_instance_id=instance_id,
                protocol_type=protocol_type,
                protocols=[JoinGroupRequestProtocol(n, m) for n, m in protocols],
            ),
            version,
            client_id,
        )

    def join_new(self, group_id: str = "g", version: int = 7, **kw: Any) -> tuple[str, int]:
        """KIP-394's two steps: get a member id, join with it. Returns (member id, handle)."""
        first = self.answer(self.join(group_id=group_id, version=version, **kw))
        assert isinstance(first, JoinGroupResponse)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED, first
        return first.member_id, self.join(first.member_id, group_id, version=version, **kw)

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        group_id: str = "g",
        instance_id: str | None = None,
        version: int = 5,
        protocol_type: str | None = "consumer",
        protocol_name: str | None = None,
    ) -> int:
        return self.send(
            SyncGroupRequest(
                group_id=group_id,
                generation_id=generation,
                member_id=member_id,
                group_instance_id=instance_id,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
                assignments=[
                    SyncGroupRequestAssignment(m, a) for m, a in (assignments or {}).items()
                ],
            ),
            version,
        )

    def heartbeat(
        self,
        member_id: str,
        generation: int,
        group_id: str = "g",
        instance_id: str | None = None,
        version: int = 4,
    ) -> int:
        handle = self.send(HeartbeatRequest(group_id, generation, member_id, instance_id), version)
        return int(self.answer(handle).error_code)

    def leave(self, *members: tuple[str, str | None], group_id: str = "g", version: int = 5) -> Any:
        if version >= 3:
            req = LeaveGroupRequest(
                group_id=group_id, members=[MemberIdentity(m, i) for m, i in members]
            )
        else:
            req = LeaveGroupRequest(group_id=group_id, member_id=members[0][0])
        return self.answer(self.send(req, version))

    def commit(
        self,
        offsets: dict[tuple[str, int], int],
        member_id: str = "",
        generation: int = -1,
        group_id: str = "g",
        metadata: str = "",
        version: int = 8,
        instance_id: str | None = None,
    ) -> int:
        topics: dict[str, list[OffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                OffsetCommitRequestPartition(partition, offset, -1, -1, metadata)
            )
        return self.send(
            OffsetCommitRequest(
                group_id=group_id,
                generation_id_or_member_epoch=generation,
                member_id=member_id,
                group_instance_id=instance_id,
                topics=[OffsetCommitRequestTopic(t, ps) for t, ps in topics.items()],
            ),
            version,
        )

    # -- composite steps --------------------------------------------------------------

    def stable_group(self, n: int, group_id: str = "g", **kw: Any) -> list[str]:
        """n members join together and sync; returns member ids, the leader first."""
        members = []
        handles = []
        for _ in range(n):
            member_id, handle = self.join_new(group_id=group_id, **kw)
            members.append(member_id)
            handles.append(handle)
        self.sleep(self.co.config.group_initial_rebalance_delay_ms)
        answers = [self.answer(h) for h in handles]
        assert all(a is not None and a.error_code == 0 for a in answers), answers
        generation = answers[0].generation_id
        leader = answers[0].leader
        assignments = {m: f"assignment-of-{m}".encode() for m in members}
        sync_handles = {
            m: self.sync(m, generation, assignments if m == leader else None, group_id=group_id)
            for m in members
        }
        for m, h in sync_handles.items():
            response = self.answer(h)
            assert isinstance(response, SyncGroupResponse), (m, response)
            assert response.error_code == 0 and response.assignment == assignments[m]
        return [leader] + [m for m in members if m != leader]
