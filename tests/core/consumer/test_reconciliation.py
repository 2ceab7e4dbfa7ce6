"""Member reconciliation against Kafka's own cases, one step on any input, and a whole group.

The examples are Kafka's CurrentAssignmentBuilderTest with the same expected states (its
subscription and regular-expression cases are left out: here the target given to reconcile
already is what the member may have). A property checks a single step on random states. A
state machine drives a group of simulated consumers through joins, leaves, target changes,
lost responses and heartbeats that report nothing, checking after every step that no
partition has two owners and that epochs never go back, and that the group settles on its
target once the target stops changing.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fastcoord.core.consumer.assignment import Assignment, intersection, normalise
from fastcoord.core.consumer.reconciliation import (
    FREE,
    CurrentAssignment,
    FencedMemberEpochError,
    MemberState,
    PartitionEpochError,
    PartitionEpochOf,
    PartitionEpochs,
    check_member_epoch,
    reconcile,
)
from fastcoord.protocol.errors import ErrorCode

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS
UNKNOWN = MemberState.UNKNOWN

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def a(t1: Iterable[int] = (), t2: Iterable[int] = ()) -> dict[uuid.UUID, frozenset[int]]:
    return normalise({T1: frozenset(t1), T2: frozenset(t2)})


def every_partition_at(epoch: int) -> PartitionEpochOf:
    return lambda topic, partition: epoch


def member(
    state: MemberState,
    epoch: int,
    previous: int,
    assigned: Assignment,
    pending: Assignment | None = None,
) -> CurrentAssignment:
    return CurrentAssignment(epoch, previous, state, assigned, pending or {})


# -- Kafka's CurrentAssignmentBuilderTest ------------------------------------------------


def test_stable_to_stable() -> None:
    m = member(STABLE, 10, 10, a((1, 2, 3), (4, 5, 6)))
    got = reconcile(m, 11, a((1, 2, 3), (4, 5, 6)), every_partition_at(10), None)
    assert got == member(STABLE, 11, 10, a((1, 2, 3), (4, 5, 6)))


def test_stable_to_stable_with_new_partitions() -> None:
    m = member(STABLE, 10, 10, a((1, 2, 3), (4, 5, 6)))
    got = reconcile(m, 11, a((1, 2, 3, 4), (4, 5, 6, 7)), every_partition_at(FREE), None)
    assert got == member(STABLE, 11, 10, a((1, 2, 3, 4), (4, 5, 6, 7)))


def test_stable_to_unrevoked_partitions() -> None:
    m = member(STABLE, 10, 10, a((1, 2, 3), (4, 5, 6)))
    got = reconcile(m, 11, a((2, 3, 4), (5, 6, 7)), every_partition_at(FREE), None)
    assert got == member(UNREVOKED, 10, 10, a((2, 3), (5, 6)), a((1,), (4,)))


def test_stable_to_unreleased_partitions() -> None:
    m = member(STABLE, 10, 10, a((1, 2, 3), (4, 5, 6)))
    got = reconcile(m, 11, a((1, 2, 3, 4), (4, 5, 6, 7)), every_partition_at(10), None)
    assert got == member(UNRELEASED, 11, 10, a((1, 2, 3), (4, 5, 6)))


def test_stable_to_unreleased_partitions_with_owned_partitions_not_having_revoked() -> None:
    # Partition 6 leaves the target, but the member already reports it gone: no revocation
    # round, straight on to the new epoch.
    m = member(STABLE, 10, 10, a((1, 2, 3), (4, 5, 6)))
    got = reconcile(
        m,
        11,
        a((1, 2, 3), (4, 5, 7)),
        lambda topic, partition: 10 if topic == T2 else FREE,
        {},
    )
    assert got == member(UNRELEASED, 11, 10, a((1, 2, 3), (4, 5)))


def test_unrevoked_partitions_to_stable() -> None:
    m = member(UNREVOKED, 10, 10, a((2, 3), (5, 6)), a((1,), (4,)))
    got = reconcile(m, 11, a((2, 3), (5, 6)), every_partition_at(FREE), a((2, 3), (5, 6)))
    assert got == member(STABLE, 11, 10, a((2, 3), (5, 6)))


@pytest.mark.parametrize(
    "owned",
    [None, a((1, 2, 3), (5, 6)), a((2, 3), (4, 5, 6))],
    ids=["nothing reported", "still owns 1", "still owns 4"],
)
def test_remains_in_unrevoked_partitions(owned: Assignment | None) -> None:
    m = member(UNREVOKED, 10, 10, a((2, 3), (5, 6)), a((1,), (4,)))
    assert reconcile(m, 12, a((3,), (6,)), every_partition_at(FREE), owned) is m


def test_unrevoked_partitions_to_unrevoked_partitions() -> None:
    m = member(UNREVOKED, 10, 10, a((2, 3), (5, 6)), a((1,), (4,)))
    got = reconcile(m, 12, a((3,), (6,)), every_partition_at(FREE), a((2, 3), (5, 6)))
    assert got == member(UNREVOKED, 10, 10, a((3,), (6,)), a((2,), (5,)))


def test_unrevoked_partitions_to_unreleased_partitions() -> None:
    m = member(UNREVOKED, 11, 10, a((2, 3), (5, 6)))
    got = reconcile(m, 11, a((2, 3, 4), (5, 6, 7)), every_partition_at(10), a((2, 3), (5, 6)))
    assert got == member(UNRELEASED, 11, 11, a((2, 3), (5, 6)))


def test_unrevoked_partitions_to_stable_with_returned_partitions_pending_revocation() -> None:
    # Partition 4 of T1 was being revoked from this member and is back in its target: the
    # member holds it itself, so it is not waiting on anyone for it.
    m = member(UNREVOKED, 10, 10, a((2, 3), (5, 6)), a((4,)))
    held = {(T1, 2), (T1, 3), (T1, 4), (T2, 5), (T2, 6)}
    got = reconcile(
        m,
        12,
        a((2, 3, 4), (5, 6, 7)),
        lambda topic, partition: 10 if (topic, partition) in held else FREE,
        a((2, 3), (5, 6)),
    )
    assert got == member(STABLE, 12, 10, a((2, 3, 4), (5, 6, 7)))


def test_unreleased_partitions_to_stable() -> None:
    m = member(UNRELEASED, 11, 11, a((2, 3), (5, 6)))
    got = reconcile(m, 12, a((2, 3), (5, 6)), every_partition_at(10), None)
    assert got == member(STABLE, 12, 11, a((2, 3), (5, 6)))


def test_unreleased_partitions_to_stable_with_new_partitions() -> None:
    m = member(UNRELEASED, 11, 11, a((2, 3), (5, 6)))
    got = reconcile(m, 11, a((2, 3, 4), (5, 6, 7)), every_partition_at(FREE), None)
    assert got == member(STABLE, 11, 11, a((2, 3, 4), (5, 6, 7)))


def test_unreleased_partitions_to_unreleased_partitions() -> None:
    m = member(UNRELEASED, 11, 11, a((2, 3), (5, 6)))
    got = reconcile(m, 11, a((2, 3, 4), (5, 6, 7)), every_partition_at(10), None)
    assert got == m


def test_unreleased_partitions_to_unrevoked_partitions() -> None:
    m = member(UNRELEASED, 11, 11, a((2, 3), (5, 6)))
    got = reconcile(m, 12, a((3,), (6,)), every_partition_at(10), None)
    assert got == member(UNREVOKED, 11, 11, a((3,), (6,)), a((2,), (5,)))


def test_unknown_state() -> None:
    m = member(UNKNOWN, 11, 11, a((3,), (6,)), a((2,), (5,)))
    # The member is first fenced, so that it drops everything on its side...
    with pytest.raises(FencedMemberEpochError) as fenced:
        reconcile(m, 12, a((3,), (6,)), every_partition_at(10), None)
    assert fenced.value.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(FencedMemberEpochError):
        reconcile(m, 12, a((3,), (6,)), every_partition_at(10), a((3,)))
    # ...then it comes back owning nothing and is reconciled from scratch.
    got = reconcile(m, 12, a((3,), (6,)), every_partition_at(11), {})
    assert got == member(STABLE, 12, 11, a((3,), (6,)))


def test_stable_at_the_target_epoch_stays_as_it_is() -> None:
    m = member(STABLE, 10, 9, a((1,)))
    assert m.is_reconciled_to(10)
    assert reconcile(m, 10, a((2,)), every_partition_at(FREE), None) is m


def test_member_state_values_are_kafkas() -> None:
    assert [(s.name, s.value) for s in MemberState] == [
        ("STABLE", 0),
        ("UNREVOKED_PARTITIONS", 1),
        ("UNRELEASED_PARTITIONS", 2),
        ("UNKNOWN", 127),
    ]
    assert MemberState.from_value(2) is UNRELEASED
    assert MemberState.from_value(3) is UNKNOWN


def test_a_member_state_is_normalised_and_read_only() -> None:
    m = CurrentAssignment(3, 2, STABLE, {T1: frozenset({1}), T2: frozenset()})
    assert m == CurrentAssignment(3, 2, STABLE, {T1: frozenset({1})})
    with pytest.raises(TypeError):
        m.assigned[T2] = frozenset({1})  # type: ignore[index]


# -- the heartbeat's epoch check (GroupMetadataManager.throwIfConsumerGroupMemberEpochIsInvalid)


def test_check_member_epoch() -> None:
    m = member(STABLE, 11, 10, a((1, 2)))
    fenced = ErrorCode.FENCED_MEMBER_EPOCH
    assert check_member_epoch(m, 11, None) is None
    assert check_member_epoch(m, 11, a((7,))) is None
    assert check_member_epoch(m, 12, a((1,))) == fenced
    # The previous epoch is fine when the response that bumped it was lost...
    assert check_member_epoch(m, 10, a((1, 2))) is None
    assert check_member_epoch(m, 10, {}) is None
    # ...but not with partitions it is not assigned, nor with nothing reported at all.
    assert check_member_epoch(m, 10, a((1, 3))) == fenced
    assert check_member_epoch(m, 10, None) == fenced
    assert check_member_epoch(m, 10, {T2: frozenset()}) == fenced
    assert check_member_epoch(m, 9, a((1,))) == fenced
    assert check_member_epoch(m, 0, {}) == fenced
    # A member that just joined: epoch 0, previous -1.
    assert check_member_epoch(CurrentAssignment(), 0, {}) is None


# -- the group's partition epochs ---------------------------------------------------------


def test_partition_epochs_add_refuses_a_second_owner_and_changes_nothing() -> None:
    epochs = PartitionEpochs()
    epochs.add(a((1, 2)), 5)
    assert epochs.get(T1, 1) == 5 and epochs.get(T1, 3) == FREE and epochs.get(T2, 1) == FREE
    with pytest.raises(PartitionEpochError):
        epochs.add(a((3, 2), (1,)), 6)
    assert dict(epochs.items()) == {(T1, 1): 5, (T1, 2): 5}


def test_partition_epochs_remove_wants_the_owners_epoch() -> None:
    epochs = PartitionEpochs()
    epochs.add(a((1, 2), (3,)), 5)
    with pytest.raises(PartitionEpochError):
        epochs.remove(a((1,), (3,)), 4)
    with pytest.raises(PartitionEpochError):
        epochs.remove(a((1, 9)), 5)
    assert len(epochs) == 3
    epochs.remove(a((1,), (3,)), 5)
    assert dict(epochs.items()) == {(T1, 2): 5}


def test_partition_epochs_count_pending_revocation_as_held() -> None:
    epochs = PartitionEpochs()
    old = member(STABLE, 10, 9, a((1, 2)))
    epochs.update_member(None, old)
    new = member(UNREVOKED, 10, 10, a((1,)), a((2,)))
    epochs.update_member(old, new)
    assert dict(epochs.items()) == {(T1, 1): 10, (T1, 2): 10}
    other = member(UNRELEASED, 11, 10, a((3,)))
    epochs.update_member(None, other)
    # Partition 2 is still being revoked, so no one else may have it yet.
    with pytest.raises(PartitionEpochError):
        epochs.update_member(other, member(STABLE, 11, 11, a((2, 3))))
    assert dict(epochs.items()) == {(T1, 1): 10, (T1, 2): 10, (T1, 3): 11}
    epochs.remove_member(new)
    assert dict(epochs.items()) == {(T1, 3): 11}


def test_partition_epochs_refuse_a_member_holding_a_partition_twice() -> None:
    epochs = PartitionEpochs()
    with pytest.raises(PartitionEpochError):
        epochs.update_member(None, member(UNREVOKED, 3, 3, a((1,)), a((1,))))
    assert len(epochs) == 0


# -- one step on any input ----------------------------------------------------------------

UNIVERSE = [(t, p) for t in (T1, T2) for p in range(4)]
cells = st.sets(st.sampled_from(UNIVERSE))


def from_cells(chosen: Iterable[tuple[uuid.UUID, int]]) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, set[int]] = {}
    for topic, p in chosen:
        out.setdefault(topic, set()).add(p)
    return normalise(out)


@st.composite
def steps(
    draw: st.DrawFn,
) -> tuple[CurrentAssignment, int, Assignment, PartitionEpochs, Assignment | None]:
    """A member, a target for it, the group's map consistent with it, and what it reports."""
    state = draw(st.sampled_from([STABLE, UNREVOKED, UNRELEASED]))
    epoch = draw(st.integers(0, 20))
    roles = draw(
        st.lists(
            st.sampled_from(["", "assigned", "pending", "other"]),
            min_size=len(UNIVERSE),
            max_size=len(UNIVERSE),
        )
    )
    assigned = [cell for cell, role in zip(UNIVERSE, roles, strict=True) if role == "assigned"]
    # Only a member in the middle of a revocation has partitions pending revocation.
    pending = [
        cell
        for cell, role in zip(UNIVERSE, roles, strict=True)
        if role == "pending" and state is UNREVOKED
    ]
    m = CurrentAssignment(
        epoch, draw(st.integers(-1, epoch)), state, from_cells(assigned), from_cells(pending)
    )
    epochs = PartitionEpochs()
    epochs.update_member(None, m)
    for cell, role in zip(UNIVERSE, roles, strict=True):
        if role == "other":
            epochs.add(from_cells([cell]), draw(st.integers(0, 25)))
    target = from_cells(draw(cells))
    owned_cells = draw(st.none() | cells)
    owned = None if owned_cells is None else from_cells(owned_cells)
    return m, epoch + draw(st.integers(0, 3)), target, epochs, owned


