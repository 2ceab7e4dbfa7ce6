"""The appender's fsync policies: what is synced when, and which writes share a sync.

Real partition logs in a temporary directory; PartitionLog.sync is wrapped to count the
syncs (and, for the first, to take a while, so that writes queue up behind it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fastcoord.core.records import OffsetCommitKey, OffsetCommitValue, Record
from fastcoord.protocol.errors import ErrorCode
from fastcoord.storage import segment
from fastcoord.storage.appender import Appender, Policy
from fastcoord.storage.log import PartitionLog, directory


def frames(n: int) -> dict[int, tuple[bytes, int]]:
    record = Record(OffsetCommitKey("g", "t", n), OffsetCommitValue(n, -1, "", 1))
    return {0: (segment.encode(record), 1)}


class Run:
    """An appender over one partition log, its reports, and its syncs."""

    def __init__(self, tmp_path: Path, policy: Policy, linger_ms: int, slow_first_sync_s: float):
        self.reports: list[list[int]] = []
        self.synced: list[float] = []
        self.done = threading.Condition()
        self.log = PartitionLog(directory(tmp_path, 0), 1 << 20)
        sync = self.log.sync

        def counting_sync() -> None:
            if not self.synced:
                time.sleep(slow_first_sync_s)
            sync()
            self.synced.append(time.monotonic())

        self.log.sync = counting_sync  # type: ignore[method-assign]
        self.appender = Appender({0: self.log}, policy, linger_ms, self._report, self._done)

    def _report(self, fn: Callable[[], None]) -> None:
        fn()  # on the appender's thread: enough here, there is no event loop

    def _done(self, tokens: list[int], error: ErrorCode) -> None:
        assert error == ErrorCode.NONE
        with self.done:
            self.reports.append(tokens)
            self.done.notify_all()

    def wait_for(self, tokens: int, timeout: float) -> None:
        with self.done:
            assert self.done.wait_for(lambda: sum(map(len, self.reports)) >= tokens, timeout)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def start(policy: Policy, linger_ms: int, slow_first_sync_s: float = 0.0) -> Run:
        r = Run(tmp_path / str(len(runs)), policy, linger_ms, slow_first_sync_s)
        r.appender.start()
        runs.append(r)
        return r

    yield start
    for r in runs:
        r.appender.close()


def test_batch_syncs_a_lone_write_at_once(run: Callable[..., Run]) -> None:
    """A client committing one request at a time: each write is alone in the queue, and is
    synced without waiting for the linger (an hour here)."""
    r = run("batch", 3_600_000)
    for token in range(1, 4):
        r.appender.submit(token, frames(token))
        r.wait_for(token, timeout=30)
    assert r.reports == [[1], [2], [3]] and len(r.synced) == 3


def test_batch_writes_queued_together_share_a_sync_while_more_keep_coming(
    run: Callable[..., Run],
) -> None:
    r = run("batch", 5_000, slow_first_sync_s=0.5)
    r.appender.submit(1, frames(1))
    time.sleep(0.1)  # the thread is in the first, slow sync: the next writes queue up
    for token in (2, 3):
        r.appender.submit(token, frames(token))
    time.sleep(0.6)  # the first sync is over; the thread took 2 and 3 together and waits
    r.appender.submit(4, frames(4))  # within a fifth of the linger (1 s): joins them
    r.wait_for(4, timeout=30)
    assert r.reports == [[1], [2, 3, 4]] and len(r.synced) == 2


def test_batch_waits_no_longer_than_a_pause_of_a_fifth_of_the_linger(
    run: Callable[..., Run],
) -> None:
    r = run("batch", 3_000, slow_first_sync_s=0.3)
    r.appender.submit(1, frames(1))
    time.sleep(0.1)
    for token in (2, 3):
        r.appender.submit(token, frames(token))
    # The thread takes 2 and 3 at 0.3 s; nothing comes for a fifth of the linger (0.6 s),
    # so they are synced then, long before the linger is over (3.3 s)...
    time.sleep(1.4)
    r.appender.submit(4, frames(4))  # ...and 4, at 1.5 s, goes alone.
    r.wait_for(4, timeout=30)
    assert r.reports == [[1], [2, 3], [4]] and len(r.synced) == 3


def test_always_never_waits_for_more(run: Callable[..., Run]) -> None:
    r = run("always", 2_000, slow_first_sync_s=0.3)
    r.appender.submit(1, frames(1))
    time.sleep(0.1)
    for token in (2, 3):
        r.appender.submit(token, frames(token))
    time.sleep(0.5)
    r.appender.submit(4, frames(4))
    r.wait_for(4, timeout=30)
    assert r.reports == [[1], [2, 3], [4]] and len(r.synced) == 3


def test_never_does_not_sync(run: Callable[..., Run]) -> None:
    r = run("never", 5)
    for token in (1, 2):
        r.appender.submit(token, frames(token))
    r.wait_for(2, timeout=30)
    assert r.synced == []
    assert len(segment.scan(next(r.log.path.glob("*.log")).read_bytes()).records) == 2
