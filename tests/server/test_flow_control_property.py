"""The connection's flow control over random stalls, idle times, bounds and answer sizes:
every byte a client receives is whole frames in order, or the connection is closed after
them (a cut frame only as its last bytes); a client that stalls for less than the idle
time gets every answer. A real connection over a socket pair, in virtual time."""

from __future__ import annotations

import socket

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord.client.stalling import Received, pipeline
from fastcoord.config import ServerConfig
from fastcoord.protocol.framing import encode_response
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    MetadataRequestTopic,
)
from fastcoord.protocol.schema import Request
from fastcoord.protocol.versions import api_versions_response
from fastcoord.server.app import Server
from fastcoord.server.broker import Broker
from fastcoord.server.connection import Connection
from fastcoord.storage.memory import MemoryStore

TOPIC_SIZES = (1, 20, 400)  # partitions: answers from a few dozen bytes to ~30 KB


def request_for(kind: int, topics: list[str]) -> tuple[Request, int]:
    if kind == 0:
        return ApiVersionsRequest(), 0
    if kind == 1:
        return MetadataRequest(topics=None), 1  # every topic
    return MetadataRequest(topics=[MetadataRequestTopic(name=topics[kind % len(topics)])]), 1


def answer_size(broker: Broker, request: Request, version: int) -> int:
    if isinstance(request, MetadataRequest):
        response = broker.metadata(request, version)
    else:
        response = api_versions_response()
    return len(encode_response(0, version, response)) - 4


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.integers(0, 5), min_size=1, max_size=120),
    stall_ms=st.integers(0, 8_000),
    idle_ms=st.integers(100, 5_000),
    inflight=st.integers(1, 64),
    bound=st.integers(1024, 1 << 20),
    total=st.integers(1024, 4 << 20),
    buffer=st.sampled_from([4096, 16384, 65536]),
)
def test_answers_are_whole_and_in_order_or_the_connection_closes(
    kinds: list[int],
    stall_ms: int,
    idle_ms: int,
    inflight: int,
    bound: int,
    total: int,
    buffer: int,
) -> None:
    topics = [f"t{i}" for i in range(len(TOPIC_SIZES))]
    config = ServerConfig(
        topics=[f"{t}:{n}" for t, n in zip(topics, TOPIC_SIZES, strict=True)],
        auto_create_topics="never",
        connections_max_idle_ms=idle_ms,
        connection_max_inflight_requests=inflight,
        connection_queued_max_response_bytes=bound,
        queued_max_response_bytes=total,
    )
    requests = [request_for(k, topics) for k in kinds]
    broker = Broker(config, config.cluster_for(config.port))
    sizes = [answer_size(broker, r, v) for r, v in requests]
    received = Received()

    async def main() -> Server:
        server = Server(config, MemoryStore(1), max_connections=10)
        ours, theirs = trio.socket.socketpair()
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer)
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
        connection = Connection(server, trio.SocketStream(ours), "127.0.0.1:1")

        async def client() -> None:
            async def send() -> None:
                data = memoryview(pipeline(requests))
                while data:
                    data = data[await theirs.send(data) :]

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                await trio.sleep(stall_ms / 1000)
                while len(received.frames) < len(requests):
                    try:
                        chunk = await theirs.recv(65536)
                    except ConnectionResetError:
                        chunk = b""
                    if not chunk:
                        received.closed = True
                        break
                    received.feed(chunk)
                nursery.cancel_scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(connection.run)
            with trio.fail_after(stall_ms / 1000 + 3 * idle_ms / 1000 + 60):
                await client()
            theirs.close()
        assert server.owed_bytes == 0  # what the connection owed is accounted for, all of it
        return server

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    received.check()
    assert [size for _, size in received.frames] == sizes[: len(received.frames)]
    if stall_ms < idle_ms:
        assert not received.closed and len(received.frames) == len(requests)
