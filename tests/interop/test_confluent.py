"""confluent-kafka (librdkafka) consumers against the real `fastcoord serve`.

A group forms, grows and shrinks with its offsets kept; a member killed with SIGKILL in its
own process is expired after its session timeout and its partitions go to the survivors; a
static member (group.instance.id) restarts and gets its partitions back without a rebalance;
a cooperative-sticky group grows by an incremental rebalance that revokes only what moves.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from fastcoord.testing import ServerProcess
from tests.interop.groups import PARTITIONS, TOPIC, covers_once, group_server

CONSUMER_PROC = Path(__file__).with_name("confluent_proc.py")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with group_server(tmp_path) as running:
        yield running


class Owner(Protocol):
    name: str

    @property
    def owned(self) -> frozenset[int]: ...


class Member:
    """A confluent-kafka consumer running its own poll loop in a thread, as an application
    would. The Consumer is created, polled, called and closed in that thread only.

    `events` records the rebalance callbacks as (kind, partitions): eager groups get the
    whole assignment in each callback, cooperative groups the incremental deltas.
    """

    def __init__(
        self,
        server: ServerProcess,
        name: str,
        group: str = "g",
        session_timeout_ms: int = 6000,
        protocol: str = "classic",
        **extra: Any,
    ) -> None:
        self.name = name
        self.config: dict[str, Any] = {
            "bootstrap.servers": server.bootstrap,
            "group.id": group,
            "client.id": name,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "max.poll.interval.ms": max(30_000, session_timeout_ms),
            "error_cb": self._on_error,
            **extra,
        }
        if protocol == "classic":
            self.config.update(
                {"session.timeout.ms": session_timeout_ms, "heartbeat.interval.ms": 500}
            )
        else:
            # The consumer group protocol: the coordinator sets the session and heartbeat.
            self.config["group.protocol"] = protocol
        self.owned: frozenset[int] = frozenset()
        self.events: list[tuple[str, frozenset[int]]] = []
        self.errors: list[KafkaError] = []
        self.member_id = ""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[[Consumer], Any], threading.Event, list[Any]]] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _on_error(self, error: KafkaError) -> None:
        self.errors.append(error)

    def _callback(self, kind: str) -> Callable[[Consumer, list[TopicPartition]], None]:
        def record(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            with self._lock:
                self.events.append((kind, frozenset(tp.partition for tp in partitions)))

        return record

    def _run(self) -> None:
        consumer = Consumer(self.config)
        try:
            consumer.subscribe(
                [TOPIC],
                on_assign=self._callback("assign"),
                on_revoke=self._callback("revoke"),
                on_lost=self._callback("lost"),
            )
            while not self._stop.is_set():
                consumer.poll(0.05)
                # The member id first: one poll can bring both JoinGroup's and SyncGroup's
                # answers, and whoever sees the new assignment must see the new member id.
                self.member_id = consumer.memberid() or ""
                self.owned = frozenset(tp.partition for tp in consumer.assignment())
                with self._lock:
                    calls, self._calls = self._calls, []
                for fn, done, out in calls:
                    try:
                        out.append(fn(consumer))
                    except Exception as exc:
                        out.append(exc)
                    done.set()
        finally:
            consumer.close()
            self.owned = frozenset()

    def call(self, fn: Callable[[Consumer], Any]) -> Any:
        """Run fn(consumer) in the poll thread and return its result."""
        done: threading.Event = threading.Event()
        out: list[Any] = []
        with self._lock:
            self._calls.append((fn, done, out))
        assert done.wait(10), f"{self.name}: the poll loop did not run the call"
        if isinstance(out[0], Exception):
            raise out[0]
        return out[0]

    def events_since(self, mark: int) -> list[tuple[str, frozenset[int]]]:
        with self._lock:
            return list(self.events[mark:])

    def close(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(10)
            assert not self._thread.is_alive(), f"{self.name}: close did not finish"


class ProcMember:
    """A consumer in its own OS process (confluent_proc.py), followed through its stdout."""

    def __init__(
        self, server: ServerProcess, name: str, group: str = "g", protocol: str = "classic"
    ) -> None:
        self.name = name
        self.owned: frozenset[int] = frozenset()
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(CONSUMER_PROC),
                server.bootstrap,
                group,
                TOPIC,
                "--client-id",
                name,
                "--session-timeout-ms",
                "6000",
                "--group-protocol",
                protocol,
            ],
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
            line = line.rstrip("\n")
            self.lines.append(line)
            if line.startswith("assignment"):
                listed = line.removeprefix("assignment").strip()
                self.owned = frozenset(int(p) for p in listed.split(",") if p)

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        """Stop the process by its PID: SIGTERM (it closes its consumer), then SIGKILL."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self._reader.join(10)
        assert self.process.stdout is not None
        self.process.stdout.close()


