"""`fastcoord serve`: the coordinator core and the broker answers, on Trio.

One Trio thread owns the core. Connections hand decoded requests to `dispatch`; the core's
Results come back as responses (to whichever connections wait for them), records (to the
offsets store, whose appender thread reports when they are durable; only then does the
core acknowledge them), timer changes and events (to the event log). A clock task sleeps
until the earliest timer (the core's, a Fetch waiting out its max_wait_ms, a request a
fault rule delays) and advances time. Fault rules (fault_injection.py) see each request
before it is handled; the admin port (admin.py), when on, serves metrics, the groups and
the rules from the same loop.

Start-up: the data directory is locked, the server listens at once, and each coordinator
partition is loaded from its log by a background task; until a partition is loaded, its
groups are answered COORDINATOR_LOAD_IN_PROGRESS. A damaged log (not a torn tail) stops the
server with exit code 2 and a message naming the file and position.

Shutdown (SIGINT, SIGTERM) follows a Kafka broker's: stop accepting, answer whatever waits
(JoinGroup and SyncGroup get NOT_COORDINATOR, Fetches their empty answer), let each
connection send what it owes within shutdown.grace.ms (commits waiting for the disk get
their answers first), flush the event log, close the logs, exit 0.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import trio
from kazoo.handlers.threading import KazooTimeoutError

from fastcoord.cluster import peers
from fastcoord.cluster.routing import Cluster
from fastcoord.config import ServerConfig
from fastcoord.core.coordinator import Coordinator
from fastcoord.core.group import Group
from fastcoord.core.native import timing_wheel
from fastcoord.core.records import ACL_PARTITION
from fastcoord.core.result import Event, Result
from fastcoord.faults import Fault
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.protocol.error_responses import error_response
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    FetchRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from fastcoord.protocol.schema import Request
from fastcoord.protocol.versions import api_versions_response
from fastcoord.security.acl import Authorizer, binding_from_entry
from fastcoord.security.listeners import Listener
from fastcoord.security.sasl import Users
from fastcoord.server import acceptor, collector, startup
from fastcoord.server.admin import Admin
from fastcoord.server.admin import serve as admin_serve
from fastcoord.server.authorization import Authorization
from fastcoord.server.broker import Broker
from fastcoord.server.connection import TURN_NS, Connection, Slot
from fastcoord.server.coordinator_moves import CoordinatorMoves
from fastcoord.server.endpoint import Endpoint, endpoints
from fastcoord.server.event_log import EventLog
from fastcoord.server.fault_injection import FaultInjector
from fastcoord.server.load_progress import LoadProgress
from fastcoord.server.metrics import Metrics
from fastcoord.server.parking import Parking
from fastcoord.storage.lock import DataDirLocked
from fastcoord.storage.log import LogCorruption
from fastcoord.storage.memory import MemoryStore
from fastcoord.storage.store import LogCleanerSettings, OffsetsStore, Store
from fastcoord.timings import Timings

log = logging.getLogger("fastcoord.server")
events_log = logging.getLogger("fastcoord.events")


# Due timers fired in one step of the clock: a few ms of work. A rebalance of 100k members
# arms their sessions in the same millisecond, and fired at once they had paused the server
# for 180-440 ms.
TIMERS_PER_STEP = 1000
# The most work of one kind done in a turn of the loop before the rest of the server runs
# (the listener, the connections, the clock), in time: the clock's timers, the delivery of
# a big Result's answers (a rebalance of 10,000 members completes in one Result), the
# consumer groups' target assignments.
CLOCK_TURN_NS = 2_000_000
TIMERS_PER_CALL = 64
ANSWERS_PER_TURN = 128  # delivered at once; past that, by `deliver`
DELIVER_TURN_NS = 2_000_000
ANSWERS_PER_CHECK = 32  # answers delivered between two looks at the time
ASSIGN_TURN_NS = 2_000_000
# The core's tasks that take a share of the turns connections yielded (Server._share):
# together they take what the connections took.
CORE_TASKS = ("clock", "deliver", "assign")
ASSIGNMENT_MEMBERS_PER_TURN = 200  # a call of run_assignments: a group of 100, or two
HEARTBEAT = int(ApiKey.HEARTBEAT)
CONSUMER_GROUP_HEARTBEAT = int(ApiKey.CONSUMER_GROUP_HEARTBEAT)
OFFSET_COMMIT = int(ApiKey.OFFSET_COMMIT)
# How often requests kept until the ACLs are loaded look again (partition 0 loads first).
ADMISSION_RETRY_MS = 10
SASL_REQUESTS = (SaslHandshakeRequest, SaslAuthenticateRequest)


def now_ms() -> int:
    return int(time.time() * 1000)


class Server:
    def __init__(
        self,
        config: ServerConfig,
        store: Store,
        max_connections: int,
        cluster: Cluster | None = None,
    ) -> None:
        self.config = config
        self.max_connections = max_connections
        self.cluster = cluster or config.cluster_for(config.port)
        self.broker = Broker(config, self.cluster)
        self.coordinator = Coordinator(config.group_config(), now_ms(), topics=self.broker)
        if not self.cluster.owns_all():
            # Groups of other nodes' partitions are answered NOT_COORDINATOR, and never
            # created here: the member table holds only this node's groups.
            self.coordinator.owned_partitions = set(self.cluster.owned)
        self._topics_version = self.broker.version()  # as the coordinator last heard
        # What waits for a time of its own: a Fetch's max_wait_ms, a request given latency
        # by a fault, a fault rule's start or end (see later()).
        self.later_wheel = timing_wheel.TimingWheel(now_ms())
        self._later: dict[int, Callable[[], object]] = {}
        self._next_later = 0
        self.connections: set[Connection] = set()
        self.parking = Parking(self)  # idle connections' lone heartbeats, once it runs
        self.owed_bytes = 0  # answers all connections owe: bounded by queued.max.response.bytes
        self.store = store
        self.event_log: EventLog | None = None
        self._timers_changed = trio.Event()
        self._no_connections = trio.Event()
        # Connections given more answers by the Result being applied: each writes once more,
        # after it (see write_after).
        self._applying = 0
        self._applied = 0  # Results delivered so far, the one being delivered included
        self._to_write: list[Connection] = []
        # Answers of big Results not yet delivered, oldest first (see apply), and what
        # wakes the task that delivers them.
        self._deliveries: deque[list[tuple[Any, Any]]] = deque()
        self._deliveries_added = trio.Event()
        # Turns connections yielded with work left, counted up; what each of the core's
        # tasks had seen at its last turn (see _share).
        self.turns_yielded = 0
        self._yields_seen: dict[str, int] = {}
        # Consumer groups' target assignments, once per batch of heartbeats: the task that
        # runs them is woken by the first heartbeat that waits for one.
        self.coordinator.batch_assignments()
        self._assignments_due = trio.Event()
        self.metrics = Metrics()
        self.moves: CoordinatorMoves | None = None  # a ZooKeeper-kept cluster's
        self.injector = FaultInjector(self)
        self.injector.changed = self.parking.refresh
        self.faults = self.injector.faults
        # ACLs (authorizer.class.name): every request is checked before anything else sees
        # it. None when they are off, and then dispatch pays one comparison for them.
        self.authorization: Authorization | None = None
        # Requests kept until the ACLs of the log are loaded, in the order they came.
        self._deferred: list[tuple[Slot, RequestHeader | None, Request | OffsetCommitBatch]] = []
        if config.authorizer_class_name:
            self.authorization = self._authorization()

    now_ms = staticmethod(now_ms)

    def move_coordinator(self, fault: Fault) -> None:
        """A move_coordinator fault rule, due: the node that coordinates its group moves the
        group's partition to another node (the others have nothing to do)."""
        if self.moves is None:
            log.warning("fault #%d: move_coordinator needs --zookeeper: nothing moved", fault.id)
            return
        group = fault.rule.group
        assert group is not None
        self.moves.move_group(group, fault)

    def timers_changed(self) -> None:
        """The core's timers changed outside a Result (a partition loaded): the clock
        looks again."""
        self._timers_changed.set()

    def heartbeat_table(self) -> Any:
        """The member table when it may answer heartbeats alone (connections then answer a
        run of them in one compiled call), else None: also while a fault rule may apply to
        heartbeats, which must then all come to dispatch()."""
        co = self.coordinator
        topics = self.broker.version()
        if topics != self._topics_version:
            # A topic was added since: consumer groups resolve their subscriptions again,
            # so their heartbeats take the full path until each has.
            self._topics_version = topics
            co.topics_changed()
        if self.faults.live and (
            self.faults.touches(HEARTBEAT) or self.faults.touches(CONSUMER_GROUP_HEARTBEAT)
        ):
            return None
        return co.table if co.table_answers_heartbeats() else None

    def fast_path_allowed(self, principal: str) -> bool:
        """Whether `principal`'s heartbeats may skip authorization (the member table's fast
        path and the reactor do not check ACLs): with authorization off, or for a super
        user, whom ACLs never deny."""
        return not self.config.authorizer_class_name or principal in self.config.super_users

    # -- what a scrape and the admin port read (metrics.MetricsSource, admin.AdminHost) -------

    def connection_count(self) -> int:
        return len(self.connections)

    def group_states(self) -> list[int]:
        return list(self.coordinator.table.group_states())

    def member_count(self) -> int:
        return len(self.coordinator.table)

    def heartbeat_answers(self) -> dict[int, int]:
        return self.coordinator.heartbeat_answers()

    def fast_path_answers(self) -> tuple[int, int]:
        self.parking.collect()  # the reactor thread's answers, into the handling histogram
        table = self.coordinator.table
        return sum(table.heartbeat_answers().values()), table.consumer_heartbeat_answers()

    def disk_timings(self) -> tuple[Timings, Timings] | None:
        appender = self.store.appender
        return None if appender is None else (appender.append_timings, appender.fsync_timings)

    def groups(self) -> Mapping[str, Group]:
        return self.coordinator.groups

    # -- requests -------------------------------------------------------------------------

    def dispatch(
        self, slot: Slot, header: RequestHeader, request: Request | OffsetCommitBatch
    ) -> None:
        """A request read: authorization's first when ACLs are checked (a refusal is
        answered there), then the fault rules', if any is in force, else handle it."""
        authorization = self.authorization
        if authorization is not None:
            admitted = authorization.admit(slot, header, request)
            if admitted is None:
                self._refused(slot, header.api_key)
                return
            request = admitted
        if self.faults.live and self.injector.intercept(slot, header, request):
            return
        self.handle(slot, header, request)

    def handle(
        self, slot: Slot, header: RequestHeader, request: Request | OffsetCommitBatch
    ) -> None:
        started = perf_counter_ns()
        t = now_ms()
        version = header.api_version
        api = header.api_key
        if type(request) is OffsetCommitBatch:  # the most frequent after heartbeats
            self._coordinate(slot, header, request, t)
        elif isinstance(request, HeartbeatRequest):
            slot.answer(
                HeartbeatResponse(
                    error_code=self.coordinator.heartbeat(
                        request.group_id,
                        request.member_id,
                        request.generation_id,
                        request.group_instance_id,
                        version,
                        t,
                    )
                )
            )
        elif isinstance(request, ApiVersionsRequest):
            slot.answer(api_versions_response())
        elif isinstance(request, MetadataRequest):
            endpoint = slot.conn.endpoint  # the client's listener: its address is named
            broker = self.broker if endpoint is None else endpoint.broker
            slot.conn.fill(slot, broker.metadata_frame(request, version, slot.correlation_id))
        elif isinstance(request, FindCoordinatorRequest):
            endpoint = slot.conn.endpoint
            broker = self.broker if endpoint is None else endpoint.broker
            slot.answer(broker.find_coordinator(request, version))
        elif isinstance(request, SASL_REQUESTS):
            # A SASL request on a listener without SASL (a SASL listener's connection
            # answers its own): Kafka's answer, the exchange is not expected here.
            slot.answer(error_response(request, version, ErrorCode.ILLEGAL_SASL_STATE))
        elif isinstance(request, ListOffsetsRequest):
            slot.answer(self.broker.list_offsets(request, version))
        elif isinstance(request, FetchRequest):
            self._fetch(slot, request, version, t)
        elif isinstance(request, ProduceRequest):
            if request.acks == 0:
                # Kafka answers no acks=0 Produce, and closes the connection when one fails:
                # the client's only way to hear of it.
                slot.conn.close("a Produce with acks=0: this server keeps no records")
            else:
                slot.answer(self.broker.produce(request))
        else:
            self._coordinate(slot, header, request, t)
        metrics = self.metrics
        if api != HEARTBEAT:  # the coordinator counts the heartbeats it answers
            metrics.requests[api] += 1
        metrics.handled(api, perf_counter_ns() - started)

    def commit_offsets(self, commits: list[tuple[Slot, OffsetCommitBatch]]) -> None:
        """OffsetCommits read one after another: authorization's first when ACLs are
        checked, then the fault rules', if any is in force, then to the core in one Result."""
        authorization = self.authorization
        if authorization is not None:
            admitted = []
            for slot, batch in commits:
                checked = authorization.admit(slot, None, batch)
                if checked is None:
                    self._refused(slot, OFFSET_COMMIT)
                else:
                    assert isinstance(checked, OffsetCommitBatch)
                    admitted.append((slot, checked))
            if not admitted:
                return
            commits = admitted
        if self.faults.live:
            intercept = self.injector.intercept
            commits = [(slot, batch) for slot, batch in commits if not intercept(slot, None, batch)]
            if not commits:
                return
        self.commit_offsets_now(commits)

    def commit_offsets_now(self, commits: list[tuple[Slot, OffsetCommitBatch]]) -> None:
        started = perf_counter_ns()
        if log.isEnabledFor(logging.DEBUG):
            for slot, batch in commits:
                log.debug("%s OffsetCommit v%d %r", slot.conn.peer, slot.version, batch.member_id)
        self.apply(self.coordinator.commit_offsets(commits, now_ms()))
        self.metrics.requests[OFFSET_COMMIT] += len(commits)
        self.metrics.handled(
            OFFSET_COMMIT, (perf_counter_ns() - started) // len(commits), len(commits)
        )

    # -- authorization ------------------------------------------------------------------

    def _authorization(self) -> Authorization:
        """The ACL checks of the configuration: its ACLs in force at once, those of the log
        as it is loaded (the coordinator replays them into the same authorizer)."""
        config = self.config
        try:
            configured = [binding_from_entry(entry) for entry in config.acl]
        except ValueError as exc:
            raise startup.StartupError(f"acl: {exc}") from None
        authorizer = Authorizer(
            config.super_users, config.allow_everyone_if_no_acl_found, configured
        )
        self.coordinator.acls.enable(authorizer, frozenset(configured))
        authorization = Authorization(authorizer, self.broker)
        if ACL_PARTITION in self.cluster.owned:
            # Partition 0 is loaded first; until it is, its ACLs (a DENY among them) are not
            # in force, and the requests they could refuse wait for them.
            loading = self.coordinator.loading_partitions
            authorization.loading = lambda: ACL_PARTITION in loading
            authorization.defer = self._defer_admission
        return authorization

    def _refused(self, slot: Slot, api: int) -> None:
        """Authorization took the request: answered (counted), or kept until the ACLs load
        (counted when handled)."""
        if not (self._deferred and self._deferred[-1][0] is slot):
            self.metrics.requests[api] += 1

    def _defer_admission(
        self, slot: Slot, header: RequestHeader | None, request: Request | OffsetCommitBatch
    ) -> None:
        """Keep a request until the ACLs of the log are loaded (authorization's `defer`)."""
        self._deferred.append((slot, header, request))
        if len(self._deferred) == 1:
            self.later(now_ms() + ADMISSION_RETRY_MS, self._admit_deferred)

    def _admit_deferred(self) -> None:
        """Admit again, in the order they came, the requests kept while the ACLs loaded;
        those still early are kept again."""
        waiting, self._deferred = self._deferred, []
        for slot, header, request in waiting:
            if slot.conn.closed:
                continue
            if not self.coordinator.active:
                # Stopped before the ACLs were loaded: refused, as a stopping broker refuses.
                refused = ErrorCode.COORDINATOR_NOT_AVAILABLE
                slot.answer(error_response(request, slot.version, refused))
            elif header is None:
                assert isinstance(request, OffsetCommitBatch)
                self.commit_offsets([(slot, request)])
            else:
                self.dispatch(slot, header, request)

    def _coordinate(
        self, slot: Slot, header: RequestHeader, request: Request | OffsetCommitBatch, t: int
    ) -> None:
        """A group request: the core's."""
        version = header.api_version
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s %s v%d %r",
                slot.conn.peer,
                type(request).__name__,
                version,
                getattr(request, "member_id", ""),
            )
        co = self.coordinator
        self.apply(
            co.handle(slot, request, version, t, header.client_id or "", slot.conn.client_host)
        )
        if co.assignments_due():
            self._assignments_due.set()

    def _fetch(self, slot: Slot, request: FetchRequest, version: int, t: int) -> None:
        # Topics are empty: answer when max_wait_ms is up, through the timing wheel.
        response = self.broker.fetch(request, version)
        if request.max_wait_ms <= 0:
            slot.answer(response)
            return
        self.later(t + request.max_wait_ms, partial(slot.answer, response))

    def later(self, at_ms: int, fn: Callable[[], object]) -> None:
        """Call fn at at_ms (or at shutdown, whichever comes first)."""
        self._next_later += 1
        self._later[self._next_later] = fn
        self.later_wheel.schedule(self._next_later, at_ms)
        self._timers_changed.set()

    def apply(self, result: Result) -> None:
        """Deliver a Result: responses, records (to the store), timers, events. A connection
        given answers writes them once, when the Result is delivered (see `write_after`).
        Answers past ANSWERS_PER_TURN (a rebalance of thousands of members completing)
        are delivered by `deliver`, a slice a turn: each connection's answers still leave
        in its requests' order (the slots), whichever Result filled them first."""
        responses = result.responses
        if len(responses) > ANSWERS_PER_TURN:
            result.responses = responses[:ANSWERS_PER_TURN]
            self._deliveries.append(responses[ANSWERS_PER_TURN:])
            self._deliveries_added.set()
        self._applying += 1
        if self._applying == 1:
            self._applied += 1
        try:
            self._apply(result)
        finally:
            self._applied_one()

    def _applied_one(self) -> None:
        # The outermost delivery over: the connections it answered write now, each once.
        self._applying -= 1
        if not self._applying and self._to_write:
            connections, self._to_write = self._to_write, []
            for connection in connections:
                connection.write_now()

    def write_after(self, connection: Connection) -> bool:
        """Whether `connection`, given an answer, leaves its write until the Result being
        delivered is (then it is queued for that): only when it has written already during
        this Result. The first answer leaves at once, so that the client works on it while
        the rest are built (a rebalance's answers, a member each: the generator and the
        server overlap); the next wait, so that many answers of one connection (an
        acknowledgement of many commits) leave in one write."""
        if not self._applying:
            return False
        if connection.wrote_during != self._applied:
            connection.wrote_during = self._applied
            return False
        self._to_write.append(connection)
        return True

    def _apply(self, result: Result) -> None:
        for slot, response in result.responses:
            slot.answer(response)
        if result.events:
            # A commit's event is logged at DEBUG: not even looked at otherwise.
            debug = events_log.isEnabledFor(logging.DEBUG)
            for event in result.events:
                if debug or event.kind != "offsets_committed":
                    log_event(event)
            self.metrics.events(result.events)
            if self.event_log is not None:
                self.event_log.add(result.events)
        if result.append is not None:
            self.store.append(result.append, result.records, self._partition_of)
        if result.timers:
            self._timers_changed.set()

    def _partition_of(self, group_id: str) -> int:
        return self.coordinator.partition_for(group_id, self.config.offsets_topic_num_partitions)

    def appended(self, tokens: list[int], error: ErrorCode) -> None:
        """The appender's report (on this thread): these appends are durable, or failed."""
        self.apply(self.coordinator.complete_appends(tokens, error, now_ms()))

    # -- loading ----------------------------------------------------------------------------

    async def load(self) -> None:
        """Replay every partition's log into the core, one partition at a time."""
        co = self.coordinator
        partitions = sorted(self.cluster.owned)  # each node loads only its own
        co.loading_partitions.update(partitions)
        self.parking.refresh()
        started = time.monotonic()
        total = 0
        sizes = await trio.to_thread.run_sync(self.store.log_bytes)
        with LoadProgress(sum(sizes.values()), len(partitions)) as progress:
            for partition in partitions:
                # LogCorruption ends the server: run() reports it and exits 2.
                records = await trio.to_thread.run_sync(self.store.recover, partition)
                progress.advance(sizes[partition])
                t = now_ms()
                step = sizes[partition] / max(1, len(records))
                for i, record in enumerate(records):
                    co.replay(record, t, loading=True)
                    if i % 10_000 == 9_999:
                        progress.advance(10_000 * step)
                        await trio.lowlevel.checkpoint()  # a big log must not stall heartbeats
                progress.advance(len(records) % 10_000 * step)
                progress.partition_done(len(partitions) - len(co.loading_partitions) + 1)
                total += len(records)
                co.loading_partitions.discard(partition)
                self.parking.refresh()
                self.store.loaded(partition)
        self._timers_changed.set()  # loaded members' sessions have started
        groups = co.groups.values()
        if isinstance(self.store, MemoryStore):
            where = "memory (nothing is kept)"
        else:
            where = f"{self.config.data_dir} (--in-memory keeps nothing)"
        log.info(
            "loaded %d groups with %d members and %d committed offsets from %s: "
            "%d records of %d partitions in %.2f s",
            len(co.groups),
            sum(len(g.members) for g in groups),
            co.offset_manager.count(),
            where,
            total,
            len(partitions),
            time.monotonic() - started,
        )

    # -- time -----------------------------------------------------------------------------

    async def clock(self) -> None:
        while True:
            deadlines = [
                d
                for d in (self.coordinator.next_deadline(), self.later_wheel.next_deadline())
                if d is not None
            ]
            self._timers_changed = trio.Event()
            if deadlines:
                delay = max(0.0, (min(deadlines) - now_ms()) / 1000)
                with trio.move_on_after(delay):
                    await self._timers_changed.wait()
            else:
                await self._timers_changed.wait()
            t = now_ms()
            # A part at a time: the rest stay due (next_deadline is now), and requests are
            # served between the parts, each at most CLOCK_TURN_NS of work (a timer may
            # complete a group's rebalance).
            co = self.coordinator
            turn_ends = perf_counter_ns() + self._share("clock", CLOCK_TURN_NS)
            fired = 0
            while True:
                self.apply(co.advance(t, TIMERS_PER_CALL))
                fired += TIMERS_PER_CALL
                due = co.next_deadline()
                if due is None or due > t or fired >= TIMERS_PER_STEP:
                    break
                if perf_counter_ns() > turn_ends:
                    break
            for key in self.later_wheel.advance(t):
                self._later.pop(key)()

    async def assign(self) -> None:
        """Consumer groups' target assignments, once per batch of heartbeats: run in the turn
        after the heartbeats that wait for them were read, so that those read together in
        a turn (on any connection) share one run of each group's assignor; for at most
        ASSIGN_TURN_NS a turn when many groups are due."""
        co = self.coordinator
        while True:
            await self._assignments_due.wait()
            self._assignments_due = trio.Event()
            while co.assignments_due():
                turn_ends = perf_counter_ns() + self._share("assign", ASSIGN_TURN_NS)
                self.apply(co.run_assignments(now_ms(), ASSIGNMENT_MEMBERS_PER_TURN))
                while co.assignments_due() and perf_counter_ns() < turn_ends:
                    self.apply(co.run_assignments(now_ms(), ASSIGNMENT_MEMBERS_PER_TURN))
                await trio.lowlevel.checkpoint()

    def _share(self, task: str, base_ns: int) -> int:
        """How long `task`, one of the core's (the clock, answers to deliver, assignments to
        run), may take this turn: `base_ns`, plus its part of a connection's turn for each
        turn a connection yielded since its last (connection.TURN_NS): the core's tasks
        together take what the connections took. A turn runs every connection with work
        once: at a fixed share the core's task had a hundredth of the server behind a
        hundred busy connections, and the answers it owed (a storm's rebalances completing)
        came late enough for members waiting on them to time out; at a connection's turn
        each, the three tasks made a turn up to four times the connections' work, and a
        new connection waited behind it."""
        seen = self._yields_seen.get(task, 0)
        self._yields_seen[task] = self.turns_yielded
        return base_ns + (self.turns_yielded - seen) * TURN_NS // len(CORE_TASKS)

    def run_assignments(self) -> None:
        """Every target assignment due, at once (what `assign` does a slice at a time)."""
        while self.coordinator.assignments_due():
            self.apply(self.coordinator.run_assignments(now_ms()))

    async def deliver(self) -> None:
        """The answers of big Results (see apply), for DELIVER_TURN_NS a turn."""
        while True:
            await self._deliveries_added.wait()
            self._deliveries_added = trio.Event()
            while self._deliveries:
                turn_ends = perf_counter_ns() + self._share("deliver", DELIVER_TURN_NS)
                self._deliver_slice(ANSWERS_PER_CHECK)
                while self._deliveries and perf_counter_ns() < turn_ends:
                    self._deliver_slice(ANSWERS_PER_CHECK)
                await trio.lowlevel.checkpoint()

    def _deliver_slice(self, count: int) -> None:
        """The next `count` answers waiting in self._deliveries (fewer if its oldest Result
        has fewer left)."""
        deliveries = self._deliveries
        responses = deliveries[0]
        if len(responses) <= count:
            deliveries.popleft()
            part = responses
        else:
            part = responses[:count]
            del responses[:count]
        self._applying += 1
        if self._applying == 1:
            self._applied += 1
        try:
            for slot, response in part:
                slot.answer(response)
        finally:
            self._applied_one()

    # -- connections ----------------------------------------------------------------------

    async def handle_connection(
        self, stream: trio.SocketStream, endpoint: Endpoint | None = None
    ) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "unknown peer"
        if len(self.connections) >= self.max_connections:
            log.warning(
                "refusing connection from %s: max.connections (%d) reached",
                peer,
                self.max_connections,
            )
            await trio.aclose_forcefully(stream)
            return
        connection = Connection(self, stream, peer, endpoint)
        self.connections.add(connection)
        try:
            await connection.run()
        except Exception:
            # A bug met by one connection must not take the server down with it.
            log.exception("connection from %s failed; closing it", peer)
        finally:
            self.connections.discard(connection)
            if not self.connections:
                self._no_connections.set()

    # -- shutdown -------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Answer everything that waits, then let connections deliver it and close."""
        grace = trio.current_time() + self.config.shutdown_grace_ms / 1000
        appender = self.store.appender
        with trio.move_on_at(grace):
            while appender is not None and appender.pending:
                await trio.sleep(0.005)  # commits on their way to disk: answer them first
        self.apply(self.coordinator.shutdown(now_ms()))
        self.parking.refresh()
        self.injector.clear()  # paused requests are handled (and refused by the core)
        while self._later:  # Fetches get their empty answers, delayed requests theirs
            key, fn = self._later.popitem()
            self.later_wheel.cancel(key)
            fn()
        while self._deliveries:  # what big Results still owe, before the connections finish
            self._deliver_slice(ANSWERS_PER_TURN)
        self._no_connections = trio.Event()
        for connection in list(self.connections):
            connection.finish()
        if self.connections:
            with trio.move_on_at(grace):
                await self._no_connections.wait()
        if self.connections:
            log.warning(
                "%d connections did not take their answers within shutdown.grace.ms",
                len(self.connections),
            )
        if self.event_log is not None:
            await self.event_log.close()


