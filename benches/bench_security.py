"""A SASL login's cost to the server, in process: Authentication's whole exchange, no sockets.

A server pays for every client's login before its first heartbeat, and a flood of wrong
passwords costs it one failed exchange each; so CI tracks what one exchange of
fastcoord.security.sasl.Authentication costs (SaslHandshake admitted and answered, then each
SaslAuthenticate token admitted and answered: the server's side of PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512), for a login that succeeds, a wrong password and an unknown user. The client's
side runs in the same call, kept small: its salted password and keys are derived once at
import (as a client that caches its PBKDF2 may), so a SCRAM login's client work is two HMACs
and some string handling; `ScramClientSide` times that part alone, so the server's share is
the difference. `ScramServerFirst` times the exchange's first half for a known and an unknown
user: the answer that is not delayed, so the one whose time could tell them apart. Logins over
loopback, TLS and connections included, are measured by `python -m benches.security_run`.

    .venv/bin/asv run --python=same --bench bench_security

Everything is built at import (the users' credentials cost a PBKDF2 of 4096 rounds per SCRAM
mechanism, a few milliseconds); no class has a `setup`, so asv batches calls (asv#966, see
docs/benchmarks.md).
"""

from __future__ import annotations

import base64
import hmac

from fastcoord.client.login import scram_keys
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.messages import SaslHandshakeRequest
from fastcoord.security.credentials import MIN_ITERATIONS, convert
from fastcoord.security.entries import MECHANISMS, User
from fastcoord.security.sasl import Authentication, Step, Users, Verdict

USER, PASSWORD, WRONG_PASSWORD, UNKNOWN_USER = "alice", "secret", "not-the-secret", "mallory"
LISTENER = "SASL_PLAINTEXT"
MAX_RECEIVE = 524288  # sasl.server.max.receive.size's default
TIMEOUT_MS = 10_000  # sasl.authentication.timeout.ms's default
CLIENT_NONCE = "fyko+d2lbbFgONRv9qkxdawL"  # RFC 5802's example nonce
OUTCOMES = ("ok", "wrong password", "unknown user")
_HANDSHAKE, _AUTHENTICATE = int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE)
_HANDSHAKE_VERSION, _AUTHENTICATE_VERSION = 1, 2

USERS = Users([convert(User(name=USER, password=PASSWORD))])
HANDSHAKES = {m: SaslHandshakeRequest(mechanism=m) for m in MECHANISMS}


class ScramClient:
    """RFC 5802's client side for one user, its keys derived once: client-first is fixed,
    client-final is built from the server-first it answers."""

    def __init__(self, mechanism: str, user: str, password: str, salt: bytes) -> None:
        self.digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
        self.client_key, self.stored_key, self.server_key = scram_keys(
            self.digest, password.encode(), salt, MIN_ITERATIONS
        )
        self.bare = f"n={user},r={CLIENT_NONCE}"
        self.first = ("n,," + self.bare).encode()

    def final(self, server_first: bytes) -> tuple[bytes, bytes]:
        """(client-final, the server-final a server that knows the password answers)."""
        text = server_first.decode()
        nonce = text.split(",", 1)[0]  # r=<client nonce><server nonce>
        without_proof = f"c=biws,{nonce}"
        message = f"{self.bare},{text},{without_proof}".encode()
        signature = hmac.digest(self.stored_key, message, self.digest)
        proof = bytes(a ^ b for a, b in zip(self.client_key, signature, strict=True))
        expected = hmac.digest(self.server_key, message, self.digest)
        return (
            f"{without_proof},p={base64.b64encode(proof).decode()}".encode(),
            b"v=" + base64.b64encode(expected),
        )


def _salt(mechanism: str) -> bytes:
    keys, known = USERS.scram(USER, mechanism)
    assert known
    return keys.salt


# The client of each mechanism and outcome. An unknown user's client derives its keys from a
# salt of its own: the server fails it at the proof whatever the client sends there.
CLIENTS: dict[tuple[str, str], ScramClient] = {
    (m, outcome): ScramClient(
        m,
        UNKNOWN_USER if outcome == "unknown user" else USER,
        WRONG_PASSWORD if outcome == "wrong password" else PASSWORD,
        _salt(m) if outcome != "unknown user" else b"\0" * 32,
    )
    for m in MECHANISMS
    if m != "PLAIN"
    for outcome in OUTCOMES
}
PLAIN_TOKENS = {
    "ok": f"\0{USER}\0{PASSWORD}".encode(),
    "wrong password": f"\0{USER}\0{WRONG_PASSWORD}".encode(),
    "unknown user": f"\0{UNKNOWN_USER}\0{PASSWORD}".encode(),
}


