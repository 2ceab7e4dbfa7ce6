"""The client's consumer-group-protocol member in virtual time: against fastcoord's own
coordinator core (its heartbeats handled by the real consumer group state machine, with
no sockets in between) and against scripted answers for the errors a core in good health
does not give."""

from __future__ import annotations

import base64
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field

from fastcoord.client.consumer_member import ConsumerMember
from fastcoord.client.member import Next, State
from fastcoord.core.config import GroupConfig
from fastcoord.core.consumer.topics import StaticTopics, topic_id_for
from fastcoord.core.coordinator import Coordinator
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseAssignment,
    ConsumerGroupHeartbeatResponseTopicPartitions,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from tests.core.harness import Harness

TOPIC = "t"
T = topic_id_for(TOPIC)
PARTITIONS = 6
INTERVAL_MS = 2_000  # the coordinator's heartbeat interval
SESSION_MS = 10_000
CONFIG = GroupConfig(
    group_consumer_heartbeat_interval_ms=INTERVAL_MS,
    group_consumer_min_heartbeat_interval_ms=INTERVAL_MS,
    group_consumer_session_timeout_ms=SESSION_MS,
    group_consumer_min_session_timeout_ms=SESSION_MS,
)


class Core(Harness):
    """The coordinator core with topic TOPIC, in virtual time."""

    def __init__(self) -> None:
        super().__init__(CONFIG)
        self.topics = StaticTopics({TOPIC: PARTITIONS})
        self.co = Coordinator(CONFIG, now_ms=self.now, topics=self.topics)


@dataclass
class Group:
    """Members polled every `step` ms of virtual time; each request answered at once."""

    core: Core = field(default_factory=Core)
    members: list[ConsumerMember] = field(default_factory=list)
    silent: list[ConsumerMember] = field(default_factory=list)  # not polled: as if dead
    sent: list[tuple[int, ConsumerMember, ConsumerGroupHeartbeatRequest]] = field(
        default_factory=list
    )
    tally: Counter[State] = field(default_factory=Counter)

    def add(self, instance_id: str | None = None) -> ConsumerMember:
        m = ConsumerMember(
            "g",
            [TOPIC],
            rebalance_timeout_ms=30_000,
            group_instance_id=instance_id,
            topic_names={T: TOPIC},
            tally=self.tally,
        )
        self.members.append(m)
        return m

    def send(self, m: ConsumerMember, request: ConsumerGroupHeartbeatRequest) -> Next:
        self.sent.append((self.core.now, m, request))
        answer = self.core.answer(self.core.send(request, 1))
        assert isinstance(answer, ConsumerGroupHeartbeatResponse)
        if request.member_epoch < 0:
            m.on_leave()
            return Next.NOTHING
        outcome = m.on_heartbeat(answer, self.core.now)
        if outcome is Next.REJOIN:
            return self.send(m, m.join(self.core.now))
        if outcome is Next.RETRY:
            return self.send(m, m.start(self.core.now))
        return outcome

    def join(self, m: ConsumerMember) -> None:
        self.send(m, m.join(self.core.now))

    def run(self, ms: int, step: int = 10) -> None:
        end = self.core.now + ms
        while self.core.now < end:
            for m in self.members:
                if m in self.silent:
                    continue
                request = m.poll(self.core.now)
                if request is not None:
                    self.send(m, request)
            self.core.sleep(step)
        assert +self.tally == Counter(m.state for m in self.members)

    def requests(self, m: ConsumerMember) -> list[tuple[int, ConsumerGroupHeartbeatRequest]]:
        return [(at, r) for at, who, r in self.sent if who is m]


def owned(m: ConsumerMember) -> set[int]:
    return set(m.assignment.get(T, frozenset()))


def settled(group: Group) -> bool:
    sets = [owned(m) for m in group.members if m.state is State.STABLE and m not in group.silent]
    return set().union(*sets) == set(range(PARTITIONS)) and sum(map(len, sets)) == PARTITIONS


def answer(
    code: int = 0, epoch: int = 1, partitions: list[int] | None = None, interval: int = INTERVAL_MS
) -> ConsumerGroupHeartbeatResponse:
    assignment = None
    if partitions is not None:
        assignment = ConsumerGroupHeartbeatResponseAssignment(
            [ConsumerGroupHeartbeatResponseTopicPartitions(T, partitions)]
        )
    return ConsumerGroupHeartbeatResponse(
        error_code=code, member_epoch=epoch, heartbeat_interval_ms=interval, assignment=assignment
    )


