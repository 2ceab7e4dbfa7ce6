"""What a load-test worker measured, second by second, and the form it crosses to the parent.

A worker answers hundreds of thousands of requests a second on less than a core. The plain
successes of stable members' heartbeats and commits are recorded by the connections'
lanes (fastcoord/client/lane.py) straight into the Recorder's sinks, a histogram row per
API; recording any other answer is a list append (and, for an error, a dict increment).
Everything else (bucketing, counting) happens once a second in `take`, vectorised, and
the result is one picklable `Second` that the parent merges with the other workers'
(aggregate.py).
"""

from __future__ import annotations

import time
from collections import defaultdict

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


class Recorder:
    """One worker's measurements since its last `take`.

    A request is counted by its latency (`record`, or an append to `latencies`), an error by
    one call of `record` (error != 0), `error_code` or `error`: a request answered with an
    error is counted by `record(api, ns, code)`, or by an append and `error(...)` when it
    deserves a row, never by both. The error rate is errors per counted request, so a
    request given up on (a timeout) should have its latency recorded too. Lanes count
    successes in `latency_sink` and `commit_sink` (lane.py's layout), which `take` reads
    and empties.
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
        self.latency_sink: Int64Array = np.zeros((len(SINK_APIS), lane.ROW), np.int64)
        self.commit_sink: Int64Array = np.zeros(2, np.int64)  # commits, offsets
        self._reset()

    def _reset(self) -> None:
        for values in self._latencies.values():
            values.clear()
        self.latency_sink.fill(0)
        self.commit_sink.fill(0)
        self._errors.clear()
        self._error_rows: list[ErrorRow] = []
        self._errors_dropped = 0
        self._rebalances: list[RebalanceRow] = []
        self._storms: list[StormRow] = []
        self._commits = 0
        self._offsets = 0
        self._expirations = 0

    def record(self, api_key: int, latency_ns: int, error: int) -> None:
        """One request answered after `latency_ns`; `error` its error code (0: success)."""
        self._latencies[api_key].append(latency_ns)
        if error:
            self._errors[api_key, error] += 1

    def latencies(self, api_key: int) -> list[int]:
        """The list `record` appends to, for the Recorder's life: a loop may keep it and
        append latencies (ns) to it directly, counting errors with `error_code` or `error`."""
        return self._latencies[api_key]

    def error_code(self, api_key: int, code: int) -> None:
        """Count one error, whose latency (if it had one) was appended separately."""
        self._errors[api_key, code] += 1

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
    ) -> Second:
        """What was recorded since the last take, and a fresh start. `elapsed_s` is whole
        seconds since the run's start (1 at the end of the first), `wall_ms` the wall clock
        now, `states` members by state, `cpu_s` the process's CPU time now (as
        `time.process_time()`); the Second carries the CPU used since the previous take."""
        errors: dict[int, dict[int, int]] = defaultdict(dict)
        for (api_key, code), n in self._errors.items():
            errors[api_key][code] = n
        sunk = {
            api_key: row
            for api_key, row in zip(self.sink_apis, self.latency_sink, strict=True)
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
            commits=self._commits + int(self.commit_sink[0]),
            offsets=self._offsets + int(self.commit_sink[1]),
            unexpected_expirations=self._expirations,
            states=dict(states),
            connections=connections,
            cpu_s=max(0.0, cpu_s - self._cpu_s),
        )
        self._cpu_s = cpu_s
        self._reset()
        return second
