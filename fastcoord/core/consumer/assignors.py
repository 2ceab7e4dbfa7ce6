"""The server-side assignors of the consumer group protocol: Kafka's `uniform` and `range`.

A KIP-848 member names an assignor in ConsumerGroupHeartbeat and the coordinator, not
the client, computes the group's target assignment with it. Clients expect the broker's
behaviour, so both follow Kafka's group coordinator (UniformAssignor with its homogeneous
and heterogeneous builders, and RangeAssignor as rewritten in Kafka 3.9), with one change
of tie-breaking: members are taken in member id order and topics in topic id order
wherever Kafka walks a Java HashMap, so that equal input gives equal output.

Rack awareness is left out: `rack_id` is accepted and ignored, and TopicMetadata carries
no replica racks. The results are Kafka's for groups where no member or no partition has
a rack.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, final

from fastcoord.core.consumer.assignment import Assignment

GroupAssignment = dict[str, dict[uuid.UUID, frozenset[int]]]


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    subscribed_topic_ids: frozenset[uuid.UUID]
    target: Assignment  # the member's current target assignment; {} for a new member
    instance_id: str | None = None
    rack_id: str | None = None


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    partitions: int


class PartitionAssignor(Protocol):
    name: str

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        topics: Mapping[uuid.UUID, TopicMetadata],
    ) -> GroupAssignment:
        """Every member id appears in the result, with {} when it gets nothing; topics
        absent from `topics` are ignored."""
        ...


def _subscriptions(
    members: Mapping[str, MemberSubscription], topics: Mapping[uuid.UUID, TopicMetadata]
) -> dict[str, frozenset[uuid.UUID]]:
    """Each member's subscription cut down to the topics that exist."""
    existing = frozenset(topics)
    out: dict[str, frozenset[uuid.UUID]] = {}
    for member_id, member in members.items():
        topic_ids = member.subscribed_topic_ids
        out[member_id] = topic_ids if topic_ids <= existing else topic_ids & existing
    return out


def _in_range(parts: frozenset[int], count: int) -> frozenset[int]:
    """A target's partitions that the topic still has.

    Kafka's targets always are; ours come from the caller, and a partition past the end
    must not be handed to anyone.
    """
    if parts and (min(parts) < 0 or max(parts) >= count):
        return frozenset(p for p in parts if 0 <= p < count)
    return parts


def _sorted(topic_ids: Iterable[uuid.UUID]) -> list[uuid.UUID]:
    # uuid.UUID orders as Kafka's Uuid.compareTo: unsigned, most significant bits first.
    return sorted(topic_ids)


# -- uniform, all members subscribed to the same topics --------------------------------------