def stored(group: Group, commit: OffsetCommitRequest) -> OffsetCommitResponse:
    """The core's answer to an OffsetCommit v9, as the server would send it."""
    answer = group.core.answer(group.core.send(commit, 9))
    response = answer.to_response()
    assert isinstance(response, OffsetCommitResponse)
    return response


def is_full(request: ConsumerGroupHeartbeatRequest) -> bool:
    return (
        request.rebalance_timeout_ms != -1
        and request.subscribed_topic_names is not None
        and request.topic_partitions is not None
    )


def in_group(partitions: list[int], now: int = 0) -> ConsumerMember:
    """A member that has joined (scripted) and owns `partitions`, acknowledged."""
    m = ConsumerMember("g", [TOPIC], topic_names={T: TOPIC})
    m.join(now)
    assert m.on_heartbeat(answer(epoch=3, partitions=partitions), now) is Next.NOTHING
    ack = m.poll(now)
    assert ack is not None
    m.on_heartbeat(answer(epoch=3), now)
    return m


# -- joining and heartbeating ----------------------------------------------------------------


def test_a_member_names_itself_and_joins_at_epoch_zero_with_the_full_request() -> None:
    group = Group()
    m = group.add()
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", m.member_id)
    assert uuid.UUID(bytes=base64.urlsafe_b64decode(m.member_id + "==")).version == 4
    group.join(m)
    _, first = group.requests(m)[0]
    assert first.member_epoch == 0 and first.member_id == m.member_id
    assert first.rebalance_timeout_ms == 30_000
    assert first.subscribed_topic_names == [TOPIC]
    assert first.topic_partitions == []
    assert first.instance_id is None
    # The coordinator answered with an epoch and the whole topic: taken at once.
    assert m.state is State.STABLE and m.member_epoch == 1
    assert owned(m) == set(range(PARTITIONS))
    assert m.heartbeat_interval_ms == INTERVAL_MS
    [joined] = m.rebalances
    assert (joined.reason, joined.generation_id, joined.member_id) == ("join", 1, m.member_id)
    assert m.added == {T: frozenset(range(PARTITIONS))}  # for the fleet to fetch offsets of


def test_it_acknowledges_an_assignment_at_once_then_heartbeats_at_the_given_interval() -> None:
    group = Group()
    m = group.add()
    group.join(m)
    group.run(9_000)
    sent = group.requests(m)
    ack_at, ack = sent[1]
    assert ack_at == sent[0][0]  # no interval waited: the new assignment acknowledged
    assert ack.member_epoch == 1
    assert ack.topic_partitions is not None
    assert sorted(ack.topic_partitions[0].partitions) == list(range(PARTITIONS))
    assert ack.subscribed_topic_names is None and ack.rebalance_timeout_ms == -1
    steady = sent[2:]
    assert len(steady) == 4
    assert [b - a for (a, _), (b, _) in zip(sent[1:], steady, strict=False)] == [INTERVAL_MS] * 4
    # Nothing changed: only the epoch goes.
    for _, r in steady:
        assert r.member_epoch == 1 and r.topic_partitions is None
        assert r.subscribed_topic_names is None and r.rebalance_timeout_ms == -1


def test_members_hand_partitions_over_until_the_assignment_is_complete_and_disjoint() -> None:
    group = Group()
    first, second, third = group.add(), group.add(), group.add()
    group.join(first)
    group.run(3_000)
    grown = group.core.now
    group.join(second)
    group.join(third)
    group.run(3 * INTERVAL_MS)
    assert settled(group)
    assert [len(owned(m)) for m in group.members] == [2, 2, 2]
    assert len({m.member_epoch for m in group.members}) == 1
    # The first member was told to revoke at its next heartbeat and said so at once.
    told, ack = [(at, r) for at, r in group.requests(first) if at > grown][:2]
    assert told[1].topic_partitions is None
    assert ack[0] - told[0] <= 10  # the next poll
    assert ack[1].topic_partitions is not None
    assert len(ack[1].topic_partitions[0].partitions) == 2
    # Every epoch each member reached is a row, its first the join.
    for m in group.members:
        assert m.rebalances[0].reason == "join"
        assert m.rebalances[-1].generation_id == m.member_epoch


def test_after_an_error_the_next_request_is_full() -> None:
    m = in_group([0, 1])
    assert m.on_heartbeat(answer(ErrorCode.COORDINATOR_NOT_AVAILABLE), 100) is Next.RETRY
    assert m.member_epoch == 3 and owned(m) == {0, 1}  # still in the group
    again = m.start(200)  # on the coordinator's (new) connection
    assert is_full(again) and again.member_epoch == 3
    assert again.topic_partitions is not None and again.topic_partitions[0].partitions == [0, 1]
    m.on_heartbeat(answer(epoch=3), 210)
    later = m.poll(210 + INTERVAL_MS)
    assert later is not None and not is_full(later) and later.topic_partitions is None


