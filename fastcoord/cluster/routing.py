"""Who owns what in a fastcoord cluster: one rule that every node computes alike.

A cluster is a static list of nodes, each with its id and the address clients reach it at.
The offsets topic's partitions are owned in turn: partition p belongs to the node whose id
is ids[p mod N], the ids sorted; a group belongs to the owner of its partition,
abs(javaHashCode(groupId)) % offsets.topic.num.partitions, as in Kafka with one replica per
partition. Topic partitions are led the same way (partition p by ids[p mod N]). The cluster
id is derived from the list and the lowest id is the controller, so every node answers
Metadata and FindCoordinator alike, and a client may ask any of them.

Nothing here asks another node anything: the list is the whole agreement, which is why a
node refuses to start beside a peer whose list differs (peers.py). A lone server is a
cluster of one. Sans-IO: functions of the list.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

OFFSETS_TOPIC = "__consumer_offsets"  # Kafka's name: Metadata describes the routing under it
LONE_CLUSTER_ID = "fastcoord-cluster"  # a lone server's, as before clusters existed
CLUSTER_ID_PREFIX = "fastcoord-"  # clients (fastcoord's own) know a fastcoord by it
MAX_NODES = 1024


class ClusterListError(ValueError):
    """A --cluster list that cannot be used; the message says what is wrong with it."""


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.node_id}@{self.host}:{self.port}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_nodes(text: str) -> tuple[Node, ...]:
    """`0@HOST:PORT,1@HOST:PORT,...` as nodes sorted by id; ClusterListError if malformed
    (a bad entry, an id or address given twice)."""
    nodes: dict[int, Node] = {}
    addresses: set[tuple[str, int]] = set()
    entries = [e.strip() for e in text.split(",") if e.strip()]
    if not entries:
        raise ClusterListError("cluster: empty; give ID@HOST:PORT,ID@HOST:PORT,...")
    if len(entries) > MAX_NODES:
        raise ClusterListError(f"cluster: {len(entries)} nodes; at most {MAX_NODES}")
    for entry in entries:
        node_id, at, address = entry.partition("@")
        host, colon, port = address.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")  # [::1]:9092
        if not at or not colon or not host or not node_id.isdigit() or not port.isdigit():
            raise ClusterListError(f"cluster: {entry!r} is not ID@HOST:PORT")
        node = Node(int(node_id), host, int(port))
        if not 0 < node.port < 65536:
            raise ClusterListError(f"cluster: {entry!r}: port {node.port} is not 1-65535")
        if node.node_id in nodes:
            raise ClusterListError(f"cluster: node id {node.node_id} is listed twice")
        if (host, node.port) in addresses:
            raise ClusterListError(f"cluster: {address} is listed twice")
        nodes[node.node_id] = node
        addresses.add((host, node.port))
    return tuple(sorted(nodes.values(), key=lambda n: n.node_id))


def describe(nodes: Sequence[Node]) -> str:
    """The list as --cluster takes it, sorted by id: two lists are the same cluster when
    these are equal."""
    return ",".join(str(n) for n in sorted(nodes, key=lambda n: n.node_id))


def cluster_id_of(nodes: Sequence[Node]) -> str:
    """One id per list, the same on every node (Kafka's are 22 characters of base64)."""
    digest = hashlib.sha256(describe(nodes).encode()).digest()[:12]
    return CLUSTER_ID_PREFIX + base64.urlsafe_b64encode(digest).decode().rstrip("=")


class Cluster:
    """The nodes of a cluster, this node among them, and the offsets topic's partitions.

    `partition_for(group_id, partitions)` is Kafka's (core.partition); it is passed in so
    that the rule here and the core's agree by construction."""

    def __init__(
        self,
        nodes: Sequence[Node],
        node_id: int,
        partitions: int,
        partition_for: Callable[[str, int], int],
        lone: bool = False,
    ) -> None:
        self.nodes = tuple(sorted(nodes, key=lambda n: n.node_id))
        ids = [n.node_id for n in self.nodes]
        if node_id not in ids:
            raise ClusterListError(
                f"node.id {node_id} is not in the cluster list {describe(self.nodes)}"
            )
        self.node_id = node_id
        self.partitions = partitions
        self.partition_for = partition_for
        self.lone = lone
        self._by_id = {n.node_id: n for n in self.nodes}
        self.cluster_id = LONE_CLUSTER_ID if lone else cluster_id_of(self.nodes)
        self.controller_id = ids[0]

    @classmethod
    def alone(
        cls, node: Node, partitions: int, partition_for: Callable[[str, int], int]
    ) -> Cluster:
        """A lone server: a cluster of one, which owns every partition."""
        return cls([node], node.node_id, partitions, partition_for, lone=True)

    @property
    def me(self) -> Node:
        return self._by_id[self.node_id]

    def node(self, node_id: int) -> Node:
        return self._by_id[node_id]

    def peers(self) -> list[Node]:
        return [n for n in self.nodes if n.node_id != self.node_id]

    def describe(self) -> str:
        return describe(self.nodes)

    # -- the rule ---------------------------------------------------------------------------

    def owner(self, partition: int) -> Node:
        """The node that owns offsets partition `partition`."""
        return self.nodes[partition % len(self.nodes)]

    def coordinator(self, group_id: str) -> Node | None:
        """The node that coordinates `group_id`: the owner of its partition (None while no
        node owns it)."""
        return self.owner(self.partition_for(group_id, self.partitions))

    def leader(self, partition: int) -> int:
        """The id of the node that leads partition `partition` of any topic."""
        return self.nodes[partition % len(self.nodes)].node_id

    @cached_property
    def owned(self) -> frozenset[int]:
        """The offsets partitions this node owns."""
        return frozenset(p for p in range(self.partitions) if self.owner(p).node_id == self.node_id)

    def owns_all(self) -> bool:
        return len(self.nodes) == 1


class MappedCluster(Cluster):
    """A cluster kept in ZooKeeper (cluster/zookeeper.py): its nodes and each offsets
    partition's owner are the map's, as last read; every node that read the same map
    answers alike. Before a map is read, no partition has an owner: FindCoordinator is
    answered COORDINATOR_NOT_AVAILABLE, and clients ask again. The cluster id is the
    ZooKeeper path's, the same for every node and every map."""

    def __init__(
        self,
        me: Node,
        partitions: int,
        partition_for: Callable[[str, int], int],
        cluster_id: str,
        owners: dict[int, int] | None = None,
        nodes: dict[int, Node] | None = None,
    ) -> None:
        known = {**(nodes or {}), me.node_id: me}
        super().__init__(list(known.values()), me.node_id, partitions, partition_for)
        self.cluster_id = cluster_id
        self._owners = owners or {}

    def owner(self, partition: int) -> Node | None:  # type: ignore[override]
        owner = self._owners.get(partition)
        return None if owner is None else self._by_id.get(owner)

    @cached_property
    def owned(self) -> frozenset[int]:
        return frozenset(p for p, n in self._owners.items() if n == self.node_id)

    def owns_all(self) -> bool:
        return False


def zookeeper_cluster_id(chroot: str) -> str:
    """A cluster kept in ZooKeeper is named by where it is kept."""
    digest = hashlib.sha256(chroot.encode()).digest()[:12]
    return CLUSTER_ID_PREFIX + base64.urlsafe_b64encode(digest).decode().rstrip("=")
