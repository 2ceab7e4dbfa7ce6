"""What the server keeps of a user: credentials, never the password.

SCRAM keeps Kafka's stored credential (salt, iterations, StoredKey, ServerKey: RFC 5802),
from which a login is checked with a few HMACs and no PBKDF2. PLAIN keeps a salted SHA-256
of the password, compared in constant time. A password written in the configuration is
converted here, once, at load (PBKDF2 with the user's iterations, 4096 by default as in
Kafka; at least 4096 and at most 16384, Kafka's bounds).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

import msgspec
from scramp import ScramMechanism

from fastcoord.security.entries import (
    MECHANISMS,
    SCRAM_MECHANISMS,
    PlainCredential,
    ScramCredential,
    User,
)

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
MIN_SALT_BYTES = 12  # scramp's least; Kafka's own credentials have 32 (kafka-configs)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def plain_digest(salt: bytes, password: str) -> bytes:
    return hashlib.sha256(salt + password.encode("utf-8")).digest()


def plain_matches(credential: PlainCredential, password: str) -> bool:
    salt = base64.b64decode(credential.salt)
    return hmac.compare_digest(plain_digest(salt, password), base64.b64decode(credential.digest))


def scram_credential(mechanism: str, password: str, iterations: int) -> ScramCredential:
    salt, stored_key, server_key, i = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations
    )
    return ScramCredential(_b64(salt), i, _b64(stored_key), _b64(server_key))


def convert(user: User) -> User:
    """The user as the server keeps it: a password becomes credentials for each of the
    user's mechanisms; credentials given are checked. ValueError names what is wrong."""
    name = user.name
    if not name:
        raise ValueError("user: a user needs a name")
    unknown = [m for m in user.mechanisms if m not in MECHANISMS]
    if unknown or not user.mechanisms:
        raise ValueError(
            f"user {name}: mechanisms {unknown or '[]'} not among {', '.join(MECHANISMS)}"
        )
    if not MIN_ITERATIONS <= user.iterations <= MAX_ITERATIONS:
        raise ValueError(
            f"user {name}: iterations {user.iterations} not within "
            f"{MIN_ITERATIONS}..{MAX_ITERATIONS}"
        )
    changes: dict[str, object] = {"password": None}
    password = user.password
    for mechanism in user.mechanisms:
        field = _field(mechanism)
        if getattr(user, field) is not None:
            _check(name, mechanism, getattr(user, field))
            continue
        if password is None:
            raise ValueError(f"user {name}: no password and no {mechanism} credential")
        if mechanism == "PLAIN":
            salt = secrets.token_bytes(16)
            changes[field] = PlainCredential(_b64(salt), _b64(plain_digest(salt, password)))
        else:
            changes[field] = scram_credential(mechanism, password, user.iterations)
    return msgspec.structs.replace(user, **changes)


def _field(mechanism: str) -> str:
    return mechanism.lower().replace("-", "_")


def credential(user: User, mechanism: str) -> PlainCredential | ScramCredential | None:
    """The user's credential for `mechanism`, or None when it may not log in with it."""
    if mechanism not in user.mechanisms:
        return None
    found: PlainCredential | ScramCredential | None = getattr(user, _field(mechanism))
    return found


def _check(name: str, mechanism: str, given: object) -> None:
    try:
        if isinstance(given, ScramCredential):
            if mechanism not in SCRAM_MECHANISMS:
                raise ValueError
            if not MIN_ITERATIONS <= given.iterations <= MAX_ITERATIONS:
                raise ValueError
            for part in (given.salt, given.stored_key, given.server_key):
                base64.b64decode(part, validate=True)
            if len(base64.b64decode(given.salt)) < MIN_SALT_BYTES:
                raise ValueError
        elif isinstance(given, PlainCredential):
            base64.b64decode(given.salt, validate=True)
            base64.b64decode(given.digest, validate=True)
    except ValueError:
        raise ValueError(f"user {name}: its {mechanism} credential is not valid") from None
