"""A new connection is served while a big rebalance completes.

Thousands of members on a few shared connections join one group; when the initial
rebalance delay ends, the server completes the join and owes every member its answer.
A client that connects as the first of those answers arrives gets its ApiVersions,
Metadata and FindCoordinator answered before the last of them: the completion is
delivered a slice per turn of the server's loop, and the listener and the new connection
run between the slices.
"""

from __future__ import annotations

import selectors
import socket
import time
from pathlib import Path

from fastcoord.client.stalling import pipeline
from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    FindCoordinatorRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    MetadataRequest,
)
from fastcoord.protocol.schema import Request
from fastcoord.testing import fastcoord_server

CONNECTIONS = 4
MEMBERS_PER_CONNECTION = 1500
FRESH: list[tuple[Request, int]] = [
    (ApiVersionsRequest(), 0),
    (MetadataRequest(topics=None), 1),
    (FindCoordinatorRequest(key="g", key_type=0), 1),
]


def join(member_id: str) -> tuple[Request, int]:
    request = JoinGroupRequest(
        group_id="g",
        session_timeout_ms=60_000,
        rebalance_timeout_ms=60_000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol("range", b"")],
    )
    return request, 4


def member_ids(host: str, port: int) -> list[str]:
    """Member ids for MEMBERS_PER_CONNECTION new members (JoinGroup v4's first round trip,
    MEMBER_ID_REQUIRED), so that their JoinGroups can all wait together: a connection
    holds a member's requests while its JoinGroup waits, and a new member has no id yet."""
    with socket.create_connection((host, port), timeout=60) as sock:
        sock.sendall(pipeline([join("")] * MEMBERS_PER_CONNECTION))
        buffer = bytearray()
        ids: list[str] = []
        while len(ids) < MEMBERS_PER_CONNECTION:
            chunk = sock.recv(1 << 20)
            assert chunk, "the server closed the connection"
            buffer += chunk
            while len(buffer) >= 4 and len(buffer) >= 4 + int.from_bytes(buffer[:4], "big"):
                size = int.from_bytes(buffer[:4], "big")
                frame = bytes(buffer[4 : 4 + size])
                del buffer[: 4 + size]
                _, answer = framing.decode_response(ApiKey.JOIN_GROUP, 4, frame)
                assert isinstance(answer, JoinGroupResponse)
                assert answer.error_code == ErrorCode.MEMBER_ID_REQUIRED, answer
                ids.append(answer.member_id)
    return ids


def answers_in(buffer: bytearray) -> int:
    """Whole frames at the head of `buffer`, taken out of it."""
    count = 0
    while len(buffer) >= 4:
        size = int.from_bytes(buffer[:4], "big")
        if len(buffer) < 4 + size:
            break
        del buffer[: 4 + size]
        count += 1
    return count


def storm(
    address: tuple[str, int], requests: list[list[tuple[Request, int]]]
) -> tuple[float, float]:
    """Send each connection's requests at once; when the first answer arrives, connect
    anew and ask FRESH. (When the new connection's last answer came, when the storm's
    last answer came.)"""
    selector = selectors.DefaultSelector()
    owed = {}
    buffers = {}
    for batch in requests:
        sock = socket.create_connection(address, timeout=60)
        sock.sendall(pipeline(batch))
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        owed[sock] = len(batch)
        buffers[sock] = bytearray()
    fresh: socket.socket | None = None
    fresh_done = storm_done = 0.0
    deadline = time.monotonic() + 120
    try:
        while (sum(owed.values()) or not fresh_done) and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                chunk = sock.recv(1 << 20)
                assert chunk, "the server closed a connection"
                buffers[sock] += chunk
                owed[sock] -= answers_in(buffers[sock])
                if sock is not fresh and fresh is None:
                    # The storm's first answer: a new client connects now.
                    fresh = socket.create_connection(address, timeout=60)
                    fresh.sendall(pipeline(FRESH))
                    fresh.setblocking(False)
                    selector.register(fresh, selectors.EVENT_READ)
                    owed[fresh] = len(FRESH)
                    buffers[fresh] = bytearray()
                if owed[sock] == 0:
                    if sock is fresh:
                        fresh_done = time.monotonic()
                    elif not any(owed[s] for s in owed if s is not fresh):
                        storm_done = time.monotonic()
                    selector.unregister(sock)
        assert not sum(owed.values()), f"answers missing: {sum(owed.values())}"
    finally:
        for sock in list(owed):
            sock.close()
    return fresh_done, storm_done


def test_a_new_connection_is_answered_while_a_big_rebalance_completes(tmp_path: Path) -> None:
    with fastcoord_server(
        tmp_path, "--in-memory", "--group-initial-rebalance-delay-ms", "500"
    ) as server:
        # One group: its join completes when the delay ends, every answer in one Result.
        requests = [
            [join(member_id) for member_id in member_ids(server.host, server.port)]
            for _ in range(CONNECTIONS)
        ]
        fresh_done, storm_done = storm((server.host, server.port), requests)
    assert fresh_done < storm_done, (fresh_done, storm_done)
