"""The Java client (kafka-clients' KafkaConsumer, each member a JVM of its own, run by
fastcoord.testing_java) against the real `fastcoord serve`, with the classic group
protocol and with Kafka's consumer group protocol (KIP-848).

Three members share a topic's partitions, each partition held once; a commit is read back
by the member that made it and by kafka-python's admin client; one member closes (it leaves
the group, exit code 0) and the other two take over all its partitions. A group of one
grows to three and shrinks back to one as members close, no session expiring. In a cluster
of three nodes, members bootstrapped through two of them find the third, their group's owner.
"""

from __future__ import annotations

import importlib.util
import signal
import socket
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, TopicPartition

from fastcoord import testing_java
from fastcoord.testing import ServerProcess, fastcoord_cluster, fastcoord_server
from fastcoord.testing_java import JavaMember
from tests.interop.test_cluster_routing import group_of

# A JVM a member: CPU enough to starve the timing of the suites beside them, so they run
# in the real-clients job (make test-cluster) rather than in make test.
pytestmark = pytest.mark.java

TOPIC = "orders"
PARTITIONS = 6
ALL = frozenset((TOPIC, p) for p in range(PARTITIONS))
SESSION_MS = 6000
HEARTBEAT_MS = 500


# In consumer protocol groups the coordinator sets the session and the heartbeat interval:
# short ones, as the classic members ask for theirs.
SERVER_FLAGS = (
    "--group-initial-rebalance-delay-ms",
    "0",
    "--topic",
    f"{TOPIC}:{PARTITIONS}",
    "--group-consumer-session-timeout-ms",
    str(SESSION_MS),
    "--group-consumer-min-session-timeout-ms",
    str(SESSION_MS),
    "--group-consumer-heartbeat-interval-ms",
    str(HEARTBEAT_MS),
    "--group-consumer-min-heartbeat-interval-ms",
    str(HEARTBEAT_MS),
)
PROTOCOLS = ["classic", "consumer"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with fastcoord_server(tmp_path, *SERVER_FLAGS) as running:
        yield running


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    with fastcoord_cluster(tmp_path_factory.mktemp("cluster"), 3, *SERVER_FLAGS) as nodes:
        yield nodes


def start(
    bootstrap: Sequence[str], group: str, name: str, protocol: str, directory: Path
) -> JavaMember:
    classic = protocol == "classic"  # consumer protocol members take the coordinator's
    return testing_java.start_member(
        bootstrap,
        [TOPIC],
        group,
        name=name,
        group_protocol=protocol,
        session_timeout_ms=SESSION_MS if classic else None,
        heartbeat_interval_ms=HEARTBEAT_MS if classic else None,
        directory=directory,
    )


def closed_port() -> str:
    """HOST:PORT where nothing listens (a port just freed), as a dead node of a cluster."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        return f"127.0.0.1:{probe.getsockname()[1]}"


def settle(members: Sequence[JavaMember], sizes: Sequence[int], timeout_s: float = 30) -> None:
    """Wait until the members' assignments cover the topic once, disjointly, with these
    sizes."""
    deadline = time.monotonic() + timeout_s
    while True:
        held = [m.assignment for m in members]
        covered = frozenset().union(*held) == ALL and sum(map(len, held)) == PARTITIONS
        if covered and sorted(map(len, held)) == sorted(sizes):
            return
        if time.monotonic() > deadline:
            state = {m.name: (sorted(m.assignment), m.events, m.log()) for m in members}
            raise AssertionError(f"assignments did not settle to sizes {sizes}: {state}")
        time.sleep(0.05)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_java_members_share_commit_and_take_over(
    server: ServerProcess, tmp_path: Path, protocol: str
) -> None:
    # The last member is given a dead node first, as a client of a cluster might be.
    bootstraps = [[server.bootstrap], [server.bootstrap], [closed_port(), server.bootstrap]]
    members = [
        start(bootstrap, "g", f"java-{i}", protocol, tmp_path)
        for i, bootstrap in enumerate(bootstraps)
    ]
    try:
        settle(members, [2, 2, 2])

        leaving, staying = members[0], members[1:]
        partition = min(p for _, p in leaving.assignment)
        leaving.commit(TOPIC, partition, 100 + partition)
        assert leaving.fetch(TOPIC, partition) == 100 + partition
        assert staying[0].fetch(TOPIC, partition) == 100 + partition

        assert leaving.close() == 0, leaving.log()
        assert leaving.events[-1] == "closed"
        settle(staying, [3, 3])
        # The members asked for the protocol they were given, and the group is theirs.
        confluent_admin = AdminClient({"bootstrap.servers": server.bootstrap})
        described = confluent_admin.describe_consumer_groups(["g"])["g"].result(timeout=15)
        assert described.type == ConsumerGroupType[protocol.upper()]
        assert sorted(m.client_id for m in described.members) == ["java-1", "java-2"]
        for member in members:
            assert member.errors == [], (member.name, member.log())
    finally:
        for member in members:
            member.stop()

    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        committed = admin.list_group_offsets({"g": None})["g"]
    finally:
        admin.close()
    assert {tp: o.offset for tp, o in committed.items()} == {
        TopicPartition(TOPIC, partition): 100 + partition
    }
    assert "member left" in server.log()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_java_group_grows_then_shrinks(
    server: ServerProcess, tmp_path: Path, protocol: str
) -> None:
    """One member holds every partition; two more join the Stable group, which hands them
    two thirds; then they close one after the other, and each close (a LeaveGroup, or a
    heartbeat leaving the consumer protocol group) moves its partitions to those staying:
    no session expires."""
    members = [start([server.bootstrap], "grows", "java-0", protocol, tmp_path)]
    try:
        settle(members, [PARTITIONS])
        members += [
            start([server.bootstrap], "grows", f"java-{i}", protocol, tmp_path) for i in (1, 2)
        ]
        settle(members, [2, 2, 2])
        for leaving, sizes in ((members[2], [3, 3]), (members[1], [PARTITIONS])):
            assert leaving.close() == 0, leaving.log()
            assert leaving.events[-1] == "closed"
            settle(members[: members.index(leaving)], sizes)
        assert members[0].assignment == ALL
        for member in members:
            assert member.errors == [], (member.name, member.log())
    finally:
        for member in members:
            member.stop()
    log = server.log()
    assert log.count("group grows: member left") == 3 and "member expired" not in log


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_java_members_find_their_coordinator_in_a_cluster(
    cluster: list[ServerProcess], tmp_path: Path, protocol: str
) -> None:
    """Bootstrapped through nodes 0 and 1, members of a group that node 2 owns: FindCoordinator
    sends them to node 2, and node 2 alone serves them."""
    group = group_of(2, f"java-{protocol}-")
    bootstrap = [cluster[0].bootstrap, cluster[1].bootstrap]
    members = [start(bootstrap, group, f"java-{i}", protocol, tmp_path) for i in range(2)]
    try:
        settle(members, [3, 3])
        partition = min(p for _, p in members[0].assignment)
        members[0].commit(TOPIC, partition, 7)
        assert members[1].fetch(TOPIC, partition) == 7
        assert members[0].close() == 0, members[0].log()
        settle(members[1:], [PARTITIONS])
        for m in members:
            assert m.errors == [], (m.name, m.log())
    finally:
        for m in members:
            m.stop()
    joined = [f"group {group}: member joined" in node.log() for node in cluster]
    assert joined == [False, False, True]


def test_a_killed_member_is_gone_at_once(server: ServerProcess, tmp_path: Path) -> None:
    with testing_java.start_member(server.bootstrap, [TOPIC], "alone", directory=tmp_path) as m:
        m.wait_for(lambda: m.partitions(TOPIC) == set(range(PARTITIONS)))
        m.kill()
        assert m.process.returncode == -signal.SIGKILL
        assert m.events[-1] != "closed" and m.pid not in testing_java._running


def test_without_javac_or_the_jars_a_member_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "")
    with pytest.raises(testing_java.JavaUnavailable, match="no javac on PATH"):
        testing_java.javac()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(testing_java.JavaUnavailable, match=testing_java.JAR_PACKAGE):
        testing_java.client_jars()


def test_bootstrap_lists_and_listed_partitions() -> None:
    assert testing_java.bootstrap_servers("a:1") == "a:1"
    assert testing_java.bootstrap_servers(["a:1", "b:2"]) == "a:1,b:2"
    assert testing_java._topic_partition("my-topic-11") == ("my-topic", 11)
