"""The admin port of the real `fastcoord serve`, with real clients: the Prometheus scrape
parsed by prometheus-client's own parser and checked against the groups the clients made,
the groups as JSON (sorted, filtered by state, in pages linked by a Link header that the
admin client follows), and the clear 4xx answers that bad HTTP gets."""

from __future__ import annotations

import contextlib
import http.client
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from kafka import OffsetAndMetadata, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from fastcoord.client.admin import AdminClient, AdminError, parse_address
from fastcoord.client.offsets import offset_commit_request
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.messages import OffsetCommitResponse
from fastcoord.testing import ServerProcess
from tests.interop.groups import TOPIC, group_server, settle
from tests.interop.kafka_python_member import Member


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with group_server(tmp_path, "--admin-port", "0") as running:
        yield running


def scrape(admin: AdminClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    samples = {}
    for family in text_string_to_metric_families(admin.metrics_text()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_match_three_kafka_python_consumers(server: ServerProcess) -> None:
    admin = AdminClient(server.admin)
    members = [Member(server, f"m{i}") for i in range(3)]
    try:
        settle(members)
        members[0].call(
            lambda c: c.commit(
                {TopicPartition(TOPIC, p): OffsetAndMetadata(7, "", -1) for p in members[0].owned}
            )
        )
        committed = len(members[0].owned)
        # Heartbeats come on the members' own clocks: a few, and one timed.
        deadline = time.monotonic() + 20
        while not (
            value(samples := scrape(admin), "fastcoord_requests_total", api="Heartbeat") >= 3
            and value(samples, "fastcoord_request_handling_seconds_count", api="Heartbeat") > 0
        ):
            assert time.monotonic() < deadline, samples
            time.sleep(0.1)
    finally:
        for m in members:
            m.close()

    assert value(samples, "fastcoord_members") == 3
    assert value(samples, "fastcoord_groups", state="Stable") == 1
    assert value(samples, "fastcoord_groups", state="Empty") == 0
    assert value(samples, "fastcoord_connections") >= 3
    assert value(samples, "fastcoord_requests_total", api="JoinGroup") >= 3
    assert value(samples, "fastcoord_requests_total", api="SyncGroup") >= 3
    assert value(samples, "fastcoord_requests_total", api="Heartbeat") >= 3
    assert value(samples, "fastcoord_requests_total", api="OffsetCommit") == 1
    assert value(samples, "fastcoord_offset_commits_total") == committed
    rebalances = value(samples, "fastcoord_rebalances_total")
    assert rebalances >= 1
    assert value(samples, "fastcoord_rebalance_duration_seconds_count") == rebalances
    assert value(samples, "fastcoord_rebalance_duration_seconds_bucket", le="+Inf") == rebalances
    assert value(samples, "fastcoord_member_expirations_total") == 0
    # The first JoinGroup of each member is answered MEMBER_ID_REQUIRED (KIP-394).
    assert (
        value(
            samples, "fastcoord_request_errors_total", api="JoinGroup", error="MEMBER_ID_REQUIRED"
        )
        == 3
    )
    joins = value(samples, "fastcoord_request_handling_seconds_count", api="JoinGroup")
    assert joins == value(samples, "fastcoord_requests_total", api="JoinGroup")
    heartbeats = value(samples, "fastcoord_request_handling_seconds_count", api="Heartbeat")
    assert 0 < heartbeats <= value(samples, "fastcoord_requests_total", api="Heartbeat")
    assert value(samples, "fastcoord_log_append_seconds_count") >= 2  # the group, the commit
    assert value(samples, "fastcoord_log_fsync_seconds_count") >= 2
    assert value(samples, "fastcoord_process_resident_memory_bytes") > 0
    # No label may carry a group or member id.
    for _, labels in samples:
        assert all(v not in ("g", "m0", "m1", "m2") for _, v in labels)


def test_groups_as_json(server: ServerProcess) -> None:
    admin = AdminClient(server.admin)
    members = [Member(server, f"m{i}") for i in range(2)]
    try:
        settle(members)
        groups = admin.groups()
        detail = admin.group("g")
    finally:
        for m in members:
            m.close()
    assert groups == [
        {
            "group_id": "g",
            "state": "Stable",
            "protocol_type": "consumer",
            "protocol": detail["protocol"],
            "generation": detail["generation"],
            "members": 2,
        }
    ]
    assert detail["protocol"] in ("range", "roundrobin")
    assert detail["leader"] in {m["member_id"] for m in detail["members"]}
    now_ms = time.time() * 1000
    for shown in detail["members"]:
        assert shown["client_id"] in ("m0", "m1")
        assert shown["client_host"] == "/127.0.0.1"
        assert shown["group_instance_id"] is None
        assert now_ms < shown["session_deadline_ms"] < now_ms + 11_000  # 10 s sessions
        assert shown["assignment_bytes"] > 0
    with pytest.raises(Exception, match="no group 'nobody'"):
        admin.group("nobody")


def commit_alone(server: ServerProcess, group_ids: list[str]) -> None:
    """An offset committed for each group by no member (a simple commit, as a tool that
    resets offsets does): each group is created Empty."""
    with server.connect() as conn:
        version = conn.version(ApiKey.OFFSET_COMMIT, 8)
        for group_id in group_ids:
            request = offset_commit_request(
                group_id,
                [(TOPIC, [0])],
                {},
                5,
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
            )
            answer = conn.request(request, version)
            assert isinstance(answer, OffsetCommitResponse)
            assert answer.topics[0].partitions[0].error_code == 0


def test_groups_sorted_filtered_and_in_pages(server: ServerProcess) -> None:
    admin = AdminClient(server.admin)
    empty = ["zeta", "alpha", "m/ix & match", "\u00e9t\u00e9", "beta"]
    members = [Member(server, f"m{i}") for i in range(2)]
    try:
        settle(members)
        commit_alone(server, empty)
        every = sorted([*empty, "g"])
        assert [g["group_id"] for g in admin.groups()] == every
        assert [g["group_id"] for g in admin.groups(state="stable")] == ["g"]
        assert [g["group_id"] for g in admin.groups(state=["Empty"])] == sorted(empty)
        assert admin.groups(state="Stable,Empty") == admin.groups()
        # In pages: the Link header over the wire, followed by the client.
        assert admin.groups(page_size=2) == admin.groups()
        first, after = admin.groups_page(limit=4)
        assert ([g["group_id"] for g in first], after) == (every[:4], every[3])
        rest, end = admin.groups_page(limit=4, after=after)
        assert ([g["group_id"] for g in rest], end) == (every[4:], None)
        connection = http.client.HTTPConnection(*parse_address(server.admin), timeout=10)
        try:
            connection.request("GET", "/v1/groups?state=Empty&limit=2")
            answer = connection.getresponse()
            body = answer.read()
        finally:
            connection.close()
        assert answer.status == 200
        assert [g["group_id"] for g in msgspec.json.decode(body)] == ["alpha", "beta"]
        assert answer.headers["Link"] == '</v1/groups?state=Empty&after=beta&limit=2>; rel="next"'
        with pytest.raises(AdminError) as refused:
            admin.groups(state="Balancing")
        assert refused.value.status == 400
        assert "the states are Empty, PreparingRebalance" in refused.value.message
        with pytest.raises(AdminError, match="limit must be a number from 1 to 10000"):
            admin.groups_page(limit=0)
    finally:
        for m in members:
            m.close()


def raw(address: str, data: bytes) -> tuple[int, bytes]:
    """Send `data` on a fresh connection; the status and body of the answer."""
    with socket.create_connection(parse_address(address), timeout=10) as conn:
        # It may answer and close before taking all of a huge request.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.sendall(data)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def test_bad_requests_get_clear_4xx_answers(server: ServerProcess) -> None:
    admin = AdminClient(server.admin)

    status, body = admin.request("POST", "/v1/faults", b'{"api": "Heartbeat", "error": 12345}')
    assert status == 400
    assert msgspec.json.decode(body) == {
        "error": "invalid fault rule: error: unknown Kafka error 12345"
    }
    status, body = admin.request("POST", "/v1/faults", b"{not json")
    assert status == 400 and b"not JSON" in body
    status, body = admin.request("GET", "/v2/nothing")
    assert status == 404 and b"no such resource: /v2/nothing" in body
    status, body = admin.request("DELETE", "/v1/faults/77")
    assert status == 404 and b"no fault rule 77" in body
    status, body = admin.request("PUT", "/metrics")
    assert status == 405 and b"PUT is not allowed here" in body

    huge = b"x" * 10_000_000
    status, body = raw(
        server.admin,
        b"POST /v1/faults HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(huge) + huge,
    )
    assert status == 413 and b"at most 65536" in body
    status, body = raw(server.admin, b"GET /metrics HTTP/1.1\r\n" + b"X-Long: y\r\n" * 5000)
    assert status == 431
    status, body = raw(server.admin, b"HELLO\r\n\r\n")
    assert status == 400 and b"not an HTTP/1.x request line" in body
    status, body = raw(server.admin, b"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
    assert status == 411

    # None of it cost the server anything: it still scrapes, and Kafka clients still work.
    assert "fastcoord_members" in admin.metrics_text()
    assert admin.faults() == []
    with server.connect() as conn:
        assert conn.api_versions()[int(ApiKey.HEARTBEAT)] == (0, 4)
