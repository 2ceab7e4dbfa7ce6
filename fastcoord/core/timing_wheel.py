"""Hierarchical timing wheel, keyed: the pure-Python twin of _ext/timing_wheel.pyx.

Drives every delayed operation of the coordinator (session expiry, delayed joins, sync and
rebalance timeouts). Same interface and behaviour as the compiled module; tests check both
against a reference model and against each other. This file documents the algorithm.

It follows Kafka's kafka.utils.timer.TimingWheel and SystemTimer (now
org.apache.kafka.server.util.timer), keyed as the new group coordinator's CoordinatorTimer
(scheduling a key that is armed replaces its timer):

* A wheel has `wheel_size` buckets of `tick` ms each and spans tick * wheel_size ms from
  its clock. The first wheel ticks every tick_ms; when a deadline is beyond a wheel's span,
  it goes to an overflow wheel whose tick is the span of the wheel below, created on demand.
  With the defaults (1 ms, 20 buckets): spans of 20 ms, 400 ms, 8 s, 160 s, 53 min, ...
* A bucket holds the timers whose deadlines fall in one tick of its wheel, and has one
  expiration: the start of that tick (Kafka's), or in the first wheel the earliest deadline
  put into it (the same thing for tick 1 ms, and exact for larger ticks).
* A priority queue of bucket expirations (Kafka's DelayQueue) says which buckets are due.
  advance(now) takes every due bucket off it and flushes it: each timer either expires
  (deadline <= now) or goes back in, landing in a lower wheel (Kafka's
  bucket.flush(addTimerTaskEntry)). Only the timers that expire are sorted, by (deadline,
  schedule order).

Example (tick 1 ms, 20 buckets, clock at 0): a timer at 45,000 goes to the 8 s wheel,
bucket 45000 // 8000 % 20 = 5, expiration 40,000. Advancing to 40,000 flushes that bucket;
the timer moves down to the 400 ms wheel, bucket 112 % 20 = 12, expiration 44,800; at
44,800 to the 20 ms wheel, bucket 2250 % 20 = 10, expiration 45,000; at 45,000 it expires.
next_deadline() says 40,000, then 44,800, then 45,000.

Where it differs from Kafka (visible only through the interface's guarantees):

* advance(now) expires exactly the timers with deadline <= now and returns their keys;
  Kafka runs a timer anywhere in the current tick, in bucket order.
* Advancing moves every wheel's clock to `now` at once; a timer leaving a due overflow
  bucket goes straight to its bucket at `now`, or expires.
* Times are offsets from start_ms, kept below 2**64 (the compiled module's uint64): a
  wheel whose span would reach 2**64 is the top one and holds every deadline.
* A timer whose deadline is at or before the wheel's time waits in a due list and fires at
  the next advance(), whatever its argument.
* A bucket emptied by cancel stays queued until next_deadline() drops it; a first-wheel
  bucket whose expiration is lowered is queued again (the stale entry is skipped).
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Hashable

__all__ = ["TimingWheel"]

MAX_WHEEL_SIZE = 65536
_OFFSET_LIMIT = 1 << 64  # offsets from start_ms are below this (uint64 in the compiled code)
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _int64(value: int, name: str) -> int:
    number = operator.index(value)
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise OverflowError(f"{name} is out of the int64 range: {number}")
    return number


class _Timer:
    """One armed timer: its key, deadline, schedule order and the bucket it sits in."""

    __slots__ = ("bucket", "deadline", "key", "seq")

    def __init__(self, key: Hashable, deadline: int, seq: int) -> None:
        self.key = key
        self.deadline = deadline
        self.seq = seq
        self.bucket: _Bucket | None = None


class _Bucket:
    """Kafka's TimerTaskList: timers (a dict, for O(1) removal) with one expiration."""

    __slots__ = ("expiration", "queued", "timers")

    def __init__(self) -> None:
        self.timers: dict[Hashable, _Timer] = {}
        self.expiration = 0  # offset from start_ms; meaningful while queued
        self.queued = False


