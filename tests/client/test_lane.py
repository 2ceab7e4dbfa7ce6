"""The client's lane: compiled against its twin, and both against the schema codec.

Runs whatever FASTCOORD_NO_EXTENSIONS says: both modules are imported directly. Requests
are decoded by framing.decode_request and answers built by framing.encode_response, so
they are what a server reads and sends.
"""

from __future__ import annotations

import re
import select
import socket
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord._ext import client_lane as compiled  # type: ignore[attr-defined]
from fastcoord.client import lane as twin
from fastcoord.client.native import (
    commit_answer,
    commit_offsets,
    commit_template,
    consumer_heartbeat_answer,
    consumer_heartbeat_template,
)
from fastcoord.client.native import heartbeat_template as template
from fastcoord.loadtest import histogram
from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseAssignment,
    HeartbeatRequest,
    HeartbeatResponse,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

IMPLS = [pytest.param(compiled.Lane, id="compiled"), pytest.param(twin.Lane, id="twin")]
HEARTBEAT, COMMIT = ApiKey.HEARTBEAT, ApiKey.OFFSET_COMMIT
CGH = ApiKey.CONSUMER_GROUP_HEARTBEAT
INTERVAL = 5000  # the consumer-protocol members' heartbeat interval, as a coordinator says
MAX = 1 << 20
ROW = twin.ROW


def sinks() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((2, ROW), np.int64), np.zeros(2, np.int64)


def make(impl: Any, slots: int) -> tuple[Any, np.ndarray, np.ndarray]:
    latency, commits = sinks()
    return impl(slots, latency, commits), latency, commits


def frames_of(out: bytes | bytearray) -> list[bytes]:
    """The request frames in `out`, size prefix included."""
    found, pos = [], 0
    while pos < len(out):
        size = int.from_bytes(out[pos : pos + 4], "big")
        found.append(bytes(out[pos : pos + 4 + size]))
        pos += 4 + size
    assert pos == len(out)
    return found


def answer(correlation_id: int, version: int, error: int, throttle: int = 0) -> bytes:
    return framing.encode_response(correlation_id, version, HeartbeatResponse(throttle, error))


def steady(member: str, epoch: int, instance: str | None = None) -> ConsumerGroupHeartbeatRequest:
    """A steady ConsumerGroupHeartbeat: its epoch, and every field that may be null, null."""
    return ConsumerGroupHeartbeatRequest(
        group_id="g", member_id=member, member_epoch=epoch, instance_id=instance
    )


def consumer_template(version: int, member: str, epoch: int) -> bytes:
    return consumer_heartbeat_template(version, "c", steady(member, epoch))


def consumer_answer(correlation_id: int, version: int, **fields: Any) -> bytes:
    """A ConsumerGroupHeartbeat answer: the steady one unless `fields` say otherwise."""
    base: dict[str, Any] = {"member_epoch": 1, "heartbeat_interval_ms": INTERVAL}
    response = ConsumerGroupHeartbeatResponse(**{**base, **fields})
    return framing.encode_response(correlation_id, version, response)


def commit_request(offsets: list[int], group: str = "g", member: str = "m") -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=3,
        member_id=member,
        topics=[
            OffsetCommitRequestTopic(
                "t",
                [
                    OffsetCommitRequestPartition(p, o, committed_metadata="")
                    for p, o in enumerate(offsets)
                ],
            )
        ],
    )


def commit_response(correlation_id: int, version: int, errors: list[int]) -> bytes:
    partitions = [OffsetCommitResponsePartition(p, e) for p, e in enumerate(errors)]
    response = OffsetCommitResponse(0, [OffsetCommitResponseTopic("t", partitions)])
    return framing.encode_response(correlation_id, version, response)


def read(lane: Any, buf: bytes, now_ns: int, version: int = 4) -> tuple[int, list[Any], list[Any]]:
    unusual: list[Any] = []
    others: list[Any] = []
    end = lane.read(bytearray(buf), 0, MAX, version, now_ns, unusual, others)
    return end, unusual, others


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """The result, or the error's type and text, so that two implementations compare."""
    try:
        return ("ok", fn(*args))
    except (ProtocolError, ValueError, TypeError, IndexError) as exc:
        return (type(exc).__name__, str(exc))


# -- heartbeats out --------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_due_heartbeats_leave_in_slot_order_with_fresh_correlation_ids(impl: Any) -> None:
    lane, _, _ = make(impl, 4)
    templates = [template(4, "c", "g", 7, f"member-{i}", None) for i in range(4)]
    lane.start(2, "two", templates[2], 30, 1000)
    lane.start(0, "zero", templates[0], 10, 1000)
    lane.start(3, "three", templates[3], 500, 1000)  # not due yet
    out = bytearray(b"before")
    assert lane.due(100, 41, out) == 43
    assert out[:6] == b"before"
    sent = frames_of(out[6:])
    assert len(sent) == 2 and lane.in_flight == 2
    for frame, i, cid in zip(sent, (0, 2), (42, 43), strict=True):
        header, request, extra = framing.decode_request(frame[4:])
        assert (header.api_key, header.api_version, header.correlation_id) == (HEARTBEAT, 4, cid)
        assert (request, extra) == (HeartbeatRequest("g", 7, f"member-{i}", None), 0)


