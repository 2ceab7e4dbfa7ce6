"""A connection's security: its TLS handshake, and SASL's gate in front of its requests.

A connection on a TLS listener completes its handshake, under ssl.handshake.timeout.ms,
before it reads a request; one that fails is closed with one log line (a client that speaks
plaintext Kafka to a TLS port among them). Its principal is its certificate's subject when
it sent one.

A connection on a SASL listener passes every request through its Authentication (Kafka's
state machine, security/sasl.py) before the request is decoded for the server: before
login only ApiVersions and SaslHandshake pass (anything else closes the connection, and
nothing is created); during the exchange only its SaslAuthenticate (anything else is
answered ILLEGAL_SASL_STATE, then the connection closes); a session past its lifetime is
closed at its next request. A failed login's answer leaves after
connection.failed.authentication.delay.ms, and the connection closes after it: the delay is
a sleep of this connection's own, and holds up no other. The exchange runs under
sasl.authentication.timeout.ms. Until login, heartbeats take no fast path and the
connection does not park on the reactor: both answer heartbeats without the gate.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

import trio

from fastcoord.protocol import frames
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.commit_batch import OffsetCommitAnswer
from fastcoord.protocol.error_responses import error_response
from fastcoord.protocol.errors import ErrorCode, ProtocolError
from fastcoord.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)
from fastcoord.protocol.schema import Response
from fastcoord.security import tls
from fastcoord.security.sasl import Authentication, Verdict

if TYPE_CHECKING:
    from fastcoord.server.connection import Connection, Slot

log = logging.getLogger("fastcoord.server")
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hh")  # a request header's API key and version


async def begin(conn: Connection) -> bool:
    """The TLS handshake and SASL's start; False when the connection ends here."""
    endpoint = conn.endpoint
    assert endpoint is not None
    conn.parks = False  # the reactor reads sockets as they are: not TLS, not behind a gate
    if endpoint.tls is not None:
        try:
            conn.tls = await tls.handshake(conn.fd, endpoint.tls, endpoint.tls_timeout_s)
        except tls.HandshakeFailed as exc:
            log.warning(
                "TLS handshake with %s on listener %s failed: %s", conn.peer, endpoint.name, exc
            )
            return False
        conn.principal = conn.tls.principal
    sasl = endpoint.sasl
    if sasl is not None:
        conn.auth = Authentication(
            sasl.users,
            sasl.mechanisms,
            sasl.reauth_ms,
            sasl.max_receive,
            sasl.timeout_ms,
            endpoint.name,
            conn.dispatcher.now_ms(),
        )
        conn.gated = True
        conn.fast = False
        conn.max_frame = sasl.max_receive  # Kafka bounds what it reads before login
        conn.login_started = trio.Event()
    else:
        conn.fast = conn.dispatcher.fast_path_allowed(conn.principal)
    return True


def admit(conn: Connection, frame: bytes) -> bool:
    """Whether the frame goes on to be handled as a request; else it was answered or
    refused here."""
    auth = conn.auth
    assert auth is not None
    now = conn.dispatcher.now_ms()
    if auth.raw_tokens:
        _raw_token(conn, auth, frame, now)
        return False
    if len(frame) < 4:
        conn.close("malformed request during SASL authentication: no header")
        return False
    api_key, api_version = _HEADER.unpack_from(frame)
    verdict = auth.admit(api_key, now, api_version=api_version)
    if verdict == Verdict.PASS:
        return True
    name = _api_name(api_key)
    if verdict == Verdict.CLOSE:
        refuse(conn, f"{name} before SASL authentication on listener {_listener(conn)}")
        return False
    if verdict == Verdict.EXPIRED:
        conn.close("its SASL session expired (connections.max.reauth.ms) before this " + name)
        return False
    try:
        header, request, _ = frames.decode_request(frame)
    except ProtocolError as exc:
        conn.close(f"malformed request during SASL authentication: {exc}")
        return False
    slot = conn.new_slot(header)
    version = header.api_version
    if verdict == Verdict.ILLEGAL:
        refused = error_response(request, version, ErrorCode.ILLEGAL_SASL_STATE)
        refuse(conn, f"{name} during its SASL exchange", slot, refused)
        return False
    if isinstance(request, SaslHandshakeRequest):
        response, close = auth.handshake(request, version, now)
        if close:
            mechanism = request.mechanism[:64]
            reason = f"SASL mechanism {mechanism!r} is not enabled on listener {_listener(conn)}"
            refuse(conn, reason, slot, response)
        else:
            slot.answer(response)
            conn.fast = False  # an exchange is under way: every request meets the gate
            conn.max_frame = auth.max_receive
            if conn.login_started is not None:
                conn.login_started.set()
        return False
    if isinstance(request, SaslAuthenticateRequest):
        step = auth.authenticate(request.auth_bytes, now, version)
        if not step.answered:
            refuse(conn, f"its SASL re-authentication failed: {step.error_message}")
            return False
        answer = SaslAuthenticateResponse(
            error_code=step.error_code,
            error_message=step.error_message,
            auth_bytes=step.auth_bytes,
            session_lifetime_ms=step.session_lifetime_ms,
        )
        _after(conn, auth, slot, step.outcome, answer)
        return False
    # Anything else the state machine asked us to answer is a bug of ours: refuse it.
    slot.answer(error_response(request, version, ErrorCode.ILLEGAL_SASL_STATE))
    conn.finish()
    return False


