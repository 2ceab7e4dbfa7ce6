"""Fuzz-style: random and mutated frames never raise anything but ProtocolError.

Mutations start from valid frames of every served request and response version (edge
instances, so arrays and strings are present to corrupt) and flip bits, truncate, insert
and delete bytes, or overwrite a 4-byte window with a huge or negative length.
"""

from __future__ import annotations

import contextlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord.protocol import frames, framing
from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.schema import Request
from tests.protocol.strategies import ALL_MESSAGE_VERSIONS, edge_instance

LENGTH_POISON = [b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe", b"\x80\x00\x00\x00", b"\xff\xff\xff\xff"]


def valid_request_frames() -> list[bytes]:
    out = []
    for cls, version in ALL_MESSAGE_VERSIONS:
        if issubclass(cls, Request):
            for mode in ("min", "null", "max"):
                header = RequestHeader(cls.API_KEY, version, 1, "fuzz")
                out.append(framing.encode_request(header, edge_instance(cls, version, mode))[4:])
    return out


def valid_response_frames() -> list[tuple[int, int, bytes]]:
    out = []
    for cls, version in ALL_MESSAGE_VERSIONS:
        if not issubclass(cls, Request):
            for mode in ("min", "max"):
                frame = framing.encode_response(1, version, edge_instance(cls, version, mode))
                out.append((cls.API_KEY, version, frame[4:]))
    return out


REQUESTS = valid_request_frames()
RESPONSES = valid_response_frames()


def mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        op = rng.choice(["flip", "truncate", "insert", "delete", "poison"])
        i = rng.randrange(len(data)) if data else 0
        if op == "flip" and data:
            data[i] ^= 1 << rng.randrange(8)
        elif op == "truncate":
            del data[i:]
        elif op == "insert":
            data[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == "delete" and data:
            del data[i : i + rng.randint(1, 4)]
        elif op == "poison":
            data[i : i + 4] = rng.choice(LENGTH_POISON)
    return bytes(data)


def decode_request_or_refuse(frame: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        frames.decode_request(frame)


@settings(max_examples=2000)
@given(st.binary(max_size=64))
def test_random_bytes_are_refused_or_decoded(frame: bytes) -> None:
    decode_request_or_refuse(frame)


@pytest.mark.parametrize("seed", range(4))
def test_mutated_request_frames(seed: int) -> None:
    rng = random.Random(seed)
    for frame in REQUESTS:
        for _ in range(25):
            decode_request_or_refuse(mutate(rng, frame))


@pytest.mark.parametrize("seed", range(2))
def test_mutated_response_frames(seed: int) -> None:
    rng = random.Random(1000 + seed)
    for api_key, version, frame in RESPONSES:
        for _ in range(15):
            with contextlib.suppress(ProtocolError):
                framing.decode_response(api_key, version, mutate(rng, frame))


def test_valid_frames_decode() -> None:
    # The corpus itself is valid: a fuzz test over broken seeds would prove little.
    for frame in REQUESTS:
        frames.decode_request(frame)
    for api_key, version, frame in RESPONSES:
        framing.decode_response(api_key, version, frame)