def exchange(mechanism: str, outcome: str) -> Step:
    """One connection's login, as the server sees it: the last token's answer."""
    auth = Authentication(USERS, MECHANISMS, 0, MAX_RECEIVE, TIMEOUT_MS, LISTENER, 0)
    if auth.admit(_HANDSHAKE, 0, api_version=_HANDSHAKE_VERSION) is not Verdict.SASL:
        raise AssertionError("SaslHandshake not admitted")
    _, close = auth.handshake(HANDSHAKES[mechanism], _HANDSHAKE_VERSION, 0)
    if close or auth.admit(_AUTHENTICATE, 0) is not Verdict.SASL:
        raise AssertionError(f"{mechanism} refused")
    if mechanism == "PLAIN":
        step = auth.authenticate(PLAIN_TOKENS[outcome], 0, _AUTHENTICATE_VERSION)
    else:
        client = CLIENTS[(mechanism, outcome)]
        first = auth.authenticate(client.first, 0, _AUTHENTICATE_VERSION)
        final, server_final = client.final(first.auth_bytes)
        if auth.admit(_AUTHENTICATE, 0) is not Verdict.SASL:
            raise AssertionError("client-final not admitted")
        step = auth.authenticate(final, 0, _AUTHENTICATE_VERSION)
        if step.outcome == "done" and step.auth_bytes != server_final:
            raise AssertionError("the server's signature does not match")
    if step.outcome != ("done" if outcome == "ok" else "failed"):
        raise AssertionError(f"{mechanism} {outcome}: {step.outcome}")
    return step


# One exchange each at import: a broken login fails here, not in a timing.
for _m in MECHANISMS:
    for _outcome in OUTCOMES:
        exchange(_m, _outcome)

SERVER_FIRSTS = {
    m: Authentication(USERS, MECHANISMS, 0, MAX_RECEIVE, TIMEOUT_MS, LISTENER, 0)
    for m in MECHANISMS
    if m != "PLAIN"
}
for _m, _auth in SERVER_FIRSTS.items():
    _auth.admit(_HANDSHAKE, 0, api_version=_HANDSHAKE_VERSION)
    _auth.handshake(HANDSHAKES[_m], _HANDSHAKE_VERSION, 0)
CANNED_SERVER_FIRST = {
    m: auth.authenticate(CLIENTS[(m, "ok")].first, 0, _AUTHENTICATE_VERSION).auth_bytes
    for m, auth in SERVER_FIRSTS.items()
}


class SaslExchange:
    """A whole login on a new connection's Authentication: PLAIN is one token, SCRAM two."""

    params = (list(MECHANISMS), list(OUTCOMES))
    param_names = ["mechanism", "outcome"]

    def time_exchange(self, mechanism: str, outcome: str) -> None:
        exchange(mechanism, outcome)


def server_first(mechanism: str, outcome: str) -> bytes:
    """A new connection's SaslHandshake and client-first, as the server answers them."""
    auth = Authentication(USERS, MECHANISMS, 0, MAX_RECEIVE, TIMEOUT_MS, LISTENER, 0)
    auth.admit(_HANDSHAKE, 0, api_version=_HANDSHAKE_VERSION)
    auth.handshake(HANDSHAKES[mechanism], _HANDSHAKE_VERSION, 0)
    auth.admit(_AUTHENTICATE, 0)
    return auth.authenticate(
        CLIENTS[(mechanism, outcome)].first, 0, _AUTHENTICATE_VERSION
    ).auth_bytes


class ScramServerFirst:
    """The first half of a SCRAM exchange alone, up to the server-first, which is answered at
    once (only a failure waits connection.failed.authentication.delay.ms): an unknown user's
    made-up credential must cost what a real one's lookup does, or its time names the users
    who exist."""

    params = ([m for m in MECHANISMS if m != "PLAIN"], ["known user", "unknown user"])
    param_names = ["mechanism", "user"]

    def time_server_first(self, mechanism: str, user: str) -> None:
        server_first(mechanism, "ok" if user == "known user" else "unknown user")


class ScramClientSide:
    """The client's share of time_exchange: client-final from a server-first."""

    params = ([m for m in MECHANISMS if m != "PLAIN"],)
    param_names = ["mechanism"]

    def time_client_final(self, mechanism: str) -> None:
        CLIENTS[(mechanism, "ok")].final(CANNED_SERVER_FIRST[mechanism])