@settings(max_examples=500, deadline=None)
@given(steps())
def test_one_step_keeps_a_single_owner_and_moves_forward(
    step: tuple[CurrentAssignment, int, Assignment, PartitionEpochs, Assignment | None],
) -> None:
    m, target_epoch, target, epochs, owned = step
    got = reconcile(m, target_epoch, target, epochs.get, owned)
    if got is m:
        # Only a member waiting for its revocation, or already there, stays put.
        assert (
            m.state is UNREVOKED and (owned is None or intersection(owned, m.pending_revocation))
        ) or (m.is_reconciled_to(target_epoch))
        return
    assert not intersection(got.assigned, got.pending_revocation)
    assert got.previous_member_epoch == m.member_epoch
    assert got.member_epoch in (m.member_epoch, target_epoch)
    assert all(p <= target.get(t, frozenset()) for t, p in got.assigned.items())
    # Whatever it gains was free, or was its own and being revoked.
    for t, partitions in got.held().items():
        for p in partitions - m.held().get(t, frozenset()):
            assert epochs.get(t, p) == FREE
    if got.state is UNREVOKED:
        assert got.member_epoch == m.member_epoch
        assert owned is None or intersection(owned, got.pending_revocation)
    else:
        assert got.member_epoch == target_epoch and not got.pending_revocation
        waiting = [
            (t, p)
            for t, partitions in target.items()
            for p in partitions - got.assigned.get(t, frozenset())
        ]
        assert (got.state is UNRELEASED) == bool(waiting)
        assert all(epochs.get(t, p) != FREE for t, p in waiting)
    # The group can record the step: no partition ends up with two owners.
    epochs.update_member(m, got)


