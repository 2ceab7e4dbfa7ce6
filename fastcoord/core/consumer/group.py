"""A consumer group and its members: Kafka's ConsumerGroup and ConsumerGroupMember.

What a group is (its epochs, members, target assignment, who holds which partition) and
the small rules that only read it: its state, its preferred assignor, its subscribed
topics. It changes only by replaying records (records.py), live as at load, so the state
a heartbeat leaves is exactly what a restart rebuilds.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import uuid
from collections import Counter

from fastcoord.core.consumer.assignment import Assignment
from fastcoord.core.consumer.reconciliation import CurrentAssignment, PartitionEpochs


class ConsumerGroupState(enum.Enum):
    """Kafka's ConsumerGroup.ConsumerGroupState, by the names admin tools show."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


# A member's epoch while it leaves: -1 leaves the group, -2 leaves it for now (a static
# member, whose place and partitions wait for it until its session times out).
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


@dataclasses.dataclass(slots=True)
class ConsumerMember:
    """One member. The first fields are its metadata record; `current` its assignment
    record; the rest is soft state, rebuilt at load."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    current: CurrentAssignment = dataclasses.field(default_factory=CurrentAssignment)

    @property
    def member_epoch(self) -> int:
        return self.current.member_epoch

    def metadata(self) -> tuple[object, ...]:
        """What the member's metadata record holds, to tell whether it changed."""
        return (
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            self.subscribed_topic_names,
            self.subscribed_topic_regex,
            self.server_assignor,
            self.rebalance_timeout_ms,
        )


class ConsumerGroup:
    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, Assignment] = {}  # member id -> its target assignment
        self.partition_epochs = PartitionEpochs()
        self.subscribed_names: Counter[str] = Counter()
        self.subscribed_regexes: Counter[str] = Counter()
        self.assignors: Counter[str] = Counter()
        self.state = ConsumerGroupState.EMPTY
        self.state_timestamp_ms = now_ms
        # Members not reconciled to the target assignment's epoch: kept as members change,
        # so that the group's state is known without a walk over its members.
        self.unreconciled: set[str] = set()
        # Soft state: the topic image version the group's metadata hash was computed at,
        # the epoch each member was given to revoke partitions by, and when the rebalance
        # under way began.
        self.image_version = -1
        self.revoking_at: dict[str, int] = {}
        self.rebalance_started_ms: int | None = None

    # -- members --------------------------------------------------------------------------

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def update_member(self, member: ConsumerMember, now_ms: int) -> None:
        """Put a member's new metadata in place (ConsumerGroup.updateMember)."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._count(old, -1)
        self.members[member.member_id] = member
        self._count(member, 1)
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._track(member)
        self.update_state(now_ms)

    def update_assignment(
        self, member: ConsumerMember, new: CurrentAssignment, now_ms: int
    ) -> None:
        """A member's current assignment changes: who holds what changes with it."""
        self.partition_epochs.update_member(member.current, new)
        member.current = new
        self._track(member)
        self.update_state(now_ms)

    def remove_member(self, member_id: str, now_ms: int) -> None:
        member = self.members.pop(member_id)
        self._count(member, -1)
        if member.instance_id is not None and self.static_members.get(member.instance_id) == (
            member_id
        ):
            del self.static_members[member.instance_id]
        self.revoking_at.pop(member_id, None)
        self.unreconciled.discard(member_id)
        self.update_state(now_ms)

    def set_assignment_epoch(self, epoch: int, now_ms: int) -> None:
        self.assignment_epoch = epoch
        self.unreconciled.clear()
        for member in self.members.values():
            self._track(member)
        self.update_state(now_ms)

    def _track(self, member: ConsumerMember) -> None:
        if member.current.is_reconciled_to(self.assignment_epoch):
            self.unreconciled.discard(member.member_id)
        else:
            self.unreconciled.add(member.member_id)

    def _count(self, member: ConsumerMember, n: int) -> None:
        for name in member.subscribed_topic_names:
            self.subscribed_names[name] += n
        if member.subscribed_topic_regex:
            self.subscribed_regexes[member.subscribed_topic_regex] += n
        if member.server_assignor is not None:
            self.assignors[member.server_assignor] += n
        # Counters keep zero counts; drop them so that an absent name means no subscriber.
        for counter in (self.subscribed_names, self.subscribed_regexes, self.assignors):
            for key in [k for k, v in counter.items() if v <= 0]:
                del counter[key]

    # -- what the group is ----------------------------------------------------------------

    def update_state(self, now_ms: int) -> None:
        """Kafka's maybeUpdateGroupState."""
        if not self.members:
            state = ConsumerGroupState.EMPTY
        elif self.group_epoch > self.assignment_epoch:
            state = ConsumerGroupState.ASSIGNING
        elif self.unreconciled:
            state = ConsumerGroupState.RECONCILING
        else:
            state = ConsumerGroupState.STABLE
        if state is not self.state:
            self.state = state
            self.state_timestamp_ms = now_ms

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for; the default if none asks."""
        if not self.assignors:
            return default
        best = max(self.assignors.values())
        return min(name for name, n in self.assignors.items() if n == best)

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get(topic_id, partition)

    def is_subscribed_to(self, topic: str) -> bool:
        if topic in self.subscribed_names:
            return True
        return any(_fullmatch(regex, topic) for regex in self.subscribed_regexes)


def _fullmatch(regex: str, topic: str) -> bool:
    try:
        return re.fullmatch(regex, topic) is not None
    except re.error:
        return False
