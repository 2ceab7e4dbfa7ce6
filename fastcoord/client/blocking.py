"""One blocking-socket Kafka connection, for tests and benchmarks.

Tests send raw and malformed frames and read answers one at a time; benchmarks want a
client whose cost is plain to see. Both need nothing but a socket that encodes requests
with fastcoord.protocol and decodes the answers: no threads, no buffers, no event loop.
`join_group` adds the one member that finds its coordinator, joins and syncs as leader.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.framing import decode_response, encode_request
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from fastcoord.protocol.schema import Request, Response

CLIENT_ID = "fastcoord-blocking"
TIMEOUT_S = 15.0
# What join_group asks for, capped by what the peer announces: non-flexible versions, which
# every coordinator worth measuring serves.
JOIN_VERSIONS = {ApiKey.FIND_COORDINATOR: 2, ApiKey.JOIN_GROUP: 5, ApiKey.SYNC_GROUP: 3}
_SIZE = struct.Struct(">i")

# Connections not closed yet, so that a test harness can close what a test left open
# (closed here, not by the garbage collector's ResourceWarning).
_open: set[Connection] = set()


class PeerError(RuntimeError):
    """The peer answered something the caller cannot go on with."""


def _connect(
    address: tuple[str, int], timeout: float | None, receive_buffer_bytes: int | None
) -> socket.socket:
    if receive_buffer_bytes is None:
        return socket.create_connection(address, timeout=timeout)
    failed: OSError | None = None
    for family, kind, proto, _, sockaddr in socket.getaddrinfo(*address, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
            sock.settimeout(timeout)
            sock.connect(sockaddr)
            return sock
        except OSError as exc:
            sock.close()
            failed = exc
    raise failed or OSError(f"{address[0]} has no address")


class Connection:
    """One TCP connection speaking Kafka request and response frames, blocking."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout: float | None = TIMEOUT_S,
        client_id: str = CLIENT_ID,
        receive_buffer_bytes: int | None = None,
    ) -> None:
        """`receive_buffer_bytes` is Kafka clients' receive.buffer.bytes: SO_RCVBUF, set
        before connecting, as the window TCP offers is fixed then (set later, the socket
        drops what the larger window let in, ACKs with it)."""
        self.address = (host, port)
        self.client_id = client_id
        self.sock = _connect(self.address, timeout, receive_buffer_bytes)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _open.add(self)
        self.correlation = 0  # the last correlation id sent; callers framing by hand add to it
        self.versions: dict[int, tuple[int, int]] = {}

    def close(self) -> None:
        _open.discard(self)
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        """Raw bytes, frames or not."""
        self.sock.sendall(data)

    def send(self, request: Request, version: int) -> int:
        """Send one request without waiting; its correlation id."""
        self.correlation += 1
        header = RequestHeader(request.API_KEY, version, self.correlation, self.client_id)
        self.sock.sendall(encode_request(header, request))
        return self.correlation

    def read_exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"{self.address[0]}:{self.address[1]} closed the connection")
            buf += chunk
        return bytes(buf)

    def read_frame(self) -> bytes:
        """The next frame, without its size prefix."""
        (size,) = _SIZE.unpack(self.read_exactly(4))
        return self.read_exactly(size)

    def receive(self, api_key: int, version: int) -> Response:
        """The next answer, decoded as `api_key` at `version` (its correlation id unchecked:
        tests that pipeline read answers in the order they expect)."""
        return decode_response(api_key, version, self.read_frame())[1]

    def request(self, request: Request, version: int) -> Response:
        """Send a request and read its answer, which must carry its correlation id."""
        correlation_id = self.send(request, version)
        got, response = decode_response(request.API_KEY, version, self.read_frame())
        if got != correlation_id:
            raise PeerError(f"correlation id {got}, expected {correlation_id}")
        return response

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """Ask ApiVersions v0; what the peer serves, by API key: (lowest, highest)."""
        response = self.request(ApiVersionsRequest(), 0)
        assert isinstance(response, ApiVersionsResponse)
        if response.error_code != 0:
            raise PeerError(f"ApiVersions: error {response.error_code}")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        return self.versions

    def version(self, api_key: int, wanted: int) -> int:
        """`wanted`, or lower if the peer (as api_versions() heard) serves no higher."""
        low, high = self.versions.get(api_key, (0, wanted))
        version = min(wanted, high)
        if version < low:
            raise PeerError(f"API {api_key}: the peer serves v{low}-{high}, not v{wanted}")
        return version

    def committed(
        self,
        group_id: str,
        topic: str,
        partitions: Sequence[int],
        version: int = 5,
        load_timeout_s: float = 15.0,
    ) -> dict[int, int]:
        """The group's committed offsets of `partitions` of `topic` (-1: none), by
        OffsetFetch; COORDINATOR_LOAD_IN_PROGRESS (a server still loading its offsets log)
        is retried for `load_timeout_s`, as clients do. Another error raises PeerError."""
        request = OffsetFetchRequest(
            group_id=group_id, topics=[OffsetFetchRequestTopic(topic, list(partitions))]
        )
        deadline = time.monotonic() + load_timeout_s
        while True:
            answer = self.request(request, version)
            assert isinstance(answer, OffsetFetchResponse)
            if answer.error_code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                break
            if time.monotonic() > deadline:
                raise PeerError(f"OffsetFetch: still loading after {load_timeout_s} s")
            time.sleep(0.05)
        if answer.error_code != ErrorCode.NONE:
            raise PeerError(f"OffsetFetch: error {answer.error_code}")
        return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}

    def closed_by_server(self, timeout: float = 5.0) -> bool:
        """Wait up to `timeout` for the peer to close the connection (reads a byte)."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def close_all() -> int:
    """Close every connection still open; how many there were."""
    left = list(_open)
    for connection in left:
        connection.close()
    return len(left)


@dataclass
class Member:
    """A group member that has joined and synced: what its heartbeats and commits need."""

    host: str  # its coordinator's
    port: int
    group_id: str
    member_id: str
    generation_id: int
    join_attempts: int  # JoinGroup requests sent
    join_ms: float  # from the bootstrap connection to the SyncGroup answer


def join_group(
    host: str,
    port: int,
    group_id: str,
    session_timeout_ms: int = 45_000,
    rebalance_timeout_ms: int = 60_000,
    assignment: bytes = b"",
    load_timeout_s: float = 10.0,
) -> tuple[Connection, Member]:
    """Find the group's coordinator, join (again with the member id that
    MEMBER_ID_REQUIRED gives), sync as the leader, assigning itself `assignment`: a
    connection to the coordinator and the member. COORDINATOR_LOAD_IN_PROGRESS (a server
    still loading its offsets log) is retried for `load_timeout_s`, as clients do."""
    started = time.perf_counter()
    with Connection(host, port) as bootstrap:
        bootstrap.api_versions()
        found = bootstrap.request(
            FindCoordinatorRequest(key=group_id, key_type=0),
            bootstrap.version(ApiKey.FIND_COORDINATOR, JOIN_VERSIONS[ApiKey.FIND_COORDINATOR]),
        )
        assert isinstance(found, FindCoordinatorResponse)
        if found.error_code != 0:
            raise PeerError(f"FindCoordinator: error {found.error_code}")
    connection = Connection(found.host, found.port)
    try:
        connection.api_versions()
        member = join_on(
            connection,
            group_id,
            session_timeout_ms,
            rebalance_timeout_ms,
            assignment,
            load_timeout_s,
            started,
        )
    except BaseException:
        connection.close()
        raise
    return connection, member


# -- secured listeners: TLS, and logging in with SASL ---------------------------------------
#
# A raw-socket test of a SASL listener logs in first, as a client does: SaslHandshake, then
# the mechanism's tokens, each in a SaslAuthenticate request (after handshake v1) or as a
# bare size-prefixed frame (after v0). The same steps on a live connection re-authenticate
# it (KIP-368). Passwords go only into the tokens, never into an exception's text. ssl and
# scramp (for SCRAM) are imported where they are needed: benchmarks that use this module
# for plaintext connections need neither.

SASL_HANDSHAKE_VERSION = 1
SASL_AUTHENTICATE_VERSION = 1  # the first to carry the session lifetime (KIP-368)


class TlsConnection(Connection):
    """A Connection over TLS. The server's certificate is checked against `cafile`, and its
    name against `server_hostname` (the host by default): hostname verification stays on.
    `certfile` and `keyfile`: a client certificate, for mutual TLS. The handshake is done
    before this returns."""

    def __init__(
        self,
        host: str,
        port: int,
        cafile: str,
        *,
        certfile: str | None = None,
        keyfile: str | None = None,
        server_hostname: str | None = None,
        timeout: float | None = TIMEOUT_S,
        client_id: str = CLIENT_ID,
    ) -> None:
        import ssl

        super().__init__(host, port, timeout, client_id)
        context = ssl.create_default_context(cafile=cafile)
        if certfile is not None:
            context.load_cert_chain(certfile, keyfile)
        try:
            self.sock = context.wrap_socket(self.sock, server_hostname=server_hostname or host)
        except BaseException:
            self.close()
            raise

    def closed_by_server(self, timeout: float = 5.0) -> bool:
        """Wait up to `timeout` for the peer to close the connection; a TLS alert (a
        certificate refused after the handshake, in TLS 1.3) is its close too."""
        import ssl

        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            return True


class SaslError(PeerError):
    """A SASL step the server refused. `error_code` and `error_message` are its answer's;
    None when it closed the connection without one (a failed exchange after SaslHandshake
    v0 has no way to say why)."""

    def __init__(
        self,
        step: str,
        error_code: int | None,
        error_message: str | None = None,
        mechanisms: tuple[str, ...] = (),
    ) -> None:
        answer = "no answer" if error_code is None else f"error {error_code}: {error_message!r}"
        super().__init__(f"{step}: {answer}")
        self.step = step
        self.error_code = error_code
        self.error_message = error_message
        self.mechanisms = mechanisms  # a SaslHandshake's answer: what the listener enables


@dataclass(frozen=True)
class SaslAnswer:
    """A SaslAuthenticate response, as it came."""

    error_code: int
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: int  # 0 before v1, and when sessions do not end


def sasl_handshake(
    connection: Connection, mechanism: str, version: int = SASL_HANDSHAKE_VERSION
) -> tuple[str, ...]:
    """SaslHandshake for `mechanism`: the mechanisms the listener enables. Raises SaslError
    with the answer's error code (and the enabled list) if it refused."""
    from fastcoord.protocol.messages import SaslHandshakeRequest, SaslHandshakeResponse

    response = connection.request(SaslHandshakeRequest(mechanism=mechanism), version)
    assert isinstance(response, SaslHandshakeResponse)
    mechanisms = tuple(response.mechanisms)
    if response.error_code != 0:
        raise SaslError(f"SaslHandshake v{version}", response.error_code, None, mechanisms)
    return mechanisms


