"""The keyed hierarchical timing wheel: compiled module and pure-Python twin.

Scenario tests run on both; a rule-based property test checks each against a reference
model (a dict key -> (deadline, seq)); a differential test checks that the two give the same
answers to the same operations. Virtual time only. Runs whatever FASTCOORD_NO_EXTENSIONS
says: both modules are imported directly.
"""

from __future__ import annotations

import gc
import random
import weakref
from collections.abc import Hashable
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from fastcoord._ext import timing_wheel as compiled  # type: ignore[attr-defined]
from fastcoord.core import timing_wheel as twin

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MINUTE = 60_000
DAY = 24 * 60 * MINUTE

IMPLS = [pytest.param(compiled, id="compiled"), pytest.param(twin, id="twin")]


def clamp(t: int) -> int:
    return max(INT64_MIN, min(INT64_MAX, t))


def drain(wheel: Any, limit: int = 10_000) -> list[tuple[int, list[Hashable]]]:
    """Advance to next_deadline() until nothing is armed: [(time, keys fired)]."""
    fired: list[tuple[int, list[Hashable]]] = []
    for _ in range(limit):
        t = wheel.next_deadline()
        if t is None:
            return fired
        keys = wheel.advance(t)
        if keys:
            fired.append((t, keys))
    raise AssertionError("next_deadline() did not make progress")


# ---------------------------------------------------------------------- scenarios


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    "delay", [1, 2, 19, 20, 21, 399, 400, 401, 7_999, 8_000, 8_001, 159_999, 160_001, 3_200_001]
)
def test_fires_at_its_deadline_and_not_a_millisecond_before(impl: Any, delay: int) -> None:
    start = 1_700_000_000_123
    wheel = impl.TimingWheel(start)
    wheel.schedule("k", start + delay)
    assert wheel.advance(start + delay - 1) == []
    assert "k" in wheel
    assert wheel.advance(start + delay) == ["k"]
    assert "k" not in wheel and len(wheel) == 0
    assert wheel.next_deadline() is None


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("delay", [1, 20, 401, 8_000, 160_001, 30 * MINUTE, 3 * DAY])
def test_following_next_deadline_fires_exactly_at_the_deadline(impl: Any, delay: int) -> None:
    wheel = impl.TimingWheel(5)
    wheel.schedule(7, 5 + delay)
    steps = []
    while (t := wheel.next_deadline()) is not None:
        assert t <= 5 + delay
        steps.append((t, wheel.advance(t)))
    assert steps[-1] == (5 + delay, [7])
    assert all(keys == [] for _, keys in steps[:-1])
    assert len(steps) <= 8  # one step per overflow wheel on the way down, at most


@pytest.mark.parametrize("impl", IMPLS)
def test_a_timer_moves_down_the_wheels(impl: Any) -> None:
    # The example of the modules' comments: 45 s away starts in the 8 s wheel.
    wheel = impl.TimingWheel(0)
    wheel.schedule("session", 45_000)
    wakeups = []
    while (t := wheel.next_deadline()) is not None:
        wakeups.append((t, wheel.advance(t)))
    assert wakeups == [(40_000, []), (44_800, []), (45_000, ["session"])]


@pytest.mark.parametrize("impl", IMPLS)
def test_reschedule_replaces_the_timer(impl: Any) -> None:
    wheel = impl.TimingWheel(0)
    wheel.schedule("a", 10)
    wheel.schedule("a", 100)  # later
    assert len(wheel) == 1 and wheel.deadline("a") == 100
    assert wheel.advance(99) == []
    assert wheel.advance(100) == ["a"]
    wheel.schedule("b", 9_000)
    wheel.schedule("b", 150)  # earlier, into a lower wheel
    assert wheel.next_deadline() == 140  # its bucket in the 20 ms wheel: [140, 160)
    assert drain(wheel) == [(150, ["b"])]


@pytest.mark.parametrize("impl", IMPLS)
def test_cancel(impl: Any) -> None:
    wheel = impl.TimingWheel(0)
    wheel.schedule(("g", 1), 50)
    wheel.schedule(("g", 2), 50)
    assert wheel.cancel(("g", 1)) is True
    assert wheel.cancel(("g", 1)) is False
    assert wheel.cancel("never armed") is False
    assert ("g", 1) not in wheel and wheel.deadline(("g", 1)) is None
    assert wheel.advance(100) == [("g", 2)]
    wheel.schedule("x", 30_000)
    wheel.cancel("x")
    assert wheel.next_deadline() is None  # its emptied bucket is not a deadline


