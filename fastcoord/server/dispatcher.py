"""What a connection needs of the server: the Dispatcher.

A connection reads requests and writes answers; everything else (handling a request,
committing offsets, delivering the core's Results, the member table that answers lone
heartbeats, the bounds shared by all connections) belongs to the server. The connection
and the reactor's parking see the server only through this interface, so neither imports
the server, and a test can stand anything that has these parts in its place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fastcoord.config import ServerConfig
    from fastcoord.protocol.commit_batch import OffsetCommitBatch
    from fastcoord.protocol.headers import RequestHeader
    from fastcoord.protocol.schema import Request
    from fastcoord.server.connection import Connection, Slot
    from fastcoord.server.metrics import Metrics
    from fastcoord.server.parking import Parking


class Dispatcher(Protocol):
    config: ServerConfig
    metrics: Metrics
    parking: Parking
    # Bytes of answers every connection owes, together: bounded by queued.max.response.bytes.
    owed_bytes: int
    # Connections that yielded their turn having work left: the core's tasks take as much.
    turns_yielded: int

    def now_ms(self) -> int: ...

    def dispatch(
        self, slot: Slot, header: RequestHeader, request: Request | OffsetCommitBatch
    ) -> None:
        """Handle a request read; its answer comes to `slot`, now or later."""

    def commit_offsets(self, commits: list[tuple[Slot, OffsetCommitBatch]]) -> None:
        """Handle OffsetCommits read together, in order."""

    def write_after(self, connection: Connection) -> bool:
        """Whether `connection`, just given an answer, leaves its write until the Result
        being delivered has been delivered whole."""

    def heartbeat_table(self) -> Any:
        """The member table when it may answer heartbeats alone, else None."""

    def fast_path_allowed(self, principal: str) -> bool:
        """Whether heartbeats of a client logged in as `principal` may be answered by the
        member table alone, without authorization's checks."""
