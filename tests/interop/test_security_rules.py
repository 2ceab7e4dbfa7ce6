"""Kafka's rules of SASL and TLS, each held to a real `fastcoord serve` through raw sockets
(fastcoord.client.blocking), and re-authentication (KIP-368) with real clients too.

What Kafka does is the reference (SaslServerAuthenticator, KafkaChannel, Selector): before
login only ApiVersions and SaslHandshake are read, and anything else closes the connection
unanswered, having created nothing. Every failure inside the exchange holds its answer (if
it has one) and the close back for connection.failed.authentication.delay.ms: another
request than SaslAuthenticate (answered ILLEGAL_SASL_STATE), an unknown mechanism (answered
with the enabled list), bad credentials or a malformed token (answered with one message that
never tells an unknown user from a wrong password), a receive over
sasl.server.max.receive.size (unanswered). A session past connections.max.reauth.ms is
closed at its next request, and a re-authentication on the live connection keeps the member
in its group, as long as it keeps its user and mechanism. Plaintext Kafka to a TLS port and
a ClientHello to a plaintext port each end that connection alone, with one log line saying
why. No password reaches the log.
"""

from __future__ import annotations

import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from fastcoord.client.blocking import (
    Connection,
    Member,
    SaslAnswer,
    SaslClient,
    SaslError,
    TlsConnection,
    join_on,
    sasl_authenticate,
    sasl_handshake,
    sasl_login,
    sasl_raw_token,
)
from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from fastcoord.protocol.schema import Request
from fastcoord.testing import Certificates, ServerProcess
from tests.interop.secured import (
    MECHANISMS,
    PASSWORDS,
    SASL_PROTOCOLS,
    USER,
    Security,
    address,
    admin_group,
    assert_no_secrets,
    connect,
    group_exists,
    logged_in,
    rebalances,
    secured_server,
)
from tests.interop.secured_members import SecuredMember, start_member, wait_owned

# Real clients and servers, many of them: CI runs these once, in a job of their own.
pytestmark = pytest.mark.security

# connection.failed.authentication.delay.ms: Kafka holds back the answer and the close of
# every login that fails in its authenticator (KafkaChannel.prepare), for whatever reason:
# bad credentials, an unknown mechanism, another request, a receive over the bound.
FAILURE_DELAY_MS = 300
REAUTH_FAILURE_DELAY_MS = 100
SASL_TIMEOUT_MS = 2000
TLS_TIMEOUT_MS = 1000
MAX_RECEIVE = 1024
REAUTH_MS = 1500  # Kafka re-authenticates a connection at most once a second
WRONG = "wrong-Pw-5Tz!x"  # a wrong password: no more fit for the log than a right one
SECRETS = {**PASSWORDS, "wrong": WRONG}
TOPIC = "events"
SESSION_MS = 3000
CLOSE_WAIT_S = 3.0  # how long a close that should come at once may take


def failed_message(mechanism: str, during: str = "authentication") -> str:
    """Kafka's one message for a failed login (SaslServerAuthenticator.handleSaslToken)."""
    return (
        f"Authentication failed during {during} due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, Certificates]]:
    with secured_server(
        tmp_path_factory.mktemp("rules"),
        "--topic",
        f"{TOPIC}:3",
        "--group-min-session-timeout-ms",
        "500",
        "--connection-failed-authentication-delay-ms",
        str(FAILURE_DELAY_MS),
        "--sasl-authentication-timeout-ms",
        str(SASL_TIMEOUT_MS),
        "--ssl-handshake-timeout-ms",
        str(TLS_TIMEOUT_MS),
        "--sasl-server-max-receive-size",
        str(MAX_RECEIVE),
    ) as running:
        yield running
        log = running[0].log()
    assert_no_secrets(log, SECRETS)
    assert "Traceback" not in log


@pytest.fixture(scope="module")
def reauth(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, Certificates]]:
    """Sessions of REAUTH_MS; its log at DEBUG, which has a line for each login."""
    with secured_server(
        tmp_path_factory.mktemp("reauth"),
        "--topic",
        f"{TOPIC}:3",
        "--group-min-session-timeout-ms",
        "500",
        "--connections-max-reauth-ms",
        str(REAUTH_MS),
        "--connection-failed-authentication-delay-ms",
        str(REAUTH_FAILURE_DELAY_MS),
        "--admin-port",
        "0",
        "--log-level",
        "DEBUG",
    ) as running:
        yield running
        log = running[0].log()
    assert_no_secrets(log, SECRETS)
    assert "Traceback" not in log


