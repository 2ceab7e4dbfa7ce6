"""Offsets (commit, fetch, delete, retention) and the admin APIs (describe, list, delete)."""

from __future__ import annotations

from fastcoord.core.config import GroupConfig
from fastcoord.core.state import EMPTY
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
)
from tests.core.harness import FAST, Harness


def commit_errors(h: Harness, handle: int) -> dict[tuple[str, int], int]:
    response = h.answer(handle)
    return {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }


def fetched(
    h: Harness, group_id: str = "g", topics: dict[str, list[int]] | None = None, version: int = 7
) -> dict[tuple[str, int], int]:
    req = OffsetFetchRequest(
        group_id=group_id,
        topics=None
        if topics is None
        else [OffsetFetchRequestTopic(t, ps) for t, ps in topics.items()],
    )
    response = h.answer(h.send(req, version))
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in response.topics
        for p in t.partitions
    }


def test_a_member_commits_for_its_generation() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2)
    assert commit_errors(h, h.commit({("t", 0): 5, ("t", 1): 7}, leader, 1)) == {
        ("t", 0): 0,
        ("t", 1): 0,
    }
    assert fetched(h) == {("t", 0): 5, ("t", 1): 7}
    assert fetched(h, topics={"t": [0, 9]}) == {("t", 0): 5, ("t", 9): -1}
    assert set(commit_errors(h, h.commit({("t", 0): 6}, leader, 2)).values()) == {
        ErrorCode.ILLEGAL_GENERATION
    }
    assert set(commit_errors(h, h.commit({("t", 0): 6}, "stranger", 1)).values()) == {
        ErrorCode.UNKNOWN_MEMBER_ID
    }
    # A simple commit (no member, generation -1) is refused while the group has members.
    assert set(commit_errors(h, h.commit({("t", 0): 6})).values()) == {ErrorCode.UNKNOWN_MEMBER_ID}
    # Between JoinGroup and SyncGroup: REBALANCE_IN_PROGRESS.
    h.join(leader)
    h.join(follower)
    assert set(commit_errors(h, h.commit({("t", 0): 6}, leader, 2)).values()) == {
        ErrorCode.REBALANCE_IN_PROGRESS
    }


def test_simple_commits_create_an_empty_group() -> None:
    h = Harness(FAST)
    assert commit_errors(h, h.commit({("t", 3): 42}, group_id="simple")) == {("t", 3): 0}
    assert h.group("simple").is_(EMPTY)
    assert fetched(h, "simple") == {("t", 3): 42}
    # A commit with a generation for a group that does not exist is from a dead generation.
    assert set(commit_errors(h, h.commit({("t", 3): 1}, "m", 4, group_id="gone")).values()) == {
        ErrorCode.ILLEGAL_GENERATION
    }