@pytest.mark.parametrize("impl", IMPLS)
def test_a_heartbeat_waits_for_the_answer_of_the_last_and_keeps_its_rhythm(impl: Any) -> None:
    lane, latency, _ = make(impl, 1)
    lane.start(0, "m", template(4, "c", "g", 1, "m", None), 100, 1000)
    out = bytearray()
    cid = lane.due(100, 0, out)
    assert cid == 1 and lane.in_flight == 1
    # Unanswered at its next beat: none sent, and the beat after is still 1000 ms on.
    assert lane.due(1100, cid, out) == cid and len(frames_of(out)) == 1
    assert read(lane, answer(1, 4, 0), 5_000_000) == (12 + 4, [], [])
    assert lane.due(1999, cid, out) == cid
    assert lane.due(2100, cid, out) == 2 and len(frames_of(out)) == 2
    assert latency[0, twin.COUNT] == 1


@pytest.mark.parametrize("impl", IMPLS)
def test_a_generator_that_fell_behind_skips_the_beats_it_missed(impl: Any) -> None:
    lane, _, _ = make(impl, 1)
    lane.start(0, "m", template(4, "c", "g", 1, "m", None), 100, 1000)
    out = bytearray()
    lane.due(9_950, 0, out)  # nine beats late: one is sent, the next a whole interval on
    read(lane, answer(1, 4, 0), 1)
    assert lane.due(10_900, 1, out) == 1
    assert lane.due(10_950, 1, out) == 2


# -- answers in --------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("version", range(5))
def test_answers_are_matched_in_order_and_plain_successes_recorded(impl: Any, version: int) -> None:
    lane, latency, _ = make(impl, 3)
    for i in range(3):
        lane.start(i, f"m{i}", template(version, "c", "g", 1, f"m{i}", None), 0, 3000)
    assert lane.due(0, 9, bytearray()) == 12
    lane.stamp(1_000_000)
    leave = framing.encode_response(99, 3, LeaveGroupResponse(error_code=25))
    early = answer(12, version, 0)  # ahead of the answer to 11: out of order
    buf = answer(10, version, 0, throttle=100) + leave + early + answer(11, version, 27)
    end, unusual, others = read(lane, buf, 3_500_000, version)
    assert end == len(buf)
    # The leave's answer is not the lane's, and the early one is left to the caller.
    assert unusual == [("m1", HEARTBEAT, True, 2_500_000, 27, None)]
    assert others == [(99, leave[4:]), (12, early[4:])]
    assert latency[0, twin.COUNT] == 1 and latency[0, twin.SUM] == 2_500_000
    assert lane.in_flight == 1
    assert lane.claim(12, early[4:], version, 4_000_000, unusual)
    assert latency[0, twin.COUNT] == 2 and lane.in_flight == 0
    assert not lane.claim(12, early[4:], version, 4_000_000, unusual)


@pytest.mark.parametrize("impl", IMPLS)
def test_answers_split_across_reads_are_read_when_whole(impl: Any) -> None:
    lane, latency, _ = make(impl, 2)
    for i in range(2):
        lane.start(i, i, template(4, "c", "g", 1, f"m{i}", None), 0, 3000)
    lane.due(0, 0, bytearray())
    lane.stamp(0)
    stream = answer(1, 4, 0) + answer(2, 4, 0)
    buf = bytearray()
    for at in range(len(stream)):
        buf.append(stream[at])
        unusual: list[Any] = []
        end = lane.read(buf, 0, MAX, 4, 1_000 * (at + 1), unusual, [])
        del buf[:end]
        assert unusual == []
    assert not buf and latency[0, twin.COUNT] == 2
    # Read when each was whole: the 16th and the 32nd byte.
    assert latency[0, twin.SUM] == 16_000 + 32_000 and latency[0, twin.MAX] == 32_000


@pytest.mark.parametrize("impl", IMPLS)
def test_a_member_that_left_while_its_heartbeat_was_out_is_not_measured(impl: Any) -> None:
    lane, latency, _ = make(impl, 2)
    for i in range(2):
        lane.start(i, i, template(4, "c", "g", 1, f"m{i}", None), 0, 3000)
    lane.due(0, 0, bytearray())
    assert lane.stop(0) == []
    # A rebalance: member 0's answer says so, and it has left its slot already: dropped.
    _, unusual, _ = read(lane, answer(1, 4, 27) + answer(2, 4, 0), 10)
    assert unusual == [] and latency[0, twin.COUNT] == 1 and lane.in_flight == 0
    # Back, with a new generation: its heartbeats go out again.
    lane.start(0, 0, template(4, "c", "g", 2, "m0", None), 0, 3000)
    assert lane.due(0, 2, bytearray()) == 3


