"""confluent-kafka (librdkafka) consumers in the test's own process, polled in turn by one
thread: many members at the cost of one Python thread, where a process each (as
confluent_proc.py runs one) would cost a Python interpreter each."""

from __future__ import annotations

import threading
from typing import Any

from confluent_kafka import Consumer

from tests.interop.groups import TOPIC


def confluent(
    bootstrap: str, group: str, client_id: str, protocol: str, session_timeout_ms: int
) -> Consumer:
    """A consumer of TOPIC; `protocol` is its group.protocol, classic or consumer."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": client_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if protocol == "classic":
        config.update({"session.timeout.ms": session_timeout_ms, "heartbeat.interval.ms": 500})
    else:
        config["group.protocol"] = "consumer"  # the coordinator sets the session
    consumer = Consumer(config)
    consumer.subscribe([TOPIC])
    return consumer


class Poller:
    """Consumers polled in turn by one thread, as librdkafka's need their poll() called: it
    runs their rebalance callbacks. Each member's assignment is read after its poll."""

    def __init__(self) -> None:
        self.members: list[PolledMember] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def add(self, consumer: Any) -> PolledMember:
        member = PolledMember(consumer)
        self.members.append(member)
        return member

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for member in list(self.members):
                member.consumer.poll(0.02)
                member.owned = {tp.partition for tp in member.consumer.assignment()}

    def close(self) -> None:
        """Stop polling, then close every consumer (each leaves its group)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        for member in self.members:
            member.consumer.close()


class PolledMember:
    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self.owned: set[int] = set()
