"""Lone requests against the real server, where an idle connection waits parked on the
reactor: heartbeats it answers alone, and everything it hands back (another API, a frame
cut across reads, a client that stops reading, a reset, the client's end, a shutdown) is
answered as the ordinary path answers it, in order, on many connections at once."""

from __future__ import annotations

import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastcoord.client.blocking import Connection, join_group
from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import ApiVersionsRequest, HeartbeatRequest, HeartbeatResponse
from fastcoord.testing import ServerProcess, fastcoord_server

IDLE_MS = 1500
BATCH = 20  # whole heartbeat frames a send: each read is one the reactor can answer alone


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with fastcoord_server(
        tmp_path,
        "--group-initial-rebalance-delay-ms",
        "0",
        "--connections-max-idle-ms",
        str(IDLE_MS),
    ) as running:
        yield running


class Member:
    """A member of a Stable group of its own, on its own connection."""

    def __init__(self, server: ServerProcess, group: str) -> None:
        self.conn, joined = join_group(server.host, server.port, group, session_timeout_ms=30_000)
        self.group = group
        self.member_id = joined.member_id
        self.generation = joined.generation_id

    def frame(self, member_id: str | None = None, generation: int | None = None) -> bytes:
        self.conn.correlation += 1
        request = HeartbeatRequest(
            self.group,
            self.generation if generation is None else generation,
            self.member_id if member_id is None else member_id,
            None,
        )
        return framing.encode_request(
            RequestHeader(ApiKey.HEARTBEAT, 3, self.conn.correlation, "lone"), request
        )

    def answer(self) -> tuple[int, int]:
        """(correlation id, error code) of the next answer, a Heartbeat's."""
        correlation, response = framing.decode_response(ApiKey.HEARTBEAT, 3, self.conn.read_frame())
        assert isinstance(response, HeartbeatResponse)
        return correlation, response.error_code

    def heartbeat(self) -> int:
        self.conn.sendall(self.frame())
        correlation, code = self.answer()
        assert correlation == self.conn.correlation
        return code

    def close(self) -> None:
        self.conn.close()


def test_many_connections_heartbeat_while_others_come_and_go(tmp_path: Path) -> None:
    with fastcoord_server(tmp_path, "--group-initial-rebalance-delay-ms", "0") as server:
        members = [Member(server, f"g{i}") for i in range(200)]
        heartbeat_rounds(server, members)
    assert "Traceback" not in server.log()


def heartbeat_rounds(server: ServerProcess, members: list[Member]) -> None:
    try:
        for round_ in range(5):
            for m in members:  # all in flight at once, then every answer read
                m.conn.sendall(m.frame())
            for m in members:
                assert m.answer() == (m.conn.correlation, ErrorCode.NONE)
            # Some leave (their descriptors are reused by the next ones) and others join.
            for i in range(round_, len(members), 7):
                members[i].close()
                members[i] = Member(server, f"g{i}-{round_}")
            time.sleep(0.05)
        assert all(m.heartbeat() == ErrorCode.NONE for m in members)
    finally:
        for m in members:
            m.close()


def test_mixed_requests_on_a_parked_connection_are_answered_in_order(
    server: ServerProcess,
) -> None:
    m = Member(server, "g")
    try:
        versions = framing.encode_request(
            RequestHeader(ApiKey.API_VERSIONS, 0, 0, "lone"), ApiVersionsRequest()
        )
        for _ in range(20):
            assert m.heartbeat() == ErrorCode.NONE  # alone: the reactor's
            answered = m.conn.request(ApiVersionsRequest(), 0)  # alone: handed back
            assert answered.error_code == 0
            # Heartbeats, another API and heartbeats the full path answers, in one write.
            first = m.frame()
            stale = m.frame(generation=m.generation + 3)
            m.conn.correlation += 1
            other = versions[:8] + struct.pack(">i", m.conn.correlation) + versions[12:]
            unknown = m.frame(member_id="nobody")
            last = m.frame()
            m.conn.sendall(first + stale + other + unknown + last)
            base = m.conn.correlation - 4
            assert m.answer() == (base, ErrorCode.NONE)
            assert m.answer() == (base + 1, ErrorCode.ILLEGAL_GENERATION)
            correlation, _ = framing.decode_response(ApiKey.API_VERSIONS, 0, m.conn.read_frame())
            assert correlation == base + 2
            assert m.answer() == (base + 3, ErrorCode.UNKNOWN_MEMBER_ID)
            assert m.answer() == (base + 4, ErrorCode.NONE)
    finally:
        m.close()


def test_a_frame_cut_across_reads_is_answered(server: ServerProcess) -> None:
    m = Member(server, "g")
    try:
        for pieces in ([5], [3, 9, 20], list(range(1, 46))):
            frame = m.frame() + m.frame()
            at = 0
            for cut in pieces:
                m.conn.sendall(frame[at:cut])
                at = cut
                time.sleep(0.01)  # each piece a read of its own
            m.conn.sendall(frame[at:])
            assert m.answer() == (m.conn.correlation - 1, ErrorCode.NONE)
            assert m.answer() == (m.conn.correlation, ErrorCode.NONE)
            assert m.heartbeat() == ErrorCode.NONE
    finally:
        m.close()


