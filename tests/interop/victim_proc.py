"""A consumer in a process of its own, for tests that kill it with SIGKILL.

    python -m tests.interop.victim_proc {aiokafka,kafka-python} BOOTSTRAP GROUP TOPIC NAME

It subscribes to TOPIC in GROUP, polls as an application would, and prints one line
`assigned 0,3,7` each time its assignment changes (`assigned ` alone for none), flushed at
once, so that the test knows what it owns. It never leaves the group on its own: the test
kills it, and the coordinator must notice through the session timeout alone. `Victim`
starts it from a test and follows what it prints.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

SESSION_TIMEOUT_MS = 6000  # the server's group.min.session.timeout.ms
HEARTBEAT_INTERVAL_MS = 500
REPO = Path(__file__).resolve().parents[2]


def report(partitions: set[int], last: list[set[int] | None]) -> None:
    if partitions != last[0]:
        last[0] = set(partitions)
        print("assigned " + ",".join(str(p) for p in sorted(partitions)), flush=True)


async def run_aiokafka(bootstrap: str, group: str, topic: str, name: str) -> None:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=name,
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
    )
    await consumer.start()
    last: list[set[int] | None] = [None]
    while True:
        await consumer.getmany(timeout_ms=100)
        report({tp.partition for tp in consumer.assignment()}, last)


def run_kafka_python(bootstrap: str, group: str, topic: str, name: str) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=name,
        enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
    )
    consumer.subscribe([topic])
    # Learn the topic's partitions before the first poll: see KafkaPythonMember in
    # test_admin.py for the kafka-python 3.0.12 rejoin that this avoids.
    consumer.partitions_for_topic(topic)
    last: list[set[int] | None] = [None]
    while True:
        consumer.poll(timeout_ms=100)
        report({tp.partition for tp in consumer.assignment()}, last)


class Victim:
    """This module in a child process; `owned` follows the assignment it prints."""

    def __init__(self, client: str, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.owned: set[int] = set()
        self.lines: list[str] = []
        args = [client, bootstrap, group, topic, name]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.interop.victim_proc", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._reader = threading.Thread(target=self._read, name=f"{name}-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("assigned "):
                listed = line.removeprefix("assigned ").strip()
                self.owned = {int(p) for p in listed.split(",")} if listed else set()

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no socket shutdown handshake beyond the kernel's."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()
        self._reader.join(timeout=10)
        assert self.process.stdout is not None
        self.process.stdout.close()

    def output(self) -> str:
        return "\n".join(self.lines)


def main(argv: list[str]) -> None:
    client, bootstrap, group, topic, name = argv
    if client == "aiokafka":
        asyncio.run(run_aiokafka(bootstrap, group, topic, name))
    elif client == "kafka-python":
        run_kafka_python(bootstrap, group, topic, name)
    else:
        raise SystemExit(f"unknown client {client!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
