"""Member reconciliation: how one member walks from its current assignment to its target.

A consumer group's target assignment can move partitions between members at once, but a
partition must never be consumed by two members: the old owner has to say it let go before
the new owner gets it. This is Kafka's CurrentAssignmentBuilder (one step per heartbeat),
the group's partition-epoch map that records who holds what, and the heartbeat's epoch
check, as pure functions and one small class the heartbeat handler drives.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import MappingProxyType

from fastcoord.core.consumer.assignment import (
    EMPTY,
    Assignment,
    difference,
    intersection,
    normalise,
    union,
)
from fastcoord.protocol.errors import ErrorCode

# Epoch of a partition that no member holds (Kafka's currentPartitionEpoch answer).
FREE = -1

PartitionEpochOf = Callable[[uuid.UUID, int], int]


class MemberState(enum.IntEnum):
    """Kafka's MemberState; the numbers are what the current-assignment record stores."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        # A record written by a newer coordinator may carry a state this one does not know;
        # Kafka reads it as UNKNOWN, and reconcile then makes the member start over.
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class FencedMemberEpochError(Exception):
    """Kafka's FencedMemberEpochException: the member must drop all its partitions and rejoin."""

    error_code = ErrorCode.FENCED_MEMBER_EPOCH


class PartitionEpochError(RuntimeError):
    """The partition-epoch map was asked for something that breaks single ownership.

    Kafka throws IllegalStateException here: it means a bug, never a client's mistake.
    """


def _frozen(assignment: Assignment) -> Assignment:
    return MappingProxyType(normalise(assignment))


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    """One member's assignment state: Kafka's ConsumerGroupCurrentMemberAssignment record.

    `assigned` and `pending_revocation` are disjoint; both count as held by this member
    until it reports it no longer owns the pending ones. The defaults are a member that has
    just joined (Kafka's ConsumerGroupMember.Builder defaults).
    """

    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Read-only views, normalised so that two states holding the same partitions compare
        # equal however the caller spelt them (an empty topic, a set instead of a frozenset).
        object.__setattr__(self, "assigned", _frozen(self.assigned))
        object.__setattr__(self, "pending_revocation", _frozen(self.pending_revocation))

    def is_reconciled_to(self, target_epoch: int) -> bool:
        """Nothing left to do: the heartbeat handler skips reconcile (Kafka's maybeReconcile)."""
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def held(self) -> dict[uuid.UUID, frozenset[int]]:
        """Every partition the group must count as this member's."""
        return union(self.assigned, self.pending_revocation)


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    # A member that did not report what it owns may still own anything: Kafka waits.
    if owned is None:
        return True
    return any(p & partitions.get(topic, frozenset()) for topic, p in owned.items())


def _is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    # As Kafka's isSubset, a reported topic the member is not assigned fails even with no
    # partitions listed under it.
    if owned is None:
        return False
    for topic, partitions in owned.items():
        if topic not in assigned or not partitions <= assigned[topic]:
            return False
    return True


def check_member_epoch(
    member: CurrentAssignment, received_epoch: int, owned: Assignment | None
) -> ErrorCode | None:
    """The heartbeat's epoch check (Kafka's throwIfConsumerGroupMemberEpochIsInvalid).

    None when the heartbeat may go on. An epoch from the future, or an older one, is fenced,
    except the previous epoch with owned partitions all still assigned: that member simply
    missed the response that bumped it.
    """
    if received_epoch > member.member_epoch:
        return ErrorCode.FENCED_MEMBER_EPOCH
    if received_epoch < member.member_epoch and (
        received_epoch != member.previous_member_epoch or not _is_subset(owned, member.assigned)
    ):
        return ErrorCode.FENCED_MEMBER_EPOCH
    return None


def reconcile(
    member: CurrentAssignment,
    target_epoch: int,
    target: Assignment,
    current_partition_epoch: PartitionEpochOf,
    owned: Assignment | None,
) -> CurrentAssignment:
    """The member's next state towards `target` (Kafka's CurrentAssignmentBuilder.build()).

    `current_partition_epoch(topic, partition)` is the epoch of the member holding it, FREE
    if none; `owned` is what the member reported in this heartbeat, None if it reported
    nothing. Returns `member` itself when it cannot move on. Raises FencedMemberEpochError
    for a member in the UNKNOWN state unless it reports owning nothing.
    """
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next_assignment(
                member, member.member_epoch, target_epoch, target, current_partition_epoch, owned
            )
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        # The revocation is done only once the member stops reporting those partitions.
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next_assignment(
            member, member.member_epoch, target_epoch, target, current_partition_epoch, owned
        )
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(
            member, member.member_epoch, target_epoch, target, current_partition_epoch, owned
        )
    # UNKNOWN: only a newer coordinator's state read by this one. Kafka fences the member so
    # that it rejoins owning nothing, and then reconciles it from scratch.
    if owned is None or len(owned) != 0:
        raise FencedMemberEpochError(
            "The consumer group member is in a unknown state. "
            "The member must abandon all its partitions and rejoin."
        )
    return _next_assignment(
        member, target_epoch, target_epoch, target, current_partition_epoch, owned
    )


