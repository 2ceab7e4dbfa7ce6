"""One consumer group member of each client library, behind one blocking interface, for the
security interop tests: it polls in a thread of its own as an application would (the Java
client in a JVM of its own), and commits and reads back offsets when asked. Every call into
a client runs where the client lives (its poll thread, its event loop), since none of them
is thread-safe.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future
from contextlib import suppress
from typing import Any, Protocol

from fastcoord.testing import Certificates, ServerProcess
from tests.interop.secured import (
    Security,
    aiokafka_config,
    confluent_config,
    java_properties,
    kafka_python_config,
)

CALL_TIMEOUT_S = 20.0
CLIENTS = ("kafka-python", "confluent", "aiokafka")  # the Java client: under the java marker


class SecuredMember(Protocol):
    name: str

    @property
    def owned(self) -> frozenset[int]: ...

    @property
    def errors(self) -> list[str]: ...

    @property
    def running(self) -> bool: ...

    def commit(self, offsets: Mapping[int, int]) -> None: ...

    def committed(self, partitions: frozenset[int]) -> dict[int, int | None]: ...

    def close(self) -> None: ...


class _PollThread:
    """A client made, polled, called and closed in one thread of its own."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.owned: frozenset[int] = frozenset()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[[Any], Any], Future[Any]]] = []
        self._started: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._started.result(CALL_TIMEOUT_S)  # the client's constructor raises here

    def _make(self) -> Any:
        raise NotImplementedError

    def _poll(self, client: Any) -> None:
        raise NotImplementedError

    def _assignment(self, client: Any) -> frozenset[int]:
        raise NotImplementedError

    def _close(self, client: Any) -> None:
        client.close()

    def _run(self) -> None:
        try:
            client = self._make()
        except BaseException as exc:
            self._started.set_exception(exc)
            return
        self._started.set_result(None)
        try:
            while not self._stop.is_set():
                self._poll(client)
                self.owned = self._assignment(client)
                with self._lock:
                    calls, self._calls = self._calls, []
                for fn, result in calls:
                    try:
                        result.set_result(fn(client))
                    except Exception as exc:
                        result.set_exception(exc)
        finally:
            self._close(client)
            self.owned = frozenset()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def call(self, fn: Callable[[Any], Any]) -> Any:
        result: Future[Any] = Future()
        with self._lock:
            self._calls.append((fn, result))
        return result.result(CALL_TIMEOUT_S)

    def close(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(CALL_TIMEOUT_S)
            assert not self._thread.is_alive(), f"{self.name}: close did not finish"


class KafkaPythonMember(_PollThread):
    def __init__(self, topic: str, config: dict[str, Any], name: str) -> None:
        self.topic = topic
        self.config = config
        super().__init__(name)

    def _make(self) -> Any:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(**self.config)
        consumer.subscribe([self.topic])
        # Knowing the partitions before the first poll spares a leader's rejoin (see
        # kafka_python_member.py).
        assert consumer.partitions_for_topic(self.topic)
        return consumer

    def _poll(self, client: Any) -> None:
        client.poll(timeout_ms=50)

    def _assignment(self, client: Any) -> frozenset[int]:
        return frozenset(tp.partition for tp in client.assignment())

    def commit(self, offsets: Mapping[int, int]) -> None:
        from kafka import OffsetAndMetadata, TopicPartition

        commits = {
            TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()
        }
        self.call(lambda c: c.commit(commits))

    def committed(self, partitions: frozenset[int]) -> dict[int, int | None]:
        from kafka import TopicPartition

        found: dict[int, int | None] = self.call(
            lambda c: {p: c.committed(TopicPartition(self.topic, p)) for p in partitions}
        )
        return found


class ConfluentMember(_PollThread):
    def __init__(self, topic: str, config: dict[str, Any], name: str) -> None:
        self.topic = topic
        self.config = {**config, "error_cb": self._on_error}
        super().__init__(name)

    def _on_error(self, error: Any) -> None:
        self.errors.append(str(error))

    def _make(self) -> Any:
        from confluent_kafka import Consumer

        consumer = Consumer(self.config)
        consumer.subscribe([self.topic])
        return consumer

    def _poll(self, client: Any) -> None:
        client.poll(0.05)

    def _assignment(self, client: Any) -> frozenset[int]:
        return frozenset(tp.partition for tp in client.assignment())

    def commit(self, offsets: Mapping[int, int]) -> None:
        from confluent_kafka import TopicPartition

        commits = [TopicPartition(self.topic, p, o) for p, o in offsets.items()]
        done = self.call(lambda c: c.commit(offsets=commits, asynchronous=False))
        failed = [tp for tp in done if tp.error is not None]
        assert not failed, f"{self.name}: commit failed: {failed}"

    def committed(self, partitions: frozenset[int]) -> dict[int, int | None]:
        from confluent_kafka import TopicPartition

        wanted = [TopicPartition(self.topic, p) for p in partitions]
        found = self.call(lambda c: c.committed(wanted, timeout=10))
        return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in found}


