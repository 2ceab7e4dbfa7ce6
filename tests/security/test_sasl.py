"""SASL's state machine, without sockets: each of Kafka's rules, driven request by request.

The client side is scramp's ScramClient for SCRAM and hand-built bytes for PLAIN. SCRAM
credentials are made once, at 4096 iterations (Kafka's minimum and default), so that the
suite stays fast.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scramp import ScramClient

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.codec import encode
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import SaslHandshakeRequest
from fastcoord.security.credentials import convert
from fastcoord.security.entries import ScramCredential, User
from fastcoord.security.sasl import (
    Authentication,
    State,
    Step,
    TransitionError,
    Users,
    Verdict,
)

ALL = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
ALICE = convert(User(name="alice", password=PASSWORDS["alice"]))
BOB = convert(User(name="bob", password=PASSWORDS["bob"]))
CAROL = convert(User(name="carol", password=PASSWORDS["carol"], mechanisms=["PLAIN"]))
USERS = Users([ALICE, BOB, CAROL])
MAX_RECEIVE = 4096
TIMEOUT_MS = 10_000
LIFETIME_MS = 60_000


def failed_message(mechanism: str, during: str = "authentication") -> str:
    return (
        f"Authentication failed during {during} due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


def new(
    mechanisms: tuple[str, ...] = ALL, reauth_ms: int = 0, now: int = 0, users: Users = USERS
) -> Authentication:
    return Authentication(users, mechanisms, reauth_ms, MAX_RECEIVE, TIMEOUT_MS, "SASL", now)


def handshake(auth: Authentication, mechanism: str, version: int = 1, now: int = 0) -> None:
    assert auth.admit(ApiKey.SASL_HANDSHAKE, now) == Verdict.SASL
    response, close = auth.handshake(SaslHandshakeRequest(mechanism), version, now)
    assert (response.error_code, close) == (ErrorCode.NONE, False)


def plain(authzid: str, user: str, password: str) -> bytes:
    return f"{authzid}\0{user}\0{password}".encode()


@dataclass
class Scram:
    """One SCRAM exchange: the client, and the server's two answers."""

    client: ScramClient
    first: Step
    final: Step | None = None


def scram_first(
    auth: Authentication, mechanism: str, user: str, password: str, now: int = 0
) -> Scram:
    client = ScramClient([mechanism], user, password)
    return Scram(client, auth.authenticate(client.get_client_first().encode(), now, 2))


def scram_login(
    auth: Authentication, mechanism: str, user: str, password: str, now: int = 0
) -> Scram:
    exchange = scram_first(auth, mechanism, user, password, now)
    assert exchange.first.outcome == "continue"
    exchange.client.set_server_first(exchange.first.auth_bytes.decode())
    final = exchange.client.get_client_final().encode()
    exchange.final = auth.authenticate(final, now, 2)
    return exchange


def login(auth: Authentication, mechanism: str, user: str, password: str, now: int = 0) -> Step:
    handshake(auth, mechanism, now=now)
    if mechanism == "PLAIN":
        return auth.authenticate(plain("", user, password), now, 2)
    final = scram_login(auth, mechanism, user, password, now).final
    assert final is not None
    return final


def assert_failed(step: Step, mechanism: str, during: str = "authentication") -> None:
    assert step == Step(
        b"", ErrorCode.SASL_AUTHENTICATION_FAILED, failed_message(mechanism, during), 0, "failed"
    )


# -- before the handshake ------------------------------------------------------------------


@pytest.mark.parametrize(
    "api_key",
    [ApiKey.HEARTBEAT, ApiKey.JOIN_GROUP, ApiKey.METADATA, ApiKey.SASL_AUTHENTICATE, -1, 999],
)
def test_a_first_request_other_than_api_versions_or_handshake_closes(api_key: int) -> None:
    auth = new()
    assert auth.admit(api_key, 0) == Verdict.CLOSE
    assert auth.state is State.FAILED
    assert (auth.principal, auth.mechanism, auth.raw_tokens) == (None, None, False)


