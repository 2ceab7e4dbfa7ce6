"""OffsetCommits to consumer groups handed to the core together (Coordinator.commit_offsets)
are answered as each would be by itself. A run of commits to one group asks once which
kind of group it is, yet each member is still checked against its own epoch, and a
classic group between them is checked as a classic group."""

from __future__ import annotations

from typing import Any

from fastcoord.protocol.commit_batch import OffsetCommitAnswer, OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from tests.core.consumer.harness import ConsumerHarness

# (group, member, epoch or generation, the answer's error)
RUN = [
    ("g", "a", 1, ErrorCode.NONE),
    ("g", "a", 1, ErrorCode.NONE),
    ("g", "a", 0, ErrorCode.STALE_MEMBER_EPOCH),
    ("g", "b", 2, ErrorCode.NONE),
    ("g", "b", 1, ErrorCode.STALE_MEMBER_EPOCH),
    ("g", "zed", 2, ErrorCode.UNKNOWN_MEMBER_ID),
    ("g", "", -1, ErrorCode.UNKNOWN_MEMBER_ID),  # the group has members
    ("simple", "", -1, ErrorCode.NONE),  # creates a classic group
    ("simple", "", -1, ErrorCode.NONE),
    ("simple", "a", 1, ErrorCode.UNKNOWN_MEMBER_ID),  # a is g's, not this group's
    ("g", "b", 2, ErrorCode.NONE),
    ("empty", "", -1, ErrorCode.NONE),  # a consumer group with no members
    ("empty", "gone", 3, ErrorCode.UNKNOWN_MEMBER_ID),  # only a commit with no epoch
]


def ready() -> ConsumerHarness:
    """g: a at epoch 1 and b at epoch 2 (a has not heard of b yet); empty: a consumer
    group whose one member left."""
    h = ConsumerHarness()
    assert h.enter("a").member_epoch == 1
    assert h.enter("b").member_epoch == 2
    assert h.enter("gone", group_id="empty").error_code == 0
    assert h.exit("gone", group_id="empty").error_code == 0
    assert not h.consumer_group("empty").members
    return h


def request(group: str, member: str, epoch: int) -> OffsetCommitRequest:
    partition = OffsetCommitRequestPartition(0, 7, -1, -1, "")
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=epoch,
        member_id=member,
        topics=[OffsetCommitRequestTopic("t", [partition])],
    )


def answer(h: ConsumerHarness, handle: int) -> Any:
    got = h.answer(handle)
    return got.to_response() if isinstance(got, OffsetCommitAnswer) else got


def test_a_run_of_commits_is_answered_as_commits_one_by_one() -> None:
    one, together = ready(), ready()
    requests = [request(g, m, e) for g, m, e, _ in RUN]
    handles = [one.send(r, 9) for r in requests]
    first = 10_000
    batches = [(first + i, OffsetCommitBatch.from_request(r, 9)) for i, r in enumerate(requests)]
    together.absorb(together.co.commit_offsets(batches, together.now))
    while together.held:
        together.ack()
    expected = [code for *_, code in RUN]
    alone = [answer(one, h) for h in handles]
    assert [a.topics[0].partitions[0].error_code for a in alone] == expected
    assert [answer(together, first + i) for i in range(len(RUN))] == alone
    assert one.co.snapshot() == together.co.snapshot()
