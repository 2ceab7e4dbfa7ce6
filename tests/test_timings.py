"""Timings: Prometheus' `le` buckets from plain integer counts."""

from __future__ import annotations

from fastcoord.timings import Timings, steps


def test_observations_land_in_the_first_bucket_at_or_above_them() -> None:
    t = Timings((0.001, 0.01))
    t.observe_ns(1_000_000)  # exactly 1 ms: le="0.001" holds it
    t.observe_ns(1_000_001)
    t.observe_ns(5_000_000, times=3)
    t.observe_ns(10**12)  # above every bound
    assert t.counts == [1, 4, 1]
    assert t.cumulative() == [("0.001", 1), ("0.01", 5), ("+Inf", 6)]
    assert t.count == 6
    assert t.sum_ns == 1_000_000 + 1_000_001 + 15_000_000 + 10**12


def test_empty() -> None:
    t = Timings((0.5,))
    assert t.cumulative() == [("0.5", 0), ("+Inf", 0)]
    assert t.count == 0 and t.sum_ns == 0


def test_steps_are_prometheus_decimal_ones() -> None:
    assert steps(-2, 1.0) == (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
    assert [repr(b) for b in steps(-5, 1e-4)] == ["1e-05", "2.5e-05", "5e-05", "0.0001"]