def test_api_versions_may_come_first_then_only_the_handshake() -> None:
    auth = new()
    assert auth.admit(ApiKey.API_VERSIONS, 0, api_version=3) == Verdict.PASS
    assert auth.admit(ApiKey.SASL_HANDSHAKE, 0) == Verdict.SASL


@pytest.mark.parametrize("api_key", [ApiKey.API_VERSIONS, ApiKey.HEARTBEAT])
def test_after_api_versions_anything_but_the_handshake_closes(api_key: int) -> None:
    # Kafka closes on a second ApiVersions too (its authenticator's state is HANDSHAKE_REQUEST).
    auth = new()
    assert auth.admit(ApiKey.API_VERSIONS, 0) == Verdict.PASS
    assert auth.admit(api_key, 0) == Verdict.CLOSE


def test_api_versions_at_an_unserved_version_may_be_asked_again() -> None:
    # KIP-511: answered UNSUPPORTED_VERSION, the client asks again at a version it was offered.
    auth = new()
    assert auth.admit(ApiKey.API_VERSIONS, 0, api_version=99) == Verdict.PASS
    assert auth.admit(ApiKey.API_VERSIONS, 0, api_version=4) == Verdict.PASS
    assert auth.admit(ApiKey.API_VERSIONS, 0, api_version=4) == Verdict.CLOSE


# -- the handshake -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("enabled", "asked"),
    [(ALL, "GSSAPI"), (ALL, "scram-sha-256"), (ALL, ""), (("SCRAM-SHA-512",), "PLAIN")],
)
def test_a_mechanism_not_enabled_is_refused_with_the_enabled_ones(
    enabled: tuple[str, ...], asked: str
) -> None:
    auth = new(enabled)
    assert auth.admit(ApiKey.SASL_HANDSHAKE, 0) == Verdict.SASL
    response, close = auth.handshake(SaslHandshakeRequest(asked), 1, 0)
    assert (response.error_code, response.mechanisms, close) == (
        ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        list(enabled),
        True,
    )
    assert auth.state is State.FAILED


@pytest.mark.parametrize("version", [0, 1])
def test_the_handshake_names_the_enabled_mechanisms(version: int) -> None:
    auth = new()
    auth.admit(ApiKey.SASL_HANDSHAKE, 0)
    response, close = auth.handshake(SaslHandshakeRequest("SCRAM-SHA-256"), version, 0)
    assert (response.error_code, response.mechanisms, close) == (ErrorCode.NONE, list(ALL), False)
    assert (auth.mechanism, auth.raw_tokens) == ("SCRAM-SHA-256", version == 0)


@pytest.mark.parametrize(
    "api_key", [ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.HEARTBEAT, ApiKey.METADATA]
)
def test_during_the_exchange_only_sasl_authenticate_is_legal(api_key: int) -> None:
    auth = new()
    handshake(auth, "PLAIN")
    assert auth.admit(ApiKey.SASL_AUTHENTICATE, 0) == Verdict.SASL
    assert auth.admit(api_key, 0) == Verdict.ILLEGAL
    assert auth.state is State.FAILED


def test_the_exchange_has_a_deadline() -> None:
    auth = new(now=1_000)
    assert auth.deadline_ms == 1_000 + TIMEOUT_MS
    login(auth, "PLAIN", "alice", PASSWORDS["alice"], now=2_000)
    assert auth.deadline_ms is None


# -- PLAIN ---------------------------------------------------------------------------------


@pytest.mark.parametrize("authzid", ["", "alice"])
def test_plain_logs_in(authzid: str) -> None:
    auth = new()
    handshake(auth, "PLAIN")
    step = auth.authenticate(plain(authzid, "alice", PASSWORDS["alice"]), 0, 2)
    assert step == Step(b"", ErrorCode.NONE, None, 0, "done")
    assert (auth.principal, auth.mechanism, auth.expires_ms) == ("User:alice", "PLAIN", None)
    assert auth.admit(ApiKey.HEARTBEAT, 0) == Verdict.PASS
    assert auth.admit(ApiKey.API_VERSIONS, 0) == Verdict.PASS


