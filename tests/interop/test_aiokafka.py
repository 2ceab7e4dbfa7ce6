"""aiokafka consumers against the real `fastcoord serve`: a group forms, grows and shrinks,
its offsets outlive its members, and a member killed with SIGKILL is replaced once its
session times out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from fastcoord.testing import ServerProcess
from tests.interop.groups import PARTITIONS, TOPIC, group_server, settled
from tests.interop.victim_proc import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS, Victim

TEST_DEADLINE_S = 30


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with group_server(tmp_path) as running:
        yield running


def run(scenario: Coroutine[Any, Any, None]) -> None:
    """Run one scenario on a fresh event loop, with a hard deadline."""
    asyncio.run(asyncio.wait_for(scenario, TEST_DEADLINE_S))


class Member:
    """An aiokafka consumer with its own fetch loop, as an application would run it."""

    def __init__(self, server: ServerProcess, name: str, group: str = "g") -> None:
        self.consumer = AIOKafkaConsumer(
            TOPIC,
            bootstrap_servers=server.bootstrap,
            group_id=group,
            client_id=name,
            enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
        self.owned: set[int] = set()
        self._running = False
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> Member:
        await self.consumer.start()
        self._running = True
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while self._running:
            await self.consumer.getmany(timeout_ms=100)
            self.owned = {tp.partition for tp in self.consumer.assignment()}

    async def stop(self) -> None:
        """Leave the group (LeaveGroup) and close."""
        self._running = False
        if self._task is not None:
            await self._task
        await self.consumer.stop()


async def settle(owners: list[Any], timeout_s: float = 20) -> list[set[int]]:
    """groups.settle, waiting on the event loop."""
    deadline = time.monotonic() + timeout_s
    while (owned := settled(owners)) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"assignments did not settle within {timeout_s} s")
        await asyncio.sleep(0.02)
    return owned


def test_a_group_forms_grows_shrinks_and_keeps_its_offsets(server: ServerProcess) -> None:
    async def scenario() -> None:
        group: list[Member] = []
        try:
            for i in range(3):
                group.append(await Member(server, f"c{i}").start())
            owned = await settle(group)
            assert sorted(len(o) for o in owned) == [4, 4, 4]

            group.append(await Member(server, "c3").start())
            owned = await settle(group)
            assert sorted(len(o) for o in owned) == [3, 3, 3, 3]

            leaving = group.pop(0)
            gone = set(leaving.owned)
            await leaving.stop()
            owned = await settle(group)
            assert sorted(len(o) for o in owned) == [4, 4, 4]
            assert gone <= set().union(*owned)

            commits = {
                TopicPartition(TOPIC, p): OffsetAndMetadata(100 + p, f"meta-{p}") for p in owned[0]
            }
            await group[0].consumer.commit(commits)
        finally:
            for m in group:
                await m.stop()

        # A new consumer of the group reads back what the departed members committed.
        reader = AIOKafkaConsumer(
            bootstrap_servers=server.bootstrap,
            group_id="g",
            client_id="reader",
            enable_auto_commit=False,
        )
        await reader.start()
        try:
            for tp, committed in commits.items():
                assert await reader.committed(tp) == committed.offset
            untouched = next(
                TopicPartition(TOPIC, p) for p in range(PARTITIONS) if p not in owned[0]
            )
            assert await reader.committed(untouched) is None
        finally:
            await reader.stop()

    run(scenario())
    log = server.log()
    assert "rebalance completed" in log and "member left c0-" in log


def test_a_killed_member_is_replaced_after_its_session_timeout(server: ServerProcess) -> None:
    async def scenario() -> None:
        survivors: list[Member] = []
        victim = Victim("aiokafka", server.bootstrap, "g", TOPIC, "victim")
        try:
            for i in range(2):
                survivors.append(await Member(server, f"s{i}").start())
            owned = await settle([*survivors, victim])
            assert sorted(len(o) for o in owned) == [4, 4, 4], victim.output()

            victim.kill()
            killed_at = time.monotonic()
            # The coordinator hears nothing more from the victim: it must expire its
            # session (6 s), rebalance, and hand its partitions to the survivors.
            limit_s = SESSION_TIMEOUT_MS / 1000 + 4
            owned = await settle(survivors, timeout_s=limit_s)
            took_s = time.monotonic() - killed_at
            assert took_s <= limit_s
            # Not at the connection's close: a classic group knows its members only by
            # their heartbeats.
            assert took_s >= SESSION_TIMEOUT_MS / 2000
            assert sorted(len(o) for o in owned) == [6, 6]
        finally:
            victim.close()
            for m in survivors:
                await m.stop()

    run(scenario())
    log = server.log()
    assert "member expired victim-" in log and "(session timeout)" in log
