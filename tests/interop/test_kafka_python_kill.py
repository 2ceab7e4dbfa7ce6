"""A kafka-python consumer killed with SIGKILL: it sends no LeaveGroup, so the coordinator
learns of its death only when its session times out; then the survivors own everything."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer

from tests.interop.server import RunningServer, fastcoord_server
from tests.interop.victim_proc import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS, Victim

TOPIC = "events"
PARTITIONS = 12


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    with fastcoord_server(
        tmp_path, "--group-initial-rebalance-delay-ms", "0", "--topic", f"{TOPIC}:{PARTITIONS}"
    ) as running:
        yield running


class Member:
    """A kafka-python consumer polling in a thread of its own, as an application would."""

    def __init__(self, server: RunningServer, name: str, group: str = "g") -> None:
        self.consumer = KafkaConsumer(
            bootstrap_servers=server.bootstrap,
            group_id=group,
            client_id=name,
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
        self.consumer.subscribe([TOPIC])
        # kafka-python 3.0.12 strands a leader whose rejoin was asked for only because its
        # first assignment was made before it knew the topic's partitions: if poll() times out
        # during that rejoin's SyncGroup, need_rejoin() is already False and the join is never
        # completed (no heartbeats; the session expires). Knowing the partitions before the
        # first poll avoids that rejoin.
        assert self.consumer.partitions_for_topic(TOPIC) == set(range(PARTITIONS))
        self.owned: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(timeout_ms=100)
            self.owned = {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def settle(owners: list[Any], timeout_s: float = 20) -> list[set[int]]:
    """Wait until the owners' assignments cover the topic once, disjointly, none empty."""
    deadline = time.monotonic() + timeout_s
    while True:
        owned = [set(o.owned) for o in owners]
        if (
            all(owned)
            and set().union(*owned) == set(range(PARTITIONS))
            and sum(len(o) for o in owned) == PARTITIONS
        ):
            return owned
        if time.monotonic() > deadline:
            raise AssertionError(f"assignments did not settle within {timeout_s} s: {owned}")
        time.sleep(0.02)


def test_a_killed_member_is_replaced_after_its_session_timeout(server: RunningServer) -> None:
    survivors: list[Member] = []
    victim = Victim("kafka-python", server.bootstrap, "g", TOPIC, "victim")
    try:
        for i in range(2):
            survivors.append(Member(server, f"s{i}"))
        owned = settle([*survivors, victim])
        assert sorted(len(o) for o in owned) == [4, 4, 4], victim.output()

        victim.kill()
        killed_at = time.monotonic()
        # The coordinator hears nothing more from the victim: it must expire its session
        # (6 s), rebalance, and hand the victim's partitions to the survivors.
        limit_s = SESSION_TIMEOUT_MS / 1000 + 4
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
