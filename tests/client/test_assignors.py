"""The consumer protocol's bytes and the range and roundrobin assignors.

Bytes: known encodings built by hand, round trips of every version, Kafka's rule for newer
versions, refusals of damaged input, and agreement with the server's own subscription parser
and with kafka-python's encoders. Assignors: the cases of Kafka's own assignor tests, the
properties every assignment must have, and agreement with kafka-python's assignors.
"""

from __future__ import annotations

import contextlib
import struct
import types
import warnings
from collections import Counter
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastcoord.client.assignors import (
    ASSIGNORS,
    HIGHEST_VERSION,
    Assignment,
    Assignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
    round_robin_assign,
)
from fastcoord.core.offsets import parse_subscription_topics
from fastcoord.protocol.errors import ProtocolError
from tests.core.harness import subscription as harness_subscription

# kafka-python reads its JSON schemas with importlib.resources' legacy API when its classes are
# created, which Python 3.11 and 3.12 deprecate; the suite turns warnings into errors.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.protocol.consumer.metadata import (
        ConsumerProtocolAssignment as KpAssignment,
    )
    from kafka.protocol.consumer.metadata import (
        ConsumerProtocolSubscription as KpSubscription,
    )
    from kafka.protocol.old.consumer_protocol import (
        ConsumerProtocolMemberAssignment_v0,
        ConsumerProtocolMemberMetadata_v0,
    )

VERSIONS = range(HIGHEST_VERSION + 1)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def s(text: str) -> bytes:
    data = text.encode()
    return i16(len(data)) + data


NULL_BYTES = i32(-1)

# -- strategies ----------------------------------------------------------------------------

int32s = st.integers(-(2**31), 2**31 - 1)
names = st.text(max_size=12)
user_datas = st.none() | st.binary(max_size=16)
topic_partitions = st.dictionaries(names, st.lists(int32s, max_size=5), max_size=4)
racks = st.none() | st.text(max_size=8)
# encode_subscription's arguments before the version.
SubscriptionArgs = tuple[list[str], bytes | None, dict[str, list[int]], int, str | None]


@st.composite
def subscriptions_args(
    draw: st.DrawFn,
) -> SubscriptionArgs:
    return (
        draw(st.lists(names, max_size=6)),
        draw(user_datas),
        draw(topic_partitions),
        draw(int32s),
        draw(racks),
    )


def java_sorted(items: list[str]) -> list[str]:
    return sorted(items, key=lambda t: t.encode("utf-16-be"))


def expected_subscription(
    version: int,
    topics: list[str],
    user_data: bytes | None,
    owned: dict[str, list[int]],
    generation_id: int,
    rack_id: str | None,
) -> Subscription:
    """What reading back a subscription of `version` gives: sorted, newer fields defaulted."""
    return Subscription(
        topics=java_sorted(topics),
        user_data=user_data,
        owned_partitions={t: sorted(owned[t]) for t in java_sorted(list(owned))}
        if version >= 1
        else {},
        generation_id=generation_id if version >= 2 else -1,
        rack_id=rack_id if version >= 3 else None,
        version=version,
    )


# -- known bytes ---------------------------------------------------------------------------


def test_a_version_0_subscription_has_known_bytes() -> None:
    assert encode_subscription(["b", "a"], version=0) == (
        i16(0) + i32(2) + s("a") + s("b") + NULL_BYTES
    )
    assert encode_subscription(["t"], user_data=b"ud", version=0) == (
        i16(0) + i32(1) + s("t") + i32(2) + b"ud"
    )


def test_a_version_1_subscription_has_known_bytes() -> None:
    encoded = encode_subscription(["t"], b"\x07", owned={"u": [3, 1], "t": [0]}, version=1)
    assert encoded == (
        i16(1)
        + i32(1)
        + s("t")
        + i32(1)
        + b"\x07"
        + i32(2)
        + s("t")
        + i32(1)
        + i32(0)
        + s("u")
        + i32(2)
        + i32(1)
        + i32(3)
    )
    assert encode_subscription([], version=1) == i16(1) + i32(0) + NULL_BYTES + i32(0)


