"""What one node may serve, from the ownership map it last read and its ZooKeeper session.

A partition is served by the node the map gives it to, once that node has loaded the
partition's records (COORDINATOR_LOAD_IN_PROGRESS until then, as Kafka answers), and by
no other node (NOT_COORDINATOR). Two nodes must never serve one partition, and the map
alone cannot promise it: a node cut off from ZooKeeper does not see the map change. So
this node stops serving on its own clock once its session may have ended:

- ZooKeeper expires a session `session_timeout_ms` after it last heard from the client;
  only then does the elected node see this node's registration vanish and give its
  partitions away.
- kazoo declares the connection lost (SUSPENDED) when nothing was read for two thirds of
  the session timeout (its read timeout; it pings at half of that). So when SUSPENDED
  comes, ZooKeeper last heard from us at most two thirds of a timeout before, and may
  expire the session one third of a timeout after.
- A node therefore serves nothing from `suspended + session_timeout_ms // 3` until it is
  connected again with its session resumed. A stopped ZooKeeper expires nobody (at its
  restart it restores sessions from its log with fresh timeouts), but the node cannot tell
  that from here, so it stops all the same.

A lost session (LOST: ZooKeeper said it expired) ends every partition at once; a new
session starts from nothing, and the map says again what to load. Sans-IO: time enters
as `now_ms`, the map as a mapping, the session's state changes as calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass
class Changes:
    """What a new map or session state asks of the node: partitions to start loading, and
    partitions to stop serving (their groups unloaded)."""

    load: list[int] = field(default_factory=list)
    drop: list[int] = field(default_factory=list)


class Serving:
    def __init__(self, node_id: int, session_timeout_ms: int) -> None:
        self.node_id = node_id
        self.session_timeout_ms = session_timeout_ms
        self._owned: dict[int, bool] = {}  # partition -> loaded
        self._suspended_at: int | None = None
        self._connected = False

    # -- the session -------------------------------------------------------------------

    def connected(self) -> None:
        """A session is established, or resumed after SUSPENDED."""
        self._connected = True
        self._suspended_at = None

    def connected_now(self) -> bool:
        """Whether the node is connected and was not cut off (then a CONNECTED is the one
        it knew of); else it is connected from now on, and the caller reads the map again."""
        if self._connected and self._suspended_at is None:
            return True
        self.connected()
        return False

    def suspended(self, now_ms: int) -> None:
        """The connection to ZooKeeper is lost; the session may live on a while."""
        if self._connected and self._suspended_at is None:
            self._suspended_at = now_ms

    def lost(self) -> Changes:
        """ZooKeeper expired the session: every partition goes."""
        self._connected = False
        self._suspended_at = None
        dropped = sorted(self._owned)
        self._owned.clear()
        return Changes(drop=dropped)

    def serving_until_ms(self) -> int | None:
        """While suspended, when this node stops serving (None when connected)."""
        if self._suspended_at is None:
            return None
        return self._suspended_at + self.session_timeout_ms // 3

    # -- the map -----------------------------------------------------------------------

    def map_read(self, owners: Mapping[int, int]) -> Changes:
        """The map as last read from ZooKeeper: start loading what it gives this node that
        it does not hold, drop at once what it no longer gives it."""
        mine = {p for p, node in owners.items() if node == self.node_id}
        drop = sorted(set(self._owned) - mine)
        load = sorted(mine - set(self._owned))
        for partition in drop:
            del self._owned[partition]
        for partition in load:
            self._owned[partition] = False
        return Changes(load=load, drop=drop)

    def loaded(self, partition: int) -> bool:
        """The partition's records are loaded: it is served from now on, if it is still
        this node's (False when the map moved it away meanwhile)."""
        if partition not in self._owned:
            return False
        self._owned[partition] = True
        return True

    # -- requests ----------------------------------------------------------------------

    def owned(self) -> dict[int, bool]:
        """Partitions the map gives this node, and whether each is loaded."""
        return dict(self._owned)
