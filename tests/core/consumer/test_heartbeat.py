"""ConsumerGroupHeartbeat walked through in virtual time, as Kafka's GroupMetadataManager
tests walk it: joining, incremental handover, leaving, static members, sessions and
rebalance timeouts, the request checks, and the group as other APIs see it."""

from __future__ import annotations

import pytest

from fastcoord.core.config import GroupConfig
from fastcoord.core.consumer.group import ConsumerGroupState
from fastcoord.core.consumer.reconciliation import MemberState
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    ListGroupsRequest,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
)
from tests.core.consumer.harness import ConsumerHarness, assigned
from tests.core.harness import FAST, subscription

SESSION_MS = GroupConfig().group_consumer_session_timeout_ms


def stable_pair(h: ConsumerHarness) -> tuple[int, dict[str, list[int]], dict[str, list[int]]]:
    """a and b join t (6 partitions) and settle: (epoch, a's partitions, b's)."""
    a = h.enter("a")
    assert a.error_code == 0 and a.member_epoch == 1
    assert assigned(a, h.topics) == {"t": [0, 1, 2, 3, 4, 5]}
    b = h.enter("b")
    assert b.member_epoch == 2 and assigned(b, h.topics) == {}  # a still holds them all
    told = h.beat("a", 1)
    kept = assigned(told, h.topics)
    assert told.member_epoch == 1 and kept is not None and len(kept["t"]) == 3
    assert h.beat("a", 1, owned=kept).member_epoch == 2
    given = h.beat("b", 2)
    b_parts = assigned(given, h.topics)
    assert b_parts is not None and sorted(kept["t"] + b_parts["t"]) == [0, 1, 2, 3, 4, 5]
    assert h.consumer_group().state is ConsumerGroupState.STABLE
    return 2, kept, b_parts


def test_a_member_joins_an_empty_group_and_gets_every_partition() -> None:
    h = ConsumerHarness()
    answer = h.enter("a")
    assert (answer.error_code, answer.member_id, answer.member_epoch) == (0, "a", 1)
    assert answer.heartbeat_interval_ms == 5000
    group = h.consumer_group()
    assert (group.group_epoch, group.assignment_epoch) == (1, 1)
    assert group.state is ConsumerGroupState.STABLE
    assert "member_joined" in h.kinds() and "rebalance_completed" in h.kinds()


def test_a_partition_is_revoked_from_its_owner_before_another_member_gets_it() -> None:
    h = ConsumerHarness()
    h.enter("a")
    b = h.enter("b")
    group = h.consumer_group()
    assert group.state is ConsumerGroupState.RECONCILING
    assert group.members["b"].current.state is MemberState.UNRELEASED_PARTITIONS
    # a has not heartbeated: b is given nothing however often it asks.
    for _ in range(3):
        again = h.beat("b", b.member_epoch)
        assert again.member_epoch == 2 and again.assignment is None
    told = h.beat("a", 1)
    assert group.members["a"].current.state is MemberState.UNREVOKED_PARTITIONS
    kept = assigned(told, h.topics)
    assert kept is not None
    # Without saying what it owns, a is still revoking; b still waits.
    assert h.beat("a", 1).member_epoch == 1
    assert h.beat("b", 2).assignment is None
    assert h.beat("a", 1, owned=kept).member_epoch == 2
    given = assigned(h.beat("b", 2), h.topics)
    assert given is not None and not set(given["t"]) & set(kept["t"])
    assert h.consumer_group().state is ConsumerGroupState.STABLE


def test_the_full_assignment_is_sent_again_to_a_full_request() -> None:
    h = ConsumerHarness()
    h.enter("a")
    quiet = h.beat("a", 1)
    assert quiet.assignment is None  # nothing changed
    full = h.request(
        ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id="a",
            member_epoch=1,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=["t"],
            topic_partitions=[],
        )
    )
    assert assigned(full, h.topics) == {"t": [0, 1, 2, 3, 4, 5]}


def test_a_member_that_leaves_hands_its_partitions_on() -> None:
    h = ConsumerHarness()
    epoch, _, _ = stable_pair(h)
    gone = h.exit("b")
    assert (gone.error_code, gone.member_id, gone.member_epoch) == (0, "b", -1)
    assert "b" not in h.consumer_group().members
    answer = h.beat("a", epoch)
    assert answer.member_epoch == epoch + 1
    assert assigned(answer, h.topics) == {"t": [0, 1, 2, 3, 4, 5]}
    assert "member_left" in h.kinds()


