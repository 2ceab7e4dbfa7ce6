"""Hypothesis strategies and edge-value instances derived from the message schemas.

Values are generated only for the fields that exist in the version at hand (other fields
keep Kafka's default, which is what decoding that version gives back), and null only
where the version allows it. Deriving them from the schema means a new message is covered
by every round-trip, cross-check and fuzz test without writing anything for it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from fastcoord.protocol.codec import is_flexible
from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.schema import ArrayOf, Kind, Message, Struct, TypeRef, fields_of
from fastcoord.protocol.versions import SERVED

_INT_RANGES = {
    Kind.INT8: (-(2**7), 2**7 - 1),
    Kind.INT16: (-(2**15), 2**15 - 1),
    Kind.UINT16: (0, 2**16 - 1),
    Kind.INT32: (-(2**31), 2**31 - 1),
    Kind.INT64: (-(2**63), 2**63 - 1),
}

# Every (message class, version) that the server decodes (requests) or encodes (responses).
ALL_MESSAGE_VERSIONS: list[tuple[type[Message], int]] = [
    (cls, v)
    for api in sorted(SERVED.values(), key=lambda a: a.key)
    for cls in (api.request, api.response)
    for v in range(api.min_version, api.max_version + 1)
]


def message_id(param: Any) -> str:
    if isinstance(param, tuple):
        cls, v = param
        return f"{cls.__name__}-v{v}"
    return str(param)


def _text() -> st.SearchStrategy[str]:
    # Mostly short ASCII ids, sometimes any Unicode scalar values (UTF-8 of 1-4 bytes).
    return st.one_of(st.text(max_size=12), st.text("abc-_.0123456789", max_size=8))


def _type_strategy(ref: TypeRef, version: int) -> st.SearchStrategy[Any]:
    if isinstance(ref, Kind):
        if ref in _INT_RANGES:
            lo, hi = _INT_RANGES[ref]
            return st.integers(lo, hi)
        if ref is Kind.FLOAT64:
            return st.floats(allow_nan=False)
        if ref is Kind.BOOL:
            return st.booleans()
        if ref is Kind.UUID:
            return st.one_of(st.just(uuid.UUID(int=0)), st.uuids())
        if ref is Kind.STRING:
            return _text()
        return st.binary(max_size=16)
    if isinstance(ref, ArrayOf):
        return st.lists(_type_strategy(ref.item, version), max_size=3)
    return struct_strategy(ref, version)


def struct_strategy(cls: type[Struct], version: int) -> st.SearchStrategy[Any]:
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for spec in fields_of(cls):
        if not spec.exists_in(version):
            continue
        value = _type_strategy(spec.type, version)
        if spec.nullable_in(version):
            value = st.one_of(st.none(), value)
        kwargs[spec.name] = value
    return st.builds(cls, **kwargs)


def _edge_value(ref: TypeRef, version: int, mode: str) -> Any:
    """mode: "min" (smallest numbers, empty strings/arrays), "max" (largest numbers, long
    strings with multi-byte characters, arrays of two)."""
    if isinstance(ref, Kind):
        if ref in _INT_RANGES:
            lo, hi = _INT_RANGES[ref]
            return lo if mode == "min" else hi
        if ref is Kind.FLOAT64:
            return -1.5e308 if mode == "min" else float("inf")
        if ref is Kind.BOOL:
            return mode == "max"
        if ref is Kind.UUID:
            return uuid.UUID(int=0) if mode == "min" else uuid.UUID(int=2**128 - 1)
        if ref is Kind.STRING:
            return "" if mode == "min" else "grüße-\U0001f600-" + "x" * 300
        return b"" if mode == "min" else bytes(range(256)) * 3
    if isinstance(ref, ArrayOf):
        if mode == "min":
            return []
        return [_edge_value(ref.item, version, mode) for _ in range(2)]
    return edge_instance(ref, version, mode)


def edge_instance(cls: type[Struct], version: int, mode: str) -> Any:
    """An instance with edge values in every field of the version.

    mode "null" is "min" with None wherever the version allows null.
    """
    kwargs = {}
    for spec in fields_of(cls):
        if not spec.exists_in(version):
            continue
        if mode == "null" and spec.nullable_in(version):
            kwargs[spec.name] = None
        else:
            kwargs[spec.name] = _edge_value(spec.type, version, "max" if mode == "max" else "min")
    return cls(**kwargs)


def flexible(cls: type[Message], version: int) -> bool:
    return is_flexible(cls, version)


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """The result, or the error's type and text, so that two codecs can be compared."""
    try:
        return ("ok", fn(*args))
    except ProtocolError as exc:
        return (type(exc).__name__, str(exc))


@st.composite
def mutated(draw: st.DrawFn, frames: st.SearchStrategy[bytes]) -> bytes:
    """A frame of `frames` with one to three bytes flipped, cut, inserted or deleted."""
    frame = bytearray(draw(frames))
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        i = draw(st.integers(0, max(len(frame) - 1, 0)))
        if op == "flip" and frame:
            frame[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del frame[i:]
        elif op == "insert":
            frame[i:i] = draw(st.binary(min_size=1, max_size=4))
        elif op == "delete" and frame:
            del frame[i]
    return bytes(frame)
