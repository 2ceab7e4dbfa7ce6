"""The "consumer" protocol type: a member's subscription, its assignment, and the leader's
range and roundrobin assignors.

The coordinator carries JoinGroup metadata and SyncGroup assignments as opaque bytes; Kafka's
consumers agree among themselves on their layout (ConsumerProtocolSubscription and
ConsumerProtocolAssignment, versions 0-3) and on how the elected leader divides partitions.
Simulated members speak both exactly as a Java consumer does, so that they can share a group
with real consumers and a coordinator sees from them what it would see in production.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.primitives import Reader, Writer

PROTOCOL_TYPE = "consumer"
LOWEST_VERSION = 0
HIGHEST_VERSION = 3

_T = TypeVar("_T")

# The smallest encodings an array element can have, to refuse an impossible count before
# allocating: a string is at least its int16 length; a topic's partitions at least a string
# and an int32 count.
_MIN_STRING = 2
_MIN_INT32 = 4
_MIN_TOPIC_PARTITIONS = _MIN_STRING + 4


@dataclass(frozen=True, slots=True)
class Subscription:
    """A decoded ConsumerProtocolSubscription. `version` is the one on the wire, which may be
    newer than HIGHEST_VERSION; fields its sender's version lacks hold Kafka's defaults."""

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: dict[str, list[int]] = field(default_factory=dict)
    generation_id: int = -1
    rack_id: str | None = None
    version: int = 1


# -- the consumer protocol's bytes ---------------------------------------------------------


def encode_subscription(
    topics: list[str],
    user_data: bytes | None = None,
    owned: dict[str, list[int]] | None = None,
    generation_id: int = -1,
    rack_id: str | None = None,
    version: int = 1,
) -> bytes:
    """A ConsumerProtocolSubscription of `version` (0-3).

    Topics and owned partitions are written sorted, as Kafka's ConsumerProtocol writes them: one
    subscription then has one encoding, and a coordinator that compares a rejoining member's
    metadata byte for byte sees no change where there is none. Fields newer than `version` are
    ignorable in Kafka's schema and are left out, as Kafka leaves them out.
    """
    _check_version(version)
    w = Writer()
    w.int16(version)
    w.array_length(len(topics), compact=False)
    for topic in sorted(topics, key=_java_order):
        w.string(topic)
    w.nullable_bytes(user_data)
    if version >= 1:
        owned = owned or {}
        _write_topic_partitions(
            w, {topic: sorted(owned[topic]) for topic in sorted(owned, key=_java_order)}
        )
    if version >= 2:
        w.int32(generation_id)
    if version >= 3:
        w.nullable_string(rack_id)
    return w.getvalue()


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    """Read a ConsumerProtocolSubscription; a newer version than 3 is read as version 3.

    Bytes after the fields read are ignored, as Kafka ignores them: that is what lets a newer
    version add fields at the end. Anything else amiss raises ProtocolError.
    """
    r = Reader(data)
    version = _read_version(r, "ConsumerProtocolSubscription")
    try:
        topics = _field(r, "topics", _read_topics)
        user_data = _field(r, "user_data", Reader.nullable_bytes)
        owned = _field(r, "owned_partitions", _read_topic_partitions) if version >= 1 else {}
        generation_id = _field(r, "generation_id", Reader.int32) if version >= 2 else -1
        rack_id = _field(r, "rack_id", Reader.nullable_string) if version >= 3 else None
    except ProtocolError as exc:
        raise exc.at(f"ConsumerProtocolSubscription v{version}") from None
    return Subscription(topics, user_data, owned, generation_id, rack_id, version)


def encode_assignment(
    partitions: dict[str, list[int]], user_data: bytes | None = None, version: int = 1
) -> bytes:
    """A ConsumerProtocolAssignment of `version` (0-3; all four have the same fields).

    Topics and partitions keep the order given, as Kafka's ConsumerProtocol keeps the order its
    assignor gave; topics with no partitions are left out, as a Java leader never writes them.
    """
    _check_version(version)
    w = Writer()
    w.int16(version)
    _write_topic_partitions(w, {topic: ps for topic, ps in partitions.items() if ps})
    w.nullable_bytes(user_data)
    return w.getvalue()


def decode_assignment(data: bytes | bytearray | memoryview) -> dict[str, list[int]]:
    """The partitions of a ConsumerProtocolAssignment, by topic, in the order written.

    A newer version than 3 is read as version 3 and bytes after the fields read are ignored,
    as Kafka does; a topic written twice has its partitions joined, as Kafka flattens them.
    """
    r = Reader(data)
    version = _read_version(r, "ConsumerProtocolAssignment")
    try:
        partitions = _field(r, "assigned_partitions", _read_topic_partitions)
        _field(r, "user_data", Reader.nullable_bytes)
    except ProtocolError as exc:
        raise exc.at(f"ConsumerProtocolAssignment v{version}") from None
    return partitions


def _check_version(version: int) -> None:
    if not LOWEST_VERSION <= version <= HIGHEST_VERSION:
        raise ProtocolError(
            f"consumer protocol version {version} is not one of {LOWEST_VERSION}-{HIGHEST_VERSION}"
        )


def _read_version(r: Reader, what: str) -> int:
    try:
        version = r.int16()
    except ProtocolError as exc:
        raise exc.within("version").at(what) from None
    if version < LOWEST_VERSION:
        raise ProtocolError(f"unsupported version {version}", "version", what)
    return version


def _field(r: Reader, name: str, read: Callable[[Reader], _T]) -> _T:
    try:
        return read(r)
    except ProtocolError as exc:
        raise exc.within(name) from None


def _array_length(r: Reader, min_item_size: int) -> int:
    n = r.array_length(compact=False, min_item_size=min_item_size)
    if n < 0:
        raise ProtocolError("array is null but is not nullable")
    return n


def _read_topics(r: Reader) -> list[str]:
    return [_field(r, f"[{i}]", Reader.string) for i in range(_array_length(r, _MIN_STRING))]


def _read_partitions(r: Reader) -> list[int]:
    return [r.int32() for _ in range(_array_length(r, _MIN_INT32))]


def _read_topic_partitions(r: Reader) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i in range(_array_length(r, _MIN_TOPIC_PARTITIONS)):
        try:
            topic = _field(r, "topic", Reader.string)
            partitions = _field(r, "partitions", _read_partitions)
        except ProtocolError as exc:
            raise exc.within(f"[{i}]") from None
        out.setdefault(topic, []).extend(partitions)
    return out


def _write_topic_partitions(w: Writer, partitions: Mapping[str, list[int]]) -> None:
    w.array_length(len(partitions), compact=False)
    for topic, ps in partitions.items():
        w.string(topic)
        w.array_length(len(ps), compact=False)
        for p in ps:
            w.int32(p)


# -- assignors -----------------------------------------------------------------------------

Assignment = dict[str, dict[str, list[int]]]
Assignor = Callable[[Mapping[str, Collection[str]], Mapping[str, int]], Assignment]


def range_assign(
    subscriptions: Mapping[str, Collection[str]], partitions: Mapping[str, int]
) -> Assignment:
    """Kafka's RangeAssignor: per topic, its partitions in order cut into consecutive ranges
    for its subscribed members in member id order, the first `count % members` one longer.

    `subscriptions` maps member id to subscribed topics, `partitions` topic to partition count;
    topics without a count are skipped. The answer names every member, each topic's partitions
    sorted; a topic a member gets nothing of is absent from its entry.
    """
    _check_counts(partitions)
    members = sorted(subscriptions, key=_java_order)
    result: Assignment = {member: {} for member in members}
    members_of: dict[str, list[str]] = {}
    for member in members:
        for topic in set(subscriptions[member]):
            members_of.setdefault(topic, []).append(member)
    for topic in sorted(members_of, key=_java_order):
        count = partitions.get(topic)
        if count is None:
            continue
        subscribed = members_of[topic]
        each, extra = divmod(count, len(subscribed))
        start = 0
        for i, member in enumerate(subscribed):
            end = start + each + (1 if i < extra else 0)
            if end > start:
                result[member][topic] = list(range(start, end))
            start = end
    return result


def round_robin_assign(
    subscriptions: Mapping[str, Collection[str]], partitions: Mapping[str, int]
) -> Assignment:
    """Kafka's RoundRobinAssignor: every subscribed topic-partition, by topic then partition,
    dealt to the members in member id order around a circle that passes over a member not
    subscribed to the partition's topic.

    Arguments and answer are as for range_assign.
    """
    _check_counts(partitions)
    members = sorted(subscriptions, key=_java_order)
    subscribed = [set(subscriptions[member]) for member in members]
    result: Assignment = {member: {} for member in members}
    topics = sorted(set().union(*subscribed), key=_java_order)
    at = 0
    for topic in topics:
        count = partitions.get(topic)
        if count is None:
            continue
        for partition in range(count):
            # Ends: the topic came from some member's subscription.
            while topic not in subscribed[at]:
                at = (at + 1) % len(members)
            result[members[at]].setdefault(topic, []).append(partition)
            at = (at + 1) % len(members)
    return result


ASSIGNORS: dict[str, Assignor] = {"range": range_assign, "roundrobin": round_robin_assign}


def _check_counts(partitions: Mapping[str, int]) -> None:
    for topic, count in partitions.items():
        if count < 0:
            raise ValueError(f"topic {topic!r} has a partition count of {count}")


def _java_order(name: str) -> bytes:
    """Sort key giving Java's String order (by UTF-16 code unit), which Kafka's assignors use:
    it differs from Python's code point order once characters beyond U+FFFF meet U+E000-U+FFFF.
    """
    return name.encode("utf-16-be", "surrogatepass")
