"""kafka-python consumers against the real `fastcoord serve`: a group forms, grows, shrinks,
and committed offsets outlive the members that committed them."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

from fastcoord.server import event_log
from fastcoord.testing import ServerProcess
from tests.interop.groups import TOPIC, group_server, settle
from tests.interop.kafka_python_member import Member


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with group_server(tmp_path) as running:
        yield running


def test_a_group_forms_grows_shrinks_and_keeps_its_offsets(server: ServerProcess) -> None:
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
