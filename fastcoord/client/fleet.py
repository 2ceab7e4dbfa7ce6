"""Many group members over shared connections, in one Trio loop.

A member (member.py) knows the group protocol; the fleet gives it a connection, sends what
it asks, hands it the answers, and keeps its timers. There is no task per member: a
member's life is callbacks on its connection's answers and entries in a timer wheel of
TICK_MS slots, so one process holds a million members.

A stable member's heartbeats and commits are not the fleet's to send: they are its
connection's lane's (lane.py), which sends, matches and records them in compiled code. The
fleet starts a member in its lane when it becomes stable (its commits once its offsets are
fetched) and the member's state change stops it there when it leaves STABLE, whatever made
it leave; the fleet hears only of the lane's answers that are not plain successes. Every
tick, the lanes of a share of the connections flush their due requests, each connection
once per FLUSH_MS, so that a write carries many requests and the connections' writes are
spread over the ticks.

Members of the consumer group protocol (KIP-848) are consumer_fleet.py's, a fleet that keeps
all of this but what a member says once connected; its steady members heartbeat and commit
in the same lanes.

Each member sits in a Seat: its place in the fleet (its share, the number of the connection
it shares, index // members_per_connection, and its slot in that connection's lane,
index % members_per_connection) and its coordinator's connection. Everything measured goes
to a Recorder: every answer's latency and error, each rebalance a member saw, each commit.

Against a cluster, members whose groups have different coordinators cannot share a socket:
connections are keyed by (coordinator, share), so the members of one share share a
connection per node, each in its own slot (distinct within the share whatever the node).
What is measured on a member's connection counts in its coordinator's share (the Recorder's
per-node figures), and which node coordinates which group is noted as FindCoordinator
answers.

Members that share a connection get their answers in request order (Kafka's rule), so an
answer that is ready waits behind any JoinGroup or SyncGroup before it that the coordinator
holds until its group's rebalance completes. Another group's member could then wait on it
for its member id (MEMBER_ID_REQUIRED), for the heartbeat answer that tells it to rejoin,
or for its own JoinGroup or SyncGroup answer. Its group waits for it in turn, and two
groups doing so across two connections wait for each other until their members' sessions
expire; a join storm of 100,000 members stalled so for the session timeout, again and
again. Within one group the same holds: a SyncGroup answer (REBALANCE_IN_PROGRESS) behind
the JoinGroup of the next generation, which waits for that member. So the requests the
coordinator holds go on connections of the member's group alone (per node and SASL user,
opened when first needed), one for its JoinGroups with a member id and one for its
SyncGroups. The held requests on each are answered together, when the group's join (or
sync) completes, so nothing behind one waits for anything but that. Everything else, the
first JoinGroup included, goes on the shared connection, where nothing is held. One member
per connection has nothing to share.

With SASL, a connection logs in as one user, so members that log in as different users
cannot share one. Member number i logs in as user i % users (login.ClientSecurity), and
the shares are dealt per user: the k-th member of user u is in share
(k // members_per_connection) * users + u, slot k % members_per_connection. With one user
that is the rule above. The login's round trips (SaslHandshake, SaslAuthenticate) are
recorded as any request; a refused login sends the members waiting for that connection
back to find their coordinator after their backoff, as a failed connect does.
"""

from __future__ import annotations

import logging
import math
import random
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import trio

from fastcoord.client.connection import (
    LIBRDKAFKA,
    MAX_RESPONSE_BYTES,
    WANTED,
    Connection,
    ConnectionLost,
    LaneAnswer,
    connection_type,
    is_fastcoord,
)
from fastcoord.client.login import ClientSecurity, LoginFailed
from fastcoord.client.member import Member, Next, Rebalance, State, committed
from fastcoord.client.native import (
    Lane,
    commit_answer,
    commit_offsets,
    commit_template,
    heartbeat_template,
    make_lane,
    make_poller,
)
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode, error_name
from fastcoord.protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from fastcoord.protocol.schema import Request, Response

log = logging.getLogger("fastcoord.client")

# The fleet's clock ticks this often, and a connection's flushes fall on ticks spread over
# the flush period: at a 20 ms tick a fifth of all connections wrote at once, a burst the
# server took milliseconds to answer, which real consumers, each on its own time, never
# send; latency measured that burst, not the server.
TICK_MS = 5
# A stable member's requests leave up to a flush late, which a 3 s interval does not
# notice; each flush costs a write and (mostly) a read per connection, so the fewer the
# better for the generator and the server. At most a twentieth of the heartbeat (or commit)
# interval, so that short intervals keep their rhythm. Latency is unaffected: it runs from
# the write.
FLUSH_MS = 100
RETRY_BACKOFF_MAX_MS = 1_000
# Connections being opened at once. Members that each connect as soon as they know their
# coordinator (tens of thousands at a start) otherwise put all their connects and
# ApiVersions in flight together: the server answers them slower than the connect
# timeout, they are retried, and the retries feed the storm. Real consumers, each in its
# own process, never start that way.
MAX_OPENING = 256
HEARTBEAT = ApiKey.HEARTBEAT
OFFSET_COMMIT = ApiKey.OFFSET_COMMIT


