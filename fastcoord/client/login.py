"""The client's side of TLS and SASL: what a connection does between its TCP connect and its
first request when the listener is not PLAINTEXT.

A load generator that cannot log in measures nothing of a secured server, and one that logs
in its own way costs the server something other than Kafka's clients do; so this does what
they do, in their order: the TLS handshake over the TCP stream, ApiVersions (the
connection's own), then SaslHandshake v1 naming the mechanism and each SASL token in a
SaslAuthenticate (v1 or v2, as ApiVersions allows), PLAIN or SCRAM-SHA-256/512. The
settings are the client's, named as librdkafka names them (security.protocol,
sasl.mechanism, ssl.ca.location, ...). It never sends a request of the connection's before
the login has succeeded, and never takes a SCRAM server's final message without checking
its signature: a server that does not know the password must not pass for one that does.
Each round trip of a login is handed to the caller's `on_round`, as the load test counts
every request. A SCRAM login's one costly step, the salted password, is computed once per
user and salt (scram_final says why), so that a storm of logins measures the server.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import scramp
import trio

from fastcoord.protocol.api_keys import ApiKey, api_name
from fastcoord.protocol.errors import ErrorCode, error_name
from fastcoord.protocol.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from fastcoord.protocol.schema import Request, Response
from fastcoord.security.tls import client_context

# librdkafka's security.protocol values, and the SASL mechanisms this client speaks.
PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Without sasl.mechanism: PLAIN, as kafka-python and aiokafka default to (librdkafka's
# GSSAPI needs a Kerberos KDC, which this client does not speak).
DEFAULT_MECHANISM = "PLAIN"
ENDPOINT_IDENTIFICATION = ("https", "none")  # ssl.endpoint.identification.algorithm
USER_NUMBER = "{n}"  # in sasl.username: the user's number, for many users

SASL_HANDSHAKE_VERSION = 1  # v0 sends the tokens bare, without SaslAuthenticate
SASL_AUTHENTICATE_NEWEST = 2

# (api key, latency in ns, error code) of one round trip of a login.
OnRound = Callable[[int, int, int], None]
# Send a request at a version on the connection and wait for its answer.
Ask = Callable[[Request, int], Awaitable[Any]]


@dataclass(frozen=True)
class ClientSecurity:
    """A client's security settings, each named as librdkafka names it (its dots as
    underscores); None for a setting not given. `sasl_users` users log in, the user number
    n formatted into `sasl_username` where it holds {n}; all have `sasl_password`."""

    security_protocol: str = "plaintext"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_endpoint_identification_algorithm: str | None = None
    sasl_users: int = 1

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("ssl", "sasl_ssl")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("sasl_plaintext", "sasl_ssl")

    @property
    def mechanism(self) -> str:
        return self.sasl_mechanism or DEFAULT_MECHANISM

    @property
    def check_hostname(self) -> bool:
        return (self.ssl_endpoint_identification_algorithm or "https") == "https"

    @property
    def users(self) -> int:
        """How many users the connections log in as: 1 unless SASL with sasl_users."""
        return max(1, self.sasl_users) if self.sasl else 1

    def username(self, user: int) -> str:
        """User `user`'s name: sasl_username with {n} replaced by the number."""
        return (self.sasl_username or "").replace(USER_NUMBER, str(user))

    def context(self) -> ssl.SSLContext:
        """The TLS context, made once per process for these files: loading the CAs for each
        of a fleet's connections would cost more than its handshake."""
        return _context(
            self.ssl_ca_location,
            self.ssl_certificate_location,
            self.ssl_key_location,
            self.check_hostname,
        )

    def described(self) -> dict[str, object]:
        """The settings for a run's summary: the password never, only whether it is set."""
        return {
            "security_protocol": self.security_protocol,
            "sasl_mechanism": self.mechanism if self.sasl else None,
            "sasl_username": self.sasl_username,
            "sasl_password": "(set)" if self.sasl_password is not None else None,
            "sasl_users": self.users,
            "ssl_ca_location": self.ssl_ca_location,
            "ssl_certificate_location": self.ssl_certificate_location,
            "ssl_key_location": self.ssl_key_location,
            "ssl_endpoint_identification_algorithm": (
                self.ssl_endpoint_identification_algorithm or "https"
            )
            if self.tls
            else None,
        }


PLAINTEXT = ClientSecurity()