@pytest.mark.parametrize("impl", IMPLS)
def test_answers_in_another_layout_are_left_to_the_full_decoder(impl: Any) -> None:
    lane, _, _ = make(impl, 2)
    for i in range(2):
        lane.start(i, i, template(4, "c", "g", 1, f"m{i}", None), 0, 3000)
    lane.due(0, 0, bytearray())
    plain = answer(1, 4, 0)
    tagged = sized(plain[4:8] + b"\x01\x00\x02hi" + plain[9:])  # a tag in its header
    other = answer(2, 3, 0)  # v3's layout on a v4 lane
    lane.stop(1)
    _, unusual, _ = read(lane, tagged + other, 7)
    # Both to the caller, who decodes them; the second's member has left (not current).
    assert unusual == [
        (0, HEARTBEAT, True, 7, 0, tagged[4:]),
        (1, HEARTBEAT, False, 7, 0, other[4:]),
    ]
    assert framing.decode_response(HEARTBEAT, 4, tagged[4:])[1].error_code == 0


def sized(inner: bytes) -> bytes:
    return len(inner).to_bytes(4, "big") + inner


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("size", [-(2**31), -1, 0, 1, 2, 3, 13])
def test_sizes_that_cannot_be_frames_raise(impl: Any, size: int) -> None:
    """Below 4 a frame cannot hold its correlation id; above max_size it is refused. The
    frames before the bad one stay handled."""
    lane, latency, _ = make(impl, 1)
    lane.start(0, 0, template(4, "c", "g", 1, "m", None), 0, 3000)
    lane.due(0, 0, bytearray())
    buf = answer(1, 4, 0) + size.to_bytes(4, "big", signed=True) + bytes(20)
    with pytest.raises(ProtocolError, match=rf"response frame of {size} bytes"):
        lane.read(bytearray(buf), 0, 12, 4, 0, [], [])
    assert latency[0, twin.COUNT] == 1


@pytest.mark.parametrize("impl", IMPLS)
def test_the_walk_starts_at_pos_and_refuses_what_cannot_be(impl: Any) -> None:
    lane, _, _ = make(impl, 0)
    assert lane.read(bytearray(b"junk" + answer(5, 4, 0)), 4, MAX, 4, 0, [], []) == 20
    for pos in (-1, 5):
        with pytest.raises(ValueError, match="pos is outside buf"):
            lane.read(bytearray(4), pos, 100, 4, 0, [], [])
    with pytest.raises(ValueError, match="Heartbeat v-1"):
        lane.read(bytearray(4), 0, 100, -1, 0, [], [])


# -- consumer-protocol heartbeats -------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_the_consumer_templates_are_what_a_steady_member_sends_and_hears(version: int) -> None:
    frame = consumer_template(version, "m", 7)
    header, request, extra = framing.decode_request(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id, extra) == (
        CGH,
        version,
        0,
        0,
    )
    assert request == steady("m", 7)
    assert request.rebalance_timeout_ms == -1 and request.topic_partitions is None
    expected = consumer_heartbeat_answer(version, "m", 7, INTERVAL)
    assert expected == consumer_answer(0, version, member_id="m", member_epoch=7)[8:]
    # No throttle, no error, no message, the member's id, epoch and interval, no
    # assignment, no tagged fields: the steady answer every heartbeat of the member gets.
    _, decoded = framing.decode_response(CGH, version, (0).to_bytes(4, "big") + expected)
    assert decoded == ConsumerGroupHeartbeatResponse(0, 0, None, "m", 7, INTERVAL, None)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("version", [0, 1])
