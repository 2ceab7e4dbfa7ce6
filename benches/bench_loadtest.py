"""What measuring costs a load-test worker: Recorder.record and the once-a-second take().

A worker drives about 33,000 requests a second on less than a core, and every answer is
recorded, so record() must stay a list append (and a dict increment for an error). Each
call here is a whole second's worth, 33,000 records, long enough for asv to time one at a
time, so the inputs are built in `setup` (nothing runs at import). The track_* figures are
per record, measured by the benchmark itself: best of 5 rounds.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from fastcoord.loadtest.stats import Recorder
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode

from .common import SEED, scaled

REQUESTS = scaled(33_000)
ROUNDS = 5


def second_of_requests() -> list[tuple[int, int, int]]:
    """(api_key, latency_ns, error): Heartbeats mostly, some commits, 1% errors."""
    rng = random.Random(SEED)
    apis = [ApiKey.HEARTBEAT] * 90 + [ApiKey.OFFSET_COMMIT] * 9 + [ApiKey.JOIN_GROUP]
    return [
        (
            rng.choice(apis),
            int(rng.lognormvariate(13.8, 0.8)),  # about 1 ms
            ErrorCode.REBALANCE_IN_PROGRESS if rng.random() < 0.01 else 0,
        )
        for _ in range(REQUESTS)
    ]


def record_all(
    record: Callable[[int, int, int], None], requests: list[tuple[int, int, int]]
) -> None:
    for api_key, latency_ns, error in requests:
        record(api_key, latency_ns, error)


def take(recorder: Recorder) -> None:
    recorder.take(1, 1_763_700_000_000, {"stable": 10_000}, 100, 0.0)


def best_ns(run: Callable[[], object], rounds: int = ROUNDS) -> int:
    """The shortest of `rounds` runs, in ns: the one least disturbed by the rest of the host."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        run()
        times.append(time.perf_counter_ns() - start)
    return min(times)


class RecorderSecond:
    """One second of a worker's requests: recorded one by one, then taken."""

    timeout = 120

    def setup(self) -> None:
        self.requests = second_of_requests()

    def time_record(self) -> None:
        record_all(Recorder(0, cpu_s=0.0).record, self.requests)

    def time_record_and_take(self) -> None:
        recorder = Recorder(0, cpu_s=0.0)
        record_all(recorder.record, self.requests)
        take(recorder)

    def track_record_ns_per_request(self) -> float:
        return best_ns(lambda: record_all(Recorder(0, cpu_s=0.0).record, self.requests)) / REQUESTS

    track_record_ns_per_request.unit = "ns"  # type: ignore[attr-defined]

    def track_take_ns_per_request(self) -> float:
        def one() -> int:
            recorder = Recorder(0, cpu_s=0.0)
            record_all(recorder.record, self.requests)
            start = time.perf_counter_ns()
            take(recorder)
            return time.perf_counter_ns() - start

        return min(one() for _ in range(ROUNDS)) / REQUESTS

    track_take_ns_per_request.unit = "ns"  # type: ignore[attr-defined]

    def track_reference_loop_ns_per_request(self) -> float:
        """The same loop calling a method that does nothing: what record() adds is the
        difference (this machine's speed drifts, so compare within one run)."""
        return best_ns(lambda: record_all(Nothing().record, self.requests)) / REQUESTS

    track_reference_loop_ns_per_request.unit = "ns"  # type: ignore[attr-defined]


class Nothing:
    def record(self, api_key: int, latency_ns: int, error: int) -> None:
        pass