@pytest.mark.parametrize(
    "token",
    [
        plain("", "alice", "wrong"),
        plain("", "alice", PASSWORDS["bob"]),
        plain("bob", "alice", PASSWORDS["alice"]),  # another authorization id
        plain("", "nobody", PASSWORDS["alice"]),
        plain("", "", PASSWORDS["alice"]),
        plain("", "alice", ""),
        plain("", "alice", PASSWORDS["alice"]) + b"\0",
        f"alice\0{PASSWORDS['alice']}".encode(),
        b"",
        b"\xff\xfe\0alice\0" + PASSWORDS["alice"].encode(),
    ],
)
def test_plain_refusals_all_look_alike(token: bytes) -> None:
    auth = new()
    handshake(auth, "PLAIN")
    assert_failed(auth.authenticate(token, 0, 2), "PLAIN")
    assert auth.principal is None


def test_plain_needs_the_mechanism_among_the_users() -> None:
    # A user whose mechanisms leave out PLAIN may not log in with it, password or not.
    only_scram = convert(User(name="dave", password="dave-pw", mechanisms=["SCRAM-SHA-256"]))
    auth = new(users=Users([only_scram]))
    handshake(auth, "PLAIN")
    assert_failed(auth.authenticate(plain("", "dave", "dave-pw"), 0, 2), "PLAIN")


# -- SCRAM ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", SCRAM)
def test_scram_logs_in_and_the_client_verifies_the_server(mechanism: str) -> None:
    auth = new()
    handshake(auth, mechanism)
    exchange = scram_login(auth, mechanism, "alice", PASSWORDS["alice"])
    assert exchange.first.outcome == "continue"
    assert exchange.first.auth_bytes.startswith(b"r=")
    assert exchange.final is not None
    assert exchange.final.outcome == "done"
    assert (exchange.final.error_code, exchange.final.error_message) == (ErrorCode.NONE, None)
    exchange.client.set_server_final(exchange.final.auth_bytes.decode())  # raises if wrong
    assert (auth.principal, auth.mechanism) == ("User:alice", mechanism)


@pytest.mark.parametrize("mechanism", SCRAM)
def test_scram_wrong_password_fails_at_the_proof(mechanism: str) -> None:
    auth = new()
    handshake(auth, mechanism)
    exchange = scram_login(auth, mechanism, "alice", "wrong")
    assert exchange.first.outcome == "continue"
    assert exchange.final is not None
    assert_failed(exchange.final, mechanism)


@pytest.mark.parametrize("user", ["nobody", "carol"])  # carol has PLAIN only
@pytest.mark.parametrize("mechanism", SCRAM)
def test_scram_unknown_user_is_answered_like_a_known_one(mechanism: str, user: str) -> None:
    known, unknown = new(), new()
    handshake(known, mechanism)
    handshake(unknown, mechanism)
    real = scram_login(known, mechanism, "alice", "wrong")
    fake = scram_login(unknown, mechanism, user, "wrong")
    # The server-first messages have the same shape: nonce, a salt as long, the same count.
    real_parts = dict(p.split("=", 1) for p in real.first.auth_bytes.decode().split(","))
    fake_parts = dict(p.split("=", 1) for p in fake.first.auth_bytes.decode().split(","))
    assert real_parts.keys() == fake_parts.keys() == {"r", "s", "i"}
    assert len(base64.b64decode(fake_parts["s"])) == len(base64.b64decode(real_parts["s"]))
    assert fake_parts["i"] == real_parts["i"] == "4096"
    assert real.final == fake.final
    assert fake.final is not None
    assert_failed(fake.final, mechanism)