def test_consumer_heartbeats_answered_as_expected_are_recorded_and_others_returned(
    impl: Any, version: int
) -> None:
    lane, latency, _ = make(impl, 3)
    for i in range(3):
        lane.start(
            i,
            f"m{i}",
            consumer_template(version, f"m{i}", 4),
            0,
            INTERVAL,
            consumer_heartbeat_answer(version, f"m{i}", 4, INTERVAL),
        )
        assert lane.confirmed(i) is None
    out = bytearray()
    assert lane.due(100, 0, out) == 3
    assert [framing.decode_request(f[4:])[1] for f in frames_of(out)] == [
        steady(f"m{i}", 4) for i in range(3)
    ]
    lane.stamp(1_000)
    plain = consumer_answer(1, version, member_id="m0", member_epoch=4)
    moved = consumer_answer(2, version, member_id="m1", member_epoch=5)  # a new epoch
    given = consumer_answer(
        3,
        version,
        member_id="m2",
        member_epoch=4,
        assignment=ConsumerGroupHeartbeatResponseAssignment([]),
    )
    end, unusual, others = read(lane, plain + moved + given, 9_000)
    assert end == len(plain + moved + given) and others == []
    assert unusual == [
        ("m1", CGH, True, 8_000, 0, moved[4:]),
        ("m2", CGH, True, 8_000, 0, given[4:]),
    ]
    assert latency[0, twin.COUNT] == 1 and latency[0, twin.SUM] == 8_000
    assert lane.in_flight == 0
    assert [lane.confirmed(i) for i in range(3)] == [100, None, None]
    # The slot stopped while its heartbeat is out: its answer is not current.
    lane.due(INTERVAL + 100, 3, bytearray())
    lane.stop(0)
    assert lane.confirmed(0) is None
    late = consumer_answer(4, version, member_id="m0", member_epoch=4)
    assert read(lane, late, 10_000)[1] == [("m0", CGH, False, 10_000, 0, late[4:])]
    assert latency[0, twin.COUNT] == 1


@pytest.mark.parametrize("impl", IMPLS)
def test_a_consumer_heartbeat_answered_in_error_is_returned_whole(impl: Any) -> None:
    lane, latency, _ = make(impl, 1)
    expected = consumer_heartbeat_answer(1, "m", 4, INTERVAL)
    lane.start(0, "m", consumer_template(1, "m", 4), 0, INTERVAL, expected)
    lane.due(0, 0, bytearray())
    fenced = consumer_answer(1, 1, error_code=110, member_epoch=-1)
    # Its classic reading would find an error code where there is none: it is not read so.
    assert read(lane, fenced, 5, version=4)[1] == [("m", CGH, True, 5, 0, fenced[4:])]
    assert latency[0, twin.COUNT] == 0


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([0, 1]),
    st.text(max_size=30),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(1, 2**31 - 1),
    st.data(),
)
def test_an_answer_differing_from_the_expected_in_any_byte_is_unusual(
    version: int, member: str, epoch: int, interval: int, data: st.DataObject
) -> None:
    """The expected answer itself is a plain success; any byte changed, added or taken
    away, and the answer goes back to the caller whole, in both implementations alike."""
    expected = consumer_heartbeat_answer(version, member, epoch, interval)
    how = data.draw(st.sampled_from(["same", "changed", "added", "removed"]))
    body = bytearray(expected)
    if how == "changed":
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] ^= data.draw(st.integers(1, 255))
    elif how == "added":
        body.insert(data.draw(st.integers(0, len(body))), data.draw(st.integers(0, 255)))
    elif how == "removed":
        del body[data.draw(st.integers(0, len(body) - 1))]
    frame = sized((1).to_bytes(4, "big") + bytes(body))
    results = []
    for impl in (compiled.Lane, twin.Lane):
        lane, latency, _ = make(impl, 1)
        lane.start(0, "t", consumer_template(version, member, epoch), 0, 1, expected)
        lane.due(0, 0, bytearray())
        _, unusual, others = read(lane, frame, 3)
        results.append((unusual, others, int(latency[0, twin.COUNT]), lane.confirmed(0)))
    assert results[0] == results[1]
    if how == "same":
        assert results[0] == ([], [], 1, 0)
    else:
        assert results[0] == ([("t", CGH, True, 3, 0, frame[4:])], [], 0, None)