def test_versions_2_and_3_add_the_generation_and_the_rack() -> None:
    v1 = encode_subscription(["t"], generation_id=9, rack_id="r1", version=1)
    assert encode_subscription(["t"], generation_id=9, rack_id="r1", version=2) == (
        i16(2) + v1[2:] + i32(9)
    )
    assert encode_subscription(["t"], generation_id=9, rack_id="r1", version=3) == (
        i16(3) + v1[2:] + i32(9) + s("r1")
    )
    assert encode_subscription(["t"], version=3).endswith(i32(-1) + i16(-1))


def test_an_assignment_has_known_bytes_in_every_version() -> None:
    body = i32(2) + s("b") + i32(2) + i32(2) + i32(0) + s("a") + i32(1) + i32(5)
    for version in VERSIONS:
        assert encode_assignment({"b": [2, 0], "a": [5]}, version=version) == (
            i16(version) + body + NULL_BYTES
        )
    assert encode_assignment({}, b"x", version=0) == i16(0) + i32(0) + i32(1) + b"x"
    # A topic with nothing in it is not written, as Kafka flattens assignments to partitions.
    assert encode_assignment({"a": [], "b": [1]}, version=0) == (
        i16(0) + i32(1) + s("b") + i32(1) + i32(1) + NULL_BYTES
    )


def test_fields_newer_than_the_version_are_left_out() -> None:
    plain = encode_subscription(["t"], version=0)
    assert encode_subscription(["t"], None, {"t": [1]}, 4, "r", version=0) == plain
    assert decode_subscription(plain) == Subscription(["t"], version=0)


def test_the_coordinators_test_harness_speaks_the_same_version_0() -> None:
    assert decode_subscription(harness_subscription("x", "y")) == Subscription(
        ["x", "y"], version=0
    )


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@given(args=subscriptions_args())
def test_subscriptions_round_trip_in_every_version(
    version: int,
    args: SubscriptionArgs,
) -> None:
    encoded = encode_subscription(*args, version=version)
    assert decode_subscription(encoded) == expected_subscription(version, *args)
    assert decode_subscription(bytearray(encoded)) == decode_subscription(memoryview(encoded))


@pytest.mark.parametrize("version", VERSIONS)
@given(partitions=topic_partitions, user_data=user_datas)
def test_assignments_round_trip_in_every_version(
    version: int, partitions: dict[str, list[int]], user_data: bytes | None
) -> None:
    decoded = decode_assignment(encode_assignment(partitions, user_data, version))
    assert decoded == {t: ps for t, ps in partitions.items() if ps}
    assert list(decoded) == [t for t, ps in partitions.items() if ps]


# -- newer versions, trailing bytes --------------------------------------------------------


@given(
    args=subscriptions_args(),
    version=st.integers(HIGHEST_VERSION + 1, 2**15 - 1),
    tail=st.binary(max_size=32),
)
def test_a_newer_subscription_is_read_as_the_newest_known(
    args: SubscriptionArgs,
    version: int,
    tail: bytes,
) -> None:
    newest = encode_subscription(*args, version=HIGHEST_VERSION)
    decoded = decode_subscription(i16(version) + newest[2:] + tail)
    expected = expected_subscription(HIGHEST_VERSION, *args)
    assert decoded == Subscription(
        expected.topics,
        expected.user_data,
        expected.owned_partitions,
        expected.generation_id,
        expected.rack_id,
        version,
    )


@given(
    partitions=topic_partitions,
    version=st.integers(HIGHEST_VERSION + 1, 2**15 - 1),
    tail=st.binary(max_size=32),
)
def test_a_newer_assignment_is_read_as_the_newest_known(
    partitions: dict[str, list[int]], version: int, tail: bytes
) -> None:
    newest = encode_assignment(partitions, b"ud", HIGHEST_VERSION)
    decoded = decode_assignment(i16(version) + newest[2:] + tail)
    assert decoded == {t: ps for t, ps in partitions.items() if ps}