@pytest.mark.parametrize("mechanism", SCRAM)
def test_an_unknown_users_salt_is_the_same_on_every_try(mechanism: str) -> None:
    def salt(user: str) -> bytes:
        auth = new()
        handshake(auth, mechanism)
        first = scram_first(auth, mechanism, user, "pw").first.auth_bytes.decode()
        return dict(p.split("=", 1) for p in first.split(","))["s"].encode()

    assert salt("nobody") == salt("nobody")
    assert salt("nobody") != salt("somebody")
    assert salt("alice") == salt("alice")


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("mechanism", ALL)
def test_unknown_user_and_wrong_password_get_byte_identical_answers(
    mechanism: str, version: int
) -> None:
    steps = []
    for user in ("alice", "nobody"):
        auth = new()
        steps.append(login(auth, mechanism, user, "wrong"))
    assert steps[0] == steps[1]
    assert encode(steps[0].response(), version) == encode(steps[1].response(), version)


@pytest.mark.parametrize("authzid", ["mallory", "alice"])
def test_scram_authzid_is_refused(authzid: str) -> None:
    # Kafka refuses an authzid other than the user; scramp refuses any, which is stricter
    # than Kafka for `a=<the user>`. No client sends one (Java, librdkafka, franz-go,
    # kafka-python and aiokafka all send "n,,").
    auth = new()
    handshake(auth, "SCRAM-SHA-256")
    client = ScramClient(["SCRAM-SHA-256"], "alice", PASSWORDS["alice"])
    first = client.get_client_first().replace("n,,", f"n,a={authzid},", 1)
    assert_failed(auth.authenticate(first.encode(), 0, 2), "SCRAM-SHA-256")


def _client_final(auth: Authentication, mechanism: str) -> tuple[str, str]:
    """A valid client-final for alice, and the nonce it carries."""
    handshake(auth, mechanism)
    exchange = scram_first(auth, mechanism, "alice", PASSWORDS["alice"])
    exchange.client.set_server_first(exchange.first.auth_bytes.decode())
    final = exchange.client.get_client_final()
    return final, exchange.client.nonce.nonce


def _with_proof(final: str, proof: bytes) -> str:
    head, _, _ = final.rpartition(",p=")
    return f"{head},p={base64.b64encode(proof).decode()}"


def _proof(final: str) -> bytes:
    return base64.b64decode(final.rpartition(",p=")[2])


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda f, n: f.replace(f"r={n}", f"r={n}x"), id="nonce-longer"),
        pytest.param(lambda f, n: f.replace(f"r={n}", f"r={n[:-1]}"), id="nonce-shorter"),
        pytest.param(
            lambda f, n: _with_proof(f, bytes([_proof(f)[0] ^ 1]) + _proof(f)[1:]),
            id="proof-bit-flipped",
        ),
        pytest.param(lambda f, n: _with_proof(f, _proof(f)[:-1]), id="proof-too-short"),
        pytest.param(lambda f, n: _with_proof(f, _proof(f) + b"\0"), id="proof-too-long"),
        pytest.param(lambda f, n: f.rpartition(",p=")[0] + ",p=!!!!", id="proof-not-base64"),
        pytest.param(lambda f, n: f.rpartition(",p=")[0], id="no-proof"),
        pytest.param(lambda f, n: f.replace("c=biws", "c=eSws"), id="channel-binding-flag"),
    ],
)
@pytest.mark.parametrize("mechanism", SCRAM)
def test_scram_client_final_is_checked(mechanism: str, tamper: object) -> None:
    auth = new()
    final, nonce = _client_final(auth, mechanism)
    assert callable(tamper)
    assert_failed(auth.authenticate(tamper(final, nonce).encode(), 0, 2), mechanism)


