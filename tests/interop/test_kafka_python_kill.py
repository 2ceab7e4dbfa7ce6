"""A kafka-python consumer killed with SIGKILL: it sends no LeaveGroup, so the coordinator
learns of its death only when its session times out; then the survivors own everything."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastcoord.testing import ServerProcess
from tests.interop.groups import TOPIC, group_server, settle
from tests.interop.kafka_python_member import Member
from tests.interop.victim_proc import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS, Victim


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with group_server(tmp_path) as running:
        yield running


def test_a_killed_member_is_replaced_after_its_session_timeout(server: ServerProcess) -> None:
    survivors: list[Member] = []
    victim = Victim("kafka-python", server.bootstrap, "g", TOPIC, "victim")
    try:
        for i in range(2):
            survivors.append(
                Member(server, f"s{i}", "g", SESSION_TIMEOUT_MS, HEARTBEAT_INTERVAL_MS)
            )
        owned = settle([*survivors, victim])
        assert sorted(len(o) for o in owned) == [4, 4, 4], victim.output()

        victim.kill()
        killed_at = time.monotonic()
        # The coordinator hears nothing more from the victim: it must expire its session
        # (6 s), rebalance, and hand the victim's partitions to the survivors.
        limit_s = SESSION_TIMEOUT_MS / 1000 + 5  # "a few seconds", as for confluent
        owned = settle(survivors, timeout_s=limit_s)
        took_s = time.monotonic() - killed_at
        assert took_s <= limit_s
        # Not at the connection's close: a classic group knows its members only by their
        # heartbeats.
        assert took_s >= SESSION_TIMEOUT_MS / 2000
        assert sorted(len(o) for o in owned) == [6, 6]
    finally:
        victim.close()
        for m in survivors:
            m.close()
    log = server.log()
    assert "member expired victim-" in log and "(session timeout)" in log