def test_commits_are_acknowledged_and_visible_only_once_durable() -> None:
    h = Harness(FAST)
    h.hold_appends = True
    handle = h.commit({("t", 0): 10}, group_id="s")
    assert h.answer(handle) is None
    assert fetched(h, "s", {"t": [0]}) == {("t", 0): -1}
    h.ack()
    assert commit_errors(h, handle) == {("t", 0): 0}
    assert fetched(h, "s", {"t": [0]}) == {("t", 0): 10}
    failed = h.commit({("t", 0): 11}, group_id="s")
    h.ack(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert commit_errors(h, failed) == {("t", 0): ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert fetched(h, "s", {"t": [0]}) == {("t", 0): 10}


def test_metadata_over_the_limit_is_refused_per_partition() -> None:
    h = Harness(GroupConfig(offset_metadata_max_bytes=8))
    assert commit_errors(h, h.commit({("t", 0): 1}, metadata="x" * 9, group_id="s")) == {
        ("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE
    }
    assert commit_errors(h, h.commit({("t", 0): 1}, metadata="x" * 8, group_id="s")) == {
        ("t", 0): 0
    }


def test_offset_fetch_v8_many_groups_at_once() -> None:
    h = Harness(FAST)
    h.commit({("t", 0): 1}, group_id="a")
    h.commit({("u", 2): 9}, group_id="b")
    req = OffsetFetchRequest(
        groups=[
            OffsetFetchRequestGroup("a", topics=None),
            OffsetFetchRequestGroup("b", topics=[OffsetFetchRequestTopics("u", [2, 3])]),
            OffsetFetchRequestGroup("c", topics=None),
        ]
    )
    response = h.answer(h.send(req, 8))
    got = {
        g.group_id: {
            (t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions
        }
        for g in response.groups
    }
    assert got == {"a": {("t", 0): 1}, "b": {("u", 2): 9, ("u", 3): -1}, "c": {}}


def test_offsets_of_an_empty_group_expire_after_the_retention() -> None:
    config = GroupConfig(
        group_initial_rebalance_delay_ms=0,
        offsets_retention_minutes=1,
        offsets_retention_check_interval_ms=10_000,
    )
    h = Harness(config)
    (leader,) = h.stable_group(1, session_ms=10_000)
    h.commit({("t", 0): 5}, leader, 1)
    h.sleep(10_000)  # the member expires: the group is empty from now
    assert h.group().is_(EMPTY)
    h.sleep(55_000)
    assert fetched(h, topics={"t": [0]}) == {("t", 0): 5}
    h.sleep(10_000)  # 60 s after it became empty, at the next check
    assert fetched(h, topics={"t": [0]}) == {("t", 0): -1}
    assert h.group() is None  # an empty group with no offsets is removed
    assert h.records[-1].value is None  # ... with a tombstone for its metadata


def test_offset_delete() -> None:
    h = Harness(FAST)
    (leader,) = h.stable_group(1)  # subscribed to topic "t"
    h.commit({("t", 0): 1, ("old", 0): 2}, leader, 1)

    def delete(group_id: str, *tps: tuple[str, int]) -> tuple[int, dict[tuple[str, int], int]]:
        req = OffsetDeleteRequest(
            group_id=group_id,
            topics=[OffsetDeleteRequestTopic(t, [OffsetDeleteRequestPartition(p)]) for t, p in tps],
        )
        r = h.answer(h.send(req, 0))
        return r.error_code, {
            (t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions
        }

    assert delete("g", ("t", 0), ("old", 0)) == (
        0,
        {
            ("t", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
            ("old", 0): 0,
        },
    )
    assert fetched(h) == {("t", 0): 1}
    assert delete("nope", ("t", 0))[0] == ErrorCode.GROUP_ID_NOT_FOUND


def test_describe_list_and_delete_groups() -> None:
    h = Harness(FAST)
    leader, follower = h.stable_group(2)
    h.commit({("t", 0): 1}, group_id="idle")
    described = h.answer(h.send(DescribeGroupsRequest(groups=["g", "idle", "none"]), 5)).groups
    g, idle, none = described
    assert (g.group_state, g.protocol_type, g.protocol_data) == ("Stable", "consumer", "range")
    assert [m.member_id for m in g.members] == [leader, follower]
    assert g.members[0].member_assignment == f"assignment-of-{leader}".encode()
    assert (idle.group_state, idle.members) == ("Empty", [])
    assert (none.error_code, none.group_state) == (0, "Dead")

    listed = h.answer(h.send(ListGroupsRequest(), 5)).groups
    assert {(x.group_id, x.group_state, x.group_type) for x in listed} == {
        ("g", "Stable", "classic"),
        ("idle", "Empty", "classic"),
    }
    listed = h.answer(h.send(ListGroupsRequest(states_filter=["empty"]), 4)).groups
    assert [x.group_id for x in listed] == ["idle"]

    deleted = h.answer(h.send(DeleteGroupsRequest(groups_names=["g", "idle", "none"]), 2))
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("g", ErrorCode.NON_EMPTY_GROUP),
        ("idle", 0),
        ("none", ErrorCode.GROUP_ID_NOT_FOUND),
    ]
    assert h.group("idle") is None
    assert fetched(h, "idle", {"t": [0]}) == {("t", 0): -1}


def test_list_groups_type_filter() -> None:
    h = Harness(FAST)
    h.stable_group(1)
    assert [
        g.group_id for g in h.answer(h.send(ListGroupsRequest(types_filter=["Classic"]), 5)).groups
    ] == ["g"]
    assert h.answer(h.send(ListGroupsRequest(types_filter=["consumer"]), 5)).groups == []