# -- a whole group ------------------------------------------------------------------------

TOPICS = [uuid.UUID(int=10), uuid.UUID(int=11)]
CELLS = [(t, p) for t in TOPICS for p in range(3)]
MAX_CLIENTS = 4
# Rounds of heartbeats after the last change that bring any group to its target: in the
# first a member still revoking for an older target (its consumer missed a response) catches
# up; in the second it may be asked to revoke for the new one; in the third it lets go; in
# the fourth those waiting for what it let go, and heartbeating before it, pick it up.
QUIET_ROUNDS = 4


class Group:
    """The coordinator's side, as GroupMetadataManager.consumerGroupHeartbeat drives it.

    The target is a round-robin of every partition over the members in id order, turned by
    `shift`; any change of members or of `shift` makes a new target at a new epoch.
    """

    def __init__(self) -> None:
        self.epoch = 0
        self.shift = 0
        self.members: dict[str, CurrentAssignment] = {}
        self.targets: dict[str, Assignment] = {}
        self.partition_epochs = PartitionEpochs()

    def new_target(self) -> None:
        self.epoch += 1
        ids = sorted(self.members)
        cells: dict[str, dict[uuid.UUID, set[int]]] = {i: {} for i in ids}
        for n, (topic, p) in enumerate(CELLS):
            if ids:
                cells[ids[(n + self.shift) % len(ids)]].setdefault(topic, set()).add(p)
        self.targets = {i: normalise(c) for i, c in cells.items()}

    def heartbeat(
        self, member_id: str, epoch: int, owned: Assignment | None
    ) -> tuple[ErrorCode | None, CurrentAssignment | None]:
        current = self.members.get(member_id)
        if current is None:
            if epoch != 0:
                return ErrorCode.UNKNOWN_MEMBER_ID, None
            current = CurrentAssignment()
            self.members[member_id] = current
            self.partition_epochs.update_member(None, current)
            self.new_target()
        error = check_member_epoch(current, epoch, owned)
        if error is not None:
            return error, None
        if not current.is_reconciled_to(self.epoch):
            updated = reconcile(
                current, self.epoch, self.targets[member_id], self.partition_epochs.get, owned
            )
            if updated != current:
                self.partition_epochs.update_member(current, updated)
                self.members[member_id] = updated
        return None, self.members[member_id]

    def remove(self, member_id: str) -> None:
        self.partition_epochs.remove_member(self.members.pop(member_id))
        self.new_target()