# -- reading what the server does --------------------------------------------------------------


def rest_until_closed(conn: Connection, timeout: float = CLOSE_WAIT_S) -> bytes:
    """Every byte the server sends until it closes the connection; fails the test if it is
    still open after `timeout`."""
    conn.sock.settimeout(timeout)
    got = bytearray()
    deadline = time.monotonic() + timeout
    while True:
        try:
            chunk = conn.sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            return bytes(got)
        except TimeoutError:
            raise AssertionError(
                f"the server left the connection open for {timeout} s (after {len(got)} more bytes)"
            ) from None
        if not chunk:
            return bytes(got)
        got += chunk
        conn.sock.settimeout(max(0.01, deadline - time.monotonic()))


def lines_about(log: str, conn: Connection | socket.socket) -> list[str]:
    """The log lines that name this client connection (by its address)."""
    sock = conn.sock if isinstance(conn, Connection) else conn
    host, port = sock.getsockname()[:2]
    return [line for line in log.splitlines() if f"{host}:{port}" in line]


def logged_about(server: ServerProcess, conn: Connection | socket.socket) -> list[str]:
    """The log lines that name this client connection, once there is one."""
    deadline = time.monotonic() + 20
    while not (lines := lines_about(server.log(), conn)):
        assert time.monotonic() < deadline, f"nothing logged about the connection:\n{server.log()}"
        time.sleep(0.05)
    return lines


def raw_frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    header = struct.pack(">hhi", api_key, version, correlation_id) + struct.pack(">h", 3) + b"raw"
    return struct.pack(">i", len(header) + len(body)) + header + body


def join_request(group: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=SESSION_MS,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol("range", b"")],
    )


def commit_request(group: str) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OffsetCommitRequestTopic(
                TOPIC, [OffsetCommitRequestPartition(partition_index=0, committed_offset=5)]
            )
        ],
    )


def heartbeat(conn: Connection, member: Member) -> int:
    response = conn.request(
        HeartbeatRequest(member.group_id, member.generation_id, member.member_id, None), 3
    )
    assert isinstance(response, HeartbeatResponse)
    return response.error_code


# -- before login ------------------------------------------------------------------------------


@pytest.mark.parametrize("listener", SASL_PROTOCOLS)
@pytest.mark.parametrize("versions_first", [False, True], ids=["first", "after-api-versions"])
@pytest.mark.parametrize("request_kind", ["JoinGroup", "OffsetCommit"])
def test_a_request_before_login_is_closed_unanswered_and_creates_nothing(
    secured: tuple[ServerProcess, Certificates],
    listener: str,
    versions_first: bool,
    request_kind: str,
) -> None:
    server, certs = secured
    group = f"before-login-{listener}-{request_kind}-{versions_first}".lower()
    conn = connect(server, certs, listener)
    if versions_first:
        assert conn.api_versions()[ApiKey.SASL_HANDSHAKE] == (0, 1)
    request: Request = join_request(group) if request_kind == "JoinGroup" else commit_request(group)
    conn.send(request, 5 if request_kind == "JoinGroup" else 2)
    assert rest_until_closed(conn) == b"", "the server answered a request before login"
    time.sleep(0.1)
    assert not group_exists(server, group)


