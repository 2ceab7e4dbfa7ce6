"""The appender's fsync policies: what is synced when, and which writes share a sync.

Real partition logs in a temporary directory; PartitionLog.sync is wrapped to count the
syncs. Which writes share a sync depends on when they arrive relative to the syncs and, under
batch, to the moments the event loop goes idle, so the tests that decide it run the
appender's thread in simulated time (a Timeline): each write arrives, and the loop goes
idle, at the times the test gives, a sync takes the time the test gives it, and a wait for
the next write passes time rather than taking it. The batches then follow from the
appender's rules alone, however slow or busy the machine. (The linger, a bound the store's
watcher keeps on the event loop, is tested with the store.)
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from fastcoord.core.records import OffsetCommitKey, OffsetCommitValue, Record
from fastcoord.protocol.errors import ErrorCode
from fastcoord.storage import segment
from fastcoord.storage.appender import Appender, Item, Policy
from fastcoord.storage.log import PartitionLog, directory

WAIT_S = 30.0  # bounds a real wait for the thread, which is over in milliseconds


def frames(n: int) -> dict[int, tuple[bytes, int]]:
    record = Record(OffsetCommitKey("g", "t", n), OffsetCommitValue(n, -1, "", 1))
    return {0: (segment.encode(record), 1)}


class Timeline:
    """Simulated time for an appender's thread: its clock, and its inbox.

    Actions (a write's submission) are scheduled at simulated times. A wait of the thread
    for its next item runs the actions due meanwhile, in order, moving the clock to each;
    if none brings an item, the clock moves to the end of the wait and the wait is over.
    Only once every action has run does a blocking wait block for real, for close().
    """

    def __init__(self) -> None:
        self.now = 0.0
        self._actions: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()  # actions at the same time run in scheduling order
        self._ready: deque[Item] = deque()
        self._lock = threading.Condition(threading.RLock())  # an action's put re-enters
        self.spent = threading.Event()  # every action has run and the thread waits for more

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._actions, (when, next(self._order), action))

    def clock(self) -> float:
        return self.now

    def put(self, item: Item) -> None:
        with self._lock:
            self._ready.append(item)
            self._lock.notify_all()

    def get(self, block: bool = True, timeout: float | None = None) -> Item:
        if not block:
            return self.get_nowait()
        with self._lock:
            until = float("inf") if timeout is None else self.now + timeout
            self._run_until(self.now)
            while not self._ready and self._actions and self._actions[0][0] <= until:
                self._run_next()
            if self._ready:
                return self._ready.popleft()
            if timeout is not None:
                self.now = until
                raise queue.Empty
            self.spent.set()
            self._lock.wait_for(lambda: bool(self._ready))
            return self._ready.popleft()

    def get_nowait(self) -> Item:
        with self._lock:
            self._run_until(self.now)  # what arrived while the thread wrote or synced
            if not self._ready:
                raise queue.Empty
            return self._ready.popleft()

    def _run_until(self, until: float) -> None:
        while self._actions and self._actions[0][0] <= until:
            self._run_next()

    def _run_next(self) -> None:
        when, _, action = heapq.heappop(self._actions)
        self.now = max(self.now, when)
        action()


class Run:
    """An appender over one partition log, its reports, and its syncs: in real time, or
    in a Timeline's simulated time, where a sync takes the time that `sync_s` gives it
    (the first sync the first figure, and so on; the rest take none), and a write the time
    that `write_s` gives it."""

    def __init__(
        self,
        tmp_path: Path,
        policy: Policy,
        timeline: Timeline | None = None,
        sync_s: Sequence[float] = (),
        write_s: Sequence[float] = (),
    ) -> None:
        self.timeline = timeline
        self.started = False
        self.reports: list[tuple[float, list[int]]] = []  # (time, tokens)
        self.synced: list[float] = []
        self.refused: list[int] = []  # tokens reported with an error
        self.done = threading.Condition()
        self.log = PartitionLog(directory(tmp_path, 0), 1 << 20)
        sync = self.log.sync
        durations = deque(sync_s)

        def counting_sync() -> None:
            if timeline is not None and durations:
                timeline.now += durations.popleft()
            sync()
            self.synced.append(self.now())

        self.log.sync = counting_sync  # type: ignore[method-assign]
        append = self.log.append
        write_durations = deque(write_s)

        def timed_append(data: bytes, records: int) -> None:
            if timeline is not None and write_durations:
                timeline.now += write_durations.popleft()
            append(data, records)

        self.log.append = timed_append  # type: ignore[method-assign]
        self.appender = Appender({0: self.log}, policy, self._report, self._done, inbox=timeline)

    def start(self) -> None:
        self.appender.start()
        self.started = True

    def now(self) -> float:
        return time.monotonic() if self.timeline is None else self.timeline.now

    def submit_at(self, when: float, token: int) -> None:
        """In simulated time: `token`'s write is submitted at `when`."""
        assert self.timeline is not None
        self.timeline.at(when, lambda: self.appender.submit(token, frames(token)))

    def idle_at(self, when: float) -> None:
        """In simulated time: the event loop goes idle at `when`."""
        assert self.timeline is not None
        self.timeline.at(when, self.appender.idle)

    def _report(self, fn: Callable[[], None]) -> None:
        fn()  # on the appender's thread: enough here, there is no event loop

    def _done(self, tokens: list[int], error: ErrorCode) -> None:
        if error != ErrorCode.NONE:
            self.refused.extend(tokens)
            return
        with self.done:
            self.reports.append((self.now(), tokens))
            self.done.notify_all()

    def wait_for(self, tokens: int) -> None:
        with self.done:
            assert self.done.wait_for(lambda: len(self.tokens()) >= tokens, WAIT_S)

    def tokens(self) -> list[int]:
        return [token for _, tokens in self.reports for token in tokens]

    def batches(self) -> list[list[int]]:
        return [tokens for _, tokens in self.reports]

    def play(self) -> list[tuple[float, list[int]]]:
        """In simulated time: run the thread through every scheduled write; the reports,
        each at its simulated time (rounded off float sums)."""
        assert self.timeline is not None
        self.start()
        assert self.timeline.spent.wait(WAIT_S), "the appender's thread did not get through"
        assert self.appender.pending == 0
        return [(round(at, 9), tokens) for at, tokens in self.reports]


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Callable[..., Run]]:
    runs: list[Run] = []

    def start(
        policy: Policy,
        timeline: Timeline | None = None,
        sync_s: Sequence[float] = (),
        write_s: Sequence[float] = (),
    ) -> Run:
        r = Run(tmp_path / str(len(runs)), policy, timeline, sync_s, write_s)
        if timeline is None:
            r.start()  # else play() starts it, once the writes are scheduled
        runs.append(r)
        return r

    yield start
    for r in runs:
        if r.started:
            r.appender.close()


