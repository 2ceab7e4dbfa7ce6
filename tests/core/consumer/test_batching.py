"""Target assignments computed once per batch of heartbeats (consumer/batching.py).

Heartbeats read together that find their group's target due wait for run_assignments: the
group epoch moves once, the assignor runs once, and each member's answer is the one it
would have had at the new epoch; a batch ends where the same heartbeats one at a time end.
"""

from __future__ import annotations

import pytest

from fastcoord.core.consumer.group import ConsumerGroupState
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from tests.core.consumer.harness import ConsumerHarness, Owned, assigned, partitions

TOPICS = {"t": 7, "u": 4}


def join_request(
    member_id: str, topics: list[str], assignor: str | None
) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=topics,
        server_assignor=assignor,
        topic_partitions=[],
    )


def settle(h: ConsumerHarness, epochs: dict[str, int], owned: dict[str, Owned]) -> None:
    """Every member heartbeats, saying what it owns, until the group is Stable; each takes
    what its answers give it."""
    for _ in range(10):
        for member_id in sorted(epochs):
            answer = h.beat(member_id, epochs[member_id], owned[member_id])
            assert answer.error_code == 0, answer
            epochs[member_id] = answer.member_epoch
            given = assigned(answer, h.topics)
            if given is not None:
                owned[member_id] = given
        if h.consumer_group().state is ConsumerGroupState.STABLE:
            return
    raise AssertionError(h.consumer_group().state)


def joined(h: ConsumerHarness, handles: dict[str, int]) -> tuple[dict[str, int], dict[str, Owned]]:
    epochs, owned = {}, {}
    for member_id, handle in handles.items():
        answer = h.answer(handle)
        assert isinstance(answer, ConsumerGroupHeartbeatResponse), member_id
        assert answer.error_code == 0, answer
        epochs[member_id] = answer.member_epoch
        owned[member_id] = assigned(answer, h.topics) or {}
    return epochs, owned


def test_joins_read_together_move_the_group_epoch_once_and_wait_for_the_assignment() -> None:
    h = ConsumerHarness(dict(TOPICS), batched=True)
    handles = {f"m{i}": h.send(join_request(f"m{i}", ["t"], None), 1) for i in range(7)}
    assert all(h.answer(handle) is None for handle in handles.values())
    assert h.co.assignments_due()
    group = h.consumer_group()
    assert len(group.members) == 7 and group.group_epoch == 1 and group.assignment_epoch == 0
    h.run_assignments()
    assert not h.co.assignments_due()
    epochs, owned = joined(h, handles)
    assert set(epochs.values()) == {1}  # every member at the one new epoch
    assert sorted(p for o in owned.values() for p in o["t"]) == list(range(7))
    targets = [
        r for r in h.records if type(r.key).__name__ == "ConsumerGroupTargetAssignmentMetadataKey"
    ]
    assert len(targets) == 1  # the assignor ran once
    assert group.state is ConsumerGroupState.STABLE
    assert h.replayed().snapshot() == h.co.snapshot()


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_a_batch_ends_where_the_same_joins_one_at_a_time_end(assignor: str) -> None:
    """Members already in the group, then more join together: whether the joins are
    handled one at a time or as a batch, every member reaches its target, every partition
    is consumed once, and the final assignment is the same (the same balance, for the
    sticky uniform assignor)."""
    finals = []
    for batched in (False, True):
        h = ConsumerHarness(dict(TOPICS), batched=batched)
        first = {f"a{i}": h.send(join_request(f"a{i}", ["t", "u"], assignor), 1) for i in range(3)}
        h.run_assignments()
        epochs, owned = joined(h, first)
        settle(h, epochs, owned)
        more = {f"b{i}": h.send(join_request(f"b{i}", ["t", "u"], assignor), 1) for i in range(4)}
        h.run_assignments()
        new_epochs, new_owned = joined(h, more)
        epochs.update(new_epochs)
        owned.update(new_owned)
        settle(h, epochs, owned)
        group = h.consumer_group()
        assert {m.member_epoch for m in group.members.values()} == {group.group_epoch}
        consumed = sorted((t, p) for o in owned.values() for t, ps in o.items() for p in ps)
        assert consumed == sorted((t, p) for t, n in TOPICS.items() for p in range(n))
        finals.append({m: {t: sorted(ps) for t, ps in o.items() if ps} for m, o in owned.items()})
        if batched:
            assert group.group_epoch == 2  # one epoch per batch
    if assignor == "range":
        assert finals[0] == finals[1]
    else:
        # The uniform assignor is sticky: it keeps partitions where the last target put
        # them, so which member ends with which depends on the targets passed through (one
        # per join, or one per batch); how many each holds does not.
        counts = [sorted(sum(map(len, o.values())) for o in final.values()) for final in finals]
        assert counts[0] == counts[1]


def test_a_member_that_leaves_while_it_waits_is_told_it_is_gone() -> None:
    h = ConsumerHarness(dict(TOPICS), batched=True)
    waiting = h.send(join_request("m1", ["t"], None), 1)
    h.send(join_request("m2", ["t"], None), 1)
    left = h.exit("m1")  # handled before the assignment runs
    assert left.error_code == 0
    h.run_assignments()
    assert h.answer(waiting).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert set(h.consumer_group().members) == {"m2"}


def test_heartbeats_waiting_at_shutdown_are_answered() -> None:
    h = ConsumerHarness(dict(TOPICS), batched=True)
    handle = h.send(join_request("m1", ["t"], None), 1)
    h.absorb(h.co.shutdown(h.now))
    answer = h.answer(handle)
    assert answer.error_code == 0 and answer.member_epoch == 1, answer


def test_a_budget_leaves_the_other_groups_due() -> None:
    h = ConsumerHarness(dict(TOPICS), batched=True)
    handles = []
    for g in ("g1", "g2", "g3"):
        request = join_request("m", ["t"], None)
        request.group_id = g
        handles.append(h.send(request, 1))
    h.absorb(h.co.run_assignments(h.now, budget=1))
    assert [h.answer(x) is not None for x in handles] == [True, False, False]
    assert h.co.assignments_due()
    h.run_assignments()
    assert all(h.answer(x).member_epoch == 1 for x in handles)


def test_a_member_revokes_before_a_newcomer_of_the_same_batch_is_given_its_partition() -> None:
    """The newcomer joins and the owner heartbeats in the same batch: the owner is told to
    revoke, the newcomer gets the partition only once it is released, as one at a time."""
    h = ConsumerHarness({"t": 2}, batched=True)
    first = h.enter("a")
    assert assigned(first, h.topics) == {"t": [0, 1]}
    join = h.send(join_request("b", ["t"], None), 1)
    beat = h.send(
        ConsumerGroupHeartbeatRequest(
            group_id="g", member_id="a", member_epoch=1, topic_partitions=partitions({"t": [0, 1]})
        ),
        1,
    )
    assert h.answer(beat) is None  # it waits with the join
    h.run_assignments()
    newcomer = h.answer(join)
    assert newcomer.error_code == 0 and assigned(newcomer, h.topics) == {}  # not yet free
    kept = h.answer(beat)
    assert kept.error_code == 0 and len(assigned(kept, h.topics)["t"]) == 1  # one to revoke
    released = h.beat("a", kept.member_epoch, assigned(kept, h.topics))
    assert released.error_code == 0
    given = h.beat("b", newcomer.member_epoch, {})
    assert len(assigned(given, h.topics)["t"]) == 1