@pytest.mark.parametrize("listener", SASL_PROTOCOLS)
@pytest.mark.parametrize("stage", ["after-handshake", "mid-scram"])
def test_another_request_during_the_exchange_gets_illegal_sasl_state_then_a_close(
    secured: tuple[ServerProcess, Certificates], listener: str, stage: str
) -> None:
    server, certs = secured
    group = f"during-exchange-{listener}-{stage}".lower()
    conn = connect(server, certs, listener)
    conn.api_versions()
    sasl_handshake(conn, "SCRAM-SHA-256")
    if stage == "mid-scram":
        client = SaslClient("SCRAM-SHA-256", USER, PASSWORDS[USER])
        answer = sasl_authenticate(conn, client.first())
        assert answer.error_code == 0 and answer.auth_bytes.startswith(b"r=")
    started = time.monotonic()
    response = conn.request(join_request(group), 5)
    took = time.monotonic() - started
    assert isinstance(response, JoinGroupResponse)
    assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert took >= FAILURE_DELAY_MS / 1000, f"answered after {took * 1000:.0f} ms"
    assert rest_until_closed(conn) == b""
    assert not group_exists(server, group)


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("mechanism", ["GSSAPI", "OAUTHBEARER", "SCRAM-SHA-1", "plain", ""])
def test_an_unknown_mechanism_gets_the_enabled_list_then_a_close(
    secured: tuple[ServerProcess, Certificates], mechanism: str, version: int
) -> None:
    server, certs = secured
    conn = connect(server, certs, "SASL_PLAINTEXT")
    started = time.monotonic()
    response = conn.request(SaslHandshakeRequest(mechanism=mechanism), version)
    took = time.monotonic() - started
    assert isinstance(response, SaslHandshakeResponse)
    assert response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert sorted(response.mechanisms) == sorted(MECHANISMS)
    assert took >= FAILURE_DELAY_MS / 1000, f"answered after {took * 1000:.0f} ms"
    assert rest_until_closed(conn) == b""


# -- failed logins -----------------------------------------------------------------------------


def failing_step(
    conn: Connection, mechanism: str, user: str, password: str
) -> tuple[SaslAnswer, float]:
    """Log in step by step until the server refuses a step: its answer, and the seconds
    that step's answer took."""
    sasl_handshake(conn, mechanism)
    client = SaslClient(mechanism, user, password)
    token: bytes | None = client.first()
    while token is not None:
        started = time.monotonic()
        answer = sasl_authenticate(conn, token)
        took = time.monotonic() - started
        if answer.error_code != 0:
            return answer, took
        token = client.next(answer.auth_bytes)
    raise AssertionError(f"the server let {user} log in with {mechanism}")


MALFORMED = {
    "PLAIN": b"alice-without-separators",
    "SCRAM-SHA-256": b"x=alice,r=not-a-client-first-message",
    "SCRAM-SHA-512": b"\xff\xfe not even utf-8",
}


@pytest.mark.parametrize("listener", SASL_PROTOCOLS)
@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("failure", ["unknown-user", "wrong-password", "malformed"])
def test_a_failed_login_gets_kafkas_one_message_after_the_delay_then_a_close(
    secured: tuple[ServerProcess, Certificates], listener: str, mechanism: str, failure: str
) -> None:
    server, certs = secured
    conn = connect(server, certs, listener)
    conn.api_versions()
    if failure == "malformed":
        sasl_handshake(conn, mechanism)
        started = time.monotonic()
        answer = sasl_authenticate(conn, MALFORMED[mechanism])
        took = time.monotonic() - started
    else:
        user = "mallory" if failure == "unknown-user" else USER
        answer, took = failing_step(conn, mechanism, user, WRONG)
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    # One message whatever failed: an unknown user is not told from a wrong password.
    assert answer.error_message == failed_message(mechanism)
    assert took >= FAILURE_DELAY_MS / 1000, f"answered after {took * 1000:.0f} ms"
    assert rest_until_closed(conn) == b"", "the connection was not closed after the failure"