def _raw_token(conn: Connection, auth: Authentication, frame: bytes, now: int) -> None:
    """SaslHandshake v0: tokens travel as size-prefixed frames without a header."""
    step = auth.authenticate(frame, now, -1)
    slot = conn.new_slot(None)
    if step.outcome == "failed":
        # v0 has no way to say why: Kafka closes the connection, after the delay.
        refuse(conn, "its SASL authentication failed")
        return
    conn.fill(slot, _SIZE.pack(len(step.auth_bytes)) + step.auth_bytes)
    if step.outcome == "done":
        _logged_in(conn, auth)


def _after(
    conn: Connection,
    auth: Authentication,
    slot: Slot,
    outcome: str,
    answer: SaslAuthenticateResponse,
) -> None:
    if outcome == "failed":
        refuse(conn, "its SASL authentication failed", slot, answer)
        return
    slot.answer(answer)
    if outcome == "done":
        _logged_in(conn, auth)


def _logged_in(conn: Connection, auth: Authentication) -> None:
    assert auth.principal is not None
    first = conn.principal != auth.principal
    conn.principal = auth.principal
    conn.max_frame = conn.dispatcher.config.socket_request_max_bytes
    # With a session lifetime every request is checked against it, so none may take the
    # fast path, which does not look.
    conn.fast = auth.expires_ms is None and conn.dispatcher.fast_path_allowed(auth.principal)
    if first:
        log.debug("%s logged in as %s with %s", conn.peer, auth.principal, auth.mechanism)


def refuse(
    conn: Connection,
    reason: str,
    slot: Slot | None = None,
    answer: Response | OffsetCommitAnswer | None = None,
) -> None:
    """A failure during authentication, as Kafka treats every one: nothing more is read;
    the answer, if there is one, leaves after connection.failed.authentication.delay.ms,
    and then the connection closes. The wait is this connection's own task's."""
    endpoint = conn.endpoint
    assert endpoint is not None and endpoint.sasl is not None
    log.info("closing connection from %s on listener %s: %s", conn.peer, endpoint.name, reason)
    delay = endpoint.sasl.failure_delay_s
    conn.finish()

    async def later() -> None:
        await trio.sleep(delay)
        if slot is None or answer is None:
            conn.drop(reason)
        else:
            slot.answer(answer)
            conn.finish()  # wakes the writer: it sends the answer, sees nothing owed, closes

    assert conn.nursery is not None
    conn.nursery.start_soon(later)


async def watch_login(conn: Connection) -> None:
    """Close a connection whose SASL exchange outlasts sasl.authentication.timeout.ms."""
    auth = conn.auth
    endpoint = conn.endpoint
    assert auth is not None and endpoint is not None and endpoint.sasl is not None
    while not conn.closed:
        deadline = auth.deadline_ms
        if deadline is None:  # logged in: wait for a re-authentication to begin
            started = conn.login_started = trio.Event()
            await started.wait()
            continue
        await trio.sleep(max(0, deadline - conn.dispatcher.now_ms()) / 1000)
        if auth.deadline_ms == deadline and not conn.closed and not conn.finishing:
            conn.drop(
                f"SASL authentication not done within {endpoint.sasl.timeout_ms} ms "
                "(sasl.authentication.timeout.ms)"
            )
            return


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API key {api_key}"


def _listener(conn: Connection) -> str:
    return conn.endpoint.name if conn.endpoint is not None else "?"
