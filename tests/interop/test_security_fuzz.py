"""Fuzzed SASL logins against one real `fastcoord serve`, while a member heartbeats.

Hypothesis makes SCRAM client-first and client-final messages and PLAIN tokens that are
truncated, not UTF-8, not base64, of the wrong proof length, empty, over the size bound,
spliced with junk, or valid, and sends each (in a SaslAuthenticate of any version, or as a
raw token after SaslHandshake v0) cut into pieces that arrive as separate reads. Whatever it
sends, the server answers as Kafka would (the next step, or SASL_AUTHENTICATION_FAILED with
Kafka's one message, or a close), never lets a token in that is not the valid one, never
fails a connection on an exception of its own (its log holds no traceback and no "failed;
closing it"), never logs a password, and meanwhile answers another member's heartbeats at
once. Afterwards a valid login goes through.
"""

from __future__ import annotations

import base64
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from fastcoord.client.blocking import (
    Connection,
    SaslClient,
    join_on,
    sasl_authenticate,
    sasl_handshake,
    sasl_raw_token,
)
from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from fastcoord.testing import Certificates, ServerProcess
from tests.interop.secured import (
    MECHANISMS,
    PASSWORDS,
    USER,
    assert_no_secrets,
    connect,
    logged_in,
    secured_server,
)

# Real clients and servers, many of them: CI runs these once, in a job of their own.
pytestmark = pytest.mark.security

MAX_RECEIVE = 512
ANSWER_TIMEOUT_S = 1.0
DIGEST_SIZES = {"SCRAM-SHA-256": 32, "SCRAM-SHA-512": 64}


@pytest.fixture(scope="module")
def fuzzed(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, Certificates]]:
    with secured_server(
        tmp_path_factory.mktemp("fuzz"),
        "--group-min-session-timeout-ms",
        "500",
        "--connection-failed-authentication-delay-ms",
        "5",
        "--sasl-server-max-receive-size",
        str(MAX_RECEIVE),
        "--sasl-authentication-timeout-ms",
        "3000",
    ) as running:
        yield running


class Heartbeats:
    """A member of a group of its own, logged in over SASL_SSL, heartbeating every 50 ms in a
    thread: the slowest answer, and any error."""

    def __init__(self, server: ServerProcess, certs: Certificates) -> None:
        self.conn, _ = logged_in(server, certs, "SASL_SSL", "SCRAM-SHA-512")
        self.member = join_on(self.conn, "fuzz-bystander", 3000, 3000)
        self.answered = 0
        self.slowest = 0.0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        m = self.member
        while not self._stop.wait(0.05):
            started = time.monotonic()
            try:
                response = self.conn.request(
                    HeartbeatRequest(m.group_id, m.generation_id, m.member_id, None), 3
                )
            except Exception as exc:
                self.errors.append(repr(exc))
                return
            self.slowest = max(self.slowest, time.monotonic() - started)
            assert isinstance(response, HeartbeatResponse)
            if response.error_code != ErrorCode.NONE:
                self.errors.append(f"heartbeat error {response.error_code}")
            self.answered += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.conn.close()


# -- what is sent ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutation:
    """How a valid token is spoiled (or not: "valid")."""

    kind: str
    at: float = 0.0  # where, as a fraction of the token's length
    data: bytes = b""
    size: int = 0


MUTATIONS = st.one_of(
    st.just(Mutation("valid")),
    st.just(Mutation("empty")),
    st.builds(Mutation, st.just("truncated"), st.floats(0, 1)),
    st.builds(Mutation, st.just("not-utf8"), st.floats(0, 1), st.sampled_from([b"\xff", b"\xc3"])),
    st.builds(Mutation, st.just("splice"), st.floats(0, 1), st.binary(min_size=1, max_size=12)),
    st.builds(
        Mutation,
        st.just("splice"),
        st.floats(0, 1),
        st.sampled_from([b",", b"=", b"\0", b"=2C", b"=ZZ", b",a=bob", b",ext=1", b"p=", b"r="]),
    ),
    st.builds(Mutation, st.just("random"), data=st.binary(max_size=80)),
    st.builds(
        Mutation,
        st.just("random"),
        data=st.text(max_size=60).map(lambda t: t.encode("utf-8")),
    ),
    st.builds(Mutation, st.just("not-base64-proof")),
    st.builds(Mutation, st.just("proof-length"), size=st.integers(0, 80)),
    st.builds(Mutation, st.just("oversize"), size=st.integers(1, 64)),
)


def spoil(token: bytes, m: Mutation) -> bytes:
    at = round(m.at * len(token))
    if m.kind == "valid":
        return token
    if m.kind == "empty":
        return b""
    if m.kind == "truncated":
        return token[:at]
    if m.kind == "not-utf8":
        return token[:at] + m.data + token[at:]
    if m.kind == "splice":
        return token[:at] + m.data + token[at + len(m.data) :]
    if m.kind == "random":
        return m.data
    if m.kind in ("not-base64-proof", "proof-length"):
        head, sep, _ = token.rpartition(b",p=")
        if not sep:  # no proof in this token: spoil its end instead
            return token + b",p=!!"
        if m.kind == "not-base64-proof":
            return head + b",p=!!not*base64!!"
        return head + b",p=" + base64.b64encode(b"\x07" * m.size)
    if m.kind == "oversize":
        return token + b"x" * (MAX_RECEIVE + m.size)
    raise ValueError(m.kind)


@dataclass(frozen=True)
class Attempt:
    listener: str
    mechanism: str
    handshake_version: int  # 0: raw tokens
    authenticate_version: int
    step: str  # which token is spoiled: "first" or (SCRAM) "final"
    mutation: Mutation
    cuts: tuple[float, ...]  # where the frame is cut into reads, as fractions


