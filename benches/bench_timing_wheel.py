"""Timing wheel speed, compiled against the pure-Python twin in the same run.

The wheel drives every delayed operation of the coordinator: each heartbeat re-arms its
member's session timer, so schedule and cancel are the hot path, with a million timers
armed. Aims (_ext/timing_wheel.pyx): one schedule+cancel pair at or under 150 ns with
1,000,000 timers armed; 1,000,000 timers expired by one advance well under a second.

The armed wheels are built once at import, and TimingWheelArmed has no `setup`: asv_runner
times every call on its own when a class has setup hooks (asv#966), which would bury
sub-microsecond operations under the timer's own cost. TimingWheelExpire consumes its wheel,
so it has a `setup` that arms a fresh one before every (long) call.
"""

from __future__ import annotations

import random
from types import ModuleType
from typing import Any

from fastcoord._ext import timing_wheel as compiled  # type: ignore[attr-defined]
from fastcoord.core import timing_wheel as twin

from .common import SEED, scaled

IMPLS: dict[str, ModuleType] = {"compiled": compiled, "twin": twin}

START_MS = 1_763_700_000_000  # an epoch-milliseconds clock, as the server's
ARMED = scaled(1_000_000)
SESSION_TIMEOUT_MS = 45_000
PAIRS = 1_000


def session_deadlines(n: int, spread_ms: int) -> list[int]:
    """n deadlines spread uniformly over (START_MS, START_MS + spread_ms]."""
    rng = random.Random(SEED)
    return [START_MS + rng.randrange(1, spread_ms + 1) for _ in range(n)]


def armed_wheel(impl: str, deadlines: list[int]) -> Any:
    wheel = IMPLS[impl].TimingWheel(START_MS)
    schedule = wheel.schedule
    for key, deadline in enumerate(deadlines):
        schedule(key, deadline)
    return wheel


# One wheel per implementation with ARMED session timers over one session timeout.
ARMED_DEADLINES = session_deadlines(ARMED, SESSION_TIMEOUT_MS)
ARMED_WHEELS = {impl: armed_wheel(impl, ARMED_DEADLINES) for impl in IMPLS}
# Keys that are not armed: each pair arms one for a session timeout, then cancels it.
PAIR_KEYS = list(range(ARMED, ARMED + PAIRS))
PAIR_DEADLINE = START_MS + 30_000

# Timers expired by one advance: spread over a few seconds of deadlines.
EXPIRE_SPREAD_MS = 5_000
EXPIRE_DEADLINES = session_deadlines(ARMED, EXPIRE_SPREAD_MS)


class TimingWheelArmed:
    """A wheel with 1,000,000 session timers armed (scaled in the smoke test)."""

    params = (["compiled", "twin"],)
    param_names = ["impl"]

    def time_schedule_cancel_1000_pairs(self, impl: str) -> None:
        """1,000 schedule+cancel pairs of keys not armed: the figure is per 1,000 pairs.

        One call does 1,000 pairs so that asv's per-call overhead does not count; divide by
        1,000 for one pair (the Python loop's own cost, ~15 ns a pair, is included).
        """
        wheel = ARMED_WHEELS[impl]
        schedule, cancel, deadline = wheel.schedule, wheel.cancel, PAIR_DEADLINE
        for key in PAIR_KEYS:
            schedule(key, deadline)
            cancel(key)

    def time_next_deadline(self, impl: str) -> None:
        ARMED_WHEELS[impl].next_deadline()


class TimingWheelExpire:
    """One advance() that expires every one of 1,000,000 timers spread over 5 seconds."""

    params = (["compiled", "twin"],)
    param_names = ["impl"]
    number = 1  # the call consumes the wheel: a fresh one for each timed call
    repeat = (2, 5, 60.0)
    warmup_time = 0.0
    timeout = 600.0

    def setup(self, impl: str) -> None:
        self.wheel = armed_wheel(impl, EXPIRE_DEADLINES)

    def time_advance_expiring_all(self, impl: str) -> None:
        self.wheel.advance(START_MS + EXPIRE_SPREAD_MS)
