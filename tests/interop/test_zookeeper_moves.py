"""Coordinator moves in a cluster kept in ZooKeeper, with real clients: three nodes on one
shared data directory, a real ZooKeeper, and 30 groups of kafka-python and confluent-kafka
consumers (classic and consumer protocol), each given node 0's address alone.

- A partition moved by the admin API: its groups find the new coordinator and carry on
  with their members and generation; every acknowledged offset reads back; the other
  groups see nothing.
- A node SIGKILLed: its partitions move when ZooKeeper expires its session, and its groups
  are Stable on the other nodes within that timeout plus 5 s; restarted, it takes back
  only what the map gives it.
- ZooKeeper stopped for 10 s: nodes serve until a third of their session timeout after
  they lose it, then nothing, and take their partitions again once it is back. No
  partition is ever served by two nodes: each node's log says when it served what, and
  the intervals never overlap; and every answer a prober had, asking every node for every
  group all along, fits the history of the map (map_history.py).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from kafka import OffsetAndMetadata
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import CommitFailedError

from fastcoord.client.admin import AdminClient
from fastcoord.client.blocking import Connection
from fastcoord.core.native import partition as partitioning
from fastcoord.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse
from fastcoord.testing import (
    ServerProcess,
    free_ports,
    refused_start,
    start_cluster,
    start_zookeeper_node,
    stop_each,
    wait_for,
)
from fastcoord.testing_zookeeper import ZooKeeper, zookeeper_server
from tests.interop import groups
from tests.interop.confluent_members import Poller, confluent
from tests.interop.groups import PARTITIONS, TOPIC
from tests.interop.kafka_python_member import Member as KafkaPythonMember
from tests.interop.map_history import Prober, check_served_once, map_history
from tests.interop.test_loadtest import loadtest, summary, table

pytestmark = pytest.mark.cluster

NODES = 3
OFFSETS_PARTITIONS = 50
ZK_SESSION_MS = 4000
CLASSIC_SESSION_MS = 10_000
GROUPS_EACH = 10  # of kafka-python, confluent classic, confluent consumer protocol
MEMBERS = 2
NODE_ARGS = (*groups.SERVER_ARGS, "--zookeeper-session-timeout-ms", str(ZK_SESSION_MS))


def partition_of(group: str) -> int:
    return int(partitioning.partition_for(group, OFFSETS_PARTITIONS))


@dataclass
class Cluster:
    zk: ZooKeeper
    directory: Path
    nodes: list[ServerProcess | None]

    def admin(self, node_id: int) -> AdminClient:
        node = self.nodes[node_id]
        assert node is not None
        return AdminClient(node.admin)

    def live(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n is not None]

    def start(self, node_id: int) -> ServerProcess:
        node = start_zookeeper_node(
            self.directory / f"node-{node_id}",
            node_id,
            self.zk.hosts,
            self.directory / "data",
            *NODE_ARGS,
        )
        self.nodes[node_id] = node
        return node

    def views(self) -> dict[int, dict[str, Any]]:
        return {i: self.admin(i).partitions() for i in self.live()}

    def settled(self) -> bool:
        """Every live node has read the same map, over the live nodes, and serves (loaded)
        exactly what it gives it."""
        views = self.views()
        versions = {v["map_version"] for v in views.values()}
        if len(versions) != 1 or None in versions:
            return False
        owners = next(iter(views.values()))["owners"]
        if {int(n) for n in owners.values()} != set(views):
            return False
        return all(
            v["serving"] == sorted(int(p) for p, n in owners.items() if n == i) and not v["loading"]
            for i, v in views.items()
        )

    def owner(self, group: str) -> int:
        views = self.views()
        owners = next(iter(views.values()))["owners"]
        return int(owners[str(partition_of(group))])

    def addresses(self) -> dict[int, tuple[str, int]]:
        """The live nodes' client listeners."""
        out = {}
        for i, n in enumerate(self.nodes):
            if n is not None:
                host, _, port = n.bootstrap.rpartition(":")
                out[i] = (host, int(port))
        return out

    def bootstrap(self) -> str:
        node = self.nodes[0]
        assert node is not None
        return node.bootstrap