ATTEMPTS = st.builds(
    Attempt,
    listener=st.sampled_from(["SASL_PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"]),
    mechanism=st.sampled_from(MECHANISMS),
    handshake_version=st.sampled_from([0, 1, 1]),
    authenticate_version=st.sampled_from([0, 1, 2]),
    step=st.sampled_from(["first", "final"]),
    mutation=MUTATIONS,
    cuts=st.lists(st.floats(0, 1), max_size=4).map(lambda c: tuple(sorted(c))),
)


def send_in_pieces(conn: Connection, data: bytes, cuts: tuple[float, ...]) -> None:
    """Send `data` cut at these fractions of its length, each piece a read of its own. The
    server may close the connection part-way (a size prefix over the bound is refused
    before the frame is read): what it does then is read after."""
    pieces, at = [], 0
    for cut in cuts:
        end = round(cut * len(data))
        if end > at:
            pieces.append(data[at:end])
            at = end
    pieces.append(data[at:])
    try:
        for i, piece in enumerate(pieces):
            if i:
                time.sleep(0.003)
            conn.sendall(piece)
    except (ConnectionError, ssl.SSLError):
        pass


def frame_of(conn: Connection, token: bytes, version: int) -> bytes:
    conn.correlation += 1
    header = RequestHeader(ApiKey.SASL_AUTHENTICATE, version, conn.correlation, "fuzz")
    return framing.encode_request(header, SaslAuthenticateRequest(auth_bytes=token))


def answer_or_close(conn: Connection) -> bytes | None:
    """The next frame, or None if the server closed the connection first; fails the test
    if it does neither in time."""
    conn.sock.settimeout(ANSWER_TIMEOUT_S)
    try:
        return conn.read_frame()
    except (ConnectionError, ssl.SSLError):
        return None
    except TimeoutError:
        raise AssertionError(f"neither an answer nor a close within {ANSWER_TIMEOUT_S} s") from None


def plain_valid(token: bytes) -> bool:
    parts = token.split(b"\0")
    return (
        len(parts) == 3
        and parts[0] in (b"", USER.encode())
        and parts[1] == USER.encode()
        and parts[2] == PASSWORDS[USER].encode()
    )


def failed_message(mechanism: str) -> str:
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


def attempt(server: ServerProcess, certs: Certificates, a: Attempt) -> None:
    """One login with one spoiled token; checks the server's answer to it."""
    scram = a.mechanism != "PLAIN"
    step = a.step if scram else "first"
    raw = a.handshake_version == 0
    with connect(server, certs, a.listener, timeout=ANSWER_TIMEOUT_S) as conn:
        sasl_handshake(conn, a.mechanism, a.handshake_version)
        client = SaslClient(a.mechanism, USER, PASSWORDS[USER])
        valid = client.first()
        if step == "final":
            if raw:
                challenge = sasl_raw_token(conn, valid)
            else:
                first = sasl_authenticate(conn, valid, a.authenticate_version)
                assert first.error_code == ErrorCode.NONE
                challenge = first.auth_bytes
            final = client.next(challenge)
            assert final is not None
            valid = final
        token = spoil(valid, a.mutation)
        if raw:
            data = struct.pack(">i", len(token)) + token
        else:
            data = frame_of(conn, token, a.authenticate_version)
        send_in_pieces(conn, data, a.cuts)
        got = answer_or_close(conn)

    accepted: bytes | None = None  # the server's token, if it took this one
    if got is not None and raw:
        accepted = got
    elif got is not None:
        _, response = framing.decode_response(ApiKey.SASL_AUTHENTICATE, a.authenticate_version, got)
        assert isinstance(response, SaslAuthenticateResponse)
        if response.error_code == ErrorCode.NONE:
            accepted = response.auth_bytes
        else:
            assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED, response
            assert response.error_message == failed_message(a.mechanism), response
    if accepted is None:
        return
    # What the server took must be what a client may send.
    if not scram:
        assert plain_valid(token), f"PLAIN logged in with a spoiled token ({a.mutation.kind})"
    elif step == "final":
        assert token == valid, f"SCRAM logged in with a spoiled proof ({a.mutation.kind})"
        assert accepted.startswith(b"v="), accepted
    else:
        assert accepted.startswith(b"r=") and b",s=" in accepted and b",i=" in accepted


def test_fuzzed_logins_break_nothing_and_hold_up_no_one(
    fuzzed: tuple[ServerProcess, Certificates],
) -> None:
    server, certs = fuzzed
    beats = Heartbeats(server, certs)
    try:
        # No shrinking: each failing example waits out ANSWER_TIMEOUT_S, and the report
        # names the attempt whole.
        @settings(
            max_examples=80,
            deadline=None,
            phases=(Phase.explicit, Phase.reuse, Phase.generate),
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(a=ATTEMPTS)
        def one(a: Attempt) -> None:
            attempt(server, certs, a)

        one()
    finally:
        beats.stop()
    assert not beats.errors, beats.errors
    assert beats.answered >= 5
    assert beats.slowest < 0.5, f"a heartbeat took {beats.slowest * 1000:.0f} ms"

    log = server.log()
    assert "Traceback" not in log
    assert "failed; closing it" not in log
    assert_no_secrets(log)
    # The server carries on: a valid login, by each mechanism.
    for mechanism in MECHANISMS:
        conn, _ = logged_in(server, certs, "SASL_PLAINTEXT", mechanism)
        with conn:
            assert conn.api_versions()