def test_failed_logins_waiting_out_their_delay_hold_up_no_one(tmp_path: Path) -> None:
    """A flood of failed logins, each answered 2 s later: meanwhile a member's heartbeats
    on another connection, and new logins, are answered at once."""
    delay_s = 2.0
    with secured_server(
        tmp_path,
        "--connection-failed-authentication-delay-ms",
        str(int(delay_s * 1000)),
        "--group-min-session-timeout-ms",
        "500",
    ) as (server, certs):
        conn, _ = logged_in(server, certs, "SASL_PLAINTEXT", "SCRAM-SHA-256")
        member = join_on(conn, "steady", SESSION_MS, SESSION_MS)
        host, port = address(server, "SASL_PLAINTEXT")
        flood: list[tuple[Connection, float]] = []
        for i in range(40):
            bad = Connection(host, port)
            sasl_handshake(bad, "PLAIN")
            bad.send(SaslAuthenticateRequest(auth_bytes=f"\0mallory-{i}\0{WRONG}".encode()), 1)
            flood.append((bad, time.monotonic()))
        flooded_until = flood[-1][1] + delay_s

        slowest = 0.0
        logins = 0
        while time.monotonic() < flooded_until - 0.3:
            started = time.monotonic()
            assert heartbeat(conn, member) == ErrorCode.NONE
            slowest = max(slowest, time.monotonic() - started)
            if logins < 3:  # a new login goes through too
                started = time.monotonic()
                fresh, _ = logged_in(server, certs, "SASL_PLAINTEXT", "PLAIN")
                fresh.close()
                slowest = max(slowest, time.monotonic() - started)
                logins += 1
            time.sleep(0.05)
        assert logins == 3
        # Not held up by the delays under way: a small part of one, however loaded the
        # machine (each is answered in about a millisecond when nothing holds it up).
        assert slowest < delay_s / 2, f"a heartbeat or login took {slowest * 1000:.0f} ms"

        for bad, sent in flood:
            (size,) = struct.unpack(">i", bad.read_exactly(4))
            took = time.monotonic() - sent
            frame = bad.read_exactly(size)
            _, answer = framing.decode_response(ApiKey.SASL_AUTHENTICATE, 1, frame)
            assert isinstance(answer, SaslAuthenticateResponse)
            assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert took >= delay_s, f"answered after {took:.2f} s, before the delay"
        assert heartbeat(conn, member) == ErrorCode.NONE
        log = server.log()
    assert_no_secrets(log, SECRETS)


# -- bounds: time and size ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listener", "stage"), [("SASL_PLAINTEXT", "after-handshake"), ("SASL_SSL", "mid-scram")]
)
def test_a_silent_half_logged_in_connection_is_closed_at_the_time_limit(
    secured: tuple[ServerProcess, Certificates], listener: str, stage: str
) -> None:
    server, certs = secured
    conn = connect(server, certs, listener)
    started = time.monotonic()
    sasl_handshake(conn, "SCRAM-SHA-512")
    if stage == "mid-scram":
        client = SaslClient("SCRAM-SHA-512", USER, PASSWORDS[USER])
        assert sasl_authenticate(conn, client.first()).error_code == 0
    assert rest_until_closed(conn, SASL_TIMEOUT_MS / 1000 + 30) == b""
    took = time.monotonic() - started
    assert took >= SASL_TIMEOUT_MS / 1000 - 0.1, took  # not before it
    # Closed by the time limit, as the server says, rather than by anything else.
    lines = logged_about(server, conn)
    assert any(f"not done within {SASL_TIMEOUT_MS} ms" in line for line in lines), lines


def test_a_token_over_the_size_bound_fails_the_login_unanswered(
    secured: tuple[ServerProcess, Certificates],
) -> None:
    """Kafka reads a receive before login with a size bound (sasl.server.max.receive.size):
    one over it fails the login ("invalid receive size") with no answer, and the
    connection is closed after the failure delay."""
    server, certs = secured
    conn = connect(server, certs, "SASL_PLAINTEXT")
    sasl_handshake(conn, "PLAIN")
    token = f"\0{USER}\0".encode() + b"p" * (MAX_RECEIVE + 1)
    started = time.monotonic()
    conn.send(SaslAuthenticateRequest(auth_bytes=token), 1)
    assert rest_until_closed(conn) == b"", "the server answered an over-size token"
    took = time.monotonic() - started
    assert took >= FAILURE_DELAY_MS / 1000, f"closed after {took * 1000:.0f} ms"


