"""One consumer-group member's side of the group protocol, sans-IO.

A Kafka consumer's coordinator client (Java's AbstractCoordinator and ConsumerCoordinator)
reduced to what the coordinator sees: join (asking again with the member id that
MEMBER_ID_REQUIRED gives), sync (the leader assigns), heartbeat, commit, fetch offsets,
leave, and rejoin on the errors that say the group moved on. It never touches a socket or a
clock: requests go out as message objects, answers come in with `now_ms`, and what the
member saw of rebalances comes out as `Rebalance` records. The fleet (fleet.py) sends,
schedules and measures; tests drive a member with virtual time.

The error handling follows the Java consumer's: REBALANCE_IN_PROGRESS rejoins with the
member id kept; ILLEGAL_GENERATION also keeps it; UNKNOWN_MEMBER_ID forgets it (the
coordinator expired or removed the member) and rejoins as new; FENCED_INSTANCE_ID,
GROUP_MAX_SIZE_REACHED and protocol mismatches stop the member, as they are fatal to a
consumer; coordinator errors retry after a backoff. A stable member that hears its
coordinator has moved or gone keeps its member id, generation and assignment, as Java's
does (AbstractCoordinator marks the coordinator unknown): the fleet finds the coordinator
again and the member heartbeats there, in the same generation, with no rebalance.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from fastcoord.client import assignors
from fastcoord.client.offsets import offset_commit_request, offset_fetch_request
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)


class State(enum.Enum):
    """Where a member is; the values name the loadtest's member-state columns."""

    UNJOINED = "unjoined"  # not in the group: not started, crashed, or waiting to rejoin
    JOINING = "joining"  # a JoinGroup is in flight
    SYNCING = "syncing"  # a SyncGroup is in flight
    STABLE = "stable"  # has its assignment, heartbeats
    LEAVING = "leaving"  # a LeaveGroup is in flight
    STOPPED = "stopped"  # done: left, or a fatal error


class Next(enum.Enum):
    """What the fleet should do after an answer, beside sending any request returned."""

    NOTHING = 0
    REJOIN = 1  # send join() now
    # Find the coordinator again after the retry backoff, then send join() (or, for a member
    # still STABLE, heartbeat there as before).
    RETRY = 2
    STOP = 3  # a fatal error: the member is STOPPED


FATAL = frozenset(
    {
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
        ErrorCode.INVALID_SESSION_TIMEOUT,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.INVALID_GROUP_ID,
        ErrorCode.UNSUPPORTED_VERSION,
    }
)
# Errors after which the member's id is no longer the group's: it rejoins as a new member.
FORGET_ID = frozenset({ErrorCode.UNKNOWN_MEMBER_ID})
# Errors that mean the group is rebalancing or has moved to another generation.
REJOIN = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION})
# Errors that say the coordinator moved, is away or is still loading the group: the group
# itself is as it was.
COORDINATOR = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


class StateListener(Protocol):
    """Told of each change of a member's state, after it is made."""

    def state_changed(self, member: Member, old: State, new: State) -> None: ...