def settle(
    members: Sequence[Owner], sizes: Sequence[int], timeout_s: float = 15
) -> list[frozenset[int]]:
    """Wait until the members' assignments cover the topic once, disjointly, with the given
    sizes (sorted); return them in the members' order."""
    deadline = time.monotonic() + timeout_s
    while True:
        owned = [m.owned for m in members]
        if covers_once(owned) and sorted(len(o) for o in owned) == sorted(sizes):
            return owned
        if time.monotonic() > deadline:
            named = {m.name: sorted(o) for m, o in zip(members, owned, strict=True)}
            raise AssertionError(f"assignments did not settle to sizes {sizes}: {named}")
        time.sleep(0.02)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.02)


def rebalances(server: ServerProcess, group: str = "g") -> tuple[int, int]:
    """How many rebalances of the group the server log shows started and completed."""
    log = server.log()
    started = len(re.findall(rf"group {group}: rebalance started", log))
    completed = len(re.findall(rf"group {group}: rebalance completed", log))
    return started, completed


def assert_no_errors(members: Sequence[Member]) -> None:
    """librdkafka reports transport and protocol trouble through error_cb: expect none."""
    errors = {m.name: [str(e) for e in m.errors] for m in members if m.errors}
    assert not errors, errors


def describe(server: ServerProcess, group: str = "g") -> Any:
    """The group as DescribeGroups shows it, through librdkafka's admin client."""
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=10)


def test_a_group_forms_grows_shrinks_and_keeps_its_offsets(server: ServerProcess) -> None:
    everyone: list[Member] = []

    def join(name: str) -> Member:
        everyone.append(Member(server, name))
        return everyone[-1]

    try:
        group = [join(f"c{i}") for i in range(3)]
        owned = settle(group, [4, 4, 4])

        group.append(join("c3"))
        owned = settle(group, [3, 3, 3, 3])

        leaving = group.pop(0)
        gone = leaving.owned
        leaving.close()  # sends LeaveGroup: the others rebalance at once
        owned = settle(group, [4, 4, 4])
        assert gone <= frozenset().union(*owned)
        assert all(kind != "lost" for m in everyone for kind, _ in m.events)

        mine = sorted(owned[0])
        commits = [TopicPartition(TOPIC, p, 100 + p, metadata=f"meta-{p}") for p in mine]
        answer = group[0].call(lambda c: c.commit(offsets=commits, asynchronous=False))
        assert sorted(tp.partition for tp in answer) == mine
        assert all(tp.error is None for tp in answer), answer
    finally:
        for m in everyone:
            m.close()
    assert_no_errors(everyone)

    reader = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": "g",
            "client.id": "reader",
            "enable.auto.commit": False,
        }
    )
    try:
        read = reader.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        reader.close()
    assert all(tp.error is None for tp in read), read
    got = {tp.partition: (tp.offset, tp.metadata) for tp in read}
    for p in range(PARTITIONS):
        if p in mine:
            assert got[p] == (100 + p, f"meta-{p}")
        else:
            assert got[p][0] < 0  # never committed: OFFSET_INVALID
    log = server.log()
    assert "rebalance completed" in log and "member left" in log


