"""OffsetCommits read one after another are handed to the core together
(Coordinator.commit_offsets): the answers, records, events and the state they leave must be
those of handling each request by itself, in the same order, whatever the mix (members of
several groups, stale generations, strangers, simple commits, metadata too long, a write
that fails)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord.core.config import GroupConfig
from fastcoord.core.records import OffsetCommits, Record
from fastcoord.protocol.commit_batch import OffsetCommitAnswer, OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from tests.core.harness import Harness

CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0, offset_metadata_max_bytes=4)


def ready() -> tuple[Harness, dict[str, list[str]]]:
    """Two stable groups of two members, and a group of offsets alone."""
    h = Harness(CONFIG)
    members = {g: h.stable_group(2, group_id=g) for g in ("a", "b")}
    h.commit({("t", 0): 1}, group_id="alone")
    return h, members


@st.composite
def commits(draw: st.DrawFn, members: dict[str, list[str]]) -> OffsetCommitRequest:
    kind = draw(st.sampled_from(["member", "member", "stale", "stranger", "simple", "new"]))
    group = draw(st.sampled_from(["a", "b"]))
    member, generation = draw(st.sampled_from(members[group])), 1
    if kind == "stale":
        generation = 0
    elif kind == "stranger":
        member = "nobody"
    elif kind in ("simple", "new"):
        group = "alone" if kind == "simple" else draw(st.sampled_from(["new-1", "new-2"]))
        member, generation = "", -1
    partitions = st.builds(
        OffsetCommitRequestPartition,
        partition_index=st.integers(0, 3),
        committed_offset=st.integers(0, 100),
        committed_metadata=st.sampled_from(["", None, "ok", "too long"]),
    )
    topics = st.lists(
        st.builds(
            OffsetCommitRequestTopic,
            name=st.sampled_from(["t", "u"]),
            partitions=st.lists(partitions, min_size=1, max_size=3),
        ),
        min_size=1,
        max_size=2,
    )
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        topics=draw(topics),
    )


def records(h: Harness) -> list[Record]:
    out: list[Record] = []
    for record in h.records:
        out.extend(record.records() if isinstance(record, OffsetCommits) else [record])
    return out


def answers(h: Harness, handles: list[int]) -> list[Any]:
    got = [h.answer(handle) for handle in handles]
    return [a.to_response() if isinstance(a, OffsetCommitAnswer) else a for a in got]


@settings(max_examples=150, deadline=None)
@given(st.data(), st.sampled_from([ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR]))
def test_commits_together_are_commits_one_by_one(data: st.DataObject, write: ErrorCode) -> None:
    one, members = ready()
    together, _ = ready()
    requests = data.draw(st.lists(commits(members), min_size=1, max_size=8))
    for h in (one, together):
        h.hold_appends = True
        h.records.clear()
        h.events.clear()
    handles = []
    for request in requests:
        handles.append(one.send(request, 8))
    batches = [OffsetCommitBatch.from_request(r, 8) for r in requests]
    first = 10_000  # handles of their own, in the same order
    together.absorb(
        together.co.commit_offsets([(first + i, b) for i, b in enumerate(batches)], together.now)
    )
    while one.held:
        one.ack(write)
    while together.held:
        together.ack(write)
    assert answers(one, handles) == answers(together, [first + i for i in range(len(batches))])
    assert records(one) == records(together)
    assert [(e.kind, e.group_id, e.members) for e in one.events] == [
        (e.kind, e.group_id, e.members) for e in together.events
    ]
    assert one.co.snapshot() == together.co.snapshot()
