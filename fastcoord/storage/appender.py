"""Appends to the partition logs, off the event loop: one thread writes and syncs.

The server hands over each Result's records, already framed per coordinator partition,
with the Result's append token. The thread takes whatever is queued, writes it, makes it
durable under the fsync policy, and reports the tokens back to the Trio thread, which
then lets the core acknowledge (Coordinator.complete_append). A slow disk therefore delays
acknowledgements, never heartbeats.

Policies (`fsync`):
- always: every write is synced before it is acknowledged; whatever was queued meanwhile
  shares the sync, but nothing waits to be shared;
- batch (default): a write that is queued alone (nothing else waiting when the thread takes
  it) is synced at once, so a client that commits one request at a time never waits; when
  several are queued, writes arrive faster than they are synced, and the thread waits for
  more to share one sync per partition, while they keep coming (a pause of a fifth of the
  linger, group.coordinator.append.linger.ms, 5 ms, ends the wait) and for no longer than
  the linger;
- never: acknowledged once written to the operating system (a crash of the machine, not
  of the process, can lose it).

A write or sync that fails answers its tokens COORDINATOR_NOT_AVAILABLE: with one node
there is no other coordinator to move to, as Kafka's NOT_COORDINATOR would send the client.
The failure is logged once per interval, not once per request.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Literal, Protocol

from fastcoord.protocol.errors import ErrorCode
from fastcoord.storage.log import PartitionLog
from fastcoord.timings import DISK_BUCKETS_S, Timings

log = logging.getLogger("fastcoord.storage")

Policy = Literal["always", "batch", "never"]
Done = Callable[[list[int], ErrorCode], None]
ERROR_LOG_INTERVAL_S = 10.0
LINGER_GAPS = 5  # batch: a pause of linger / LINGER_GAPS between writes ends the wait
Item = tuple[int, dict[int, tuple[bytes, int]]] | None  # (token, frames); None: close


class Inbox(Protocol):
    """Where submissions wait for the thread: a queue.SimpleQueue, or a test's own."""

    def put(self, item: Item) -> None: ...

    def get(self, block: bool = True, timeout: float | None = None) -> Item: ...

    def get_nowait(self) -> Item: ...


class Appender:
    def __init__(
        self,
        logs: dict[int, PartitionLog],
        policy: Policy,
        linger_ms: int,
        report: Callable[[Callable[[], None]], None],
        done: Done,
        *,
        clock: Callable[[], float] = time.monotonic,
        inbox: Inbox | None = None,
    ) -> None:
        """`report(fn)` must run fn on the event loop's thread (TrioToken.run_sync_soon);
        `done(tokens, error)` is what it runs. `clock` and `inbox` are the time and the
        queue that batching goes by: a test gives its own, in which waiting passes
        simulated time, to decide which writes share a sync without racing the machine."""
        self.logs = logs
        self.policy = policy
        self.linger_s = linger_ms / 1000
        self._report = report
        self._done = done
        self._clock = clock
        self._queue: Inbox = queue.SimpleQueue() if inbox is None else inbox
        self._thread = threading.Thread(target=self._run, name="fastcoord-appender", daemon=True)
        self._failures = 0
        self._last_error_log = 0.0
        self.pending = 0  # tokens submitted and not yet reported
        # Each write of a batch, and each sync: read by the metrics endpoint.
        self.append_timings = Timings(DISK_BUCKETS_S)
        self.fsync_timings = Timings(DISK_BUCKETS_S)

    def start(self) -> None:
        self._thread.start()

    def submit(self, token: int, frames: dict[int, tuple[bytes, int]]) -> None:
        """Write `frames` ({partition: (framed records, count)}); report `token` when done."""
        self.pending += 1
        self._queue.put((token, frames))

    def close(self) -> None:
        """Finish what is queued, then stop the thread and close the logs."""
        self._queue.put(None)
        self._thread.join()
        for partition_log in self.logs.values():
            partition_log.close()

    # -- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            stopping = self._gather(batch, 0.0, 0.0)  # what is queued already
            if self.policy == "batch" and len(batch) > 1 and not stopping:
                # Writes arrive faster than they are synced: wait for more to share the
                # sync, while they keep coming (a pause of a fifth of the linger ends the
                # wait) and for no longer than the linger. A lone write is synced at once.
                stopping = self._gather(
                    batch, self._clock() + self.linger_s, self.linger_s / LINGER_GAPS
                )
            error = self._write(batch)
            self._report(functools.partial(self._finish, [token for token, _ in batch], error))

    def _gather(
        self, batch: list[tuple[int, dict[int, tuple[bytes, int]]]], until: float, gap: float
    ) -> bool:
        """Add to `batch` what is queued, and what comes before `until` (a time of the
        clock) with no pause longer than `gap`; True if close() was asked for meanwhile."""
        while True:
            remaining = min(until - self._clock(), gap)
            try:
                if remaining > 0:
                    item = self._queue.get(timeout=remaining)
                else:
                    item = self._queue.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                return True
            batch.append(item)

    def _finish(self, tokens: list[int], error: ErrorCode) -> None:
        self.pending -= len(tokens)
        self._done(tokens, error)

    def _write(self, batch: list[tuple[int, dict[int, tuple[bytes, int]]]]) -> ErrorCode:
        # One write per partition for the whole batch: fewer system calls, and fewer
        # partly written pages for the kernel to zero and fill.
        writes: dict[int, tuple[list[bytes], int]] = {}
        for _, frames in batch:
            for partition, (data, count) in frames.items():
                parts, records = writes.get(partition) or ([], 0)
                parts.append(data)
                writes[partition] = (parts, records + count)
        try:
            started = time.perf_counter_ns()
            for partition, (parts, records) in writes.items():
                self.logs[partition].append(
                    parts[0] if len(parts) == 1 else b"".join(parts), records
                )
            written = time.perf_counter_ns()
            self.append_timings.observe_ns(written - started)
            if self.policy != "never":
                for partition in writes:
                    self.logs[partition].sync()
                self.fsync_timings.observe_ns(time.perf_counter_ns() - written)
        except OSError as exc:
            self._failures += len(batch)
            now = time.monotonic()
            if now - self._last_error_log >= ERROR_LOG_INTERVAL_S:
                log.error(
                    "cannot write the offsets log: %s; %d writes refused since the last report",
                    exc,
                    self._failures,
                )
                self._last_error_log = now
                self._failures = 0
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE
