"""The worker's Recorder: what it records comes out of one take, once, and a take starts
afresh; a Second crosses a process boundary intact."""

from __future__ import annotations

import pickle

import numpy as np

from fastcoord.loadtest.histogram import Histogram
from fastcoord.loadtest.stats import MAX_ERROR_ROWS, Recorder, Second
from fastcoord.protocol.api_keys import ApiKey, api_name
from fastcoord.protocol.errors import ErrorCode, error_name

WALL_MS = 1_763_700_000_000


def test_api_names_are_kafkas() -> None:
    assert api_name(ApiKey.HEARTBEAT) == "Heartbeat"
    assert api_name(ApiKey.JOIN_GROUP) == "JoinGroup"
    assert api_name(ApiKey.OFFSET_COMMIT) == "OffsetCommit"
    assert api_name(ApiKey.FIND_COORDINATOR) == "FindCoordinator"
    assert api_name(ApiKey.API_VERSIONS) == "ApiVersions"
    assert api_name(ApiKey.SASL_HANDSHAKE) == "SaslHandshake"
    assert api_name(999) == "ApiKey999"
    assert error_name(ErrorCode.REBALANCE_IN_PROGRESS) == "REBALANCE_IN_PROGRESS"
    assert error_name(-12345) == "ERROR_-12345"


def take(r: Recorder, elapsed_s: int, cpu_s: float = 0.0) -> Second:
    return r.take(elapsed_s, WALL_MS + elapsed_s * 1000, {"stable": 3}, 2, cpu_s)


def test_take_holds_what_was_recorded_and_starts_afresh() -> None:
    r = Recorder(worker=4, cpu_s=10.0)
    heartbeats = [1_000 * (i + 1) for i in range(500)]
    for i, ns in enumerate(heartbeats):
        r.record(ApiKey.HEARTBEAT, ns, ErrorCode.REBALANCE_IN_PROGRESS if i % 100 == 0 else 0)
    r.record(ApiKey.JOIN_GROUP, 2_000_000, ErrorCode.MEMBER_ID_REQUIRED)
    r.error_code(ApiKey.SYNC_GROUP, ErrorCode.UNKNOWN_MEMBER_ID)
    r.error(ApiKey.HEARTBEAT, ErrorCode.UNKNOWN_MEMBER_ID, "g1", "m1", WALL_MS + 5)
    r.rebalance("g1", "m1", None, 3, WALL_MS, WALL_MS + 40, "member joined", True)
    r.storm("g1", 10, 5_000, 9_000, 8_000)
    r.commit(12)
    r.commit(3)
    r.unexpected_expiration()

    s = take(r, 1, cpu_s=10.25)
    assert (s.worker, s.elapsed_s, s.wall_ms) == (4, 1, WALL_MS + 1000)
    assert s.cpu_s == 0.25
    apis = {a.api_key: a for a in s.apis}
    assert sorted(apis) == [ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.SYNC_GROUP]
    hb = apis[ApiKey.HEARTBEAT]
    assert hb.count == 500 and hb.sum_ns == sum(heartbeats) and hb.max_ns == 500_000
    assert hb.errors == {ErrorCode.REBALANCE_IN_PROGRESS: 5, ErrorCode.UNKNOWN_MEMBER_ID: 1}
    whole = Histogram()
    whole.add_ns(heartbeats)
    np.testing.assert_array_equal(hb.histogram().counts, whole.counts)
    assert apis[ApiKey.SYNC_GROUP].count == 0
    assert apis[ApiKey.SYNC_GROUP].errors == {ErrorCode.UNKNOWN_MEMBER_ID: 1}
    assert s.error_rows == [
        (WALL_MS + 5, ApiKey.HEARTBEAT, ErrorCode.UNKNOWN_MEMBER_ID, "g1", "m1")
    ]
    assert s.rebalances == [("g1", "m1", None, 3, WALL_MS, WALL_MS + 40, "member joined", True)]
    assert s.storms == [("g1", 10, 5_000, 9_000, 8_000)]
    assert (s.commits, s.offsets, s.unexpected_expirations) == (2, 15, 1)
    assert (s.states, s.connections) == ({"stable": 3}, 2)

    empty = take(r, 2, cpu_s=10.75)
    assert empty.apis == [] and empty.error_rows == [] and empty.rebalances == []
    assert empty.storms == [] and (empty.commits, empty.offsets) == (0, 0)
    assert empty.unexpected_expirations == 0 and empty.cpu_s == 0.5


def test_a_held_latency_list_keeps_counting_after_a_take() -> None:
    r = Recorder(worker=0, cpu_s=0.0)
    heartbeats = r.latencies(ApiKey.HEARTBEAT)
    heartbeats.append(1_000)
    r.record(ApiKey.HEARTBEAT, 2_000, 0)
    assert [a.count for a in take(r, 1).apis] == [2]
    heartbeats.append(3_000)  # the same list, after the take
    (hb,) = take(r, 2).apis
    assert (hb.count, hb.sum_ns, hb.errors) == (1, 3_000, {})


def test_error_rows_are_capped_per_second_and_the_rest_counted() -> None:
    r = Recorder(worker=0, cpu_s=0.0)
    for i in range(MAX_ERROR_ROWS + 7):
        r.error(ApiKey.HEARTBEAT, ErrorCode.UNKNOWN_MEMBER_ID, "g", f"m{i}", WALL_MS)
    s = take(r, 1)
    assert len(s.error_rows) == MAX_ERROR_ROWS and s.errors_dropped == 7
    assert s.apis[0].errors == {ErrorCode.UNKNOWN_MEMBER_ID: MAX_ERROR_ROWS + 7}
    r.error(ApiKey.HEARTBEAT, ErrorCode.UNKNOWN_MEMBER_ID, "g", "m", WALL_MS)
    s = take(r, 2)
    assert len(s.error_rows) == 1 and s.errors_dropped == 0  # the cap is per second


def test_a_second_survives_pickling() -> None:
    r = Recorder(worker=1, cpu_s=0.0)
    for ns in range(1_000, 200_000, 1_000):
        r.record(ApiKey.OFFSET_COMMIT, ns, 0)
    r.error(ApiKey.JOIN_GROUP, ErrorCode.UNKNOWN_MEMBER_ID, "g", "m", WALL_MS)
    s = take(r, 1)
    back = pickle.loads(pickle.dumps(s))
    assert back.worker == 1 and back.error_rows == s.error_rows
    for a, b in zip(s.apis, back.apis, strict=True):
        np.testing.assert_array_equal(a.buckets, b.buckets)
        np.testing.assert_array_equal(a.counts, b.counts)
        assert (a.count, a.sum_ns, a.max_ns, a.errors) == (b.count, b.sum_ns, b.max_ns, b.errors)