@contextmanager
def zookeeper_cluster(directory: Path) -> Iterator[Cluster]:
    with zookeeper_server(directory / "zookeeper") as zk:
        cluster = Cluster(zk, directory, [None] * NODES)
        try:
            for node_id in range(NODES):
                cluster.start(node_id)
            wait_for("the partitions spread over three nodes", cluster.settled, 60)
            yield cluster
        finally:
            stop_each([n for n in cluster.nodes if n is not None])


# -- the groups -----------------------------------------------------------------------------


@dataclass
class Groups:
    """The 30 groups and their members, by kind."""

    members: dict[str, list[Any]]  # group -> members (kafka-python Members, PolledMembers)
    kind: dict[str, str]  # group -> kafka-python, classic, consumer

    def classic(self) -> list[str]:
        return [g for g, k in self.kind.items() if k != "consumer"]


@contextmanager
def running_groups(cluster: Cluster) -> Iterator[Groups]:
    bootstrap = cluster.bootstrap()
    members: dict[str, list[Any]] = {}
    kind: dict[str, str] = {}
    with ExitStack() as stack:
        poller = Poller()
        stack.callback(poller.close)
        for k in range(GROUPS_EACH):
            for protocol in ("classic", "consumer"):
                group = f"zk-{protocol}-{k}"
                kind[group] = protocol
                members[group] = [
                    poller.add(
                        confluent(bootstrap, group, f"{group}-{m}", protocol, CLASSIC_SESSION_MS)
                    )
                    for m in range(MEMBERS)
                ]
        poller.start()
        server = type("Bootstrap", (), {"bootstrap": bootstrap})()
        for k in range(GROUPS_EACH):
            group = f"zk-kafka-python-{k}"
            kind[group] = "kafka-python"
            members[group] = []
            for m in range(MEMBERS):
                member = KafkaPythonMember(
                    server, f"{group}-{m}", group, session_timeout_ms=CLASSIC_SESSION_MS
                )
                stack.callback(member.close)
                members[group].append(member)
        for group_members in members.values():
            groups.settle(group_members, timeout_s=90)
        yield Groups(members, kind)


def commit_all(
    running: Groups, only: list[str] | None = None, base: int = 1000, rejoining_s: float = 0
) -> dict[str, dict[int, int]]:
    """Each member (of the groups `only`, or all) commits offset `base + p` for each
    partition p it owns, synchronously; what was acknowledged. A commit refused because its
    member is rejoining (an unknown member or generation, a rebalance in progress) is made
    again for what the member owns once the group has settled, for up to `rejoining_s`, as
    an application commits again after a rebalance."""
    acknowledged: dict[str, dict[int, int]] = {}
    for group, members in running.members.items():
        if only is not None and group not in only:
            continue
        for member in members:
            deadline = time.monotonic() + rejoining_s
            while True:
                offsets = {p: base + p for p in sorted(member.owned)}
                try:
                    if offsets or not rejoining_s:  # none: its partitions were just revoked
                        commit(member, running.kind[group], offsets)
                        break
                except (CommitFailedError, KafkaException) as exc:
                    if not rejoining(exc) or time.monotonic() > deadline:
                        raise
                assert time.monotonic() < deadline, f"{group}: no partitions after rejoining"
                time.sleep(0.1)
                groups.settle(
                    running.members[group], timeout_s=max(1.0, deadline - time.monotonic())
                )
            acknowledged.setdefault(group, {}).update(offsets)
    return acknowledged


def commit(member: Any, kind: str, offsets: dict[int, int]) -> None:
    if kind == "kafka-python":
        member.call(
            lambda c: c.commit(
                {
                    KafkaTopicPartition(TOPIC, p): OffsetAndMetadata(v, "", -1)
                    for p, v in offsets.items()
                }
            )
        )
    else:
        tps = [TopicPartition(TOPIC, p, v) for p, v in offsets.items()]
        for tp in member.consumer.commit(offsets=tps, asynchronous=False):
            assert tp.error is None, tp.error


def rejoining(exc: Exception) -> bool:
    """A commit refused because the member is not (yet) in the group's generation."""
    if isinstance(exc, CommitFailedError):  # kafka-python: unknown member, generation, rebalance
        return True
    code = exc.args[0].code() if exc.args and isinstance(exc.args[0], KafkaError) else None
    return code in (
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.REBALANCE_IN_PROGRESS,
    )