def test_a_client_that_stops_reading_is_not_read_past_its_bound(tmp_path: Path) -> None:
    """Heartbeats a few at a time, none of their answers read: the reactor answers them until
    the socket takes no more, then the connection holds what it owes, stops reading at
    connection.queued.max.response.bytes and says the client is not reading, and the client
    later gets every answer, whole and in order."""
    with fastcoord_server(
        tmp_path,
        "--group-initial-rebalance-delay-ms",
        "0",
        "--connection-queued-max-response-bytes",
        str(64 << 10),
    ) as server:
        stop_reading(server)


def stop_reading(server: ServerProcess) -> None:
    other = Member(server, "other")
    m = Member(server, "g")
    try:
        # The member's heartbeats go on a connection with a small receive buffer, set before
        # it connects, so that TCP's window is that small: set on a connected socket, the
        # buffer drops what the window let in, the server's ACKs with it, and the client's
        # retransmissions back off until it seems stuck while the server owes nothing.
        correlation = m.conn.correlation
        m.conn.close()
        m.conn = Connection(server.host, server.port, receive_buffer_bytes=4096)
        m.conn.correlation = correlation
        m.conn.sock.setblocking(False)
        first = m.conn.correlation + 1
        sent = 0
        pending = b""
        deadline = time.monotonic() + 60
        stuck_since: float | None = None
        while time.monotonic() < deadline:
            if not pending:
                pending = b"".join(m.frame() for _ in range(BATCH))
            try:
                n = m.conn.sock.send(pending)
            except BlockingIOError:
                n = 0
            pending = pending[n:]
            if not pending:
                sent += BATCH
                stuck_since = None
            elif n == 0:
                if stuck_since is None:
                    stuck_since = time.monotonic()
                elif time.monotonic() - stuck_since > 1.0:
                    break  # the server has stopped reading us
        assert stuck_since is not None, "the server kept reading a client that reads nothing"
        assert other.heartbeat() == ErrorCode.NONE  # others are served meanwhile
        said = f"client at 127.0.0.1:{m.conn.sock.getsockname()[1]} has not read"
        deadline = time.monotonic() + 10
        while said not in server.log():  # while the client still reads nothing
            assert time.monotonic() < deadline, server.log()[-3000:]
            time.sleep(0.05)
        m.conn.sock.setblocking(True)
        m.conn.sock.settimeout(15)
        # The rest of the last batch goes once the server reads again, which it does once
        # we read: from another thread.
        rest = threading.Thread(target=m.conn.sendall, args=(pending,))
        rest.start()
        sent += BATCH if pending else 0
        for i in range(sent):
            assert m.answer() == (first + i, ErrorCode.NONE)
        rest.join()
        assert m.heartbeat() == ErrorCode.NONE
    finally:
        m.close()
        other.close()


def test_a_reset_of_a_parked_connection_is_one_line(server: ServerProcess) -> None:
    gone, stays = Member(server, "gone"), Member(server, "stays")
    try:
        assert gone.heartbeat() == ErrorCode.NONE
        port = gone.conn.sock.getsockname()[1]
        gone.conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        gone.close()
        deadline = time.monotonic() + 10
        while f"127.0.0.1:{port} ended by the client" not in server.log():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
        (line,) = [ln for ln in server.log().splitlines() if f"127.0.0.1:{port}" in ln]
        assert " INFO " in line and "ConnectionResetError" in line
        assert stays.heartbeat() == ErrorCode.NONE
    finally:
        stays.close()


def test_heartbeats_alone_keep_a_connection_from_idling(server: ServerProcess) -> None:
    busy, silent = Member(server, "busy"), Member(server, "silent")
    try:
        started = time.monotonic()
        while time.monotonic() - started < 2.5 * IDLE_MS / 1000:
            assert busy.heartbeat() == ErrorCode.NONE
            time.sleep(0.2)
        assert silent.conn.closed_by_server(timeout=5)
        assert busy.heartbeat() == ErrorCode.NONE
        port = silent.conn.sock.getsockname()[1]
        assert f"closing idle connection from 127.0.0.1:{port}" in server.log()
    finally:
        busy.close()
        silent.close()


def test_sigterm_closes_parked_connections_and_exits_0(tmp_path: Path) -> None:
    with fastcoord_server(
        tmp_path,
        "--group-initial-rebalance-delay-ms",
        "0",
        # A parked connection that shutdown did not close would hold the exit this long,
        # past the wait below, however loaded the machine.
        "--shutdown-grace-ms",
        "600000",
    ) as server:
        members = [Member(server, f"g{i}") for i in range(50)]
        plain = [Connection(server.host, server.port) for _ in range(50)]
        try:
            for m in members:
                assert m.heartbeat() == ErrorCode.NONE
            server.process.send_signal(signal.SIGTERM)
            assert server.process.wait(timeout=30) == 0
            assert all(c.closed_by_server() for c in [m.conn for m in members] + plain)
        finally:
            for m in members:
                m.close()
            for c in plain:
                c.close()