class AiokafkaMember:
    """An aiokafka consumer on an event loop in a thread of its own, fetching in a task."""

    def __init__(self, topic: str, config: dict[str, Any], name: str) -> None:
        self.name = name
        self.topic = topic
        self.owned: frozenset[int] = frozenset()
        self.errors: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._task: asyncio.Task[None] | None = None
        self._running = True
        try:
            self.consumer = self._run_on_loop(self._start(config))
        except BaseException:
            self._end_loop()
            raise

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and self._task is not None and not self._task.done()

    def _run_on_loop(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(CALL_TIMEOUT_S)

    async def _start(self, config: dict[str, Any]) -> Any:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(self.topic, **config)
        try:
            await consumer.start()
        except BaseException:
            await consumer.stop()
            raise
        self._task = asyncio.create_task(self._fetch(consumer))
        return consumer

    async def _fetch(self, consumer: Any) -> None:
        while self._running:
            await consumer.getmany(timeout_ms=50)
            self.owned = frozenset(tp.partition for tp in consumer.assignment())

    def commit(self, offsets: Mapping[int, int]) -> None:
        from aiokafka.structs import TopicPartition

        commits = {TopicPartition(self.topic, p): o for p, o in offsets.items()}
        self._run_on_loop(self.consumer.commit(commits))

    def committed(self, partitions: frozenset[int]) -> dict[int, int | None]:
        from aiokafka.structs import TopicPartition

        async def read() -> dict[int, int | None]:
            return {
                p: await self.consumer.committed(TopicPartition(self.topic, p)) for p in partitions
            }

        found: dict[int, int | None] = self._run_on_loop(read())
        return found

    async def _stop(self) -> None:
        self._running = False
        if self._task is not None:
            await self._task
        await self.consumer.stop()

    def close(self) -> None:
        if self._thread.is_alive():
            try:
                self._run_on_loop(self._stop())
            finally:
                self.owned = frozenset()
                self._end_loop()

    def _end_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CALL_TIMEOUT_S)
        self._loop.close()


class JavaGroupMember:
    """The Java client's GroupMember (fastcoord.testing_java) behind the same interface."""

    def __init__(self, topic: str, properties: dict[str, str | int], name: str) -> None:
        from fastcoord import testing_java

        self.name = name
        self.topic = topic
        properties = dict(properties)
        bootstrap = str(properties.pop("bootstrap.servers"))
        group = str(properties.pop("group.id"))
        self.member = testing_java.start_member(
            bootstrap, [topic], group, name=name, properties=properties
        )

    @property
    def owned(self) -> frozenset[int]:
        return self.member.partitions(self.topic)

    @property
    def errors(self) -> list[str]:
        return self.member.errors

    @property
    def running(self) -> bool:
        return self.member.process.poll() is None

    def commit(self, offsets: Mapping[int, int]) -> None:
        for partition, offset in offsets.items():
            self.member.commit(self.topic, partition, offset)

    def committed(self, partitions: frozenset[int]) -> dict[int, int | None]:
        return {p: self.member.fetch(self.topic, p) for p in partitions}

    def begin_close(self) -> None:
        """Ask it to close (it leaves its group) without waiting; close() waits."""
        if self.member.process.poll() is None:
            with suppress(BrokenPipeError):
                self.member.send("close")

    def close(self) -> None:
        code = self.member.close()
        assert code == 0, f"{self.name} exited with {code}:\n{self.member.log()}"

    def log(self) -> str:
        return self.member.log()


def start_member(
    client: str,
    server: ServerProcess,
    certs: Certificates,
    sec: Security,
    *,
    topic: str,
    group: str,
    session_timeout_ms: int,
    heartbeat_interval_ms: int,
    extra: Mapping[str, Any] | None = None,
) -> SecuredMember:
    """A member of `group`, subscribed to `topic`, of `client` (kafka-python, confluent,
    aiokafka, java) through the listener and login of `sec`; `extra`: the client's own
    settings, which win."""
    name = f"{client}-{group}"
    python_clients = {
        "kafka-python": (kafka_python_config, KafkaPythonMember),
        "aiokafka": (aiokafka_config, AiokafkaMember),
    }
    if client in python_clients:  # the same setting names in both
        make_config, member = python_clients[client]
        config = make_config(server, certs, sec)
        config.update(
            group_id=group,
            client_id=name,
            enable_auto_commit=False,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            **(extra or {}),
        )
        return member(topic, config, name)
    if client == "confluent":
        config = confluent_config(server, certs, sec)
        config.update(
            {
                "group.id": group,
                "client.id": name,
                "enable.auto.commit": False,
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": heartbeat_interval_ms,
                **(extra or {}),
            }
        )
        return ConfluentMember(topic, config, name)
    if client == "java":
        props = java_properties(server, certs, sec)
        props.update(
            {
                "group.id": group,
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": heartbeat_interval_ms,
                **(extra or {}),
            }
        )
        return JavaGroupMember(topic, props, name)
    raise ValueError(f"unknown client {client!r}")


def wait_owned(member: SecuredMember, partitions: frozenset[int], timeout_s: float = 20.0) -> None:
    """Wait until the member holds exactly these partitions: it has joined and synced."""
    deadline = time.monotonic() + timeout_s
    while member.owned != partitions:
        if time.monotonic() > deadline or not member.running:
            raise AssertionError(
                f"{member.name} holds {sorted(member.owned)}, not {sorted(partitions)} "
                f"({'running' if member.running else 'stopped'}); its errors: {member.errors}"
            )
        time.sleep(0.02)
