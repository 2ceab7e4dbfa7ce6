"""A kafka-python consumer running its own poll loop in a thread, as an application would;
calls into it (commit, committed) run in that thread, since KafkaConsumer is not
thread-safe."""

from __future__ import annotations

import threading
import time
from typing import Any

from kafka import KafkaConsumer
from kafka.errors import KafkaConnectionError

from fastcoord.testing import ServerProcess
from tests.interop.groups import PARTITIONS, TOPIC


class Member:
    """A kafka-python consumer running its own poll loop, as an application would."""

    def __init__(
        self,
        server: ServerProcess,
        name: str,
        group: str = "g",
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 500,
    ) -> None:
        self.consumer = KafkaConsumer(
            bootstrap_servers=server.bootstrap,
            group_id=group,
            client_id=name,
            enable_auto_commit=False,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
        )
        self.consumer.subscribe([TOPIC])
        # kafka-python 3.0.12 strands a leader whose rejoin was asked for only because its
        # first assignment was made before it knew the topic's partitions: if poll() times
        # out during that rejoin, the join is never completed (no heartbeats; the session
        # expires). Knowing the partitions before the first poll avoids that rejoin.
        assert self.consumer.partitions_for_topic(TOPIC) == set(range(PARTITIONS))
        self.owned: set[int] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._calls: list[tuple[Any, threading.Event, list[Any]]] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.consumer.poll(timeout_ms=200)
            except KafkaConnectionError:
                # A broker that died (a node killed): kafka-python raises from poll what
                # it cannot fetch; an application's loop polls on, as this one does.
                time.sleep(0.1)
                continue
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
