"""credentials.convert: a password becomes credentials at load and is not kept; credentials
given are checked; iteration counts stay within Kafka's bounds."""

from __future__ import annotations

import base64

import msgspec
import pytest
from scramp import ScramMechanism

from fastcoord.security.credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    convert,
    credential,
    plain_matches,
)
from fastcoord.security.entries import PlainCredential, ScramCredential, User

PASSWORD = "correct horse battery staple"


def test_a_password_becomes_credentials_and_is_not_kept() -> None:
    user = convert(User(name="alice", password=PASSWORD))
    assert user.password is None
    assert PASSWORD.encode() not in msgspec.json.encode(user)
    assert PASSWORD not in repr(user)
    assert isinstance(user.plain, PlainCredential)
    assert isinstance(user.scram_sha_256, ScramCredential)
    assert isinstance(user.scram_sha_512, ScramCredential)


def test_the_plain_credential_checks_the_password() -> None:
    user = convert(User(name="alice", password=PASSWORD, mechanisms=["PLAIN"]))
    assert user.plain is not None
    assert plain_matches(user.plain, PASSWORD)
    assert not plain_matches(user.plain, PASSWORD + " ")
    assert not plain_matches(user.plain, "")


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_scram_credential_is_kafkas(mechanism: str) -> None:
    # StoredKey and ServerKey of RFC 5802 for the password, the salt and the count.
    user = convert(User(name="alice", password=PASSWORD, mechanisms=[mechanism]))
    found = credential(user, mechanism)
    assert isinstance(found, ScramCredential)
    assert found.iterations == MIN_ITERATIONS  # Kafka's default
    salt = base64.b64decode(found.salt)
    _, stored_key, server_key, _ = ScramMechanism(mechanism).make_auth_info(
        PASSWORD, iteration_count=found.iterations, salt=salt
    )
    assert base64.b64decode(found.stored_key) == stored_key
    assert base64.b64decode(found.server_key) == server_key


def test_each_conversion_draws_a_new_salt() -> None:
    one = convert(User(name="alice", password=PASSWORD))
    two = convert(User(name="alice", password=PASSWORD))
    assert one.plain is not None and two.plain is not None
    assert one.scram_sha_256 is not None and two.scram_sha_256 is not None
    assert one.plain.salt != two.plain.salt
    assert one.scram_sha_256.salt != two.scram_sha_256.salt


def test_only_the_users_mechanisms_get_credentials() -> None:
    user = convert(User(name="alice", password=PASSWORD, mechanisms=["SCRAM-SHA-512"]))
    assert (user.plain, user.scram_sha_256) == (None, None)
    assert credential(user, "PLAIN") is None
    assert credential(user, "SCRAM-SHA-512") == user.scram_sha_512


@pytest.mark.parametrize("iterations", [MIN_ITERATIONS, MAX_ITERATIONS])
def test_iterations_within_kafkas_bounds_are_used(iterations: int) -> None:
    user = convert(
        User(name="alice", password=PASSWORD, iterations=iterations, mechanisms=["SCRAM-SHA-256"])
    )
    assert user.scram_sha_256 is not None
    assert user.scram_sha_256.iterations == iterations


@pytest.mark.parametrize("iterations", [0, 1, MIN_ITERATIONS - 1, MAX_ITERATIONS + 1])
def test_iterations_outside_kafkas_bounds_are_refused(iterations: int) -> None:
    with pytest.raises(ValueError, match=f"user alice: iterations {iterations} not within"):
        convert(User(name="alice", password=PASSWORD, iterations=iterations))


@pytest.mark.parametrize(
    ("user", "message"),
    [
        (User(name="", password=PASSWORD), "a user needs a name"),
        (User(name="alice", password=PASSWORD, mechanisms=[]), "mechanisms"),
        (User(name="alice", password=PASSWORD, mechanisms=["GSSAPI"]), "GSSAPI"),
        (User(name="alice"), "no password and no PLAIN credential"),
    ],
)
def test_users_that_cannot_log_in_are_refused(user: User, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        convert(user)


def test_given_credentials_are_kept_and_need_no_password() -> None:
    made = convert(User(name="alice", password=PASSWORD))
    given = User(
        name="alice",
        plain=made.plain,
        scram_sha_256=made.scram_sha_256,
        scram_sha_512=made.scram_sha_512,
    )
    assert convert(given) == given


def test_a_given_credential_is_kept_beside_a_converted_password() -> None:
    made = convert(User(name="alice", password="other", mechanisms=["SCRAM-SHA-256"]))
    user = convert(User(name="alice", password=PASSWORD, scram_sha_256=made.scram_sha_256))
    assert user.scram_sha_256 == made.scram_sha_256
    assert user.plain is not None and plain_matches(user.plain, PASSWORD)
    assert user.password is None


_GOOD = convert(User(name="x", password=PASSWORD))
assert _GOOD.scram_sha_256 is not None and _GOOD.plain is not None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("scram_sha_256", msgspec.structs.replace(_GOOD.scram_sha_256, salt="not base64!")),
        ("scram_sha_256", msgspec.structs.replace(_GOOD.scram_sha_256, stored_key="***")),
        ("scram_sha_256", msgspec.structs.replace(_GOOD.scram_sha_256, server_key="a")),
        ("scram_sha_256", msgspec.structs.replace(_GOOD.scram_sha_256, iterations=1024)),
        ("scram_sha_256", msgspec.structs.replace(_GOOD.scram_sha_256, iterations=20000)),
        ("plain", PlainCredential(salt="%%", digest=_GOOD.plain.digest)),
        ("plain", PlainCredential(salt=_GOOD.plain.salt, digest="not base64!")),
        ("plain", _GOOD.scram_sha_256),  # a SCRAM credential where PLAIN's belongs
    ],
)
def test_given_credentials_are_checked(field: str, value: object) -> None:
    mechanism = {"plain": "PLAIN", "scram_sha_256": "SCRAM-SHA-256"}[field]
    user = User(name="alice", mechanisms=[mechanism], **{field: value})
    with pytest.raises(ValueError, match=f"user alice: its {mechanism} credential is not valid"):
        convert(user)
