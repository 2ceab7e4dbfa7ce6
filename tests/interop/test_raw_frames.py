"""Raw frames against the real server: refusals reach only the connection that sent them."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastcoord.client.blocking import Connection, join_group
from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    MetadataResponse,
)
from fastcoord.protocol.schema import Request
from fastcoord.testing import ServerProcess, fastcoord_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with fastcoord_server(
        tmp_path, "--group-initial-rebalance-delay-ms", "0", "--socket-request-max-bytes", "65536"
    ) as running:
        yield running


def member(server: ServerProcess, group: str = "g") -> tuple[Connection, str]:
    """A member of a Stable group (joined and synced as its leader): its connection to the
    coordinator, and its member id."""
    c, joined = join_group(
        server.host, server.port, group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000
    )
    return c, joined.member_id


def heartbeat_ok(c: Connection, member_id: str) -> bool:
    c.send(HeartbeatRequest("g", 1, member_id, None), 3)
    response = c.receive(ApiKey.HEARTBEAT, 3)
    assert isinstance(response, HeartbeatResponse)
    return response.error_code == 0


def test_unsupported_api_versions_gets_the_v0_reply(server: ServerProcess) -> None:
    c = server.connect()
    frame = struct.pack(">hhi", ApiKey.API_VERSIONS, 99, 7) + struct.pack(">h", 3) + b"raw\x00"
    c.sendall(struct.pack(">i", len(frame)) + frame)
    response = c.receive(ApiKey.API_VERSIONS, 0)
    assert isinstance(response, ApiVersionsResponse)
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {a.api_key for a in response.api_keys} >= {ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT}
    # ...and the connection stays usable at a version the server speaks.
    c.send(ApiVersionsRequest(), 0)
    assert c.receive(ApiKey.API_VERSIONS, 0).error_code == 0


@pytest.mark.parametrize(
    "bad",
    [
        struct.pack(">i", 8) + struct.pack(">hhi", 99, 0, 1),  # unknown API key
        struct.pack(">i", 1 << 20) + b"x" * 16,  # over socket.request.max.bytes
        struct.pack(">i", -5),  # a negative size
        struct.pack(">i", 12) + struct.pack(">hhi", ApiKey.HEARTBEAT, 3, 1),  # half a frame
    ],
    ids=["unknown-api-key", "oversized", "negative-size", "half-frame"],
)
def test_bad_frames_close_only_their_connection(server: ServerProcess, bad: bytes) -> None:
    good, member_id = member(server)
    c = server.connect()
    c.sendall(bad)
    if bad.startswith(struct.pack(">i", 12)):
        c.close()  # half a frame, then gone
        time.sleep(0.2)  # the server's end of it leaves no trace to wait for
    else:
        assert c.closed_by_server()
        assert "closing connection" in server.log()  # logged before the close
    assert heartbeat_ok(good, member_id)


def test_pipelined_heartbeats_are_answered_in_order_whatever_path_they_take(
    server: ServerProcess,
) -> None:
    good, member_id = member(server)
    # Heartbeats the member table answers alone, mixed with ones the full path answers
    # (wrong generation, unknown member, an instance id) and with other APIs.
    sent: list[tuple[int, int, int]] = []  # (correlation id, api key, expected error)
    batch = b""
    for i in range(300):
        kind = i % 10
        good.correlation += 1
        if kind == 3:
            request: Request = HeartbeatRequest("g", 7, member_id, None)
            expected = ErrorCode.ILLEGAL_GENERATION
        elif kind == 5:
            request = HeartbeatRequest("g", 1, "nobody", None)
            expected = ErrorCode.UNKNOWN_MEMBER_ID
        elif kind == 7:
            # An instance id the group does not know fences nobody (Kafka's
            # isStaticMemberFenced): the full path answers NONE.
            request = HeartbeatRequest("g", 1, member_id, "not-static")
            expected = ErrorCode.NONE
        elif kind == 9:
            request = ApiVersionsRequest()
            expected = ErrorCode.NONE
        else:
            request = HeartbeatRequest("g", 1, member_id, None)
            expected = ErrorCode.NONE
        version = 0 if kind == 9 else 3
        header = RequestHeader(request.API_KEY, version, good.correlation, "raw")
        batch += framing.encode_request(header, request)
        sent.append((good.correlation, request.API_KEY, expected))
    good.sendall(batch)
    for correlation, api_key, expected in sent:
        got_correlation, response = framing.decode_response(
            api_key, 0 if api_key == ApiKey.API_VERSIONS else 3, good.read_frame()
        )
        assert (got_correlation, response.error_code) == (correlation, expected)


class Flood:
    """A member's heartbeat sent over and over on its non-blocking socket, as fast as the
    server takes it; a partial send is finished, never started again."""

    def __init__(self, c: Connection, group: str, member_id: str) -> None:
        frame = framing.encode_request(
            RequestHeader(ApiKey.HEARTBEAT, 3, 1, "raw"),
            HeartbeatRequest(group, 1, member_id, None),
        )
        c.sock.setblocking(False)
        self.sock = c.sock
        self.chunk = frame * 10_000
        self.pending = memoryview(self.chunk)
        self.sent = 0

    def send(self) -> bool:
        """Send what the socket takes now; False if it takes nothing."""
        try:
            n = self.sock.send(self.pending)
        except BlockingIOError:
            return False
        self.sent += n
        self.pending = self.pending[n:] or memoryview(self.chunk)
        return True


def test_a_client_that_does_not_read_is_not_read_either(tmp_path: Path) -> None:
    """Answers a client does not take are not piled up without bound: once it owes
    connection.queued.max.response.bytes the server stops reading that client, whose sends
    then block; everyone else carries on."""
    with fastcoord_server(
        tmp_path,
        "--group-initial-rebalance-delay-ms",
        "0",
        "--connection-queued-max-response-bytes",
        str(1 << 20),
    ) as server:
        good, member_id = member(server)
        greedy, greedy_id = member(server, "greedy")
        flood = Flood(greedy, "greedy", greedy_id)
        # 1 MiB of heartbeat answers is about 4 MiB of requests, plus what the sockets hold.
        limit = 256 << 20
        deadline = time.monotonic() + 20
        while flood.sent < limit and time.monotonic() < deadline:
            if not flood.send():
                time.sleep(0.05)  # blocked: has the server stopped reading for good?
                if not flood.send():
                    break
        assert flood.sent < limit, "the server kept reading a client that reads nothing"
        assert heartbeat_ok(good, member_id)  # the server and other clients carry on
        # Logged once the server's own writes have blocked for a second; with the twins the
        # server works through what it read more slowly, so allow for that.
        deadline = time.monotonic() + 60
        while "has not read its answers" not in server.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert f"client at 127.0.0.1:{greedy.sock.getsockname()[1]} has not read" in server.log()


# -- bytes after a request's message: ignored, as Kafka ignores them -----------------------

# librdkafka 2.16's all-topics Metadata v12 request (correlation id 3, client id "rdkafka"):
# header v2, then an int32 zero where the compact topic array goes, then
# allow_auto_topic_creation, include_topic_authorized_operations and the tagged fields.
# Kafka reads the first zero byte as a null array (every topic), the next three as the
# rest of the body, and ignores the three bytes left.
LIBRDKAFKA_ALL_TOPICS = bytes.fromhex("0003000c00000003000772646b61666b6100") + b"\0\0\0\0\x01\0\0"


@pytest.fixture
def debug_server(tmp_path: Path) -> Iterator[ServerProcess]:
    with fastcoord_server(
        tmp_path,
        "--log-level",
        "DEBUG",
        "--group-initial-rebalance-delay-ms",
        "0",
        "--topic",
        "orders-a:3",
        "--topic",
        "payments:4",
    ) as running:
        yield running


def wait_for_log(server: ServerProcess, text: str) -> None:
    deadline = time.monotonic() + 10
    while text not in server.log():
        assert time.monotonic() < deadline, f"not logged: {text!r}\n{server.log()}"
        time.sleep(0.05)


def test_librdkafkas_all_topics_metadata_request_is_answered(debug_server: ServerProcess) -> None:
    c = debug_server.connect()
    c.sendall(struct.pack(">i", len(LIBRDKAFKA_ALL_TOPICS)) + LIBRDKAFKA_ALL_TOPICS)
    correlation_id, response = framing.decode_response(ApiKey.METADATA, 12, c.read_frame())
    assert correlation_id == 3
    assert isinstance(response, MetadataResponse)
    assert {t.name: len(t.partitions) for t in response.topics} == {"orders-a": 3, "payments": 4}
    assert all(t.error_code == ErrorCode.NONE for t in response.topics)
    # The connection stays open, and the next request on it is answered.
    c.send(ApiVersionsRequest(), 0)
    assert c.receive(ApiKey.API_VERSIONS, 0).error_code == 0
    port = c.sock.getsockname()[1]
    wait_for_log(
        debug_server, f"127.0.0.1:{port} sent MetadataRequest v12 with 3 bytes after the message"
    )
    assert "closing connection" not in debug_server.log()


def test_heartbeats_with_bytes_after_them_are_answered(debug_server: ServerProcess) -> None:
    good, member_id = member(debug_server)
    batch = b""
    for i in range(20):  # back to back: the fast loop answers runs of them
        good.correlation += 1
        header = RequestHeader(ApiKey.HEARTBEAT, 3, good.correlation, "raw")
        inner = framing.encode_request(header, HeartbeatRequest("g", 1, member_id, None))[4:]
        extra = b"\0" * (1 + i % 3)
        batch += struct.pack(">i", len(inner) + len(extra)) + inner + extra
    good.sendall(batch)
    for i in range(20):
        response = good.receive(ApiKey.HEARTBEAT, 3)
        assert isinstance(response, HeartbeatResponse) and response.error_code == 0, (i, response)
    assert heartbeat_ok(good, member_id)
    port = good.sock.getsockname()[1]
    for count in (1, 2, 3):
        wait_for_log(
            debug_server,
            f"127.0.0.1:{port} sent HeartbeatRequest v3 with {count} bytes after the message",
        )
    assert "closing connection" not in debug_server.log()


def test_a_client_that_goes_away_while_answers_wait_is_closed_quietly(
    server: ServerProcess,
) -> None:
    """A client that resets its connection while the server's writes to it are blocked:
    the connection ends without an error logged, and the server carries on."""
    good, member_id = member(server)
    gone, gone_id = member(server, "gone")
    flood = Flood(gone, "gone", gone_id)
    deadline = time.monotonic() + 60
    while "has not read its answers" not in server.log():
        assert time.monotonic() < deadline, server.log()
        if not flood.send():
            time.sleep(0.1)
    # A reset, as from a crashed process: the server's blocked write fails.
    port = gone.sock.getsockname()[1]
    gone.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    gone.sock.close()
    assert heartbeat_ok(good, member_id)
    # One INFO line says so, once the server has met the reset.
    deadline = time.monotonic() + 20
    while not (ended := [ln for ln in server.log().splitlines() if f":{port} ended by" in ln]):
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)
    assert len(ended) == 1 and " INFO " in ended[0], ended
    assert heartbeat_ok(good, member_id)
    assert "Traceback" not in server.log() and "failed; closing it" not in server.log()
