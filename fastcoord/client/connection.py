"""One connection to a Kafka broker, with many requests in flight, on Trio.

Answers come in the order of the requests (the protocol's rule), each matched to its
request by correlation id. Requests are encoded by the schema codec (compiled); the
heartbeats and commits of stable members, the bulk of a fleet's traffic, are its lane's
(lane.py): `flush` puts the due ones in the outbox from pre-encoded frames, and every read
hands the receive buffer to the lane, which records their plain successes itself (one
compiled call per read) and leaves the rest to this connection and its `on_lane` callback.

Sending never blocks the caller: frames go to an outbox that the connection's writer task
drains, except at a flush, which writes the outbox to the non-blocking socket at once when
the writer is idle (what the socket does not take goes to the writer). Answers are read
from the socket itself, by the connection's own task, or, given a poller (lane.Poller), by
whoever polls it, which hands this connection what its lane leaves (`heard`). Whoever sent
a request is told of its answer by a callback, or of the connection's loss by the same
callback with no answer.

A listener other than PLAINTEXT is met as its security settings say (login.py): a SASL
login after ApiVersions, before the first request, on a connection that then works as any
other; over TLS, a TlsConnection, whose bytes go through its TLS stream only, never by the
descriptor paths above.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import trio

from fastcoord.client.lane import ROW, Unusual
from fastcoord.client.login import (
    ClientSecurity,
    OnRound,
    TlsFailed,
    authenticate,
    start_tls,
    tls_reason,
)
from fastcoord.client.native import Lane, Poller, make_lane
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode, ProtocolError
from fastcoord.protocol.framing import decode_response, encode_request
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import ApiVersionsRequest, HeartbeatResponse
from fastcoord.protocol.schema import Request, Response

log = logging.getLogger("fastcoord.client")

CLIENT_ID = "fastcoord-loadtest"
# The newest version of each API the client speaks; a broker's ApiVersions may lower it.
WANTED: dict[int, int] = {
    ApiKey.API_VERSIONS: 3,
    ApiKey.METADATA: 9,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 7,
    ApiKey.SYNC_GROUP: 5,
    ApiKey.HEARTBEAT: 4,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 7,
    ApiKey.LEAVE_GROUP: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
}
# What librdkafka itself sends, for servers other than fastcoord: the librdkafka mock
# cluster advertises flexible versions of the group APIs (JoinGroup v6, ...) that it closes
# the connection on, since its own client never sends them.
LIBRDKAFKA: dict[int, int] = {
    **WANTED,
    ApiKey.FIND_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 5,
    ApiKey.SYNC_GROUP: 3,
    ApiKey.HEARTBEAT: 3,
    ApiKey.LEAVE_GROUP: 1,
    ApiKey.OFFSET_COMMIT: 7,
    ApiKey.OFFSET_FETCH: 5,
}
MAX_RESPONSE_BYTES = 100 * 1024 * 1024  # a larger size prefix is a broken stream
READ_BYTES = 256 * 1024
# How long a TLS connection's end waits to send its close_notify: a server that stopped
# reading must not hold the connection's end for ever.
CLOSE_NOTIFY_S = 1.0

# The answer to a request: the response, or None when the connection was lost first.
OnAnswer = Callable[[Response | None, int], None]  # (response, latency in ns)
# A lane's answer that is not a plain success, decoded: (token, api key, current, latency
# in ns, error code, response). The response is there for an OffsetCommit, whose errors are
# per partition; a Heartbeat's is its error code. `current` as in lane.Unusual.
LaneAnswer = tuple[Any, int, bool, int, int, Response | None]
OnLane = Callable[[list[LaneAnswer], int], None]  # (answers, now in ns)


# What ends a connection: the peer went away, or sent what cannot be read.
LOST = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, ProtocolError)


class Pending:
    """A request waiting for its answer."""

    __slots__ = ("api", "on_answer", "sent_ns", "version")

    def __init__(self, api: int, version: int, on_answer: OnAnswer) -> None:
        self.api = api
        self.version = version
        self.on_answer = on_answer
        self.sent_ns = time.perf_counter_ns()  # until it is written


class ConnectionLost(ProtocolError):
    """The broker closed the connection, or it broke."""


class UnsupportedApi(Exception):
    """The broker serves none of the versions of an API this client speaks."""


class Connection:
    """A connection to `address`; `open()` connects and negotiates versions, then `run()`
    (in a nursery) reads and writes until the connection ends."""

    def __init__(
        self,
        address: tuple[str, int],
        lane: Lane | None = None,
        on_lane: OnLane | None = None,
        client_id: str = CLIENT_ID,
        wanted: dict[int, int] | None = None,
        poller: Poller | None = None,
        *,
        security: ClientSecurity | None = None,
        user: int = 0,
        on_login: OnRound | None = None,
    ) -> None:
        """`lane` carries the heartbeats and commits of the members using this connection
        (none by default); `on_lane` gets its answers that are not plain successes, and,
        when the connection ends, a NETWORK_EXCEPTION for each member the lane holds.
        With a `poller`, `run` leaves the reading to whoever polls it. With SASL
        `security`, `open` logs in as its user number `user`, each round trip of the
        login handed to `on_login`; TLS security takes a TlsConnection
        (connection_type)."""
        self.address = address
        self.security = security
        self.user = user
        self.on_login = on_login
        self.wanted = WANTED if wanted is None else wanted
        self.client_id = client_id
        if lane is None:
            lane = make_lane(0, np.zeros((2, ROW), np.int64), np.zeros(2, np.int64))
        self.lane = lane
        self.on_lane = on_lane
        self.poller = poller
        self._heard_end: BaseException | None = None  # why the poller saw the socket end
        self._ended = trio.Event()
        self.stream: trio.abc.Stream | None = None
        self.versions: dict[int, int] = {}
        self.closed = False
        self.ready = False
        self._correlation = 0
        self._pending: dict[int, Pending] = {}
        # JoinGroups apart: they wait for the group by design, and the fleet's watchdog
        # must tell them from requests a stalled server left unanswered.
        self._joins: dict[int, Pending] = {}
        # What the outbox holds, to be stamped with the moment it is written: a request's
        # latency runs from when it is on the wire, not from when the fleet queued it.
        self._queued: list[Pending] = []
        self._heartbeat_version = 0
        self._outbox = bytearray()
        self._writing = False  # the writer task is inside send_all
        self._fd = -1
        self._wake = trio.Event()
        self._scope: trio.CancelScope | None = None
        self._received_at_ns = time.perf_counter_ns()

    # -- opening ---------------------------------------------------------------------------

    async def open(self, timeout_s: float = 10.0) -> None:
        """Connect and learn the broker's versions (ApiVersions, before anything else, as
        clients do), then log in if the security settings say SASL. Raises OSError if the
        broker cannot be reached, login.LoginFailed (an OSError too) if it refuses the
        login; the socket is closed then."""
        with trio.fail_after(timeout_s):
            tcp = await trio.open_tcp_stream(*self.address)
            try:
                self._fd = tcp.socket.fileno()
                self.stream = await self._secure(tcp)
                response = await self._ask_directly(
                    ApiVersionsRequest(
                        client_software_name="fastcoord", client_software_version="1"
                    ),
                    3,
                )
                if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
                    response = await self._ask_directly(ApiVersionsRequest(), 0)
                if response.error_code != ErrorCode.NONE:
                    raise ConnectionLost(f"ApiVersions: {_name(response.error_code)}")
                served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
                if self.security is not None and self.security.sasl:
                    await self._login(served)
            except BaseException:
                # Not left to the collector: a run whose logins fail opens one after another.
                with trio.CancelScope(shield=True):
                    await tcp.aclose()
                raise
        for api, wanted in self.wanted.items():
            low, high = served.get(api, (0, -1))
            if high >= 0 and low <= wanted:
                self.versions[api] = min(wanted, high)
        self._heartbeat_version = self.versions.get(ApiKey.HEARTBEAT, 0)
        self.ready = True

    async def _secure(self, tcp: trio.SocketStream) -> trio.abc.Stream:
        """The stream the connection speaks over: the TCP stream itself, or TLS's over it."""
        return tcp

    async def _login(self, served: dict[int, tuple[int, int]]) -> None:
        security = self.security
        assert security is not None
        await authenticate(
            self._ask_directly,
            served,
            security.mechanism,
            security.username(self.user),
            security.sasl_password or "",
            self.on_login,
        )

    async def _ask_directly(self, request: Request, version: int) -> Any:
        """`request` at `version` and its answer, before the connection runs (ApiVersions,
        a login): one request in flight, nothing else read."""
        assert self.stream is not None
        correlation = self._next_correlation()
        header = RequestHeader(request.API_KEY, version, correlation, self.client_id)
        await self.stream.send_all(encode_request(header, request))
        buf = bytearray()
        while True:
            if len(buf) >= 4:
                size = int.from_bytes(buf[:4], "big", signed=True)
                if not 0 <= size <= MAX_RESPONSE_BYTES:
                    raise ConnectionLost(f"an answer of {size} bytes")
                if len(buf) >= 4 + size:
                    frame = bytes(buf[4 : 4 + size])
                    got, response = decode_response(
                        request.API_KEY, version, frame, ignore_trailing=True
                    )
                    if got != correlation:
                        raise ConnectionLost(f"correlation id {got}, expected {correlation}")
                    return response
            data = await self.stream.receive_some(READ_BYTES)
            if not data:
                raise ConnectionLost(f"closed during {type(request).__name__[:-7]}")
            buf += data

    def version(self, api_key: int) -> int:
        try:
            return self.versions[api_key]
        except KeyError:
            raise UnsupportedApi(
                f"{self.address[0]}:{self.address[1]} serves no version of "
                f"{ApiKey(api_key).name} this client speaks"
            ) from None

    # -- sending ---------------------------------------------------------------------------

    def _next_correlation(self) -> int:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        return self._correlation

    def send(self, request: Request, on_answer: OnAnswer) -> None:
        """Send `request` at the negotiated version; `on_answer` gets its response."""
        if self.closed:
            on_answer(None, 0)
            return
        api = request.API_KEY
        version = self.version(api)
        correlation = self._next_correlation()
        entry = Pending(api, version, on_answer)
        self._queued.append(entry)
        (self._joins if api == ApiKey.JOIN_GROUP else self._pending)[correlation] = entry
        self._outbox += encode_request(
            RequestHeader(api, version, correlation, self.client_id), request
        )
        self._wake.set()

    async def ask(self, request: Request, timeout_s: float) -> tuple[Response, int]:
        """Send `request` and wait for its answer: (response, latency in ns). The
        connection must be running; ConnectionLost if it ends first."""
        done = trio.Event()
        answer: list[tuple[Response | None, int]] = []

        def on_answer(response: Response | None, latency_ns: int) -> None:
            answer.append((response, latency_ns))
            done.set()

        self.send(request, on_answer)
        with trio.fail_after(timeout_s):
            await done.wait()
        response, latency_ns = answer[0]
        if response is None:
            raise ConnectionLost(
                f"the connection closed before the {type(request).__name__}'s answer"
            )
        return response, latency_ns

    def flush(self, now_ms: int) -> None:
        """Send what the lane has due at `now_ms` (the fleet's clock), and write the
        outbox now if the writer is idle."""
        if self.closed:
            return
        out = self._outbox
        before = len(out)
        self._correlation = self.lane.due(now_ms, self._correlation, out)
        if len(out) == before or self._writing:
            return  # nothing new, or the writer takes it after what it is writing, in order
        # Written here and now: this saves the writer task's wake-up and trio's stream
        # layers, which cost more than the write itself at a flush per connection every
        # few ticks of the fleet.
        self._stamp()
        try:
            written = os.write(self._fd, out)
        except BlockingIOError:
            written = 0
        except OSError:
            written = 0  # the writer meets the same error, and ends the connection
        del out[:written]
        if out:
            self._wake.set()

    @property
    def unsent_bytes(self) -> int:
        """What is queued and not yet written to the socket."""
        return len(self._outbox)

    @property
    def heartbeat_version(self) -> int:
        return self._heartbeat_version

    # -- running ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Read and write until the connection ends; then every request still waiting is
        answered None (and every heartbeat NETWORK_EXCEPTION)."""
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                if self.closed:
                    nursery.cancel_scope.cancel()
                nursery.start_soon(self._write, nursery.cancel_scope)
                try:
                    if self.poller is not None:
                        await self._polled(self.poller)
                    else:
                        await self._read()
                except ProtocolError as exc:  # an answer that cannot be read
                    log.warning("closing the connection to %s:%d: %s", *self.address, exc)
                except LOST as exc:  # caught here: a nursery would wrap it in a group
                    if not self.closed:
                        log.debug("connection to %s:%d lost: %s", *self.address, exc)
                nursery.cancel_scope.cancel()
        finally:
            await self._fail()

    async def _write(self, scope: trio.CancelScope) -> None:
        assert self.stream is not None
        try:
            while True:
                if not self._outbox:
                    await self._wake.wait()
                    self._wake = trio.Event()
                    continue
                data = bytes(self._outbox)
                self._outbox.clear()
                self._stamp()
                self._writing = True
                await self.stream.send_all(data)
                self._writing = False
        except LOST as exc:
            if not self.closed:
                log.debug("connection to %s:%d lost: %s", *self.address, exc)
            scope.cancel()

    def _stamp(self) -> None:
        """Stamp what the outbox holds as sent now."""
        queued, self._queued = self._queued, []
        now = time.perf_counter_ns()
        for item in queued:
            item.sent_ns = now
        self.lane.stamp(now)

    def _received(
        self,
        buf: bytearray,
        data: bytes | bytearray,
        unusual: list[Unusual],
        others: list[tuple[int, bytes]],
    ) -> list[Unusual]:
        """Bytes read: the lane records its plain successes, the rest go to their requests.
        The list for the next read's unusual answers (this one, unless handed on)."""
        now = time.perf_counter_ns()
        self._received_at_ns = now
        buf += data
        pos = self.lane.read(
            buf, 0, MAX_RESPONSE_BYTES, self._heartbeat_version, now, unusual, others
        )
        if pos:
            del buf[:pos]
        if unusual:
            self._unusual(unusual, now)
            unusual = []
        if others:
            for correlation, frame in others:
                self._answer(correlation, frame, now)
            others.clear()
        return unusual

    async def _read(self) -> None:
        assert self.stream is not None
        buf = bytearray()
        unusual: list[Unusual] = []
        others: list[tuple[int, bytes]] = []
        fd = self._fd
        while True:
            # The socket itself rather than the stream's receive_some, for the reason
            # flush writes directly: a read per batch of answers, every flush per
            # connection. wait_readable is the checkpoint receive_some would be.
            await trio.lowlevel.wait_readable(fd)
            try:
                data = os.read(fd, READ_BYTES)
            except BlockingIOError:
                continue
            if not data:
                return
            unusual = self._received(buf, data, unusual, others)

    @property
    def received_at_ns(self) -> int:
        """When something was last read from the broker (perf_counter_ns)."""
        return max(self._received_at_ns, self.lane.received_at_ns)

    async def _polled(self, poller: Poller) -> None:
        """Let `poller` read the socket until it ends (as `_read` would return or raise)."""
        poller.add(self._fd, self.lane, self, self._heartbeat_version)
        try:
            await self._ended.wait()
        finally:
            poller.remove(self._fd)  # before the socket closes and its number is reused
        if self._heard_end is not None and not isinstance(self._heard_end, EOFError):
            raise self._heard_end

    def heard(
        self,
        now: int,
        unusual: list[Unusual],
        others: list[tuple[int, bytes]],
        end: BaseException | None,
    ) -> None:
        """What the poller read for this connection: the lane's unusual answers, the other
        answers, and the socket's end (lane.Heard)."""
        try:
            if unusual:
                self._unusual(unusual, now)
            for correlation, frame in others:
                self._answer(correlation, frame, now)
        except ProtocolError as exc:  # an answer that cannot be read, or was never asked
            end = exc
        if end is not None and not self._ended.is_set():
            self._heard_end = end
            self._ended.set()

    def _answer(self, correlation: int, frame: bytes, now: int) -> None:
        entry = self._pending.pop(correlation, None) or self._joins.pop(correlation, None)
        if entry is None:
            # Not in request order: the lane's, or never sent.
            unusual: list[Unusual] = []
            if not self.lane.claim(correlation, frame, self._heartbeat_version, now, unusual):
                raise ConnectionLost(f"an answer to correlation id {correlation}, never sent")
            if unusual:
                self._unusual(unusual, now)
            return
        _, response = decode_response(entry.api, entry.version, frame, ignore_trailing=True)
        entry.on_answer(response, now - entry.sent_ns)

    def _unusual(self, answers: list[Unusual], now: int) -> None:
        """The lane's answers that are not plain successes, to `on_lane`; those it left
        undecoded are decoded here first (a frame that cannot be read ends the
        connection, as any other answer's would)."""
        decoded: list[LaneAnswer] = []
        for token, api, current, latency, error, frame in answers:
            response: Response | None = None
            if frame is not None:
                version = self._heartbeat_version if api == ApiKey.HEARTBEAT else self.versions[api]
                _, response = decode_response(api, version, frame, ignore_trailing=True)
                if isinstance(response, HeartbeatResponse):
                    error, response = response.error_code, None
            decoded.append((token, api, current, latency, error, response))
        assert self.on_lane is not None
        self.on_lane(decoded, now)

    async def _fail(self) -> None:
        self.closed = True
        self.ready = False
        if self.stream is not None:
            with trio.CancelScope(shield=True):
                await self.stream.aclose()
        waiting = [*self._pending.values(), *self._joins.values()]
        self._pending.clear()
        self._joins.clear()
        for entry in waiting:
            entry.on_answer(None, 0)
        # The lane's members learn of the loss now, as a consumer's network client does,
        # whether or not a request of theirs was waiting.
        tokens = self.lane.lost()
        if tokens and self.on_lane is not None:
            lost = ErrorCode.NETWORK_EXCEPTION
            self.on_lane(
                [(t, ApiKey.HEARTBEAT, True, 0, lost, None) for t in tokens],
                time.perf_counter_ns(),
            )

    def close(self) -> None:
        """End the connection (as a crashed consumer's socket ends): run() returns."""
        self.closed = True
        if self._scope is not None:
            self._scope.cancel()

    # -- for the fleet's watchdog ----------------------------------------------------------

    def waits(self, now: int, join_grace_ns: int) -> bool:
        """Whether an answer is owed: any request but a JoinGroup, or a JoinGroup older
        than its grace (JoinGroups wait for the group by design)."""
        if self._pending or self.lane.in_flight:
            return True
        join = next(iter(self._joins.values()), None)
        return join is not None and now - join.sent_ns > join_grace_ns


