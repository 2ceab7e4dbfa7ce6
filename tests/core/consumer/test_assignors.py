"""The server-side assignors: valid, balanced, sticky and deterministic for any group, and
equal to Kafka's answers on the cases of Kafka's own assignor tests."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord.core.consumer.assignment import size
from fastcoord.core.consumer.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    GroupAssignment,
    MemberSubscription,
    TopicMetadata,
)

UNIFORM = ASSIGNORS["uniform"]
RANGE = ASSIGNORS["range"]

POOL = [uuid.UUID(int=(k * 0x9E3779B97F4A7C15) << 60 | k) for k in range(1, 6)]
MISSING = uuid.UUID(int=0xDEAD)  # subscribed to and held in targets, but not a topic

Members = dict[str, MemberSubscription]
Topics = dict[uuid.UUID, TopicMetadata]


@st.composite
def groups(draw: st.DrawFn, homogeneous: bool | None = None) -> tuple[Members, Topics]:
    """A group and the topics: any subscriptions, instance ids and targets, the targets
    possibly holding partitions past a topic's end, of other members, or of topics gone."""
    topic_ids = draw(st.lists(st.sampled_from(POOL), min_size=1, max_size=4, unique=True))
    topics = {
        t: TopicMetadata(t, f"topic-{POOL.index(t)}", draw(st.integers(0, 12))) for t in topic_ids
    }
    member_ids = draw(
        st.lists(st.text("abcxyz", min_size=1, max_size=3), min_size=1, max_size=7, unique=True)
    )
    subscription = st.frozensets(st.sampled_from([*POOL, MISSING]), max_size=4)
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    shared = draw(subscription)
    target = st.dictionaries(
        st.sampled_from([*POOL, MISSING]),
        st.frozensets(st.integers(-1, 14), min_size=1, max_size=6),
        max_size=3,
    )
    members = {
        m: MemberSubscription(
            shared if homogeneous else draw(subscription),
            draw(target | st.just({})),
            draw(st.none() | st.sampled_from(["i1", "i2", "i3", "i4"])),
        )
        for m in member_ids
    }
    return members, topics


def subscribers(
    members: Mapping[str, MemberSubscription], topics: Topics
) -> dict[uuid.UUID, set[str]]:
    out: dict[uuid.UUID, set[str]] = {t: set() for t in topics}
    for member_id, member in members.items():
        for t in member.subscribed_topic_ids & topics.keys():
            out[t].add(member_id)
    return out


def sizes(result: GroupAssignment) -> dict[str, int]:
    return {m: size(a) for m, a in result.items()}


def with_targets(members: Members, result: GroupAssignment) -> Members:
    return {
        m: MemberSubscription(s.subscribed_topic_ids, result[m], s.instance_id)
        for m, s in members.items()
    }


def check_valid(members: Members, topics: Topics, result: GroupAssignment) -> None:
    assert set(result) == set(members)
    owners: dict[tuple[uuid.UUID, int], str] = {}
    for member_id, assignment in result.items():
        for t, partitions in assignment.items():
            assert isinstance(partitions, frozenset) and partitions
            assert t in topics and t in members[member_id].subscribed_topic_ids
            for p in partitions:
                assert (t, p) not in owners, (t, p)
                owners[t, p] = member_id
    for t, subs in subscribers(members, topics).items():
        for p in range(topics[t].partitions):
            assert ((t, p) in owners) == bool(subs), (t, p)
    assert all(0 <= p < topics[t].partitions for t, p in owners)


def is_homogeneous(members: Members, topics: Topics) -> bool:
    return len({s.subscribed_topic_ids & topics.keys() for s in members.values()}) == 1


# -- properties of both assignors --------------------------------------------------------------


@pytest.mark.parametrize("name", ["uniform", "range"])
@settings(max_examples=150, deadline=None)
@given(group=groups())
def test_every_partition_goes_to_exactly_one_subscriber(
    name: str, group: tuple[Members, Topics]
) -> None:
    members, topics = group
    check_valid(members, topics, ASSIGNORS[name].assign(members, topics))


