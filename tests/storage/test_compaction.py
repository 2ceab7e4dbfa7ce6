"""Which records compaction keeps: the compiled walk against the twin (msgspec's), for real
records and for any MessagePack at all."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord._ext import compaction as compiled  # type: ignore[attr-defined]
from fastcoord.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
)
from fastcoord.storage import compaction as twin
from fastcoord.storage import segment
from fastcoord.storage.native import crc32c

names = st.sampled_from(["g", "h", "orders", "t"])
records = st.one_of(
    st.builds(
        Record,
        st.builds(OffsetCommitKey, names, names, st.integers(0, 3)),
        st.one_of(
            st.none(),
            st.builds(
                OffsetCommitValue,
                st.integers(-1, 10**12),
                st.integers(-1, 5),
                st.text(max_size=5),
                st.integers(0, 2**42),
            ),
        ),
    ),
    st.builds(
        Record,
        st.builds(GroupMetadataKey, names),
        st.one_of(
            st.none(),
            st.builds(
                GroupMetadataValue,
                st.just("consumer"),
                st.integers(0, 9),
                st.one_of(st.none(), st.just("range")),
                st.one_of(st.none(), names),
                st.integers(0, 2**42),
                st.lists(
                    st.builds(
                        MemberMetadataValue,
                        names,
                        st.one_of(st.none(), names),
                        names,
                        st.just("/127.0.0.1"),
                        st.integers(0, 300000),
                        st.integers(0, 300000),
                        st.binary(max_size=20),
                        st.binary(max_size=20),
                    ),
                    max_size=3,
                ).map(tuple),
            ),
        ),
    ),
)


def run(
    module: Any, data: bytes, spans: list[tuple[int, int]], seen: set[bytes], drop: bool
) -> Any:
    try:
        return module.latest_records(data, spans, seen, drop), seen
    except ValueError:
        return "ValueError", seen


@settings(max_examples=300, deadline=None)
@given(st.lists(records, max_size=40), st.booleans(), st.lists(st.binary(max_size=12), max_size=3))
def test_real_records_are_kept_alike(rs: list[Record], drop: bool, already: list[bytes]) -> None:
    data = segment.encode_all(rs)
    spans = crc32c.walk_frames(data)[0]
    got = run(compiled, data, spans, set(already), drop)
    assert got == run(twin, data, spans, set(already), drop)
    (kept, dropped), _ = got
    # The kept records are the latest of their keys, as decoding every key would say.
    latest: dict[Any, int] = {}
    for i, r in enumerate(rs):
        latest[r.key] = i
    expected = sorted(
        (i for i in latest.values() if not (drop and rs[i].value is None)), reverse=True
    )
    if not already:
        assert kept == expected and dropped == sum(
            1 for i in latest.values() if drop and rs[i].value is None
        )


msgpack_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=False),
        st.text(max_size=40),
        st.binary(max_size=300),
        st.builds(msgspec.msgpack.Ext, st.integers(-128, 127), st.binary(max_size=20)),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)


@st.composite
def payloads(draw: st.DrawFn) -> bytes:
    """MessagePack arrays of any length (a record has two items; more are ignored), any
    value, and bytes cut, added or flipped."""
    data = bytearray(msgspec.msgpack.encode(draw(st.lists(msgpack_values, max_size=4))))
    op = draw(st.sampled_from(["keep", "keep", "cut", "add", "flip"]))
    i = draw(st.integers(0, len(data)))
    if op == "cut":
        del data[i:]
    elif op == "add":
        data[i:i] = draw(st.binary(min_size=1, max_size=3))
    elif op == "flip" and i < len(data):
        data[i] ^= 1 << draw(st.integers(0, 7))
    return bytes(data)


@settings(max_examples=1500, deadline=None)
@given(st.lists(payloads(), min_size=1, max_size=4), st.booleans())
def test_any_payload_is_judged_alike(items: list[bytes], drop: bool) -> None:
    spans = []
    pos = 0
    for item in items:
        spans.append((pos, pos + len(item)))
        pos += len(item)
    data = b"".join(items)
    assert run(compiled, data, spans, set(), drop) == run(twin, data, spans, set(), drop)


@pytest.mark.parametrize("depth", [10, 63, 64, 65, 200, 5000])
def test_deep_records_are_left_to_the_twin(depth: int) -> None:
    payload = b"\x92" + b"\x91" * depth + b"\xc0" + b"\xc0"
    spans = [(0, len(payload))]
    assert run(compiled, payload, spans, set(), True) == run(twin, payload, spans, set(), True)