def _next_assignment(
    member: CurrentAssignment,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    current_partition_epoch: PartitionEpochOf,
    owned: Assignment | None,
) -> CurrentAssignment:
    """Kafka's computeNextAssignment. `member_epoch` is the epoch to stay at while revoking."""
    kept = intersection(member.assigned, target)
    revoking = difference(member.assigned, kept)
    to_assign: dict[uuid.UUID, frozenset[int]] = {}
    has_unreleased = False
    for topic, partitions in difference(target, kept).items():
        own_pending = member.pending_revocation.get(topic, frozenset())
        # A partition this member itself is still revoking counts as its own, not as
        # unreleased: no one else can hold it meanwhile.
        unreleased = frozenset(
            p
            for p in partitions
            if current_partition_epoch(topic, p) != FREE and p not in own_pending
        )
        has_unreleased = has_unreleased or bool(unreleased)
        to_assign[topic] = partitions - unreleased
    to_assign = normalise(to_assign)

    # Partitions to revoke that the member already reported gone need no revocation round.
    if revoking and _owns_any(owned, revoking):
        # The member stays at its epoch until it has let go: another member may be waiting
        # for these partitions, and the new epoch must not be given before they are free.
        return CurrentAssignment(
            member_epoch=member_epoch,
            previous_member_epoch=member.member_epoch,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=kept,
            pending_revocation=revoking,
        )
    # The epoch moves to the target's even while some partitions are still held by others:
    # what is free now is given now, the rest on a later heartbeat once released.
    return CurrentAssignment(
        member_epoch=target_epoch,
        previous_member_epoch=member.member_epoch,
        state=MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE,
        assigned=union(kept, to_assign),
        pending_revocation=EMPTY,
    )


class PartitionEpochs:
    """The group's map (topic, partition) -> epoch of the member holding it.

    A member holds both its assigned and its pending-revocation partitions. `add` refuses a
    partition that already has a holder: this is where "a partition never has two owners"
    is enforced, as Kafka's ConsumerGroup.addPartitionEpochs does. Every method either does
    all of its change or, raising, none of it.
    """

    __slots__ = ("_epochs",)

    def __init__(self) -> None:
        self._epochs: dict[uuid.UUID, dict[int, int]] = {}

    def get(self, topic_id: uuid.UUID, partition: int) -> int:
        topic = self._epochs.get(topic_id)
        return FREE if topic is None else topic.get(partition, FREE)

    def __len__(self) -> int:
        return sum(len(t) for t in self._epochs.values())

    def items(self) -> Iterator[tuple[tuple[uuid.UUID, int], int]]:
        for topic, partitions in self._epochs.items():
            for partition, epoch in partitions.items():
                yield (topic, partition), epoch

    def add(self, assignment: Assignment, epoch: int) -> None:
        for topic, partitions in assignment.items():
            for p in partitions:
                current = self.get(topic, p)
                if current != FREE:
                    raise PartitionEpochError(
                        f"Cannot set the epoch of {topic}-{p} to {epoch} because the partition "
                        f"is still owned at epoch {current}"
                    )
        for topic, partitions in assignment.items():
            if partitions:
                self._epochs.setdefault(topic, {}).update(dict.fromkeys(partitions, epoch))

    def remove(self, assignment: Assignment, expected_epoch: int) -> None:
        for topic, partitions in assignment.items():
            for p in partitions:
                current = self.get(topic, p)
                if current != expected_epoch:
                    raise PartitionEpochError(
                        f"Cannot remove the epoch {expected_epoch} from {topic}-{p} because "
                        f"the partition is still owned at a different epoch {current}"
                    )
        for topic, partitions in assignment.items():
            owners = self._epochs.get(topic)
            if owners is None:
                continue
            for p in partitions:
                del owners[p]
            if not owners:
                del self._epochs[topic]

    def update_member(self, old: CurrentAssignment | None, new: CurrentAssignment) -> None:
        """Replace a member's holdings (Kafka's maybeUpdatePartitionEpoch); old is None on join."""
        released = self._holdings(old) if old is not None else EMPTY
        if old is not None:
            self.remove(released, old.member_epoch)
        try:
            self.add(self._holdings(new), new.member_epoch)
        except PartitionEpochError:
            if old is not None:
                self.add(released, old.member_epoch)
            raise

    def remove_member(self, old: CurrentAssignment) -> None:
        """Free a departed member's partitions (Kafka's maybeRemovePartitionEpoch)."""
        self.remove(self._holdings(old), old.member_epoch)

    @staticmethod
    def _holdings(member: CurrentAssignment) -> Assignment:
        # Kafka adds the two sets one after the other, so a partition in both is a clash.
        both = intersection(member.assigned, member.pending_revocation)
        if both:
            raise PartitionEpochError(
                f"A member cannot hold a partition both assigned and pending revocation: {both}"
            )
        return member.held()
