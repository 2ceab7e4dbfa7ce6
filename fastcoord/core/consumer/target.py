"""The target assignment: Kafka's updateTargetAssignment, and the assignment as answered.

When the group epoch is ahead of the target assignment's, the server-side assignor the
members prefer computes a new target for every member, from what each subscribes to and
what it was given last (so that an assignor can keep partitions where they are). The
members then walk to their targets one step per heartbeat (reconciliation.py).
"""

from __future__ import annotations

import uuid

from fastcoord.core.consumer.assignment import Assignment
from fastcoord.core.consumer.assignors import ASSIGNORS, MemberSubscription, TopicMetadata
from fastcoord.core.consumer.group import ConsumerGroup, ConsumerMember
from fastcoord.core.consumer.subscriptions import member_topics
from fastcoord.core.group_manager import GroupManager
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatResponseAssignment,
    ConsumerGroupHeartbeatResponseTopicPartitions,
)


def assign(
    gm: GroupManager, group: ConsumerGroup, members: dict[str, ConsumerMember]
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """The new target assignment (Kafka's updateTargetAssignment), by the group's preferred
    server assignor."""
    topics: dict[uuid.UUID, TopicMetadata] = {}
    specs: dict[str, MemberSubscription] = {}
    for member in members.values():
        ids: set[uuid.UUID] = set()
        for name in member_topics(gm, member):
            found = gm.topics.topic_by_name(name)
            if found is not None:
                topic_id, partitions = found
                ids.add(topic_id)
                topics[topic_id] = TopicMetadata(topic_id, name, partitions)
        previous = group.target.get(member.member_id)
        if previous is None and member.instance_id is not None:
            # A static member replaced under a new id keeps what the old one was given.
            old_id = group.static_members.get(member.instance_id)
            previous = group.target.get(old_id) if old_id is not None else None
        specs[member.member_id] = MemberSubscription(
            subscribed_topic_ids=frozenset(ids),
            target=previous or {},
            instance_id=member.instance_id,
            rack_id=member.rack_id,
        )
    default = gm.config.group_consumer_assignors[0]
    members_by_assignor = [m.server_assignor for m in members.values() if m.server_assignor]
    name = _preferred(members_by_assignor, default)
    return ASSIGNORS[name].assign(specs, topics)


def _preferred(names: list[str], default: str) -> str:
    """The server assignor most members ask for (ties: the first by name); the default if
    none asks."""
    if not names:
        return default
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    best = max(counts.values())
    return min(n for n, c in counts.items() if c == best)


def response_assignment(assigned: Assignment) -> ConsumerGroupHeartbeatResponseAssignment:
    return ConsumerGroupHeartbeatResponseAssignment(
        topic_partitions=[
            ConsumerGroupHeartbeatResponseTopicPartitions(topic, sorted(parts))
            for topic, parts in sorted(assigned.items(), key=lambda item: item[0].int)
        ]
    )
