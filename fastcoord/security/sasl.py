"""SASL on one connection: Kafka's server side of SaslHandshake and SaslAuthenticate.

A client configured with security.protocol SASL_PLAINTEXT or SASL_SSL logs in before it may
send a request, and a broker that gets one step of that wrong loses the client: it waits
for an answer that never comes, or gives up on an error it cannot read. So this module
follows Kafka's SaslServerAuthenticator step for step, as a state machine that never
touches a socket or a clock: the connection hands it each request's API key, each SASL
request or token, and the time (`now_ms`), and sends what it answers. It must never raise
on what a client sends (a malformed token is a failed login, with Kafka's one message),
never let a client tell an unknown user from a wrong password, and never log a password, a
proof or a token.

The states are Kafka's (SaslServerAuthenticator.SaslState); every change goes through
`Authentication._to`, which checks it against `_TRANSITIONS`:

- HANDSHAKE_OR_VERSIONS: the first request. ApiVersions is answered as always and moves to
  HANDSHAKE; SaslHandshake picks the mechanism; anything else closes the connection with no
  answer, before anything is created for it.
- HANDSHAKE: ApiVersions was answered; only SaslHandshake may follow (a second ApiVersions
  closes the connection, as in Kafka).
- AUTHENTICATE: the mechanism's tokens. After SaslHandshake v1 each one is a SaslAuthenticate
  request, and any other request is answered ILLEGAL_SASL_STATE and the connection closes;
  after v0 they are bare size-prefixed frames (`raw_tokens`).
- COMPLETE: authenticated as `principal`; requests are served until the session's end
  (`expires_ms`, connections.max.reauth.ms), when the next one closes the connection. A
  SaslHandshake then begins a re-authentication (KIP-368) on the live connection.
- REAUTH_HANDSHAKE: that SaslHandshake, admitted and not yet answered. The mechanism may not
  change (REAUTH_BAD_MECHANISM: the next token fails), nor may the principal.
- FAILED: the connection closes; nothing more is read.

Kafka's rules that are the connection's to apply: a failed login's answer and the close
wait connection.failed.authentication.delay.ms; frames are bounded by `max_receive` until
login; and the exchange must finish by `deadline_ms`.
"""

from __future__ import annotations

import base64
import collections
import enum
import hashlib
import hmac
import logging
import secrets
from collections.abc import Iterable
from typing import Literal, NamedTuple

from scramp import ScramMechanism

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from fastcoord.protocol.versions import SERVED
from fastcoord.security.credentials import MIN_ITERATIONS, credential, plain_matches
from fastcoord.security.entries import (
    MECHANISMS,
    SCRAM_MECHANISMS,
    PlainCredential,
    ScramCredential,
    User,
)

__all__ = [
    "Authentication",
    "Outcome",
    "ScramKeys",
    "State",
    "Step",
    "TransitionError",
    "Users",
    "Verdict",
]

log = logging.getLogger("fastcoord.server")

# Kafka lets a client start a re-authentication at most once a second; a SaslHandshake sooner
# than that is an ordinary request, and answered as one (KafkaChannel).
MIN_REAUTH_INTERVAL_MS = 1000

# Made once per process: an unknown user's fake SCRAM salt is the same on every try, as a real
# user's is, and differs between servers.
_SECRET = secrets.token_bytes(32)

_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}

# What an unknown PLAIN user's password is checked against, so that a wrong name costs what a
# wrong password does. No password has this digest.
_NO_PLAIN_CREDENTIAL = PlainCredential(
    salt=base64.b64encode(secrets.token_bytes(16)).decode("ascii"),
    digest=base64.b64encode(secrets.token_bytes(32)).decode("ascii"),
)

_API_VERSIONS = int(ApiKey.API_VERSIONS)
_SASL_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)
_SASL_AUTHENTICATE = int(ApiKey.SASL_AUTHENTICATE)


class TransitionError(RuntimeError):
    """A call the state machine's current state does not allow: a bug of the caller's,
    never a client's doing."""