def test_a_lost_or_timed_out_answer_makes_the_next_request_full_after_a_backoff() -> None:
    m = in_group([0])
    m.request_timeout_ms = 1_000
    beat = m.poll(INTERVAL_MS)
    assert beat is not None and not is_full(beat)
    epoch = m.epoch
    assert m.poll(INTERVAL_MS + 999) is None  # still waiting
    assert m.poll(INTERVAL_MS + 1_000) is None  # given up on: a late answer is for `epoch`
    assert m.epoch != epoch
    assert m.poll(INTERVAL_MS + 1_050) is None  # the backoff (retry.backoff.ms)
    retried = m.poll(INTERVAL_MS + 1_100)
    assert retried is not None and is_full(retried) and retried.member_epoch == 3
    # A lost connection: the fleet says so; the next request is full as well.
    m.lost()
    assert is_full(m.start(INTERVAL_MS + 1_200))


def test_fenced_drops_the_partitions_and_rejoins_at_epoch_zero_under_the_same_id() -> None:
    m = in_group([0, 1, 2])
    name = m.member_id
    assert m.on_heartbeat(answer(ErrorCode.FENCED_MEMBER_EPOCH), 500) is Next.REJOIN
    assert m.assignment == {} and m.member_epoch == 0
    rejoin = m.join(500)
    assert rejoin.member_epoch == 0 and rejoin.member_id == name
    assert rejoin.topic_partitions == [] and is_full(rejoin)
    assert m.on_heartbeat(answer(epoch=5, partitions=[3]), 520) is Next.NOTHING
    assert m.rebalances[-1].reason == "FENCED_MEMBER_EPOCH"
    assert (m.rebalances[-1].started_ms, m.rebalances[-1].ended_ms) == (500, 520)
    # Fenced again at epoch 0 (the coordinator still holds the old member): not at once.
    m.join(600)
    assert m.on_heartbeat(answer(ErrorCode.FENCED_MEMBER_EPOCH), 610) is Next.RETRY


def test_a_member_whose_session_expired_rejoins_and_gets_partitions_again() -> None:
    group = Group()
    m, other = group.add(), group.add()
    group.join(m)
    group.join(other)
    group.run(3 * INTERVAL_MS)
    assert settled(group)
    old_epoch = m.member_epoch
    group.silent.append(m)  # for longer than the session
    group.run(SESSION_MS + INTERVAL_MS)
    assert owned(other) == set(range(PARTITIONS))
    group.silent.remove(m)
    name = m.member_id
    group.run(3 * INTERVAL_MS)
    errors = [r for r in m.rebalances if r.reason == "UNKNOWN_MEMBER_ID"]
    assert errors and m.member_id == name and m.member_epoch > old_epoch
    assert settled(group) and owned(m)


def test_fatal_errors_stop_the_member() -> None:
    for code in (
        ErrorCode.UNRELEASED_INSTANCE_ID,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        ErrorCode.INVALID_REQUEST,
    ):
        m = in_group([0])
        assert m.on_heartbeat(answer(code), 10) is Next.STOP
        assert m.state is State.STOPPED and m.last_error == code
        assert m.poll(10_000) is None


# -- leaving -------------------------------------------------------------------------------


def test_a_member_leaves_with_epoch_minus_one_and_its_partitions_move() -> None:
    group = Group()
    leaving, staying = group.add(), group.add()
    group.join(leaving)
    group.join(staying)
    group.run(3 * INTERVAL_MS)
    request = leaving.leave()
    assert (request.member_epoch, request.instance_id) == (-1, None)
    group.send(leaving, request)
    assert leaving.state is State.STOPPED
    group.run(INTERVAL_MS + 100)
    assert owned(staying) == set(range(PARTITIONS))


def test_a_static_member_leaves_with_minus_two_and_comes_back_to_its_place() -> None:
    group = Group()
    static, other = group.add("i-0"), group.add("i-1")
    group.join(static)
    group.join(other)
    group.run(3 * INTERVAL_MS)
    assert settled(group)
    mine, epoch = owned(static), static.member_epoch
    rows = (len(static.rebalances), len(other.rebalances))
    request = static.leave()
    assert (request.member_epoch, request.instance_id) == (-2, "i-0")
    group.send(static, request)
    old_id = static.member_id
    static.restart()  # a new process: a new member id, the same instance id
    assert static.member_id != old_id
    group.run(500)
    group.join(static)
    group.run(2 * INTERVAL_MS)
    # Its old place, its old partitions and epoch: no rebalance, for it or the others.
    assert owned(static) == mine and static.member_epoch == epoch
    assert (len(static.rebalances), len(other.rebalances)) == rows