@functools.lru_cache(maxsize=8)
def _context(
    cafile: str | None, certfile: str | None, keyfile: str | None, check_hostname: bool
) -> ssl.SSLContext:
    return client_context(cafile, certfile, keyfile, check_hostname)


class LoginFailed(ConnectionError):
    """A login the server refused, or that could not be completed: `api` is the request
    whose answer said so (SaslHandshake or SaslAuthenticate; 0 for TLS), `code` its error
    code (0 when the client itself gave up: a SCRAM signature that does not verify)."""

    def __init__(self, message: str, api: int = 0, code: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.api = api
        self.code = code

    def __str__(self) -> str:
        return self.message


class TlsFailed(LoginFailed):
    """The TLS handshake failed, or the server ended TLS before the first answer (a
    client certificate it refused: TLS 1.3 says so only after the client's handshake)."""


# -- TLS ------------------------------------------------------------------------------------


async def start_tls(
    stream: trio.SocketStream, host: str, security: ClientSecurity
) -> trio.SSLStream[trio.SocketStream]:
    """The TLS handshake over `stream`, the server's certificate checked against
    ssl.ca.location (and its name against `host`, unless endpoint identification is none);
    TlsFailed with a one-line reason if it fails."""
    tls = trio.SSLStream(stream, security.context(), server_hostname=host)
    try:
        await tls.do_handshake()
    except trio.BrokenResourceError as exc:
        raise TlsFailed(f"TLS handshake with {host} failed: {tls_reason(exc)}") from None
    return tls


def tls_reason(exc: BaseException) -> str:
    """Why TLS failed, in a few words, from trio's BrokenResourceError (whose cause is
    ssl's error) or ssl's own."""
    cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"the server's certificate failed verification: {cause.verify_message}"
    if isinstance(cause, ssl.SSLError):
        reason = (cause.reason or "").lower().replace("_", " ")
        if reason.startswith(("tlsv13 alert ", "tlsv1 alert ", "sslv3 alert ")):
            return f"the server sent the TLS alert: {reason.split('alert ', 1)[1]}"
        if isinstance(cause, ssl.SSLEOFError) or "eof" in reason:
            return "the server closed the connection (is its listener TLS?)"
        return reason or str(cause)
    if isinstance(cause, OSError):
        return cause.strerror or str(cause)
    return str(cause or exc) or type(exc).__name__


# -- SASL -----------------------------------------------------------------------------------


async def authenticate(
    ask: Ask,
    served: Mapping[int, tuple[int, int]],
    mechanism: str,
    username: str,
    password: str,
    on_round: OnRound | None = None,
) -> int:
    """Log in as `username` with `mechanism` on a connection whose ApiVersions answer
    `served` (api key -> (min, max)); `ask` sends a request at a version and waits for its
    answer. Returns the session's lifetime in ms (0: no limit). LoginFailed names the
    request that failed, its error and the server's message."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"sasl.mechanism {mechanism!r} is not one of {', '.join(MECHANISMS)}")
    handshake_version = _version(served, ApiKey.SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION)
    authenticate_version = _version(served, ApiKey.SASL_AUTHENTICATE, SASL_AUTHENTICATE_NEWEST)
    if handshake_version != SASL_HANDSHAKE_VERSION or authenticate_version < 0:
        raise LoginFailed(
            "the server does not serve SaslHandshake v1 and SaslAuthenticate: is its listener "
            "SASL_PLAINTEXT or SASL_SSL?"
        )
    rounds = _Rounds(ask, on_round)
    handshake = await rounds.ask(SaslHandshakeRequest(mechanism=mechanism), handshake_version)
    assert isinstance(handshake, SaslHandshakeResponse)
    if handshake.error_code != ErrorCode.NONE:
        enabled = ", ".join(handshake.mechanisms) or "none"
        raise LoginFailed(
            f"SaslHandshake {error_name(handshake.error_code)}: the server enables {enabled}",
            ApiKey.SASL_HANDSHAKE,
            handshake.error_code,
        )
    if mechanism == "PLAIN":
        # RFC 4616: authzid NUL authcid NUL passwd, the authorization id left empty (the
        # user acts as itself).
        token = b"\0" + username.encode() + b"\0" + password.encode()
        answer = await rounds.token(token, authenticate_version)
        return answer.session_lifetime_ms
    client = scramp.ScramClient([mechanism], username, password)
    server_first = await rounds.token(client.get_client_first().encode(), authenticate_version)
    try:
        client.set_server_first(server_first.auth_bytes.decode())
    except (scramp.ScramException, UnicodeDecodeError) as exc:
        raise LoginFailed(
            f"{mechanism}: the server's first message is not SCRAM's: {exc}"
        ) from None
    final, signature = scram_final(client)
    server_final = await rounds.token(final.encode(), authenticate_version)
    if not server_final_verified(server_final.auth_bytes, signature):
        # The server does not know the password, whatever it answered: never logged in.
        raise LoginFailed(
            f"{mechanism}: the server's signature does not verify: it does not hold "
            f"{username}'s credentials"
        )
    return server_final.session_lifetime_ms


# SCRAM's hash by mechanism name, as hashlib names it.
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def scram_final(client: scramp.ScramClient) -> tuple[str, str]:
    """The client-final message of a ScramClient that has the server's first (its
    set_server_first), and the server signature the server-final must carry: as its
    get_client_final makes them, but with the salted password computed once per user.

    That step is PBKDF2 of 4096 iterations or more, 1.6 ms of CPU for SCRAM-SHA-512: a
    worker logging in thousands of connections at once would block its loop for seconds,
    delaying every answer it reads meanwhile, and measure itself rather than the server.
    RFC 5802 (section 5.1) lets a client cache it: the server gives a user the same salt
    each time."""
    hash_name = SCRAM_HASHES[client.mechanism_name]
    client_key, stored_key, server_key = scram_keys(
        hash_name, bytes(client.password), bytes(client.salt), int(client.iterations)
    )
    # RFC 5802, section 3: the proof is ClientKey XOR HMAC(StoredKey, AuthMessage), and
    # the server proves it holds the credentials with HMAC(ServerKey, AuthMessage).
    without_proof = f"c={_b64(bytes(client.gs2_header))},r={client.nonce}"
    auth_message = f"{client.client_first_bare},{client.server_first},{without_proof}".encode()
    client_signature = hmac.digest(stored_key, auth_message, hash_name)
    proof = bytes(a ^ b for a, b in zip(client_key, client_signature, strict=True))
    server_signature = hmac.digest(server_key, auth_message, hash_name)
    return f"{without_proof},p={_b64(proof)}", _b64(server_signature)


@functools.lru_cache(maxsize=4096)
def scram_keys(
    hash_name: str, password: bytes, salt: bytes, iterations: int
) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) of a password with this salt (RFC 5802)."""
    salted = hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    stored_key = hashlib.new(hash_name, client_key).digest()
    return client_key, stored_key, hmac.digest(salted, b"Server Key", hash_name)