def _uniform_homogeneous(
    member_ids: list[str],
    members: Mapping[str, MemberSubscription],
    subscribed: frozenset[uuid.UUID],
    topics: Mapping[uuid.UUID, TopicMetadata],
) -> GroupAssignment:
    """Kafka's UniformHomogeneousAssignmentBuilder (without racks).

    Every member gets the total divided by the member count, and the first members in id
    order that already hold more than that keep one extra partition each while extras
    last; extras still unclaimed go to the last members that can take one. Members keep
    their current partitions up to their quota (lowest partition numbers first), and the
    rest are dealt out in order: never-owned partitions by topic and number, then the ones
    taken from members over their quota.
    """
    topic_ids = _sorted(subscribed)
    counts = {t: topics[t].partitions for t in topic_ids}
    min_quota, extras = divmod(sum(counts.values()), len(member_ids))

    claimed: dict[uuid.UUID, set[int]] = {t: set() for t in topic_ids}
    kept_by_member: list[dict[uuid.UUID, frozenset[int]]] = []
    taken: list[tuple[uuid.UUID, int]] = []
    unfilled: list[list[int]] = []  # [member index, partitions still to receive]

    for index, member_id in enumerate(member_ids):
        quota = min_quota
        has_extra = extras > 0
        if has_extra:
            quota += 1
        kept: dict[uuid.UUID, frozenset[int]] = {}
        target = members[member_id].target
        for topic_id in _sorted(target) if len(target) > 1 else target:
            topic_claimed = claimed.get(topic_id)
            if topic_claimed is None:
                continue  # no longer subscribed, or gone
            parts = _in_range(target[topic_id], counts[topic_id])
            if not topic_claimed.isdisjoint(parts):
                # Held by an earlier member too: the earlier one (in id order) keeps it.
                parts = parts - topic_claimed
            if not parts:
                continue
            topic_claimed |= parts
            if len(parts) <= quota:
                kept[topic_id] = parts
                quota -= len(parts)
            else:
                ordered = sorted(parts)
                if quota:
                    kept[topic_id] = frozenset(ordered[:quota])
                taken.extend((topic_id, p) for p in ordered[quota:])
                quota = 0
        # A member below min + 1 gives its extra back, so that members over the minimum,
        # who can keep an extra without a move, claim the extras first.
        if quota > 0 and has_extra:
            quota -= 1
            has_extra = False
        if quota == 0 and has_extra:
            extras -= 1
        if quota > 0 or (extras > 0 and not has_extra):
            unfilled.append([index, quota])
        kept_by_member.append(kept)

    unassigned = [
        (t, p)
        for t in topic_ids
        for p in (
            range(counts[t]) if not claimed[t] else sorted(set(range(counts[t])) - claimed[t])
        )
    ]
    unassigned.extend(taken)

    for entry in reversed(unfilled):
        if extras == 0:
            break
        extras -= 1
        entry[1] += 1

    position = 0
    for index, quota in unfilled:
        if not quota:
            continue
        added: dict[uuid.UUID, list[int]] = {}
        for topic_id, partition in unassigned[position : position + quota]:
            added.setdefault(topic_id, []).append(partition)
        position += quota
        kept = kept_by_member[index]
        for topic_id, partitions in added.items():
            old = kept.get(topic_id)
            kept[topic_id] = frozenset(partitions) if old is None else old.union(partitions)
    if position != len(unassigned):
        raise AssertionError(f"{len(unassigned) - position} partitions left unassigned")

    return dict(zip(member_ids, kept_by_member, strict=True))


# -- uniform, members subscribed to different topics ------------------------------------------

# Kafka's bound on balancing rounds: each roughly halves the imbalance of overlapping
# subscriptions, and identical ones converge in one.
_MAX_BALANCE_ROUNDS = 16


class _Balancer:
    """Kafka's MemberAssignmentBalancer: the subscribers of one topic sorted by size, with
    a least loaded range growing rightwards and a most loaded range growing leftwards."""

    __slots__ = (
        "least_count",
        "least_end",
        "most_count",
        "most_end",
        "most_start",
        "next_least",
        "next_most",
        "order",
        "sizes",
    )

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.order: list[int] = []
        self.least_end = self.least_count = self.next_least = 0
        self.most_start = self.most_end = self.most_count = self.next_most = 0

    def initialize(self, subscribers: list[int]) -> int:
        """Start over on these subscribers (ascending indices); the spread of their sizes."""
        sizes = self.sizes
        # Stable, so equal sizes stay in member index order as Kafka's comparator has them.
        self.order = order = sorted(subscribers, key=sizes.__getitem__)
        self.least_end = 0
        self.least_count = sizes[order[0]] - 1
        self.next_least = 0
        self.most_start = self.most_end = len(order)
        self.most_count = sizes[order[-1]] + 1
        self.next_most = len(order) - 1
        return sizes[order[-1]] - sizes[order[0]]

    def next_least_loaded(self) -> int:
        """The member to give the next partition to, counted as having received it."""
        if self.next_least >= self.least_end:
            self.least_count += 1
            order, sizes = self.order, self.sizes
            while self.least_end < len(order) and sizes[order[self.least_end]] == self.least_count:
                self.least_end += 1
            self.next_least = 0
        member = self.order[self.next_least]
        self.next_least += 1
        return member

    def next_most_loaded(self) -> int:
        """The member to take the next partition from, or -1 when none is left."""
        order, sizes = self.order, self.sizes
        if self.next_most < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                # Emptied by exclusions: restart from the next level down, or the range
                # would not grow and a member outside it would be returned.
                self.most_count = sizes[order[self.most_start - 1]]
            else:
                self.most_count -= 1
            while self.most_start > 0 and sizes[order[self.most_start - 1]] == self.most_count:
                self.most_start -= 1
            self.next_most = self.most_end - 1
        if self.next_most < 0:
            return -1
        member = order[self.next_most]
        self.next_most -= 1
        return member

    def exclude_most_loaded(self) -> None:
        """Drop the member last returned by next_most_loaded: it has nothing to give."""
        order = self.order
        i = self.next_most + 1
        order[i], order[self.most_end - 1] = order[self.most_end - 1], order[i]
        self.most_end -= 1

    def is_balanced(self) -> bool:
        return self.most_count - self.least_count <= 1


