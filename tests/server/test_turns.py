"""The per-turn bounds keep every connection's answers in its requests' order.

A connection yields after TURN_NS of handling, big Results are delivered a slice a turn,
and consumer groups' target assignments run once per batch in a task of their own: here
each bound is as small as it goes (a yield after every frame, slices of three answers),
with two connections pipelining a mix of requests (consumer group joins of groups both
share among them, whose answers wait for the assignment task) on socket pairs into one
server. Every answer arrives, each connection's in its request order, and every member
that joined is in its group at an epoch.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastcoord.client.stalling import Received, pipeline
from fastcoord.config import ServerConfig
from fastcoord.protocol import framing
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    FindCoordinatorRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from fastcoord.protocol.schema import Request
from fastcoord.server import app, connection
from fastcoord.server.app import Server
from fastcoord.server.connection import Connection
from fastcoord.storage.memory import MemoryStore

GROUPS = ["g0", "g1", "g2"]


def request_for(kind: int, conn: int, i: int) -> tuple[Request, int]:
    if kind == 0:
        return ApiVersionsRequest(), 0
    if kind == 1:
        return MetadataRequest(topics=None), 1
    if kind == 2:
        return FindCoordinatorRequest(key=GROUPS[i % 3], key_type=0), 1
    if kind == 3:  # a commit of a group nobody is in (read as one of a run of commits)
        partition = OffsetCommitRequestPartition(i % 4, i, committed_metadata="")
        request = OffsetCommitRequest(
            group_id=f"c{i % 2}",
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[OffsetCommitRequestTopic("t", [partition])],
        )
        return request, 8
    # A member joins (the consumer group protocol): its answer waits for its group's
    # target assignment, which the assignment task runs once for the joins read together.
    return (
        ConsumerGroupHeartbeatRequest(
            group_id=GROUPS[i % 3],
            member_id=f"m-{conn}-{i}",
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=["t"],
            topic_partitions=[],
        ),
        0,
    )


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(kinds=st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=60), min_size=2, max_size=2))
def test_answers_keep_their_order_when_every_bound_yields(
    kinds: list[list[int]], monkeypatch: Any
) -> None:
    monkeypatch.setattr(connection, "TURN_NS", 0)  # a yield after every frame
    monkeypatch.setattr(app, "ANSWERS_PER_TURN", 3)
    monkeypatch.setattr(app, "ANSWERS_PER_CHECK", 1)
    monkeypatch.setattr(app, "DELIVER_TURN_NS", 0)
    monkeypatch.setattr(app, "ASSIGNMENT_MEMBERS_PER_TURN", 1)
    monkeypatch.setattr(app, "ASSIGN_TURN_NS", 0)
    config = ServerConfig(
        topics=["t:4"], auto_create_topics="never", group_initial_rebalance_delay_ms=0
    )
    requests = [[request_for(k, c, i) for i, k in enumerate(ks)] for c, ks in enumerate(kinds)]
    received = [Received(), Received()]
    answers: list[list[bytes]] = [[], []]

    async def main() -> Server:
        store = MemoryStore(config.offsets_topic_num_partitions)
        server = Server(config, store, max_connections=10)
        store.start(trio.lowlevel.current_trio_token().run_sync_soon, server.appended)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.assign)
            nursery.start_soon(server.deliver)
            async with trio.open_nursery() as clients:
                for c in range(2):
                    ours, theirs = trio.socket.socketpair()
                    conn = Connection(server, trio.SocketStream(ours), f"127.0.0.1:{c}")
                    nursery.start_soon(conn.run)
                    clients.start_soon(client, theirs, c)
            nursery.cancel_scope.cancel()
        return server

    async def client(sock: trio.socket.SocketType, c: int) -> None:
        data = memoryview(pipeline(requests[c]))
        while data:
            data = data[await sock.send(data) :]
        buffer = b""
        with trio.fail_after(60):
            while len(received[c].frames) < len(requests[c]):
                chunk = await sock.recv(65536)
                assert chunk, "the server closed the connection"
                received[c].feed(chunk)
                buffer += chunk
        while buffer:
            size = int.from_bytes(buffer[:4], "big")
            answers[c].append(buffer[4 : 4 + size])
            buffer = buffer[4 + size :]
        sock.close()

    server = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    members = set()
    for c in range(2):
        received[c].check()  # whole frames, correlation ids in request order
        assert len(received[c].frames) == len(requests[c])
        for (request, version), frame in zip(requests[c], answers[c], strict=True):
            if isinstance(request, ConsumerGroupHeartbeatRequest):
                _, answer = framing.decode_response(request.API_KEY, version, frame)
                assert isinstance(answer, ConsumerGroupHeartbeatResponse)
                assert answer.error_code == 0 and answer.member_epoch >= 1, answer
                members.add((request.group_id, request.member_id))
    groups = server.coordinator.consumer_groups
    assert members == {(g, m) for g, group in groups.items() for m in group.members}
    assert not server.coordinator.assignments_due()


@pytest.mark.parametrize("members", [40])
def test_joins_read_together_share_one_group_epoch(members: int, monkeypatch: Any) -> None:
    """Joins of one group pipelined on a connection are read in one turn (the turn's
    bound out of the way): the assignment task runs once for them, and the group reaches
    epoch 1 only, where one at a time each join was an epoch."""
    monkeypatch.setattr(connection, "TURN_NS", 10**12)
    config = ServerConfig(topics=["t:4"], auto_create_topics="never")
    requests = [request_for(4, 0, 3 * i) for i in range(members)]  # all of group g0
    received = Received()

    async def main() -> Server:
        store = MemoryStore(config.offsets_topic_num_partitions)
        server = Server(config, store, max_connections=10)
        store.start(trio.lowlevel.current_trio_token().run_sync_soon, server.appended)
        ours, theirs = trio.socket.socketpair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.assign)
            nursery.start_soon(server.deliver)
            nursery.start_soon(Connection(server, trio.SocketStream(ours), "127.0.0.1:1").run)
            await theirs.send(pipeline(requests))
            with trio.fail_after(60):
                while len(received.frames) < members:
                    received.feed(await theirs.recv(65536))
            theirs.close()
            nursery.cancel_scope.cancel()
        return server

    server = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    received.check()
    group = server.coordinator.consumer_groups["g0"]
    assert len(group.members) == members
    assert group.group_epoch == group.assignment_epoch == 1