def sasl_authenticate(
    connection: Connection, token: bytes, version: int = SASL_AUTHENTICATE_VERSION
) -> SaslAnswer:
    """One token in a SaslAuthenticate request (after SaslHandshake v1): its answer, as it
    came (a refusal is an error code here, not an exception)."""
    from fastcoord.protocol.messages import SaslAuthenticateRequest, SaslAuthenticateResponse

    response = connection.request(SaslAuthenticateRequest(auth_bytes=token), version)
    assert isinstance(response, SaslAuthenticateResponse)
    return SaslAnswer(
        response.error_code,
        response.error_message,
        response.auth_bytes,
        response.session_lifetime_ms,
    )


def sasl_raw_token(connection: Connection, token: bytes) -> bytes:
    """One token as a bare size-prefixed frame (after SaslHandshake v0), and the server's
    token in answer, framed the same way."""
    connection.sendall(_SIZE.pack(len(token)) + token)
    return connection.read_frame()


class SaslClient:
    """The client's side of one SASL exchange: PLAIN (RFC 4616) or SCRAM-SHA-256/512 (RFC
    5802, through scramp). `first()` is the first token; `next(challenge)` the token that
    answers the server's, or None once the exchange is done (SCRAM: the server's final
    message checked, so that a server that does not know the password fails here)."""

    def __init__(self, mechanism: str, user: str, password: str, authzid: str = "") -> None:
        from scramp import ScramClient

        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise ValueError(f"SASL mechanism {mechanism!r}: not PLAIN, SCRAM-SHA-256 or -512")
        self.mechanism = mechanism
        self._plain = f"{authzid}\0{user}\0{password}".encode() if mechanism == "PLAIN" else None
        self._scram = None if mechanism == "PLAIN" else ScramClient([mechanism], user, password)
        self._step = 0

    def first(self) -> bytes:
        self._step = 1
        if self._plain is not None:
            return self._plain
        assert self._scram is not None
        first: str = self._scram.get_client_first()
        return first.encode()

    def next(self, challenge: bytes) -> bytes | None:
        self._step += 1
        if self._scram is None or self._step > 3:
            return None
        if self._step == 2:
            self._scram.set_server_first(challenge.decode())
            final: str = self._scram.get_client_final()
            return final.encode()
        self._scram.set_server_final(challenge.decode())  # raises on a wrong signature
        return None