def test_batch_syncs_a_lone_write_at_once(run: Callable[..., Run]) -> None:
    """A client committing one request at a time, in real time: each write finds nothing
    under way and is synced at once, without waiting for the loop to go idle."""
    r = run("batch")
    for token in range(1, 4):
        r.appender.submit(token, frames(token))
        r.wait_for(token)
    assert r.batches() == [[1], [2], [3]] and len(r.synced) == 3


def test_batch_syncs_a_lone_write_at_once_in_simulated_time(run: Callable[..., Run]) -> None:
    r = run("batch", Timeline())
    for token, at in enumerate((0.0, 1.0, 2.5), start=1):
        r.submit_at(at, token)
    assert r.play() == [(0.0, [1]), (1.0, [2]), (2.5, [3])]
    assert r.synced == [0.0, 1.0, 2.5]


def test_batch_holds_what_comes_during_a_sync_until_the_loop_is_idle(
    run: Callable[..., Run],
) -> None:
    # 1 finds nothing under way and is synced at once (0.5 s). 2 and 3 come during that
    # sync and are held; the loop goes idle at 0.3 and hands them over: they share the
    # next sync, the moment the first is over. 5 comes while 4 is held and the loop is
    # still busy: it is held too, behind 4, until the loop goes idle at 0.9. An idle
    # moment with nothing held (0.4) changes nothing.
    r = run("batch", Timeline(), sync_s=[0.5])
    for token, at in ((1, 0.0), (2, 0.1), (3, 0.2), (4, 0.45), (5, 0.7)):
        r.submit_at(at, token)
    for at in (0.3, 0.4, 0.9):
        r.idle_at(at)
    assert r.play() == [(0.5, [1]), (0.5, [2, 3]), (0.9, [4, 5])]
    assert len(r.synced) == 3


def test_always_syncs_what_queued_during_a_sync_at_once(run: Callable[..., Run]) -> None:
    # Group commit: 2 and 3 queue while 1 is synced (0.5 s) and are synced together the
    # moment that sync is over; 4 comes during theirs and goes next. Nothing waits for the
    # loop or for more writes to come.
    r = run("always", Timeline(), sync_s=[0.5, 0.5])
    for token, at in ((1, 0.0), (2, 0.1), (3, 0.2), (4, 0.9), (5, 1.6)):
        r.submit_at(at, token)
    assert r.play() == [(0.5, [1]), (1.0, [2, 3]), (1.0, [4]), (1.6, [5])]
    assert len(r.synced) == 4


def test_a_failed_write_refuses_its_batch(
    run: Callable[..., Run], caplog: pytest.LogCaptureFixture
) -> None:
    # 1's write fails (a full disk), and 2's, held meanwhile and handed over when the loop
    # goes idle: both are refused, nothing is synced, and the failure is logged.
    r = run("batch", Timeline())

    def failing(data: bytes, records: int) -> None:
        raise OSError(28, "No space left on device")

    r.log.append = failing  # type: ignore[method-assign]
    r.submit_at(0.0, 1)
    r.submit_at(0.125, 2)
    r.idle_at(0.25)
    assert r.play() == []
    assert r.refused == [1, 2] and r.synced == []
    assert "cannot write the offsets log" in caplog.text


def test_never_does_not_sync(run: Callable[..., Run]) -> None:
    r = run("never")
    for token in (1, 2):
        r.appender.submit(token, frames(token))
    r.wait_for(2)
    assert r.synced == []
    assert len(segment.scan(next(r.log.path.glob("*.log")).read_bytes()).records) == 2
