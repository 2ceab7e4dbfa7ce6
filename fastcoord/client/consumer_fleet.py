"""Many members of the consumer group protocol (KIP-848) over shared connections.

The classic fleet (fleet.py) finds coordinators, opens and shares connections, retries and
watches the server; this fleet keeps all of that and changes what a member says once it is
connected: ConsumerGroupHeartbeat instead of JoinGroup, SyncGroup and Heartbeat, and
OffsetCommit v9 with the member epoch.

A member that is joining, acknowledging, recovering from an error or told of anything new
goes through the Python path: each heartbeat and commit a request object sent on its
connection and a callback on its answer, with its timers in the fleet's wheel. A steady
member (stable, nothing in flight, its next heartbeat carrying its epoch and nothing else)
heartbeats in its connection's lane instead, as a stable classic member does: its
pre-encoded ConsumerGroupHeartbeat goes out every interval, and an answer that is exactly
the one every steady heartbeat gets (its id, its epoch, its interval, nothing else) is
recorded in the lane. Any other answer comes back here: the member leaves its lane, the
answer is decoded and handed to it, and once it is steady again (at its new epoch, say) it
goes back in. Its commits go into the lane at the next turn of its commit loop after it
went in (its OffsetFetch answered), at the loop's rhythm; leaving the lane (for any answer
that says something new, a leave, a crash, a lost connection) hands its positions back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from fastcoord.client.connection import WANTED, LaneAnswer
from fastcoord.client.consumer_member import ConsumerMember
from fastcoord.client.fleet import Fleet, FleetConfig, Recorder, Seat
from fastcoord.client.member import Next, State, committed
from fastcoord.client.native import (
    commit_answer,
    commit_offsets,
    commit_template,
    consumer_heartbeat_answer,
    consumer_heartbeat_template,
)
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
)
from fastcoord.protocol.schema import Response

log = logging.getLogger("fastcoord.client")

CONSUMER_GROUP_HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT
OFFSET_COMMIT = ApiKey.OFFSET_COMMIT
# Metadata v10+ names each topic's id, which assignments use; OffsetCommit v9 carries the
# member epoch. The same versions against every server: the librdkafka mock's trouble with
# flexible classic versions (connection.LIBRDKAFKA) does not arise without them.
CONSUMER_WANTED: dict[int, int] = {
    **WANTED,
    ApiKey.METADATA: 12,
    ApiKey.OFFSET_COMMIT: 9,
    CONSUMER_GROUP_HEARTBEAT: 1,
}


class ConsumerFleet(Fleet):
    """A fleet whose members speak the consumer group protocol; `run` as Fleet's."""

    LANE_HEARTBEAT = CONSUMER_GROUP_HEARTBEAT

    def __init__(
        self, config: FleetConfig, recorder: Recorder, wall_ms: Callable[[], int] | None = None
    ) -> None:
        super().__init__(config, recorder, wall_ms)
        self._wanted = CONSUMER_WANTED
        # Seats whose commit is in flight (one at a time each), and each seat's commit
        # loop: a loop whose number is no longer the seat's ends at its next turn.
        self._committing: set[Seat[Any]] = set()
        self._commit_loops: dict[Seat[Any], int] = {}
        self._last_change_ms = 0  # the last answer that changed any member's epoch or partitions
        # Members that joined and whose steady heartbeats have yet to be spread (below).
        self._unspread: set[Seat[Any]] = set()
        # Seats whose OffsetFetch is in flight: their commits stay in Python until it is
        # answered, since the positions it brings would be lost under the lane's.
        self._fetching: set[Seat[Any]] = set()

    async def _learn_topics(self) -> None:
        await super()._learn_topics()
        self._wanted = CONSUMER_WANTED  # kept whatever the server is

    def add(
        self, group_id: str, instance_id: str | None = None, number: int | None = None
    ) -> Seat[Any]:
        c = self.config
        member = ConsumerMember(
            group_id,
            list(c.topics),
            rebalance_timeout_ms=c.rebalance_timeout_ms,
            group_instance_id=instance_id,
            request_timeout_ms=c.request_timeout_ms,
            retry_backoff_ms=c.retry_backoff_ms,
            topic_names=self.topic_names,
            tally=self._tally,
        )
        index = len(self.seats)
        share, slot = self._place(index if number is None else number)
        seat: Seat[ConsumerMember] = Seat(index, member, slot, share=share)
        member.listener = seat
        self.seats.append(seat)
        return seat

    def _finds_again(self, seat: Seat[Any]) -> bool:
        """No: the member goes back to UNJOINED, and its first heartbeat to the coordinator
        found again is a full one at the epoch it has, which keeps its place (no rebalance)."""
        return False

    # -- heartbeats ------------------------------------------------------------------------

    def _join(self, seat: Seat[Any]) -> None:
        """The member's first request on its coordinator's connection: its join, or a full
        heartbeat if it is still in the group."""
        member: ConsumerMember = seat.member
        connection = seat.connection
        if connection is None or connection.closed:
            return self._retry(seat, ErrorCode.NETWORK_EXCEPTION, CONSUMER_GROUP_HEARTBEAT)
        request = member.start(self.now_ms())
        if self.storm is not None and request.member_epoch == 0:
            entry = self.storm.setdefault(member.group_id, [0, 0, 0, 0])
            entry[0] = max(entry[0], time.time_ns())
        self._send(seat, request)

    def _send(self, seat: Seat[ConsumerMember], request: ConsumerGroupHeartbeatRequest) -> None:
        def answered(response: ConsumerGroupHeartbeatResponse, latency_ns: int) -> Next:
            return self._answered(seat, response, latency_ns)

        self._ask_coordinator(
            seat,
            request,
            CONSUMER_GROUP_HEARTBEAT,
            ConsumerGroupHeartbeatResponse,
            answered,
            lost=seat.member.lost,
        )
        self._wake(seat)  # to give up on the answer if it takes the request timeout

    def _answered(
        self, seat: Seat[ConsumerMember], response: ConsumerGroupHeartbeatResponse, latency_ns: int
    ) -> Next:
        """A heartbeat's answer, sent from Python or from the lane, handed to the member;
        what the member says to do next, for the caller to follow."""
        member = seat.member
        code = response.error_code
        self.recorder.record(CONSUMER_GROUP_HEARTBEAT, latency_ns, code, seat.coordinator)
        if code != ErrorCode.NONE:
            self._error_row(CONSUMER_GROUP_HEARTBEAT, code, member)
        joining = member.state is State.JOINING
        now = self.now_ms()
        outcome = member.on_heartbeat(response, now)
        if outcome is Next.NOTHING:
            self._heard(seat, joining, member.changed_ms == now)
        return outcome

    def _heard(self, seat: Seat[ConsumerMember], joined: bool, changed: bool) -> None:
        """A heartbeat answered without error: record what the member saw, fetch offsets of
        what it was given, resend a stale commit, and wait for the next heartbeat."""
        member = seat.member
        seat.retries = 0
        self.back(seat)
        for rebalance in member.rebalances:
            self._rebalance_row(rebalance)
        member.rebalances.clear()
        if changed:
            self._last_change_ms = member.changed_ms
        if self.storm is not None and member.group_id in self.storm and (joined or changed):
            # A join storm of this protocol ends with the group's last move (the last answer
            # that changed a member's epoch or partitions), not with the last join.
            entry = self.storm[member.group_id]
            now_ns = time.time_ns()
            entry[1] = max(entry[1], now_ns)
            if joined:
                entry[2] += 1
                if entry[3] == 0:
                    entry[3] = now_ns
        if joined:
            self._commit_loop(seat)
            self._unspread.add(seat)
        if seat in self._unspread and not member.acknowledging:
            # Once a member has joined and acknowledged what it was given, its heartbeats
            # start from a random point of the interval, as the classic members' do: members
            # that joined in one storm would otherwise beat together, a burst every interval,
            # and the run would measure the generator's bursts (real consumers start apart).
            self._unspread.discard(seat)
            interval = max(1, member.heartbeat_interval_ms)
            member.beat_at(self.now_ms() + self._rng.randrange(1, interval + 1))
        if member.added:
            self._fetch_offsets(seat)
        if member.commit_again:
            member.commit_again = False
            self._commit(seat, advance=0)
        if not self._to_lane(seat):
            self._wake(seat)

    def _to_lane(self, seat: Seat[ConsumerMember]) -> bool:
        """Put a steady member's heartbeats into its connection's lane, from its next one
        on; False if it is not steady (it heartbeats from Python)."""
        member = seat.member
        connection = seat.connection
        if seat.lane is not None or seat.down or connection is None or connection.closed:
            return False
        if seat.slot >= connection.lane.slots:
            return False
        request = member.steady_heartbeat()
        if request is None:
            return False
        version = connection.version(CONSUMER_GROUP_HEARTBEAT)
        connection.lane.start(
            seat.slot,
            seat,
            consumer_heartbeat_template(version, connection.client_id, request),
            member.next_ms,
            member.heartbeat_interval_ms,
            consumer_heartbeat_answer(
                version, member.member_id, member.member_epoch, member.heartbeat_interval_ms
            ),
        )
        seat.lane = connection.lane
        return True

    def _on_lane(self, answers: list[LaneAnswer], now_ns: int) -> None:
        """The lanes' answers that are not plain successes: a heartbeat's answer that says
        something new (the member leaves its lane and takes the answer as one sent from
        Python), a commit's, and a lost connection."""
        self._last_progress_ns = now_ns
        for seat, api, current, latency_ns, code, response in answers:
            member: ConsumerMember = seat.member
            if api == OFFSET_COMMIT:
                assert isinstance(response, OffsetCommitResponse)
                # Counted even when the member has moved on: the server stored what it stored.
                if current and not seat.down:
                    done, code = member.on_commit(response)
                else:
                    done, code = committed(response)
                self.recorder.record(OFFSET_COMMIT, latency_ns, code, seat.coordinator)
                self.recorder.commit(done)
                if code:
                    self._error_row(OFFSET_COMMIT, code, member)
                continue
            if not current or seat.down:
                continue  # the member has moved on since: its old heartbeat says nothing now
            if response is None:  # the connection was lost (Connection names its members)
                member.lost()
                self._retry(seat, ErrorCode.NETWORK_EXCEPTION, CONSUMER_GROUP_HEARTBEAT)
                continue
            assert isinstance(response, ConsumerGroupHeartbeatResponse)
            seat.stop_lane(member)
            member.sent_steady(self.now_ms() - latency_ns // 1_000_000)
            outcome = self._answered(seat, response, latency_ns)
            self._follow(seat, outcome, CONSUMER_GROUP_HEARTBEAT)

    def _wake(self, seat: Seat[ConsumerMember]) -> None:
        """Act for the member at its `next_ms`: send the heartbeat due, or give up on the
        one in flight. A wake-up for a time the member has moved on from does nothing."""
        member = seat.member
        epoch = member.epoch
        at = member.next_ms

        def wake() -> None:
            if member.epoch != epoch or member.next_ms != at or seat.down or seat.lane:
                return  # moved on, or heartbeating in its lane
            request = member.poll(self.now_ms())
            if request is not None:
                if seat.connection is None or seat.connection.closed:
                    member.lost()
                    self._retry(seat, ErrorCode.NETWORK_EXCEPTION, CONSUMER_GROUP_HEARTBEAT)
                    return
                self._send(seat, request)
            elif member.state is State.STABLE or member.state is State.JOINING:
                self._wake(seat)  # not due yet (the tick came early), or given up on

        self.call_later(max(0, at - self.now_ms()), wake)

    def all_stable(self, seats: Iterable[Seat[Any]] | None = None) -> bool:
        """Whether the groups have settled: every member (but those down) in its group and,
        since the last change any member here was told of, told of none (a member learns
        of a new group epoch at its next heartbeat, so being in the group is not enough)."""
        last = self._last_change_ms
        return all(
            s.member.state is State.STABLE and _confirmed_ms(s) >= last
            for s in (self.seats if seats is None else seats)
            if not s.down
        )

    # -- offsets ---------------------------------------------------------------------------

    def _fetch_offsets(self, seat: Seat[ConsumerMember]) -> None:
        member = seat.member
        request = member.fetch_offsets()
        connection = seat.connection
        if request is None or connection is None or connection.closed:
            return
        self._fetching.add(seat)

        def on_answer(response: Response | None, latency_ns: int) -> None:
            self._fetching.discard(seat)
            if response is None:
                return
            assert isinstance(response, OffsetFetchResponse)
            code = response.error_code
            self.recorder.record(ApiKey.OFFSET_FETCH, latency_ns, code, connection.address)
            member.on_fetch(response)

        connection.send(request, on_answer)

    def _commit_loop(self, seat: Seat[ConsumerMember]) -> None:
        """A commit every commit interval from a random point of the first, one record
        past the last each time, for as long as the member lives (a new join starts a
        new loop; the old one ends)."""
        interval = self.config.commit_interval_ms
        if interval <= 0:
            return
        loop = self._commit_loops.get(seat, 0) + 1
        self._commit_loops[seat] = loop

        def turn() -> None:
            if self._commit_loops.get(seat) != loop:
                return
            member = seat.member
            if seat.down or member.state is State.STOPPED:
                del self._commit_loops[seat]
                return
            # In its lane, the member's commits are the lane's, at this loop's rhythm; the
            # loop goes on turning, to take them back when the member leaves its lane.
            if not seat.commit_keys and not self._commit_in_lane(seat, interval):
                self._commit(seat, advance=1)
            self.call_later(interval, turn)

        # As the classic members' first commits: spread over the interval, so that members
        # that joined together do not commit together.
        self.call_later(self._rng.randrange(1, interval + 1), turn)

    def _commit_in_lane(self, seat: Seat[ConsumerMember], interval_ms: int) -> bool:
        """Start the member's commits in its lane, the first now, one record past its
        positions; False if it is not in its lane or its commits cannot go there yet."""
        member = seat.member
        connection = seat.connection
        lane = seat.lane
        if lane is None or connection is None or connection.closed:
            return False
        if seat in self._committing or seat in self._fetching:
            return False  # the positions are the Python path's until it is answered
        request = member.commit(advance=0)
        if request is None:
            return False
        version = connection.version(OFFSET_COMMIT)
        try:
            frame, offsets_at = commit_template(version, connection.client_id, request)
        except ValueError as exc:  # an offset hidden by the request's own bytes
            log.debug("member of %s commits from Python: %s", member.group_id, exc)
            return False
        seat.commit_keys = [
            (t.name, p.partition_index) for t in request.topics for p in t.partitions
        ]
        lane.start_commits(
            seat.slot,
            frame,
            offsets_at,
            commit_offsets(request),
            commit_answer(version, request),
            self.now_ms(),
            interval_ms,
        )
        return True

    def _commit(self, seat: Seat[ConsumerMember], advance: int) -> None:
        member = seat.member
        connection = seat.connection
        if seat in self._committing or connection is None or connection.closed:
            return
        request = member.commit(advance)
        if request is None:
            return
        self._committing.add(seat)

        def on_answer(response: Response | None, latency_ns: int) -> None:
            self._committing.discard(seat)
            if response is None:
                return
            assert isinstance(response, OffsetCommitResponse)
            # Counted even when the member has moved on: the server stored what it stored.
            done, code = member.on_commit(response)
            self.recorder.record(ApiKey.OFFSET_COMMIT, latency_ns, code, connection.address)
            self.recorder.commit(done)
            if code:
                self._error_row(ApiKey.OFFSET_COMMIT, code, member)

        connection.send(request, on_answer)

    # -- leaving ---------------------------------------------------------------------------

    def leave(self, seat: Seat[Any], then: Callable[[], None] | None = None) -> None:
        """A heartbeat with epoch -1 (-2 static), as a closing consumer; `then` runs when it
        is answered (or lost)."""
        member: ConsumerMember = seat.member
        connection = seat.connection
        if member.state is not State.STABLE or connection is None or connection.closed:
            member.reset(State.STOPPED)
            if then is not None:
                then()
            return
        request = member.leave()

        def on_answer(response: Response | None, latency_ns: int) -> None:
            if isinstance(response, ConsumerGroupHeartbeatResponse):
                code = response.error_code
                node = connection.address
                self.recorder.record(CONSUMER_GROUP_HEARTBEAT, latency_ns, code, node)
                if code:
                    self._error_row(CONSUMER_GROUP_HEARTBEAT, code, member)
            member.on_leave()
            if then is not None:
                then()

        connection.send(request, on_answer)


def _confirmed_ms(seat: Seat[ConsumerMember]) -> int:
    """When the member's last heartbeat whose answer changed nothing was sent: its own
    record, or its lane's, whose plain answers never reach the member."""
    confirmed = seat.member.confirmed_ms
    if seat.lane is not None:
        in_lane = seat.lane.confirmed(seat.slot)
        if in_lane is not None and in_lane > confirmed:
            return in_lane
    return confirmed