@pytest.mark.parametrize("impl", IMPLS)
def test_deadlines_in_the_past_fire_at_the_next_advance(impl: Any) -> None:
    wheel = impl.TimingWheel(1_000)
    wheel.schedule("now", 1_000)
    wheel.schedule("past", 400)
    wheel.schedule("long ago", INT64_MIN)
    assert wheel.next_deadline() == INT64_MIN
    assert wheel.advance(1_000) == ["long ago", "past", "now"]
    wheel.schedule("late", 900)
    assert wheel.next_deadline() == 900
    assert wheel.advance(0) == ["late"]  # an advance into the past still fires what is due
    assert wheel.current_ms == 1_000


@pytest.mark.parametrize("impl", IMPLS)
def test_timers_minutes_and_days_away(impl: Any) -> None:
    start = 1_700_000_000_000
    wheel = impl.TimingWheel(start)
    wheel.schedule("30min", start + 30 * MINUTE)
    wheel.schedule("3days", start + 3 * DAY)
    wheel.schedule("year", start + 365 * DAY)
    assert wheel.advance(start + 30 * MINUTE - 1) == []
    assert wheel.advance(start + 30 * MINUTE) == ["30min"]
    assert wheel.advance(start + 3 * DAY - 1) == []
    assert wheel.next_deadline() <= start + 3 * DAY
    assert wheel.advance(start + 3 * DAY) == ["3days"]
    assert drain(wheel) == [(start + 365 * DAY, ["year"])]


@pytest.mark.parametrize("impl", IMPLS)
def test_many_timers_come_out_by_deadline_then_schedule_order(impl: Any) -> None:
    rng = random.Random(7)
    wheel = impl.TimingWheel(0)
    keys = list(range(300))
    rng.shuffle(keys)
    expected = {}
    for i, key in enumerate(keys):
        deadline = rng.choice([40, 40, 40, 41, 39, 500])
        wheel.schedule(key, deadline)
        expected[key] = (deadline, i)
    for i, key in enumerate(keys[:50]):  # rescheduled: last in its deadline's group
        wheel.schedule(key, 40)
        expected[key] = (40, 300 + i)
    order = sorted(expected, key=expected.__getitem__)
    assert wheel.advance(41) == [k for k in order if expected[k][0] <= 41]
    assert wheel.advance(10_000) == [k for k in order if expected[k][0] > 41]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("spread", [10, 5_000, 2**40, 2**64])