# -- commits ---------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("version", [2, 7, 8])
def test_commits_advance_their_offsets_and_plain_successes_are_counted(
    impl: Any, version: int
) -> None:
    lane, latency, commits = make(impl, 1)
    request = commit_request([5, 0, 70])
    frame, offsets_at = commit_template(version, "c", request)
    lane.start(0, "m", template(4, "c", "g", 3, "m", None), 10_000, 3000)
    lane.start_commits(
        0, frame, offsets_at, commit_offsets(request), commit_answer(version, request), 0, 500
    )
    out = bytearray()
    cid = lane.due(0, 0, out)
    cid = lane.due(500, cid, out)
    sent = frames_of(out)
    for n, frame_sent in enumerate(sent, 1):
        header, decoded, _ = framing.decode_request(frame_sent[4:])
        assert header.correlation_id == n
        assert decoded == commit_request([5 + n, n, 70 + n])
    buf = commit_response(1, version, [0, 0, 0]) + commit_response(2, version, [0, 22, 0])
    _, unusual, others = read(lane, buf, 9)
    assert others == [] and list(commits) == [1, 3] and latency[1, twin.COUNT] == 1
    assert unusual == [("m", COMMIT, True, 9, 0, buf[len(buf) // 2 + 4 :])]
    assert lane.stop(0) == [7, 2, 72]


@pytest.mark.parametrize("impl", IMPLS)
def test_a_commit_answered_after_its_member_left_is_reported(impl: Any) -> None:
    lane, _, commits = make(impl, 1)
    request = commit_request([1])
    frame, offsets_at = commit_template(8, "c", request)
    lane.start(0, "m", template(4, "c", "g", 3, "m", None), 10_000, 3000)
    lane.start_commits(0, frame, offsets_at, [1], commit_answer(8, request), 0, 500)
    lane.due(0, 0, bytearray())
    assert lane.stop(0) == [2]
    ok = commit_response(1, 8, [0])
    _, unusual, _ = read(lane, ok, 9)
    assert unusual == [("m", COMMIT, False, 9, 0, ok[4:])] and list(commits) == [0, 0]
    with pytest.raises(ValueError, match="slot 0 is stopped"):
        lane.start_commits(0, frame, offsets_at, [1], b"", 0, 500)


# -- a lost connection ------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_a_lost_connection_names_every_member_heartbeating_on_it(impl: Any) -> None:
    lane, _, _ = make(impl, 4)
    for i in (0, 1, 3):
        lane.start(i, f"m{i}", template(4, "c", "g", 1, f"m{i}", None), 10 * i, 3000)
    lane.stop(1)
    lane.due(0, 0, bytearray())
    assert lane.in_flight == 1
    assert lane.lost() == ["m0", "m3"]
    assert lane.in_flight == 0
    assert read(lane, answer(1, 4, 0), 1)[2] == [(1, answer(1, 4, 0)[4:])]  # forgotten


# -- checks on what the lane is given ---------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_what_cannot_be_sent_is_refused(impl: Any) -> None:
    lane, _, _ = make(impl, 2)
    good = template(4, "c", "g", 1, "m", None)
    with pytest.raises(IndexError, match="slot 2 of 2"):
        lane.start(2, "m", good, 0, 1)
    with pytest.raises(TypeError, match="the heartbeat frame is bytearray"):
        lane.start(0, "m", bytearray(good), 0, 1)
    with pytest.raises(ValueError, match="a heartbeat frame of 11 bytes"):
        lane.start(0, "m", good[:11], 0, 1)
    with pytest.raises(ValueError, match="a heartbeat interval of 0 ms"):
        lane.start(0, "m", good, 0, 0)
    lane.start(0, "m", good, 0, 1)
    with pytest.raises(ValueError, match="slot 0 belongs to another member"):
        lane.start(0, "other", good, 0, 1)
    with pytest.raises(ValueError, match=re.escape("2 offset positions for 1 offsets")):
        lane.start_commits(0, good, [12, 13], [1], b"", 0, 1)
    with pytest.raises(ValueError, match=f"an offset at {len(good) - 7} of a {len(good)}-byte"):
        lane.start_commits(0, good, [len(good) - 7], [1], b"", 0, 1)
    with pytest.raises(ValueError, match="an offset of -1"):
        lane.start_commits(0, good, [12], [-1], b"", 0, 1)
    with pytest.raises(ValueError, match="correlation id -1"):
        lane.due(0, -1, bytearray())
    with pytest.raises(ValueError, match="the latency sink must be"):
        impl(1, np.zeros((2, ROW), np.int32), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="the commit sink must be"):
        impl(1, np.zeros((2, ROW), np.int64), np.zeros(3, np.int64))


def test_the_lanes_buckets_are_the_histograms() -> None:
    assert twin.BUCKETS == histogram.BUCKETS and twin.LIMIT_US == histogram.LIMIT_US
    values = [0, 1, 999, 1000, 31_999, 32_000, 33_000, 10**9, 2**30 * 1000 - 1, 2**30 * 1000]
    values += [-5, -1000, 2**62]
    rng = np.random.default_rng(7)
    values += [int(v) for v in rng.lognormal(13, 3, 2000)]
    expected = histogram.bucket_of(np.array(values, np.int64) // 1000)
    assert [twin.bucket_of_ns(v) for v in values] == list(expected)
    # And the compiled lane's, through a one-slot lane that answers each latency.
    lane, latency, _ = make(compiled.Lane, 1)
    lane.start(0, 0, template(4, "c", "g", 1, "m", None), 0, 1)
    counts = np.zeros(histogram.BUCKETS, np.int64)
    for i, ns in enumerate(values, 1):
        lane.due(i, i - 1, bytearray())
        lane.stamp(0)
        read(lane, answer(i, 4, 0), ns)
        counts[expected[i - 1]] += 1
    assert list(latency[0, : histogram.BUCKETS]) == list(counts)


# -- compiled and twin on arbitrary programs --------------------------------------------------

VERSIONS = st.sampled_from([0, 3, 4])
KINDS = ["start", "commits", "stop", "due", "due", "stamp", "answers", "answers", "claim", "lost"]


Program = tuple[int, tuple[int, int], list[tuple[Any, ...]]]


@st.composite
def programs(draw: st.DrawFn) -> Program:
    """A lane's life: members started and stopped (classic and consumer-protocol ones, each
    slot either from one start to the next), clocks, and answers of every kind."""
    slots = draw(st.integers(0, 6))
    versions = (draw(VERSIONS), draw(st.sampled_from([0, 1])))  # Heartbeat's, CGH's
    slot = st.integers(-1, slots)
    ms = st.one_of(st.integers(-3_000, 30_000), st.integers(-(2**40), 2**40))
    ops: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(KINDS))
        if kind == "start":
            ops.append(
                (
                    kind,
                    draw(slot),
                    draw(st.integers(0, 2)),
                    draw(st.integers(0, 3)),
                    draw(ms),
                    draw(st.sampled_from([1, 7, 100, 3000, 20_000, 2**31 - 1])),
                    draw(st.booleans()),  # a consumer-protocol member
                )
            )
        elif kind == "commits":
            partitions = draw(st.lists(st.integers(0, 2**40), max_size=3))
            ops.append(
                (kind, draw(slot), partitions, draw(ms), draw(st.sampled_from([1, 50, 5000])))
            )
        elif kind == "stop":
            ops.append((kind, draw(slot)))
        elif kind == "due":
            ops.append((kind, draw(ms)))
        elif kind == "stamp":
            ops.append((kind, draw(st.integers(0, 2**50))))
        elif kind == "answers":
            choices = draw(st.lists(st.integers(0, 9), max_size=8))
            ops.append((kind, choices, draw(st.integers(0, 2**50)), draw(st.integers(0, 40))))
        elif kind == "claim":
            ops.append((kind, draw(st.integers(0, 9)), draw(st.integers(0, 2**50))))
        else:
            ops.append((kind,))
    return slots, versions, ops


class Run:
    """One implementation's life through a program, and everything it gave back."""

    def __init__(self, impl: Any, slots: int, versions: tuple[int, int]) -> None:
        self.lane, self.latency, self.commits = make(impl, slots)
        self.slots = slots
        self.version, self.consumer_version = versions
        self.correlation = 0
        # (correlation id, api key, the request), oldest first
        self.sent: list[tuple[int, int, Any]] = []
        self.buf = bytearray()
        self.pending = b""  # answers not yet read: a read may end inside a frame
        self.log: list[Any] = []

    def act(self, op: tuple[Any, ...]) -> None:
        kind, *args = op
        lane = self.lane
        if kind == "start":
            slot, member, generation, due, interval, consumer = args
            if consumer:
                v = self.consumer_version
                frame = consumer_template(v, f"m{member}", generation)
                expected = consumer_heartbeat_answer(v, f"m{member}", generation, INTERVAL)
                started = outcome(lane.start, slot, f"token{slot}", frame, due, interval, expected)
            else:
                frame = template(self.version, "c", "g", generation, f"m{member}", None)
                started = outcome(lane.start, slot, f"token{slot}", frame, due, interval)
            self.log.append(started)
        elif kind == "commits":
            slot, partitions, due, interval = args
            request = commit_request(partitions, member=f"m{slot}")
            frame, at = commit_template(8, "c", request)
            self.log.append(
                outcome(
                    lane.start_commits,
                    slot,
                    frame,
                    at,
                    partitions,
                    commit_answer(8, request),
                    due,
                    interval,
                )
            )
        elif kind == "stop":
            self.log.append(outcome(lane.stop, args[0]))
        elif kind == "due":
            out = bytearray()
            result = outcome(lane.due, args[0], self.correlation, out)
            self.log.append((result, bytes(out)))
            if result[0] == "ok":
                self.correlation = result[1]
                for frame in frames_of(out):
                    header, request, _ = framing.decode_request(frame[4:])
                    self.sent.append((header.correlation_id, header.api_key, request))
        elif kind == "stamp":
            lane.stamp(args[0])
        elif kind == "answers":
            choices, now, cut = args
            self.pending += self._answers(choices)
            take = len(self.pending) - min(cut, len(self.pending))
            self.buf += self.pending[:take]
            self.pending = self.pending[take:]
            unusual: list[Any] = []
            others: list[Any] = []
            result = outcome(lane.read, self.buf, 0, MAX, self.version, now, unusual, others)
            self.log.append((result, unusual, others))
            if result[0] == "ok":
                del self.buf[: result[1]]
            else:
                self.buf.clear()
        elif kind == "claim":
            if self.sent:
                correlation, api, request = self.sent.pop(args[0] % len(self.sent))
                unusual = []
                frame = self._answer(correlation, api, request, args[0])[4:]
                claimed = outcome(lane.claim, correlation, frame, self.version, args[1], unusual)
                self.log.append((claimed, unusual))
        else:
            self.log.append(lane.lost())
            self.sent.clear()
        confirmed = [lane.confirmed(i) for i in range(self.slots)]
        self.log.append((lane.in_flight, self.latency.tolist(), self.commits.tolist(), confirmed))

    def _answer(self, correlation: int, api: int, request: Any, choice: int) -> bytes:
        if api == CGH:
            v = self.consumer_version
            steady = {"member_id": request.member_id, "member_epoch": request.member_epoch}
            if choice < 5:  # the steady answer (its slot's, unless restarted since)
                return consumer_answer(correlation, v, **steady)
            changed: dict[str, Any] = [
                {"throttle_time_ms": 1},
                {"error_code": 110, "error_message": "fenced"},
                {"member_epoch": request.member_epoch + 1},
                {"heartbeat_interval_ms": INTERVAL + 1},
                {"assignment": ConsumerGroupHeartbeatResponseAssignment([])},
            ][choice - 5]
            return consumer_answer(correlation, v, **{**steady, **changed})
        if api == COMMIT:
            errors = [0, 0, 0] if choice < 6 else [0, choice, 0]
            return commit_response(correlation, 8, errors[: 1 + choice % 3])
        if choice < 6:
            return answer(correlation, self.version, 0, throttle=choice)
        if choice == 6:
            return answer(correlation, self.version, 27)
        return answer(correlation, (self.version + 1) % 5, choice)  # another layout

    def _answers(self, choices: list[int]) -> bytes:
        out = b""
        for choice in choices:
            if choice == 9 or not self.sent:  # not the lane's
                out += framing.encode_response(10**6 + choice, 3, LeaveGroupResponse(0))
            elif choice == 8 and len(self.sent) > 1:  # out of order
                correlation, api, request = self.sent.pop(1)
                out += self._answer(correlation, api, request, choice)
            else:
                correlation, api, request = self.sent.pop(0)
                out += self._answer(correlation, api, request, choice)
        return out


@settings(max_examples=500, deadline=None)
@given(programs())
def test_the_lane_matches_its_twin(program: Program) -> None:
    slots, versions, ops = program
    runs = [Run(compiled.Lane, slots, versions), Run(twin.Lane, slots, versions)]
    for op in ops:
        for run in runs:
            run.act(op)
        assert runs[0].log == runs[1].log, op


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 20_000), min_size=1, max_size=40),
    st.lists(st.integers(0, 2_000), min_size=1, max_size=60),
)
def test_the_wheel_sends_every_heartbeat_the_walk_would(
    intervals: list[int], steps: list[int]
) -> None:
    """Many members and long runs of the clock, forwards and sometimes back: the compiled
    lane's timing wheel must find exactly the heartbeats due, as the twin's walk does."""
    lanes = [make(impl, len(intervals))[0] for impl in (compiled.Lane, twin.Lane)]
    correlation = 0
    now = 0
    for i, interval in enumerate(intervals):
        for lane in lanes:
            lane.start(i, i, template(4, "c", "g", 1, f"m{i}", None), interval // 3, interval)
    for step in steps:
        now += step if step % 17 else -step  # now and then the clock goes back
        outs = [bytearray(), bytearray()]
        ends = [lane.due(now, correlation, out) for lane, out in zip(lanes, outs, strict=True)]
        assert ends[0] == ends[1] and outs[0] == outs[1]
        # Every heartbeat answered at once, so that each is sent when it is due.
        answers = b"".join(answer(c, 4, 0) for c in range(correlation + 1, ends[0] + 1))
        for lane in lanes:
            assert read(lane, answers, 1)[1:] == ([], [])
        correlation = ends[0]


# -- the poller ------------------------------------------------------------------------------

POLLERS = [pytest.param(compiled, id="compiled"), pytest.param(twin, id="twin")]


def socketpair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    return ours, theirs


def poll_until(poller: Any, count: int = 1) -> list[Any]:
    """What polls give until `count` owners were heard (the socket pair is quick)."""
    heard: list[Any] = []
    deadline = time.monotonic() + 5
    while len(heard) < count and time.monotonic() < deadline:
        select.select([poller.fileno()], [], [], 0.1)
        heard += poller.poll()
    return heard


@pytest.mark.parametrize("module", POLLERS)
def test_the_poller_reads_each_ready_socket_into_its_lane(module: Any) -> None:
    latency, commits = sinks()
    poller = module.Poller(MAX)
    pairs = [socketpair() for _ in range(3)]
    lanes = []
    try:
        for i, (ours, _) in enumerate(pairs):
            lane = module.Lane(1, latency, commits)
            lane.start(0, f"m{i}", template(4, "c", "g", 1, f"m{i}", None), 0, 3000)
            lane.due(0, 0, bytearray())
            lane.stamp(time.perf_counter_ns())
            poller.add(ours.fileno(), lane, f"owner{i}", 4)
            lanes.append(lane)
        assert poller.poll() == [] and len(poller) == 3
        leave = framing.encode_response(7, 3, LeaveGroupResponse(error_code=0))
        pairs[0][1].sendall(answer(1, 4, 0))  # a plain success: nothing to hear
        pairs[1][1].sendall(answer(1, 4, 27)[:5])  # half an answer: nothing yet
        pairs[2][1].sendall(leave + answer(1, 4, 27))
        heard = poll_until(poller)
        assert [(h[0], h[3], h[4]) for h in heard] == [("owner2", [(7, leave[4:])], None)]
        assert [u[:3] + u[4:] for u in heard[0][2]] == [("m2", HEARTBEAT, True, 27, None)]
        assert latency[0, twin.COUNT] == 1 and lanes[0].in_flight == 0
        assert lanes[0].received_at_ns >= heard[0][1] - 10**9
        pairs[1][1].sendall(answer(1, 4, 27)[5:])
        heard = poll_until(poller)
        assert [(h[0], [u[4] for u in h[2]], h[4]) for h in heard] == [("owner1", [27], None)]
        # The peer closes one; the socket's end is told once it is read.
        pairs[0][1].close()
        heard = poll_until(poller)
        assert [(h[0], type(h[4])) for h in heard] == [("owner0", EOFError)]
        poller.remove(pairs[0][0].fileno())
        assert len(poller) == 2
    finally:
        poller.close()
        for ours, theirs in pairs:
            ours.close()
            theirs.close()


@pytest.mark.parametrize("module", POLLERS)
def test_the_poller_refuses_what_cannot_be_polled(module: Any) -> None:
    latency, commits = sinks()
    poller = module.Poller(MAX)
    ours, theirs = socketpair()
    try:
        lane = module.Lane(0, latency, commits)
        poller.add(ours.fileno(), lane, "o", 4)
        with pytest.raises(ValueError, match=f"file descriptor {ours.fileno()} is polled already"):
            poller.add(ours.fileno(), lane, "o", 4)
        with pytest.raises(ValueError, match="Heartbeat v-1"):
            poller.add(theirs.fileno(), lane, "o", -1)
        theirs.sendall((3).to_bytes(4, "big") + bytes(8))  # a frame too short to be one
        heard = poll_until(poller)
        assert [(h[0], type(h[4])) for h in heard] == [("o", ProtocolError)]
        poller.remove(ours.fileno())
        poller.remove(ours.fileno())  # and again: nothing
    finally:
        poller.close()
        ours.close()
        theirs.close()
    with pytest.raises(ValueError, match="the poller is closed"):
        poller.poll()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9)), max_size=30), st.data())
