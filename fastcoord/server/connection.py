"""One client connection: frames in, responses out in request order.

Requests are decoded and handled as they arrive; each takes a slot in a queue, and the
writer sends slots from the head as their responses are filled. A JoinGroup waiting for its
rebalance holds only its own slot: the requests behind it are read and handled (many
members may share one connection), and their responses wait their turn.

Except the requests of the same member. Kafka mutes a connection while a JoinGroup or
SyncGroup waits, so a member's next request (its heartbeat, say) is handled only after that
answer; handled earlier, a heartbeat during the rebalance would carry a stale
REBALANCE_IN_PROGRESS to a member whose join has just completed, and it would rejoin for
ever. So a request of a member with a JoinGroup or SyncGroup unanswered on this connection
waits, in order, until that answer. With one member per connection, as real clients have,
this is exactly Kafka's muting; members sharing a connection do not wait for each other.

When a client stops reading, the queue reaches connection.max.inflight.requests and
reading stops until it drains. A malformed frame closes this connection, with a log line
naming the peer and the reason; nothing else is affected. Bytes after a well-formed
request's message are ignored, as Kafka ignores them, with a DEBUG line per request. At
shutdown the connection stops reading and closes once it has sent every answer it owes.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from typing import TYPE_CHECKING

import trio

from fastcoord.protocol import frames
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode, ProtocolError, UnsupportedVersion
from fastcoord.protocol.framing import encode_response
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest
from fastcoord.protocol.schema import Request, Response
from fastcoord.protocol.versions import api_versions_response

if TYPE_CHECKING:
    from fastcoord.server.app import Server

log = logging.getLogger("fastcoord.server")
_SIZE = struct.Struct(">i")
READ_CHUNK = 65536
SLOW_READER_S = 1.0  # a client that takes no answers for this long is logged


class Slot:
    """A request's place in its connection's response order; a handle for the core."""

    __slots__ = ("api_key", "conn", "correlation_id", "data", "holds", "version")

    def __init__(self, conn: Connection, header: RequestHeader | None) -> None:
        self.conn = conn
        self.data: bytes | None = None
        self.holds: str | None = None  # the member whose later requests wait for this one
        self.api_key = header.api_key if header else -1
        self.version = header.api_version if header else 0
        self.correlation_id = header.correlation_id if header else 0

    def answer(self, response: Response) -> None:
        self.conn.fill(self, frames.encode_response(self.correlation_id, self.version, response))


class Connection:
    def __init__(self, server: Server, stream: trio.SocketStream, peer: str) -> None:
        self.server = server
        self.stream = stream
        self.peer = peer  # HOST:PORT, for log lines
        # What DescribeGroups shows as a member's client host: Kafka gives Java's
        # InetAddress.toString() of the peer, "/127.0.0.1", without the port.
        self.client_host = "/" + peer.rsplit(":", 1)[0]
        self.slots: deque[Slot] = deque()
        # member id -> requests of that member waiting for its JoinGroup or SyncGroup answer
        self.held: dict[str, deque[tuple[Slot, RequestHeader, Request]]] = {}
        self._buf = bytearray()  # bytes received; self._buf[:self._pos] are handled
        self._pos = 0
        self.closed = False
        self.finishing = False  # shutting down: read nothing more, send what is owed
        self._reading = trio.CancelScope()
        self._ready = trio.Event()  # the head slot may have data
        self._sending = False  # a task is in _send_ready
        self._reader_sends = False  # the reader will send what is ready: no need to wake
        # Reads and writes go straight to the socket's descriptor (non-blocking, as Trio
        # set it), and wait through Trio only when it would block: a round trip then costs
        # one scheduler pass and a few system calls instead of several of each, which is
        # most of a lone heartbeat's latency.
        self._fd = stream.socket.fileno()
        self._drained = trio.Event()  # the queue has room again

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer)
                with self._reading:
                    await self._reader()
                if not self.finishing:
                    nursery.cancel_scope.cancel()
                # else the writer ends once every answer owed has been sent
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            # The client went away: nothing to answer. except*, since the nursery hands a
            # reset met by the reader or the writer on in a group.
            pass
        finally:
            self.closed = True
            await trio.aclose_forcefully(self.stream)

    def fill(self, slot: Slot, data: bytes) -> None:
        if self.closed:
            return
        slot.data = data
        if self.slots and self.slots[0] is slot and not self._reader_sends:
            self._ready.set()
        if slot.holds is not None:
            self._release(slot.holds)

    def _release(self, member_id: str) -> None:
        """The member's JoinGroup or SyncGroup is answered: handle what it held back."""
        waiting = self.held.pop(member_id, None)
        while waiting:
            slot, header, request = waiting.popleft()
            self._dispatch(slot, header, request)
            if member_id in self.held:  # that one waits too: keep the rest behind it
                self.held[member_id].extend(waiting)
                return

    def _dispatch(self, slot: Slot, header: RequestHeader, request: Request) -> None:
        member_id = getattr(request, "member_id", None)
        if member_id is not None and member_id in self.held:
            self.held[member_id].append((slot, header, request))
            return
        if member_id is not None and isinstance(request, (JoinGroupRequest, SyncGroupRequest)):
            slot.holds = member_id
            self.held[member_id] = deque()
        self.server.dispatch(slot, header, request)
        if slot.holds is not None and slot.data is not None and member_id in self.held:
            # Answered at once: nothing needs to wait for it.
            slot.holds = None
            self._release(member_id)

    def finish(self) -> None:
        """Shutdown: stop reading; the writer sends the answers owed, then we close."""
        self.finishing = True
        self._reading.cancel()
        self._ready.set()

    def close(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, reason)
        self.closed = True

    # -- reading ------------------------------------------------------------------------

    async def _reader(self) -> None:
        idle_s = self.server.config.connections_max_idle_ms / 1000
        last_read = trio.current_time()
        while not self.closed:
            # One idle deadline serves many reads: it moves only when it fires early, so a
            # busy connection does not pay for a new cancel scope on every read. Progress
            # lives in self._buf and self._pos, so a cancel anywhere loses nothing.
            with trio.CancelScope(deadline=last_read + idle_s) as idle:
                while not self.closed:
                    try:
                        data = os.read(self._fd, READ_CHUNK)
                    except BlockingIOError:
                        await trio.lowlevel.wait_readable(self._fd)
                        continue
                    if not data:
                        return
                    last_read = trio.current_time()
                    if self._pos:
                        del self._buf[: self._pos]
                        self._pos = 0
                    self._buf += data
                    # Answer from this task: no wake-up of the writer for what is ready now.
                    # If the client does not read, this blocks, and we stop reading it.
                    self._reader_sends = True
                    try:
                        await self._handle_frames()
                        if self.closed:
                            return
                        await self._send_ready()
                    finally:
                        self._reader_sends = False
                    if len(data) < READ_CHUNK:
                        # Most likely all there was: wait for more rather than read again.
                        await trio.lowlevel.wait_readable(self._fd)
                    else:
                        await trio.lowlevel.checkpoint()  # let other connections run
            if idle.cancelled_caught and trio.current_time() >= last_read + idle_s:
                if self.slots:
                    last_read = trio.current_time()
                    continue  # waiting for our own answers is not idleness
                log.info("closing idle connection from %s", self.peer)
                return

    async def _handle_frames(self) -> None:
        """Handle every complete frame in the buffer; stop reading while the client does
        not read its answers."""
        config = self.server.config
        max_size = config.socket_request_max_bytes
        buf = self._buf
        while not self.closed:
            self._pos = self._answer_heartbeats(buf, self._pos, max_size)
            pos = self._pos
            if len(buf) - pos < 4:
                return
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > max_size:
                self.close(f"frame of {size} bytes (socket.request.max.bytes is {max_size})")
                return
            if len(buf) - pos - 4 < size:
                return
            while len(self.slots) >= config.connection_max_inflight_requests:
                # The client is not reading its answers: stop reading its requests.
                self._drained = trio.Event()
                await self._drained.wait()
            self._pos = pos + 4 + size
            self._handle(bytes(buf[pos + 4 : pos + 4 + size]))

    def _answer_heartbeats(self, buf: bytearray, pos: int, max_size: int) -> int:
        """The fast path: heartbeats the member table answers alone, from the receive buffer
        straight into one answer slot. Not while a member here waits for its JoinGroup or
        SyncGroup answer (its heartbeat must wait too) or the table may not answer alone."""
        if self.held:
            return pos
        table = self.server.heartbeat_table()
        if table is None:
            return pos
        out = bytearray()
        trailing: list[tuple[int, int]] = []
        pos, answered = frames.hot.answer_heartbeats(
            buf, pos, max_size, table, self.server.now_ms(), out, trailing
        )
        if answered:
            self.fill(self._slot(None), bytes(out))
        for version, extra in trailing:
            self._ignored(HeartbeatRequest, version, extra)
        return pos

    def _ignored(self, cls: type[Request], version: int, extra: int) -> None:
        log.debug(
            "%s sent %s v%d with %d bytes after the message: ignored, as Kafka does",
            self.peer,
            cls.__name__,
            version,
            extra,
        )

    def _handle(self, frame: bytes) -> None:
        try:
            header, request, extra = frames.decode_request(frame)
        except UnsupportedVersion as exc:
            if exc.api_key == ApiKey.API_VERSIONS:
                # KIP-511: answer in v0 with our ranges so that the client can pick one.
                slot = self._slot(None)
                slot.correlation_id = exc.correlation_id
                self.fill(
                    slot,
                    encode_response(
                        exc.correlation_id, 0, api_versions_response(ErrorCode.UNSUPPORTED_VERSION)
                    ),
                )
                return
            self.close(str(exc))
            return
        except ProtocolError as exc:
            self.close(f"malformed request: {exc}")
            return
        if extra:
            self._ignored(type(request), header.api_version, extra)
        self._dispatch(self._slot(header), header, request)

    def _slot(self, header: RequestHeader | None) -> Slot:
        slot = Slot(self, header)
        self.slots.append(slot)
        return slot

    # -- writing ------------------------------------------------------------------------

    async def _writer(self) -> None:
        """Send answers that become ready while the reader waits (a JoinGroup completed by
        another member, a Fetch whose wait is over)."""
        while True:
            while not (self.slots and self.slots[0].data is not None):
                if (self.closed or self.finishing) and not self.slots:
                    return
                self._ready = trio.Event()
                await self._ready.wait()
            await self._send_ready()

    async def _send_ready(self) -> None:
        """Send every answer ready at the head of the queue. One task sends at a time, and
        it sends until nothing is ready, so an answer filled meanwhile is not left behind."""
        if self._sending:
            return
        self._sending = True
        try:
            while self.slots and self.slots[0].data is not None:
                out = bytearray()
                while self.slots and (data := self.slots[0].data) is not None:
                    self.slots.popleft()
                    out += data
                await self._send_all(out)
            if len(self.slots) < self.server.config.connection_max_inflight_requests:
                self._drained.set()
        finally:
            self._sending = False

    async def _send_all(self, data: bytearray) -> None:
        view = memoryview(data)
        sent = 0
        stalled = False
        while sent < len(view):
            try:
                sent += os.write(self._fd, view[sent:])
            except BlockingIOError:
                if stalled:
                    await trio.lowlevel.wait_writable(self._fd)
                    continue
                with trio.move_on_after(SLOW_READER_S) as slow:
                    await trio.lowlevel.wait_writable(self._fd)
                if slow.cancelled_caught:
                    stalled = True
                    log.warning(
                        "client at %s has not read its answers for %.0f s: not reading its "
                        "requests until it does (%d bytes waiting)",
                        self.peer,
                        SLOW_READER_S,
                        len(view) - sent,
                    )
        if stalled:
            log.info("client at %s reads its answers again", self.peer)
