"""The compiled offset table against its twin (a dictionary), for any sequence of writes,
replays of commit batches, deletions and reads."""

from __future__ import annotations

from array import array
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord._ext import offset_table as compiled  # type: ignore[attr-defined]
from fastcoord.core import offset_table as twin
from fastcoord.core.records import OffsetCommitValue
from fastcoord.protocol.commit_batch import OffsetCommitBatch

topics = st.sampled_from(["a", "b", "orders", "grüße"])
# Small partitions (the direct index), large ones and negative ones (the dictionary), and
# the edge between.
partitions = st.one_of(
    st.integers(0, 5), st.sampled_from([1023, 1024, 1025, 2**31 - 1, -1, -(2**31)])
)
values = st.builds(
    OffsetCommitValue,
    st.integers(-1, 2**62),
    st.integers(-1, 9),
    st.sampled_from(["", "m", "ü"]),
    st.integers(0, 2**42),
)


@st.composite
def batches(draw: st.DrawFn) -> OffsetCommitBatch:
    entries = draw(st.lists(st.tuples(topics, st.lists(partitions, max_size=5)), max_size=4))
    names, ends, parts = [], array("i"), array("i")
    for name, ps in entries:
        names.append(name)
        parts.extend(ps)
        ends.append(len(parts))
    n = len(parts)
    metadata = draw(
        st.one_of(st.none(), st.lists(st.sampled_from(["", "x", "meta"]), min_size=n, max_size=n))
    )
    return OffsetCommitBatch(
        "g",
        -1,
        "",
        None,
        names,
        ends,
        parts,
        array("q", draw(st.lists(st.integers(-1, 2**62), min_size=n, max_size=n))),
        array("i", draw(st.lists(st.integers(-1, 9), min_size=n, max_size=n))),
        metadata,
    )


operations = st.one_of(
    st.tuples(st.just("replay"), batches(), st.integers(0, 2**42)),
    st.tuples(st.just("set"), st.tuples(topics, partitions), values),
    st.tuples(st.just("pop"), st.tuples(topics, partitions)),
)


def reads(table: Any, probes: list[Any]) -> Any:
    return (
        len(table),
        bool(table),
        table.items(),
        list(table),
        [(p in table, table.get(p)) for p in probes],
    )


@settings(max_examples=400, deadline=None)
@given(st.lists(operations, max_size=25))
def test_any_sequence_reads_the_same(ops: list[Any]) -> None:
    tables = [compiled.OffsetTable(), twin.OffsetTable()]
    probes: list[Any] = [("a", 0), ("b", 1024), ("zz", 0), ("a", -1), ("a", 2**40), "a", ("a",)]
    for op in ops:
        results = []
        for table in tables:
            if op[0] == "replay":
                results.append(table.replay_commits(op[1], op[2]))
            elif op[0] == "set":
                table.put(*op[1], op[2])
                results.append(None)
            else:
                results.append(table.pop(*op[1]))
        assert results[0] == results[1]
        probes.extend([(t, p) for t, p in ([op[1]] if op[0] != "replay" else [])])
        assert reads(tables[0], probes) == reads(tables[1], probes)


def test_a_replayed_batch_ends_with_the_last_offset_of_each_partition() -> None:
    batch = OffsetCommitBatch(
        "g",
        -1,
        "",
        None,
        ["t", "u", "t"],
        array("i", [2, 3, 4]),
        array("i", [0, 1, 0, 0]),
        array("q", [5, 6, 7, 8]),
        array("i", [-1, 2, 3, 4]),
        ["m", "", "", "last"],
    )
    for table in (compiled.OffsetTable(), twin.OffsetTable()):
        table.replay_commits(batch, 99)
        assert table.items() == [
            (("t", 0), OffsetCommitValue(8, 4, "last", 99)),
            (("t", 1), OffsetCommitValue(6, 2, "", 99)),
            (("u", 0), OffsetCommitValue(7, 3, "", 99)),
        ]