@pytest.mark.parametrize("name", ["uniform", "range"])
@settings(max_examples=100, deadline=None)
@given(group=groups())
def test_equal_input_gives_equal_output_whatever_the_order(
    name: str, group: tuple[Members, Topics]
) -> None:
    members, topics = group
    reversed_members = dict(reversed(members.items()))
    reversed_topics = dict(reversed(topics.items()))
    result = ASSIGNORS[name].assign(members, topics)
    again = ASSIGNORS[name].assign(reversed_members, reversed_topics)
    assert again == result
    assert list(again) == list(result)


@pytest.mark.parametrize("name", ["uniform", "range"])
@settings(max_examples=150, deadline=None)
@given(group=groups())
def test_an_assignment_given_back_as_the_targets_stays(
    name: str, group: tuple[Members, Topics]
) -> None:
    members, topics = group
    result = ASSIGNORS[name].assign(members, topics)
    assert ASSIGNORS[name].assign(with_targets(members, result), topics) == result


# -- uniform -----------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(group=groups(homogeneous=True))
def test_uniform_homogeneous_is_balanced_within_one(group: tuple[Members, Topics]) -> None:
    members, topics = group
    counts = sizes(UNIFORM.assign(members, topics)).values()
    assert max(counts) - min(counts) <= 1


@settings(max_examples=150, deadline=None)
@given(group=groups(homogeneous=False))
def test_uniform_heterogeneous_leaves_no_partition_worth_moving(
    group: tuple[Members, Topics],
) -> None:
    # Kafka's balance for different subscriptions: no partition could go to another
    # subscriber of its topic holding two or more partitions fewer than its owner.
    members, topics = group
    result = UNIFORM.assign(members, topics)
    counts = sizes(result)
    subs = subscribers(members, topics)
    for owner, assignment in result.items():
        for t in assignment:
            assert all(counts[owner] - counts[s] <= 1 for s in subs[t]), (owner, t)


