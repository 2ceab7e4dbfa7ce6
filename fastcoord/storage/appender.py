"""Appends to the partition logs, off the event loop: one thread writes and syncs.

The server hands over each Result's records, already framed per coordinator partition,
with the Result's append token. The thread takes whatever is queued, writes it (one write
per partition), makes it durable under the fsync policy, and reports the tokens back to
the Trio thread (one report per sync), which then lets the core acknowledge
(Coordinator.complete_append). A slow disk therefore delays acknowledgements, never
heartbeats.

Policies (`fsync`):
- always: every write is synced before it is acknowledged, at once; what is queued while
  the thread writes and syncs is written and synced together as soon as that sync is over
  (group commit: nothing waits for more writes to come);
- batch (default): group commit, deferred while the event loop is busy. A write that
  finds nothing under way (no write or sync, nothing held) is handed to the thread and
  synced at once, so a lone commit waits for one write and one sync. What comes while a
  write and sync are under way is held on the event loop's side until the loop has
  nothing left to run (`idle()`, from the store's watcher), then handed over together and
  written and synced at once. A busy loop is still handling requests whose writes will
  share that sync; an idle one has nothing to add, and waiting longer would only keep its
  clients waiting. So 64 commits in flight on a connection are synced in a couple of
  groups a window rather than a few at a time as they arrive (group commit alone): a
  sync costs this machine tens of microseconds of CPU whatever it holds, and the thread
  wakes once per sync rather than once per write. The watcher also hands over what is
  held once the linger (group.coordinator.append.linger.ms) has passed, for a loop that
  stays busy;
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
Submission = tuple[int, dict[int, tuple[bytes, int]]]  # (token, {partition: (frames, count)})
Item = Submission | list[Submission] | None  # a submission, those held (batch), or close


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
        report: Callable[[Callable[[], None]], None],
        done: Done,
        *,
        inbox: Inbox | None = None,
    ) -> None:
        """`report(fn)` must run fn on the event loop's thread (TrioToken.run_sync_soon);
        `done(tokens, error)` is what it runs. `inbox` is the queue that batching goes by:
        a test gives its own, in which waiting passes simulated time, to decide which
        writes share a sync without racing the machine."""
        self.logs = logs
        self.policy = policy
        self._report = report
        self._done = done
        self._queue: Inbox = queue.SimpleQueue() if inbox is None else inbox
        self._thread = threading.Thread(target=self._run, name="fastcoord-appender", daemon=True)
        self._failures = 0
        self._last_error_log = 0.0
        self.pending = 0  # tokens submitted and not yet reported
        self._held: list[Submission] = []  # batch: submitted, for the next idle()
        # Each write of a batch, and each sync: read by the metrics endpoint.
        self.append_timings = Timings(DISK_BUCKETS_S)
        self.fsync_timings = Timings(DISK_BUCKETS_S)

    def start(self) -> None:
        self._thread.start()

    def submit(self, token: int, frames: dict[int, tuple[bytes, int]]) -> bool:
        """Write `frames` ({partition: (framed records, count)}); report `token` when done.
        True when held for the next idle() (batch, while a write or sync is under way or
        others are held); else handed to the thread at once."""
        under_way = self.pending - len(self._held)  # handed over, not yet reported
        self.pending += 1
        if self.policy == "batch" and (under_way or self._held):
            self._held.append((token, frames))
            return True
        self._queue.put((token, frames))
        return False

    def idle(self) -> None:
        """The event loop has nothing left to run, or the linger is over: hand what is
        held to the thread, to be written and synced together (batch)."""
        if self._held:
            held, self._held = self._held, []
            self._queue.put(held)

    def close(self) -> None:
        """Finish what is queued and held, then stop the thread and close the logs."""
        self.idle()
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
            batch = first if isinstance(first, list) else [first]
            stopping = self._take_queued(batch)
            written: set[int] = set()
            error = self._write(batch, written)
            if error == ErrorCode.NONE and self.policy != "never":
                error = self._sync(written, len(batch))
            tokens = [token for token, _ in batch]
            self._report(functools.partial(self._finish, tokens, error))

    def _take_queued(self, batch: list[Submission]) -> bool:
        """Add to `batch` what is queued now; True if close() was asked for meanwhile."""
        get = self._queue.get_nowait
        while True:
            try:
                item = get()
            except queue.Empty:
                return False
            if item is None:
                return True
            if isinstance(item, list):
                batch += item
            else:
                batch.append(item)

    def _finish(self, tokens: list[int], error: ErrorCode) -> None:
        self.pending -= len(tokens)
        self._done(tokens, error)

    def _write(self, batch: list[Submission], written: set[int]) -> ErrorCode:
        """Write `batch`, one write per partition (fewer system calls, and fewer partly
        written pages for the kernel to zero and fill); add the partitions to `written`."""
        if len(batch) == 1:
            writes = {p: ([data], count) for p, (data, count) in batch[0][1].items()}
        else:
            writes = {}
            for _, frames in batch:
                for partition, (data, count) in frames.items():
                    parts, records = writes.get(partition) or ([], 0)
                    parts.append(data)
                    writes[partition] = (parts, records + count)
        try:
            started = time.perf_counter_ns()
            for partition, (parts, records) in writes.items():
                partition_log = self.logs.get(partition)
                if partition_log is None:
                    continue  # let go since it was submitted (store.release): not ours now
                partition_log.append(parts[0] if len(parts) == 1 else b"".join(parts), records)
                written.add(partition)
            self.append_timings.observe_ns(time.perf_counter_ns() - started)
        except OSError as exc:
            return self._failed(exc, len(batch))
        return ErrorCode.NONE

    def _sync(self, written: set[int], writes: int) -> ErrorCode:
        try:
            started = time.perf_counter_ns()
            for partition in written:
                partition_log = self.logs.get(partition)
                if partition_log is not None:
                    partition_log.sync()
            self.fsync_timings.observe_ns(time.perf_counter_ns() - started)
        except OSError as exc:
            return self._failed(exc, writes)
        return ErrorCode.NONE

    def _failed(self, exc: OSError, writes: int) -> ErrorCode:
        self._failures += writes
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