def test_a_killed_member_is_expired_and_the_survivors_take_its_partitions(
    server: ServerProcess,
) -> None:
    session_timeout_s = 6.0
    members: list[Member] = []
    procs: list[ProcMember] = []
    try:
        local = Member(server, "local")
        members.append(local)
        for name in ("p1", "p2"):
            procs.append(ProcMember(server, name))
        settle([local, *procs], [4, 4, 4])
        victim, survivor = procs
        gone = victim.owned

        killed_at = time.monotonic()
        victim.kill()
        assert victim.process.returncode == -signal.SIGKILL

        deadline_s = session_timeout_s + 5
        after = settle([local, survivor], [6, 6], timeout_s=deadline_s)
        elapsed = time.monotonic() - killed_at
        assert elapsed <= deadline_s, f"the survivors took {elapsed:.1f} s after the kill"
        # Kafka does not act on the closed socket: the member goes when its session times
        # out (about 6 s after its last heartbeat), not when its connection drops.
        assert elapsed >= session_timeout_s / 2, f"expired after only {elapsed:.1f} s"
        assert gone <= after[0] | after[1]
        assert re.search(r"group g: member expired p1-\S+ \(session timeout\)", server.log())
    finally:
        for m in members:
            m.close()
        for p in procs:
            p.stop()  # by PID
    assert_no_errors(members)
    # The survivor process saw the rebalance too and closed cleanly on SIGTERM.
    assert survivor.process.returncode == 0, survivor.lines


def test_a_static_member_restarts_without_a_rebalance(server: ServerProcess) -> None:
    def static(name: str) -> Member:
        return Member(server, name, session_timeout_ms=30_000, **{"group.instance.id": name})

    # "a" alone first, so that it is the leader and the member that restarts is not.
    members: dict[str, Member] = {}
    try:
        members["a"] = static("a")
        settle(list(members.values()), [12])
        members["b"] = static("b")
        members["c"] = static("c")
        settle(list(members.values()), [4, 4, 4])
        wait_until(lambda: len(set(rebalances(server))) == 1, 10, "the rebalances to complete")

        owned = {name: m.owned for name, m in members.items()}
        marks = {name: len(m.events) for name, m in members.items()}
        started_before = rebalances(server)[0]
        old_id = members["c"].member_id
        assert old_id

        old_c = members["c"]
        old_c.close()  # a static member's close sends no LeaveGroup
        restarted = members["c"] = static("c")
        wait_until(lambda: restarted.owned == owned["c"], 10, "c to get its partitions back")
        assert restarted.member_id and restarted.member_id != old_id
        assert restarted.events == [("assign", owned["c"])], (restarted.events, server.log())

        # Give a rebalance, if one were started, the time to reach the others: they
        # heartbeat every 500 ms, and would be told REBALANCE_IN_PROGRESS.
        time.sleep(2)
        for name in ("a", "b"):
            assert members[name].owned == owned[name], server.log()
            assert members[name].events_since(marks[name]) == [], server.log()
        assert restarted.owned == owned["c"], server.log()
        assert rebalances(server)[0] == started_before, server.log()
        assert f"static member c replaced {old_id}" in server.log()

        # The group names the new incarnation of "c", and the old member id is gone.
        by_instance = {m.group_instance_id: m.member_id for m in describe(server).members}
        assert by_instance == {name: members[name].member_id for name in ("a", "b", "c")}
    finally:
        for m in members.values():
            m.close()
    assert_no_errors([*members.values(), old_c])


def test_cooperative_sticky_grows_by_an_incremental_rebalance(server: ServerProcess) -> None:
    def cooperative(name: str) -> Member:
        return Member(server, name, **{"partition.assignment.strategy": "cooperative-sticky"})

    group: list[Member] = []
    try:
        group.extend(cooperative(name) for name in ("a", "b"))
        before = settle(group, [6, 6])
        assert describe(server).partition_assignor == "cooperative-sticky"
        marks = [len(m.events) for m in group]

        group.append(cooperative("c"))
        after = settle(group, [4, 4, 4])
        wait_until(lambda: len(set(rebalances(server))) == 1, 10, "the rebalances to complete")

        moved: frozenset[int] = frozenset()
        for m, mark, had, has in zip(group[:2], marks, before, after[:2], strict=True):
            events = m.events_since(mark)
            revoked = frozenset().union(*(p for kind, p in events if kind == "revoke"))
            assigned = frozenset().union(*(p for kind, p in events if kind == "assign"))
            assert all(kind != "lost" for kind, _ in events), (m.name, events)
            # Only what moved was revoked; what stayed was neither revoked nor reassigned.
            assert has <= had, (m.name, had, has)
            assert revoked == had - has, (m.name, events)
            assert not assigned, (m.name, events)
            moved |= revoked
        assert moved == after[2]
        newcomer = group[2].events
        assert frozenset().union(*(p for kind, p in newcomer if kind == "assign")) == after[2]
        assert all(kind == "assign" for kind, _ in newcomer), newcomer
    finally:
        for m in group:
            m.close()
    assert_no_errors(group)
