"""answer_heartbeats over the real member table: the compiled loop, which answers a regular
frame from the table's C index without making a Python object, against the twin's loop over
the twin table, which looks the ids up in dictionaries. Both must answer the same frames with
the same bytes, stop at the same frame, and leave the same deadlines and counts behind.

Runs whatever FASTCOORD_NO_EXTENSIONS says: both pairs of modules are imported directly.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord._ext import hot_frames as compiled  # type: ignore[attr-defined]
from fastcoord._ext import member_table as compiled_table  # type: ignore[attr-defined]
from fastcoord.core import member_table as twin_table
from fastcoord.protocol import hot_frames as twin
from tests.protocol.strategies import mutated, outcome
from tests.protocol.test_hot_frames import stream_frames
from tests.server.test_reactor_thread import GROUPS, MEMBERS, fill, heartbeat


@st.composite
def table_frames(draw: st.DrawFn) -> bytes:
    """A Heartbeat of a member of the table (or of "x", never bound), at any version and
    generation, with the ways a frame can leave the C path: a static member, a non-ASCII
    client id, bytes after the message, a mutation; or any frame of the codec's tests."""
    kind = draw(
        st.sampled_from(["plain"] * 8 + ["static", "client", "padded", "mutated", "stream"])
    )
    if kind == "stream":
        return draw(stream_frames())
    frame = heartbeat(
        draw(st.sampled_from([*GROUPS, "nope"])),
        draw(st.sampled_from(MEMBERS)),
        draw(st.integers(0, 3)),
        draw(st.integers(0, 4)),
        draw(st.integers(-(2**31), 2**31 - 1)),
        "i" if kind == "static" else None,
    )
    if kind == "client":  # the client id "c" as "é": one byte longer
        frame = struct.pack(">i", len(frame) - 3) + frame[4:12] + b"\xc3\xa9" + frame[13:]
    elif kind == "padded":
        frame = struct.pack(">i", len(frame) - 4 + 3) + frame[4:] + b"\0\0\0"
    elif kind == "mutated":
        body = draw(mutated(st.just(frame[4:])))
        frame = len(body).to_bytes(4, "big") + body
    return frame


def reads_of(frames: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """One read: up to 8 frames back to back."""
    return st.lists(frames, min_size=1, max_size=8).map(b"".join)


def run(hot: object, table_module: object, reads: list[tuple[bytes, int]]) -> list[object]:
    table = table_module.MemberTable()  # type: ignore[attr-defined]
    slots = fill(table)
    record: list[object] = []
    for n, (data, skip) in enumerate(reads):
        buf, out = bytearray(data), bytearray(b"keep")
        trailing: list[tuple[int, int]] = []
        start = min(skip, len(buf))
        result = outcome(
            hot.answer_heartbeats,  # type: ignore[attr-defined]
            buf,
            start,
            200,
            table,
            1_000 + n,
            out,
            trailing,
            "h",
        )
        record.append((result, bytes(out), trailing))
    record.append(table.heartbeat_answers())
    record.append([table.deadline(slot) for slot in slots])
    return record


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(reads_of(table_frames()), st.integers(0, 3)),
        min_size=1,
        max_size=4,
    )
)
def test_runs_over_the_real_table_match_the_twin(reads: list[tuple[bytes, int]]) -> None:
    assert run(compiled, compiled_table, reads) == run(twin, twin_table, reads)


def test_the_c_path_answers_what_the_python_path_would() -> None:
    """A few fixed runs, so that a run of regular heartbeats is known to be answered at all
    (the property above would also hold if both loops answered nothing)."""
    data = b"".join(heartbeat("g", m, 2, v, v) for m in MEMBERS[:-1] for v in range(5))
    for hot, module in ((compiled, compiled_table), (twin, twin_table)):
        table = module.MemberTable()
        fill(table)
        out: bytearray = bytearray()
        pos, count = hot.answer_heartbeats(bytearray(data), 0, 200, table, 5, out, [], "h")
        assert (pos, count) == (len(data), 15)
        assert table.heartbeat_answers()[0] == 15
        assert len(out) == 3 * (10 + 14 * 3 + 16)
