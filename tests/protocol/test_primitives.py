"""Wire primitives: known encodings, round trips for any value, and refusals of bad input."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.primitives import Reader, Writer


def written(method: str, value: object) -> bytes:
    w = Writer()
    getattr(w, method)(value)
    return w.getvalue()


def read_all(method: str, data: bytes) -> object:
    r = Reader(data)
    value = getattr(r, method)()
    assert r.remaining() == 0, "a primitive must consume exactly its own bytes"
    return value


@pytest.mark.parametrize(
    ("method", "value", "encoded"),
    [
        ("int8", -1, b"\xff"),
        ("int16", -2, b"\xff\xfe"),
        ("uint16", 65535, b"\xff\xff"),
        ("int32", 1, b"\x00\x00\x00\x01"),
        ("int64", -(2**63), b"\x80" + b"\x00" * 7),
        ("float64", 1.0, b"\x3f\xf0" + b"\x00" * 6),
        ("boolean", True, b"\x01"),
        ("unsigned_varint", 0, b"\x00"),
        ("unsigned_varint", 127, b"\x7f"),
        ("unsigned_varint", 128, b"\x80\x01"),
        ("unsigned_varint", 300, b"\xac\x02"),
        ("unsigned_varint", 2**32 - 1, b"\xff\xff\xff\xff\x0f"),
        # Zig-zag: 0, -1, 1, -2 map to 0, 1, 2, 3 (ByteUtils.writeVarint).
        ("varint", 0, b"\x00"),
        ("varint", -1, b"\x01"),
        ("varint", 1, b"\x02"),
        ("varint", -2, b"\x03"),
        ("varint", 2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        ("varint", -(2**31), b"\xff\xff\xff\xff\x0f"),
        ("varlong", -(2**63), b"\xff" * 9 + b"\x01"),
        ("string", "", b"\x00\x00"),
        ("string", "ab", b"\x00\x02ab"),
        ("nullable_string", None, b"\xff\xff"),
        ("compact_string", "", b"\x01"),
        ("compact_string", "ab", b"\x03ab"),
        ("compact_nullable_string", None, b"\x00"),
        ("bytes_", b"\x01", b"\x00\x00\x00\x01\x01"),
        ("nullable_bytes", None, b"\xff\xff\xff\xff"),
        ("compact_bytes", b"", b"\x01"),
        ("compact_nullable_bytes", None, b"\x00"),
        ("uuid_", uuid.UUID(int=1), b"\x00" * 15 + b"\x01"),
    ],
)
def test_known_encodings(method: str, value: object, encoded: bytes) -> None:
    assert written(method, value) == encoded
    assert read_all(method, encoded) == value


INT_METHODS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "varint": (-(2**31), 2**31 - 1),
    "varlong": (-(2**63), 2**63 - 1),
    "unsigned_varint": (0, 2**32 - 1),
}


@pytest.mark.parametrize("method", sorted(INT_METHODS))
@given(data=st.data())
def test_integers_round_trip(method: str, data: st.DataObject) -> None:
    lo, hi = INT_METHODS[method]
    value = data.draw(st.integers(lo, hi))
    assert read_all(method, written(method, value)) == value


@pytest.mark.parametrize("method", sorted(INT_METHODS))
def test_integers_out_of_range_are_refused(method: str) -> None:
    lo, hi = INT_METHODS[method]
    for bad in (lo - 1, hi + 1):
        with pytest.raises(ProtocolError):
            written(method, bad)


@given(st.floats(allow_nan=False))
def test_float64_round_trip(value: float) -> None:
    assert read_all("float64", written("float64", value)) == value


@given(st.uuids())
def test_uuid_round_trip(value: uuid.UUID) -> None:
    assert read_all("uuid_", written("uuid_", value)) == value


@pytest.mark.parametrize(
    "method", ["string", "nullable_string", "compact_string", "compact_nullable_string"]
)
@given(value=st.text(max_size=200))
def test_strings_round_trip(method: str, value: str) -> None:
    assert read_all(method, written(method, value)) == value


@pytest.mark.parametrize(
    "method", ["bytes_", "nullable_bytes", "compact_bytes", "compact_nullable_bytes"]
)
@given(value=st.binary(max_size=300))
def test_bytes_round_trip(method: str, value: bytes) -> None:
    assert read_all(method, written(method, value)) == value


@given(st.integers(0, 2**32 - 2), st.integers(1, 50))
def test_array_length_round_trip(n: int, item_size: int) -> None:
    for compact in (False, True):
        w = Writer()
        if not compact and n > 2**31 - 1:
            with pytest.raises(ProtocolError, match="array length value"):
                w.array_length(n, compact)
            continue
        w.array_length(n, compact)
        data = w.getvalue() + b"\0" * min(n * item_size, 64)
        r = Reader(data)
        if n * item_size <= 64:
            assert r.array_length(compact, item_size) == n
        else:
            with pytest.raises(ProtocolError, match="claims"):
                r.array_length(compact, item_size)


@pytest.mark.parametrize(
    ("method", "data", "reason"),
    [
        ("int32", b"\x00\x00\x01", "needs 4 bytes but 3 are left"),
        ("int64", b"", "needs 8 bytes"),
        ("unsigned_varint", b"\x80\x80", "past the end"),
        ("unsigned_varint", b"\xff\xff\xff\xff\xff\x01", "longer than 5 bytes"),
        ("unsigned_varint", b"\xff\xff\xff\xff\x7f", "does not fit in 32 bits"),
        ("varlong", b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
        ("string", b"\xff\xff", "non-nullable string has length -1"),
        ("nullable_string", b"\xff\xfe", "invalid length -2"),
        ("string", b"\x00\x05abc", "needs 5 bytes but 3 are left"),
        ("string", b"\x00\x02\xc3\x28", "not valid UTF-8"),
        ("string", b"\x00\x03\xed\xa0\x80", "not valid UTF-8"),  # an encoded surrogate
        ("compact_string", b"\x00", "is null"),
        ("compact_string", b"\x82\x80\x02", "over 32767"),
        ("compact_nullable_string", b"\x05ab", "needs 4 bytes but 2 are left"),
        ("bytes_", b"\xff\xff\xff\xfe", "non-nullable bytes has length -2"),
        ("nullable_bytes", b"\x80\x00\x00\x00", "invalid length"),
        ("bytes_", b"\x7f\xff\xff\xff", "needs 2147483647 bytes but 0 are left"),
        ("compact_bytes", b"\xff\xff\xff\xff\x0f", "needs 4294967294 bytes"),
        ("uuid_", b"\x00" * 15, "needs 16 bytes"),
    ],
)
def test_malformed_input_is_a_protocol_error(method: str, data: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        getattr(Reader(data), method)()


def test_absurd_array_count_is_refused_before_allocation() -> None:
    # Two billion elements declared in a 4-byte frame: refused by arithmetic, not by malloc.
    r = Reader(b"\x7f\xff\xff\xff")
    with pytest.raises(ProtocolError, match="claims 2147483647 elements"):
        r.array_length(False, 1)
    r = Reader(b"\xff\xff\xff\xfe")
    with pytest.raises(ProtocolError, match="invalid length -2"):
        r.array_length(False, 1)


def test_writer_refuses_strings_longer_than_int16() -> None:
    with pytest.raises(ProtocolError, match="over 32767"):
        written("string", "x" * 32768)
    with pytest.raises(ProtocolError, match="over 32767"):
        written("compact_string", "é" * 20000)