class _Wheel:
    """One level: `size` buckets of `tick` ms; its clock is the wheel's time floored to tick."""

    __slots__ = ("buckets", "clock", "max_offset", "tick")

    def __init__(self, tick: int, size: int, uclock: int) -> None:
        self.tick = tick
        # The wheel holds an offset u iff u - clock <= max_offset. The top wheel (the first
        # whose span reaches 2**64) holds every offset.
        top = tick * size >= _OFFSET_LIMIT
        self.max_offset = _OFFSET_LIMIT - 1 if top else tick * size - 1
        self.clock = uclock - uclock % tick
        self.buckets = [_Bucket() for _ in range(size)]


def _order(timer: _Timer) -> tuple[int, int]:
    return (timer.deadline, timer.seq)


class TimingWheel:
    """Keyed hierarchical timing wheel (Kafka's TimingWheel + SystemTimer), times in ms.

    schedule(key, deadline_ms) arms or re-arms `key`; cancel(key) disarms it; advance(now)
    returns the keys of every timer with deadline <= now, by (deadline, schedule order);
    next_deadline() says when to call advance() next.
    """

    def __init__(self, start_ms: int, tick_ms: int = 1, wheel_size: int = 20) -> None:
        start = _int64(start_ms, "start_ms")
        tick = _int64(tick_ms, "tick_ms")
        size = _int64(wheel_size, "wheel_size")
        if tick < 1:
            raise ValueError(f"tick_ms must be at least 1, not {tick}")
        if size < 2 or size > MAX_WHEEL_SIZE:
            raise ValueError(f"wheel_size must be in [2, {MAX_WHEEL_SIZE}], not {size}")
        self._start = start
        self._clock = start  # every advance's now_ms, never going back; ms, not ticks
        self._size = size
        self._wheels = [_Wheel(tick, size, 0)]
        self._due = _Bucket()  # timers with deadline <= clock: fire at the next advance()
        self._due_min = 0  # not above the earliest deadline in _due, when _due has timers
        self._queue: list[tuple[int, int, int]] = []  # (expiration, wheel, bucket index)
        self._timers: dict[Hashable, _Timer] = {}
        self._seq = 0

    # ------------------------------------------------------------------ interface

    def schedule(self, key: Hashable, deadline_ms: int) -> None:
        """Arm the timer `key` to fire at deadline_ms; an armed key is re-armed (replaced)."""
        deadline = _int64(deadline_ms, "deadline_ms")
        timer = self._timers.get(key)
        if timer is None:
            timer = self._timers[key] = _Timer(key, deadline, self._seq)
        else:
            self._unlink(timer)
            timer.deadline = deadline
            timer.seq = self._seq
        self._seq += 1
        self._arm(timer)

    def cancel(self, key: Hashable) -> bool:
        """Disarm; True if it was armed. O(1)."""
        timer = self._timers.pop(key, None)
        if timer is None:
            return False
        self._unlink(timer)
        return True

    def advance(self, now_ms: int) -> list[Hashable]:
        """Move time to now_ms; return the keys of every armed timer with deadline <= now_ms.

        They are disarmed and ordered by (deadline, order of (re)scheduling). A now_ms below
        the current time changes nothing: what is due at the current time is returned.
        """
        now = _int64(now_ms, "now_ms")
        if now > self._clock:
            self._clock = now
            uclock = now - self._start
            for wheel in self._wheels:
                wheel.clock = uclock - uclock % wheel.tick
        uclock = self._clock - self._start

        # 1. Take every due bucket off the queue (DelayQueue.poll), and the due list.
        flushed: list[dict[Hashable, _Timer]] = []
        if self._due.timers:
            flushed.append(self._due.timers)
            self._due.timers = {}
        queue = self._queue
        while queue and queue[0][0] <= uclock:
            expiration, level, index = heapq.heappop(queue)
            bucket = self._wheels[level].buckets[index]
            if not bucket.queued or bucket.expiration != expiration:
                continue  # a stale entry: the bucket was queued again, earlier
            bucket.queued = False
            if bucket.timers:
                flushed.append(bucket.timers)
                bucket.timers = {}

        # 2. Flush them (bucket.flush(addTimerTaskEntry)): every bucket was emptied above,
        # so no timer put back lands in a bucket still to be flushed.
        expired: list[_Timer] = []
        for timers in flushed:
            for timer in timers.values():
                timer.bucket = None
                if timer.deadline <= self._clock:
                    expired.append(timer)
                else:
                    self._arm(timer)
        expired.sort(key=_order)
        for timer in expired:
            del self._timers[timer.key]
        return [timer.key for timer in expired]

    def next_deadline(self) -> int | None:
        """A time never later than the earliest armed deadline at which advance() progresses.

        advance(next_deadline()) expires timers or moves timers down from an overflow wheel;
        None when no timer is armed. (With tick_ms > 1, a cancel can leave a first-wheel
        bucket's expiration early: advance() to it then only recomputes it.)
        """
        if self._due.timers:
            return self._due_min
        queue = self._queue
        while queue:
            expiration, level, index = queue[0]
            bucket = self._wheels[level].buckets[index]
            if bucket.queued and bucket.expiration == expiration:
                if bucket.timers:
                    return self._start + expiration
                bucket.queued = False  # emptied by cancel: drop it now
            heapq.heappop(queue)
        return None

    def deadline(self, key: Hashable) -> int | None:
        """The deadline of the armed timer `key`, or None."""
        timer = self._timers.get(key)
        return None if timer is None else timer.deadline

    def __len__(self) -> int:
        return len(self._timers)

    def __contains__(self, key: object) -> bool:
        return key in self._timers

    @property
    def current_ms(self) -> int:
        """The wheel's time: start_ms, then the last advance, floored to a tick."""
        return self._start + self._wheels[0].clock

    # ------------------------------------------------------------------ wheels and buckets

    def _arm(self, timer: _Timer) -> None:
        """Put an unlinked timer into the due list or its wheel's bucket (addTimerTaskEntry)."""
        deadline = timer.deadline
        if deadline <= self._clock:
            if not self._due.timers or deadline < self._due_min:
                self._due_min = deadline
            self._link(timer, self._due)
            return
        offset = deadline - self._start
        level = 0
        while True:
            if level == len(self._wheels):
                below = self._wheels[-1]
                self._wheels.append(
                    _Wheel(below.tick * self._size, self._size, self._clock - self._start)
                )
            wheel = self._wheels[level]
            if offset - wheel.clock <= wheel.max_offset:
                break
            level += 1
        virtual = offset // wheel.tick
        index = virtual % self._size
        bucket = wheel.buckets[index]
        self._link(timer, bucket)
        expiration = offset if level == 0 else virtual * wheel.tick
        if not bucket.queued or expiration < bucket.expiration:
            bucket.expiration = expiration
            bucket.queued = True
            heapq.heappush(self._queue, (expiration, level, index))

    @staticmethod
    def _link(timer: _Timer, bucket: _Bucket) -> None:
        bucket.timers[timer.key] = timer
        timer.bucket = bucket

    @staticmethod
    def _unlink(timer: _Timer) -> None:
        if timer.bucket is not None:
            del timer.bucket.timers[timer.key]
            timer.bucket = None

    # ------------------------------------------------------------------ checks

    def _check(self) -> None:
        """Raise AssertionError unless every invariant holds (for tests)."""
        uclock = self._clock - self._start
        armed = 0
        for timer in self._due.timers.values():
            if timer.bucket is not self._due or timer.deadline > self._clock:
                raise AssertionError("due list")
            if timer.deadline < self._due_min:
                raise AssertionError("due minimum")
            armed += 1
        queued = {(e, level, index) for e, level, index in self._queue}
        for level, wheel in enumerate(self._wheels):
            if wheel.clock != uclock - uclock % wheel.tick:
                raise AssertionError("wheel clock")
            for index, bucket in enumerate(wheel.buckets):
                if bucket.queued and (bucket.expiration, level, index) not in queued:
                    raise AssertionError("bucket not queued")
                if bucket.queued and bucket.expiration <= uclock:
                    raise AssertionError("due bucket left in the queue")
                for timer in bucket.timers.values():
                    offset = timer.deadline - self._start
                    if timer.bucket is not bucket or timer.deadline <= self._clock:
                        raise AssertionError("timer in the wrong list")
                    if (offset // wheel.tick) % self._size != index:
                        raise AssertionError("bucket index")
                    if not bucket.queued or bucket.expiration > offset:
                        raise AssertionError("bucket expiration")
                    if level > 0 and bucket.expiration != offset - offset % wheel.tick:
                        raise AssertionError("overflow bucket expiration")
                    armed += 1
        if armed != len(self._timers):
            raise AssertionError("timer count")
        for key, timer in self._timers.items():
            if timer.key is not key and timer.key != key:
                raise AssertionError("timer map")
