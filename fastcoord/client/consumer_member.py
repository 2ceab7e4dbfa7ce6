"""One member of Kafka's consumer group protocol (KIP-848), sans-IO.

The coordinator assigns; a member's one request, ConsumerGroupHeartbeat, both joins and
stays. This is what the coordinator sees of Kafka's Java consumer (ConsumerMembershipManager
and ConsumerHeartbeatRequestManager): it names itself (a random UUID), joins at member epoch
0 with the full request, heartbeats every HeartbeatIntervalMs the coordinator gives, sends
the full request again after any error or a lost answer (and otherwise only its epoch, plus
its partitions when they changed since the last heartbeat it sent), adopts each new
assignment at once and acknowledges it with a heartbeat straight away, and leaves with epoch
-1 (-2 when static). Like member.py it never touches a socket or a clock: requests go out as
message objects, answers come in with `now_ms`, and what the member saw comes out as
`Rebalance` records; the fleet (consumer_fleet.py) sends, schedules and measures.

The load generator consumes nothing, so reconciling an assignment is instant: what is gone
is revoked and what is new is taken in the same step, with no callbacks to wait for.
"""

from __future__ import annotations

import base64
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from fastcoord.client.member import Next, Rebalance, State, committed
from fastcoord.client.offsets import offset_commit_request, offset_fetch_request
from fastcoord.protocol.errors import ErrorCode, error_name
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2  # a static member that will be back: the coordinator keeps its place

# The member must drop its partitions and join again at epoch 0, under the same member id.
FENCED = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
# The coordinator moved, is loading or is away: the same member asks again after a backoff.
COORDINATOR = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
# Named for the reader: every other error stops the member too, as the Java client's
# default branch makes any error it does not expect fatal.
FATAL = frozenset(
    {
        ErrorCode.UNRELEASED_INSTANCE_ID,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.FENCED_INSTANCE_ID,
    }
)

Assignment = dict[uuid.UUID, frozenset[int]]  # topic id -> partitions, as the protocol says


def new_member_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): 22 characters of URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class StateListener(Protocol):
    """Told of each change of a member's state, after it is made."""

    def state_changed(self, member: ConsumerMember, old: State, new: State) -> None: ...


