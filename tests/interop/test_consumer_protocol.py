"""confluent-kafka (librdkafka) consumers with `group.protocol=consumer` (Kafka's consumer
group protocol) against the real `fastcoord serve`.

A group grows and shrinks with complete, disjoint assignments handed over incrementally;
commits read back; a member killed with SIGKILL loses its partitions to the others once
its session times out; the admin client describes the group; and a SIGKILL of the server
loses nothing acknowledged: the group and its offsets come back from the log.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, TopicPartition
from confluent_kafka.admin import AdminClient

from fastcoord.testing import ServerProcess, fastcoord_server
from tests.interop.groups import PARTITIONS, TOPIC, covers_once, group_server
from tests.interop.test_confluent import Member, ProcMember, assert_no_errors, settle

SESSION_MS = 6000
# The coordinator sets consumer group members' sessions and heartbeats: short ones, so that
# a dead member is noticed within seconds.
CONSUMER_GROUPS = (
    "--group-consumer-session-timeout-ms",
    str(SESSION_MS),
    "--group-consumer-min-session-timeout-ms",
    str(SESSION_MS),
    "--group-consumer-heartbeat-interval-ms",
    "500",
    "--group-consumer-min-heartbeat-interval-ms",
    "500",
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with group_server(tmp_path, *CONSUMER_GROUPS) as running:
        yield running


def consumer(server: ServerProcess, name: str) -> Member:
    return Member(server, name, group="g", protocol="consumer")


def committed(server: ServerProcess) -> dict[int, int]:
    reader = Consumer(
        {"bootstrap.servers": server.bootstrap, "group.id": "g", "enable.auto.commit": False}
    )
    try:
        read = reader.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        reader.close()
    assert all(tp.error is None for tp in read), read
    return {tp.partition: tp.offset for tp in read}


def describe(server: ServerProcess) -> object:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    return admin.describe_consumer_groups(["g"], request_timeout=10)["g"].result(timeout=10)


def test_a_group_grows_and_shrinks_and_its_commits_read_back(server: ServerProcess) -> None:
    everyone: list[Member] = []
    try:
        group = [consumer(server, f"c{i}") for i in range(3)]
        everyone += group
        settle(group, [4, 4, 4])
        group.append(consumer(server, "c3"))
        everyone.append(group[-1])
        owned = settle(group, [3, 3, 3, 3])
        # Incremental: a member only ever gains or loses what moves; nothing is lost.
        assert all(kind != "lost" for m in everyone for kind, _ in m.events)

        leaving = group.pop(0)
        gone = leaving.owned
        leaving.close()  # a heartbeat with epoch -1: the others take its partitions at once
        owned = settle(group, [4, 4, 4])
        assert gone <= frozenset().union(*owned)

        mine = sorted(owned[0])
        offsets = [TopicPartition(TOPIC, p, 100 + p) for p in mine]
        answer = group[0].call(lambda c: c.commit(offsets=offsets, asynchronous=False))
        assert all(tp.error is None for tp in answer), answer
    finally:
        for m in everyone:
            m.close()
    assert_no_errors(everyone)
    read = committed(server)
    assert {p: o for p, o in read.items() if o >= 0} == {p: 100 + p for p in mine}
    log = server.log()
    assert "member joined" in log and "member left" in log


def test_a_killed_member_loses_its_partitions_after_its_session(server: ServerProcess) -> None:
    local = consumer(server, "local")
    procs = [ProcMember(server, name, protocol="consumer") for name in ("p1", "p2")]
    try:
        settle([local, *procs], [4, 4, 4])
        victim, survivor = procs
        gone = victim.owned
        killed_at = time.monotonic()
        victim.kill()
        after = settle([local, survivor], [6, 6], timeout_s=SESSION_MS / 1000 + 8)
        elapsed = time.monotonic() - killed_at
        assert elapsed >= SESSION_MS / 2000, f"moved after only {elapsed:.1f} s"
        assert gone <= after[0] | after[1]
        assert re.search(r"group g: member expired \S+ \(session timeout\)", server.log())
    finally:
        local.close()
        for p in procs:
            p.stop()
    assert_no_errors([local])


def test_the_admin_client_describes_a_consumer_group(server: ServerProcess) -> None:
    members = [consumer(server, f"c{i}") for i in range(2)]
    try:
        settle(members, [6, 6])
        deadline = time.monotonic() + 10
        while True:
            described = describe(server)
            if described.state == ConsumerGroupState.STABLE or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert described.type == ConsumerGroupType.CONSUMER
        assert described.state == ConsumerGroupState.STABLE
        assert described.partition_assignor == "uniform"
        assert sorted(m.client_id for m in described.members) == ["c0", "c1"]
        owned = [
            frozenset(tp.partition for tp in m.assignment.topic_partitions)
            for m in described.members
        ]
        assert covers_once(owned)
    finally:
        for m in members:
            m.close()


def test_a_sigkilled_server_loses_nothing_acknowledged(tmp_path: Path) -> None:
    args = ("--group-initial-rebalance-delay-ms", "0", "--topic", f"{TOPIC}:{PARTITIONS}")
    with fastcoord_server(tmp_path, *args, *CONSUMER_GROUPS) as server:
        members = [consumer(server, f"c{i}") for i in range(2)]
        try:
            owned = settle(members, [6, 6])
            offsets = [TopicPartition(TOPIC, p, 7) for p in sorted(owned[0])]
            answer = members[0].call(lambda c: c.commit(offsets=offsets, asynchronous=False))
            assert all(tp.error is None for tp in answer), answer
            before = describe(server)
            server.kill()
        finally:
            for m in members:
                m.close()
    with fastcoord_server(tmp_path, *args, *CONSUMER_GROUPS) as restarted:
        after = describe(restarted)
        assert after.type == ConsumerGroupType.CONSUMER
        assert sorted(m.member_id for m in after.members) == sorted(
            m.member_id for m in before.members
        )
        read = committed(restarted)
        assert {p: o for p, o in read.items() if o >= 0} == {p: 7 for p in owned[0]}
