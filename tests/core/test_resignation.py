"""A partition resigned and taken back: Kafka's onResignation, then a load of its log.

The groups of the resigned partition are answered NOT_COORDINATOR and leave memory; the
others carry on untouched. Taken back and replayed from the log, a group has its members,
generation and offsets again, which is what lets a moved group's members carry on.
"""

from __future__ import annotations

import itertools

from fastcoord.core.config import GroupConfig
from fastcoord.core.partition import partition_for
from fastcoord.core.state import COMPLETING_REBALANCE, PREPARING_REBALANCE, STABLE
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import OffsetFetchRequest, OffsetFetchRequestTopic
from tests.core.consumer.harness import ConsumerHarness
from tests.core.harness import FAST, Harness

PARTITIONS = GroupConfig().offsets_topic_num_partitions


def groups_in(partition: int, count: int, prefix: str = "group") -> list[str]:
    """`count` group ids whose offsets partition is `partition`."""
    found = []
    for n in itertools.count():
        group_id = f"{prefix}-{n}"
        if partition_for(group_id, PARTITIONS) == partition:
            found.append(group_id)
            if len(found) == count:
                return found
    raise AssertionError("unreachable")


MOVED, KEPT = groups_in(7, 1, "moved")[0], groups_in(8, 1, "kept")[0]


def fetch(h: Harness, group_id: str) -> tuple[int, dict[tuple[str, int], int]]:
    answer = h.answer(
        h.send(
            OffsetFetchRequest(group_id=group_id, topics=[OffsetFetchRequestTopic("t", [0, 1])]),
            5,
        )
    )
    offsets = {
        (t.name, p.partition_index): p.committed_offset
        for t in answer.topics
        for p in t.partitions
        if p.committed_offset >= 0
    }
    return answer.error_code, offsets


def take_back(h: Harness, partition: int) -> None:
    """What the server does when the partition comes back: take it, replay its log."""
    h.co.take(partition)
    assert fetch(h, MOVED)[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    for record in h.records:
        if partition_for(record.group_id, PARTITIONS) == partition:
            h.co.replay(record, h.now, loading=True)
    h.co.loading_partitions.discard(partition)


def test_the_moved_partitions_groups_are_unloaded_and_the_others_untouched() -> None:
    h = Harness(FAST)
    moved = h.stable_group(3, group_id=MOVED)
    kept = h.stable_group(2, group_id=KEPT)
    assert h.answer(h.commit({("t", 0): 5}, moved[0], 1, group_id=MOVED)).topics[0]
    h.commit({("t", 0): 9}, kept[0], 1, group_id=KEPT)
    members = len(h.co.table)

    h.absorb(h.co.resign(7, h.now))

    assert MOVED not in h.co.groups and KEPT in h.co.groups
    unloads = [(e.group_id, e.members) for e in h.events if e.kind == "group_unloaded"]
    assert unloads == [(MOVED, 3)]
    assert len(h.co.table) == members - 3
    assert h.heartbeat(moved[1], 1, group_id=MOVED) == ErrorCode.NOT_COORDINATOR
    assert h.co.heartbeat(MOVED, moved[1], 1, None, 4, h.now) == ErrorCode.NOT_COORDINATOR
    assert fetch(h, MOVED)[0] == ErrorCode.NOT_COORDINATOR
    assert h.co.offset_manager.group_ids() == [KEPT]
    # The other partition's group is served as before, by the table's fast path too.
    assert h.co.table_answers_heartbeats()
    assert h.co.heartbeat(KEPT, kept[1], 1, None, 4, h.now) == ErrorCode.NONE
    assert fetch(h, KEPT) == (ErrorCode.NONE, {("t", 0): 9})
    # No timer of the moved group is left to fire.
    h.sleep(60_000)
    assert MOVED not in h.co.groups
    assert not [e for e in h.events if e.group_id == MOVED and e.kind == "member_removed"]


def test_waiting_joins_and_syncs_are_told_to_find_the_new_coordinator() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2, group_id=MOVED)
    h.join(leader, group_id=MOVED)
    h.join(follower, group_id=MOVED)
    assert h.group(MOVED).is_(COMPLETING_REBALANCE)
    waiting_sync = h.sync(follower, 2, group_id=MOVED)
    first, _ = h.stable_group(2, group_id=groups_in(7, 2, "joining")[1])
    joining = groups_in(7, 2, "joining")[1]
    waiting_join = h.join(first, group_id=joining)
    assert h.group(joining).is_(PREPARING_REBALANCE)
    assert h.answer(waiting_sync) is None and h.answer(waiting_join) is None

    h.absorb(h.co.resign(7, h.now))

    assert h.answer(waiting_sync).error_code == ErrorCode.NOT_COORDINATOR
    assert h.answer(waiting_join).error_code == ErrorCode.NOT_COORDINATOR
    assert h.answer(h.join(group_id=MOVED)).error_code == ErrorCode.NOT_COORDINATOR


