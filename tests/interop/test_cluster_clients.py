"""Real clients against a three-node cluster, each given one node's address alone: they find
their groups' coordinators through it, as they find Kafka's, and every group reaches a
complete assignment on the node that owns it.

Six groups of three members for each client: kafka-python, confluent-kafka (librdkafka)
with the classic protocol and with `group.protocol=consumer`, aiokafka, and the Java
client. The groups' names spread them over the three nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest
from aiokafka import AIOKafkaConsumer

from fastcoord.cluster.routing import Node
from fastcoord.protocol.messages import ListGroupsRequest, ListGroupsResponse
from fastcoord.testing import ServerProcess, fastcoord_cluster
from fastcoord.testing_java import JavaMember, start_member
from tests.interop import groups
from tests.interop.confluent_members import PolledMember, Poller, confluent
from tests.interop.groups import TOPIC
from tests.interop.kafka_python_member import Member as KafkaPythonMember

NODES = 3
GROUPS_PER_CLIENT = 6
MEMBERS = 3
SESSION_TIMEOUT_MS = 10_000
SETTLE_S = 180  # a bound on the wait for every group, not a speed: CI runs this beside other jobs


class Owner(Protocol):
    @property
    def owned(self) -> set[int]: ...


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[ServerProcess]]:
    with fastcoord_cluster(
        tmp_path,
        NODES,
        "--in-memory",
        *groups.SERVER_ARGS,
    ) as running:
        yield running


class AiokafkaMembers:
    """aiokafka consumers on one event loop in a thread of their own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.members: list[PolledMember] = []
        self._tasks: list[asyncio.Future[None]] = []

    def add(self, bootstrap: str, group: str, client_ids: list[str]) -> list[PolledMember]:
        """Members of `group`, started together (each start is a few round trips)."""

        async def start(client_id: str) -> AIOKafkaConsumer:
            consumer = AIOKafkaConsumer(
                TOPIC,
                bootstrap_servers=bootstrap,
                group_id=group,
                client_id=client_id,
                enable_auto_commit=False,
                session_timeout_ms=SESSION_TIMEOUT_MS,
                heartbeat_interval_ms=500,
            )
            await consumer.start()
            return consumer

        async def start_all() -> list[AIOKafkaConsumer]:
            return list(await asyncio.gather(*(start(c) for c in client_ids)))

        consumers = asyncio.run_coroutine_threadsafe(start_all(), self.loop).result(60)
        members = [PolledMember(consumer) for consumer in consumers]
        self.members.extend(members)
        for member in members:
            self._tasks.append(asyncio.run_coroutine_threadsafe(self._run(member), self.loop))
        return members

    async def _run(self, member: PolledMember) -> None:
        consumer = member.consumer
        while True:
            await consumer.getmany(timeout_ms=200)
            member.owned = {tp.partition for tp in consumer.assignment()}

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()

        async def stop() -> None:
            await asyncio.gather(*(member.consumer.stop() for member in self.members))

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def listed(node: ServerProcess) -> set[str]:
    with node.connect() as c:
        answer = c.request(ListGroupsRequest(), 3)
        assert isinstance(answer, ListGroupsResponse)
        assert answer.error_code == 0
        return {g.group_id for g in answer.groups}


def settle_all(by_group: dict[str, list[Owner]]) -> None:
    deadline = time.monotonic() + SETTLE_S
    for group, members in by_group.items():
        left = max(1.0, deadline - time.monotonic())
        try:
            groups.settle(members, timeout_s=left)
        except AssertionError as exc:
            raise AssertionError(f"group {group}: {exc}") from None


pytestmark = pytest.mark.cluster


def test_every_client_finds_its_groups_coordinator_through_one_node(
    nodes: list[ServerProcess],
) -> None:
    bootstrap = nodes[0].bootstrap  # the others are learnt from Metadata
    by_group: dict[str, list[Owner]] = {}
    kafka_python: list[KafkaPythonMember] = []
    librdkafka = Poller()
    aiokafka = AiokafkaMembers()
    java: list[JavaMember] = []

    def names(kind: str) -> list[str]:
        return [f"{kind}-{i}" for i in range(GROUPS_PER_CLIENT)]

    try:
        for group in names("kafka-python"):
            by_group[group] = []
            for m in range(MEMBERS):
                member = KafkaPythonMember(
                    nodes[0], f"{group}-{m}", group, session_timeout_ms=SESSION_TIMEOUT_MS
                )
                kafka_python.append(member)
                by_group[group].append(member)
        for protocol in ("classic", "consumer"):
            for group in names(f"confluent-{protocol}"):
                by_group[group] = [
                    librdkafka.add(
                        confluent(bootstrap, group, f"{group}-{m}", protocol, SESSION_TIMEOUT_MS)
                    )
                    for m in range(MEMBERS)
                ]
        librdkafka.start()
        for group in names("aiokafka"):
            by_group[group] = list(
                aiokafka.add(bootstrap, group, [f"{group}-{m}" for m in range(MEMBERS)])
            )
        for group in names("java"):
            made = [
                start_member(
                    bootstrap,
                    [TOPIC],
                    group,
                    name=f"{group}-{m}",
                    session_timeout_ms=SESSION_TIMEOUT_MS,
                    heartbeat_interval_ms=500,
                )
                for m in range(MEMBERS)
            ]
            java.extend(made)
            by_group[group] = [JavaOwner(member) for member in made]
        settle_all(by_group)
        # Each node holds the groups of its own partitions, and together all of them.
        held = [listed(node) & set(by_group) for node in nodes]
        assert sum(len(h) for h in held) == len(by_group)
        assert set().union(*held) == set(by_group)
        for i, node_groups in enumerate(held):
            for group in node_groups:
                owner = routing_owner(nodes, group)
                assert owner == i, f"{group} is held by node {i}, owned by node {owner}"
        assert all(held), "the groups' names should spread them over every node"
    finally:
        # Every client's members leave at once: one by one, they took half a minute.
        for jmember in java:
            with contextlib.suppress(OSError):
                jmember.send("close")
        closing = [threading.Thread(target=m.close) for m in kafka_python]
        for thread in closing:
            thread.start()
        librdkafka.close()
        aiokafka.close()
        for thread in closing:
            thread.join(60)
        for jmember in java:
            jmember.stop()


class JavaOwner:
    def __init__(self, member: JavaMember) -> None:
        self.member = member

    @property
    def owned(self) -> set[int]:
        return set(self.member.partitions(TOPIC))


def routing_owner(nodes: list[ServerProcess], group: str) -> int:
    from fastcoord.cluster.routing import Cluster
    from fastcoord.core.native import partition

    listed_nodes = [Node(i, n.host, n.port) for i, n in enumerate(nodes)]
    return Cluster(listed_nodes, 0, 50, partition.partition_for).coordinator(group).node_id
