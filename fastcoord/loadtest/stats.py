"""What a load-test worker measured, second by second, and the form it crosses to the parent.

A worker answers hundreds of thousands of requests a second on less than a core. The plain
successes of stable members' heartbeats and commits are recorded by the connections'
lanes (fastcoord/client/lane.py) straight into the Recorder's sinks, a histogram row per
API; recording any other answer is a list append (and, for an error, a dict increment).
Everything else (bucketing, counting) happens once a second in `take`, vectorised, and
the result is one picklable `Second` that the parent merges with the other workers'
(aggregate.py).

Against a cluster, each coordinator node's share is kept apart as cheaply: the lanes of the
connections to a node record into that node's own sinks (`sinks`), so a lane's plain
success costs what it did, and an answer recorded from Python names its node (`record`'s
`node`), one more dict increment on a path that has just decoded a response. Which node
coordinates which group is noted when FindCoordinator answers, and only changes cross to
the parent.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping

import msgspec
import numpy as np

from fastcoord.client import lane
from fastcoord.loadtest.histogram import Histogram, Int16Array, Int64Array
from fastcoord.protocol.api_keys import ApiKey

# Rows of the errors table a worker keeps per second; past it errors are only counted.
MAX_ERROR_ROWS = 10_000
# The APIs of the rows of a lane's latency sink: its heartbeats' (a classic fleet's; a
# consumer-protocol fleet's lanes carry ConsumerGroupHeartbeat), then its commits'.
SINK_APIS = (int(ApiKey.HEARTBEAT), int(ApiKey.OFFSET_COMMIT))

Address = tuple[str, int]  # a node's (host, port), as FindCoordinator and Metadata name it


def address_text(address: Address) -> str:
    """HOST:PORT, as the nodes' figures are keyed in a Second and in summary.json."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ApiSecond(msgspec.Struct):
    """One API's requests in one second of one worker: the histogram in sparse form."""

    api_key: int
    count: int  # requests answered (each with a latency)
    sum_ns: int
    max_ns: int
    buckets: Int16Array
    counts: Int64Array
    errors: dict[int, int]  # error code -> errors counted

    def histogram(self) -> Histogram:
        return Histogram.from_sparse(self.buckets, self.counts, self.sum_ns, self.max_ns)


# Rows, as tuples because a worker may make thousands a second.
# errors: (wall_ms, api_key, error_code, group, member)
ErrorRow = tuple[int, int, int, str, str]
# rebalances: (group, member, instance_id, generation, started_ms, ended_ms, reason, expected)
RebalanceRow = tuple[str, str, str | None, int, int, int, str, bool]
# storms: (group, members, last_join_sent_ns, last_sync_answered_ns, first_join_answered_ns)
StormRow = tuple[str, int, int, int, int]
# coordinator moves, a worker's members of a group merged:
# (group, from HOST:PORT, to HOST:PORT, members back, first lost wall_ms, last back wall_ms)
MoveRow = tuple[str, str, str, int, int, int]


class NodeSecond(msgspec.Struct):
    """One coordinator node's share of a worker's second: what its members' connections to
    the node had answered, and how many of those connections were open at the take."""

    address: str  # HOST:PORT
    requests: dict[int, int]  # api key -> requests answered
    errors: dict[int, dict[int, int]]  # api key -> error code -> errors counted
    connections: int


class RebalanceCounts(msgspec.Struct):
    """A second's rebalances without their rows: the durations' histogram (sparse, in ns)
    and how many were unexpected."""

    buckets: Int16Array
    counts: Int64Array
    sum_ns: int
    max_ns: int
    unexpected: int

    def histogram(self) -> Histogram:
        return Histogram.from_sparse(self.buckets, self.counts, self.sum_ns, self.max_ns)


