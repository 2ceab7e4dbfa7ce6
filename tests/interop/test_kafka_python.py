"""kafka-python consumers against the real `fastcoord serve`: a group forms, grows, shrinks,
and committed offsets outlive the members that committed them."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

from fastcoord.server import event_log
from tests.interop.server import RunningServer, fastcoord_server

TOPIC = "events"
PARTITIONS = 12


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    # Not 0: kafka-python 3.0.12 can strand a leader that assigned before its metadata
    # arrived. The metadata then triggers a rejoin; if a poll times out during that rejoin,
    # its next poll no longer awaits the join and its heartbeats stay disabled until the
    # session expires. A short initial delay (Kafka's is 3 s) lets the metadata arrive
    # before the first assignment.
    with fastcoord_server(
        tmp_path, "--group-initial-rebalance-delay-ms", "500", "--topic", f"{TOPIC}:{PARTITIONS}"
    ) as running:
        yield running


class Member:
    """A kafka-python consumer running its own poll loop, as an application would."""

    def __init__(self, server: RunningServer, name: str, group: str = "g") -> None:
        self.consumer = KafkaConsumer(
            bootstrap_servers=server.bootstrap,
            group_id=group,
            client_id=name,
            enable_auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
        )
        self.consumer.subscribe([TOPIC])
        self.owned: set[int] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._calls: list[tuple[Any, threading.Event, list[Any]]] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(timeout_ms=200)
            self.owned = {tp.partition for tp in self.consumer.assignment()}
            with self._lock:
                calls, self._calls = self._calls, []
            for fn, done, out in calls:  # KafkaConsumer is not thread-safe: call it here
                try:
                    out.append(fn(self.consumer))
                except Exception as exc:
                    out.append(exc)
                done.set()

    def call(self, fn: Any) -> Any:
        done, out = threading.Event(), []
        with self._lock:
            self._calls.append((fn, done, out))
        assert done.wait(30), "the consumer's poll loop did not run the call"
        if isinstance(out[0], Exception):
            raise out[0]
        return out[0]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close()


def settle(members: list[Member], timeout_s: float = 30) -> list[set[int]]:
    """Wait until the members' assignments cover the topic once, disjointly."""
    deadline = time.monotonic() + timeout_s
    while True:
        owned = [set(m.owned) for m in members]
        if (
            all(owned)
            and set().union(*owned) == set(range(PARTITIONS))
            and sum(len(o) for o in owned) == PARTITIONS
        ):
            return owned
        if time.monotonic() > deadline:
            raise AssertionError(f"assignments did not settle: {owned}")
        time.sleep(0.05)


def test_a_group_forms_grows_shrinks_and_keeps_its_offsets(server: RunningServer) -> None:
    group = [Member(server, f"c{i}") for i in range(3)]
    try:
        owned = settle(group)
        assert sorted(len(o) for o in owned) == [4, 4, 4]

        group.append(Member(server, "c3"))
        owned = settle(group)
        assert sorted(len(o) for o in owned) == [3, 3, 3, 3]

        leaving = group.pop(0)
        gone = set(leaving.owned)
        leaving.close()
        owned = settle(group)
        assert gone <= set().union(*owned)

        mine = owned[0]
        commits = {TopicPartition(TOPIC, p): OffsetAndMetadata(100 + p, "meta", -1) for p in mine}
        group[0].call(lambda c: c.commit(commits))
    finally:
        for m in group:
            m.close()

    reader = KafkaConsumer(
        bootstrap_servers=server.bootstrap,
        group_id="g",
        client_id="reader",
        enable_auto_commit=False,
    )
    try:
        for tp, committed in commits.items():
            assert reader.committed(tp) == committed.offset
    finally:
        reader.close()
    log = server.log()
    assert "rebalance completed" in log and "member left" in log

    # The event log has the same story, in Parquet, once the server has stopped.
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=15) == 0
    events = event_log.read(server.data_dir / "events").to_pylist()
    kinds = {e["kind"] for e in events}
    assert {"member_joined", "rebalance_started", "rebalance_completed", "sync_completed"} <= kinds
    assert [e["member_id"] for e in events if e["kind"] == "member_left"] != []
    committed = [e["members"] for e in events if e["kind"] == "offsets_committed"]
    assert committed == [len(commits)]
    completed = {
        (e["generation"], e["members"]) for e in events if e["kind"] == "rebalance_completed"
    }
    synced = {(e["generation"], e["members"]) for e in events if e["kind"] == "sync_completed"}
    assert synced <= completed and max(members for _, members in synced) == 4