def sasl_login(
    connection: Connection,
    mechanism: str,
    user: str,
    password: str,
    *,
    handshake_version: int = SASL_HANDSHAKE_VERSION,
    authenticate_version: int = SASL_AUTHENTICATE_VERSION,
) -> int:
    """Log in on `connection` (or re-authenticate it, if it has logged in already):
    SaslHandshake, then the mechanism's tokens, in SaslAuthenticate requests after
    handshake v1 or bare frames after v0. The session lifetime the server gave (0: none,
    or a version without it). Raises SaslError at the first step the server refuses."""
    sasl_handshake(connection, mechanism, handshake_version)
    client = SaslClient(mechanism, user, password)
    token: bytes | None = client.first()
    lifetime = 0
    while token is not None:
        if handshake_version == 0:
            try:
                challenge = sasl_raw_token(connection, token)
            except ConnectionError:
                raise SaslError(f"{mechanism} token", None) from None
        else:
            answer = sasl_authenticate(connection, token, authenticate_version)
            if answer.error_code != 0:
                raise SaslError(
                    f"SaslAuthenticate v{authenticate_version}",
                    answer.error_code,
                    answer.error_message,
                )
            challenge, lifetime = answer.auth_bytes, answer.session_lifetime_ms
        token = client.next(challenge)
    return lifetime