def commit_timed(running: Groups, group: str, since: float) -> tuple[dict[int, int], float]:
    """`group`'s members commit again; what was acknowledged, and when (seconds from
    `since`). A member caught in a rebalance, its partitions given up (as an eager member
    gives them up), commits what it owns once its group has settled, as after the ZooKeeper
    outage: a group need not keep its generation across the kill."""
    offsets = commit_all(running, [group], base=2000, rejoining_s=30).get(group, {})
    return offsets, time.monotonic() - since


def read_back(cluster: Cluster, acknowledged: dict[str, dict[int, int]]) -> None:
    """Every acknowledged offset, read from the group's coordinator as FindCoordinator
    names it now."""
    bootstrap = cluster.nodes[cluster.live()[0]]
    assert bootstrap is not None
    for group, offsets in acknowledged.items():
        with Connection(bootstrap.host, bootstrap.port) as c:
            found = c.request(FindCoordinatorRequest(key=group, key_type=0), 2)
        assert isinstance(found, FindCoordinatorResponse) and found.error_code == 0, found
        with Connection(found.host, found.port) as c:
            got = c.committed(group, TOPIC, range(PARTITIONS))
        assert {p: got.get(p) for p in offsets} == offsets, group


def classic_generations(cluster: Cluster, wanted: list[str]) -> dict[str, tuple[str, int]]:
    out = {}
    for node_id in cluster.live():
        for g in cluster.admin(node_id).groups():
            if g["group_id"] in wanted and g["members"]:
                out[g["group_id"]] = (g["state"], g["generation"])
    return out


def stable_on_owner(cluster: Cluster, wanted: list[str]) -> bool:
    seen = classic_generations(cluster, wanted)
    return len(seen) == len(wanted) and all(s == "Stable" for s, _ in seen.values())


# -- the log's record of what each node served ------------------------------------------------

STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO fastcoord\.cluster: "
LOADED_LINE = re.compile(STAMP + r"offsets partition (\d+) loaded", re.M)
RESIGNED_LINE = re.compile(
    STAMP + r"offsets partitions: taking \[[\d, ]*\], resigned \[([\d, ]*)\]", re.M
)