def test_taken_back_a_group_has_its_members_generation_and_offsets() -> None:
    h = Harness(FAST)
    members = h.stable_group(3, group_id=MOVED)
    h.commit({("t", 0): 5, ("t", 1): 6}, members[0], 1, group_id=MOVED)
    before = h.co.snapshot()[MOVED]

    h.absorb(h.co.resign(7, h.now))
    take_back(h, 7)

    assert h.co.snapshot()[MOVED] == before
    assert h.group(MOVED).is_(STABLE)
    for member in members:
        assert h.heartbeat(member, 1, group_id=MOVED) == ErrorCode.NONE
    assert fetch(h, MOVED) == (ErrorCode.NONE, {("t", 0): 5, ("t", 1): 6})


def test_an_append_in_flight_completes_and_a_second_pass_drops_what_it_put_back() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2, group_id=MOVED)
    h.hold_appends = True
    commit = h.commit({("t", 0): 11}, leader, 1, group_id=MOVED)
    h.join(leader, group_id=MOVED)
    h.join(follower, group_id=MOVED)  # the rebalance's record waits behind the commit
    syncs = [
        h.sync(leader, 2, {leader: b"a", follower: b"b"}, group_id=MOVED),
        h.sync(follower, 2, group_id=MOVED),
    ]
    assert h.held and h.answer(commit) is None

    unloaded: list[int] = []
    h.absorb(h.co.resign(7, h.now, unloaded.append))
    assert [h.answer(s).error_code for s in syncs] == [ErrorCode.NOT_COORDINATOR] * 2

    h.ack()  # the commit's: its offsets come back, with an Empty group to hold them
    assert h.answer(commit).error_code == 0
    assert h.co.offset_manager.group_ids() == [MOVED] and not h.group(MOVED).members
    assert unloaded == []
    while h.held:  # each callback runs once (the harness checks); the Dead group's
        h.ack()  # assignment is not applied
    assert unloaded == [7]
    assert h.co.offset_manager.group_ids() == [] and MOVED not in h.co.groups
    take_back(h, 7)
    assert fetch(h, MOVED) == (ErrorCode.NONE, {("t", 0): 11})


def test_a_consumer_group_moves_with_its_epochs() -> None:
    h = ConsumerHarness(batched=True)
    first = h.enter("m1", group_id=MOVED)
    h.beat("m1", first.member_epoch, group_id=MOVED)
    other = h.enter("o1", group_id=KEPT)
    epoch = h.consumer_group(MOVED).group_epoch
    members = len(h.co.table)

    h.absorb(h.co.resign(7, h.now))
    assert MOVED not in h.co.consumer_groups and len(h.co.table) == members - 1
    assert h.beat("m1", first.member_epoch, group_id=MOVED).error_code == ErrorCode.NOT_COORDINATOR
    assert h.beat("o1", other.member_epoch, group_id=KEPT).error_code == ErrorCode.NONE

    h.co.take(7)
    for record in h.records:
        if partition_for(record.group_id, PARTITIONS) == 7:
            h.co.replay(record, h.now, loading=True)
    h.co.loading_partitions.discard(7)
    assert h.consumer_group(MOVED).group_epoch == epoch
    answer = h.beat("m1", first.member_epoch, group_id=MOVED)
    assert (answer.error_code, answer.member_epoch) == (ErrorCode.NONE, first.member_epoch)