def log_event(event: Event) -> None:
    if event.kind in ("rebalance_completed", "sync_completed"):
        events_log.info(
            "group %s: %s, generation %d, %d members, %d ms since the rebalance started",
            event.group_id,
            event.kind.replace("_", " "),
            event.generation,
            event.members,
            event.duration_ms,
        )
    elif event.kind == "rebalance_started":
        events_log.info(
            "group %s: rebalance started from generation %d (%s)",
            event.group_id,
            event.generation,
            event.reason,
        )
    elif event.kind == "group_unloaded":
        events_log.info(
            "group %s: unloaded with %d members: its partition moved to another node",
            event.group_id,
            event.members,
        )
    elif event.kind == "group_loaded":
        events_log.info(
            "group %s: loaded %s, generation %d, with %d members",
            event.group_id,
            event.reason,
            event.generation,
            event.members,
        )
    elif event.kind == "coordinator_moved":
        events_log.warning("group %s: %s", event.group_id, event.reason)
    elif event.kind == "offsets_committed":
        events_log.debug("group %s: %d offsets committed", event.group_id, event.members)
    else:
        events_log.info(
            "group %s: %s %s%s",
            event.group_id,
            event.kind.replace("_", " "),
            event.member_id,
            f" ({event.reason})" if event.reason else "",
        )