def at(stamp: str) -> float:
    """A log line's time stamp as time.time() does."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def stamps(log: str, text: str) -> list[float]:
    """When the lines of `log` that contain `text` were written."""
    return [at(line[:23]) for line in log.splitlines() if text in line and line[:4].isdigit()]


def served_intervals(log: str, end: float) -> dict[int, list[tuple[float, float]]]:
    """When a node's log says it served each partition: from its load to its resignation
    (or `end`)."""

    events = [(at(m[1]), int(m[2]), "loaded") for m in LOADED_LINE.finditer(log)]
    for m in RESIGNED_LINE.finditer(log):
        events += [(at(m[1]), int(p), "resigned") for p in m[2].split(", ") if p]
    events.sort()
    open_since: dict[int, float] = {}
    out: dict[int, list[tuple[float, float]]] = {}
    for t, p, what in events:
        if what == "loaded":
            open_since.setdefault(p, t)
        elif p in open_since:
            out.setdefault(p, []).append((open_since.pop(p), t))
    for p, since in open_since.items():
        out.setdefault(p, []).append((since, end))
    return out


def check_never_served_twice(logs: list[str], ended: list[tuple[str, float]]) -> None:
    """No partition served by two nodes at once, by the logs of the nodes running now and
    of those `ended` (a killed node's log, and when it was killed)."""
    end = time.time()
    by_partition: dict[int, list[tuple[float, float, int]]] = {}
    sources = [(log, end) for log in logs] + ended
    for node_id, (log, until) in enumerate(sources):
        for p, spans in served_intervals(log, until).items():
            by_partition.setdefault(p, []).extend((a, b, node_id) for a, b in spans)
    for p, spans in by_partition.items():
        spans.sort()
        for (_, b1, n1), (a2, _, n2) in itertools.pairwise(spans):
            assert a2 >= b1, f"partition {p} served by log {n1} until {b1} and {n2} from {a2}"


# -- the tests ------------------------------------------------------------------------------------


def test_moves_a_killed_node_and_zookeeper_lost_with_real_clients(tmp_path: Path) -> None:
    """The three scenarios in turn, on one cluster and one fleet of 30 groups (their start
    is most of each one's time): a move by the admin API, ZooKeeper stopped for 10 s, a node
    SIGKILLed and restarted. No partition was served by two nodes at once, by every log."""
    with zookeeper_cluster(tmp_path) as cluster, running_groups(cluster) as running:
        prober = Prober(cluster.addresses, partition_of, list(running.members)).start()
        try:
            acknowledged = commit_all(running)
            moved_by_api(cluster, running, acknowledged)
            zookeeper_lost(cluster, running, acknowledged)
            killed_log, killed_at = node_killed(cluster, running, acknowledged)
            # The restarted node's partitions back in the answers before the prober stops.
            prober.wait_served({g: cluster.owner(g) for g in running.members}, timeout_s=10)
        finally:
            answers = prober.stop()
        logs = [n.log() for n in cluster.nodes if n is not None]
        check_never_served_twice(logs, [(killed_log, killed_at)])
        # Every answer the prober had from every node, against every version of the map.
        served = check_served_once(answers, map_history([*logs, killed_log]))
        moved = {p: nodes for p, nodes in served.items() if len(nodes) > 1}
        print(
            f"{len(answers):,} answers from the nodes for {len(served)} partitions, "
            f"{sum(a.error == 0 for a in answers):,} of them served, each by the node the "
            f"map gave it to; the nodes of the {len(moved)} partitions that moved: {moved}"
        )
        # The audit saw the moves it is there to check: the moved partition, the killed
        # node's, and their way back to the restarted node.
        assert len(moved) >= 2 and any(len(nodes) >= 3 for nodes in moved.values()), served


def moved_by_api(
    cluster: Cluster, running: Groups, acknowledged: dict[str, dict[int, int]]
) -> None:
    """A partition moved by the admin API: its groups carry on, with their members and
    generation, and the others see nothing."""
    classic = running.classic()
    # The partition of the most groups moves, to a node that does not own it.
    by_partition: dict[int, list[str]] = {}
    for group in running.members:
        by_partition.setdefault(partition_of(group), []).append(group)
    moved_partition, moved = max(by_partition.items(), key=lambda kv: len(kv[1]))
    others = [g for g in classic if g not in moved]
    before = classic_generations(cluster, classic)
    assert {s for s, _ in before.values()} == {"Stable"}, before
    old = cluster.owner(moved[0])
    target = next(n for n in cluster.live() if n != old)

    started = time.monotonic()
    cluster.admin(target).move_partition(moved_partition, target)
    moved_classic = [g for g in moved if g in classic]
    # The new coordinator has the groups Stable, as they were, once it has loaded them.
    stable = wait_for(
        "the moved groups Stable on their new node",
        lambda: (
            moved_partition in cluster.admin(target).partitions()["serving"]
            and stable_on_owner(cluster, moved_classic)
        ),
        5,
    )
    # Each moved group's members commit again, all groups at once: acknowledged once
    # each member has found the new coordinator. A consumer-protocol member learns of
    # the move at its next heartbeat (group.consumer.heartbeat.interval.ms, 5 s) or
    # commit, and librdkafka retries a request to a coordinator whose connection is
    # not up yet after a backoff of about a second.
    with ThreadPoolExecutor(len(moved)) as pool:
        timed = pool.map(lambda g: commit_timed(running, g, started), moved)
        done = dict(zip(moved, timed, strict=True))
    for group, (offsets, at) in done.items():
        acknowledged[group].update(offsets)
        print(f"{group} ({running.kind[group]}): committed on node {target} at {at:.2f} s")
    found = max(at for _, at in done.values())
    assert found < 15, done
    for group in moved:
        groups.settle(running.members[group], timeout_s=1)  # nobody rebalanced
    after = classic_generations(cluster, classic)
    for group in moved_classic:
        assert after[group] == before[group], (group, before[group], after[group])
    for group in others:
        assert after[group] == before[group], group
    read_back(cluster, acknowledged)
    print(
        f"partition {moved_partition} ({len(moved)} groups) moved to node {target}: "
        f"Stable there in {stable:.2f} s, every member there in {found:.2f} s"
    )


def zookeeper_lost(
    cluster: Cluster, running: Groups, acknowledged: dict[str, dict[int, int]]
) -> None:
    """ZooKeeper stopped for 10 s: the nodes serve while their sessions may live, then
    nothing, and take their partitions again once it is back."""
    stopped_at = time.time()
    stopped = time.monotonic()
    cluster.zk.stop()
    gone = wait_for(
        "every node to stop serving",
        lambda: all(not v["serving"] for v in cluster.views().values()),
        ZK_SESSION_MS / 1000 + 5,
    )
    # By each node's log: it served on for a third of the session timeout after it lost
    # ZooKeeper (which cannot expire the session sooner than the whole), then resigned all.
    served_on = []
    for node in cluster.nodes:
        assert node is not None
        log = node.log()
        lost = [t for t in stamps(log, "ZooKeeper connection lost: serving") if t >= stopped_at]
        ended = [t for t in stamps(log, "ZooKeeper unreachable for a third") if t >= stopped_at]
        assert lost and ended, log[-3000:]
        served_on.append(ended[0] - lost[0])
    third = ZK_SESSION_MS / 3000
    assert all(third - 0.05 <= s < ZK_SESSION_MS / 1000 for s in served_on), served_on
    time.sleep(max(0.0, 10 - (time.monotonic() - stopped)))
    cluster.zk.start()
    back = wait_for("the nodes serving again", cluster.settled, 30)
    for group_members in running.members.values():
        groups.settle(group_members, timeout_s=60)
    # librdkafka's classic members count their session on their own clock: cut off from
    # their coordinator for longer than it, they rejoin as new members once it is back.
    for group, offsets in commit_all(running, base=3000, rejoining_s=30).items():
        acknowledged[group].update(offsets)  # partitions not committed again keep theirs
    read_back(cluster, acknowledged)
    print(
        f"ZooKeeper stopped for 10 s: nodes served on for "
        f"{', '.join(f'{s:.2f}' for s in served_on)} s after losing it, and every node had "
        f"stopped {gone:.2f} s after the stop; serving again {back:.2f} s after it was back"
    )


def node_killed(
    cluster: Cluster, running: Groups, acknowledged: dict[str, dict[int, int]]
) -> tuple[str, float]:
    """A node SIGKILLed: its groups Stable on the others within the session timeout plus
    5 s; restarted, it takes back only what the map gives it. The killed node's log, and
    when it was killed."""
    owners = {g: cluster.owner(g) for g in running.members}
    # Not node 0, which every client was given to bootstrap from.
    victim = max((1, 2), key=lambda n: sum(o == n for o in owners.values()))
    victims = [g for g, o in owners.items() if o == victim]
    before = classic_generations(cluster, running.classic())
    node = cluster.nodes[victim]
    assert node is not None
    node.kill()
    killed_at = time.time()
    print(f"node {victim} killed at {datetime.fromtimestamp(killed_at)}")
    cluster.nodes[victim] = None
    killed = time.monotonic()
    limit = ZK_SESSION_MS / 1000 + 5
    # settled(): the map is over the live nodes alone, and each serves its share.
    moved = wait_for("the killed node's partitions served by the others", cluster.settled, limit)
    victims_classic = [g for g in victims if running.kind[g] != "consumer"]
    stable = (
        wait_for(
            "its groups Stable on the others",
            lambda: stable_on_owner(cluster, victims_classic),
            limit,
        )
        + moved
    )
    with ThreadPoolExecutor(len(victims)) as pool:
        done = dict(
            zip(
                victims,
                pool.map(lambda g: commit_timed(running, g, killed), victims),
                strict=True,
            )
        )
    for group, (offsets, _) in done.items():
        acknowledged[group].update(offsets)
    after = classic_generations(cluster, running.classic())
    kept = [g for g in victims_classic if after[g] == before[g]]
    read_back(cluster, acknowledged)
    print(
        f"node {victim} killed with {len(victims)} groups: its partitions served elsewhere "
        f"in {moved:.2f} s, its groups Stable in {stable:.2f} s, every member there in "
        f"{max(at for _, at in done.values()):.2f} s; {len(kept)} of "
        f"{len(victims_classic)} classic groups kept their generation"
    )
    killed_log = node.log()
    # The same from the survivors' logs, without this test's polling in it.
    logs = "".join(n.log() for n in cluster.nodes if n is not None)
    spread = [
        at(m[1]) - killed_at
        for m in re.finditer(STAMP + r"ownership map: .* over nodes \[([\d, ]*)\]", logs, re.M)
        if at(m[1]) > killed_at
    ]
    loads = [at(m[1]) - killed_at for m in LOADED_LINE.finditer(logs) if at(m[1]) > killed_at]
    print(
        f"by the logs: the map without node {victim} {min(spread):.2f} s after the kill, "
        f"its partitions loaded elsewhere {max(loads):.2f} s after"
    )

    cluster.start(victim)
    wait_for("the map over three nodes again", cluster.settled, 30)
    view = cluster.admin(victim).partitions()
    mine = sorted(int(p) for p, n in view["owners"].items() if n == victim)
    assert view["serving"] == mine and mine
    read_back(cluster, acknowledged)
    return killed_log, killed_at


def test_fastcoord_cluster_keeps_its_nodes_in_zookeeper(tmp_path: Path) -> None:
    """`fastcoord cluster --zookeeper`: its nodes share one data directory and the
    partitions, as the map kept in ZooKeeper gives them."""
    with zookeeper_server(tmp_path / "zookeeper") as zk:
        cluster = start_cluster(tmp_path / "cluster", 2, "--zookeeper", zk.hosts)
        try:
            nodes = AdminClient(cluster.admin).cluster()["nodes"]
            assert nodes[0]["data_dir"] == nodes[1]["data_dir"] == str(tmp_path / "cluster/data")
            admins = [AdminClient(n["admin"]) for n in nodes]
            wait_for(
                "each node serving half",
                lambda: sorted(len(a.partitions()["serving"]) for a in admins) == [25, 25],
                30,
            )
            owners = admins[0].partitions()["nodes"]
            assert owners == {str(n["node_id"]): f"{n['host']}:{n['port']}" for n in nodes}
        finally:
            cluster.stop()


def test_a_node_that_cannot_reach_zookeeper_refuses_to_start(tmp_path: Path) -> None:
    """Exit 2 and one line, within the session timeout, and nothing left behind."""
    (port,) = free_ports(1)
    refused = refused_start(
        tmp_path, "--zookeeper", f"127.0.0.1:{port}", "--zookeeper-session-timeout-ms", "2000"
    )
    said = refused.stdout + refused.stderr
    assert refused.returncode == 2, said
    assert f"cannot start: cannot reach ZooKeeper at 127.0.0.1:{port}; start it" in said
    assert "Traceback" not in said
    assert not (tmp_path / "data").exists()


def test_a_loadtest_moves_a_group_and_shows_how_long_its_members_took(tmp_path: Path) -> None:
    """`move_coordinator` in a load test's fault schedule: the moved group's members find
    its new node and heartbeat there in the generation they had (no JoinGroup after the
    move); the live view and the summary name the move, its nodes, and how long after the
    first member lost the old node the last was served at the new one. The other group
    sees nothing."""
    schedule = tmp_path / "faults.toml"
    schedule.write_text(
        '[[fault]]\nat_ms = 4000\napi = "*"\ngroup = "mv-0000"\n'
        "move_coordinator = true\nduration_ms = 2000\n"
    )
    with zookeeper_cluster(tmp_path) as cluster:
        before = cluster.owner("mv-0000")
        result = loadtest(
            cluster.bootstrap(),
            tmp_path / "run",
            *("--members", "20", "--groups", "2", "--group-prefix", "mv", "--duration", "9"),
            *("--faults", str(schedule), "--admin", ",".join(n.admin for n in cluster.nodes if n)),
            # Within the nodes' session bounds (Kafka's, 6 s and up), heartbeats 300 ms apart.
            *("--heartbeat-interval-ms", "300", "--session-timeout-ms", "6000"),
            *("--commit-interval-ms", "300"),
        )
        assert result.returncode == 0, result.stdout + result.stderr
        after = cluster.owner("mv-0000")
    s = summary(tmp_path / "run")
    (move,) = s["coordinator_moves"]
    assert (move["group"], move["from_node"], move["to_node"]) == ("mv-0000", before, after)
    assert before != after and move["members"] == 10
    assert 0 < move["back_ms"] < 5000, move
    joins_since = [
        r
        for r in table(tmp_path / "run", "latency")
        if r["api"] == "JoinGroup" and r["elapsed_s"] >= 4 and r["count"]
    ]
    assert joins_since == []
    assert s["rebalances"]["unexpected"] == 0
    errors = table(tmp_path / "run", "errors")
    assert not [r for r in errors if r["group"] == "mv-0001" and not r["signal"]]
    assert "coordinator moves: 1 groups; latest: mv-0000 " in result.stderr  # the live line
    assert "coordinator moves seen by members: 1 groups" in result.stdout
    print(result.stdout[-1500:])