Address = tuple[str, int]  # a broker's (host, port)
# What waits for a pooled connection: called with it once open, or with None and why (the
# error code and the API that met it).
Opened = Callable[["Connection | None", int, int], None]
# A shared connection: (node, SASL user, share); the members of a share hold its slots.
SharedKey = tuple[Address, int, int]
# A group's connection: (node, SASL user, group, the API it carries: JoinGroup or SyncGroup).
GroupKey = tuple[Address, int, str, int]
K = TypeVar("K", SharedKey, GroupKey)


@dataclass
class Pool(Generic[K]):
    """Members' connections by key (node, SASL user, ...), each opened once: whoever
    asks for one while it opens waits for it. `lane` connections carry member slots and
    are flushed on the fleet's ticks."""

    lane: bool
    open: dict[K, Connection] = field(default_factory=dict)
    waiting: dict[K, list[Opened]] = field(default_factory=dict)


class Recorder(Protocol):
    """Where the fleet's measurements go (fastcoord.loadtest.stats.Recorder). The lanes of
    the connections to a node record plain successes in that node's sinks (lane.py's
    layout); an answer recorded with a `node` counts in that node's share too."""

    def sinks(self, node: Address | None = None) -> tuple[Any, Any]: ...
    def node(self, address: Address, node_id: int) -> None: ...
    def coordinator(self, group: str, address: Address) -> None: ...
    def record(
        self, api_key: int, latency_ns: int, error: int, node: Address | None = None
    ) -> None: ...
    def latencies(self, api_key: int) -> list[int]: ...
    def error_code(self, api_key: int, code: int, node: Address | None = None) -> None: ...
    def error(self, api_key: int, code: int, group: str, member: str, wall_ms: int) -> None: ...
    def error_row(self, api_key: int, code: int, group: str, member: str, wall_ms: int) -> None: ...
    def rebalance(
        self,
        group: str,
        member: str,
        instance_id: str | None,
        generation: int,
        started_ms: int,
        ended_ms: int,
        reason: str,
        expected: bool,
    ) -> None: ...
    def storm(
        self,
        group: str,
        members: int,
        last_join_sent_ns: int,
        last_sync_answered_ns: int,
        first_join_answered_ns: int,
    ) -> None: ...
    def moved(self, group: str, old: Address, new: Address, lost_ms: int, back_ms: int) -> None: ...
    def commit(self, offsets: int) -> None: ...
    def unexpected_expiration(self) -> None: ...


@dataclass
class FleetConfig:
    bootstrap: tuple[str, int]
    members_per_connection: int = 1
    heartbeat_interval_ms: int = 3_000
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 60_000
    commit_interval_ms: int = 5_000  # 0: no commits
    request_timeout_ms: int = 30_000  # Kafka's request.timeout.ms
    retry_backoff_ms: int = 100
    connect_timeout_s: float = 10.0
    topics: list[str] = field(default_factory=lambda: ["loadtest"])
    partitions: int = 12  # for topics the broker does not know
    assignors: tuple[str, ...] = ("range", "roundrobin")
    seed: int = 0
    # "classic" (this fleet) or "consumer" (consumer_fleet.ConsumerFleet, KIP-848).
    group_protocol: str = "classic"
    # TLS and SASL, as the consumers' own settings say; plaintext by default.
    security: ClientSecurity = field(default_factory=ClientSecurity)


M = TypeVar("M")  # the member a seat holds: member.Member, or a ConsumerMember
R = TypeVar("R", bound=Response)  # the answer a member's request gets


@dataclass(eq=False, slots=True)
class Seat(Generic[M]):
    index: int
    member: M
    slot: int  # in its connection's lane
    connection: Connection | None = None
    coordinator: Address | None = None  # the node FindCoordinator named last
    retries: int = 0  # since it was last stable
    # Set until the member is started, and while the scenario has it down (crashed, or
    # restarting): no timers act, and the watchdog does not wait for it.
    down: bool = True
    lane: Lane | None = None  # where the member heartbeats while stable
    commit_keys: list[tuple[str, int]] = field(default_factory=list)  # what its lane commits
    share: int = 0  # the number of the connection it shares (per coordinator)
    # A STABLE member whose coordinator moved or went away, finding it again: it keeps its
    # generation and assignment, and heartbeats again once connected.
    finding: bool = False
    # The coordinator a member in its group lost (an answer said it moved or is away, or
    # its connection ended), and when (wall ms): until it is served again, by whichever node.
    lost_from: Address | None = None
    lost_ms: int = 0

    def state_changed(self, member: Any, old: State, new: State) -> None:
        """A member leaving STABLE stops heartbeating and committing at once; the
        positions its commits reached are its own again."""
        if old is State.STABLE:
            self.stop_lane(member)
            self.finding = False

    def stop_lane(self, member: Any) -> None:
        """Out of its lane (if in one): the member's heartbeats and commits are the
        fleet's again, from the positions its lane's commits reached."""
        if self.lane is None:
            return
        offsets = self.lane.stop(self.slot)
        for key, offset in zip(self.commit_keys, offsets, strict=False):
            member.positions[key] = offset
        self.lane = None
        self.commit_keys = []


class FleetAborted(Exception):
    """The fleet cannot go on: the server stopped answering, or cannot be reached."""