async def serve(config: ServerConfig, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Listen and serve until cancelled, SIGINT or SIGTERM (then stop cleanly).

    What can refuse the start is checked before anything is created (startup.py); a start
    that fails after the data directory was created removes it again if it is empty."""
    # Signals first: once the port is announced, a SIGTERM must stop us cleanly.
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            if _stop_asked:  # before the receiver opened (run())
                log.info(
                    "received %s before starting: stopping", signal.Signals(_stop_asked[0]).name
                )
                return
            files = startup.file_limit(config)
            data_dir = Path(config.data_dir)
            if not config.in_memory:
                startup.check_data_dir(data_dir)
            if config.cluster:
                # Before listening: a peer that checks us meanwhile finds nobody, not a
                # listener that does not answer.
                cluster = config.cluster_for(config.port)
                mismatch = await trio.to_thread.run_sync(peers.check, cluster)
                if mismatch is not None:
                    raise startup.StartupError(f"{mismatch}; give every node the same list")
            configured = config.listener_list()
            opened: list[tuple[Listener, list[trio.SocketListener]]] = []
            for listener in configured:
                flags = ("--host", "--port") if not config.listeners else ("--listener",) * 2
                sockets = await startup.open_listeners(listener.host, listener.port, *flags)
                opened.append((listener.with_port(sockets[0].socket.getsockname()[1]), sockets))
            listeners = [sock for _, socks in opened for sock in socks]
            admin_listeners = []
            if config.admin_port != "off":
                admin_listeners = await startup.open_listeners(
                    config.admin_host, config.admin_port, "--admin-host", "--admin-port"
                )
            store = _store(config)
            created: list[Path] = []
            started = False
            try:
                if not config.in_memory:
                    created = startup.create_data_dir(data_dir)
                store.open()  # DataDirLocked: another server has this data directory
                started = await _serve(
                    config, store, opened, admin_listeners, files, signals, task_status
                )
            finally:
                for sock in listeners + admin_listeners:
                    await sock.aclose()
                await trio.to_thread.run_sync(store.close)
                if not started:
                    startup.remove_if_empty(created)

    finally:
        # Past the receiver (which gives back run()'s handler), the loop's wake-up socket is
        # about to close: a SIGINT or SIGTERM handled then is written to a closed socket,
        # and logged as an error. Ignored, it is not; the server is stopping anyway.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _store(config: ServerConfig) -> Store:
    owned = config.cluster_for(config.port).owned  # a node keeps only its own partitions
    if config.in_memory:
        return MemoryStore(owned)
    return OffsetsStore(
        Path(config.data_dir),
        owned,
        config.offsets_topic_segment_bytes,
        config.fsync,
        config.group_coordinator_append_linger_ms,
        config.log_truncate_damaged,
        LogCleanerSettings(
            config.log_cleaner_backoff_ms,
            config.log_cleaner_min_cleanable_ratio,
            config.log_cleaner_delete_retention_ms,
        )
        if config.log_cleaner_enable
        else None,
        shared=bool(config.zookeeper),  # partitions move: each held under its own lock
    )


async def _serve(
    config: ServerConfig,
    store: Store,
    opened: list[tuple[Listener, list[trio.SocketListener]]],
    admin_listeners: list[trio.SocketListener],
    files: startup.FileLimit,
    signals: Any,
    task_status: Any,
) -> bool:
    """Serve until a signal; True once the start has succeeded (the log is loaded)."""
    port = opened[0][0].port
    server = Server(config, store, files.max_connections, config.cluster_for(port))
    moves = None
    if config.zookeeper:
        # The node owns nothing until the map kept in ZooKeeper gives it partitions.
        server.coordinator.owned_partitions = set()
        moves = server.moves = CoordinatorMoves(
            server, config.zookeeper, config.zookeeper_session_timeout_ms
        )
    try:
        served = endpoints(
            config, [listener for listener, _ in opened], server.broker, Users(config.user)
        )
    except ValueError as exc:
        raise startup.StartupError(str(exc)) from None
    if config.event_log and not config.in_memory:
        # Nodes that share a data directory (--zookeeper) keep an event log each.
        events = Path(config.data_dir) / (f"node-{config.node_id}-events" if moves else "events")
        server.event_log = EventLog(
            events,
            config.event_log_flush_ms,
            config.event_log_roll_bytes,
            config.event_log_roll_ms,
            config.event_log_retention_ms,
            node_id=config.node_id,
        )
    store.start(trio.lowlevel.current_trio_token().run_sync_soon, server.appended)
    admin = Admin(server)
    if admin_listeners:
        admin_port = admin_listeners[0].socket.getsockname()[1]
        print(f"admin on {config.admin_host}:{admin_port}", flush=True)
        log.info(
            "admin port: http://%s:%d/metrics, /v1/groups, /v1/faults",
            config.admin_host,
            admin_port,
        )
    cluster = server.cluster
    if not cluster.lone and moves is None:
        log.info(
            "node %d of cluster %s (%s): owns %d of %d offsets partitions",
            cluster.node_id,
            cluster.cluster_id,
            cluster.describe(),
            len(cluster.owned),
            cluster.partitions,
        )
    if len(served) > 1 or not served[0].plain:
        for endpoint in served:
            listener = endpoint.listener
            print(
                f"listener {listener.name} ({listener.protocol}) on {listener.host}:"
                f"{listener.port}",
                flush=True,
            )
            log.info("listener %s: %s%s", listener, listener.protocol, _security(endpoint))
    # Last: once this line is out, a test harness may use every port.
    print(f"listening on {opened[0][0].host}:{port}", flush=True)
    for rule in config.fault:
        server.injector.add(rule)
    if config.in_memory:
        log.info("in memory: nothing is kept (no data directory, no event log)")
    else:
        log.info(
            "offsets log: %s (fsync %s, linger %d ms, segments of %d bytes, cleaner %s)",
            config.data_dir,
            config.fsync,
            config.group_coordinator_append_linger_ms,
            config.offsets_topic_segment_bytes,
            f"every {config.log_cleaner_backoff_ms} ms" if config.log_cleaner_enable else "off",
        )
    if server.event_log is not None:
        log.info("event log: %s", server.event_log.directory)
    log.info(
        "max.connections %d (%s%s)",
        files.max_connections,
        "auto: " if config.max_connections == "auto" else "",
        files.describe(),
    )
    if moves is not None:
        try:
            await moves.join()
        except KazooTimeoutError:
            raise startup.StartupError(
                f"cannot reach ZooKeeper at {config.zookeeper}; start it, or give --zookeeper "
                "one that runs"
            ) from None
    task_status.started(port)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.parking.run)
        nursery.start_soon(server.clock)
        nursery.start_soon(store.watch_idle)  # fsync batch: syncs when the loop is idle
        nursery.start_soon(server.assign)
        nursery.start_soon(server.deliver)
        if moves is None:
            nursery.start_soon(server.load)
        else:
            nursery.start_soon(moves.run)
        nursery.start_soon(collector.run)
        if admin_listeners:
            nursery.start_soon(admin_serve, admin, admin_listeners)
        if server.event_log is not None:
            nursery.start_soon(server.event_log.run)
        accepting = trio.CancelScope()

        async def accept() -> None:
            with accepting:
                async with trio.open_nursery() as listening:
                    for endpoint, (_, sockets) in zip(served, opened, strict=True):
                        listening.start_soon(
                            acceptor.serve,
                            sockets,
                            partial(server.handle_connection, endpoint=endpoint),
                            nursery,
                        )

        nursery.start_soon(accept)
        async for signum in signals:
            log.info("received %s: stopping", signal.Signals(signum).name)
            break
        accepting.cancel()  # closes the listeners
        await server.shutdown()
        nursery.cancel_scope.cancel()
    log.info("stopped")
    return True


# What ends a start with one line and exit code 2 rather than a traceback.
START_FAILURES = (startup.StartupError, DataDirLocked, LogCorruption)


def _security(endpoint: Endpoint) -> str:
    """What a listener's log line says of its security."""
    parts = []
    if endpoint.tls is not None:
        parts.append(f"TLS, client certificates {endpoint.listener.client_auth}")
    if endpoint.sasl is not None:
        parts.append("SASL " + ", ".join(endpoint.sasl.mechanisms))
        if endpoint.sasl.reauth_ms:
            parts.append(f"sessions of {endpoint.sasl.reauth_ms} ms")
    return (" (" + "; ".join(parts) + ")") if parts else ""


def start_failure(exc: BaseException) -> BaseException | None:
    """The start failure inside `exc` (which may be an exception group from a nursery)."""
    while isinstance(exc, BaseExceptionGroup):
        found = exc.subgroup(START_FAILURES)
        if found is None:
            return None
        exc = found.exceptions[0]
    return exc if isinstance(exc, START_FAILURES) else None


def run(config: ServerConfig) -> int:
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # A file-size limit reached must fail that write (EFBIG, answered as a storage error),
    # not kill the server.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    # Outside serve()'s signal receiver (before it opens, after it closes, which gives this
    # handler back) a SIGINT or SIGTERM is noted rather than fatal: a supervisor that
    # repeats SIGTERM while the server stops must not kill it on its way out of a clean
    # stop, and one that comes first stops it as soon as the receiver is open.
    signal.signal(signal.SIGTERM, _ask_stop)
    signal.signal(signal.SIGINT, _ask_stop)
    try:
        trio.run(serve, config)
    except BaseException as exc:
        failure = start_failure(exc)
        if failure is None:
            raise
        print(f"fastcoord serve: cannot start: {failure}", file=sys.stderr, flush=True)
        return 2
    finally:
        # The interpreter's finalization would give a Python handler's signals their
        # default actions back (fatal), but leaves ignored ones ignored.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return 0


_stop_asked: list[int] = []  # SIGINT or SIGTERM met outside serve()'s signal receiver


def _ask_stop(signum: int, _frame: object) -> None:
    _stop_asked.append(signum)
