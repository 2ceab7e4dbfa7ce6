"""Histograms of durations kept as plain integers, for the metrics endpoint.

The paths that time things (request handling, log appends and syncs) run far more often
than anyone scrapes, so an observation is one bisect and two integer additions, with no
lock: each histogram has one writer (the server's thread, or the appender's), and a
scrape that reads a count one observation behind is as good as the next scrape.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence


def steps(low_exponent: int, high: float) -> tuple[float, ...]:
    """1, 2.5 and 5 times each power of ten from 10**low_exponent, up to `high` (seconds):
    Prometheus' default steps. Written as decimals, so that `le` reads 2.5e-05, not
    2.5000000000000002e-05."""
    out: list[float] = []
    exponent = low_exponent
    while True:
        for mantissa in ("1", "2.5", "5"):
            bound = float(f"{mantissa}e{exponent}")
            if bound > high:
                return tuple(out)
            out.append(bound)
        exponent += 1


# Requests live below a millisecond, so the steps start at 10 us; the disk's at 50 us.
REQUEST_BUCKETS_S = steps(-5, 1.0)
DISK_BUCKETS_S = steps(-5, 2.5)[2:]
REBALANCE_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Timings:
    """Counts of durations at or below each bound (Prometheus' `le`), and their sum."""

    __slots__ = ("_bounds_ns", "bounds_s", "counts", "sum_ns")

    def __init__(self, bounds_s: Sequence[float]) -> None:
        self.bounds_s = tuple(bounds_s)
        self._bounds_ns = tuple(round(b * 1e9) for b in self.bounds_s)
        self.counts = [0] * (len(self.bounds_s) + 1)  # the last: above every bound
        self.sum_ns = 0

    def observe_ns(self, ns: int, times: int = 1) -> None:
        """`times` durations of `ns` nanoseconds each."""
        self.counts[bisect_left(self._bounds_ns, ns)] += times
        self.sum_ns += ns * times

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, count at or below it) for each bound and +Inf, as Prometheus writes them."""
        out = []
        total = 0
        for bound, count in zip((*self.bounds_s, float("inf")), self.counts, strict=True):
            total += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), total))
        return out

    @property
    def count(self) -> int:
        return sum(self.counts)