@dataclass(frozen=True)
class Rebalance:
    """A rebalance as one member saw it: from the moment it learned of it (or began to
    join) to its SyncGroup answer, in the member's clock."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    generation_id: int
    started_ms: int
    ended_ms: int
    reason: str  # "join" (its first), "rejoin" (after a restart), or the error's name


@dataclass
class Member:
    """A group member of protocol type "consumer", subscribed to `topics`."""

    group_id: str
    topics: list[str]
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000
    group_instance_id: str | None = None
    assignors: tuple[str, ...] = ("range", "roundrobin")

    # Counts of members by state, kept as each one changes, for a fleet that shows its
    # members by state every second: counting 100k members each time costs more.
    tally: Counter[State] | None = field(default=None, repr=False, compare=False)
    # Whoever must act when the member's state changes: the fleet stops a member's
    # heartbeats the moment it leaves STABLE, whatever made it leave.
    listener: StateListener | None = field(default=None, repr=False, compare=False)
    _state: State = field(default=State.UNJOINED, init=False)
    member_id: str = ""
    generation_id: int = -1
    leader: bool = False
    protocol_name: str | None = None
    assignment: dict[str, list[int]] = field(default_factory=dict)
    # Where consumption is: committed offsets fetched after each assignment, then advanced
    # by every commit as if records had been consumed meanwhile.
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    # Changes whenever the member's timers and in-flight answers stop applying (a new join,
    # a leave, a crash): answers and timers carry the epoch they were made in.
    epoch: int = 0
    rebalance_started_ms: int | None = None
    rebalance_reason: str = "join"
    rebalances: list[Rebalance] = field(default_factory=list)
    # The error of the last answer that stopped or reset the member, for the fleet's records.
    last_error: int = 0
    joined_before: bool = False
    # The generation of the last sync, kept across restarts: a static member that comes
    # back into the same generation saw no rebalance.
    known_generation: int = -1

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

    # -- joining ---------------------------------------------------------------------------

    def join(self, now_ms: int) -> JoinGroupRequest:
        """Start (or restart) a join; the request to send."""
        if self.rebalance_started_ms is None:
            self.rebalance_started_ms = now_ms
            self.rebalance_reason = "rejoin" if self.joined_before else "join"
        self.state = State.JOINING
        self.epoch += 1
        subscription = assignors.encode_subscription(self.topics)
        return JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name, subscription) for name in self.assignors],
        )

    def on_join(
        self, response: JoinGroupResponse, now_ms: int, partitions: dict[str, int]
    ) -> SyncGroupRequest | Next:
        """A JoinGroup answer: the SyncGroup to send, or what to do instead. `partitions`
        (topic -> partition count) is what the leader assigns from."""
        code = response.error_code
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            return Next.REJOIN
        if code != ErrorCode.NONE:
            return self._failed(code, now_ms)
        self.member_id = response.member_id
        self.generation_id = response.generation_id
        self.protocol_name = response.protocol_name
        self.leader = response.leader == response.member_id
        self.state = State.SYNCING
        assignments: list[SyncGroupRequestAssignment] = []
        if self.leader and not response.skip_assignment:
            assign = assignors.ASSIGNORS.get(response.protocol_name or "")
            if assign is None:
                self.last_error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
                self.state = State.STOPPED
                return Next.STOP
            subscriptions = {
                m.member_id: assignors.decode_subscription(m.metadata).topics
                for m in response.members
            }
            plan = assign(subscriptions, partitions)
            assignments = [
                SyncGroupRequestAssignment(member, assignors.encode_assignment(owned))
                for member, owned in plan.items()
            ]
        return SyncGroupRequest(
            group_id=self.group_id,
            generation_id=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type="consumer",
            protocol_name=self.protocol_name,
            assignments=assignments,
        )

    def on_sync(self, response: SyncGroupResponse, now_ms: int) -> Next:
        """A SyncGroup answer: STABLE with its assignment, or what to do instead."""
        code = response.error_code
        if code != ErrorCode.NONE:
            return self._failed(code, now_ms)
        self.assignment = assignors.decode_assignment(response.assignment)
        self.state = State.STABLE
        self.joined_before = True
        moved = self.generation_id != self.known_generation
        self.known_generation = self.generation_id
        if self.rebalance_started_ms is not None and moved:
            self.rebalances.append(
                Rebalance(
                    self.group_id,
                    self.member_id,
                    self.group_instance_id,
                    self.generation_id,
                    self.rebalance_started_ms,
                    now_ms,
                    self.rebalance_reason,
                )
            )
        self.rebalance_started_ms = None
        return Next.NOTHING

    # -- while stable ----------------------------------------------------------------------

    def heartbeat(self) -> HeartbeatRequest:
        return HeartbeatRequest(
            group_id=self.group_id,
            generation_id=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
        )

    def on_heartbeat(self, code: int, now_ms: int) -> Next:
        """A heartbeat's error code (0 for none)."""
        if code == ErrorCode.NONE:
            return Next.NOTHING
        return self._failed(code, now_ms)

    def fetch_offsets(self) -> OffsetFetchRequest:
        """What a consumer asks after each assignment: where to start."""
        return offset_fetch_request(
            self.group_id,
            [(topic, sorted(parts)) for topic, parts in sorted(self.assignment.items())],
        )

    def on_fetch(self, response: OffsetFetchResponse, now_ms: int) -> Next:
        if response.error_code != ErrorCode.NONE:
            return self._failed(response.error_code, now_ms)
        for topic in response.topics:
            for p in topic.partitions:
                if p.error_code == ErrorCode.NONE:
                    self.positions[(topic.name, p.partition_index)] = max(0, p.committed_offset)
        return Next.NOTHING

    def commit(self, advance: int = 1) -> OffsetCommitRequest | None:
        """Commit every assigned partition's position, `advance` past the last commit (as
        if that many records had been consumed); None when nothing is assigned."""
        if self.state is not State.STABLE or not self.assignment:
            return None
        return offset_commit_request(
            self.group_id,
            sorted(self.assignment.items()),
            self.positions,
            advance,
            generation_id_or_member_epoch=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
        )

    def on_commit(self, response: OffsetCommitResponse, now_ms: int) -> tuple[Next, int, int]:
        """(what to do, offsets committed, the first partition error or 0)."""
        done, first_error = committed(response)
        if first_error in COORDINATOR and self.state is State.STABLE:
            return Next.RETRY, done, first_error
        if first_error in REJOIN or first_error in FORGET_ID or first_error in FATAL:
            return self._failed(first_error, now_ms), done, first_error
        return Next.NOTHING, done, first_error

    # -- leaving ---------------------------------------------------------------------------

    def leave(self) -> LeaveGroupRequest:
        """Leave the group as a closing consumer does."""
        self.state = State.LEAVING
        self.epoch += 1
        return LeaveGroupRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            members=[
                MemberIdentity(self.member_id, self.group_instance_id, "the consumer is closing")
            ],
        )

    def on_leave(self) -> None:
        """Left (whatever the answer: the coordinator forgets the member either way)."""
        self.reset(State.STOPPED)

    def crash(self) -> None:
        """Stop without a word, as a killed consumer does: the coordinator finds out when
        the session times out."""
        self.reset(State.UNJOINED)

    def restart(self) -> None:
        """A restarted consumer process: a static member keeps its instance id (and the
        coordinator hands it its old place); a dynamic one starts as a new member."""
        self.reset(State.UNJOINED)

    def reset(self, state: State) -> None:
        self.state = state
        self.epoch += 1
        self.member_id = ""
        self.generation_id = -1
        self.leader = False
        self.assignment = {}
        self.rebalance_started_ms = None

    # -- errors ----------------------------------------------------------------------------

    def _failed(self, code: int, now_ms: int) -> Next:
        self.last_error = code
        if code in FATAL:
            self.reset(State.STOPPED)
            self.last_error = code
            return Next.STOP
        if code in COORDINATOR and self.state is State.STABLE:
            return Next.RETRY  # still in the group: only the coordinator is to be found
        if self.rebalance_started_ms is None:
            self.rebalance_started_ms = now_ms
            self.rebalance_reason = _name(code)
        if code in FORGET_ID:
            self.member_id = ""
            self.generation_id = -1
            return Next.REJOIN
        if code in REJOIN:
            return Next.REJOIN
        # Coordinator moving, loading or busy: the same join again, after a pause.
        self.state = State.UNJOINED
        self.epoch += 1
        return Next.RETRY


def committed(response: OffsetCommitResponse) -> tuple[int, int]:
    """(offsets an OffsetCommit stored, the first partition error or 0)."""
    done = 0
    first_error = 0
    for topic in response.topics:
        for p in topic.partitions:
            if p.error_code == ErrorCode.NONE:
                done += 1
            elif not first_error:
                first_error = p.error_code
    return done, first_error


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
