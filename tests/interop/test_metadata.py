"""Metadata with real clients: topic listings, regex subscriptions, auto.create.topics.

confluent-kafka 2.16 (librdkafka) asks for every topic with a Metadata v12 request that
carries three bytes after its message; the server ignores them, as Kafka does, so
list_topics() and regex subscriptions work. auto.create.topics decides which undeclared
topics a subscription finds: always (the default: any topic a Metadata request names),
client (Kafka's rule: only when the request allows auto-creation, which librdkafka's
consumer does not and kafka-python's does), never.

A consumer that must get nothing is checked against a control: a consumer of the same
client on a declared topic, started with it, whose assignment shows how long a working
case takes on this run; the test waits well past that, and asks the server's metadata
whether the topic exists.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer

from fastcoord.testing import ServerProcess, fastcoord_server

DECLARED = {"orders-a": 3, "orders-b": 2, "payments": 4}
NUM_PARTITIONS = 3  # of a topic created on request
Owned = frozenset[tuple[str, int]]


@contextmanager
def metadata_server(tmp_path: Path, *args: str) -> Iterator[ServerProcess]:
    topics = [arg for name, count in DECLARED.items() for arg in ("--topic", f"{name}:{count}")]
    with fastcoord_server(
        tmp_path,
        "--group-initial-rebalance-delay-ms",
        "0",
        "--num-partitions",
        str(NUM_PARTITIONS),
        *topics,
        *args,
    ) as running:
        yield running


def partitions(*topics: tuple[str, int]) -> Owned:
    return frozenset((name, p) for name, count in topics for p in range(count))


class Member:
    """A consumer of either client in a poll loop of its own thread, as an application
    would run it: created, polled and closed in that thread. `owned` is its assignment."""

    def __init__(self, client: str, server: ServerProcess, group: str, topics: list[str]) -> None:
        self.client = client
        self.server = server
        self.group = group
        self.topics = topics
        self.owned: Owned = frozenset()
        self.errors: list[str] = []  # librdkafka's error events and poll errors
        self.started = time.monotonic()
        self.assigned_after: float | None = None  # seconds from start to an assignment
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{client}-{group}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self.client == "confluent":
            self._run_confluent()
        else:
            self._run_kafka_python()

    def _run_confluent(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.server.bootstrap,
                "group.id": self.group,
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "error_cb": lambda error: self.errors.append(str(error)),
            }
        )
        try:
            consumer.subscribe(self.topics)
            while not self._stop.is_set():
                msg = consumer.poll(0.05)
                if msg is not None and msg.error():
                    self.errors.append(str(msg.error()))
                self._owns(consumer.assignment())
        finally:
            consumer.close()

    def _run_kafka_python(self) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=self.server.bootstrap,
            group_id=self.group,
            enable_auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
            # On a loaded machine kafka-python's leader once assigned with metadata that did
            # not hold the topic yet (it logged "No partition metadata for topic") and did
            # not rejoin within 30 s: it rejoins when a metadata update shows the topic, and
            # the next periodic refresh is 5 minutes away by default.
            metadata_max_age_ms=2_000,
        )
        # No partitions_for_topic() first (tests/interop/kafka_python_member.py): it asks
        # for every topic, which creates none, and a leader that assigns with that view
        # must rejoin when its subscription's own Metadata request creates the topic.
        try:
            consumer.subscribe(self.topics)
            while not self._stop.is_set():
                consumer.poll(timeout_ms=200)
                self._owns(consumer.assignment())
        finally:
            consumer.close()

    def _owns(self, assignment: Any) -> None:
        self.owned = frozenset((tp.topic, tp.partition) for tp in assignment)
        if self.owned and self.assigned_after is None:
            self.assigned_after = time.monotonic() - self.started

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), f"{self.client} {self.group}: close did not finish"


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> float:
    """Wait for the condition; return the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)
    return time.monotonic() - start


def topic_metadata(server: ServerProcess, topic: str) -> tuple[int | None, int]:
    """A consumer's view of one topic: its error code (None: no error) and partition count.

    librdkafka's consumer asks with allow_auto_topic_creation false, so this creates
    nothing, whatever auto.create.topics says."""
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "metadata-probe"})
    try:
        metadata = consumer.list_topics(topic=topic, timeout=10)
        listed = set(consumer.list_topics(timeout=10).topics)
    finally:
        consumer.close()
    found = metadata.topics[topic]
    assert (topic in listed) == (found.error is None), (topic, listed, found.error)
    return (found.error.code() if found.error else None), len(found.partitions)