class Fleet:
    """Members and their connections; `run` drives them until cancelled."""

    LANE_HEARTBEAT: int = HEARTBEAT  # what the lanes' heartbeats are (the sink's first row)

    def __init__(
        self, config: FleetConfig, recorder: Recorder, wall_ms: Callable[[], int] | None = None
    ) -> None:
        self.config = config
        self.recorder = recorder
        self.seats: list[Seat[Any]] = []
        self._tally: Counter[State] = Counter()  # the seats' members by state
        self.partitions: dict[str, int] = {}
        # Topic id -> name, from Metadata v10+ (none below): the consumer protocol assigns by id.
        self.topic_names: dict[uuid.UUID, str] = {}
        self.cluster_id: str | None = None
        self.rebalances_expected = True
        # group -> [last join sent, last sync answered, members, first join answered]
        self.storm: dict[str, list[int]] | None = None
        # When a list, members that have found their coordinator and connected wait here
        # instead of joining: a join storm releases them all at once.
        self.holding: list[Seat[Any]] | None = None
        self._connections: Pool[SharedKey] = Pool(lane=True)
        # A group's connections for the requests the coordinator holds (see the module's
        # doc).
        self._group_connections: Pool[GroupKey] = Pool(lane=False)
        # The members' connections open to each node (the bootstrap's not among them).
        self.node_connections: Counter[Address] = Counter()
        self._timers: dict[int, list[tuple[Seat[Any], int]]] = defaultdict(list)  # retries
        self._actions: dict[int, list[Callable[[], None]]] = defaultdict(list)
        self._tick = 0
        # Connections by the tick of their flush: tick % len(self._flushes).
        self._flushes: list[list[Connection]] = [[] for _ in range(self._flush_ticks())]
        self._opened = 0
        self._poller = make_poller(MAX_RESPONSE_BYTES)
        self._opening = trio.CapacityLimiter(MAX_OPENING)
        self._bootstrap: Connection | None = None
        self._nursery: trio.Nursery | None = None
        self._rng = random.Random(config.seed)
        self._t0 = trio.current_time()
        self._wall0 = time.time() * 1000
        self._wall_ms = wall_ms
        self._last_progress_ns = time.perf_counter_ns()
        self._reopening = False
        # Classic members heartbeating again at a coordinator found again, and the lane
        # has not yet said their heartbeat was answered there.
        self._confirming: set[Seat[Any]] = set()
        self._wanted = WANTED
        self._connection_type = connection_type(config.security)
        self._users = config.security.users
        self._placed = [0] * self._users  # members placed so far, by user

    # -- clocks ----------------------------------------------------------------------------

    def now_ms(self) -> int:
        return int((trio.current_time() - self._t0) * 1000)

    def wall_ms(self, now_ms: int | None = None) -> int:
        if self._wall_ms is not None:
            return self._wall_ms()
        return int(self._wall0 + (self.now_ms() if now_ms is None else now_ms))

    # -- running ---------------------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect to the bootstrap broker and learn the topics, then keep timers until
        cancelled. Raises OSError when the bootstrap broker cannot be reached."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._bootstrap = await self._open(self.config.bootstrap)
                nursery.start_soon(self._bootstrap.run)
                await self._learn_topics()
                nursery.start_soon(self._ticker)
                nursery.start_soon(self._poll)
                task_status.started()
        finally:
            self._poller.close()

    def _flush_ticks(self) -> int:
        c = self.config
        intervals = [c.heartbeat_interval_ms] + (
            [c.commit_interval_ms] * (c.commit_interval_ms > 0)
        )
        return max(1, min(FLUSH_MS, min(intervals) // 20) // TICK_MS)

    async def _open(
        self, address: Address, lane: bool = False, user: int = 0, members: bool = False
    ) -> Connection:
        """A connection to `address`, logged in as `user` if SASL; with `lane`, one for
        members, read by the poller (unless TLS), whose lane records into the node's sinks;
        a members' connection (`lane` or `members`) counts its login's round trips in the
        node's share."""
        node = address if lane or members else None
        latency_sink, commit_sink = self.recorder.sinks(node)

        def on_login(api: int, latency_ns: int, code: int) -> None:
            self.recorder.record(api, latency_ns, code, node)

        connection = self._connection_type(
            address,
            make_lane(self.config.members_per_connection if lane else 0, latency_sink, commit_sink),
            self._on_lane,
            wanted=self._wanted,
            poller=self._poller if lane else None,
            security=self.config.security,
            user=user,
            on_login=on_login,
        )
        await connection.open(self.config.connect_timeout_s)
        return connection

    async def _poll(self) -> None:
        """Read the members' connections: one wake-up for all the sockets ready."""
        poller = self._poller
        while True:
            await trio.lowlevel.wait_readable(poller.fileno())
            for connection, now, unusual, others, end in poller.poll():
                assert isinstance(connection, Connection)
                connection.heard(now, unusual, others, end)

    async def _learn_topics(self) -> None:
        assert self._bootstrap is not None
        request = MetadataRequest(
            topics=[MetadataRequestTopic(name=t) for t in self.config.topics],
            allow_auto_topic_creation=True,
        )
        try:
            response, latency_ns = await self._bootstrap.ask(
                request, self.config.request_timeout_ms / 1000
            )
        except ConnectionLost as exc:
            raise FleetAborted(f"{_address(self.config.bootstrap)}: {exc}") from None
        assert isinstance(response, MetadataResponse)
        self.recorder.record(ApiKey.METADATA, latency_ns, 0)
        self.cluster_id = response.cluster_id
        for broker in response.brokers:
            self.recorder.node((broker.host, broker.port), broker.node_id)
        if not self.is_fastcoord():
            self._wanted = LIBRDKAFKA
        for topic in response.topics:
            if topic.error_code == ErrorCode.NONE and topic.partitions and topic.name:
                self.partitions[topic.name] = len(topic.partitions)
                if topic.topic_id.int:
                    self.topic_names[topic.topic_id] = topic.name
        for t in self.config.topics:
            if t not in self.partitions:
                log.warning(
                    "the broker does not know topic %s: its leaders assign %d partitions",
                    t,
                    self.config.partitions,
                )
                self.partitions[t] = self.config.partitions

    def _place(self, number: int) -> tuple[int, int]:
        """The share and slot of the next member, number `number` of the run: the shares of
        its user's members fill one after another (see the module's doc)."""
        users = self._users
        user = number % users
        k = self._placed[user]
        self._placed[user] = k + 1
        per = self.config.members_per_connection
        return (k // per) * users + user, k % per

    def add(
        self, group_id: str, instance_id: str | None = None, number: int | None = None
    ) -> Seat[Any]:
        """A member of `group_id`, not started; `number` is its number in the whole run
        (default: in this fleet), which decides its SASL user."""
        c = self.config
        member = Member(
            group_id,
            list(c.topics),
            session_timeout_ms=c.session_timeout_ms,
            rebalance_timeout_ms=c.rebalance_timeout_ms,
            group_instance_id=instance_id,
            assignors=c.assignors,
            tally=self._tally,
        )
        index = len(self.seats)
        share, slot = self._place(index if number is None else number)
        seat = Seat(index, member, slot, share=share)
        member.listener = seat
        self.seats.append(seat)
        return seat

    # -- a member's life -------------------------------------------------------------------

    def start(self, seat: Seat[Any]) -> None:
        """Find the member's coordinator, connect, join."""
        seat.down = False
        assert self._bootstrap is not None
        member = seat.member
        epoch = member.epoch

        def on_answer(response: Response | None, latency_ns: int) -> None:
            if member.epoch != epoch or seat.down:
                return
            if response is None:
                return self._retry(seat, ErrorCode.NETWORK_EXCEPTION, ApiKey.FIND_COORDINATOR)
            assert isinstance(response, FindCoordinatorResponse)
            code = response.error_code
            self.recorder.record(ApiKey.FIND_COORDINATOR, latency_ns, code)
            if code != ErrorCode.NONE:
                return self._retry(seat, code, ApiKey.FIND_COORDINATOR)
            coordinator = (response.host, response.port)
            seat.coordinator = coordinator
            self.recorder.node(coordinator, response.node_id)
            self.recorder.coordinator(member.group_id, coordinator)
            self._connect(seat)

        if self._bootstrap.closed:
            self._reopen_bootstrap()
            return self._retry(seat, ErrorCode.NETWORK_EXCEPTION, ApiKey.FIND_COORDINATOR)
        self._bootstrap.send(FindCoordinatorRequest(key=member.group_id, key_type=0), on_answer)

    def _reopen_bootstrap(self) -> None:
        if self._nursery is None or self._reopening:
            return
        self._reopening = True

        async def reopen() -> None:
            try:
                connection = await self._open(self.config.bootstrap)
            except Exception as exc:  # OSError, a timeout, a bad answer: the next start retries
                log.debug("bootstrap %s: %s", _address(self.config.bootstrap), exc)
                await trio.sleep(self.config.retry_backoff_ms / 1000)
            else:
                self._bootstrap = connection
                assert self._nursery is not None
                self._nursery.start_soon(connection.run)
                self._progress()
            finally:
                self._reopening = False

        self._nursery.start_soon(reopen)

    def _connect(self, seat: Seat[Any]) -> None:
        assert seat.coordinator is not None

        def opened(connection: Connection | None, code: int, api: int) -> None:
            if seat.down:
                return
            if connection is None:
                return self._retry(seat, code, api)
            seat.connection = connection
            self._connected(seat)

        key = (seat.coordinator, seat.share % self._users, seat.share)
        self._pooled(self._connections, key, opened)

    def _pooled(self, pool: Pool[K], key: K, then: Opened) -> None:
        """`then` with the pool's connection for `key`, opened if need be (see Opened)."""
        connection = pool.open.get(key)
        if connection is not None and not connection.closed:
            return then(connection, 0, 0)
        waiting = pool.waiting.get(key)
        if waiting is not None:
            waiting.append(then)
            return
        pool.waiting[key] = [then]
        assert self._nursery is not None
        self._nursery.start_soon(self._open_pooled, pool, key)

    async def _open_pooled(self, pool: Pool[K], key: K) -> None:
        node: Address = key[0]
        user: int = key[1]
        try:
            async with self._opening:
                connection = await self._open(node, lane=pool.lane, user=user, members=True)
        except Exception as exc:  # OSError, a timeout, a bad answer, a refusal: they retry
            code, api = self._not_opened(node, exc)
            for then in pool.waiting.pop(key, []):
                then(None, code, api)
            return
        self._progress()
        pool.open[key] = connection
        if pool.lane:
            self._flushes[self._opened % len(self._flushes)].append(connection)
            self._opened += 1
        assert self._nursery is not None
        self._nursery.start_soon(self._run_pooled, pool, key, connection)
        for then in pool.waiting.pop(key, []):
            then(connection, 0, 0)

    def _not_opened(self, address: Address, exc: Exception) -> tuple[int, int]:
        """A members' connection to `address` could not be opened: the error code its
        members retry after, and the API that met it. A refused login is counted as the
        answer that said so (the server answers, so its members go on trying after their
        backoff, as after any refusal); anything else (a connect or TLS that failed, a
        timeout, the client giving up) as a connection that failed."""
        if isinstance(exc, LoginFailed) and exc.api:
            log.debug("cannot log in to %s: %s", _address(address), exc)
            # Its row names no group: the login was the connection's, whoever waited on it.
            self.recorder.error_row(exc.api, exc.code, "", "", self.wall_ms())
            self._progress()
            return exc.code, exc.api
        log.debug("cannot connect to %s: %s", _address(address), exc)
        return ErrorCode.NETWORK_EXCEPTION, ApiKey.API_VERSIONS

    async def _run_pooled(self, pool: Pool[K], key: K, connection: Connection) -> None:
        """Run a members' connection, counted in node_connections while open."""
        node: Address = key[0]
        self.node_connections[node] += 1
        try:
            await connection.run()
        finally:
            self.node_connections[node] -= 1
            if self.node_connections[node] <= 0:
                del self.node_connections[node]
        if pool.open.get(key) is connection:
            del pool.open[key]
        if pool.lane:
            for flushes in self._flushes:
                if connection in flushes:
                    flushes.remove(connection)

    def _connected(self, seat: Seat[Any]) -> None:
        if seat.finding:
            return self._resume(seat)
        if self.holding is not None:
            self.holding.append(seat)
        else:
            self._join(seat)

    def join_now(self, seat: Seat[Any]) -> None:
        """Join a member held (see `holding`) on its connection."""
        self._join(seat)

    def _ask_coordinator(
        self,
        seat: Seat[Any],
        request: Request,
        api: int,
        kind: type[R],
        answered: Callable[[R, int], Next],
        lost: Callable[[], None] | None = None,
        held: bool = False,
    ) -> None:
        """Send `request` for the seat's member to its coordinator, hand the answer (a
        `kind`) to `answered`, then do what the member says next. An answer that finds the
        member moved on (another epoch, or down) is dropped: it speaks of a member that no
        longer exists. A lost connection, like an answer from a coordinator that moved or
        is away (the member says RETRY), sends the member to find its coordinator again and
        ask after the backoff; `lost` first tells it its request will go unanswered. A
        request the coordinator may hold (`held`) goes on its group's connection for that
        API when members share connections."""
        member = seat.member
        epoch = member.epoch

        def on_answer(response: Response | None, latency_ns: int) -> None:
            if member.epoch != epoch or seat.down:
                return
            if response is None:
                if lost is not None:
                    lost()
                return self._retry(seat, ErrorCode.NETWORK_EXCEPTION, api)
            assert isinstance(response, kind)
            self._follow(seat, answered(response, latency_ns), api)

        def send(connection: Connection | None, code: int, failed_api: int) -> None:
            if member.epoch != epoch or seat.down:
                return
            if connection is not None:
                connection.send(request, on_answer)
            elif code == ErrorCode.NETWORK_EXCEPTION:  # it could not be opened
                on_answer(None, 0)
            else:  # its login was refused, and counted: after the backoff, as any refusal
                self._retry(seat, code, failed_api)

        if held and self.config.members_per_connection > 1:
            assert seat.coordinator is not None
            key = (seat.coordinator, seat.share % self._users, member.group_id, api)
            self._pooled(self._group_connections, key, send)
        else:
            send(seat.connection, ErrorCode.NETWORK_EXCEPTION, api)

    def _join(self, seat: Seat[Any]) -> None:
        member: Member = seat.member
        connection = seat.connection
        if connection is None or connection.closed:
            return self._retry(seat, ErrorCode.NETWORK_EXCEPTION, ApiKey.JOIN_GROUP)
        # Its first JoinGroup, answered at once with its member id, goes on the shared
        # connection; with its id the coordinator holds it: on the group's.
        held = bool(member.member_id)
        request = member.join(self.now_ms())
        if self.storm is not None:
            entry = self.storm.setdefault(member.group_id, [0, 0, 0, 0])
            entry[0] = max(entry[0], time.time_ns())

        def joined(response: JoinGroupResponse, latency_ns: int) -> Next:
            self.recorder.record(
                ApiKey.JOIN_GROUP, latency_ns, response.error_code, seat.coordinator
            )
            if response.error_code == ErrorCode.NONE and self.storm is not None:
                # The first answer with a generation: the rebalance delay is over.
                entry = self.storm.get(member.group_id)
                if entry is not None and entry[3] == 0:
                    entry[3] = time.time_ns()
            if response.error_code not in (ErrorCode.NONE, ErrorCode.MEMBER_ID_REQUIRED):
                self._error_row(ApiKey.JOIN_GROUP, response.error_code, member)
            outcome = member.on_join(response, self.now_ms(), self.partitions)
            if isinstance(outcome, SyncGroupRequest):
                self._sync(seat, outcome)
                return Next.NOTHING
            return outcome

        self._ask_coordinator(
            seat, request, ApiKey.JOIN_GROUP, JoinGroupResponse, joined, held=held
        )

    def _sync(self, seat: Seat[Member], request: SyncGroupRequest) -> None:
        member = seat.member

        def synced(response: SyncGroupResponse, latency_ns: int) -> Next:
            code = response.error_code
            self.recorder.record(ApiKey.SYNC_GROUP, latency_ns, code, seat.coordinator)
            if code != ErrorCode.NONE:
                self._error_row(ApiKey.SYNC_GROUP, code, member)
            outcome = member.on_sync(response, self.now_ms())
            if outcome is Next.NOTHING:
                self._stable(seat)
            return outcome

        self._ask_coordinator(
            seat, request, ApiKey.SYNC_GROUP, SyncGroupResponse, synced, held=True
        )

    def _stable(self, seat: Seat[Member]) -> None:
        member = seat.member
        seat.retries = 0
        self.back(seat)
        for rebalance in member.rebalances:
            self._rebalance_row(rebalance)
        member.rebalances.clear()
        if self.storm is not None and member.group_id in self.storm:
            entry = self.storm[member.group_id]
            entry[1] = max(entry[1], time.time_ns())
            entry[2] += 1
        # The first heartbeat and commit come at a random point of their interval: members
        # that synced in one storm would otherwise beat in lockstep, a burst every interval,
        # and the run would measure the generator's bursts. Real consumers drift apart.
        now = self.now_ms()
        self._heartbeat_in_lane(
            seat, now + self._rng.randrange(1, self.config.heartbeat_interval_ms + 1)
        )
        self._fetch(seat, self._first_commit_ms(now))

    def _resume(self, seat: Seat[Member]) -> None:
        """A stable member connected to its coordinator found again: it heartbeats there at
        once, in the generation it has (Java's consumer retries the heartbeat that failed
        as soon as it knows the coordinator), and commits from where its commits reached,
        or asks for its offsets first if it never heard them."""
        member = seat.member
        seat.finding = False
        seat.retries = 0
        now = self.now_ms()
        self._heartbeat_in_lane(seat, now)
        self._confirming.add(seat)
        commit_due = self._first_commit_ms(now)
        known = all(
            (topic, p) in member.positions
            for topic, parts in member.assignment.items()
            for p in parts
        )
        if not known:
            self._fetch(seat, commit_due)
        elif commit_due is not None:
            self._start_commits(seat, commit_due)

    def _heartbeat_in_lane(self, seat: Seat[Member], first_ms: int) -> None:
        """The member heartbeats in its connection's lane from `first_ms` on."""
        member = seat.member
        connection = seat.connection
        assert connection is not None
        template = heartbeat_template(
            connection.heartbeat_version,
            connection.client_id,
            member.group_id,
            member.generation_id,
            member.member_id,
            member.group_instance_id,
        )
        interval = self.config.heartbeat_interval_ms
        connection.lane.start(seat.slot, seat, template, first_ms, interval)
        seat.lane = connection.lane

    def _first_commit_ms(self, now: int) -> int | None:
        if self.config.commit_interval_ms <= 0:
            return None
        return now + self._rng.randrange(1, self.config.commit_interval_ms + 1)

    def _fetch(self, seat: Seat[Member], commit_due: int | None) -> None:
        """OffsetFetch, as a consumer asks after each assignment; the member's commits
        start from the positions it answers, at `commit_due` (or never, if None)."""
        member = seat.member
        if not member.assignment or seat.connection is None:
            return
        epoch = member.epoch

        def on_answer(response: Response | None, latency_ns: int) -> None:
            if response is None:
                return
            assert isinstance(response, OffsetFetchResponse)
            node = seat.coordinator
            # Answered, so counted, even when the member has moved on to another
            # assignment meanwhile: the server's count and the run's agree.
            self.recorder.record(ApiKey.OFFSET_FETCH, latency_ns, response.error_code, node)
            if member.epoch != epoch or seat.down:
                return
            outcome = member.on_fetch(response, self.now_ms())
            if outcome is not Next.NOTHING:
                if not response.error_code:  # a partition's error: not counted by record
                    self.recorder.error_code(ApiKey.OFFSET_FETCH, member.last_error, node)
                self._error_row(ApiKey.OFFSET_FETCH, member.last_error, member)
                return self._follow(seat, outcome, ApiKey.OFFSET_FETCH)
            if commit_due is not None:
                self._start_commits(seat, commit_due)

        seat.connection.send(member.fetch_offsets(), on_answer)

    def _start_commits(self, seat: Seat[Member], due_ms: int) -> None:
        """The member commits its partitions every commit interval from `due_ms` on, one
        record past its position each time; its lane sends them."""
        member = seat.member
        request = member.commit(advance=0)
        connection = seat.connection
        if request is None or seat.lane is None or connection is None:
            return
        version = connection.version(OFFSET_COMMIT)
        try:
            frame, offsets_at = commit_template(version, connection.client_id, request)
        except ValueError as exc:  # an offset hidden by the request's own bytes
            log.warning("member of %s does not commit: %s", member.group_id, exc)
            return
        seat.commit_keys = [
            (t.name, p.partition_index) for t in request.topics for p in t.partitions
        ]
        seat.lane.start_commits(
            seat.slot,
            frame,
            offsets_at,
            commit_offsets(request),
            commit_answer(version, request),
            due_ms,
            self.config.commit_interval_ms,
        )

    def leave(self, seat: Seat[Any], then: Callable[[], None] | None = None) -> None:
        """LeaveGroup, as a closing consumer; `then` runs when it is answered (or lost)."""
        member: Member = seat.member
        connection = seat.connection
        if member.state is not State.STABLE or connection is None or connection.closed:
            member.reset(State.STOPPED)
            if then is not None:
                then()
            return
        request = member.leave()

        def on_answer(response: Response | None, latency_ns: int) -> None:
            if isinstance(response, LeaveGroupResponse):
                self.recorder.record(
                    ApiKey.LEAVE_GROUP, latency_ns, response.error_code, connection.address
                )
            member.on_leave()
            if then is not None:
                then()

        connection.send(request, on_answer)

    def crash(self, seat: Seat[Any]) -> None:
        """The member's process dies: no LeaveGroup; with a connection of its own, the
        connection closes too."""
        seat.member.crash()
        seat.down = True
        seat.lost_from = None
        if self.config.members_per_connection == 1 and seat.connection is not None:
            seat.connection.close()
        seat.connection = None

    # -- answers that send the member elsewhere --------------------------------------------

    def _follow(self, seat: Seat[Any], outcome: Next, api: int) -> None:
        """Act on what the member said of its answer to `api`: both protocols' members say
        it in Next's words, so one method serves both fleets."""
        member = seat.member
        if outcome is Next.REJOIN:
            if member.last_error == ErrorCode.UNKNOWN_MEMBER_ID and api != ApiKey.JOIN_GROUP:
                self.recorder.unexpected_expiration()
            member.last_error = 0
            return self._join(seat)
        if outcome is Next.RETRY:
            return self._retry(seat, member.last_error, api)
        if outcome is Next.STOP:
            log.warning(
                "member of %s stopped by %s", member.group_id, error_name(member.last_error)
            )

    def _retry(self, seat: Seat[Any], code: int, api: int) -> None:
        """Find the coordinator after the backoff (a lost connection, a coordinator that
        moved or is loading), then join again; or, for a member still in the group, carry
        on there."""
        member = seat.member
        if seat.lost_from is None and (member.state is State.STABLE or seat.finding):
            seat.lost_from = seat.coordinator
            seat.lost_ms = self.wall_ms()
        if code == ErrorCode.NETWORK_EXCEPTION:
            # A FindCoordinator lost is the bootstrap's, not a coordinator's.
            node = None if api == ApiKey.FIND_COORDINATOR else seat.coordinator
            self.recorder.error_code(api, code, node)
        if self._finds_again(seat):
            seat.stop_lane(member)
            seat.finding = True
        else:
            if member.state is State.STABLE:
                member.rebalance_started_ms = self.now_ms()
                member.rebalance_reason = _name(code)
            member.state = State.UNJOINED
        # Answers and timers of before are stale: only the retry scheduled last acts.
        member.epoch += 1
        seat.connection = None
        # Kafka's retry.backoff.ms, doubling up to retry.backoff.max.ms (1 s) while the
        # coordinator stays away.
        delay = min(self.config.retry_backoff_ms << min(seat.retries, 10), RETRY_BACKOFF_MAX_MS)
        seat.retries += 1
        self._schedule_retry(delay, seat)

    def back(self, seat: Seat[Any]) -> None:
        """The member was served again since it lost its coordinator: recorded as a move
        when another node served it."""
        old = seat.lost_from
        if old is None:
            return
        seat.lost_from = None
        if seat.coordinator is not None and seat.coordinator != old:
            self.recorder.moved(
                seat.member.group_id, old, seat.coordinator, seat.lost_ms, self.wall_ms()
            )

    def _confirm(self) -> None:
        """Members resumed at a coordinator found again whose heartbeat there has been
        answered plainly (only the lane saw it) are back."""
        for seat in list(self._confirming):
            if seat.lane is None:  # lost it again, or left the group: not back (yet)
                self._confirming.discard(seat)
            elif seat.lane.confirmed(seat.slot) is not None:
                self._confirming.discard(seat)
                self.back(seat)

    def _finds_again(self, seat: Seat[Any]) -> bool:
        """Whether the member stays in its group while its coordinator is found again: a
        classic member that is STABLE does (its generation is the group's wherever the
        group is coordinated)."""
        return seat.member.state is State.STABLE

    def _error_row(self, api: int, code: int, member: Any) -> None:
        # Its count is record's: the answer's latency and error were recorded together.
        self.recorder.error_row(api, code, member.group_id, member.member_id, self.wall_ms())

    def _rebalance_row(self, r: Rebalance) -> None:
        expected = self.rebalances_expected or r.reason == "join"
        self.recorder.rebalance(
            r.group_id,
            r.member_id,
            r.group_instance_id,
            r.generation_id,
            self.wall_ms(r.started_ms),
            self.wall_ms(r.ended_ms),
            r.reason,
            expected,
        )

    # -- what the lanes leave to the fleet -------------------------------------------------

    def _on_lane(self, answers: list[LaneAnswer], now_ns: int) -> None:
        """The lanes' answers that are not plain successes: errors, answers in another
        layout, answers for members that have moved on, and a lost connection."""
        self._last_progress_ns = now_ns
        for seat, api, current, latency_ns, code, response in answers:
            member = seat.member
            if api == HEARTBEAT:
                # A member finding its coordinator has heard enough from the old one.
                if not current or seat.down or seat.finding:
                    continue
                if code == ErrorCode.NETWORK_EXCEPTION:
                    self._retry(seat, code, HEARTBEAT)
                    continue
                self.recorder.record(HEARTBEAT, latency_ns, code, seat.coordinator)
                if code == ErrorCode.NONE:
                    continue
                self._error_row(HEARTBEAT, code, member)
                self._follow(seat, member.on_heartbeat(code, self.now_ms()), HEARTBEAT)
                continue
            assert isinstance(response, OffsetCommitResponse)
            # Counted even when the member has moved on (left, say): the server stored it.
            done, code = committed(response)
            self.recorder.record(OFFSET_COMMIT, latency_ns, code, seat.coordinator)
            self.recorder.commit(done)
            if code:
                self._error_row(OFFSET_COMMIT, code, member)
            if not current or seat.down or seat.finding:
                continue
            outcome = member.on_commit(response, self.now_ms())[0]
            if outcome is not Next.NOTHING:
                self._follow(seat, outcome, OFFSET_COMMIT)

    # -- timers ----------------------------------------------------------------------------

    def _schedule_retry(self, delay_ms: int, seat: Seat[Any]) -> None:
        tick = self._tick + max(1, math.ceil(delay_ms / TICK_MS))
        self._timers[tick].append((seat, seat.member.epoch))

    def call_later(self, delay_ms: int, action: Callable[[], None]) -> None:
        """For scenarios: `action` after `delay_ms`."""
        tick = self._tick + max(1, math.ceil(delay_ms / TICK_MS))
        self._actions[tick].append(action)

    async def _ticker(self) -> None:
        start = trio.current_time()
        while True:
            self._tick += 1
            await trio.sleep_until(start + self._tick * TICK_MS / 1000)
            due = self._timers.pop(self._tick, None)
            if due:
                for seat, epoch in due:
                    member = seat.member
                    if member.epoch != epoch or seat.down:
                        continue
                    if member.state is State.UNJOINED or seat.finding:
                        self.start(seat)
            if self._confirming:
                self._confirm()
            actions = self._actions.pop(self._tick, None)
            if actions:
                for action in actions:
                    action()
            flushes = self._flushes[self._tick % len(self._flushes)]
            if flushes:
                now = self.now_ms()
                for connection in flushes:
                    connection.flush(now)

    # -- watching --------------------------------------------------------------------------

    def _progress(self) -> None:
        self._last_progress_ns = time.perf_counter_ns()

    def stalled(self) -> str | None:
        """Why the server looks stalled or gone, or None: nothing heard from it for the
        request timeout while answers are owed (JoinGroups owe theirs only after the
        rebalance timeout) or members cannot connect. A server that is slow but answers
        something is not stalled: its slowness is in the latencies."""
        now = time.perf_counter_ns()
        timeout_ns = self.config.request_timeout_ms * 1_000_000
        join_grace = self.config.rebalance_timeout_ms * 1_000_000
        connections = [*self._connections.open.values(), *self._group_connections.open.values()]
        if self._bootstrap is not None:
            connections.append(self._bootstrap)
        heard = max([self._last_progress_ns, *(c.received_at_ns for c in connections)])
        if now - heard <= timeout_ns:
            return None
        owed = sum(1 for c in connections if c.waits(now, join_grace))
        unjoined = sum(
            1 for s in self.seats if not s.down and (s.member.state is State.UNJOINED or s.finding)
        )
        if not owed and not unjoined:
            return None
        where = _address(self.config.bootstrap)
        why = (
            f"{owed} connections wait for answers" if owed else f"{unjoined} members cannot connect"
        )
        return f"nothing heard from {where} for {(now - heard) / 1e9:.0f} s while {why}"

    def states(self) -> dict[str, int]:
        return {state.value: self._tally[state] for state in State}

    @property
    def connection_count(self) -> int:
        return (
            len(self._connections.open)
            + len(self._group_connections.open)
            + (1 if self._bootstrap is not None and not self._bootstrap.closed else 0)
        )

    def all_stable(self, seats: Iterable[Seat[Any]] | None = None) -> bool:
        return all(
            s.member.state is State.STABLE
            for s in (self.seats if seats is None else seats)
            if not s.down
        )

    def flush_storm(self) -> None:
        if self.storm is None:
            return
        for group, (joined, synced, members, generation) in self.storm.items():
            self.recorder.storm(group, members, joined, synced, generation)
        self.storm = None

    def is_fastcoord(self) -> bool:
        return is_fastcoord(self.cluster_id)


def _address(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"