def test_a_scram_credential_under_kafkas_minimum_iterations_never_logs_in() -> None:
    # credentials.convert refuses such a credential; one that got past it still may not log in.
    real = ALICE.scram_sha_256
    assert real is not None
    weak = ScramCredential(real.salt, 1024, real.stored_key, real.server_key)
    user = User(name="weak", mechanisms=["SCRAM-SHA-256"], scram_sha_256=weak)
    auth = new(users=Users([user]))
    handshake(auth, "SCRAM-SHA-256")
    step = scram_first(auth, "SCRAM-SHA-256", "weak", "pw").first
    assert_failed(step, "SCRAM-SHA-256")


def test_a_token_over_the_size_bound_fails() -> None:
    auth = new()
    handshake(auth, "PLAIN")
    token = plain("", "alice", PASSWORDS["alice"] + "x" * MAX_RECEIVE)
    assert_failed(auth.authenticate(token, 0, 2), "PLAIN")


def test_no_password_proof_or_token_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    tokens: list[bytes] = []
    for mechanism in ALL:
        for user, password in (("alice", PASSWORDS["alice"]), ("alice", "hunter2-wrong")):
            auth = new()
            handshake(auth, mechanism)
            if mechanism == "PLAIN":
                token = plain("", user, password)
                tokens.append(token)
                auth.authenticate(token, 0, 2)
                continue
            exchange = scram_first(auth, mechanism, user, password)
            exchange.client.set_server_first(exchange.first.auth_bytes.decode())
            final = exchange.client.get_client_final()
            tokens += [exchange.first.auth_bytes, final.encode()]
            step = auth.authenticate(final.encode(), 0, 2)
            tokens.append(step.auth_bytes)
    assert caplog.records  # the failures were logged
    for secret in [PASSWORDS["alice"], "hunter2-wrong"]:
        assert secret not in caplog.text
    for token in tokens:
        if token:
            assert token.decode("utf-8", "replace") not in caplog.text
            for part in token.decode().split(","):
                if part[:2] in ("p=", "v=", "s=", "r="):
                    assert part[2:] not in caplog.text


# -- SaslHandshake v0: raw tokens ----------------------------------------------------------


def test_plain_over_raw_tokens() -> None:
    auth = new()
    handshake(auth, "PLAIN", version=0)
    assert auth.raw_tokens
    with pytest.raises(TransitionError):
        auth.admit(ApiKey.SASL_AUTHENTICATE, 0)  # frames are tokens, not requests
    step = auth.authenticate(plain("", "alice", PASSWORDS["alice"]), 0, -1)
    # Kafka answers PLAIN's empty token with an empty size-prefixed frame.
    assert (step.auth_bytes, step.outcome) == (b"", "done")
    assert not auth.raw_tokens
    assert auth.admit(ApiKey.HEARTBEAT, 0) == Verdict.PASS


@pytest.mark.parametrize("mechanism", SCRAM)
def test_scram_over_raw_tokens(mechanism: str) -> None:
    auth = new()
    handshake(auth, mechanism, version=0)
    client = ScramClient([mechanism], "alice", PASSWORDS["alice"])
    first = auth.authenticate(client.get_client_first().encode(), 0, -1)
    assert (first.outcome, auth.raw_tokens) == ("continue", True)
    client.set_server_first(first.auth_bytes.decode())
    final = auth.authenticate(client.get_client_final().encode(), 0, -1)
    assert final.outcome == "done"
    client.set_server_final(final.auth_bytes.decode())
    assert (auth.principal, auth.raw_tokens) == ("User:alice", False)


def test_a_failed_raw_exchange_fails() -> None:
    auth = new()
    handshake(auth, "PLAIN", version=0)
    assert_failed(auth.authenticate(plain("", "alice", "wrong"), 0, -1), "PLAIN")


# -- the session and re-authentication (KIP-368) --------------------------------------------