@settings(max_examples=150, deadline=None)
@given(group=groups(homogeneous=True), newcomer=st.text("abcxyz", min_size=1, max_size=3))
def test_uniform_a_member_joining_takes_only_what_balance_needs(
    group: tuple[Members, Topics], newcomer: str
) -> None:
    members, topics = group
    if newcomer in members:
        return
    before = UNIFORM.assign(members, topics)
    shared = next(iter(members.values())).subscribed_topic_ids
    joined = with_targets(members, before)
    joined[newcomer] = MemberSubscription(shared, {})
    after = UNIFORM.assign(joined, topics)

    total = sum(sizes(before).values())
    n = len(members)
    most_lost = -(-total // n) - total // (n + 1)
    lost: set[tuple[uuid.UUID, int]] = set()
    for m, old in before.items():
        new = after[m]
        assert all(new[t] <= old.get(t, frozenset()) for t in new), m  # nothing between old members
        gone = {(t, p) for t, ps in old.items() for p in ps - new.get(t, frozenset())}
        assert len(gone) <= most_lost, m
        lost |= gone
    assert {(t, p) for t, ps in after[newcomer].items() for p in ps} == lost
    assert size(after[newcomer]) == total // (n + 1)


@settings(max_examples=150, deadline=None)
@given(group=groups(homogeneous=True), data=st.data())
def test_uniform_a_member_leaving_moves_only_its_partitions(
    group: tuple[Members, Topics], data: st.DataObject
) -> None:
    members, topics = group
    if len(members) < 2:
        return
    before = UNIFORM.assign(members, topics)
    leaver = data.draw(st.sampled_from(sorted(members)))
    rest = with_targets({m: s for m, s in members.items() if m != leaver}, before)
    after = UNIFORM.assign(rest, topics)

    gained: set[tuple[uuid.UUID, int]] = set()
    for m, old in before.items():
        if m == leaver:
            continue
        new = after[m]
        assert all(old[t] <= new.get(t, frozenset()) for t in old), m
        gained |= {(t, p) for t, ps in new.items() for p in ps - old.get(t, frozenset())}
    assert gained == {(t, p) for t, ps in before[leaver].items() for p in ps}


# -- range -------------------------------------------------------------------------------------


def range_order(members: Members) -> list[str]:
    static = sorted((s.instance_id, m) for m, s in members.items() if s.instance_id is not None)
    return [m for _, m in static] + sorted(m for m, s in members.items() if s.instance_id is None)


@settings(max_examples=150, deadline=None)
@given(group=groups())
def test_range_gives_each_subscriber_a_contiguous_range_in_order(
    group: tuple[Members, Topics],
) -> None:
    members, topics = group
    result = RANGE.assign(members, topics)
    subs = subscribers(members, topics)
    for t, meta in topics.items():
        in_order = [m for m in range_order(members) if m in subs[t]]
        if not in_order:
            continue
        quota, extra = divmod(meta.partitions, len(in_order))
        start = 0
        for i, m in enumerate(in_order):
            end = start + quota + (i < extra)
            assert result[m].get(t, frozenset()) == frozenset(range(start, end)), (t, m)
            start = end
        got = [size({t: result[m].get(t, frozenset())}) for m in in_order]
        assert max(got) - min(got) <= 1


@settings(max_examples=100, deadline=None)
@given(group=groups(homogeneous=True))
def test_range_co_partitions_topics_of_equal_size(group: tuple[Members, Topics]) -> None:
    members, topics = group
    result = RANGE.assign(members, topics)
    shared = next(iter(members.values())).subscribed_topic_ids & topics.keys()
    for m in members:
        by_count: dict[int, set[frozenset[int]]] = {}
        for t in shared:
            by_count.setdefault(topics[t].partitions, set()).add(result[m].get(t, frozenset()))
        assert all(len(sets) == 1 for sets in by_count.values()), m


# -- edge cases --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["uniform", "range"])
def test_edges(name: str) -> None:
    assignor = ASSIGNORS[name]
    t = POOL[0]
    topics = {t: TopicMetadata(t, "t", 3)}
    assert assignor.assign({}, topics) == {}
    nothing = {"a": MemberSubscription(frozenset(), {}), "b": MemberSubscription(frozenset(), {})}
    assert assignor.assign(nothing, topics) == {"a": {}, "b": {}}
    gone = {"a": MemberSubscription(frozenset({MISSING}), {MISSING: frozenset({0})})}
    assert assignor.assign(gone, topics) == {"a": {}}
    empty_topic = {t: TopicMetadata(t, "t", 0)}
    assert assignor.assign({"a": MemberSubscription(frozenset({t}), {})}, empty_topic) == {"a": {}}


def test_registry() -> None:
    assert DEFAULT_ASSIGNOR == "uniform"
    assert {name: a.name for name, a in ASSIGNORS.items()} == {
        "uniform": "uniform",
        "range": "range",
    }


# -- Kafka's answers ---------------------------------------------------------------------------


def kafka_uuid(text: str) -> uuid.UUID:
    """A topic id as Kafka's Uuid.fromString reads it (URL-safe base64, no padding)."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


# The ids of Kafka's uniform assignor tests, so topics sort as they do there.
T1 = kafka_uuid("T1-A4s3VTwiI5CTbEp6POw")
T2 = kafka_uuid("T2-B4s3VTwiI5YHbPp6YUe")
T3 = kafka_uuid("T3-CU8fVTLCz5YMkLoDQsa")
T4 = kafka_uuid("T4-Tw9fVTLCz5HbPp6YQsa")
NAMES = {T1: "t1", T2: "t2", T3: "t3", T4: "t4"}


def topics_of(**partitions: int) -> Topics:
    ids = {v: k for k, v in NAMES.items()}
    return {ids[name]: TopicMetadata(ids[name], name, n) for name, n in partitions.items()}


def member(
    topics: set[uuid.UUID],
    target: dict[uuid.UUID, set[int]] | None = None,
    instance_id: str | None = None,
) -> MemberSubscription:
    held = {t: frozenset(p) for t, p in (target or {}).items()}
    return MemberSubscription(frozenset(topics), held, instance_id)


def readable(result: GroupAssignment) -> dict[str, dict[str, list[int]]]:
    return {m: {NAMES[t]: sorted(p) for t, p in a.items()} for m, a in result.items()}


# UniformHomogeneousAssignmentBuilderTest: the cases whose answer does not hang on the
# iteration order of a Java HashSet of topic ids.
UNIFORM_HOMOGENEOUS_CASES = {
    "testFirstAssignmentNumMembersGreaterThanTotalNumPartitions": (
        {"A": member({T3}), "B": member({T3}), "C": member({T3})},
        topics_of(t3=2),
        {"A": {}, "B": {"t3": [0]}, "C": {"t3": [1]}},
    ),
    "testReassignmentForTwoMembersTwoTopicsGivenUnbalancedPrevAssignment": (
        {
            "A": member({T1, T2}, {T1: {0, 1}, T2: {0, 1}}),
            "B": member({T1, T2}, {T1: {2}, T2: {2}}),
        },
        topics_of(t1=3, t2=3),
        {"A": {"t1": [0, 1], "t2": [0]}, "B": {"t1": [2], "t2": [1, 2]}},
    ),
    "testReassignmentWhenOneMemberAddedAfterInitialAssignmentWithTwoMembersTwoTopics": (
        {
            "A": member({T1, T2}, {T1: {0, 2}, T2: {0}}),
            "B": member({T1, T2}, {T1: {1}, T2: {1, 2}}),
            "C": member({T1, T2}),
        },
        topics_of(t1=3, t2=3),
        {"A": {"t1": [0, 2]}, "B": {"t1": [1], "t2": [1]}, "C": {"t2": [0, 2]}},
    ),
    "testReassignmentWhenOneSubscriptionRemovedAfterInitialAssignmentWithTwoMembersTwoTopics": (
        {
            "A": member({T2}, {T1: {0}, T2: {0}}),
            "B": member({T2}, {T1: {1}, T2: {1}}),
        },
        topics_of(t1=2, t2=2),
        {"A": {"t2": [0]}, "B": {"t2": [1]}},
    ),
}

# UniformHeterogeneousAssignmentBuilderTest, whose members are walked in id order as here.
UNIFORM_HETEROGENEOUS_CASES = {
    "testFirstAssignmentTwoMembersTwoTopics": (
        {"A": member({T1, T3}), "B": member({T3})},
        topics_of(t1=3, t3=6),
        {"A": {"t1": [0, 1, 2], "t3": [4]}, "B": {"t3": [0, 1, 2, 3, 5]}},
    ),
    "testFirstAssignmentNumMembersGreaterThanTotalNumPartitions": (
        {"A": member({T3}), "B": member({T3}), "C": member({T1})},
        topics_of(t3=1, t1=2),
        {"A": {"t3": [0]}, "B": {}, "C": {"t1": [0, 1]}},
    ),
    "testReassignmentForTwoMembersThreeTopicsGivenUnbalancedPrevAssignment": (
        {
            "A": member({T1}, {T1: {0, 1, 2}}),
            "B": member({T1, T2}, {T1: {3}, T2: {0}}),
            "C": member({T1, T2, T3}, {T1: {4, 5}, T2: {1, 2, 3}, T3: {0, 1, 2, 3}}),
        },
        topics_of(t1=6, t2=4, t3=4),
        {
            "A": {"t1": [0, 1, 2, 5]},
            "B": {"t1": [3], "t2": [0, 1, 2, 3]},
            "C": {"t1": [4], "t3": [0, 1, 2, 3]},
        },
    ),
    "testReassignmentWhenPartitionsAreAddedForTwoMembers": (
        {
            "A": member({T1, T3}, {T1: {0, 1, 2, 3}, T3: {0, 1}}),
            "B": member({T1, T2, T3, T4}, {T2: {0, 1, 2}, T4: {0, 1, 2}}),
        },
        topics_of(t1=6, t2=5, t3=3, t4=3),
        {
            "A": {"t1": [0, 1, 2, 3, 4, 5], "t3": [0, 1, 2]},
            "B": {"t2": [0, 1, 2, 3, 4], "t4": [0, 1, 2]},
        },
    ),
    "testReassignmentWhenOneMemberAddedAndPartitionsAddedTwoMembersTwoTopics": (
        {
            "A": member({T1}, {T1: {0, 2}, T2: {0}}),
            "B": member({T1, T2}, {T1: {1}, T2: {1, 2}}),
            "C": member({T1, T2}),
        },
        topics_of(t1=6, t2=7),
        {
            "A": {"t1": [0, 2, 3, 4, 5]},
            "B": {"t1": [1], "t2": [1, 2, 6]},
            "C": {"t2": [0, 3, 4, 5]},
        },
    ),
    "testReassignmentWhenOneMemberRemovedAfterInitialAssignmentWithThreeMembersThreeTopics": (
        {
            "A": member({T1, T3}, {T1: {0, 1, 2}, T3: {0, 1}}),
            "B": member({T2}, {T2: {3, 4, 5, 6}}),
        },
        topics_of(t1=3, t2=8, t3=3),
        {"A": {"t1": [0, 1, 2], "t3": [0, 1, 2]}, "B": {"t2": [0, 1, 2, 3, 4, 5, 6, 7]}},
    ),
    "testReassignmentWhenOneSubscriptionRemovedAfterInitialAssignmentWithTwoMembersTwoTopics": (
        {
            "A": member({T1}, {T1: {0, 2}, T2: {1, 3}}),
            "B": member({T1, T2}, {T1: {1}, T2: {0, 2, 4}}),
        },
        topics_of(t1=3, t2=5),
        {"A": {"t1": [0, 1, 2]}, "B": {"t2": [0, 1, 2, 3, 4]}},
    ),
    "testFirstAssignmentWithTwoMembersIncludingOneWithoutSubscriptions": (
        {"A": member({T1}), "B": member(set())},
        topics_of(t1=3),
        {"A": {"t1": [0, 1, 2]}, "B": {}},
    ),
}

# RangeAssignorTest (the assignor as rewritten in Kafka 3.9, which ignores the targets).
RANGE_CASES = {
    "testFirstAssignmentTwoMembersTwoTopicsSameSubscriptions": (
        {"A": member({T1, T3}), "B": member({T1, T3})},
        topics_of(t1=3, t3=2),
        {"A": {"t1": [0, 1], "t3": [0]}, "B": {"t1": [2], "t3": [1]}},
    ),
    "testFirstAssignmentThreeMembersThreeTopicsDifferentSubscriptions": (
        {"A": member({T1, T2}), "B": member({T3}), "C": member({T2, T3})},
        topics_of(t1=3, t2=3, t3=2),
        {"A": {"t1": [0, 1, 2], "t2": [0, 1]}, "B": {"t3": [0]}, "C": {"t2": [2], "t3": [1]}},
    ),
    "testFirstAssignmentNumMembersGreaterThanNumPartitions": (
        {"A": member({T1, T3}), "B": member({T1, T3}), "C": member({T1, T3})},
        topics_of(t1=3, t3=2),
        {"A": {"t1": [0], "t3": [0]}, "B": {"t1": [1], "t3": [1]}, "C": {"t1": [2]}},
    ),
    "testReassignmentNumMembersGreaterThanNumPartitionsWhenOneMemberAdded": (
        {
            "A": member({T1, T2}, {T1: {0}, T2: {0}}),
            "B": member({T1, T2}, {T1: {1}, T2: {1}}),
            "C": member({T1, T2}),
        },
        topics_of(t1=2, t2=2),
        {"A": {"t1": [0], "t2": [0]}, "B": {"t1": [1], "t2": [1]}, "C": {}},
    ),
    "testReassignmentWhenOnePartitionAddedForTwoMembersTwoTopics": (
        {
            "A": member({T1, T2}, {T1: {0, 1}, T2: {0, 1}}),
            "B": member({T1, T2}, {T1: {2}, T2: {2}}),
        },
        topics_of(t1=4, t2=4),
        {"A": {"t1": [0, 1], "t2": [0, 1]}, "B": {"t1": [2, 3], "t2": [2, 3]}},
    ),
    "testReassignmentWhenOneMemberAddedAfterInitialAssignmentWithTwoMembersTwoTopics": (
        {
            "A": member({T1, T2}, {T1: {0, 1}, T2: {0, 1}}),
            "B": member({T1, T2}, {T1: {2}, T2: {2}}),
            "C": member({T1, T2}),
        },
        topics_of(t1=3, t2=3),
        {"A": {"t1": [0], "t2": [0]}, "B": {"t1": [1], "t2": [1]}, "C": {"t1": [2], "t2": [2]}},
    ),
    (
        "testReassignmentWhenOneMemberAddedAndOnePartition"
        "AfterInitialAssignmentWithTwoMembersTwoTopics"
    ): (
        {
            "A": member({T1, T2}, {T1: {0, 1}, T2: {0, 1}}),
            "B": member({T1, T2}, {T1: {2}, T2: {2}}),
            "C": member({T1}),
        },
        topics_of(t1=4, t2=3),
        {"A": {"t1": [0, 1], "t2": [0, 1]}, "B": {"t1": [2], "t2": [2]}, "C": {"t1": [3]}},
    ),
    "testReassignmentWhenOneMemberRemovedAfterInitialAssignmentWithTwoMembersTwoTopics": (
        {"B": member({T1, T2}, {T1: {2}, T2: {2}})},
        topics_of(t1=3, t2=3),
        {"B": {"t1": [0, 1, 2], "t2": [0, 1, 2]}},
    ),
    (
        "testReassignmentWhenMultipleSubscriptionsRemoved"
        "AfterInitialAssignmentWithThreeMembersTwoTopics"
    ): (
        {
            "A": member({T1}, {T1: {0, 1, 2}, T2: {0}}),
            "B": member({T1, T2, T3}, {T2: {1}}),
            "C": member({T2}, {T2: {2}, T3: {0, 1}}),
        },
        topics_of(t1=3, t2=3, t3=2),
        {
            "A": {"t1": [0, 1]},
            "B": {"t1": [2], "t2": [0, 1], "t3": [0, 1]},
            "C": {"t2": [2]},
        },
    ),
}


@pytest.mark.parametrize(
    ("name", "case"),
    [("uniform", c) for c in UNIFORM_HOMOGENEOUS_CASES.values()]
    + [("uniform", c) for c in UNIFORM_HETEROGENEOUS_CASES.values()]
    + [("range", c) for c in RANGE_CASES.values()],
    ids=[*UNIFORM_HOMOGENEOUS_CASES, *UNIFORM_HETEROGENEOUS_CASES, *RANGE_CASES],
)
def test_kafka_answers(
    name: str, case: tuple[Members, Topics, dict[str, dict[str, list[int]]]]
) -> None:
    members, topics, expected = case
    assert readable(ASSIGNORS[name].assign(members, topics)) == expected


@pytest.mark.parametrize("others", [{}, {"B": member({T1})}])
def test_range_static_member_rejoining_under_a_new_id_keeps_its_range(
    others: dict[str, MemberSubscription],
) -> None:
    # RangeAssignorTest.testStaticMembership and testMixedStaticMembership.
    topics = topics_of(t1=5)
    before_members = {
        "A": member({T1}, instance_id="instanceA"),
        "C": member({T1}, instance_id="instanceC"),
        **others,
    }
    before = RANGE.assign(before_members, topics)
    after_members = {m: s for m, s in before_members.items() if m != "A"}
    after_members["memberA1"] = member({T1}, instance_id="instanceA")
    after = RANGE.assign(after_members, topics)
    assert after["memberA1"] == before["A"]
    assert all(after[m] == before[m] for m in after_members if m != "memberA1")