def test_a_size_prefix_over_the_bound_closes_without_waiting_for_the_frame(
    secured: tuple[ServerProcess, Certificates],
) -> None:
    """The bound is checked on the size prefix, before the frame is read: a client that
    announces 1 MiB before login is closed then (after the failure delay), not after the
    exchange's time limit."""
    server, certs = secured
    conn = connect(server, certs, "SASL_PLAINTEXT")
    sasl_handshake(conn, "PLAIN")
    started = time.monotonic()
    conn.sendall(struct.pack(">ihhi", 1 << 20, ApiKey.SASL_AUTHENTICATE, 1, 99))
    assert rest_until_closed(conn) == b""
    took = time.monotonic() - started
    assert took >= FAILURE_DELAY_MS / 1000, f"closed after {took:.2f} s"
    # For the size it announced, not when the exchange's time limit was up.
    lines = logged_about(server, conn)
    assert any(f"SASL request of {1 << 20} bytes" in line for line in lines), lines
    assert not any("not done within" in line for line in lines), lines


# -- SaslHandshake v0: raw tokens ----------------------------------------------------------


@pytest.mark.parametrize("listener", SASL_PROTOCOLS)
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_handshake_v0_logs_in_with_raw_tokens(
    secured: tuple[ServerProcess, Certificates], listener: str, mechanism: str
) -> None:
    server, certs = secured
    conn, lifetime = logged_in(server, certs, listener, mechanism, handshake_version=0)
    assert lifetime == 0  # raw tokens carry no session lifetime
    member = join_on(conn, f"raw-{listener}-{mechanism}".lower(), SESSION_MS, SESSION_MS)
    assert member.generation_id == 1
    assert heartbeat(conn, member) == ErrorCode.NONE


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_failed_raw_login_is_closed_unanswered_after_the_delay(
    secured: tuple[ServerProcess, Certificates], mechanism: str
) -> None:
    """After SaslHandshake v0 a failure has no way to be told: the connection is closed,
    after the failure delay. (Kafka's v0 path delays PLAIN's failure, an
    AuthenticationException, but closes on a SCRAM one at once, as it surfaces there as an
    IOException; the delay is what the setting promises for every failed login.)"""
    server, certs = secured
    conn = connect(server, certs, "SASL_PLAINTEXT")
    sasl_handshake(conn, mechanism, version=0)
    client = SaslClient(mechanism, USER, WRONG)
    token = client.first()
    if mechanism != "PLAIN":  # SCRAM fails at the proof, one step on
        final = client.next(sasl_raw_token(conn, token))
        assert final is not None
        token = final
    started = time.monotonic()
    conn.sendall(struct.pack(">i", len(token)) + token)
    assert rest_until_closed(conn) == b""
    took = time.monotonic() - started
    assert took >= FAILURE_DELAY_MS / 1000, f"closed after {took * 1000:.0f} ms"


class Recorder:
    """A TCP relay on loopback that keeps what the client sent, to see which versions a
    client speaks."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sent = bytearray()  # by the client, on its first connection
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = [self.listener]
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        first = True
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            for source, sink, record in ((client, upstream, first), (upstream, client, False)):
                thread = threading.Thread(
                    target=self._pump, args=(source, sink, record), daemon=True
                )
                thread.start()
                self._threads.append(thread)
            first = False

    def _pump(self, source: socket.socket, sink: socket.socket, record: bool) -> None:
        try:
            while data := source.recv(65536):
                if record:
                    self.sent += data
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        for s in self._sockets:
            s.close()

    def frames(self) -> list[bytes]:
        """The frames the client sent on its first connection, without size prefixes."""
        out, pos, data = [], 0, bytes(self.sent)
        while pos + 4 <= len(data):
            (size,) = struct.unpack_from(">i", data, pos)
            out.append(data[pos + 4 : pos + 4 + size])
            pos += 4 + size
        return out


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_speaking_handshake_v0_commits_and_fetches(
    secured: tuple[ServerProcess, Certificates], mechanism: str
) -> None:
    """kafka-python told it speaks to a 0.10.2 broker logs in with SaslHandshake v0 and raw
    tokens (as kafka-python 2.0.2 always did); its offsets go through."""
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    server, _ = secured
    relay = Recorder(address(server, "SASL_PLAINTEXT"))
    group = f"kafka-python-v0-{mechanism}".lower()
    consumer = KafkaConsumer(
        bootstrap_servers=relay.address,
        group_id=group,
        enable_auto_commit=False,
        api_version=(0, 10, 2),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username=USER,
        sasl_plain_password=PASSWORDS[USER],
    )
    try:
        tp = TopicPartition(TOPIC, 1)
        consumer.commit({tp: OffsetAndMetadata(41, "", -1)})
        assert consumer.committed(tp) == 41
    finally:
        consumer.close()
        relay.close()
    headers = [struct.unpack_from(">hh", frame) for frame in relay.frames() if len(frame) >= 4]
    handshakes = [version for key, version in headers if key == ApiKey.SASL_HANDSHAKE]
    assert handshakes == [0], f"SaslHandshake versions sent: {handshakes}"
    assert all(key != ApiKey.SASL_AUTHENTICATE for key, _ in headers)


# -- TLS ---------------------------------------------------------------------------------------


def client_hello() -> bytes:
    """The first flight of a TLS client: a ClientHello record."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert hello[:1] == b"\x16"
    return hello


