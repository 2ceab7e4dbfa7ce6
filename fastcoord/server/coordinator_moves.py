"""Coordinator moves: a node of a ZooKeeper-kept cluster follows the map of partitions.

The node's membership (cluster/zookeeper.py) reports each map it reads and each change of
its ZooKeeper session on kazoo's threads; they come here through a channel, on the Trio
thread that owns the core, in the order they happened. What the node may serve is
cluster/serving.py's: from a map, the partitions it gains and loses.

- A partition lost is resigned at once (Coordinator.resign: its groups answered
  NOT_COORDINATOR and unloaded); once every append made before is on disk, the core says
  it is unloaded, and its log is let go (closed, its lock released) so the new owner can
  take it.
- A partition gained is taken (its groups answered COORDINATOR_LOAD_IN_PROGRESS), its lock
  acquired (retried while the old owner still holds it: it lets go once it has written
  what it had; a killed one holds nothing), its log read and replayed, and then served.
- A session suspended is served until a third of the session timeout has passed, before
  ZooKeeper can expire it and give the partitions away; then every partition is resigned.
  Reconnected in time, the node takes again what the map, read afresh, gives it.

Metadata and FindCoordinator answer by the map last read (routing.MappedCluster), so any
node sends a client to the owner the map names.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from kazoo.client import KazooState

from fastcoord.cluster.routing import MappedCluster, Node, zookeeper_cluster_id
from fastcoord.cluster.serving import Changes, Serving
from fastcoord.cluster.zookeeper import Membership, OwnershipMap, split_hosts
from fastcoord.core.result import Event, Result
from fastcoord.faults import Fault
from fastcoord.storage.lock import PartitionLocked

if TYPE_CHECKING:
    from fastcoord.server.app import Server

log = logging.getLogger("fastcoord.cluster")

LOCK_RETRY_S = 0.05  # how often a gained partition's lock is tried while the old owner has it
REPLAY_CHECKPOINT = 10_000  # records replayed between two looks at the rest of the server


@dataclass
class Taking:
    """A partition being taken: its task's scope, and when it is over."""

    scope: trio.CancelScope
    done: trio.Event