class Second(msgspec.Struct):
    """What one worker recorded between two takes."""

    worker: int
    elapsed_s: int  # whole seconds since the run's start at the take: 1 for the first
    wall_ms: int  # wall clock at the take, epoch milliseconds
    apis: list[ApiSecond]
    error_rows: list[ErrorRow]
    errors_dropped: int  # errors counted but past MAX_ERROR_ROWS: no row
    rebalances: list[RebalanceRow]
    storms: list[StormRow]
    commits: int
    offsets: int
    unexpected_expirations: int
    states: dict[str, int]  # members by state at the take
    connections: int
    cpu_s: float  # the worker's CPU time since the previous take
    # Each coordinator node's share (the nodes with connections or answers this second).
    nodes: list[NodeSecond] = msgspec.field(default_factory=list)
    # Node ids (HOST:PORT -> id) and groups' coordinators (group -> HOST:PORT) learnt or
    # changed since the previous take: the parent keeps the rest.
    node_ids: dict[str, int] = msgspec.field(default_factory=dict)
    groups: dict[str, str] = msgspec.field(default_factory=dict)
    # In a slim second (`slim`), the rebalances its rows held.
    rebalanced: RebalanceCounts | None = None
    # Groups whose members found their coordinator on another node and were served there.
    moves: list[MoveRow] = msgspec.field(default_factory=list)

    def slim(self) -> Second:
        """This second without its rows (errors, rebalances), which the worker writes
        itself, its rebalances kept as counts: the few kilobytes a distributed run's worker
        sends its driver each second, whatever a join storm brought."""
        durations = Histogram()
        durations.add_ns(np.array([r[5] - r[4] for r in self.rebalances], np.int64) * 1_000_000)
        buckets, counts = durations.nonzero()
        rebalanced = RebalanceCounts(
            buckets,
            counts,
            durations.sum_ns,
            durations.max_ns,
            sum(not r[7] for r in self.rebalances),
        )
        return msgspec.structs.replace(
            self,
            error_rows=[],
            rebalances=[],
            rebalanced=rebalanced,
        )