def still_serves(server: ServerProcess, certs: Certificates) -> None:
    with server.connect() as plain:
        assert plain.api_versions()
    with connect(server, certs, "SSL") as tls:
        assert tls.api_versions()


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL", "MTLS"])
def test_plaintext_kafka_to_a_tls_port_closes_it_with_one_log_line(
    secured: tuple[ServerProcess, Certificates], listener: str
) -> None:
    server, certs = secured
    conn = Connection(*address(server, listener))
    conn.send(ApiVersionsRequest(), 0)
    assert rest_until_closed(conn) == b""
    lines = logged_about(server, conn)
    assert len(lines) == 1, lines
    assert "plaintext" in lines[0] and listener in lines[0], lines[0]
    still_serves(server, certs)


def test_a_tls_client_hello_to_a_plaintext_port_closes_it_with_one_log_line(
    secured: tuple[ServerProcess, Certificates],
) -> None:
    server, certs = secured
    conn = Connection(*address(server, "PLAINTEXT"))
    conn.sendall(client_hello())
    assert rest_until_closed(conn) == b""
    lines = logged_about(server, conn)
    assert len(lines) == 1, lines
    assert "TLS" in lines[0], lines[0]
    still_serves(server, certs)


@pytest.mark.parametrize(
    ("listener", "sends"), [("SSL", "nothing"), ("SASL_SSL", "half-a-client-hello")]
)
def test_a_tls_handshake_not_done_in_time_is_closed(
    secured: tuple[ServerProcess, Certificates], listener: str, sends: str
) -> None:
    server, certs = secured
    conn = Connection(*address(server, listener))
    started = time.monotonic()
    if sends != "nothing":
        hello = client_hello()
        conn.sendall(hello[: len(hello) // 2])
    assert rest_until_closed(conn, TLS_TIMEOUT_MS / 1000 + 30) == b""
    took = time.monotonic() - started
    assert took >= TLS_TIMEOUT_MS / 1000 - 0.1, took  # not before it
    # Closed by the time limit, as the server says, rather than by anything else.
    lines = logged_about(server, conn)
    assert len(lines) == 1 and re.search(r"(?i)timed? ?out", lines[0]), lines
    still_serves(server, certs)


def test_a_tls_connection_keeps_hostname_verification_on(
    secured: tuple[ServerProcess, Certificates],
) -> None:
    """The server's certificate names 127.0.0.1 and localhost, and nothing else: a client
    that checks for another name refuses it (so the others, which pass, do check)."""
    server, certs = secured
    host, port = address(server, "SSL")
    with pytest.raises(ssl.SSLCertVerificationError):
        TlsConnection(host, port, str(certs.ca), server_hostname="kafka.example.invalid")
    with TlsConnection(host, port, str(certs.ca), server_hostname="localhost") as conn:
        assert conn.api_versions()


# -- re-authentication (KIP-368) ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("listener", "mechanism"), [("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-256")]
)
def test_reauthenticating_keeps_the_member_in_its_group(
    reauth: tuple[ServerProcess, Certificates], listener: str, mechanism: str
) -> None:
    server, certs = reauth
    group = f"reauth-{listener}-{mechanism}".lower()
    conn, lifetime = logged_in(server, certs, listener, mechanism)
    assert lifetime == REAUTH_MS
    member = join_on(conn, group, SESSION_MS, SESSION_MS)
    formed = len(rebalances(server.log(), group))
    last_login = time.monotonic()
    give_up = last_login + 60
    reauthentications = 0
    # Three logins, each before the session's lifetime is up: over two lifetimes and more,
    # which the first login alone would not have lasted.
    while reauthentications < 3:
        assert time.monotonic() < give_up
        assert heartbeat(conn, member) == ErrorCode.NONE
        if time.monotonic() - last_login > 0.7 * REAUTH_MS / 1000:
            lifetime = sasl_login(conn, mechanism, USER, PASSWORDS[USER])
            assert lifetime == REAUTH_MS
            last_login = time.monotonic()
            reauthentications += 1
        time.sleep(0.1)
    assert heartbeat(conn, member) == ErrorCode.NONE
    log = server.log()
    assert len(rebalances(log, group)) == formed
    assert admin_group(server, group)["generation"] == member.generation_id
    assert not [line for line in lines_about(log, conn) if "expired" in line]


def test_a_session_left_to_lapse_is_closed_at_its_next_request(
    reauth: tuple[ServerProcess, Certificates],
) -> None:
    server, certs = reauth
    conn, lifetime = logged_in(server, certs, "SASL_SSL", "SCRAM-SHA-512")
    assert lifetime == REAUTH_MS
    member = join_on(conn, "lapsing", SESSION_MS, SESSION_MS)
    assert heartbeat(conn, member) == ErrorCode.NONE  # within its lifetime: served
    time.sleep(REAUTH_MS / 1000 + 0.2)
    conn.send(HeartbeatRequest("lapsing", member.generation_id, member.member_id, None), 3)
    assert rest_until_closed(conn) == b"", "a request past the session's end was answered"
    lines = lines_about(server.log(), conn)
    assert any("expired" in line for line in lines), lines


def test_reauthenticating_as_another_user_fails_and_closes(
    reauth: tuple[ServerProcess, Certificates],
) -> None:
    server, certs = reauth
    conn, _ = logged_in(server, certs, "SASL_PLAINTEXT", "SCRAM-SHA-256")
    answer, took = failing_step(conn, "SCRAM-SHA-256", "bob", PASSWORDS["bob"])
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    # Kafka's own words (ReauthInfo.ensurePrincipalUnchanged).
    assert answer.error_message == (
        "Cannot change principals during re-authentication from User.alice: User.bob"
    )
    assert took >= REAUTH_FAILURE_DELAY_MS / 1000, f"answered after {took * 1000:.0f} ms"
    assert rest_until_closed(conn) == b""


def test_reauthenticating_with_another_mechanism_fails_unanswered_and_closes(
    reauth: tuple[ServerProcess, Certificates],
) -> None:
    """Kafka answers the SaslHandshake (the mechanism is enabled), then fails the first token
    (REAUTH_BAD_MECHANISM) with no answer to it, and closes the connection after the failure
    delay."""
    server, certs = reauth
    conn, _ = logged_in(server, certs, "SASL_PLAINTEXT", "PLAIN")
    assert set(sasl_handshake(conn, "SCRAM-SHA-256")) == set(MECHANISMS)
    client = SaslClient("SCRAM-SHA-256", USER, PASSWORDS[USER])
    started = time.monotonic()
    conn.send(SaslAuthenticateRequest(auth_bytes=client.first()), 1)
    assert rest_until_closed(conn) == b"", "the token of another mechanism was answered"
    took = time.monotonic() - started
    assert took >= REAUTH_FAILURE_DELAY_MS / 1000, f"closed after {took * 1000:.0f} ms"


def test_a_second_reauthentication_within_a_second_is_refused_and_the_session_goes_on(
    reauth: tuple[ServerProcess, Certificates],
) -> None:
    """Kafka begins a re-authentication at most once a second; a SaslHandshake sooner is an
    ordinary request, answered ILLEGAL_SASL_STATE, and the connection goes on."""
    server, certs = reauth
    conn, _ = logged_in(server, certs, "SASL_PLAINTEXT", "PLAIN")
    assert sasl_login(conn, "PLAIN", USER, PASSWORDS[USER]) == REAUTH_MS
    with pytest.raises(SaslError) as refused:
        sasl_handshake(conn, "PLAIN")
    assert refused.value.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert conn.api_versions()


def test_real_clients_reauthenticate_and_stay_in_their_groups(
    reauth: tuple[ServerProcess, Certificates],
) -> None:
    """librdkafka and kafka-python re-authenticate (KIP-368) before their sessions end: over
    several lifetimes no connection is closed for an expired session, none logs in anew,
    and the members keep heartbeating in their groups with no rebalance."""
    server, certs = reauth
    cases = {
        "confluent": Security("SASL_SSL", "SASL_SSL", "SCRAM-SHA-256"),
        "kafka-python": Security("SASL_PLAINTEXT", "SASL_PLAINTEXT", "SCRAM-SHA-512"),
    }
    hold_clients_over_lifetimes(server, certs, cases)


@pytest.mark.java
def test_the_java_client_reauthenticates_and_stays_in_its_group(
    reauth: tuple[ServerProcess, Certificates],
) -> None:
    server, certs = reauth
    cases = {
        "java": Security("SASL_SSL", "SASL_SSL", "PLAIN"),
        "java-scram": Security("SASL_PLAINTEXT", "SASL_PLAINTEXT", "SCRAM-SHA-512"),
    }
    hold_clients_over_lifetimes(server, certs, cases)


def hold_clients_over_lifetimes(
    server: ServerProcess, certs: Certificates, cases: dict[str, Security]
) -> None:
    """Members of these clients (by name: its client, and maybe more) hold their groups
    over four session lifetimes: the connection each joined on (its coordinator's) keeps
    heartbeating, with no session expired, no rebalance, and is the one it leaves on."""
    members: dict[str, SecuredMember] = {}
    try:
        for name, sec in cases.items():
            members[name] = start_member(
                name.split("-")[0] if name.startswith("java") else name,
                server,
                certs,
                sec,
                topic=TOPIC,
                group=f"reauth-{name}",
                session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=200,
            )
        for member in members.values():
            wait_owned(member, frozenset(range(3)), timeout_s=30)
        log = server.log()
        mark = len(log)
        formed = {name: len(rebalances(log, f"reauth-{name}")) for name in members}
        first = {name: admin_group(server, f"reauth-{name}") for name in members}
        joined_on = {name: joined_from(log, m.name) for name, m in members.items()}

        # Heartbeats over four session lifetimes, however long a busy machine takes: each
        # moves the member's session deadline on.
        give_up = time.monotonic() + 60
        for name in members:
            before = first[name]["members"][0]["session_deadline_ms"]
            while (
                admin_group(server, f"reauth-{name}")["members"][0]["session_deadline_ms"]
                < before + 4 * REAUTH_MS
            ):
                assert time.monotonic() < give_up, f"{name} stopped heartbeating"
                time.sleep(0.1)
        log = server.log()
        expired = [line for line in log[mark:].splitlines() if "SASL session expired" in line]
        assert not expired, expired
        for name, member in members.items():
            group = f"reauth-{name}"
            assert len(rebalances(log, group)) == formed[name], rebalances(log, group)
            now = admin_group(server, group)
            assert now["generation"] == first[name]["generation"]
            # Heartbeats went on: each moved the session's deadline.
            before = first[name]["members"][0]["session_deadline_ms"]
            assert now["members"][0]["session_deadline_ms"] > before + 2 * REAUTH_MS
            assert member.owned == frozenset(range(3))
        while members:
            members.popitem()[1].close()  # each leaves its group
        give_up = time.monotonic() + 20
        for name, peer in joined_on.items():
            while f"{peer} LeaveGroupRequest" not in server.log()[mark:]:
                assert time.monotonic() < give_up, (
                    f"{name} did not leave on the connection it joined on ({peer}): it was "
                    "replaced rather than re-authenticated"
                )
                time.sleep(0.05)
    finally:
        for member in members.values():
            member.close()


def joined_from(log: str, client_id: str) -> str:
    """HOST:PORT of the connection a member (of client.id `client_id`) joined on, from the
    server's DEBUG line of its JoinGroup (member ids begin with the client id)."""
    found = re.findall(rf"(\S+) JoinGroupRequest v\d+ '{re.escape(client_id)}-", log)
    assert found, f"no JoinGroup of {client_id} in the log"
    return str(found[-1])