@dataclass
class Client:
    """A consumer: it holds what the last response it got told it to hold."""

    member_id: str
    epoch: int = 0
    holds: Assignment = field(default_factory=dict)


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.group = Group()
        self.clients: list[Client] = []
        self.joined = 0
        self.highest_epoch: dict[str, int] = {}

    def send(self, client: Client, owned: Assignment | None, lost: bool) -> None:
        error, state = self.group.heartbeat(client.member_id, client.epoch, owned)
        if error is not None:
            # Fenced: the consumer drops everything and goes; the member goes with it, as
            # its session would end.
            assert error == ErrorCode.FENCED_MEMBER_EPOCH
            self.clients.remove(client)
            self.group.remove(client.member_id)
            return
        assert state is not None
        if not lost:
            client.epoch = state.member_epoch
            client.holds = state.assigned

    def pick(self, index: int) -> Client:
        return self.clients[index % len(self.clients)]

    @precondition(lambda self: len(self.clients) < MAX_CLIENTS)
    @rule(lost=st.booleans())
    def join(self, lost: bool) -> None:
        self.joined += 1
        client = Client(f"m{self.joined}")
        self.clients.append(client)
        self.send(client, {}, lost)

    @precondition(lambda self: bool(self.clients))
    @rule(index=st.integers(0, MAX_CLIENTS), report=st.booleans(), lost=st.booleans())
    def heartbeat(self, index: int, report: bool, lost: bool) -> None:
        client = self.pick(index)
        self.send(client, client.holds if report else None, lost)

    @precondition(lambda self: bool(self.clients))
    @rule(index=st.integers(0, MAX_CLIENTS))
    def leave(self, index: int) -> None:
        # The consumer gives up its partitions, then says it leaves.
        client = self.pick(index)
        self.clients.remove(client)
        self.group.remove(client.member_id)

    @rule()
    def turn_the_target(self) -> None:
        self.group.shift += 1
        self.group.new_target()

    @rule()
    def settle(self) -> None:
        """With no more changes, a few rounds of heartbeats bring everyone to the target."""
        quiet = 0
        for _ in range(QUIET_ROUNDS + MAX_CLIENTS + 2):
            before = self.group.epoch
            for client in list(self.clients):
                if client in self.clients:
                    self.send(client, client.holds, lost=False)
            quiet = quiet + 1 if self.group.epoch == before else 0
            if quiet == QUIET_ROUNDS:
                break
        assert quiet == QUIET_ROUNDS
        group = self.group
        for member_id, m in group.members.items():
            assert m.is_reconciled_to(group.epoch), (member_id, m, group.epoch)
            assert m.assigned == group.targets[member_id] and not m.pending_revocation
        for client in self.clients:
            assert client.epoch == group.epoch and client.holds == group.targets[client.member_id]

    @invariant()
    def no_partition_has_two_owners(self) -> None:
        owners: dict[tuple[uuid.UUID, int], int] = {}
        seen: set[tuple[uuid.UUID, int]] = set()
        for m in self.group.members.values():
            assert not intersection(m.assigned, m.pending_revocation)
            for topic, partitions in m.held().items():
                for p in partitions:
                    assert (topic, p) not in owners
                    owners[topic, p] = m.member_epoch
        assert dict(self.group.partition_epochs.items()) == owners
        # On the consumers' side too: each holds only what its member holds.
        for client in self.clients:
            held = self.group.members[client.member_id].held()
            for topic, partitions in client.holds.items():
                assert partitions <= held.get(topic, frozenset())
                for p in partitions:
                    assert (topic, p) not in seen
                    seen.add((topic, p))

    @invariant()
    def epochs_never_go_back(self) -> None:
        for member_id, m in self.group.members.items():
            assert m.member_epoch <= self.group.epoch
            assert m.member_epoch >= self.highest_epoch.get(member_id, 0)
            self.highest_epoch[member_id] = m.member_epoch

    def teardown(self) -> None:
        self.settle()


TestGroupMachine = GroupMachine.TestCase
TestGroupMachine.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)
