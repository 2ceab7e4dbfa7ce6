"""Every answer a cluster's nodes gave for a group, checked against the history of the
ownership map kept in ZooKeeper: no offsets partition was served by two nodes at once, as
the clients saw it.

The history is the map's every version, from the log line its writer leaves (the version,
ZooKeeper's time of the write, each partition's owner). The answers are a prober's: a
thread that asks every live node, over and over, for the committed offsets of every group,
and notes who answered what, and when the question left and the answer came back.

An answer served (no error) by node N for partition P must belong to a version of the map
that gave P to N, written before the answer came back; and answers one strictly after
another (the second asked after the first was answered) belong to versions in order, a
later version when the node changed. A node that served P again after another node had
served it, with no version between that gave it back, is two nodes serving one partition.
A node that lost P may still answer for it until it reads the new map: that is allowed,
as long as no other node has answered meanwhile.
"""

from __future__ import annotations

import heapq
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fastcoord.client.blocking import Connection
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import OffsetFetchRequest, OffsetFetchResponse

MAP_LINE = re.compile(r"ownership map version (\d+) at (\d+): owners ([\d ]+)$", re.M)
OFFSET_FETCH_VERSION = 5  # a top-level error code, and topics null for all
PROBE_EVERY_S = 0.1


@dataclass(frozen=True)
class Version:
    """A version of the map: when ZooKeeper took it (time.time()'s seconds) and each
    partition's owner, in partition order."""

    version: int
    written: float
    owners: tuple[int, ...]


def map_history(logs: Iterable[str]) -> list[Version]:
    """Every version of the map, in order, from the logs of the nodes that wrote them (a
    node's log may be read whole though it died: every version is its writer's). Raises
    AssertionError if a version is missing: the history must be whole to check against."""
    found: dict[int, Version] = {}
    for log in logs:
        for m in MAP_LINE.finditer(log):
            v = Version(int(m[1]), int(m[2]) / 1000, tuple(int(o) for o in m[3].split()))
            assert found.setdefault(v.version, v) == v, (found[v.version], v)
    history = [found[k] for k in sorted(found)]
    versions = [v.version for v in history]
    assert versions == list(range(versions[0], versions[0] + len(versions))), versions
    return history


@dataclass(frozen=True)
class Answer:
    node: int
    group: str
    partition: int
    sent: float  # time.time() before the question left
    received: float  # and after the answer came
    error: int


def check_served_once(answers: Iterable[Answer], history: list[Version]) -> dict[int, list[int]]:
    """Raises AssertionError at the first answer that cannot be placed in the history;
    otherwise the nodes that served each partition, in the order of the map's versions."""
    by_partition: dict[int, list[Answer]] = {}
    for a in answers:
        if a.error == ErrorCode.NONE:
            by_partition.setdefault(a.partition, []).append(a)
    order: dict[int, list[int]] = {}
    for partition, served in sorted(by_partition.items()):
        served.sort(key=lambda a: a.sent)
        # The earliest version each node's answers so far must be in, of those answered.
        floor: dict[int, int] = {}
        done: list[tuple[float, int, int]] = []  # (received, version index, node)
        placed: set[tuple[int, int]] = set()  # (version index, node)
        for a in served:
            while done and done[0][0] < a.sent:
                _, before, node = heapq.heappop(done)
                floor[node] = max(floor.get(node, 0), before)
            lowest = max(
                [i if n == a.node else i + 1 for n, i in floor.items()],
                default=0,
            )
            index = next(
                (
                    i
                    for i in range(lowest, len(history))
                    if history[i].owners[partition] == a.node and history[i].written <= a.received
                ),
                None,
            )
            assert index is not None, (
                f"partition {partition} served by node {a.node} for {a.group} "
                f"({a.sent:.3f}-{a.received:.3f}) outside any version of the map that gave "
                f"it to that node after version {history[min(lowest, len(history) - 1)].version}"
            )
            heapq.heappush(done, (a.received, index, a.node))
            placed.add((index, a.node))
        nodes: list[int] = []
        for _, node in sorted(placed):
            if not nodes or nodes[-1] != node:
                nodes.append(node)
        order[partition] = nodes
    return order


@dataclass
class Prober:
    """A thread asking every node `addresses()` names (node id -> (host, port)) for each
    group's committed offsets, every PROBE_EVERY_S, until stopped; `answers` holds what
    each said. A node it cannot reach is asked again next round."""

    addresses: Callable[[], dict[int, tuple[str, int]]]
    partition_of: Callable[[str], int]
    groups: list[str]
    answers: list[Answer] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _connections: dict[int, Connection] = field(default_factory=dict)

    def start(self) -> Prober:
        self._thread = threading.Thread(target=self._run, name="prober", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Answer]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for connection in self._connections.values():
            connection.close()
        return self.answers

    def wait_served(self, owners: dict[str, int], timeout_s: float) -> None:
        """Until each group has been served by the node `owners` names, asked after this
        call: the last moves are in the answers before the prober stops."""
        since = time.time()
        pending = dict(owners)
        deadline = time.monotonic() + timeout_s
        seen = 0
        while pending:
            assert time.monotonic() < deadline, f"not served by their owners: {pending}"
            time.sleep(PROBE_EVERY_S)
            answers = self.answers[seen:]  # appended by the prober's thread alone
            seen += len(answers)
            for a in answers:
                if a.sent >= since and a.error == 0 and pending.get(a.group) == a.node:
                    del pending[a.group]

    def _run(self) -> None:
        while not self._stop.wait(PROBE_EVERY_S):
            for node, address in self.addresses().items():
                try:
                    self._ask(node, address)
                except (OSError, EOFError, RuntimeError):
                    connection = self._connections.pop(node, None)
                    if connection is not None:
                        connection.close()

    def _ask(self, node: int, address: tuple[str, int]) -> None:
        connection = self._connections.get(node)
        if connection is None or connection.address != address:
            if connection is not None:
                connection.close()
            connection = self._connections[node] = Connection(*address, timeout=5)
        sent = time.time()
        for group in self.groups:
            connection.send(OffsetFetchRequest(group_id=group, topics=None), OFFSET_FETCH_VERSION)
        for group in self.groups:
            answer = connection.receive(ApiKey.OFFSET_FETCH, OFFSET_FETCH_VERSION)
            assert isinstance(answer, OffsetFetchResponse)
            self.answers.append(
                Answer(node, group, self.partition_of(group), sent, time.time(), answer.error_code)
            )