def test_the_poller_matches_its_twin(sends: list[tuple[int, int]], data: st.DataObject) -> None:
    """Three lanes of two members each, answers of every kind cut anywhere: the compiled
    poller and the twin hear the same, and their lanes record the same."""
    results = []
    chunks = []
    for module in (compiled, twin):
        latency, commits = sinks()
        poller = module.Poller(MAX)
        pairs = [socketpair() for _ in range(3)]
        heard: list[Any] = []
        try:
            for k, (ours, _) in enumerate(pairs):
                lane = module.Lane(2, latency, commits)
                for i in range(2):
                    lane.start(i, (k, i), template(3, "c", "g", 1, f"m{i}", None), 0, 3000)
                lane.due(0, 0, bytearray())
                lane.stamp(0)
                poller.add(ours.fileno(), lane, k, 3)
            for n, (k, choice) in enumerate(sends):
                if len(chunks) <= n:
                    frame = _any_answer(choice, 1 + choice % 2)
                    cut = data.draw(st.integers(0, len(frame)))
                    chunks.append((frame[:cut], frame[cut:]))
                for part in chunks[n]:
                    pairs[k][1].sendall(part)
                    heard += [
                        (h[0], [u[:3] + u[4:] for u in h[2]], h[3], repr(h[4]))
                        for h in _drain(poller)
                    ]
            results.append((heard, latency[:, twin.COUNT].tolist()))
        finally:
            poller.close()
            for ours, theirs in pairs:
                ours.close()
                theirs.close()
    assert results[0] == results[1]


def _drain(poller: Any) -> list[Any]:
    """Poll until the sockets have nothing more to read (a socket pair's bytes are there
    as soon as they are sent)."""
    heard: list[Any] = []
    for _ in range(10):
        if not select.select([poller.fileno()], [], [], 0)[0]:
            break
        heard += poller.poll()
    return heard


def _any_answer(choice: int, correlation_id: int) -> bytes:
    if choice < 5:
        return answer(correlation_id, 3, 0)
    if choice < 7:
        return answer(correlation_id, 3, 27)
    if choice < 9:
        return answer(correlation_id, 4, 0)  # another layout
    return framing.encode_response(99, 3, LeaveGroupResponse(0))