def join_on(
    connection: Connection,
    group_id: str,
    session_timeout_ms: int = 45_000,
    rebalance_timeout_ms: int = 60_000,
    assignment: bytes = b"",
    load_timeout_s: float = 10.0,
    started: float | None = None,
) -> Member:
    """join_group on a connection already open to the group's coordinator (a logged-in
    one, say): join (again with the member id that MEMBER_ID_REQUIRED gives), then sync
    as the leader, assigning itself `assignment`. COORDINATOR_LOAD_IN_PROGRESS is retried
    for `load_timeout_s`. The member; raises PeerError if the coordinator refuses a step."""
    if started is None:
        started = time.perf_counter()
    v_join = connection.version(ApiKey.JOIN_GROUP, JOIN_VERSIONS[ApiKey.JOIN_GROUP])
    member_id = ""
    attempts = 0
    deadline = time.monotonic() + load_timeout_s
    while True:
        attempts += 1
        joined = connection.request(
            JoinGroupRequest(
                group_id=group_id,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                member_id=member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocols=[JoinGroupRequestProtocol("range", b"")],
            ),
            v_join,
        )
        assert isinstance(joined, JoinGroupResponse)
        if joined.error_code == ErrorCode.MEMBER_ID_REQUIRED and not member_id:
            member_id = joined.member_id  # asked once; a second time is an error
            if member_id:
                continue
        if (
            joined.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
            continue
        if joined.error_code != 0:
            raise PeerError(f"JoinGroup v{v_join}: error {joined.error_code}")
        break
    member_id = joined.member_id
    if joined.leader != member_id:
        raise PeerError(f"JoinGroup: leader {joined.leader!r}, not this member {member_id!r}")
    synced = connection.request(
        SyncGroupRequest(
            group_id=group_id,
            generation_id=joined.generation_id,
            member_id=member_id,
            group_instance_id=None,
            assignments=[SyncGroupRequestAssignment(member_id, assignment)],
        ),
        connection.version(ApiKey.SYNC_GROUP, JOIN_VERSIONS[ApiKey.SYNC_GROUP]),
    )
    assert isinstance(synced, SyncGroupResponse)
    if synced.error_code != 0:
        raise PeerError(f"SyncGroup: error {synced.error_code}")
    host, port = connection.address
    return Member(
        host,
        port,
        group_id,
        member_id,
        joined.generation_id,
        attempts,
        (time.perf_counter() - started) * 1000,
    )