def server_final_verified(server_final: bytes, signature: str) -> bool:
    """Whether a server-final message (v=SIGNATURE[,extensions], or e=ERROR) carries
    `signature`."""
    try:
        text = server_final.decode()
    except UnicodeDecodeError:
        return False
    attributes = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
    verifier = attributes.get("v")
    return verifier is not None and hmac.compare_digest(verifier, signature)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class _Rounds:
    """A login's requests, each timed and handed to `on_round` with its error code."""

    def __init__(self, ask: Ask, on_round: OnRound | None) -> None:
        self._ask = ask
        self._on_round = on_round

    async def ask(self, request: Request, version: int) -> Response:
        sent = time.perf_counter_ns()
        response = await self._ask(request, version)
        if self._on_round is not None:
            self._on_round(request.API_KEY, time.perf_counter_ns() - sent, response.error_code)
        return response  # type: ignore[no-any-return]

    async def token(self, token: bytes, version: int) -> SaslAuthenticateResponse:
        """One SASL token sent, the server's answered; LoginFailed on an error."""
        response = await self.ask(SaslAuthenticateRequest(auth_bytes=token), version)
        assert isinstance(response, SaslAuthenticateResponse)
        if response.error_code != ErrorCode.NONE:
            message = response.error_message or "no message"
            raise LoginFailed(
                f"{api_name(ApiKey.SASL_AUTHENTICATE)} {error_name(response.error_code)}: "
                f"{message}",
                ApiKey.SASL_AUTHENTICATE,
                response.error_code,
            )
        return response


def _version(served: Mapping[int, tuple[int, int]], api: int, newest: int) -> int:
    """The newest version of `api` both speak, or -1."""
    low, high = served.get(api, (0, -1))
    if high < 0 or low > newest:
        return -1
    return min(high, newest)