def test_many_expired_timers_are_sorted_whatever_their_spread(impl: Any, spread: int) -> None:
    # Deadlines over a few ms up to the whole int64 range, with many alike: the compiled
    # module sorts them by different means (insertion, packed keys, items) by their spread.
    rng = random.Random(spread)
    low = clamp(-spread // 2)
    choices = [clamp(low + rng.randrange(spread)) for _ in range(40)]
    wheel = impl.TimingWheel(0)
    expected = {}
    for seq in range(2_000):
        key = rng.randrange(1_500)
        deadline = rng.choice(choices)
        wheel.schedule(key, deadline)
        expected[key] = (deadline, seq)
    now = max(choices)
    assert wheel.advance(now) == sorted(expected, key=expected.__getitem__)
    assert len(wheel) == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_time_never_goes_back(impl: Any) -> None:
    wheel = impl.TimingWheel(0)
    wheel.schedule("a", 120)
    assert wheel.advance(100) == []
    assert wheel.advance(50) == []
    assert wheel.current_ms == 100
    wheel.schedule("b", 75)  # already due at the wheel's time
    assert wheel.advance(60) == ["b"]
    assert wheel.current_ms == 100
    assert wheel.advance(119) == []
    assert wheel.advance(120) == ["a"]


@pytest.mark.parametrize("impl", IMPLS)
def test_next_deadline(impl: Any) -> None:
    wheel = impl.TimingWheel(0)
    assert wheel.next_deadline() is None
    for key, deadline in [("a", 7_777), ("b", 123_456), ("c", 15)]:
        wheel.schedule(key, deadline)
    assert wheel.next_deadline() == 15
    wheel.cancel("c")
    t = wheel.next_deadline()
    assert t is not None and t <= 7_777
    assert drain(wheel) == [(7_777, ["a"]), (123_456, ["b"])]
    assert wheel.next_deadline() is None


@pytest.mark.parametrize("impl", IMPLS)
def test_larger_ticks_fire_at_the_deadline_not_the_tick(impl: Any) -> None:
    wheel = impl.TimingWheel(3, tick_ms=10, wheel_size=4)
    wheel.schedule("a", 17)
    wheel.schedule("b", 25)
    wheel.schedule("c", 1_000)
    assert wheel.advance(16) == []
    assert wheel.current_ms == 13  # ticks count from start_ms
    assert wheel.advance(17) == ["a"]
    wheel.schedule("d", 19)  # in the current tick, after the wheel's time
    assert wheel.advance(18) == []
    assert drain(wheel) == [(19, ["d"]), (25, ["b"]), (1_000, ["c"])]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("start", [INT64_MIN, -1, 0, INT64_MAX - 10])
def test_the_whole_int64_range(impl: Any, start: int) -> None:
    wheel = impl.TimingWheel(start)
    wheel.schedule("max", INT64_MAX)
    wheel.schedule("soon", clamp(start + 5))
    wheel.schedule("min", INT64_MIN)
    assert wheel.advance(start) == ["min"] + (["soon"] if start + 5 > INT64_MAX else [])
    assert wheel.advance(INT64_MAX - 1) == ([] if start + 5 > INT64_MAX else ["soon"])
    assert wheel.next_deadline() is not None
    assert wheel.advance(INT64_MAX) == ["max"]


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_arguments(impl: Any) -> None:
    with pytest.raises(ValueError):
        impl.TimingWheel(0, tick_ms=0)
    with pytest.raises(ValueError):
        impl.TimingWheel(0, wheel_size=1)
    with pytest.raises(TypeError):
        impl.TimingWheel(0.5)
    with pytest.raises(OverflowError):
        impl.TimingWheel(2**63)
    wheel = impl.TimingWheel(0)
    with pytest.raises(TypeError):
        wheel.schedule("k", 1.5)
    with pytest.raises(OverflowError):
        wheel.schedule("k", -(2**63) - 1)
    with pytest.raises(TypeError):
        wheel.schedule(["unhashable"], 5)
    with pytest.raises(TypeError):
        wheel.advance("5")
    assert len(wheel) == 0 and wheel.next_deadline() is None
    wheel.schedule(True, 5)  # an int
    assert wheel.advance(5) == [True]


class Key:
    """A key that can be garbage-collected, to check that the wheel drops its references."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __hash__(self) -> int:
        return self.n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Key) and other.n == self.n


@pytest.mark.parametrize("impl", IMPLS)
def test_keys_are_released(impl: Any) -> None:
    wheel = impl.TimingWheel(0)
    refs = []
    for n in range(100):
        key = Key(n)
        refs.append(weakref.ref(key))
        wheel.schedule(key, n)
        wheel.schedule(key, n + 1)  # re-arm: same key object kept
    for n in range(0, 100, 2):
        assert wheel.cancel(Key(n))
    fired = wheel.advance(1_000)
    assert [k.n for k in fired] == list(range(1, 100, 2))
    del fired, key
    gc.collect()
    assert all(ref() is None for ref in refs)
    assert len(wheel) == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_slots_are_reused_and_a_large_wheel_drains_in_order(impl: Any) -> None:
    rng = random.Random(3)
    wheel = impl.TimingWheel(0)
    for rounds in range(3):
        base = wheel.current_ms
        deadlines = {i: base + rng.randrange(1, 5_000) for i in range(3_000)}
        for key, deadline in deadlines.items():
            wheel.schedule(key, deadline)
        for key in range(0, 3_000, 3):
            wheel.cancel(key)
            del deadlines[key]
        fired = drain(wheel) if rounds != 1 else [(10**9, wheel.advance(10**9))]
        if rounds != 1:
            assert {k: t for t, keys in fired for k in keys} == deadlines  # each on time
        flat = [k for _, keys in fired for k in keys]
        assert flat == sorted(deadlines, key=lambda k: (deadlines[k], k))
        wheel._check()


# ---------------------------------------------------------------------- against a model


class Model:
    """The reference: a dict key -> (deadline, seq), expired by sorting."""

    def __init__(self, start: int, tick: int) -> None:
        self.start = start
        self.tick = tick
        self.clock = start
        self.timers: dict[Hashable, tuple[int, int]] = {}
        self.seq = 0

    def schedule(self, key: Hashable, deadline: int) -> None:
        self.timers[key] = (deadline, self.seq)
        self.seq += 1

    def cancel(self, key: Hashable) -> bool:
        return self.timers.pop(key, None) is not None

    def advance(self, now: int) -> list[Hashable]:
        self.clock = max(self.clock, now)
        due = sorted((v, k) for k, v in self.timers.items() if v[0] <= self.clock)
        for _, key in due:
            del self.timers[key]
        return [k for _, k in due]

    @property
    def current_ms(self) -> int:
        return self.start + (self.clock - self.start) // self.tick * self.tick


# Keys of two kinds, compared only within a kind: ints and (group, member) tuples.
KEYS: list[Hashable] = [*range(12), *((g, m) for g in range(3) for m in ("a", "b", "c"))]
keys = st.sampled_from(KEYS)
offsets = st.one_of(
    st.integers(-30, 30),
    st.integers(-1_000, 30_000),
    st.integers(0, 10 * DAY),
    st.integers(-(2**63), 2**63),
)
jumps = st.one_of(
    st.integers(-20, 25),
    st.integers(0, 3_000),
    st.integers(0, 2 * DAY),
    st.integers(0, 2**62),
)


class WheelAgainstModel(RuleBasedStateMachine):
    """Random schedule/reschedule/cancel/advance, small and huge jumps, against Model."""

    impl: ClassVar[Any]

    @initialize(
        start=st.sampled_from([0, 1_700_000_000_000, INT64_MIN, INT64_MAX - 10 * DAY, -7]),
        tick=st.sampled_from([1, 1, 1, 3, 1_000]),
        size=st.sampled_from([20, 20, 2, 5]),
    )
    def init(self, start: int, tick: int, size: int) -> None:
        self.wheel = self.impl.TimingWheel(start, tick, size)
        self.model = Model(start, tick)

    @rule(key=keys, offset=offsets)
    def schedule(self, key: Hashable, offset: int) -> None:
        deadline = clamp(self.model.clock + offset)
        self.wheel.schedule(key, deadline)
        self.model.schedule(key, deadline)

    @rule(key=keys)
    def cancel(self, key: Hashable) -> None:
        assert self.wheel.cancel(key) == self.model.cancel(key)

    @rule(jump=jumps)
    def advance(self, jump: int) -> None:
        now = clamp(self.model.clock + jump)
        assert self.wheel.advance(now) == self.model.advance(now)
        self.check_nothing_due()

    @rule()
    def advance_to_next_deadline(self) -> None:
        self.step_to_next_deadline()

    @precondition(lambda self: len(self.model.timers) <= 12)
    @rule()
    def drain(self) -> None:
        self.drain_all()

    def step_to_next_deadline(self) -> bool:
        """advance(next_deadline()); False when nothing is armed."""
        t = self.wheel.next_deadline()
        if t is None:
            assert not self.model.timers
            return False
        before = self.model.clock
        deadlines = {k: v[0] for k, v in self.model.timers.items()}
        fired = self.wheel.advance(t)
        assert fired == self.model.advance(t)
        # Each timer fires at its deadline, unless it was already due when scheduled.
        assert all(deadlines[k] == t or deadlines[k] <= before for k in fired)
        self.check_nothing_due()
        return True

    def drain_all(self) -> None:
        # Each step expires timers or moves some down a wheel (a few times per timer at
        # most), or drops a bucket emptied by cancel, or lowers an expiration that a cancel
        # left too early (ticks above 1 ms).
        bound = 4 * 64 * (len(self.model.timers) + 1) + len(KEYS) * 40
        for _ in range(bound):
            if not self.step_to_next_deadline():
                return
        raise AssertionError("next_deadline() did not make progress")

    def check_nothing_due(self) -> None:
        # After an advance nothing is due, so the next deadline is after the wheel's time.
        t = self.wheel.next_deadline()
        assert t is None or t > self.model.clock

    @invariant()
    def agrees_with_the_model(self) -> None:
        wheel, model = self.wheel, self.model
        assert len(wheel) == len(model.timers)
        for key in KEYS:
            assert (key in wheel) == (key in model.timers)
            assert wheel.deadline(key) == (model.timers[key][0] if key in model.timers else None)
        assert wheel.current_ms == model.current_ms
        t = wheel.next_deadline()
        if model.timers:
            assert t is not None and t <= min(v[0] for v in model.timers.values())
        else:
            assert t is None
        wheel._check()

    def teardown(self) -> None:
        if hasattr(self, "model"):
            self.drain_all()  # whatever is left fires through next_deadline(), on time


MACHINE_SETTINGS = settings(max_examples=150, stateful_step_count=40, deadline=None)


class CompiledAgainstModel(WheelAgainstModel):
    impl: ClassVar[Any] = compiled


class TwinAgainstModel(WheelAgainstModel):
    impl: ClassVar[Any] = twin


TestCompiledAgainstModel = CompiledAgainstModel.TestCase
TestCompiledAgainstModel.settings = MACHINE_SETTINGS
TestTwinAgainstModel = TwinAgainstModel.TestCase
TestTwinAgainstModel.settings = MACHINE_SETTINGS


# ---------------------------------------------------------------------- compiled against twin

operations = st.lists(
    st.one_of(
        st.tuples(st.just("schedule"), keys, offsets),
        st.tuples(st.just("cancel"), keys, st.just(0)),
        st.tuples(st.just("advance"), st.just(None), jumps),
        st.tuples(st.just("next_deadline"), st.just(None), st.just(0)),
    ),
    max_size=120,
)


def apply(wheel: Any, op: str, key: Hashable, n: int, clock: int) -> Any:
    if op == "schedule":
        return wheel.schedule(key, clamp(clock + n))
    if op == "cancel":
        return wheel.cancel(key)
    if op == "advance":
        return wheel.advance(clamp(clock + n))
    t = wheel.next_deadline()
    return (t, None if t is None else wheel.advance(t))


def run_both(ops: list[tuple[str, Any, int]], start: int, tick: int, size: int) -> None:
    a, b = compiled.TimingWheel(start, tick, size), twin.TimingWheel(start, tick, size)
    clock = start
    for op, key, n in ops:
        result = apply(a, op, key, n, clock)
        assert result == apply(b, op, key, n, clock), (op, key, n)
        assert (len(a), a.current_ms, a.next_deadline()) == (
            len(b),
            b.current_ms,
            b.next_deadline(),
        )
        if op == "advance":
            clock = max(clock, clamp(clock + n))
        elif op == "next_deadline" and result[0] is not None:
            clock = max(clock, result[0])
    a._check()
    b._check()
    assert drain(a) == drain(b)


@settings(max_examples=300, deadline=None)
@given(
    ops=operations,
    start=st.sampled_from([0, 1_700_000_000_000, INT64_MIN, INT64_MAX - DAY]),
    tick=st.sampled_from([1, 1, 7]),
    size=st.sampled_from([20, 2, 3]),
)
def test_compiled_and_twin_agree(
    ops: list[tuple[str, Any, int]], start: int, tick: int, size: int
) -> None:
    run_both(ops, start, tick, size)


@pytest.mark.parametrize("seed", range(4))
def test_compiled_and_twin_agree_on_long_runs(seed: int) -> None:
    rng = random.Random(seed)
    ops: list[tuple[str, Any, int]] = []
    for _ in range(3_000):
        r = rng.random()
        key = rng.randrange(400)
        if r < 0.55:
            ops.append(
                ("schedule", key, rng.choice([rng.randrange(-50, 500), rng.randrange(60_000)]))
            )
        elif r < 0.7:
            ops.append(("cancel", key, 0))
        elif r < 0.95:
            ops.append(("advance", None, rng.choice([rng.randrange(30), rng.randrange(20_000)])))
        else:
            ops.append(("next_deadline", None, 0))
    run_both(ops, 1_700_000_000_000 + seed, 1, 20)
