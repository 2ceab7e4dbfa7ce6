"""connections.max.idle.ms: silent connections close; busy ones, and ones waiting for their
own answers, stay open."""

from __future__ import annotations

import time
from pathlib import Path

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
)
from fastcoord.testing import fastcoord_server


def test_idle_connections_close_and_busy_or_waiting_ones_do_not(tmp_path: Path) -> None:
    with fastcoord_server(
        tmp_path,
        "--connections-max-idle-ms",
        "1000",
        "--group-initial-rebalance-delay-ms",
        "2500",  # a first JoinGroup waits longer than the idle limit
    ) as server:
        silent, busy, waiting = server.connect(), server.connect(), server.connect()
        try:
            waiting.send(
                JoinGroupRequest(
                    group_id="g",
                    session_timeout_ms=10_000,
                    rebalance_timeout_ms=10_000,
                    member_id="",
                    protocol_type="consumer",
                    protocols=[JoinGroupRequestProtocol("range", b"")],
                ),
                3,
            )
            started = time.monotonic()
            while time.monotonic() - started < 2.0:  # twice the limit, talking all along
                busy.send(ApiVersionsRequest(), 0)
                assert busy.receive(ApiKey.API_VERSIONS, 0).error_code == 0
                time.sleep(0.2)
            joined = waiting.receive(ApiKey.JOIN_GROUP, 3)  # answered, not cut off
            assert joined.error_code == 0
            assert silent.closed_by_server()
            busy.send(ApiVersionsRequest(), 0)
            assert busy.receive(ApiKey.API_VERSIONS, 0).error_code == 0
            port = silent.sock.getsockname()[1]
        finally:
            for c in (silent, busy, waiting):
                c.close()
        # The silent one went at the idle limit (1 s), not at some later sweep: before the
        # group's initial delay (2.5 s) was over, both by the server's clock.
        log = server.log()
        closed = log.find(f"closing idle connection from 127.0.0.1:{port}")
        assert 0 <= closed < log.find("group g: rebalance completed"), log
        assert log.count("closing idle connection") == 1  # neither the busy one nor the waiting