class Recorder:
    """One worker's measurements since its last `take`.

    A request is counted by its latency (`record`, or an append to `latencies`), an error by
    one call of `record` (error != 0), `error_code` or `error`: a request answered with an
    error is counted by `record(api, ns, code)`, or by an append and `error(...)` when it
    deserves a row, never by both. The error rate is errors per counted request, so a
    request given up on (a timeout) should have its latency recorded too. Lanes count
    successes in the sinks `sinks(node)` gives (lane.py's layout), one pair per node,
    which `take` reads and empties. `record` and `error_code` given a `node` count the
    request in that node's share as well.
    """

    def __init__(
        self, worker: int, cpu_s: float | None = None, heartbeat_api: int = ApiKey.HEARTBEAT
    ) -> None:
        """`cpu_s` is the process's CPU time now (default `time.process_time()`): what the
        first take's CPU is counted from. `heartbeat_api` is what the lanes' heartbeats
        are (the fleet's LANE_HEARTBEAT)."""
        self.worker = worker
        self.sink_apis = (int(heartbeat_api), *SINK_APIS[1:])
        self._cpu_s = time.process_time() if cpu_s is None else cpu_s
        # The lists live as long as the Recorder (take empties them), so that a loop may
        # hold on to the one `latencies` gave it.
        self._latencies: defaultdict[int, list[int]] = defaultdict(list)
        self._errors: defaultdict[tuple[int, int], int] = defaultdict(int)
        # node -> (latency sink, commit sink): lanes hold them, so they live as long as
        # the Recorder and take empties them in place.
        self._sinks: dict[Address | None, tuple[Int64Array, Int64Array]] = {}
        self._node_requests: defaultdict[tuple[Address, int], int] = defaultdict(int)
        self._node_errors: defaultdict[tuple[Address, int, int], int] = defaultdict(int)
        self._node_ids: dict[Address, int] = {}
        self._new_ids: dict[str, int] = {}
        self._coordinators: dict[str, Address] = {}  # group -> its node, as last found
        self._moved: dict[str, str] = {}  # group -> HOST:PORT, since the last take
        self._texts: dict[Address, str] = {}
        self._reset()

    def _reset(self) -> None:
        for values in self._latencies.values():
            values.clear()
        for latency, commits in self._sinks.values():
            latency.fill(0)
            commits.fill(0)
        self._errors.clear()
        self._node_requests.clear()
        self._node_errors.clear()
        self._new_ids = {}
        self._moved = {}
        self._error_rows: list[ErrorRow] = []
        self._errors_dropped = 0
        self._rebalances: list[RebalanceRow] = []
        self._storms: list[StormRow] = []
        self._coordinator_moves: dict[tuple[str, str, str], list[int]] = {}
        self._commits = 0
        self._offsets = 0
        self._expirations = 0

    def sinks(self, node: Address | None = None) -> tuple[Int64Array, Int64Array]:
        """The latency sink and the commit sink (lane.py's layout) of the lanes of the
        connections to `node`: their plain successes count in its share."""
        pair = self._sinks.get(node)
        if pair is None:
            pair = (np.zeros((len(SINK_APIS), lane.ROW), np.int64), np.zeros(2, np.int64))
            self._sinks[node] = pair
        return pair

    def sunk(self) -> tuple[Int64Array, Int64Array]:
        """What every node's sinks hold now, merged: (latency rows, commits and offsets)."""
        pairs = list(self._sinks.values())
        if not pairs:
            return np.zeros((len(SINK_APIS), lane.ROW), np.int64), np.zeros(2, np.int64)
        rows = np.stack([latency for latency, _ in pairs])
        merged = rows.sum(axis=0)
        merged[:, lane.MAX] = rows[:, :, lane.MAX].max(axis=0)
        return merged, np.sum([commits for _, commits in pairs], axis=0)

    def node(self, address: Address, node_id: int) -> None:
        """A node of the cluster and its id, as Metadata or FindCoordinator named it."""
        if self._node_ids.get(address) != node_id:
            self._node_ids[address] = node_id
            self._new_ids[self._text(address)] = node_id

    def coordinator(self, group: str, address: Address) -> None:
        """The node that FindCoordinator named for `group`."""
        if self._coordinators.get(group) != address:
            self._coordinators[group] = address
            self._moved[group] = self._text(address)

    def _text(self, address: Address) -> str:
        text = self._texts.get(address)
        if text is None:
            text = self._texts[address] = address_text(address)
        return text

    def record(
        self, api_key: int, latency_ns: int, error: int, node: Address | None = None
    ) -> None:
        """One request answered after `latency_ns`; `error` its error code (0: success);
        `node` the node that answered it, if it counts in a node's share."""
        self._latencies[api_key].append(latency_ns)
        if error:
            self._errors[api_key, error] += 1
        if node is not None:
            self._node_requests[node, api_key] += 1
            if error:
                self._node_errors[node, api_key, error] += 1

    def latencies(self, api_key: int) -> list[int]:
        """The list `record` appends to, for the Recorder's life: a loop may keep it and
        append latencies (ns) to it directly, counting errors with `error_code` or `error`."""
        return self._latencies[api_key]

    def error_code(self, api_key: int, code: int, node: Address | None = None) -> None:
        """Count one error, whose latency (if it had one) was appended separately; `node`
        as for `record`."""
        self._errors[api_key, code] += 1
        if node is not None:
            self._node_errors[node, api_key, code] += 1

    def error(self, api_key: int, code: int, group: str, member: str, wall_ms: int) -> None:
        """Count one error and keep its row for the errors table (up to MAX_ERROR_ROWS a
        second; the rest are counted as dropped)."""
        self._errors[api_key, code] += 1
        self.error_row(api_key, code, group, member, wall_ms)

    def error_row(self, api_key: int, code: int, group: str, member: str, wall_ms: int) -> None:
        """Keep the row of an error that `record` or `error_code` counted already."""
        if len(self._error_rows) < MAX_ERROR_ROWS:
            self._error_rows.append((wall_ms, api_key, code, group, member))
        else:
            self._errors_dropped += 1

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
    ) -> None:
        """One rebalance as a member saw it: from the moment it learned of it (or began to
        join) to its SyncGroup answer, wall clock; `expected` when the test caused it."""
        self._rebalances.append(
            (group, member, instance_id, generation, started_ms, ended_ms, reason, expected)
        )

    def storm(
        self,
        group: str,
        members: int,
        last_join_sent_ns: int,
        last_sync_answered_ns: int,
        first_join_answered_ns: int,
    ) -> None:
        """A group's join storm as this worker saw it: its `members` of the group, when the
        last of them sent JoinGroup, when the last had its SyncGroup answered and when the
        first JoinGroup was answered with a generation (the rebalance delay over; 0 if
        none was) (wall clock, ns). The parent merges workers: max(answered) - max(sent),
        and max(answered) - min(first join answered)."""
        self._storms.append(
            (group, members, last_join_sent_ns, last_sync_answered_ns, first_join_answered_ns)
        )

    def moved(self, group: str, old: Address, new: Address, lost_ms: int, back_ms: int) -> None:
        """A member of `group` lost its coordinator `old` at `lost_ms` (the first answer
        that said so, or its connection's end) and was served by `new` at `back_ms` (wall
        clock): its heartbeat answered there. Merged per group and pair of nodes."""
        key = (group, self._text(old), self._text(new))
        seen = self._coordinator_moves.get(key)
        if seen is None:
            self._coordinator_moves[key] = [1, lost_ms, back_ms]
        else:
            seen[0] += 1
            seen[1] = min(seen[1], lost_ms)
            seen[2] = max(seen[2], back_ms)

    def commit(self, offsets: int) -> None:
        """One OffsetCommit answered, of `offsets` partitions."""
        self._commits += 1
        self._offsets += offsets

    def unexpected_expiration(self) -> None:
        """A member found itself expired (UNKNOWN_MEMBER_ID) though it kept its session."""
        self._expirations += 1

    def take(
        self,
        elapsed_s: int,
        wall_ms: int,
        states: dict[str, int],
        connections: int,
        cpu_s: float,
        node_connections: Mapping[Address, int] | None = None,
    ) -> Second:
        """What was recorded since the last take, and a fresh start. `elapsed_s` is whole
        seconds since the run's start (1 at the end of the first), `wall_ms` the wall clock
        now, `states` members by state, `cpu_s` the process's CPU time now (as
        `time.process_time()`); the Second carries the CPU used since the previous take.
        `node_connections`: the members' connections open to each node now."""
        errors: dict[int, dict[int, int]] = defaultdict(dict)
        for (api_key, code), n in self._errors.items():
            errors[api_key][code] = n
        latency_sink, commit_sink = self.sunk()
        sunk = {
            api_key: row
            for api_key, row in zip(self.sink_apis, latency_sink, strict=True)
            if row[lane.COUNT]
        }
        apis = []
        for api_key in sorted(self._latencies.keys() | errors.keys() | sunk.keys()):
            values = self._latencies.get(api_key, [])
            if not values and api_key not in errors and api_key not in sunk:
                continue
            h = Histogram()
            h.add_ns(np.array(values, dtype=np.int64))
            if api_key in sunk:
                h.add_row(sunk[api_key])
            buckets, counts = h.nonzero()
            apis.append(
                ApiSecond(
                    api_key, h.count, h.sum_ns, h.max_ns, buckets, counts, errors.get(api_key, {})
                )
            )
        second = Second(
            worker=self.worker,
            elapsed_s=elapsed_s,
            wall_ms=wall_ms,
            apis=apis,
            error_rows=self._error_rows,
            errors_dropped=self._errors_dropped,
            rebalances=self._rebalances,
            storms=self._storms,
            commits=self._commits + int(commit_sink[0]),
            offsets=self._offsets + int(commit_sink[1]),
            unexpected_expirations=self._expirations,
            states=dict(states),
            connections=connections,
            cpu_s=max(0.0, cpu_s - self._cpu_s),
            nodes=self._nodes(node_connections or {}),
            node_ids=self._new_ids,
            groups=self._moved,
            moves=[
                (g, a, b, n, lost, back)
                for (g, a, b), (n, lost, back) in self._coordinator_moves.items()
            ],
        )
        self._cpu_s = cpu_s
        self._reset()
        return second

    def _nodes(self, connections: Mapping[Address, int]) -> list[NodeSecond]:
        """Each node's share since the last take: its sinks' counts beside what was
        recorded from Python with its name."""
        requests: defaultdict[Address, dict[int, int]] = defaultdict(dict)
        for (node, api_key), n in self._node_requests.items():
            requests[node][api_key] = n
        for sunk_at, (latency, _) in self._sinks.items():
            if sunk_at is None:
                continue
            for api_key, row in zip(self.sink_apis, latency, strict=True):
                if row[lane.COUNT]:
                    mine = requests[sunk_at]
                    mine[api_key] = mine.get(api_key, 0) + int(row[lane.COUNT])
        errors: defaultdict[Address, defaultdict[int, dict[int, int]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        for (node, api_key, code), n in self._node_errors.items():
            errors[node][api_key][code] = n
        nodes = []
        for node in sorted(requests.keys() | errors.keys() | connections.keys()):
            nodes.append(
                NodeSecond(
                    self._text(node),
                    dict(sorted(requests.get(node, {}).items())),
                    {k: dict(v) for k, v in sorted(errors.get(node, {}).items())},
                    connections.get(node, 0),
                )
            )
        return nodes