# -- commits -------------------------------------------------------------------------------


def test_commits_carry_the_member_epoch_and_a_stale_one_is_sent_again() -> None:
    group = Group()
    m = group.add()
    group.join(m)
    group.run(INTERVAL_MS)
    commit = m.commit()
    assert commit is not None
    assert commit.generation_id_or_member_epoch == m.member_epoch == 1
    assert commit.member_id == m.member_id
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in commit.topics] == [
        (TOPIC, [1] * PARTITIONS)
    ]
    assert m.on_commit(stored(group, commit)) == (PARTITIONS, 0)

    # Another member joins. This one is told to revoke at its next heartbeat (at its epoch),
    # and the coordinator moves it to the new epoch on its acknowledgement, whose answer it
    # has not read when it commits.
    group.join(group.add())
    group.core.sleep(INTERVAL_MS)
    told = m.poll(group.core.now)
    assert told is not None
    group.send(m, told)
    assert m.member_epoch == 1 and len(owned(m)) == 3
    ack = m.poll(group.core.now)
    assert ack is not None
    unread = group.core.send(ack, 1)
    stale = m.commit()
    assert stale is not None and stale.generation_id_or_member_epoch == 1
    done, code = m.on_commit(stored(group, stale))
    assert (done, code) == (0, ErrorCode.STALE_MEMBER_EPOCH) and m.commit_again
    m.on_heartbeat(group.core.answer(unread), group.core.now)
    assert m.member_epoch == 2
    # The fleet sends it again after that answer, at the positions it had reached.
    again = m.commit(advance=0)
    assert again is not None and again.generation_id_or_member_epoch == 2
    assert [p.committed_offset for p in again.topics[0].partitions] == [2, 2, 2]
    assert m.on_commit(stored(group, again)) == (3, 0)


def test_nothing_to_commit_without_partitions_or_outside_the_group() -> None:
    m = ConsumerMember("g", [TOPIC], topic_names={T: TOPIC})
    assert m.commit() is None
    m.join(0)
    assert m.commit() is None  # joining
    m.on_heartbeat(answer(epoch=1, partitions=[]), 5)
    assert m.commit() is None  # in the group with nothing


def test_offsets_are_fetched_for_what_is_added_and_forgotten_for_what_is_revoked() -> None:
    m = in_group([0, 1])
    first = m.fetch_offsets()
    assert first is not None and [(t.name, t.partition_indexes) for t in first.topics] == [
        (TOPIC, [0, 1])
    ]
    assert m.fetch_offsets() is None  # asked once
    m.positions[(TOPIC, 0)] = 41
    m.on_heartbeat(answer(epoch=4, partitions=[1, 2]), 50)
    assert (TOPIC, 0) not in m.positions
    second = m.fetch_offsets()
    assert second is not None and second.topics[0].partition_indexes == [2]


def test_the_steady_heartbeat_is_the_next_one_sent_while_nothing_changes() -> None:
    """What the fleet's lane repeats is exactly what the member sends once it has joined and
    acknowledged; while joining, acknowledging, in flight or after an error there is none."""
    group = Group()
    m = group.add()
    assert m.steady_heartbeat() is None  # not in the group
    group.join(m)
    assert m.acknowledging and m.steady_heartbeat() is None  # its assignment to acknowledge
    group.run(50)
    expected = ConsumerGroupHeartbeatRequest(
        group_id="g", member_id=m.member_id, member_epoch=m.member_epoch
    )
    assert m.steady_heartbeat() == expected
    assert expected.rebalance_timeout_ms == -1 and expected.topic_partitions is None
    sent = m.poll(m.next_ms)
    assert sent == expected and m.steady_heartbeat() is None  # in flight
    assert m.on_heartbeat(answer(epoch=m.member_epoch), group.core.now) is Next.NOTHING
    assert m.steady_heartbeat() == expected
    # The lane sent it and hands over an answer that errs: the member takes it as its own.
    m.sent_steady(group.core.now - 3)
    assert m.in_flight and m.sent_ms == group.core.now - 3
    m.on_heartbeat(answer(ErrorCode.COORDINATOR_NOT_AVAILABLE), group.core.now)
    assert m.steady_heartbeat() is None  # the next is full
    static = group.add("i-1")
    group.join(static)
    group.run(50)
    assert static.steady_heartbeat() == ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id=static.member_id,
        member_epoch=static.member_epoch,
        instance_id="i-1",
    )
