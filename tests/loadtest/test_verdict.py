"""The verdict against the thresholds: the protocol's signals are not failures, JoinGroup and
SyncGroup wait by design, and a run that answered nothing does not pass."""

from __future__ import annotations

from fastcoord.loadtest.aggregate import Aggregator
from fastcoord.loadtest.stats import Recorder
from fastcoord.loadtest.summary import Thresholds
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode

from .workers import START_MS

MS = 1_000_000


def run(thresholds: Thresholds, fill: dict[tuple[int, int, int], int]) -> dict[str, object]:
    """A one-worker, one-second run: `fill[(api_key, latency_ms, error)]` requests of each."""
    r = Recorder(0, cpu_s=0.0)
    for (api_key, latency_ms, error), n in fill.items():
        for _ in range(n):
            r.record(api_key, latency_ms * MS, error)
    agg = Aggregator(None, {}, workers=1, thresholds=thresholds)
    agg.add(r.take(1, START_MS + 1000, {}, 0, 0.0))
    verdict = agg.finish("completed", None)["verdict"]
    assert isinstance(verdict, dict)
    return verdict


LIMITS = Thresholds(max_error_rate=0.01, max_p99_ms=10)
HEALTHY = {(ApiKey.HEARTBEAT, 2, 0): 1000, (ApiKey.OFFSET_COMMIT, 4, 0): 100}


def test_a_healthy_run_passes() -> None:
    assert run(LIMITS, HEALTHY) == {"passed": True, "failures": []}


def test_no_limits_pass_any_answered_run() -> None:
    slow_and_failing = {(ApiKey.HEARTBEAT, 500, ErrorCode.UNKNOWN_MEMBER_ID): 10}
    assert run(Thresholds(), slow_and_failing)["passed"] is True


def test_signals_are_not_failures() -> None:
    signals = {
        (ApiKey.HEARTBEAT, 2, ErrorCode.REBALANCE_IN_PROGRESS): 500,
        (ApiKey.JOIN_GROUP, 2, ErrorCode.MEMBER_ID_REQUIRED): 500,
    }
    assert run(LIMITS, HEALTHY | signals)["passed"] is True


def test_errors_above_the_rate_fail_with_their_names() -> None:
    failing = {(ApiKey.HEARTBEAT, 2, ErrorCode.UNKNOWN_MEMBER_ID): 20}  # 20 of 1120: 1.8%
    verdict = run(LIMITS, HEALTHY | failing)
    assert verdict["passed"] is False
    (sentence,) = verdict["failures"]  # type: ignore[misc]
    assert "1.786%" in sentence and "1.000%" in sentence and "UNKNOWN_MEMBER_ID 20" in sentence


def test_joingroup_and_syncgroup_wait_by_design() -> None:
    waiting = {(ApiKey.JOIN_GROUP, 3000, 0): 100, (ApiKey.SYNC_GROUP, 3000, 0): 100}
    assert run(LIMITS, HEALTHY | waiting)["passed"] is True


def test_a_slow_api_fails_by_name() -> None:
    slow = {(ApiKey.OFFSET_COMMIT, 50, 0): 100}  # half the commits: p99 50 ms
    verdict = run(LIMITS, HEALTHY | slow)
    assert verdict["passed"] is False
    (sentence,) = verdict["failures"]  # type: ignore[misc]
    assert sentence.startswith("OffsetCommit p99 50.") and "limit 10 ms" in sentence


def test_a_run_that_answered_nothing_fails() -> None:
    verdict = run(Thresholds(), {})
    assert verdict == {"passed": False, "failures": ["No request was answered."]}