def test_a_silent_member_is_fenced_after_its_session_timeout() -> None:
    h = ConsumerHarness()
    epoch, _, _ = stable_pair(h)
    a_epoch = epoch
    for _ in range(4):
        h.sleep(SESSION_MS // 4)
        answer = h.beat("a", a_epoch)
        assert answer.error_code == 0
        a_epoch = answer.member_epoch
    assert "b" not in h.consumer_group().members  # b stayed silent for a whole session
    assert "member_expired" in h.kinds()
    assert a_epoch == epoch + 1  # the group moved on without b
    assert h.beat("b", epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.consumer_group().target["a"] == {h.topics.topic_by_name("t")[0]: frozenset(range(6))}


def test_a_member_that_does_not_revoke_within_its_rebalance_timeout_is_fenced() -> None:
    h = ConsumerHarness()
    h.enter("a", rebalance_ms=10_000)
    h.enter("b")
    h.beat("a", 1)  # told to revoke half
    assert h.consumer_group().members["a"].current.state is MemberState.UNREVOKED_PARTITIONS
    h.sleep(5_000)
    h.beat("b", 2)
    h.sleep(5_001)
    assert "a" not in h.consumer_group().members
    assert "member_removed" in h.kinds()
    answer = h.beat("b", 2)
    assert assigned(answer, h.topics) == {"t": [0, 1, 2, 3, 4, 5]}


def test_a_static_member_that_leaves_for_a_while_keeps_its_place() -> None:
    h = ConsumerHarness()
    first = h.enter("s1", instance_id="i1")
    assert first.member_epoch == 1
    h.enter("m")
    h.beat("s1", 1, instance_id="i1")
    kept = assigned(h.beat("s1", 1, instance_id="i1"), h.topics)
    away = h.exit("s1", instance_id="i1", epoch=-2)
    assert (away.error_code, away.member_epoch) == (0, -2)
    assert h.consumer_group().members["s1"].member_epoch == -2
    # Another instance may not take the id while it is held; the same instance, under a
    # new member id, takes its place and its partitions.
    taken = h.enter("s2", instance_id="i2")
    assert taken.error_code == 0
    back = h.enter("s1-again", instance_id="i1")
    assert back.error_code == 0, back
    group = h.consumer_group()
    assert "s1" not in group.members and group.static_members["i1"] == "s1-again"
    assert kept is None or group.target.get("s1-again") is not None


def test_a_static_member_back_at_its_epoch_completes_no_rebalance() -> None:
    """Its -2 leave leaves the group Reconciling (its member is not at the target epoch)
    and its return makes it Stable again, with no new epoch: no rebalance started, so the
    event log says none completed."""
    h = ConsumerHarness()
    h.enter("s1", instance_id="i1")
    h.enter("m")
    for _ in range(3):
        for member, instance in (("s1", "i1"), ("m", None)):
            m = h.consumer_group().members[member]
            owned = {h.topics.topic_by_id(t)[0]: sorted(ps) for t, ps in m.current.assigned.items()}
            h.beat(member, m.member_epoch, owned=owned, instance_id=instance)
    assert h.consumer_group().state is ConsumerGroupState.STABLE
    epoch = h.consumer_group().group_epoch
    events = len(h.events)
    h.exit("s1", instance_id="i1", epoch=-2)
    back = h.enter("s1-again", instance_id="i1")
    assert back.error_code == 0 and h.consumer_group().group_epoch == epoch
    kinds = [e.kind for e in h.events[events:]]
    assert "rebalance_started" not in kinds and "rebalance_completed" not in kinds, kinds


def test_an_instance_id_still_in_use_is_refused() -> None:
    h = ConsumerHarness()
    h.enter("s1", instance_id="i1")
    answer = h.enter("s2", instance_id="i1")
    assert answer.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    assert h.beat("s2", 1, instance_id="i1").error_code == ErrorCode.FENCED_INSTANCE_ID


@pytest.mark.parametrize(
    ("request_fields", "code"),
    [
        ({"member_epoch": 0, "rebalance_timeout_ms": -1}, ErrorCode.INVALID_REQUEST),
        ({"member_epoch": 0, "topic_partitions": None}, ErrorCode.INVALID_REQUEST),
        ({"member_epoch": 0, "subscribed_topic_names": None}, ErrorCode.INVALID_REQUEST),
        ({"member_epoch": -2}, ErrorCode.INVALID_REQUEST),
        ({"member_epoch": -3}, ErrorCode.INVALID_REQUEST),
        ({"member_id": ""}, ErrorCode.INVALID_REQUEST),
        ({"instance_id": " "}, ErrorCode.INVALID_REQUEST),
        ({"server_assignor": "sticky"}, ErrorCode.UNSUPPORTED_ASSIGNOR),
        ({"group_id": ""}, ErrorCode.INVALID_GROUP_ID),
        ({"member_epoch": 3}, ErrorCode.GROUP_ID_NOT_FOUND),
        (
            {"subscribed_topic_regex": "(", "subscribed_topic_names": None},
            ErrorCode.INVALID_REGULAR_EXPRESSION,
        ),
    ],
)
def test_requests_kafka_refuses(request_fields: dict[str, object], code: int) -> None:
    h = ConsumerHarness()
    fields: dict[str, object] = {
        "group_id": "g",
        "member_id": "m",
        "member_epoch": 0,
        "rebalance_timeout_ms": 30_000,
        "subscribed_topic_names": ["t"],
        "topic_partitions": [],
        **request_fields,
    }
    answer = h.request(ConsumerGroupHeartbeatRequest(**fields))  # type: ignore[arg-type]
    assert answer.error_code == code, answer
    assert answer.member_id is None and answer.assignment is None


def test_member_epochs_kafka_fences() -> None:
    h = ConsumerHarness()
    epoch, a_parts, _ = stable_pair(h)
    assert h.beat("a", epoch + 1).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    superset = {"t": [0, 1, 2, 3, 4, 5]}
    assert h.beat("a", epoch - 1, owned=superset).error_code == (ErrorCode.FENCED_MEMBER_EPOCH)
    # The previous epoch with what it was given is a member that missed an answer.
    assert h.beat("a", epoch - 1, owned=a_parts).error_code == 0
    assert h.beat("zed", epoch).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_new_subscription_moves_the_group_epoch_and_the_assignment() -> None:
    h = ConsumerHarness({"t": 2, "u": 2})
    h.enter("a")
    moved = h.beat("a", 1, topics=["t", "u"])
    assert moved.member_epoch == 2
    assert assigned(moved, h.topics) == {"t": [0, 1], "u": [0, 1]}


def test_a_regex_subscription_follows_topics_created_later() -> None:
    h = ConsumerHarness({"orders-1": 2, "other": 2})
    first = h.enter("a", regex="orders-.*")
    assert assigned(first, h.topics) == {"orders-1": [0, 1]}
    h.topics.add("orders-2", 1)
    later = h.beat("a", first.member_epoch)
    assert later.member_epoch == first.member_epoch + 1
    assert assigned(later, h.topics) == {"orders-1": [0, 1], "orders-2": [0]}


def test_the_range_assignor_is_used_when_members_ask_for_it() -> None:
    h = ConsumerHarness({"t": 4})
    h.enter("a", assignor="range")
    h.enter("b", assignor="range")
    h.beat("a", 1)
    group = h.consumer_group()
    assert group.preferred_assignor("uniform") == "range"
    targets = {m: sorted(p for ps in t.values() for p in ps) for m, t in group.target.items()}
    assert targets == {"a": [0, 1], "b": [2, 3]}


def test_commits_carry_the_member_epoch() -> None:
    h = ConsumerHarness()
    epoch, _, _ = stable_pair(h)
    ok = h.answer(h.commit({("t", 0): 5}, member_id="a", generation=epoch, version=9))
    assert ok.topics[0].partitions[0].error_code == 0
    stale = h.answer(h.commit({("t", 0): 6}, member_id="a", generation=epoch - 1, version=9))
    assert stale.topics[0].partitions[0].error_code == ErrorCode.STALE_MEMBER_EPOCH
    unknown = h.answer(h.commit({("t", 0): 6}, member_id="zed", generation=epoch, version=9))
    assert unknown.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    fetched = h.answer(h.send(OffsetFetchRequest(group_id="g", topics=None), 7))
    assert fetched.topics[0].partitions[0].committed_offset == 5
    # OffsetFetch v9 names the member: its epoch must be the member's.
    for member_id, member_epoch, code in [
        ("a", epoch, 0),
        ("a", epoch - 1, ErrorCode.STALE_MEMBER_EPOCH),
        ("zed", epoch, ErrorCode.UNKNOWN_MEMBER_ID),
        (None, -1, 0),
    ]:
        group = OffsetFetchRequestGroup("g", member_id, member_epoch, None)
        answer = h.answer(h.send(OffsetFetchRequest(groups=[group]), 9))
        assert answer.groups[0].error_code == code, (member_id, member_epoch)


def test_an_empty_classic_group_with_offsets_becomes_a_consumer_group() -> None:
    h = ConsumerHarness(config=FAST)
    assert h.answer(h.commit({("t", 1): 7})).topics[0].partitions[0].error_code == 0
    assert h.group() is not None
    assert h.enter("a").error_code == 0
    assert h.group() is None and h.consumer_group() is not None
    fetched = h.answer(h.send(OffsetFetchRequest(group_id="g", topics=None), 7))
    assert fetched.topics[0].partitions[0].committed_offset == 7
    fresh = h.replayed()
    assert fresh.snapshot() == h.co.snapshot()


def test_classic_and_consumer_groups_do_not_share_an_id() -> None:
    h = ConsumerHarness(config=FAST)
    h.stable_group(1, group_id="classic")
    refused = h.enter("a", group_id="classic")
    assert refused.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    h.enter("a", group_id="modern")
    classic_join = JoinGroupRequest(
        group_id="modern",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol("range", subscription("t"))],
    )
    joined = h.answer(h.send(classic_join, 7))
    assert joined.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_admin_views_of_a_consumer_group() -> None:
    h = ConsumerHarness()
    stable_pair(h)
    described = h.answer(h.send(ConsumerGroupDescribeRequest(group_ids=["g", "nope"]), 1))
    group, missing = described.groups
    assert (group.group_state, group.group_epoch, group.assignment_epoch) == ("Stable", 2, 2)
    assert group.assignor_name == "uniform"
    assert sorted(m.member_id for m in group.members) == ["a", "b"]
    parts = sorted(
        p for m in group.members for tp in m.assignment.topic_partitions for p in tp.partitions
    )
    assert parts == [0, 1, 2, 3, 4, 5]
    assert all(tp.topic_name == "t" for m in group.members for tp in m.assignment.topic_partitions)
    assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    listed = h.answer(h.send(ListGroupsRequest(types_filter=["consumer"]), 5))
    assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [
        ("g", "consumer", "Stable")
    ]
    classic_view = h.answer(h.send(DescribeGroupsRequest(groups=["g"]), 5))
    assert classic_view.groups[0].group_state == "Dead"  # as Kafka answers v0-5


def test_an_empty_consumer_group_can_be_deleted() -> None:
    h = ConsumerHarness()
    stable_pair(h)
    busy = h.answer(h.send(DeleteGroupsRequest(groups_names=["g"]), 2))
    assert busy.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
    h.exit("a")
    h.exit("b")
    assert h.consumer_group().state is ConsumerGroupState.EMPTY
    done = h.answer(h.send(DeleteGroupsRequest(groups_names=["g"]), 2))
    assert done.results[0].error_code == 0
    assert h.consumer_group() is None
    assert h.replayed().snapshot() == h.co.snapshot() == {}


def test_replaying_the_records_rebuilds_the_groups() -> None:
    h = ConsumerHarness({"t": 6, "u": 3})
    stable_pair(h)
    h.enter("c", topics=["u"], instance_id="ic")
    h.beat("a", 2)
    h.exit("b")
    h.sleep(1_000)
    assert h.replayed().snapshot() == h.co.snapshot()


def test_an_answer_waits_for_the_writes_it_reflects_and_only_those() -> None:
    h = ConsumerHarness()
    h.enter("a")
    h.enter("other", group_id="g2")
    h.hold_appends = True
    joining = h.send(
        ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id="b",
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=["t"],
            topic_partitions=[],
        ),
        1,
    )
    assert h.answer(joining) is None  # its records are not durable yet
    # a's heartbeat writes nothing, but its answer (the new target) follows b's records.
    waiting = h.send(ConsumerGroupHeartbeatRequest(group_id="g", member_id="a", member_epoch=1), 1)
    assert h.answer(waiting) is None
    # Another group's steady heartbeat has nothing to wait for.
    other = h.send(
        ConsumerGroupHeartbeatRequest(group_id="g2", member_id="other", member_epoch=1), 1
    )
    assert h.answer(other).error_code == 0
    h.ack()
    assert h.answer(joining).member_epoch == 2 and h.answer(waiting) is None
    h.ack()
    assert h.answer(waiting).error_code == 0
    assert h.held == [] and h.co.group_manager.unsettled_writes == {}