class _Heterogeneous:
    """Kafka's UniformHeterogeneousAssignmentBuilder (without racks).

    Members keep every partition of the topics they still subscribe to; the partitions
    nobody holds go, topic by topic, to the topic's least loaded subscribers; then
    partitions move, topic by topic, from the most loaded subscribers to the least loaded
    until a full round over the topics moves nothing, or the round limit is hit.
    """

    def __init__(
        self,
        member_ids: list[str],
        members: Mapping[str, MemberSubscription],
        subscriptions: Mapping[str, frozenset[uuid.UUID]],
        topics: Mapping[uuid.UUID, TopicMetadata],
    ) -> None:
        self.member_ids = member_ids
        # Members that subscribe alike are walked once: hashing a topic id is a Python
        # call, and groups usually have few distinct subscriptions.
        cohorts: dict[frozenset[uuid.UUID], list[int]] = {}
        for index, member_id in enumerate(member_ids):
            cohorts.setdefault(subscriptions[member_id], []).append(index)
        by_topic: dict[uuid.UUID, list[int]] = {}
        for topic_ids, indices in cohorts.items():
            for topic_id in topic_ids:
                by_topic.setdefault(topic_id, []).extend(indices)
        self.subscribers = {t: sorted(indices) for t, indices in by_topic.items()}
        self.counts = {t: topics[t].partitions for t in self.subscribers}
        self.sizes = [0] * len(member_ids)
        self.owners = {t: [-1] * self.counts[t] for t in _sorted(self.subscribers)}

        # Partitions of topics a member no longer subscribes to are simply not taken over;
        # a partition two targets hold stays with the first member in id order.
        for index, member_id in enumerate(member_ids):
            target = members[member_id].target
            subscribed = subscriptions[member_id]
            for topic_id, parts in target.items():
                if topic_id not in subscribed:
                    continue
                owners = self.owners[topic_id]
                for p in _in_range(parts, len(owners)):
                    if owners[p] == -1:
                        owners[p] = index
                        self.sizes[index] += 1

    def _sort_topics(self, topic_ids: Iterable[uuid.UUID]) -> list[uuid.UUID]:
        """Partitions per subscriber descending, then subscriber count ascending, then id:
        the topics hardest to balance go first."""
        counts, subscribers = self.counts, self.subscribers
        return sorted(
            topic_ids,
            key=lambda t: (
                -(counts[t] / len(subscribers[t])),
                len(subscribers[t]),
                t,
            ),
        )

    def _move(self, topic_id: uuid.UUID, partition: int, member: int) -> None:
        owners = self.owners[topic_id]
        old = owners[partition]
        if old != -1:
            self.sizes[old] -= 1
        owners[partition] = member
        self.sizes[member] += 1

    def build(self) -> GroupAssignment:
        balancer = _Balancer(self.sizes)

        unassigned = {
            t: [p for p, owner in enumerate(owners) if owner == -1]
            for t, owners in self.owners.items()
            if -1 in owners
        }
        for topic_id in self._sort_topics(unassigned):
            balancer.initialize(self.subscribers[topic_id])
            for partition in unassigned[topic_id]:
                self._move(topic_id, partition, balancer.next_least_loaded())

        movable = [t for t, subs in self.subscribers.items() if len(subs) >= 2]
        if movable:
            self._balance(self._sort_topics(movable), balancer)

        result: GroupAssignment = {member_id: {} for member_id in self.member_ids}
        grouped: list[dict[uuid.UUID, list[int]]] = [{} for _ in self.member_ids]
        for topic_id, owners in self.owners.items():
            for partition, owner in enumerate(owners):
                grouped[owner].setdefault(topic_id, []).append(partition)
        for member_id, by_topic in zip(self.member_ids, grouped, strict=True):
            result[member_id] = {t: frozenset(p) for t, p in by_topic.items()}
        return result

    def _balance(self, topic_ids: list[uuid.UUID], balancer: _Balancer) -> None:
        last_moved = -1  # the topic that last moved something: a round back to it is idle
        for _ in range(_MAX_BALANCE_ROUNDS):
            for index, topic_id in enumerate(topic_ids):
                if index == last_moved:
                    return
                if self._balance_topic(topic_id, balancer) > 0 or last_moved == -1:
                    last_moved = index

    def _balance_topic(self, topic_id: uuid.UUID, balancer: _Balancer) -> int:
        subscribers = self.subscribers[topic_id]
        owners = self.owners[topic_id]
        size_of = self.sizes.__getitem__
        # Kafka's loop below gives up before its first move when the largest member
        # holding one of the topic's partitions is within one of the smallest subscriber;
        # that is most topics, and the loop would first sort the subscribers and step
        # over every one holding nothing of the topic.
        if not owners or max(map(size_of, owners)) - min(map(size_of, subscribers)) <= 1:
            return 0
        balancer.initialize(subscribers)

        # The topic's partitions grouped by owner, so that a member's last partition is
        # found in constant time and always the same one.
        partitions = sorted(range(len(owners)), key=owners.__getitem__)
        start: dict[int, int] = {}
        end: dict[int, int] = {}
        for i, partition in enumerate(partitions):
            owner = owners[partition]
            start.setdefault(owner, i)
            end[owner] = i + 1

        moved = 0
        while not balancer.is_balanced():
            while True:
                most = balancer.next_most_loaded()
                if most == -1:
                    break
                if end.get(most, 0) - start.get(most, 0) <= 0:
                    balancer.exclude_most_loaded()
                    continue
                break
            if most == -1:
                break
            end[most] -= 1
            partition = partitions[end[most]]
            least = balancer.next_least_loaded()
            if balancer.is_balanced():
                break
            self._move(topic_id, partition, least)
            moved += 1
        return moved


