"""Every worker's seconds, kept per run second and API, for figures over any set of seconds.

The whole run's totals are one histogram per API, but a load test is read by windows: its
phases (joining, steady, leaving) and each fault's window against the rest of the run. A
percentile over a window must come from the window's merged counts, so the parent keeps
each second's sparse histograms as the workers sent them (late ones too) and merges the
seconds a window holds when asked. One instance serves the phases and the faults.

Memory: a second holds one part per worker and API until the aggregator has merged it
(aggregate.py), then `compact` folds its parts into one per API; a worker's second that
arrives later is folded in at once. A long run with many workers costs a sparse
histogram per second and API.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from fastcoord.loadtest.histogram import Histogram
from fastcoord.loadtest.stats import ApiSecond, Second


def _histogram(parts: list[ApiSecond]) -> Histogram:
    # One scatter for them all: a long window's figures take a moment, not a histogram
    # per worker per second.
    return Histogram.from_sparse(
        np.concatenate([p.buckets for p in parts]),
        np.concatenate([p.counts for p in parts]),
        sum(p.sum_ns for p in parts),
        max(p.max_ns for p in parts),
    )


def _codes(parts: list[ApiSecond]) -> dict[int, int]:
    codes: defaultdict[int, int] = defaultdict(int)
    for p in parts:
        for code, n in p.errors.items():
            codes[code] += n
    return dict(sorted(codes.items()))


def _merged(api_key: int, parts: list[ApiSecond]) -> ApiSecond:
    """One part holding what `parts` hold."""
    h = _histogram(parts)
    buckets, counts = h.nonzero()
    return ApiSecond(api_key, h.count, h.sum_ns, h.max_ns, buckets, counts, _codes(parts))


class PerSecond:
    """The workers' seconds, per run second and API (sparse histograms and error counts by
    code, signals among them)."""

    def __init__(self) -> None:
        self._seconds: defaultdict[int, defaultdict[int, list[ApiSecond]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self._compacted: set[int] = set()

    def add(self, second: Second) -> None:
        apis = self._seconds[second.elapsed_s]
        compacted = second.elapsed_s in self._compacted
        for api in second.apis:
            parts = apis[api.api_key]
            parts.append(api)
            if compacted and len(parts) > 1:
                parts[:] = [_merged(api.api_key, parts)]

    def compact(self, elapsed_s: int) -> None:
        """Fold second `elapsed_s`'s parts into one per API; what arrives for it later is
        folded in as it comes."""
        self._compacted.add(elapsed_s)
        apis = self._seconds.get(elapsed_s)
        if apis is None:
            return
        for api_key, parts in apis.items():
            if len(parts) > 1:
                parts[:] = [_merged(api_key, parts)]

    @property
    def last_s(self) -> int:
        """The run's newest second (0: none yet)."""
        return max(self._seconds, default=0)

    def parts(self, elapsed_s: int) -> int:
        """How many parts second `elapsed_s` holds, over its APIs."""
        return sum(len(parts) for parts in self._seconds.get(elapsed_s, {}).values())

    def api_keys(self, seconds: Iterable[int] | None = None) -> list[int]:
        """The APIs seen in `seconds` (default: the whole run), in key order."""
        if seconds is None:
            return sorted({k for apis in self._seconds.values() for k in apis})
        keys: set[int] = set()
        for s in seconds:
            apis = self._seconds.get(s)
            if apis is not None:
                keys.update(apis)
        return sorted(keys)

    def over(self, api_key: int, seconds: Iterable[int]) -> tuple[Histogram, dict[int, int]]:
        """One API over `seconds` (elapsed_s values): its merged latency histogram, and its
        errors by code (signals among them)."""
        parts: list[ApiSecond] = []
        for s in seconds:
            apis = self._seconds.get(s)
            if apis is not None:
                parts += apis.get(api_key, ())
        if not parts:
            return Histogram(), {}
        return _histogram(parts), _codes(parts)
