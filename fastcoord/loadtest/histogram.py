"""Latency histograms with fixed log-linear buckets, so that workers' counts add up.

Every process and every second uses the same buckets (as HdrHistogram does): whole
microseconds exactly below 32 us, then 16 sub-buckets per power of two, so a bucket's upper
bound is within 1/16 (6.25%) of any value in it. Percentiles are read from merged counts,
which is the only correct way to combine them: a mean of percentiles is not a percentile.
A Spark job computes the same figures from the `latency` table with the formula below.

    s = max(bit_length(us) - 5, 0);  bucket = 16 * s + (us >> s)     (us < 2**30)
    bucket OVERFLOW (432) for us >= 2**30 (about 17.9 minutes)
    bucket b < 32: [b, b + 1) us;  else s = b // 16 - 1, m = b % 16 + 16: [m << s, (m+1) << s)
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

SUB_BITS = 4  # 16 sub-buckets per power of two
LIMIT_US = 1 << 30  # values at or above this share the overflow bucket
OVERFLOW = ((30 - SUB_BITS - 1) << SUB_BITS) + (1 << (SUB_BITS + 1))  # 432
BUCKETS = OVERFLOW + 1

Int64Array = npt.NDArray[np.int64]
Int16Array = npt.NDArray[np.int16]
FloatArray = npt.NDArray[np.float64]


def bucket_of(latencies_us: npt.ArrayLike) -> Int64Array:
    """The bucket of each latency (whole microseconds; negative ones count as 0)."""
    us = np.clip(np.asarray(latencies_us, dtype=np.int64), 0, LIMIT_US)
    # A double's exponent field is bit_length + 1022, exactly, for every clipped value (they
    # fit its mantissa), and 0 for 0: the shift without a loop or a logarithm.
    shift = (us.astype(np.float64).view(np.int64) >> 52) - (1022 + SUB_BITS + 1)
    np.maximum(shift, 0, out=shift)
    buckets = us >> shift
    buckets += shift << SUB_BITS
    return buckets


def _bounds() -> tuple[FloatArray, FloatArray]:
    b = np.arange(BUCKETS, dtype=np.int64)
    shift = np.maximum((b >> SUB_BITS) - 1, 0)
    mantissa = np.where(b < 2 << SUB_BITS, b, (b & ((1 << SUB_BITS) - 1)) + (1 << SUB_BITS))
    lower = (mantissa << shift).astype(np.float64)
    upper = ((mantissa + 1) << shift).astype(np.float64)
    lower[OVERFLOW] = LIMIT_US
    upper[OVERFLOW] = math.inf
    lower.setflags(write=False)
    upper.setflags(write=False)
    return lower, upper


_LOWER_US, _UPPER_US = _bounds()


def bucket_bounds_us() -> tuple[FloatArray, FloatArray]:
    """Each bucket's [lower, upper) bounds in microseconds; the overflow's upper is inf."""
    return _LOWER_US, _UPPER_US


class Histogram:
    """Counts per bucket, with the exact count, sum and maximum beside them."""

    __slots__ = ("count", "counts", "max_ns", "sum_ns")

    def __init__(self) -> None:
        self.counts: Int64Array = np.zeros(BUCKETS, dtype=np.int64)
        self.count = 0
        self.sum_ns = 0
        self.max_ns = 0

    @classmethod
    def from_sparse(
        cls, buckets: npt.ArrayLike, counts: npt.ArrayLike, sum_ns: int, max_ns: int
    ) -> Histogram:
        """The histogram that `nonzero()` and the sum and maximum describe."""
        h = cls()
        np.add.at(h.counts, np.asarray(buckets, dtype=np.int64), np.asarray(counts, np.int64))
        h.count = int(h.counts.sum())
        h.sum_ns = sum_ns
        h.max_ns = max_ns
        return h

    def add_ns(self, values: npt.ArrayLike) -> None:
        """Count latencies given in nanoseconds (bucketed by whole microseconds)."""
        ns = np.asarray(values, dtype=np.int64)
        if ns.size == 0:
            return
        self.counts += np.bincount(bucket_of(ns // 1000), minlength=BUCKETS)
        self.count += int(ns.size)
        self.sum_ns += int(ns.sum())
        self.max_ns = max(self.max_ns, int(ns.max()))

    def add_us(self, values: npt.ArrayLike) -> None:
        """Count durations given in whole microseconds."""
        self.add_ns(np.asarray(values, dtype=np.int64) * 1000)

    def add_row(self, row: Int64Array) -> None:
        """Count what a lane's sink row holds (fastcoord/client/lane.py): the BUCKETS counts,
        then the count, the sum and the maximum of the latencies in ns."""
        self.counts += row[:BUCKETS]
        self.count += int(row[BUCKETS])
        self.sum_ns += int(row[BUCKETS + 1])
        self.max_ns = max(self.max_ns, int(row[BUCKETS + 2]))

    def merge(self, other: Histogram) -> None:
        self.counts += other.counts
        self.count += other.count
        self.sum_ns += other.sum_ns
        self.max_ns = max(self.max_ns, other.max_ns)

    def percentile_ms(self, q: float) -> float:
        """The q-th percentile (0 < q <= 100) in ms: the upper bound of the bucket holding the
        q-th value, or the maximum if that is lower; never below the value itself. NaN when
        empty."""
        if self.count == 0:
            return math.nan
        rank = max(1, math.ceil(q / 100 * self.count))
        bucket = int(np.searchsorted(np.cumsum(self.counts), min(rank, self.count)))
        return min(float(_UPPER_US[bucket]) * 1000, self.max_ns) / 1e6

    @property
    def max_ms(self) -> float:
        return self.max_ns / 1e6

    @property
    def sum_us(self) -> int:
        return self.sum_ns // 1000

    def nonzero(self) -> tuple[Int16Array, Int64Array]:
        """The sparse form: the buckets that hold values (ascending) and their counts."""
        buckets = np.flatnonzero(self.counts)
        return buckets.astype(np.int16), self.counts[buckets]