@pytest.mark.parametrize("version", VERSIONS)
def test_bytes_after_the_known_fields_are_ignored_as_kafka_ignores_them(version: int) -> None:
    sub = encode_subscription(["t"], b"u", {"t": [1]}, 3, "r", version)
    assert decode_subscription(sub + b"\x00\x01more") == decode_subscription(sub)
    assignment = encode_assignment({"t": [1]}, None, version)
    assert decode_assignment(assignment + b"\xff") == {"t": [1]}


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_is_refused(version: int) -> None:
    sub = encode_subscription(["t", "ü"], b"ud", {"t": [1, 2]}, 7, "rack", version)
    assignment = encode_assignment({"t": [1, 2], "u": [0]}, b"ud", version)
    for data, decode in ((sub, decode_subscription), (assignment, decode_assignment)):
        for end in range(len(data)):
            with pytest.raises(ProtocolError):
                decode(data[:end])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "ConsumerProtocolSubscription: version: int16 needs 2 bytes but 0 are left"),
        (i16(-1) + i32(0) + NULL_BYTES, "version: unsupported version -1"),
        (i16(0) + i32(-1) + NULL_BYTES, "v0: topics: array is null but is not nullable"),
        (i16(0) + i32(-2) + NULL_BYTES, "v0: topics: array has invalid length -2"),
        (i16(0) + i32(2**31 - 1) + NULL_BYTES, "topics: array claims 2147483647 elements"),
        (i16(0) + i32(1) + i16(-1) + NULL_BYTES, "topics[0]: non-nullable string"),
        (i16(0) + i32(1) + i16(1) + b"\xff" + NULL_BYTES, "topics[0]: string is not valid UTF-8"),
        (i16(0) + i32(0) + i32(-2), "user_data: bytes has invalid length -2"),
        (i16(1) + i32(0) + NULL_BYTES + i32(-1), "v1: owned_partitions: array is null"),
        (
            i16(1) + i32(0) + NULL_BYTES + i32(1) + s("t") + i32(-1),
            "owned_partitions[0].partitions: array is null",
        ),
        (
            i16(1) + i32(0) + NULL_BYTES + i32(1) + s("t") + i32(3) + i32(1),
            "owned_partitions[0].partitions: array claims 3 elements",
        ),
        (i16(3) + i32(0) + NULL_BYTES + i32(0) + i32(1) + i16(-2), "rack_id: string has invalid"),
    ],
)
def test_malformed_subscriptions_are_refused_with_the_reason(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match="ConsumerProtocolSubscription") as info:
        decode_subscription(data)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00", "ConsumerProtocolAssignment: version: int16 needs 2 bytes"),
        (i16(-3) + i32(0) + NULL_BYTES, "version: unsupported version -3"),
        (i16(1) + i32(-1) + NULL_BYTES, "v1: assigned_partitions: array is null"),
        (i16(1) + i32(1) + s("t") + i32(-1) + NULL_BYTES, "assigned_partitions[0].partitions"),
        (i16(1) + i32(1) + i16(-1) + i32(0) + NULL_BYTES, "assigned_partitions[0].topic"),
        (i16(2) + i32(0) + i32(5) + b"abc", "v2: user_data: bytes needs 5 bytes but 3 are left"),
    ],
)
def test_malformed_assignments_are_refused_with_the_reason(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_assignment(data)
    assert message in str(info.value)


@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_protocol_error(data: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        with contextlib.suppress(ProtocolError):
            decode(data)


def test_a_topic_written_twice_in_an_assignment_has_its_partitions_joined() -> None:
    data = i16(0) + i32(2) + s("t") + i32(1) + i32(4) + s("t") + i32(1) + i32(0) + NULL_BYTES
    assert decode_assignment(data) == {"t": [4, 0]}


@pytest.mark.parametrize("version", [-1, HIGHEST_VERSION + 1])
def test_only_known_versions_are_encoded(version: int) -> None:
    with pytest.raises(ProtocolError, match="version"):
        encode_subscription(["t"], version=version)
    with pytest.raises(ProtocolError, match="version"):
        encode_assignment({"t": [0]}, version=version)


def test_values_that_do_not_fit_their_field_are_refused() -> None:
    with pytest.raises(ProtocolError):
        encode_assignment({"t": [2**31]})
    with pytest.raises(ProtocolError):
        encode_subscription(["t"], generation_id=-(2**31) - 1, version=2)
    with pytest.raises(ProtocolError):
        encode_subscription(["x" * (2**15)])


# -- the server's parser -------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@given(args=subscriptions_args())
def test_the_servers_parser_reads_the_topics_the_encoder_writes(
    version: int,
    args: SubscriptionArgs,
) -> None:
    encoded = encode_subscription(*args, version=version)
    assert parse_subscription_topics(encoded) == java_sorted(args[0])
    assert parse_subscription_topics(encoded) == decode_subscription(encoded).topics


# -- kafka-python's encoders ---------------------------------------------------------------


@given(topics=st.lists(names, max_size=5), user_data=st.binary(max_size=8))
def test_kafka_pythons_version_0_metadata_is_byte_for_byte_the_same(
    topics: list[str], user_data: bytes
) -> None:
    ordered = java_sorted(topics)
    theirs = ConsumerProtocolMemberMetadata_v0(0, ordered, user_data).encode()
    assert encode_subscription(topics, user_data, version=0) == theirs
    decoded = ConsumerProtocolMemberMetadata_v0.decode(theirs)
    assert (decoded.version, decoded.topics, decoded.user_data) == (0, ordered, user_data)


@given(partitions=topic_partitions, user_data=st.binary(max_size=8))
def test_kafka_pythons_version_0_assignment_is_byte_for_byte_the_same(
    partitions: dict[str, list[int]], user_data: bytes
) -> None:
    written = [(t, ps) for t, ps in partitions.items() if ps]
    theirs = ConsumerProtocolMemberAssignment_v0(0, written, user_data).encode()
    assert encode_assignment(partitions, user_data, 0) == theirs
    assert decode_assignment(theirs) == dict(written)
    decoded = ConsumerProtocolMemberAssignment_v0.decode(theirs)
    assert [(t, ps) for t, ps in decoded.assigned_partitions] == written


@pytest.mark.parametrize("version", VERSIONS)
@given(args=subscriptions_args())
def test_kafka_pythons_subscription_agrees_in_every_version(
    version: int,
    args: SubscriptionArgs,
) -> None:
    expected = expected_subscription(version, *args)
    theirs = KpSubscription(
        version=version,
        topics=expected.topics,
        user_data=args[1],
        owned_partitions=[
            KpSubscription.TopicPartition(topic=t, partitions=ps)
            for t, ps in expected.owned_partitions.items()
        ],
        generation_id=args[3],
        rack_id=args[4],
    )
    ours = encode_subscription(*args, version=version)
    assert ours == theirs.encode()
    assert decode_subscription(theirs.encode()) == expected
    decoded = KpSubscription.decode(ours)
    assert decoded.topics == expected.topics
    assert decoded.user_data == expected.user_data
    assert {tp.topic: tp.partitions for tp in decoded.owned_partitions} == (
        expected.owned_partitions
    )
    assert (decoded.generation_id, decoded.rack_id) == (expected.generation_id, expected.rack_id)


@pytest.mark.parametrize("version", VERSIONS)
@given(partitions=topic_partitions, user_data=user_datas)
def test_kafka_pythons_assignment_agrees_in_every_version(
    version: int, partitions: dict[str, list[int]], user_data: bytes | None
) -> None:
    written = {t: ps for t, ps in partitions.items() if ps}
    theirs = KpAssignment(
        version=version,
        assigned_partitions=[
            KpAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in written.items()
        ],
        user_data=user_data,
    ).encode()
    assert encode_assignment(partitions, user_data, version) == theirs
    assert decode_assignment(theirs) == written
    decoded = KpAssignment.decode(encode_assignment(partitions, user_data, version))
    assert {tp.topic: tp.partitions for tp in decoded.assigned_partitions} == written
    assert decoded.user_data == user_data


# -- assignors: Kafka's cases --------------------------------------------------------------

BOTH = pytest.mark.parametrize("assign", [range_assign, round_robin_assign])


def test_the_registry_uses_kafkas_protocol_names() -> None:
    assert {"range": range_assign, "roundrobin": round_robin_assign} == ASSIGNORS


@BOTH
def test_one_consumer_no_topic(assign: Assignor) -> None:
    assert assign({"consumer": []}, {}) == {"consumer": {}}


@BOTH
def test_one_consumer_nonexistent_topic(assign: Assignor) -> None:
    assert assign({"consumer": ["topic"]}, {}) == {"consumer": {}}


@BOTH
def test_one_consumer_one_topic(assign: Assignor) -> None:
    assert assign({"consumer": ["topic"]}, {"topic": 3}) == {"consumer": {"topic": [0, 1, 2]}}


@BOTH
def test_only_partitions_of_subscribed_topics_are_assigned(assign: Assignor) -> None:
    assert assign({"consumer": ["topic"]}, {"topic": 3, "other": 3}) == {
        "consumer": {"topic": [0, 1, 2]}
    }


@BOTH
def test_one_consumer_multiple_topics(assign: Assignor) -> None:
    assert assign({"consumer": ["topic1", "topic2"]}, {"topic1": 1, "topic2": 2}) == {
        "consumer": {"topic1": [0], "topic2": [0, 1]}
    }


@BOTH
def test_two_consumers_one_topic_one_partition(assign: Assignor) -> None:
    subscriptions = {"consumer1": ["topic"], "consumer2": ["topic"]}
    assert assign(subscriptions, {"topic": 1}) == {"consumer1": {"topic": [0]}, "consumer2": {}}


@BOTH
def test_two_consumers_one_topic_two_partitions(assign: Assignor) -> None:
    subscriptions = {"consumer2": ["topic"], "consumer1": ["topic"]}
    assert assign(subscriptions, {"topic": 2}) == {
        "consumer1": {"topic": [0]},
        "consumer2": {"topic": [1]},
    }


@BOTH
def test_multiple_consumers_mixed_topics(assign: Assignor) -> None:
    subscriptions = {
        "consumer1": ["topic1"],
        "consumer2": ["topic1", "topic2"],
        "consumer3": ["topic1"],
    }
    assert assign(subscriptions, {"topic1": 3, "topic2": 2}) == {
        "consumer1": {"topic1": [0]},
        "consumer2": {"topic1": [1], "topic2": [0, 1]},
        "consumer3": {"topic1": [2]},
    }


def test_range_two_consumers_two_topics_six_partitions() -> None:
    subscriptions = {"consumer1": ["topic1", "topic2"], "consumer2": ["topic1", "topic2"]}
    assert range_assign(subscriptions, {"topic1": 3, "topic2": 3}) == {
        "consumer1": {"topic1": [0, 1], "topic2": [0, 1]},
        "consumer2": {"topic1": [2], "topic2": [2]},
    }


def test_range_dynamic_members_in_member_id_order() -> None:
    # Kafka's persistent-assignment case with every member dynamic: four members, topics of
    # five and four partitions.
    subscriptions = {f"consumer{i}": ["topic1", "topic2"] for i in (4, 2, 3, 1)}
    assert range_assign(subscriptions, {"topic1": 5, "topic2": 4}) == {
        "consumer1": {"topic1": [0, 1], "topic2": [0]},
        "consumer2": {"topic1": [2], "topic2": [1]},
        "consumer3": {"topic1": [3], "topic2": [2]},
        "consumer4": {"topic1": [4], "topic2": [3]},
    }


def test_round_robin_two_consumers_two_topics_six_partitions() -> None:
    subscriptions = {"consumer1": ["topic1", "topic2"], "consumer2": ["topic1", "topic2"]}
    assert round_robin_assign(subscriptions, {"topic1": 3, "topic2": 3}) == {
        "consumer1": {"topic1": [0, 2], "topic2": [1]},
        "consumer2": {"topic1": [1], "topic2": [0, 2]},
    }


def test_round_robin_passes_over_members_not_subscribed() -> None:
    # Kafka's RoundRobinAssignor example of unequal subscriptions.
    subscriptions = {"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]}
    assert round_robin_assign(subscriptions, {"t0": 1, "t1": 2, "t2": 3}) == {
        "C0": {"t0": [0]},
        "C1": {"t1": [0]},
        "C2": {"t1": [1], "t2": [0, 1, 2]},
    }


def test_round_robin_four_members_two_topics() -> None:
    # Kafka's persistent-assignment case with every member dynamic.
    subscriptions = {f"consumer{i}": ["topic1", "topic2"] for i in (3, 1, 4, 2)}
    assert round_robin_assign(subscriptions, {"topic1": 3, "topic2": 3}) == {
        "consumer1": {"topic1": [0], "topic2": [1]},
        "consumer2": {"topic1": [1], "topic2": [2]},
        "consumer3": {"topic1": [2]},
        "consumer4": {"topic2": [0]},
    }


@BOTH
def test_members_are_ordered_as_java_orders_strings(assign: Assignor) -> None:
    # Java compares UTF-16 code units: U+10000 (a surrogate pair, 0xD800 0xDC00) sorts before
    # U+FFFF, though its code point is higher.
    assert assign({"\uffff": ["t"], "\U00010000": ["t"]}, {"t": 1}) == {
        "\U00010000": {"t": [0]},
        "\uffff": {},
    }


@BOTH
def test_a_topic_with_no_partitions_and_a_negative_count(assign: Assignor) -> None:
    assert assign({"a": ["t", "u"]}, {"t": 0, "u": 1}) == {"a": {"u": [0]}}
    with pytest.raises(ValueError, match="partition count"):
        assign({"a": ["t"]}, {"t": -1})


@BOTH
def test_no_members_no_assignment(assign: Assignor) -> None:
    assert assign({}, {"t": 3}) == {}


# -- assignors: properties -----------------------------------------------------------------

TOPICS = ["a", "b", "c", "d", "e"]
member_ids = st.lists(st.text(min_size=1, max_size=6), unique=True, max_size=8)
counts = st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 24))


@st.composite
def groups(draw: st.DrawFn) -> tuple[dict[str, list[str]], dict[str, int]]:
    members = draw(member_ids)
    subscriptions = {m: draw(st.lists(st.sampled_from(TOPICS), max_size=6)) for m in members}
    return subscriptions, draw(counts)


def owners(assignment: Assignment) -> Counter[tuple[str, int]]:
    return Counter(
        (topic, p) for topics in assignment.values() for topic, ps in topics.items() for p in ps
    )


@BOTH
@given(group=groups())
def test_every_subscribed_partition_goes_to_one_subscribed_member(
    assign: Assignor, group: tuple[dict[str, list[str]], dict[str, int]]
) -> None:
    subscriptions, partitions = group
    assignment = assign(subscriptions, partitions)
    assert list(assignment) == java_sorted(list(subscriptions))
    subscribed = {t for topics in subscriptions.values() for t in topics}
    assert owners(assignment) == Counter(
        (t, p) for t in subscribed if t in partitions for p in range(partitions[t])
    )
    for member, topics in assignment.items():
        for topic, ps in topics.items():
            assert topic in subscriptions[member]
            assert ps == sorted(ps) and ps


@BOTH
@given(group=groups(), data=st.data())
def test_the_answer_does_not_depend_on_the_order_of_the_input(
    assign: Assignor, group: tuple[dict[str, list[str]], dict[str, int]], data: st.DataObject
) -> None:
    subscriptions, partitions = group
    shuffled = {
        m: data.draw(st.permutations(subscriptions[m]))
        for m in data.draw(st.permutations(list(subscriptions)))
    }
    reordered = dict(reversed(partitions.items()))
    first, second = assign(subscriptions, partitions), assign(shuffled, reordered)
    assert first == second
    assert [list(t) for t in first.values()] == [list(t) for t in second.values()]


@given(group=groups())
def test_range_gives_each_topics_members_counts_within_one(
    group: tuple[dict[str, list[str]], dict[str, int]],
) -> None:
    subscriptions, partitions = group
    assignment = range_assign(subscriptions, partitions)
    for topic in partitions:
        members = [m for m, topics in subscriptions.items() if topic in topics]
        sizes = [len(assignment[m].get(topic, [])) for m in members]
        if sizes:
            assert max(sizes) - min(sizes) <= 1


@given(
    members=member_ids,
    topics=st.lists(st.sampled_from(TOPICS), min_size=1, unique=True),
    partitions=counts,
)
def test_round_robin_with_identical_subscriptions_gives_counts_within_one(
    members: list[str], topics: list[str], partitions: dict[str, int]
) -> None:
    assignment = round_robin_assign(dict.fromkeys(members, topics), partitions)
    sizes = [sum(len(ps) for ps in t.values()) for t in assignment.values()]
    if sizes:
        assert max(sizes) - min(sizes) <= 1


# -- assignors: kafka-python's ---------------------------------------------------------------


def kafka_python(
    assignor: type[RangePartitionAssignor] | type[RoundRobinPartitionAssignor],
) -> Callable[[dict[str, list[str]], dict[str, int]], Assignment]:
    def assign(subscriptions: dict[str, list[str]], partitions: dict[str, int]) -> Assignment:
        cluster = types.SimpleNamespace(
            partitions_for_topic=lambda t: set(range(partitions[t])) if t in partitions else None
        )
        members = [
            types.SimpleNamespace(
                member_id=m, group_instance_id=None, metadata=types.SimpleNamespace(topics=ts)
            )
            for m, ts in subscriptions.items()
        ]
        answer = assignor.assign(cluster, members)
        return {
            m: {t: list(ps) for t, ps in a.assigned_partitions if ps} for m, a in answer.items()
        }

    return assign


@given(
    members=st.lists(st.from_regex(r"[a-z0-9-]{1,6}", fullmatch=True), unique=True, max_size=8),
    data=st.data(),
    partitions=counts,
)
def test_kafka_pythons_range_assignor_agrees(
    members: list[str], data: st.DataObject, partitions: dict[str, int]
) -> None:
    subscriptions = {
        m: data.draw(st.lists(st.sampled_from(TOPICS), unique=True, max_size=5)) for m in members
    }
    theirs = kafka_python(RangePartitionAssignor)
    assert range_assign(subscriptions, partitions) == theirs(subscriptions, partitions)


@given(
    members=st.lists(st.from_regex(r"[a-z0-9-]{1,6}", fullmatch=True), unique=True, max_size=8),
    topics=st.lists(st.sampled_from(TOPICS), unique=True, max_size=5),
    partitions=counts,
)
def test_kafka_pythons_round_robin_assignor_agrees_on_identical_subscriptions(
    members: list[str], topics: list[str], partitions: dict[str, int]
) -> None:
    # Only identical subscriptions: kafka-python's RoundRobinPartitionAssignor fails with a
    # KeyError when it has to pass over a member not subscribed to a topic.
    subscriptions = dict.fromkeys(members, topics)
    theirs = kafka_python(RoundRobinPartitionAssignor)
    assert round_robin_assign(subscriptions, partitions) == theirs(subscriptions, partitions)