class ScramKeys(NamedTuple):
    """A SCRAM credential, decoded once: what scramp's auth_fn returns."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class Users:
    """The users a server knows, by name, built once from the configuration's `user` list.

    Users come converted (security/credentials.py): credentials only, never a password. SCRAM
    credentials are decoded here once, so that a login is a dictionary lookup and a few
    HMACs; an unknown user gets a fake credential made from a per-process secret and the
    name, which looks like a real one and never matches.
    """

    def __init__(self, users: Iterable[User], *, secret: bytes | None = None) -> None:
        self._users: dict[str, User] = {}
        for user in users:
            if user.name in self._users:
                raise ValueError(f"user {user.name}: given twice")
            if user.password is not None:
                # Keeping it would break the promise that the server holds no password.
                raise ValueError(f"user {user.name}: its password is not converted")
            self._users[user.name] = user
        self._secret = _SECRET if secret is None else secret
        self._scram: dict[tuple[str, str], ScramKeys] = {}
        for user in self._users.values():
            for mechanism in SCRAM_MECHANISMS:
                found = credential(user, mechanism)
                if isinstance(found, ScramCredential):
                    self._scram[(user.name, mechanism)] = ScramKeys(
                        base64.b64decode(found.salt),
                        base64.b64decode(found.stored_key),
                        base64.b64decode(found.server_key),
                        found.iterations,
                    )
        # A fake credential takes the iteration count most users have, so that the count in
        # its server-first message does not single it out.
        self._fake_iterations: dict[str, int] = {}
        for mechanism in SCRAM_MECHANISMS:
            counts = collections.Counter(
                keys.iterations for (_, m), keys in self._scram.items() if m == mechanism
            )
            common = counts.most_common(1)
            self._fake_iterations[mechanism] = common[0][0] if common else MIN_ITERATIONS

    def __len__(self) -> int:
        return len(self._users)

    def credential(self, name: str, mechanism: str) -> PlainCredential | ScramCredential | None:
        """The user's credential for `mechanism`; None for an unknown user, or one who may
        not log in with it."""
        user = self._users.get(name)
        return None if user is None else credential(user, mechanism)

    def scram(self, name: str, mechanism: str) -> tuple[ScramKeys, bool]:
        """The user's decoded SCRAM credential and True; for a user without one, a fake
        credential (the same for the same name, in this process) and False."""
        # The fake is made for every name, known or not, so that the time of the first
        # answer does not tell an unknown user from a known one.
        fake = self._fake_scram(name, mechanism)
        found = self._scram.get((name, mechanism))
        if found is not None:
            return found, True
        return fake, False

    def _fake_scram(self, name: str, mechanism: str) -> ScramKeys:
        digest = _HASHES[mechanism]
        seed = mechanism.encode("ascii") + b"\0" + name.encode("utf-8", "surrogatepass")

        def derive(label: bytes) -> bytes:
            return hmac.new(self._secret, label + b"\0" + seed, digest).digest()

        # A real salt is 32 bytes (scramp's make_auth_info); keys are one digest long.
        salt = hmac.new(self._secret, b"salt\0" + seed, hashlib.sha256).digest()
        iterations = self._fake_iterations[mechanism]
        return ScramKeys(salt, derive(b"stored key"), derive(b"server key"), iterations)


class Verdict(enum.IntEnum):
    """What the connection does with a request, from its header alone, before decoding it."""

    PASS = 0  # handle it as always: any request once authenticated, and ApiVersions first
    SASL = 1  # a SaslHandshake or SaslAuthenticate: answer it with handshake or authenticate
    ILLEGAL = 2  # answer ILLEGAL_SASL_STATE (that API's error response), then close
    CLOSE = 3  # close with no answer: a request other than ApiVersions or SaslHandshake first
    EXPIRED = 4  # the session's lifetime is over (KIP-368): close with no answer


class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "HANDSHAKE_OR_VERSIONS"
    HANDSHAKE = "HANDSHAKE"
    AUTHENTICATE = "AUTHENTICATE"
    COMPLETE = "COMPLETE"
    REAUTH_HANDSHAKE = "REAUTH_HANDSHAKE"
    REAUTH_BAD_MECHANISM = "REAUTH_BAD_MECHANISM"
    FAILED = "FAILED"


_TRANSITIONS: dict[State, frozenset[State]] = {
    State.HANDSHAKE_OR_VERSIONS: frozenset({State.HANDSHAKE, State.AUTHENTICATE, State.FAILED}),
    State.HANDSHAKE: frozenset({State.AUTHENTICATE, State.FAILED}),
    State.AUTHENTICATE: frozenset({State.COMPLETE, State.FAILED}),
    State.COMPLETE: frozenset({State.REAUTH_HANDSHAKE, State.FAILED}),
    State.REAUTH_HANDSHAKE: frozenset(
        {State.AUTHENTICATE, State.REAUTH_BAD_MECHANISM, State.FAILED}
    ),
    State.REAUTH_BAD_MECHANISM: frozenset({State.FAILED}),
    State.FAILED: frozenset(),
}

Outcome = Literal["continue", "done", "failed"]


class Step(NamedTuple):
    """The answer to one token. `outcome`: "continue" (answer, and wait for the next
    token), "done" (answer: the connection is authenticated as `principal`), "failed"
    (answer after the failed-authentication delay, then close). A raw v0 token's answer is
    `auth_bytes` in a size-prefixed frame; a failed raw exchange gets no answer, as v0 has no
    way to say why."""

    auth_bytes: bytes
    error_code: int
    error_message: str | None
    session_lifetime_ms: int
    outcome: Outcome
    answered: bool = True  # False: a failure that closes the connection at once, unanswered

    def response(self) -> SaslAuthenticateResponse:
        return SaslAuthenticateResponse(
            error_code=self.error_code,
            error_message=self.error_message,
            auth_bytes=self.auth_bytes,
            session_lifetime_ms=self.session_lifetime_ms,
        )


class _Refused(Exception):
    """A login refused for a reason the log may name; the client is told nothing more."""


class _PlainExchange:
    """SASL/PLAIN (RFC 4616): one token, `authzid NUL user NUL password`, answered with an
    empty token (PlainSaslServer)."""

    def __init__(self, users: Users) -> None:
        self._users = users

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        parts = token.decode("utf-8").split("\0")
        if len(parts) != 3:
            raise _Refused("malformed")
        authzid, name, password = parts
        if not name or not password:
            raise _Refused("malformed")
        found = self._users.credential(name, "PLAIN")
        if isinstance(found, PlainCredential):
            matches = plain_matches(found, password)
        else:
            # The same digest and comparison as a real user's, with a result thrown away.
            plain_matches(_NO_PLAIN_CREDENTIAL, password)
            matches = False
        if not matches:
            raise _Refused(f"bad credentials for {name!r}")
        if authzid and authzid != name:
            raise _Refused(f"{name!r} asked for another authorization id")
        return b"", name


class _ScramExchange:
    """SCRAM-SHA-256/512 (RFC 5802, 7677) through scramp: client-first -> server-first,
    client-final -> server-final.

    scramp checks the client-final nonce against the server-first one, refuses an authzid
    (`a=`), and compares the proof in constant time. Kafka also refuses credentials under
    4096 iterations, as scramp does. An unknown user is answered like a known one, with a
    fake credential, and fails where a wrong password fails: at the proof.
    """

    def __init__(self, users: Users, mechanism: str) -> None:
        self._users = users
        self._mechanism = mechanism
        self._server = ScramMechanism(mechanism).make_server(self._lookup)
        self._name: str | None = None
        self._known = False
        self._first = True

    def _lookup(self, name: str) -> tuple[bytes, bytes, bytes, int]:
        keys, self._known = self._users.scram(name, self._mechanism)
        self._name = name
        return keys.salt, keys.stored_key, keys.server_key, keys.iterations

    def step(self, token: bytes) -> tuple[bytes, str | None]:
        text = token.decode("utf-8")
        if self._first:
            self._first = False
            self._server.set_client_first(text)
            server_first: str = self._server.get_server_first()
            return server_first.encode("utf-8"), None
        self._server.set_client_final(text)  # raises on a wrong nonce or proof
        server_final: str = self._server.get_server_final()
        if not self._known or self._name is None:
            # A fake credential never yields a matching proof; refuse all the same.
            raise _Refused(f"unknown user {self._name!r}")
        return server_final.encode("utf-8"), self._name


_Exchange = _PlainExchange | _ScramExchange


class Authentication:
    """One connection's SASL state machine. See the module's docstring for the states."""

    def __init__(
        self,
        users: Users,
        mechanisms: tuple[str, ...],
        reauth_ms: int,
        max_receive: int,
        timeout_ms: int,
        listener: str,
        now_ms: int,
    ) -> None:
        unknown = [m for m in mechanisms if m not in MECHANISMS]
        if not mechanisms or unknown:
            raise ValueError(f"SASL mechanisms {list(mechanisms)}: not among {MECHANISMS}")
        if reauth_ms < 0 or max_receive < 1 or timeout_ms < 1:
            raise ValueError("reauth_ms, max_receive and timeout_ms must be positive")
        self.users = users
        self.mechanisms = tuple(mechanisms)  # enabled on this listener, in the listener's order
        self.reauth_ms = reauth_ms  # connections.max.reauth.ms; 0: sessions do not end
        self.max_receive = max_receive  # sasl.server.max.receive.size: the largest token
        self.timeout_ms = timeout_ms  # how long an exchange may take
        self.listener = listener
        self.principal: str | None = None  # "User:alice" once authenticated
        self.mechanism: str | None = None  # the mechanism of the handshake
        self.expires_ms: int | None = None  # the session's end; None: no end
        self.deadline_ms: int | None = now_ms + timeout_ms  # None when no exchange is under way
        self.raw_tokens = False  # after SaslHandshake v0: the next frames are bare tokens
        self._state = State.HANDSHAKE_OR_VERSIONS
        self._exchange: _Exchange | None = None
        self._reauth_started_ms: int | None = None
        self._reauth_mechanism: str | None = None  # what a refused re-authentication asked for

    @property
    def state(self) -> State:
        return self._state

    @property
    def reauthenticating(self) -> bool:
        return self._reauth_started_ms is not None and self._state is not State.COMPLETE

    def _to(self, state: State) -> None:
        if state not in _TRANSITIONS[self._state]:
            raise TransitionError(f"SASL state {self._state.name} cannot become {state.name}")
        self._state = state

    # -- requests, by their header -----------------------------------------------------------

    def admit(self, api_key: int, now_ms: int, *, api_version: int | None = None) -> Verdict:
        """What to do with a request of `api_key`, before decoding it. `api_version` matters
        for ApiVersions alone: one of a version the server does not serve is answered with
        UNSUPPORTED_VERSION and leaves the client free to ask again (KIP-511), as in Kafka.
        """
        if self.raw_tokens:
            raise TransitionError("frames after SaslHandshake v0 are tokens, not requests")
        state = self._state
        if state is State.COMPLETE:
            return self._admit_authenticated(api_key, now_ms)
        if state is State.HANDSHAKE_OR_VERSIONS:
            if api_key == _SASL_HANDSHAKE:
                return Verdict.SASL
            if api_key == _API_VERSIONS:
                if api_version is None or SERVED[_API_VERSIONS].serves(api_version):
                    self._to(State.HANDSHAKE)
                return Verdict.PASS
            self._to(State.FAILED)
            return Verdict.CLOSE
        if state is State.HANDSHAKE:
            if api_key == _SASL_HANDSHAKE:
                return Verdict.SASL
            self._to(State.FAILED)
            return Verdict.CLOSE
        if state in (State.AUTHENTICATE, State.REAUTH_BAD_MECHANISM):
            if api_key == _SASL_AUTHENTICATE:
                return Verdict.SASL
            self._to(State.FAILED)
            return Verdict.ILLEGAL
        if state is State.FAILED:
            return Verdict.CLOSE
        raise TransitionError(f"a request in SASL state {state.name}, before its handshake")

    def _admit_authenticated(self, api_key: int, now_ms: int) -> Verdict:
        # Kafka's order (SocketServer.processCompletedReceives): a SaslHandshake that may
        # begin a re-authentication does so, even past the session's end; then an expired
        # session closes; then the request is served.
        if api_key == _SASL_HANDSHAKE and self._may_reauthenticate(now_ms):
            self._to(State.REAUTH_HANDSHAKE)
            self._reauth_started_ms = now_ms
            self.deadline_ms = now_ms + self.timeout_ms
            return Verdict.SASL
        # Kafka: expired once the time is past the end, not at it.
        if self.expires_ms is not None and now_ms > self.expires_ms:
            self._to(State.FAILED)
            return Verdict.EXPIRED
        if api_key in (_SASL_HANDSHAKE, _SASL_AUTHENTICATE):
            return Verdict.SASL  # answered ILLEGAL_SASL_STATE; the connection goes on
        return Verdict.PASS

    def _may_reauthenticate(self, now_ms: int) -> bool:
        # Only a session with an end re-authenticates (KafkaChannel), at most once a second.
        if self.expires_ms is None:
            return False
        started = self._reauth_started_ms
        return started is None or now_ms - started >= MIN_REAUTH_INTERVAL_MS

    # -- SaslHandshake ------------------------------------------------------------------------

    def handshake(
        self, request: SaslHandshakeRequest, version: int, now_ms: int
    ) -> tuple[SaslHandshakeResponse, bool]:
        """The answer to an admitted SaslHandshake, and whether to close after it: a
        mechanism not enabled here is answered UNSUPPORTED_SASL_MECHANISM with the enabled
        ones, then the connection closes. `now_ms` is the time of the request; the deadline
        it runs under was set when it was admitted."""
        state = self._state
        if state is State.COMPLETE:
            # Not a re-authentication (admit said so): Kafka's answer to a handshake after
            # login (KafkaApis.handleSaslHandshakeRequest); the client gives up on it.
            return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE), False
        if state not in (State.HANDSHAKE_OR_VERSIONS, State.HANDSHAKE, State.REAUTH_HANDSHAKE):
            raise TransitionError(f"SaslHandshake in SASL state {state.name}")
        enabled = list(self.mechanisms)
        mechanism = request.mechanism
        if mechanism not in self.mechanisms:
            self._to(State.FAILED)
            log.debug(
                "SASL mechanism %r is not enabled on listener %s", mechanism[:64], self.listener
            )
            return SaslHandshakeResponse(ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled), True
        self.raw_tokens = version == 0
        if state is State.REAUTH_HANDSHAKE and mechanism != self.mechanism:
            # Kafka answers the handshake and fails the first token (REAUTH_BAD_MECHANISM).
            self._reauth_mechanism = mechanism
            self._to(State.REAUTH_BAD_MECHANISM)
        else:
            self._exchange = (
                _PlainExchange(self.users)
                if mechanism == "PLAIN"
                else _ScramExchange(self.users, mechanism)
            )
            self.mechanism = mechanism
            self._to(State.AUTHENTICATE)
        return SaslHandshakeResponse(ErrorCode.NONE, enabled), False

    # -- SaslAuthenticate, or a raw token -----------------------------------------------------

    def authenticate(self, auth_bytes: bytes, now_ms: int, version: int) -> Step:
        """The answer to one token: a SaslAuthenticate request's bytes (`version` its
        version), or a raw token after SaslHandshake v0 (any `version`). Whatever the bytes,
        this returns; a failure is a Step with SASL_AUTHENTICATION_FAILED."""
        state = self._state
        if state is State.COMPLETE:
            # Kafka's answer to a SaslAuthenticate after login (KafkaApis); nothing changes.
            return Step(
                b"",
                ErrorCode.ILLEGAL_SASL_STATE,
                "SaslAuthenticate request received after successful authentication",
                0,
                "continue",
            )
        if state is State.REAUTH_BAD_MECHANISM:
            # Kafka throws this from the authenticator itself, outside the token's handling
            # that builds an answer: the connection closes at once, unanswered.
            failed = self._fail(
                f"SASL mechanism '{self._reauth_mechanism}' requested by client is not "
                f"supported for re-authentication of mechanism '{self.mechanism}'",
                "mechanism changed",
            )
            return failed._replace(answered=False)
        if state is not State.AUTHENTICATE or self._exchange is None:
            raise TransitionError(f"a SASL token in SASL state {state.name}")
        if len(auth_bytes) > self.max_receive:
            return self._fail(self._invalid_credentials(), "token over the size bound")
        try:
            token, name = self._exchange.step(auth_bytes)
        except _Refused as exc:
            return self._fail(self._invalid_credentials(), str(exc))
        except Exception as exc:
            # Malformed input of any shape: never the exception's text, which may quote it.
            return self._fail(self._invalid_credentials(), f"rejected ({type(exc).__name__})")
        if name is None:
            return Step(token, ErrorCode.NONE, None, 0, "continue")
        principal = "User:" + name
        if self.reauthenticating and principal != self.principal:
            old = (self.principal or "").removeprefix("User:")
            return self._fail(
                f"Cannot change principals during re-authentication from User.{old}: User.{name}",
                "principal changed",
            )
        return self._complete(principal, token, now_ms)

    def _complete(self, principal: str, token: bytes, now_ms: int) -> Step:
        self._to(State.COMPLETE)
        self.principal = principal
        self.deadline_ms = None
        self.raw_tokens = False
        self._exchange = None
        # Kafka's session lifetime is connections.max.reauth.ms (credentials here do not
        # expire), sent from SaslAuthenticate v1; the session ends whatever the version.
        lifetime = self.reauth_ms if self.reauth_ms > 0 else 0
        self.expires_ms = now_ms + lifetime if lifetime else None
        return Step(token, ErrorCode.NONE, None, lifetime, "done")

    def _invalid_credentials(self) -> str:
        # Kafka's one message for every SaslException: its text "may contain sensitive data
        # like the existence of the user" (SaslServerAuthenticator.handleSaslToken).
        during = "re-authentication" if self.reauthenticating else "authentication"
        return (
            f"Authentication failed during {during} due to invalid credentials with SASL "
            f"mechanism {self.mechanism}"
        )

    def _fail(self, message: str, reason: str) -> Step:
        log.debug("SASL %s login on listener %s failed: %s", self.mechanism, self.listener, reason)
        self._to(State.FAILED)
        self._exchange = None
        return Step(b"", ErrorCode.SASL_AUTHENTICATION_FAILED, message, 0, "failed")
