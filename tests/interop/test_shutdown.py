"""SIGTERM on a busy server: whatever waits is answered before the connection closes, the
event log is flushed, and the process exits 0."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
)
from fastcoord.server import event_log
from fastcoord.testing import fastcoord_server

WAIT_MS = 600_000


def test_sigterm_answers_waiting_requests_flushes_events_and_exits_0(tmp_path: Path) -> None:
    with fastcoord_server(
        tmp_path,
        # The first JoinGroup would wait 10 min, a Fetch 10 min: only shutdown can answer
        # them, and does at once or the test's waits run out, however loaded the machine.
        "--group-initial-rebalance-delay-ms",
        str(WAIT_MS),
        # A shutdown that waited for anything but its answers would wait this long.
        "--shutdown-grace-ms",
        str(WAIT_MS),
        "--event-log-flush-ms",
        str(WAIT_MS),  # so that only the shutdown flush can have written the events
        "--topic",
        "t:1",
    ) as server:
        waiting = server.connect()
        try:
            # On one connection, the Fetch first: once the JoinGroup after it is seen, the
            # server has read both (the Fetch leaves no line of its own to wait for).
            waiting.send(
                FetchRequest(
                    max_wait_ms=WAIT_MS,
                    min_bytes=1,
                    topics=[FetchTopic("t", [FetchPartition(0, fetch_offset=0)])],
                ),
                4,
            )
            waiting.send(
                JoinGroupRequest(
                    group_id="g",
                    session_timeout_ms=30_000,
                    rebalance_timeout_ms=60_000,
                    member_id="",
                    protocol_type="consumer",
                    protocols=[JoinGroupRequestProtocol("range", b"")],
                ),
                3,
            )
            deadline = time.monotonic() + 20
            while "member joined" not in server.log():
                assert time.monotonic() < deadline, server.log()
                time.sleep(0.02)
            server.process.send_signal(signal.SIGTERM)

            # In the order asked, as Kafka answers a connection's requests.
            fetched = waiting.receive(ApiKey.FETCH, 4)
            assert [t.topic for t in fetched.responses] == ["t"]
            joined = waiting.receive(ApiKey.JOIN_GROUP, 3)
            assert joined.error_code == ErrorCode.NOT_COORDINATOR
            assert joined.member_id  # the member it was, so that it can rejoin elsewhere
            assert waiting.closed_by_server()
            assert server.process.wait(timeout=10) == 0
        finally:
            waiting.close()

    events = event_log.read(tmp_path / "data" / "events").to_pylist()
    assert [(e["kind"], e["group_id"]) for e in events] == [
        ("member_joined", "g"),
        ("rebalance_started", "g"),
    ]
    assert events[0]["member_id"] == joined.member_id
    assert "stopped" in server.log()


def test_event_log_can_be_turned_off(tmp_path: Path) -> None:
    with fastcoord_server(tmp_path, "--event-log", "false") as server:
        pass
    assert server.process.returncode == 0
    assert not (tmp_path / "data" / "events").exists()