@dataclass
class ConsumerMember:
    """A member of a consumer group of the consumer protocol, subscribed to `topics`.

    Its states are member.State, so that both protocols fill the loadtest's state columns:
    UNJOINED (not in the group, or finding its coordinator again), JOINING (its epoch-0
    heartbeat is in flight), STABLE (in the group, with a member epoch: heartbeating),
    LEAVING, STOPPED. SYNCING is a classic notion (a SyncGroup in flight) with no
    counterpart here: the assignment comes in the heartbeat's answer.
    """

    group_id: str
    topics: list[str]
    rebalance_timeout_ms: int = 300_000
    group_instance_id: str | None = None
    server_assignor: str | None = None  # None: the coordinator's default
    # How long an answer may take before the member gives up on it and asks again (full).
    request_timeout_ms: int = 30_000
    # Kafka's retry.backoff.ms and retry.backoff.max.ms: the pause after an answer is given up
    # on, doubling while it keeps happening.
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    # Topic id -> name, for commits (OffsetCommit v9 names topics); the fleet's, shared by
    # its members and filled from Metadata. A topic it has no name for is not committed.
    topic_names: dict[uuid.UUID, str] = field(default_factory=dict, repr=False)

    # As member.Member's: counts by state, and whoever must act on a change of state.
    tally: Counter[State] | None = field(default=None, repr=False, compare=False)
    listener: StateListener | None = field(default=None, repr=False, compare=False)
    _state: State = field(default=State.UNJOINED, init=False)
    # From ConsumerGroupHeartbeat v1 the client names itself, once per process; it keeps
    # the name when fenced and rejoins with it.
    member_id: str = field(default_factory=new_member_id)
    # The protocol's member epoch: 0 to join, then whatever the coordinator answers. It
    # stands where the classic protocol's generation does, in commits and in Rebalance rows.
    member_epoch: int = JOIN_EPOCH
    heartbeat_interval_ms: int = 0  # the coordinator's; 0 until it has said
    assignment: Assignment = field(default_factory=dict)  # what the member owns
    # Partitions assigned since the fleet last asked for their committed offsets.
    added: Assignment = field(default_factory=dict)
    # Where consumption is, as member.Member's: fetched, then advanced by every commit.
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    # Not the member epoch: as member.Member's, it changes whenever the member's timers and
    # in-flight answers stop applying (a join, a leave, an answer given up on, a crash).
    epoch: int = 0
    in_flight: bool = False  # a heartbeat awaits its answer
    acknowledging: bool = False  # the next heartbeat acknowledges a new assignment, at once
    sent_ms: int = 0  # when the last heartbeat was sent
    # The member's next action: the next heartbeat while none is in flight, else the moment
    # it gives up on the one in flight.
    next_ms: int = 0
    # When an answer last changed the member's epoch or assignment, and when the last
    # heartbeat whose answer changed neither was sent: a member confirmed after every change
    # its fleet saw is where the group's target puts it (the fleet's all_stable).
    changed_ms: int = 0
    confirmed_ms: int = -1
    # A commit answered STALE_MEMBER_EPOCH: sent again once the next heartbeat has answered
    # (with the epoch the commit must carry).
    commit_again: bool = False
    rebalance_started_ms: int | None = None
    rebalance_reason: str = "join"
    rebalances: list[Rebalance] = field(default_factory=list)
    last_error: int = 0
    joined_before: bool = False
    # The member epoch of the last Rebalance row, kept across restarts: a static member that
    # comes back at the same epoch saw no rebalance.
    known_epoch: int = -1
    _full: bool = True  # the next heartbeat carries every field
    _sent_owned: Assignment | None = None  # the partitions the last heartbeat reported
    _failures: int = 0  # answers given up on in a row, for the backoff

    def __post_init__(self) -> None:
        if self.tally is not None:
            self.tally[self._state] += 1

    @property
    def state(self) -> State:
        return self._state

    @state.setter
    def state(self, new: State) -> None:
        old = self._state
        if self.tally is not None:
            self.tally[old] -= 1
            self.tally[new] += 1
        self._state = new
        if self.listener is not None:
            self.listener.state_changed(self, old, new)

    # -- joining and heartbeating ----------------------------------------------------------

    def join(self, now_ms: int) -> ConsumerGroupHeartbeatRequest:
        """Join (or rejoin) at epoch 0, owning nothing; the request to send."""
        if self.rebalance_started_ms is None:
            self.rebalance_started_ms = now_ms
            self.rebalance_reason = "rejoin" if self.joined_before else "join"
        self.member_epoch = JOIN_EPOCH
        self._drop_assignment()
        self.state = State.JOINING
        self.epoch += 1
        self._full = True
        return self._send(now_ms)

    def start(self, now_ms: int) -> ConsumerGroupHeartbeatRequest:
        """The first request on a connection to the coordinator: the join, or, for a member
        still in the group (its coordinator moved or its connection was lost), a full
        heartbeat at its epoch."""
        if self.member_epoch == JOIN_EPOCH:
            return self.join(now_ms)
        self.state = State.STABLE
        self.epoch += 1
        self._full = True
        return self._send(now_ms)

    def poll(self, now_ms: int) -> ConsumerGroupHeartbeatRequest | None:
        """The heartbeat due at `now_ms`, if one is. A heartbeat unanswered for the request
        timeout is given up on (its answer, if it comes, is for an old `epoch`): the next
        one, after the backoff, is full."""
        if self._state is not State.STABLE and self._state is not State.JOINING:
            return None
        if self.in_flight:
            if now_ms - self.sent_ms >= self.request_timeout_ms:
                self.epoch += 1
                self.lost()
                self.next_ms = now_ms + self._backoff()
            return None
        if now_ms < self.next_ms:
            return None
        return self._send(now_ms)

    def beat_at(self, at_ms: int) -> None:
        """Move the next heartbeat (none in flight) to `at_ms`: the generator's choice, not
        the protocol's (see consumer_fleet.py)."""
        if not self.in_flight:
            self.next_ms = at_ms

    def steady_heartbeat(self) -> ConsumerGroupHeartbeatRequest | None:
        """The heartbeat the member would send next if it carries its epoch and nothing
        else (None if it would carry more, or is not stable, or has one in flight): the one
        the fleet's lane repeats, unchanged, until an answer says something new."""
        if (
            self._state is not State.STABLE
            or self.in_flight
            or self._full
            or self.acknowledging
            or self.member_epoch <= JOIN_EPOCH
            or self.heartbeat_interval_ms <= 0
            or self.assignment != self._sent_owned
        ):
            return None
        return ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            instance_id=self.group_instance_id,
        )

    def sent_steady(self, sent_ms: int) -> None:
        """The steady heartbeat went out at `sent_ms` (from the fleet's lane, which hands
        over its answer next), as if `poll` had sent it."""
        self.in_flight = True
        self.sent_ms = sent_ms
        self.next_ms = sent_ms + self.request_timeout_ms

    def lost(self) -> None:
        """The heartbeat in flight will not be answered (the connection was lost, or the
        member gave up on it): whatever comes next must carry every field."""
        self.in_flight = False
        self._full = True

    def _send(self, now_ms: int) -> ConsumerGroupHeartbeatRequest:
        # Kafka's HeartbeatState: the full request when joining or after an error; otherwise
        # only what changed since the last heartbeat sent. The instance id always goes.
        full = self._full or self.member_epoch == JOIN_EPOCH
        owned: list[ConsumerGroupHeartbeatRequestTopicPartitions] | None = None
        if full or self.assignment != self._sent_owned:
            owned = [
                ConsumerGroupHeartbeatRequestTopicPartitions(topic, sorted(parts))
                for topic, parts in sorted(self.assignment.items(), key=lambda item: item[0].int)
            ]
            self._sent_owned = dict(self.assignment)
        self._full = False
        self.in_flight = True
        self.sent_ms = now_ms
        self.next_ms = now_ms + self.request_timeout_ms
        return ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            instance_id=self.group_instance_id,
            rebalance_timeout_ms=self.rebalance_timeout_ms if full else -1,
            subscribed_topic_names=list(self.topics) if full else None,
            server_assignor=self.server_assignor if full else None,
            topic_partitions=owned,
        )

    def on_heartbeat(self, response: ConsumerGroupHeartbeatResponse, now_ms: int) -> Next:
        """A heartbeat's answer: NOTHING (the next heartbeat is due at `next_ms`), REJOIN
        (fenced: send join() now), RETRY (find the coordinator again, then start()), or
        STOP (a fatal error: the member is STOPPED)."""
        self.in_flight = False
        code = response.error_code
        if code != ErrorCode.NONE:
            return self._failed(code, now_ms)
        self._failures = 0
        if response.heartbeat_interval_ms > 0:
            self.heartbeat_interval_ms = response.heartbeat_interval_ms
        if response.member_id:  # v0: the coordinator names the member in its first answer
            self.member_id = response.member_id
        joining = self._state is State.JOINING
        revoked = changed = False
        if response.assignment is not None:
            new = {
                tp.topic_id: frozenset(tp.partitions)
                for tp in response.assignment.topic_partitions
                if tp.partitions
            }
            if new != self.assignment:
                revoked = any(
                    not parts <= new.get(t, frozenset()) for t, parts in self.assignment.items()
                )
                self._adopt(new)
                changed = True
        if changed or response.member_epoch != self.member_epoch:
            self.changed_ms = now_ms
        else:
            self.confirmed_ms = self.sent_ms
        self.member_epoch = response.member_epoch
        if joining:
            self.state = State.STABLE
            self.joined_before = True
        self._observe(now_ms, revoked)
        # A new assignment is acknowledged at once, as the Java client does (its
        # ACKNOWLEDGING state heartbeats without waiting for the interval): the partitions
        # a revocation freed reach their next owner a round trip later, not an interval.
        self.acknowledging = changed
        self.next_ms = now_ms if changed else self.sent_ms + self.heartbeat_interval_ms
        return Next.NOTHING

    def _adopt(self, new: Assignment) -> None:
        """Revoke what is gone and take what is new, in one step: nothing is consumed."""
        for topic, parts in self.assignment.items():
            gone = parts - new.get(topic, frozenset())
            name = self.topic_names.get(topic)
            if name is not None:
                for p in gone:
                    self.positions.pop((name, p), None)
        for topic, parts in new.items():
            fresh = parts - self.assignment.get(topic, frozenset())
            if fresh:
                self.added[topic] = self.added.get(topic, frozenset()) | fresh
        for topic in list(self.added):
            kept = self.added[topic] & new.get(topic, frozenset())
            if kept:
                self.added[topic] = kept
            else:
                del self.added[topic]
        self.assignment = new

    def _observe(self, now_ms: int, revoked: bool) -> None:
        """A Rebalance row for each new member epoch: the epoch is the consumer protocol's
        generation, and every member's moves to the group's new one once it has what the
        new target gives it. The row runs from when the member learned of the change (it
        sent its join, was fenced, lost its coordinator, or was told to revoke partitions)
        to the answer with its new epoch; an epoch that came with nothing taken away cost
        the member nothing, and its row lasts 0 ms."""
        epoch = self.member_epoch
        if epoch != self.known_epoch:
            started = self.rebalance_started_ms
            self.rebalances.append(
                Rebalance(
                    self.group_id,
                    self.member_id,
                    self.group_instance_id,
                    epoch,
                    now_ms if started is None else started,
                    now_ms,
                    "assignment" if started is None else self.rebalance_reason,
                )
            )
            self.known_epoch = epoch
            self.rebalance_started_ms = None
        elif revoked:
            # The coordinator keeps a revoking member at its epoch until it acknowledges.
            if self.rebalance_started_ms is None:
                self.rebalance_started_ms = now_ms
                self.rebalance_reason = "assignment"
        else:
            # Back at the epoch it had (a static member's return, a coordinator found
            # again): no rebalance.
            self.rebalance_started_ms = None

    def _failed(self, code: int, now_ms: int) -> Next:
        self.last_error = code
        self._full = True  # Kafka resets its heartbeat state on every error
        if code in FENCED:
            if self.rebalance_started_ms is None:
                self.rebalance_started_ms = now_ms
                self.rebalance_reason = error_name(code)
            was_joining = self.member_epoch == JOIN_EPOCH
            self._drop_assignment()
            self.member_epoch = JOIN_EPOCH
            # Fenced at epoch 0 too: the coordinator still holds the member at another epoch
            # (until its session ends). Joining again at once would ask as fast as it answers.
            return Next.RETRY if was_joining else Next.REJOIN
        if code in COORDINATOR:
            return Next.RETRY
        self.reset(State.STOPPED)
        self.last_error = code
        return Next.STOP

    def _drop_assignment(self) -> None:
        self.assignment = {}
        self.added = {}
        self.commit_again = False

    def _backoff(self) -> int:
        delay = min(self.retry_backoff_ms << min(self._failures, 10), self.retry_backoff_max_ms)
        self._failures += 1
        return delay

    # -- offsets ---------------------------------------------------------------------------

    def fetch_offsets(self) -> OffsetFetchRequest | None:
        """Where to start on the partitions assigned since the last call (None if none): a
        consumer asks for the committed offsets of what it is given."""
        partitions = self._named(self.added)
        self.added = {}
        if not partitions:
            return None
        return offset_fetch_request(self.group_id, partitions)

    def on_fetch(self, response: OffsetFetchResponse) -> None:
        if response.error_code != ErrorCode.NONE:
            return  # positions stay where they were; the heartbeats find out what is wrong
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code == ErrorCode.NONE:
                    self.positions[(topic.name, p.partition_index)] = max(0, p.committed_offset)

    def commit(self, advance: int = 1) -> OffsetCommitRequest | None:
        """OffsetCommit (v9: the member epoch where the classic protocol has the generation)
        of every owned partition, `advance` past its position; None when nothing is owned
        or the member is not in the group."""
        if self._state is not State.STABLE or not self.assignment:
            return None
        partitions = self._named(self.assignment)
        if not partitions:
            return None
        return offset_commit_request(
            self.group_id,
            partitions,
            self.positions,
            advance,
            generation_id_or_member_epoch=self.member_epoch,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
        )

    def _named(self, assignment: Assignment) -> list[tuple[str, list[int]]]:
        """`assignment` as offset requests name it (OffsetCommit v9 and OffsetFetch name
        topics, not ids), in the order of the ids; a topic the fleet has no name for yet is
        left out, since no request could name it."""
        return [
            (self.topic_names[topic], sorted(parts))
            for topic, parts in sorted(assignment.items(), key=lambda item: item[0].int)
            if topic in self.topic_names
        ]

    def on_commit(self, response: OffsetCommitResponse) -> tuple[int, int]:
        """(offsets committed, the first partition error or 0). A commit that met a newer
        epoch (STALE_MEMBER_EPOCH) is sent again after the next heartbeat's answer; other
        errors are the heartbeats' to find out about."""
        done, first_error = committed(response)
        if first_error == ErrorCode.STALE_MEMBER_EPOCH and self._state is State.STABLE:
            self.commit_again = True
        return done, first_error

    # -- leaving ---------------------------------------------------------------------------

    def leave(self) -> ConsumerGroupHeartbeatRequest:
        """Leave as a closing consumer does: epoch -1, or -2 for a static member, whose place
        and partitions the coordinator keeps until its session ends."""
        self.state = State.LEAVING
        self.epoch += 1
        self.in_flight = False
        static = self.group_instance_id is not None
        return ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=LEAVE_STATIC_EPOCH if static else LEAVE_EPOCH,
            instance_id=self.group_instance_id,
        )

    def on_leave(self) -> None:
        """Left (whatever the answer: the member is done either way)."""
        self.reset(State.STOPPED)

    def crash(self) -> None:
        """Stop without a word, as a killed consumer does: the coordinator finds out when
        the session times out (and a static member's instance id stays taken until then)."""
        self.reset(State.UNJOINED)

    def restart(self) -> None:
        """A restarted consumer process: a new member id (each process makes its own), the
        same instance id if static."""
        self.reset(State.UNJOINED)
        self.member_id = new_member_id()

    def reset(self, state: State) -> None:
        self.state = state
        self.epoch += 1
        self.member_epoch = JOIN_EPOCH
        self._drop_assignment()
        self.in_flight = False
        self._full = True
        self._sent_owned = None
        self.rebalance_started_ms = None
        self.confirmed_ms = -1
