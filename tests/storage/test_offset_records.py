"""An OffsetCommit's records framed by the compiled module, against the twin, and read back.

The log must hold exactly what writing each record singly would have written: the same
bytes (so recovery, compaction and older readers see no difference), the same records.
"""

from __future__ import annotations

from array import array
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord._ext import offset_records as compiled  # type: ignore[attr-defined]
from fastcoord.core.records import OffsetCommits, Record
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.storage import offset_records as twin
from fastcoord.storage import segment

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
# Every MessagePack integer width, each side of its boundaries.
edges = [0, 1, 31, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1]
edge_ints = st.sampled_from([*edges, *(-e for e in edges), -32, -33, -128, -129, -(2**63)])
texts = st.one_of(st.sampled_from(["", "t", "orders", "grüße", "x" * 31, "y" * 32]), st.text())
long_texts = st.sampled_from(["a" * 255, "b" * 256, "c" * 65535, "d" * 65536])


@st.composite
def batches(draw: st.DrawFn) -> OffsetCommitBatch:
    topics = draw(st.lists(st.one_of(texts, long_texts), max_size=5))
    ends = array("i")
    n = 0
    for _ in topics:
        n += draw(st.integers(0, 6))
        ends.append(n)
    numbers = st.one_of(edge_ints, int64s)
    metadata = None
    if draw(st.booleans()):
        metadata = draw(st.lists(st.one_of(texts, long_texts), min_size=n, max_size=n))
    return OffsetCommitBatch(
        draw(texts),
        -1,
        "",
        None,
        topics,
        ends,
        array(
            "i",
            draw(
                st.lists(
                    st.one_of(edge_ints.filter(lambda v: -(2**31) <= v < 2**31), int32s),
                    min_size=n,
                    max_size=n,
                )
            ),
        ),
        array("q", draw(st.lists(numbers, min_size=n, max_size=n))),
        array("i", draw(st.lists(int32s, min_size=n, max_size=n))),
        metadata,
    )


@st.composite
def commits(draw: st.DrawFn) -> OffsetCommits:
    return OffsetCommits(
        draw(st.one_of(texts, long_texts)),
        draw(batches()),
        draw(st.one_of(edge_ints, st.integers(0, 2**45))),
    )


@settings(max_examples=400, deadline=None)
@given(commits())
def test_frames_are_those_of_each_record_written_singly(c: OffsetCommits) -> None:
    data = compiled.frame_offset_commits(c)
    assert data == twin.frame_offset_commits(c)
    assert data == b"".join(segment.encode(r) for r in c.records())
    scan = segment.scan(data)
    assert scan.damage is None and scan.records == c.records()


def test_an_empty_batch_frames_nothing() -> None:
    batch = OffsetCommitBatch(
        "g", -1, "", None, ["t"], array("i", [0]), array("i"), array("q"), array("i"), None
    )
    assert compiled.frame_offset_commits(OffsetCommits("g", batch, 5)) == b""


def framed(module: Any, c: OffsetCommits) -> tuple[str, Any]:
    try:
        return ("ok", module.frame_offset_commits(c))
    except (ValueError, TypeError, OverflowError, IndexError) as exc:
        return ("error", type(exc).__name__)


def test_what_it_does_not_expect_is_left_to_the_twin() -> None:
    """An inconsistent batch or a value out of range: the twin's bytes or its error."""
    good = OffsetCommitBatch(
        "g",
        -1,
        "",
        None,
        ["t"],
        array("i", [1]),
        array("i", [0]),
        array("q", [5]),
        array("i", [-1]),
        None,
    )
    odd: list[Any] = [
        OffsetCommits("g", good, 2**64),  # a timestamp past int64: msgspec encodes it
        OffsetCommits("g", good, True),  # not an int
    ]
    for c in odd:
        assert framed(compiled, c) == framed(twin, c)
    assert isinstance(OffsetCommits("g", good, 1).records()[0], Record)
