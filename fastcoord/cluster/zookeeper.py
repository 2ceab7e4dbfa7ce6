"""A node's membership in a ZooKeeper-kept cluster: its registration, the election of the
map keeper, and the map of offsets partitions to live nodes that every node follows.

The layout under the chroot (HOST:PORT/chroot, "/fastcoord" by default), as Kafka kept its
brokers and controller in ZooKeeper before KRaft:

- /nodes/ID: ephemeral, one per live node, holding the address clients reach it at; it
  vanishes when the node's session ends (stopped, killed, or cut off for the session
  timeout);
- /keeper: ephemeral, the id of the node elected to keep the map (Kafka's /controller):
  whoever creates it first; when it vanishes, every node tries again;
- /map: the map, JSON: each partition's owner and the address of every node it names, so
  that one read gives a node everything it routes by. Only the keeper writes it when nodes
  come and go (ownership.spread: the fewest partitions move); an operator's move of one
  partition may be written by any node. Every write is conditional on the version read,
  so a write based on a map that changed meanwhile is refused and done again.

kazoo runs its own threads; every callback here comes on one of them, and the caller hands
it to its event loop (TrioToken.run_sync_soon) without blocking. What a node may serve, given
the map and its session, is cluster/serving.py's: this module only reports.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from fastcoord.cluster import ownership
from fastcoord.cluster.routing import Node

log = logging.getLogger("fastcoord.cluster")

DEFAULT_CHROOT = "/fastcoord"
NODES, KEEPER, MAP = "/nodes", "/keeper", "/map"
MAX_MAP_BYTES = 1 << 20  # ZooKeeper's own limit on a node's data (jute.maxbuffer)


def reconnecting(session_timeout_ms: int) -> dict[str, float]:
    """kazoo's retries of the connection: for ever, and never more than a third of the
    session timeout apart. ZooKeeper back from an outage restores every session with its
    timeout started afresh, so a node must be back within it to keep its session (kazoo's
    own backoff grows to an hour)."""
    return {
        "max_tries": -1,
        "delay": 0.1,
        "backoff": 2,
        "max_jitter": 0.1,
        "max_delay": max(0.1, session_timeout_ms / 3000),
    }


class MoveRefused(ValueError):
    """A move that cannot be made; the message says why."""


@dataclass(frozen=True)
class OwnershipMap:
    """The map as read: its ZooKeeper version, each partition's owner, and the nodes."""

    version: int
    owners: dict[int, int]
    nodes: dict[int, Node]

    def encode(self) -> bytes:
        return json.dumps(
            {
                "owners": [self.owners[p] for p in range(len(self.owners))],
                "nodes": {str(n.node_id): n.address for n in self.nodes.values()},
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def decode(cls, data: bytes, version: int) -> OwnershipMap:
        """ValueError for anything that is not a map."""
        raw = json.loads(data)
        owners = {p: int(owner) for p, owner in enumerate(raw["owners"])}
        nodes = {}
        for node_id, address in raw["nodes"].items():
            host, _, port = address.rpartition(":")
            nodes[int(node_id)] = Node(int(node_id), host, int(port))
        if not set(owners.values()) <= set(nodes):
            raise ValueError("an owner without an address")
        return cls(version, owners, nodes)


def split_hosts(text: str) -> tuple[str, str]:
    """`HOST:PORT[,HOST:PORT...][/chroot]` as (hosts, chroot); the chroot defaults."""
    hosts, slash, chroot = text.partition("/")
    if not hosts or any(not h.rpartition(":")[2].isdigit() for h in hosts.split(",")):
        raise ValueError(f"--zookeeper {text!r}: expected HOST:PORT[,HOST:PORT...][/chroot]")
    return hosts, ("/" + chroot.strip("/")) if slash and chroot.strip("/") else DEFAULT_CHROOT


class Membership:
    """This node in the cluster ZooKeeper keeps. `on_map(map)` is called with each map
    read (first once registered), `on_state(state)` with each of kazoo's session states
    (KazooState: CONNECTED, SUSPENDED, LOST); both on kazoo's threads."""

    def __init__(
        self,
        zookeeper: str,
        me: Node,
        partitions: int,
        session_timeout_ms: int,
        on_map: Callable[[OwnershipMap], None],
        on_state: Callable[[str], None],
    ) -> None:
        hosts, self.chroot = split_hosts(zookeeper)
        self.me = me
        self.partitions = partitions
        self.on_map = on_map
        self.on_state = on_state
        # The chroot is prefixed here rather than given to kazoo, which wants it to exist
        # before it connects.
        self.nodes_path = self.chroot + NODES
        self.keeper_path = self.chroot + KEEPER
        self.map_path = self.chroot + MAP
        self.client = KazooClient(
            hosts=hosts,
            timeout=session_timeout_ms / 1000,
            connection_retry=reconnecting(session_timeout_ms),
        )
        self.client.add_listener(self._state_changed)
        self.keeper = False
        self._lock = threading.Lock()  # keeping the map: one pass at a time
        self._started = False  # registered once: a reconnect registers again if need be
        self._stopped = False

    # -- life -------------------------------------------------------------------------

    def start(self, timeout_s: float = 15.0) -> None:
        """Connect, register, stand for election and follow the map. Blocking."""
        self.client.start(timeout=timeout_s)
        self.client.ensure_path(self.nodes_path)
        self._register()
        self.client.DataWatch(self.map_path, self._map_changed)
        self.client.DataWatch(self.keeper_path, self._keeper_changed)
        self.client.ChildrenWatch(self.nodes_path, self._nodes_changed)
        self._started = True

    def stop(self) -> None:
        """Leave: the registration (and the keeper's node, if this node held it) goes at
        once rather than at the session's expiry. Blocking."""
        self._stopped = True
        try:
            self.client.stop()
        finally:
            self.client.close()

    # -- registration and election ------------------------------------------------------

    def _register(self) -> None:
        path = f"{self.nodes_path}/{self.me.node_id}"
        data = self.me.address.encode()
        try:
            self.client.create(path, data, ephemeral=True)
        except NodeExistsError:
            # A session of this id lives on (the node killed and restarted within its
            # session timeout): it is this node's only once that session has expired.
            stat = self.client.exists(path, watch=lambda event: self._retry_register())
            if stat is None:
                self._register()
                return
            log.warning(
                "node id %d is registered by another session (%s); waiting for it to end",
                self.me.node_id,
                self.client.get(path)[0].decode(errors="replace"),
            )
            return
        log.info("registered as node %d at %s", self.me.node_id, self.me.address)

    def _retry_register(self) -> None:
        if not self._stopped:
            self._spawn(self._register)

    def _keeper_changed(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        if self._stopped:
            return
        if data is None:
            self._spawn(self._stand)
        else:
            self.keeper = data == str(self.me.node_id).encode() and (
                stat is not None and stat.ephemeralOwner == self.client.client_id[0]
            )

    def _stand(self) -> None:
        """Stand for election: create /keeper, unless another node has."""
        if self._stopped:
            return
        try:
            self.client.create(self.keeper_path, str(self.me.node_id).encode(), ephemeral=True)
        except NodeExistsError:
            return  # another node won; its node's end calls this again
        log.info("node %d keeps the ownership map", self.me.node_id)
        self.keeper = True
        self.keep()

    def _nodes_changed(self, children: list[str]) -> None:
        if self.keeper and not self._stopped:
            self._spawn(self.keep)

    # -- the map ------------------------------------------------------------------------

    def live(self) -> dict[int, Node]:
        """The registered nodes, as ZooKeeper has them now."""
        nodes = {}
        for child in self.client.get_children(self.nodes_path):
            try:
                data, _ = self.client.get(f"{self.nodes_path}/{child}")
            except NoNodeError:
                continue
            host, _, port = data.decode().rpartition(":")
            nodes[int(child)] = Node(int(child), host, int(port))
        return nodes

    def read(self) -> OwnershipMap | None:
        """The map now, or None before the first is written."""
        try:
            data, stat = self.client.get(self.map_path)
        except NoNodeError:
            return None
        return OwnershipMap.decode(data, stat.version)

    def keep(self) -> None:
        """The keeper's pass: spread the partitions over the live nodes, moving the fewest,
        and write the map if it changed."""
        with self._lock:
            while self.keeper and not self._stopped:
                current = self.read()
                live = self.live()
                if not live:
                    return
                owners = ownership.spread(
                    current.owners if current else {}, live.keys(), self.partitions
                )
                named = {n: live[n] for n in sorted(set(owners.values()))}
                if current is not None and owners == current.owners and named == current.nodes:
                    return
                if self._write(OwnershipMap(-1, owners, named), current):
                    moved = ownership.moves(current.owners if current else {}, owners)
                    log.info(
                        "ownership map: %d partitions over nodes %s; %d moved",
                        self.partitions,
                        sorted(live),
                        len(moved),
                    )
                    return

    def move(self, partition: int, node_id: int) -> OwnershipMap:
        """Give `partition` to node `node_id` (an operator's move); the map written.
        MoveRefused for a partition or node that is not there. Blocking."""
        if not 0 <= partition < self.partitions:
            raise MoveRefused(f"no offsets partition {partition} (0-{self.partitions - 1})")
        while True:
            current = self.read()
            if current is None:
                raise MoveRefused("no ownership map yet: no node has been elected to write one")
            live = self.live()
            if node_id not in live:
                raise MoveRefused(f"node {node_id} is not live (live: {sorted(live)})")
            owners = ownership.move(current.owners, partition, node_id)
            nodes = {**current.nodes, node_id: live[node_id]}
            wanted = OwnershipMap(-1, owners, nodes)
            if owners == current.owners or self._write(wanted, current):
                return self.read() or wanted

    def _write(self, wanted: OwnershipMap, current: OwnershipMap | None) -> bool:
        """Write `wanted` if the map is still `current`; False if it changed meanwhile."""
        data = wanted.encode()
        if len(data) > MAX_MAP_BYTES:
            raise MoveRefused(f"the map would be {len(data)} bytes, over {MAX_MAP_BYTES}")
        try:
            if current is None:
                _, stat = self.client.create(self.map_path, data, include_data=True)
            else:
                stat = self.client.set(self.map_path, data, version=current.version)
        except (NodeExistsError, BadVersionError):
            return False
        # Every version of the map, when ZooKeeper took it (its clock, in ms) and each
        # partition's owner in partition order: the history an audit checks answers against.
        log.info(
            "ownership map version %d at %d: owners %s",
            stat.version,
            stat.mtime,
            " ".join(str(wanted.owners[p]) for p in range(len(wanted.owners))),
        )
        return True

    def _map_changed(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        if data is None or stat is None or self._stopped:
            return
        try:
            read = OwnershipMap.decode(data, stat.version)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("the ownership map in ZooKeeper cannot be read (%s); ignored", exc)
            return
        self.on_map(read)

    def _state_changed(self, state: str) -> None:
        if state == KazooState.CONNECTED and self._started and not self._stopped:
            # A new session after LOST has lost this node's ephemeral nodes: register again.
            self._spawn(self._after_connect)
        self.on_state(state)

    def _after_connect(self) -> None:
        if self.client.exists(f"{self.nodes_path}/{self.me.node_id}") is None:
            self._register()
        if self.client.exists(self.keeper_path) is None:
            self._stand()

    def _spawn(self, work: Callable[[], None]) -> None:
        """Run `work` on a kazoo thread. A connection lost meanwhile ends it: what it was
        for is done again when the session is back (CONNECTED), or by nobody once stopped."""

        def run() -> None:
            if self._stopped:
                return
            try:
                work()
            except Exception as exc:
                if not isinstance(exc, KazooException):
                    # A map that cannot be read, say: loud, and kazoo's thread goes on.
                    log.exception("ZooKeeper: %s failed", getattr(work, "__name__", work))
                elif not self._stopped:
                    log.info(
                        "ZooKeeper: %s cut short (%r); done again once reconnected",
                        getattr(work, "__name__", work),
                        exc,
                    )

        self.client.handler.spawn(run)