def test_without_a_lifetime_the_session_never_ends_and_sasl_requests_are_refused() -> None:
    auth = new(reauth_ms=0)
    step = login(auth, "SCRAM-SHA-256", "alice", PASSWORDS["alice"])
    assert (step.session_lifetime_ms, auth.expires_ms) == (0, None)
    assert auth.admit(ApiKey.HEARTBEAT, 10**12) == Verdict.PASS
    # Kafka's answers after login (KafkaApis): ILLEGAL_SASL_STATE, and the connection goes on.
    assert auth.admit(ApiKey.SASL_HANDSHAKE, 10**12) == Verdict.SASL
    response, close = auth.handshake(SaslHandshakeRequest("SCRAM-SHA-256"), 1, 10**12)
    assert (response.error_code, response.mechanisms, close) == (
        ErrorCode.ILLEGAL_SASL_STATE,
        [],
        False,
    )
    assert auth.admit(ApiKey.SASL_AUTHENTICATE, 10**12) == Verdict.SASL
    step = auth.authenticate(b"anything", 10**12, 2)
    assert (step.error_code, step.outcome) == (ErrorCode.ILLEGAL_SASL_STATE, "continue")
    assert (auth.state, auth.principal) == (State.COMPLETE, "User:alice")


@pytest.mark.parametrize("mechanism", ALL)
def test_the_session_lifetime_is_sent_and_enforced(mechanism: str) -> None:
    auth = new(reauth_ms=LIFETIME_MS, now=1_000)
    step = login(auth, mechanism, "alice", PASSWORDS["alice"], now=1_000)
    assert (step.outcome, step.session_lifetime_ms) == ("done", LIFETIME_MS)
    assert auth.expires_ms == 1_000 + LIFETIME_MS
    # Kafka: expired once the time is past the end.
    assert auth.admit(ApiKey.HEARTBEAT, 1_000 + LIFETIME_MS) == Verdict.PASS
    assert auth.admit(ApiKey.HEARTBEAT, 1_001 + LIFETIME_MS) == Verdict.EXPIRED


@pytest.mark.parametrize("mechanism", ALL)
def test_reauthentication_as_the_same_user_renews_the_session(mechanism: str) -> None:
    auth = new(reauth_ms=LIFETIME_MS)
    login(auth, mechanism, "alice", PASSWORDS["alice"])
    later = 50_000
    step = login(auth, mechanism, "alice", PASSWORDS["alice"], now=later)
    assert (step.outcome, step.session_lifetime_ms) == ("done", LIFETIME_MS)
    assert (auth.principal, auth.expires_ms, auth.deadline_ms) == (
        "User:alice",
        later + LIFETIME_MS,
        None,
    )
    assert auth.admit(ApiKey.HEARTBEAT, LIFETIME_MS + 1) == Verdict.PASS


def test_reauthentication_may_begin_after_the_session_ended() -> None:
    auth = new(reauth_ms=LIFETIME_MS)
    login(auth, "PLAIN", "alice", PASSWORDS["alice"])
    late = LIFETIME_MS + 5
    assert auth.admit(ApiKey.SASL_HANDSHAKE, late) == Verdict.SASL
    assert auth.deadline_ms == late + TIMEOUT_MS
    auth.handshake(SaslHandshakeRequest("PLAIN"), 1, late)
    step = auth.authenticate(plain("", "alice", PASSWORDS["alice"]), late, 2)
    assert step.outcome == "done"
    assert auth.expires_ms == late + LIFETIME_MS


def test_during_reauthentication_other_requests_are_illegal() -> None:
    auth = new(reauth_ms=LIFETIME_MS)
    login(auth, "PLAIN", "alice", PASSWORDS["alice"])
    handshake(auth, "PLAIN", now=10_000)
    assert auth.admit(ApiKey.HEARTBEAT, 10_000) == Verdict.ILLEGAL


