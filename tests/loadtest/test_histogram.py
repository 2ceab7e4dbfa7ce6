"""The latency histogram: every value's bucket bounds it within 1/16, percentiles read from
counts never fall below numpy's exact ones, and merged histograms equal one built whole."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord.loadtest.histogram import (
    BUCKETS,
    LIMIT_US,
    OVERFLOW,
    Histogram,
    bucket_bounds_us,
    bucket_of,
)

TEN_MINUTES_US = 600 * 1_000_000


def latencies_ns(n: int, seed: int) -> np.ndarray:
    """Log-normal latencies around 1 ms with a long tail, in ns, as a coordinator's are."""
    rng = np.random.default_rng(seed)
    return rng.lognormal(mean=np.log(1e6), sigma=1.5, size=n).astype(np.int64)


def test_bounds_tile_the_range_without_gaps() -> None:
    lower, upper = bucket_bounds_us()
    assert len(lower) == len(upper) == BUCKETS
    assert lower[0] == 0
    np.testing.assert_array_equal(upper[:-1], lower[1:])
    assert (upper > lower).all()
    assert upper[OVERFLOW] == math.inf and lower[OVERFLOW] == LIMIT_US


def test_exact_below_32_us_then_within_a_sixteenth() -> None:
    lower, upper = bucket_bounds_us()
    regular = slice(0, OVERFLOW)
    width = upper[regular] - lower[regular]
    assert (width[:32] == 1).all()
    assert (width[32:] / lower[32:OVERFLOW] <= 1 / 16).all()
    np.testing.assert_array_equal(bucket_of(np.arange(32)), np.arange(32))


def test_every_bucket_holds_its_bounds_and_nothing_else() -> None:
    lower, upper = bucket_bounds_us()
    b = np.arange(OVERFLOW)
    np.testing.assert_array_equal(bucket_of(lower[:OVERFLOW].astype(np.int64)), b)
    np.testing.assert_array_equal(bucket_of(upper[:OVERFLOW].astype(np.int64) - 1), b)
    values = np.arange(0, 1 << 22)
    buckets = bucket_of(values)
    assert (lower[buckets] <= values).all() and (values < upper[buckets]).all()


def test_ten_minutes_fit_and_beyond_17_minutes_overflows() -> None:
    assert bucket_of(np.array([TEN_MINUTES_US]))[0] < OVERFLOW
    assert bucket_of(np.array([LIMIT_US - 1]))[0] == OVERFLOW - 1
    assert (bucket_of(np.array([LIMIT_US, 10 * LIMIT_US, 2**62])) == OVERFLOW).all()
    assert bucket_of(np.array([-5]))[0] == 0
    assert np.iinfo(np.int16).max >= BUCKETS - 1  # the latency table's buckets are int16


def formula(us: int) -> int:
    """docs/loadtest.md's bucket of a latency in whole microseconds, in plain Python."""
    if us >= LIMIT_US:
        return OVERFLOW
    us = max(us, 0)
    shift = max(us.bit_length() - 5, 0)
    return 16 * shift + (us >> shift)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-(2**40), 2**40) | st.integers(0, 1 << 12), max_size=100))
def test_bucket_of_is_the_documented_formula(values: list[int]) -> None:
    expected = [formula(v) for v in values]
    assert bucket_of(np.array(values, dtype=np.int64)).tolist() == expected


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_percentiles_against_numpy(seed: int) -> None:
    values = latencies_ns(200_000, seed)
    h = Histogram()
    h.add_ns(values)
    assert h.count == len(values) and h.sum_ns == int(values.sum())
    assert h.max_ms == values.max() / 1e6
    for q in (50, 90, 99, 99.9, 99.99, 100):
        exact_ms = np.percentile(values, q, method="inverted_cdf") / 1e6
        got = h.percentile_ms(q)
        assert got >= exact_ms, q  # never under-reports
        assert got <= exact_ms * (1 + 1 / 16) + 0.001, q  # within a bucket (1 us below 32)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 2 * LIMIT_US * 1000), min_size=1, max_size=200),
    st.floats(0.1, 100),
)
def test_percentile_is_the_bucket_bound_of_the_qth_value(values: list[int], q: float) -> None:
    h = Histogram()
    h.add_ns(values)
    ordered = sorted(values)
    qth = ordered[max(1, math.ceil(q / 100 * len(values))) - 1]
    got_ns = h.percentile_ms(q) * 1e6
    assert got_ns >= qth * (1 - 1e-12)
    assert got_ns <= max(values) * (1 + 1e-12)
    if qth < LIMIT_US * 1000:
        assert got_ns <= qth * (1 + 1 / 16) + 1000
    else:
        assert got_ns == pytest.approx(max(values))


def test_merge_equals_one_histogram_of_everything() -> None:
    values = latencies_ns(90_000, 7)
    whole = Histogram()
    whole.add_ns(values)
    merged = Histogram()
    for part in np.array_split(values, 3):
        h = Histogram()
        h.add_ns(part)
        merged.merge(h)
    np.testing.assert_array_equal(merged.counts, whole.counts)
    assert (merged.count, merged.sum_ns, merged.max_ns) == (
        whole.count,
        whole.sum_ns,
        whole.max_ns,
    )
    for q in (50, 99, 99.9):
        assert merged.percentile_ms(q) == whole.percentile_ms(q)


def test_sparse_form_round_trips() -> None:
    h = Histogram()
    h.add_ns(latencies_ns(10_000, 4))
    buckets, counts = h.nonzero()
    assert buckets.dtype == np.int16 and counts.dtype == np.int64
    assert (np.diff(buckets) > 0).all() and (counts > 0).all()
    back = Histogram.from_sparse(buckets, counts, h.sum_ns, h.max_ns)
    np.testing.assert_array_equal(back.counts, h.counts)
    assert back.count == h.count and back.percentile_ms(99) == h.percentile_ms(99)


def test_an_empty_histogram_has_no_percentiles() -> None:
    h = Histogram()
    h.add_ns(np.array([], dtype=np.int64))
    assert h.count == 0 and math.isnan(h.percentile_ms(99))
    assert h.nonzero()[0].size == 0


def test_overflowing_values_report_the_maximum() -> None:
    h = Histogram()
    h.add_ns([1_000, 3 * LIMIT_US * 1000])
    assert h.percentile_ms(100) == 3 * LIMIT_US / 1000
    assert h.percentile_ms(50) == 0.002  # 1 us: bucket [1, 2) us