class TlsConnection(Connection):
    """A connection over TLS (security.protocol ssl or sasl_ssl). Its bytes go through its
    TLS stream only: a flush leaves what it adds to the outbox to the writer task, and the
    connection reads in its own task, never by a poller; the descriptor carries TLS
    records, which only the stream can write and read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.poller = None

    async def open(self, timeout_s: float = 10.0) -> None:
        try:
            await super().open(timeout_s)
        except trio.BrokenResourceError as exc:
            # TLS 1.3 lets the client's handshake end before the server has checked its
            # certificate: a refusal comes as an alert at the first answer.
            host, port = self.address
            raise TlsFailed(f"TLS with {host}:{port} failed: {tls_reason(exc)}") from None

    async def _secure(self, tcp: trio.SocketStream) -> trio.abc.Stream:
        assert self.security is not None
        return await start_tls(tcp, self.address[0], self.security)

    def flush(self, now_ms: int) -> None:
        """Put what the lane has due at `now_ms` in the outbox, for the writer."""
        if self.closed:
            return
        before = len(self._outbox)
        self._correlation = self.lane.due(now_ms, self._correlation, self._outbox)
        if len(self._outbox) != before:
            self._wake.set()

    async def _read(self) -> None:
        """As Connection._read, from the TLS stream."""
        assert self.stream is not None
        receive = self.stream.receive_some
        buf = bytearray()
        unusual: list[Unusual] = []
        others: list[tuple[int, bytes]] = []
        while True:
            data = await receive(READ_BYTES)
            if not data:
                return
            unusual = self._received(buf, data, unusual, others)

    async def _fail(self) -> None:
        if self.stream is not None:
            # close_notify, then the socket; past the deadline, the socket alone.
            deadline = trio.current_time() + CLOSE_NOTIFY_S
            with trio.CancelScope(shield=True, deadline=deadline):
                await self.stream.aclose()
        await super()._fail()


def connection_type(security: ClientSecurity | None) -> type[Connection]:
    """The class of a connection with these security settings: TLS's, or the plain one."""
    return TlsConnection if security is not None and security.tls else Connection


def is_fastcoord(cluster_id: str | None) -> bool:
    """Whether a Metadata answer's cluster id is fastcoord's."""
    return (cluster_id or "").startswith("fastcoord")


def connect_reason(exc: BaseException) -> str:
    """Why a connection could not be made, in a few words ("connection refused")."""
    if isinstance(exc, trio.TooSlowError):
        return "no answer within the connect timeout"
    # trio's open_tcp_stream says "all attempts to connect ... failed" and keeps each
    # attempt's error as the cause.
    cause = exc.__cause__
    while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        cause = cause.exceptions[0]
    for candidate in (cause, exc):
        if isinstance(candidate, OSError) and candidate.errno:
            return os.strerror(candidate.errno).lower()
    return str(exc) or type(exc).__name__


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