@pytest.mark.parametrize("mechanism", ALL)
def test_reauthentication_may_not_change_the_principal(mechanism: str) -> None:
    auth = new(reauth_ms=LIFETIME_MS)
    login(auth, mechanism, "alice", PASSWORDS["alice"])
    step = login(auth, mechanism, "bob", PASSWORDS["bob"], now=10_000)
    assert step == Step(
        b"",
        ErrorCode.SASL_AUTHENTICATION_FAILED,
        "Cannot change principals during re-authentication from User.alice: User.bob",
        0,
        "failed",
    )
    assert auth.state is State.FAILED


def test_reauthentication_may_not_change_the_mechanism() -> None:
    # Kafka answers the handshake, then fails the first token (REAUTH_BAD_MECHANISM) by
    # closing the connection, with no answer.
    auth = new(reauth_ms=LIFETIME_MS)
    login(auth, "SCRAM-SHA-256", "alice", PASSWORDS["alice"])
    handshake(auth, "PLAIN", now=10_000)
    assert auth.admit(ApiKey.SASL_AUTHENTICATE, 10_000) == Verdict.SASL
    step = auth.authenticate(plain("", "alice", PASSWORDS["alice"]), 10_000, 2)
    assert step == Step(
        b"",
        ErrorCode.SASL_AUTHENTICATION_FAILED,
        "SASL mechanism 'PLAIN' requested by client is not supported for re-authentication "
        "of mechanism 'SCRAM-SHA-256'",
        0,
        "failed",
        answered=False,
    )


def test_a_failed_reauthentication_says_so() -> None:
    auth = new(reauth_ms=LIFETIME_MS)
    login(auth, "SCRAM-SHA-512", "alice", PASSWORDS["alice"])
    step = login(auth, "SCRAM-SHA-512", "alice", "wrong", now=10_000)
    assert_failed(step, "SCRAM-SHA-512", during="re-authentication")


def test_reauthentication_at_most_once_a_second() -> None:
    # Kafka (KafkaChannel): a SaslHandshake within a second of the last re-authentication's
    # start is an ordinary request, answered ILLEGAL_SASL_STATE.
    auth = new(reauth_ms=LIFETIME_MS)
    login(auth, "PLAIN", "alice", PASSWORDS["alice"])
    login(auth, "PLAIN", "alice", PASSWORDS["alice"], now=10_000)
    assert auth.admit(ApiKey.SASL_HANDSHAKE, 10_999) == Verdict.SASL
    response, close = auth.handshake(SaslHandshakeRequest("PLAIN"), 1, 10_999)
    assert (response.error_code, close, auth.state) == (
        ErrorCode.ILLEGAL_SASL_STATE,
        False,
        State.COMPLETE,
    )
    assert auth.admit(ApiKey.SASL_HANDSHAKE, 11_000) == Verdict.SASL
    assert auth.state is State.REAUTH_HANDSHAKE


# -- users -----------------------------------------------------------------------------------


def test_users_refuse_duplicates_and_unconverted_passwords() -> None:
    with pytest.raises(ValueError, match="alice: given twice"):
        Users([ALICE, ALICE])
    with pytest.raises(ValueError, match="eve: its password is not converted"):
        Users([User(name="eve", password="pw")])


def test_users_give_each_users_credentials() -> None:
    assert USERS.credential("alice", "PLAIN") == ALICE.plain
    assert USERS.credential("alice", "SCRAM-SHA-512") == ALICE.scram_sha_512
    assert USERS.credential("carol", "SCRAM-SHA-256") is None
    assert USERS.credential("nobody", "PLAIN") is None


def test_state_changes_outside_the_table_are_bugs() -> None:
    auth = new()
    with pytest.raises(TransitionError, match="HANDSHAKE_OR_VERSIONS"):
        auth.authenticate(b"token", 0, 2)


# -- nothing a client sends makes it raise ---------------------------------------------------


