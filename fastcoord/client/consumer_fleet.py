"""Many members of the consumer group protocol (KIP-848) over shared connections.

The classic fleet (fleet.py) finds coordinators, opens and shares connections, retries and
watches the server; this fleet keeps all of that and changes what a member says once it is
connected: ConsumerGroupHeartbeat instead of JoinGroup, SyncGroup and Heartbeat, and
OffsetCommit v9 with the member epoch. Its members (consumer_member.py) go through the
Python path only: each heartbeat and commit is a request object sent on its connection and
a callback on its answer, with its timers in the fleet's wheel. The compiled lanes that
carry the classic members' steady heartbeats know only the classic Heartbeat, so the
classic path is left exactly as it was.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from fastcoord.client.connection import WANTED
from fastcoord.client.consumer_member import ConsumerMember
from fastcoord.client.fleet import Fleet, FleetConfig, Recorder, Seat
from fastcoord.client.member import Next, State
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode, error_name
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
)
from fastcoord.protocol.schema import Response

log = logging.getLogger("fastcoord.client")

CONSUMER_GROUP_HEARTBEAT = ApiKey.CONSUMER_GROUP_HEARTBEAT
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

    async def _learn_topics(self) -> None:
        await super()._learn_topics()
        self._wanted = CONSUMER_WANTED  # kept whatever the server is

    def add(self, group_id: str, instance_id: str | None = None) -> Seat[Any]:
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
        seat: Seat[ConsumerMember] = Seat(index, member, index % c.members_per_connection)
        member.listener = seat
        self.seats.append(seat)
        return seat

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
        member = seat.member
        connection = seat.connection
        assert connection is not None
        epoch = member.epoch

        def on_answer(response: Response | None, latency_ns: int) -> None:
            if member.epoch != epoch or seat.down:
                return
            if response is None:
                member.lost()
                return self._retry(seat, ErrorCode.NETWORK_EXCEPTION, CONSUMER_GROUP_HEARTBEAT)
            assert isinstance(response, ConsumerGroupHeartbeatResponse)
            code = response.error_code
            self.recorder.record(CONSUMER_GROUP_HEARTBEAT, latency_ns, code)
            if code != ErrorCode.NONE:
                self._error_row(CONSUMER_GROUP_HEARTBEAT, code, member)
            joining = member.state is State.JOINING
            now = self.now_ms()
            outcome = member.on_heartbeat(response, now)
            if outcome is not Next.NOTHING:
                return self._follow_consumer(seat, outcome)
            self._heard(seat, joining, member.changed_ms == now)

        connection.send(request, on_answer)
        self._wake(seat)  # to give up on the answer if it takes the request timeout

    def _heard(self, seat: Seat[ConsumerMember], joined: bool, changed: bool) -> None:
        """A heartbeat answered without error: record what the member saw, fetch offsets of
        what it was given, resend a stale commit, and wait for the next heartbeat."""
        member = seat.member
        seat.retries = 0
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
        self._wake(seat)

    def _wake(self, seat: Seat[ConsumerMember]) -> None:
        """Act for the member at its `next_ms`: send the heartbeat due, or give up on the
        one in flight. A wake-up for a time the member has moved on from does nothing."""
        member = seat.member
        epoch = member.epoch
        at = member.next_ms

        def wake() -> None:
            if member.epoch != epoch or member.next_ms != at or seat.down:
                return
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

    def _follow_consumer(self, seat: Seat[ConsumerMember], outcome: Next) -> None:
        member = seat.member
        if outcome is Next.REJOIN:
            if member.last_error == ErrorCode.UNKNOWN_MEMBER_ID:
                self.recorder.unexpected_expiration()
            member.last_error = 0
            return self._join(seat)
        if outcome is Next.RETRY:
            return self._retry(seat, member.last_error, CONSUMER_GROUP_HEARTBEAT)
        if outcome is Next.STOP:
            log.warning(
                "member of %s stopped by %s", member.group_id, error_name(member.last_error)
            )

    def all_stable(self, seats: Iterable[Seat[Any]] | None = None) -> bool:
        """Whether the groups have settled: every member (but those down) in its group and,
        since the last change any member here was told of, told of none (a member learns
        of a new group epoch at its next heartbeat, so being in the group is not enough)."""
        last = self._last_change_ms
        return all(
            s.member.state is State.STABLE and s.member.confirmed_ms >= last
            for s in (self.seats if seats is None else seats)
            if not s.down
        )

    # -- offsets ---------------------------------------------------------------------------

    def _fetch_offsets(self, seat: Seat[ConsumerMember]) -> None:
        member = seat.member
        request = member.fetch_offsets()
        if request is None or seat.connection is None or seat.connection.closed:
            return

        def on_answer(response: Response | None, latency_ns: int) -> None:
            if response is None:
                return
            assert isinstance(response, OffsetFetchResponse)
            self.recorder.record(ApiKey.OFFSET_FETCH, latency_ns, response.error_code)
            member.on_fetch(response)

        seat.connection.send(request, on_answer)

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
            self._commit(seat, advance=1)
            self.call_later(interval, turn)

        # As the classic members' first commits: spread over the interval, so that members
        # that joined together do not commit together.
        self.call_later(self._rng.randrange(1, interval + 1), turn)

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
            self.recorder.record(ApiKey.OFFSET_COMMIT, latency_ns, code)
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
                self.recorder.record(CONSUMER_GROUP_HEARTBEAT, latency_ns, code)
                if code:
                    self._error_row(CONSUMER_GROUP_HEARTBEAT, code, member)
            member.on_leave()
            if then is not None:
                then()

        connection.send(request, on_answer)