class CoordinatorMoves:
    def __init__(self, server: Server, zookeeper: str, session_timeout_ms: int) -> None:
        self.server = server
        cluster = server.cluster
        self.me: Node = cluster.me
        self.partitions = cluster.partitions
        self.partition_for = cluster.partition_for
        _, chroot = split_hosts(zookeeper)
        self.cluster_id = zookeeper_cluster_id(chroot)
        self.session_timeout_ms = session_timeout_ms
        self.serving = Serving(self.me.node_id, session_timeout_ms)
        self.map: OwnershipMap | None = None
        self._send, self._receive = trio.open_memory_channel[tuple[str, Any]](math.inf)
        self._token = trio.lowlevel.current_trio_token()
        self.membership = Membership(
            zookeeper,
            self.me,
            self.partitions,
            session_timeout_ms,
            lambda read: self._report("map", read),
            lambda state: self._report("state", state),
        )
        self._taking: dict[int, Taking] = {}
        self._settling: dict[int, trio.Event] = {}  # resigned, not yet let go
        self._suspension = trio.CancelScope()
        self._nursery: trio.Nursery | None = None
        self.taken = 0  # partitions loaded here since the start, for the admin port
        self.follow(None)

    # -- from kazoo's threads -----------------------------------------------------------

    def _report(self, kind: str, value: Any) -> None:
        with contextlib.suppress(trio.RunFinishedError):  # the server has stopped
            self._token.run_sync_soon(self._send.send_nowait, (kind, value))

    # -- the task -----------------------------------------------------------------------

    async def join(self) -> None:
        """Connect to ZooKeeper and register (KazooTimeoutError when it cannot be
        reached); run() then follows the map."""
        # Kafka's zookeeper.connection.timeout.ms defaults to the session timeout too.
        await trio.to_thread.run_sync(self.membership.start, self.session_timeout_ms / 1000)
        self.serving.connected()
        log.info(
            "node %d joined the cluster kept in ZooKeeper at %s (session timeout %d ms)",
            self.me.node_id,
            self.membership.chroot,
            self.session_timeout_ms,
        )

    async def run(self) -> None:
        """Follow the cluster's map until cancelled (after join()); then leave it."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                async for kind, value in self._receive:
                    if kind == "map":
                        self._map_read(value)
                    else:
                        await self._state_changed(value)
            finally:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self.membership.stop)

    def follow(self, read: OwnershipMap | None) -> None:
        """Route by `read`: Metadata and FindCoordinator name its owners."""
        cluster = MappedCluster(
            self.me,
            self.partitions,
            self.partition_for,
            self.cluster_id,
            None if read is None else read.owners,
            None if read is None else read.nodes,
        )
        self.server.cluster = cluster
        self.server.broker.cluster = cluster

    def _map_read(self, read: OwnershipMap) -> None:
        if self.map is not None and read.version < self.map.version:
            return  # an older read overtaken by a newer one
        self.map = read
        self.follow(read)
        if self.serving.serving_until_ms() is not None:
            return  # suspended: what it gives is taken once the session is back
        self._apply(self.serving.map_read(read.owners))

    async def _state_changed(self, state: str) -> None:
        now = self.server.now_ms()
        if state == KazooState.SUSPENDED:
            log.warning(
                "ZooKeeper connection lost: serving for %d ms more unless it is back",
                self.session_timeout_ms // 3,
            )
            self.serving.suspended(now)
            self._suspension = trio.CancelScope()
            assert self._nursery is not None
            self._nursery.start_soon(self._stop_serving_when_due, self._suspension)
        elif state == KazooState.LOST:
            log.warning("ZooKeeper session expired: every partition is resigned")
            self._suspension.cancel()
            self._apply(self.serving.lost())
        elif state == KazooState.CONNECTED:
            self._suspension.cancel()
            if self.serving.connected_now():
                return  # the first connection (join()), or one never suspended
            log.info("ZooKeeper connection back: following the map again")
            try:
                read = await trio.to_thread.run_sync(self.membership.read)
            except Exception as exc:  # lost again: the next CONNECTED reads it
                log.info("the map could not be read after the reconnect: %s", exc)
                return
            if read is not None:
                self.map = None  # a fresh read: whatever came before it
                self._map_read(read)

    async def _stop_serving_when_due(self, scope: trio.CancelScope) -> None:
        with scope:
            until = self.serving.serving_until_ms()
            if until is None:
                return
            await trio.sleep(max(0.0, (until - self.server.now_ms()) / 1000))
            log.warning(
                "ZooKeeper unreachable for a third of the session timeout: every partition "
                "is resigned before the session can expire"
            )
            self._apply(self.serving.lost())

    # -- partitions ---------------------------------------------------------------------

    def _apply(self, changes: Changes) -> None:
        for partition in changes.drop:
            self._resign(partition)
        for partition in changes.load:
            assert self._nursery is not None
            taking = Taking(trio.CancelScope(), trio.Event())
            self._taking[partition] = taking
            self._nursery.start_soon(self._take, partition, taking)
        if changes.drop or changes.load:
            log.info(
                "offsets partitions: taking %s, resigned %s; %d in all",
                changes.load,
                changes.drop,
                len(self.serving.owned()),
            )

    def _resign(self, partition: int) -> None:
        server = self.server
        taking = self._taking.pop(partition, None)
        if taking is not None:
            taking.scope.cancel()
        settled = self._settling[partition] = trio.Event()
        assert self._nursery is not None
        nursery = self._nursery

        def unloaded(partition: int) -> None:
            nursery.start_soon(self._let_go, partition, taking, settled)

        server.apply(server.coordinator.resign(partition, server.now_ms(), unloaded))
        server.parking.refresh()

    async def _let_go(self, partition: int, taking: Taking | None, settled: trio.Event) -> None:
        """The partition is unloaded: let its log go once a take under way is over."""
        if taking is not None:
            await taking.done.wait()
        await trio.to_thread.run_sync(self.server.store.release, partition)
        log.debug("offsets partition %d let go", partition)
        settled.set()
        if self._settling.get(partition) is settled:
            del self._settling[partition]

    async def _take(self, partition: int, taking: Taking) -> None:
        server = self.server
        co = server.coordinator
        started = time.monotonic()
        try:
            with taking.scope:
                settling = self._settling.get(partition)
                if settling is not None:
                    await settling.wait()  # resigned a moment ago: let go first
                co.take(partition)
                server.parking.refresh()
                waited = False
                while True:
                    try:
                        await trio.to_thread.run_sync(server.store.acquire, partition)
                        # A thread's call is not cancelled: a resignation meanwhile ends
                        # the take here, before anything of the partition is replayed.
                        await trio.lowlevel.checkpoint()
                        break
                    except PartitionLocked as exc:
                        if not waited:
                            log.info("offsets partition %d: waiting, %s", partition, exc)
                            waited = True
                        await trio.sleep(LOCK_RETRY_S)
                records = await trio.to_thread.run_sync(server.store.recover, partition)
                await trio.lowlevel.checkpoint()  # resigned while it read: replay nothing
                now = server.now_ms()
                for i, record in enumerate(records):
                    co.replay(record, now, loading=True)
                    if i % REPLAY_CHECKPOINT == REPLAY_CHECKPOINT - 1:
                        await trio.lowlevel.checkpoint()
                co.loading_partitions.discard(partition)
                self._report_loaded(partition, now)
                self.serving.loaded(partition)
                server.store.loaded(partition)
                server.parking.refresh()
                server.timers_changed()  # the loaded members' sessions have started
                self.taken += 1
                log.info(
                    "offsets partition %d loaded: %d records in %.3f s",
                    partition,
                    len(records),
                    time.monotonic() - started,
                )
        finally:
            taking.done.set()
            if self._taking.get(partition) is taking:
                del self._taking[partition]

    def _report_loaded(self, partition: int, now_ms: int) -> None:
        """A group_loaded event for each group of `partition` with members: the mark, on
        the node it moved to, of when its members may carry on."""
        server = self.server
        co = server.coordinator
        in_partition = [
            (group_id, group.generation_id, len(group.members), str(group.state))
            for group_id, group in co.groups.items()
            if group.members and self.partition_for(group_id, self.partitions) == partition
        ] + [
            (group_id, group.group_epoch, len(group.members), str(group.state))
            for group_id, group in co.consumer_groups.items()
            if group.members and self.partition_for(group_id, self.partitions) == partition
        ]
        events = [
            Event(
                at_ms=now_ms,
                kind="group_loaded",
                group_id=group_id,
                generation=generation,
                members=members,
                reason=state,
            )
            for group_id, generation, members, state in in_partition
        ]
        if events:
            server.apply(Result(events=events))  # logged, counted, in the event log

    # -- moves ----------------------------------------------------------------------------

    def move_group(self, group: str, fault: Fault) -> None:
        """A move_coordinator fault: if this node coordinates `group`, its partition moves
        to the next live node (by id, after this one)."""
        partition = int(self.partition_for(group, self.partitions))
        read = self.map
        if read is None or read.owners.get(partition) != self.me.node_id:
            return  # another node coordinates it, and moves it
        others = sorted(n for n in read.nodes if n != self.me.node_id)
        if not others:
            log.warning("fault #%d: no other node to move group %s to", fault.id, group)
            return
        target = next((n for n in others if n > self.me.node_id), others[0])
        assert self._nursery is not None
        self._nursery.start_soon(self._move_group, group, partition, target, fault)

    async def _move_group(self, group: str, partition: int, target: int, fault: Fault) -> None:
        try:
            await self.move(partition, target)
        except Exception as exc:  # refused, or ZooKeeper unreachable: the run goes on
            log.warning("fault #%d: group %s's coordinator not moved: %s", fault.id, group, exc)
            return
        fault.injected += 1
        server = self.server
        reason = (
            f"fault #{fault.id}: offsets partition {partition} moved from node "
            f"{self.me.node_id} to node {target}"
        )
        event = Event(
            at_ms=server.now_ms(), kind="coordinator_moved", group_id=group, reason=reason
        )
        server.apply(Result(events=[event]))  # logged, counted, in the event log

    # -- for the admin port -------------------------------------------------------------

    async def move(self, partition: int, node_id: int) -> OwnershipMap:
        """An operator's move; MoveRefused says why not."""
        return await trio.to_thread.run_sync(self.membership.move, partition, node_id)

    def view(self) -> dict[str, Any]:
        """The map as this node last read it, and what it serves."""
        owned = self.serving.owned()
        read = self.map
        return {
            "node_id": self.me.node_id,
            "keeper": self.membership.keeper,
            "map_version": None if read is None else read.version,
            "owners": {} if read is None else {str(p): n for p, n in read.owners.items()},
            "nodes": {} if read is None else {str(n): v.address for n, v in read.nodes.items()},
            "serving": sorted(p for p, loaded in owned.items() if loaded),
            "loading": sorted(p for p, loaded in owned.items() if not loaded),
            "taken": self.taken,
        }


__all__ = ["CoordinatorMoves"]