def _mutations(valid: bytes) -> st.SearchStrategy[bytes]:
    """Broken versions of a valid token: cut, not UTF-8, bytes flipped, inserted or deleted,
    empty, over the size bound, or anything at all."""

    @st.composite
    def mutate(draw: st.DrawFn) -> bytes:
        data = bytearray(valid)
        for _ in range(draw(st.integers(1, 3))):
            op = draw(st.sampled_from(["flip", "cut", "insert", "delete", "not-utf8"]))
            i = draw(st.integers(0, max(len(data) - 1, 0)))
            if op == "flip" and data:
                data[i] ^= 1 << draw(st.integers(0, 7))
            elif op == "cut":
                del data[i:]
            elif op == "insert":
                data[i:i] = draw(st.binary(min_size=1, max_size=4))
            elif op == "delete" and data:
                del data[i]
            elif op == "not-utf8":
                data[i:i] = b"\xc3\x28"
        return bytes(data)

    return st.one_of(
        mutate(),
        st.just(b""),
        st.just(valid + b"x" * MAX_RECEIVE),
        st.binary(max_size=64),
        st.text(max_size=64).map(str.encode),
    )


# Proofs of the wrong length, not base64, or empty, in an otherwise valid client-final.
_BAD_PROOFS = st.one_of(
    st.binary(max_size=80).map(lambda b: base64.b64encode(b).decode()),
    st.text(alphabet="!@#$%^&*()-_.~ ", min_size=1, max_size=20),
    st.just(""),
)

_FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _fuzzed(step: Step, mechanism: str) -> None:
    """Any answer to a fuzzed token: a failure with the one message, or going on."""
    if step.outcome == "failed":
        assert_failed(step, mechanism)
    else:
        assert step.outcome == "continue"
        assert step.error_code == ErrorCode.NONE


@_FUZZ
@given(data=st.data(), mechanism=st.sampled_from(SCRAM))
def test_fuzzed_scram_client_first_never_raises(data: st.DataObject, mechanism: str) -> None:
    valid = ScramClient([mechanism], "alice", "pw").get_client_first().encode()
    token = data.draw(_mutations(valid))
    auth = new()
    handshake(auth, mechanism)
    step = auth.authenticate(token, 0, 2)
    _fuzzed(step, mechanism)
    if step.outcome == "continue":
        assert step.auth_bytes.startswith(b"r=")


@_FUZZ
@given(data=st.data(), mechanism=st.sampled_from(SCRAM))
def test_fuzzed_scram_client_final_never_raises(data: st.DataObject, mechanism: str) -> None:
    auth = new()
    final, _ = _client_final(auth, mechanism)
    if data.draw(st.booleans()):
        token = data.draw(_mutations(final.encode()))
    else:
        token = (final.rpartition(",p=")[0] + ",p=" + data.draw(_BAD_PROOFS)).encode()
    step = auth.authenticate(token, 0, 2)
    if _same_final(token, final):
        assert step.outcome == "done"
    else:
        assert_failed(step, mechanism)


def _same_final(token: bytes, final: str) -> bool:
    """Whether `token` says what `final` says. Base64 leaves the last character's low bits
    unused, so one proof has several spellings; Kafka's decoder, like Python's, accepts them."""
    try:
        ours = dict(p.split("=", 1) for p in token.decode().split(","))
        theirs = dict(p.split("=", 1) for p in final.split(","))
        return (
            ours.keys() == theirs.keys()
            and all(ours[k] == theirs[k] for k in ours if k != "p")
            and base64.b64decode(ours["p"], validate=True) == base64.b64decode(theirs["p"])
        )
    except ValueError:
        return False


@_FUZZ
@given(data=st.data())
def test_fuzzed_plain_never_raises(data: st.DataObject) -> None:
    valid = plain("", "alice", PASSWORDS["alice"])
    token = data.draw(st.one_of(_mutations(valid), st.binary(max_size=40)))
    auth = new()
    handshake(auth, "PLAIN")
    step = auth.authenticate(token, 0, 2)
    if token in (valid, plain("alice", "alice", PASSWORDS["alice"])):
        assert step.outcome == "done"
    else:
        assert_failed(step, "PLAIN")