# -- listing topics ---------------------------------------------------------------------------


def listed(metadata: Any) -> dict[str, int]:
    assert all(t.error is None for t in metadata.topics.values()), metadata.topics
    return {name: len(t.partitions) for name, t in metadata.topics.items()}


def test_admin_and_consumer_list_every_declared_topic(tmp_path: Path) -> None:
    with metadata_server(tmp_path) as server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        assert listed(admin.list_topics(timeout=10)) == DECLARED
        assert listed(admin.list_topics(topic="orders-b", timeout=10)) == {"orders-b": 2}
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "lister"})
        try:
            assert listed(consumer.list_topics(timeout=10)) == DECLARED
        finally:
            consumer.close()
        assert "closing connection" not in server.log()


def test_a_regex_subscription_covers_the_matching_topics_once(tmp_path: Path) -> None:
    wanted = partitions(("orders-a", 3), ("orders-b", 2))
    with metadata_server(tmp_path) as server:
        group = [Member("confluent", server, "orders", ["^orders-.*"]) for _ in range(2)]
        try:

            def covered_once() -> bool:
                owned = [m.owned for m in group]
                return all(owned) and owned[0] | owned[1] == wanted and not owned[0] & owned[1]

            wait_until(covered_once, f"two members to share {sorted(wanted)}")
        finally:
            for m in group:
                m.close()
        assert not [e for m in group for e in m.errors], [m.errors for m in group]
        assert "closing connection" not in server.log()


# -- auto.create.topics -------------------------------------------------------------------------


def test_by_default_a_subscription_creates_its_topic(tmp_path: Path) -> None:
    with metadata_server(tmp_path) as server:
        member = Member("confluent", server, "g", ["undeclared"])
        try:
            wait_until(
                lambda: member.owned == partitions(("undeclared", NUM_PARTITIONS)),
                "the whole undeclared topic",
            )
        finally:
            member.close()
        assert topic_metadata(server, "undeclared") == (None, NUM_PARTITIONS)


def assert_no_assignment(subjects: list[Member], controls: list[Member]) -> None:
    """The subjects get nothing though the controls, the same clients on declared topics
    started with them, got theirs: wait well past the time the controls took."""
    wait_until(lambda: all(c.owned for c in controls), "the controls' assignments")
    took = max(c.assigned_after or 0.0 for c in controls)
    started = min(s.started for s in subjects)
    time.sleep(max(0.0, started + max(3 * took, took + 2.0) - time.monotonic()))
    assert [s.owned for s in subjects] == [frozenset()] * len(subjects)
    assert all(s.assigned_after is None for s in subjects)


def test_client_mode_creates_only_for_clients_that_allow_it(tmp_path: Path) -> None:
    with metadata_server(tmp_path, "--auto-create-topics", "client") as server:
        members = [
            refused := Member("confluent", server, "refused", ["undeclared-c"]),
            control := Member("confluent", server, "control", ["payments"]),
            created := Member("kafka-python", server, "created", ["undeclared-k"]),
        ]
        try:
            wait_until(
                lambda: created.owned == partitions(("undeclared-k", NUM_PARTITIONS)),
                "kafka-python's assignment of the topic it created",
            )
            assert_no_assignment([refused], [control])
            # librdkafka tells its application, and the server's metadata agrees.
            assert any("UNKNOWN_TOPIC_OR_PART" in e for e in refused.errors), refused.errors
        finally:
            for m in members:
                m.close()
        assert topic_metadata(server, "undeclared-c") == (KafkaError.UNKNOWN_TOPIC_OR_PART, 0)
        assert topic_metadata(server, "undeclared-k") == (None, NUM_PARTITIONS)


def test_never_mode_creates_nothing(tmp_path: Path) -> None:
    with metadata_server(tmp_path, "--auto-create-topics", "never") as server:
        members = [
            Member("confluent", server, "refused-c", ["undeclared-c"]),
            Member("kafka-python", server, "refused-k", ["undeclared-k"]),
            Member("confluent", server, "control-c", ["payments"]),
            Member("kafka-python", server, "control-k", ["orders-a"]),
        ]
        try:
            assert_no_assignment(members[:2], members[2:])
            assert any("UNKNOWN_TOPIC_OR_PART" in e for e in members[0].errors), members[0].errors
        finally:
            for m in members:
                m.close()
        for topic in ("undeclared-c", "undeclared-k"):
            assert topic_metadata(server, topic) == (KafkaError.UNKNOWN_TOPIC_OR_PART, 0)