@final
class UniformAssignor:
    """Kafka's default server-side assignor: balance first, then stickiness."""

    name = "uniform"

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        topics: Mapping[uuid.UUID, TopicMetadata],
    ) -> GroupAssignment:
        if not members:
            return {}
        member_ids = sorted(members)
        subscriptions = _subscriptions(members, topics)
        first = subscriptions[member_ids[0]]
        if all(s == first for s in subscriptions.values()):
            if not first:
                return {m: {} for m in member_ids}
            return _uniform_homogeneous(member_ids, members, first, topics)
        return _Heterogeneous(member_ids, members, subscriptions, topics).build()


# -- range ----------------------------------------------------------------------------------


@final
class RangeAssignor:
    """Kafka's server-side `range` (as of Kafka 3.9): per topic, contiguous ranges to the
    topic's subscribers in order, the first ones taking one more when the partitions do
    not divide evenly.

    The order is static members by instance id, then the others by member id, so that
    members subscribed to the same topics with equal partition counts get the same
    partition numbers from each (co-partitioning), and a static member that rejoins under
    a new member id gets its ranges back. The current target is not consulted: Kafka gave
    up range stickiness because it broke co-partitioning.
    """

    name = "range"

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        topics: Mapping[uuid.UUID, TopicMetadata],
    ) -> GroupAssignment:
        static = sorted(
            (m.instance_id, member_id)
            for member_id, m in members.items()
            if m.instance_id is not None
        )
        dynamic = sorted(member_id for member_id, m in members.items() if m.instance_id is None)
        ordered = [member_id for _, member_id in static] + dynamic
        result: GroupAssignment = {member_id: {} for member_id in ordered}
        if not ordered:
            return result

        subscriptions = _subscriptions(members, topics)
        first = subscriptions[ordered[0]]
        subscribers: dict[uuid.UUID, list[str]]
        if all(s == first for s in subscriptions.values()):
            subscribers = dict.fromkeys(first, ordered)
        else:
            subscribers = {}
            for member_id in ordered:
                for topic_id in subscriptions[member_id]:
                    subscribers.setdefault(topic_id, []).append(member_id)

        for topic_id in _sorted(subscribers):
            topic_members = subscribers[topic_id]
            count = topics[topic_id].partitions
            quota, extras = divmod(count, len(topic_members))
            start = 0
            for i, member_id in enumerate(topic_members):
                if start >= count:
                    break  # more subscribers than partitions
                end = start + quota + (1 if i < extras else 0)
                result[member_id][topic_id] = frozenset(range(start, end))
                start = end
        return result


ASSIGNORS: Mapping[str, PartitionAssignor] = MappingProxyType(
    {"uniform": UniformAssignor(), "range": RangeAssignor()}
)
DEFAULT_ASSIGNOR = "uniform"
