"""One client connection: frames in, responses out in request order.

Requests are decoded and handled as they arrive; each takes a slot in a queue, and answers
leave from the head of the queue as they are filled. A JoinGroup waiting for its rebalance
holds only its own slot: the requests behind it are read and handled (many members may
share one connection), and their answers wait their turn.

Except the requests of the same member. Kafka mutes a connection while a JoinGroup or
SyncGroup waits, so a member's next request (its heartbeat, say) is handled only after that
answer; handled earlier, a heartbeat during the rebalance would carry a stale
REBALANCE_IN_PROGRESS to a member whose join has just completed, and it would rejoin for
ever. So a request of a member with a JoinGroup or SyncGroup unanswered on this connection
waits, in order, until that answer. With one member per connection, as real clients have,
this is exactly Kafka's muting; members sharing a connection do not wait for each other.

Flow control. An answer is never cut: answers taken from the queue go to an output buffer
that only the writer task waits on, and no cancellation reaches it but the connection's
end, after which nothing is written. Owed answers are bounded by count
(connection.max.inflight.requests) and by bytes, per connection
(connection.queued.max.response.bytes) and for the server (queued.max.response.bytes, past
which a connection that owes answers waits); past a bound the connection's requests are not
read until its client reads. Idle means no bytes moved either way for
connections.max.idle.ms, Kafka's rule: a connection that waits for its own answer is not
idle, and one that owes ready answers and has written none for that long is closed, with a
line saying what it owed. When the client goes, what it sent and was owed is dropped.

A connection that owes nothing waits for its next bytes parked on the server's reactor
(parking.py) rather than through Trio: a read of heartbeats the member table answers alone
is answered there, in compiled code, and anything else comes back here with the bytes read,
to be handled as if this task had read them. So every rule above holds whichever way a
request goes.

A connection on a listener with TLS or SASL (security.py) does its TLS handshake first and
reads and writes through TLS's buffers, and passes each frame through SASL's state machine
before it is decoded; neither parks on the reactor, and heartbeats take the fast path only
once logged in and when authorization would allow them anyway. A plaintext connection is
exactly as described above.

A malformed frame closes this connection, with a log line naming the peer and the reason;
nothing else is affected. Bytes after a well-formed request's message are ignored, as Kafka
ignores them, with a DEBUG line per request. At shutdown the connection stops reading and
closes once it has sent every answer it owes.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

import trio

from fastcoord.protocol import frames
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.commit_batch import OffsetCommitAnswer, OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode, ProtocolError, UnsupportedVersion
from fastcoord.protocol.framing import encode_response
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest
from fastcoord.protocol.schema import Request, Response
from fastcoord.protocol.versions import api_versions_response
from fastcoord.security.tls import looks_like_tls
from fastcoord.server import security

if TYPE_CHECKING:
    from fastcoord.security.sasl import Authentication
    from fastcoord.security.tls import TlsTransport
    from fastcoord.server.dispatcher import Dispatcher
    from fastcoord.server.endpoint import Endpoint

log = logging.getLogger("fastcoord.server")
Served = Request | OffsetCommitBatch  # a decoded request: an OffsetCommit's is a batch
_SIZE = struct.Struct(">i")
_HEARTBEAT = int(ApiKey.HEARTBEAT)  # the low byte of the API key; the high byte is 0
_CONSUMER_GROUP_HEARTBEAT = int(ApiKey.CONSUMER_GROUP_HEARTBEAT)
# JoinGroup, Heartbeat, LeaveGroup, SyncGroup: the low byte of their API keys
_CLASSIC_GROUP = frozenset(
    int(k) for k in (ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP)
)
READ_CHUNK = 65536
SLOW_READER_S = 1.0  # a client that takes no answers for this long is logged
WRITE_CHUNK = 1 << 20  # answers copied to the output buffer at a time
# The most a connection handles of a read of the consumer protocol before it lets the rest
# of the server run (a Trio checkpoint; see _handle_frames_in_order): a turn of the loop
# runs every connection with bytes to handle, so this bounds how long the listener, the
# clock and a new connection wait behind a storm of joins on shared connections. A
# pipelined run of heartbeats is one frame here. At 1 ms a turn behind 100 busy
# connections (and the core's share of it, Server._share) kept a new connection's requests
# waiting up to half a second; 0.1 ms spent a fifth more CPU on the yields themselves.
TURN_NS = 150_000


class Slot:
    """A request's place in its connection's response order; a handle for the core."""

    __slots__ = ("api_key", "conn", "correlation_id", "data", "holds", "reply_filter", "version")

    def __init__(self, conn: Connection, header: RequestHeader | None) -> None:
        self.conn = conn
        self.data: bytes | None = None
        self.holds: str | None = None  # the member whose later requests wait for this one
        # What the answer passes through before it is sent (authorization's: a ListGroups
        # answer without the groups the client may not describe, denied partitions put back)
        self.reply_filter: Callable[[Any], Any] | None = None
        self.api_key = header.api_key if header else -1
        self.version = header.api_version if header else 0
        self.correlation_id = header.correlation_id if header else 0

    def answer(self, response: Response | OffsetCommitAnswer) -> None:
        if self.reply_filter is not None:
            response = self.reply_filter(response)
        code = getattr(response, "error_code", 0)
        if code and self.api_key != _HEARTBEAT:  # heartbeats are counted where answered
            self.conn.dispatcher.metrics.error(self.api_key, code)
        if not self.conn.closed:  # a client that has gone costs no encoding
            self.conn.fill(
                self, frames.encode_response(self.correlation_id, self.version, response)
            )


class Connection:
    def __init__(
        self,
        dispatcher: Dispatcher,
        stream: trio.SocketStream,
        peer: str,
        endpoint: Endpoint | None = None,
    ) -> None:
        self.dispatcher = dispatcher
        self.endpoint = endpoint  # its listener; None: a plaintext one
        self.stream = stream
        self.peer = peer  # HOST:PORT, for log lines
        # What DescribeGroups shows as a member's client host: Kafka gives Java's
        # InetAddress.toString() of the peer, "/127.0.0.1", without the port.
        self.client_host = "/" + peer.rsplit(":", 1)[0]
        # Who the client is, as ACLs name it: its SASL user, its TLS certificate's subject,
        # else Kafka's unauthenticated principal.
        self.principal = "User:ANONYMOUS"
        # Security (security.py): TLS once its handshake is done, SASL's state machine, and
        # whether frames pass its gate. A plaintext connection has none of it, and may
        # answer heartbeats on the fast path and park on the reactor, as it always has.
        self.tls: TlsTransport | None = None
        self.auth: Authentication | None = None
        self.gated = False
        self.fast = True  # heartbeats answered by the member table alone
        self.parks = True  # waits for bytes on the reactor (plaintext sockets only)
        self.login_started: trio.Event | None = None  # a SASL exchange began (security.py)
        # The largest frame read: smaller during a SASL exchange (sasl.server.max.receive.size)
        self.max_frame = dispatcher.config.socket_request_max_bytes
        self.nursery: trio.Nursery | None = None  # the connection's tasks, while it runs
        if endpoint is None or endpoint.plain:
            self.fast = self.parks = dispatcher.fast_path_allowed(self.principal)
        self.slots: deque[Slot] = deque()
        # member id -> requests of that member waiting for its JoinGroup or SyncGroup answer
        self.held: dict[str, deque[tuple[Slot, RequestHeader, Served]]] = {}
        # OffsetCommits read and not yet handed to the core
        self._commits: list[tuple[Slot, OffsetCommitBatch]] = []
        self._buf = bytearray()  # bytes received; self._buf[:self._pos] are handled
        self._pos = 0
        self._unhandled = False  # complete frames may wait in self._buf
        self._out = bytearray()  # answers taken from the queue and not yet written whole
        self.owed = 0  # bytes of answers filled and not yet written
        self.closed = False
        self.finishing = False  # shutting down: read nothing more, send what is owed
        self._last_io = trio.current_time()  # when bytes last moved, either way
        self._reading = trio.CancelScope()
        self._wake = trio.Event()  # the writer may have something to write
        self._room = trio.Event()  # the reader may go on: the connection is within its bounds
        self._reader_writes = False  # the reader will write what is ready: no need to wake
        self._write_queued = False  # the server has it write once it has delivered a Result
        self.wrote_during = 0  # the last Result during which it wrote at once (write_after)
        config = dispatcher.config
        self._max_inflight = config.connection_max_inflight_requests
        self._max_owed = config.connection_queued_max_response_bytes
        self._max_owed_total = config.queued_max_response_bytes
        # Reads and writes go straight to the socket's descriptor (non-blocking, as Trio
        # set it), and wait through Trio only when it would block: a round trip then costs
        # one scheduler pass and a few system calls instead of several of each, which is
        # most of a lone heartbeat's latency.
        self.fd = stream.socket.fileno()
        self._wait_first = False  # the last read took all there was: wait before reading
        # What the reactor handed back when it woke this connection from its park:
        # (self, answers, rest, more, error, trailing) as reactor.drain gives it, or None.
        self.handover: tuple[Any, ...] | None = None

    async def run(self) -> None:
        try:
            secured = self.endpoint is not None and not self.endpoint.plain
            if secured and not await security.begin(self):
                return
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                nursery.start_soon(self._writer)
                with self._reading:
                    if self.auth is None:
                        await self._reader()
                    else:
                        async with trio.open_nursery() as watching:
                            watching.start_soon(security.watch_login, self)
                            await self._reader()
                            watching.cancel_scope.cancel()
                if not self.finishing:
                    nursery.cancel_scope.cancel()
                # else the writer ends once every answer owed has been sent
        except* (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError) as group:
            # The client went away (a reset, a broken pipe): its doing, not a failure of
            # ours. except*, since the reader and the writer may both meet it.
            log.info("connection from %s ended by the client: %s", self.peer, _first(group))
        finally:
            self._discard()
            await trio.aclose_forcefully(self.stream)

    def _discard(self) -> None:
        """The connection is over: drop what was read and not handled, and what was owed."""
        self.closed = True
        self.dispatcher.owed_bytes -= self.owed
        self.owed = 0
        self.slots.clear()
        self.held.clear()
        self._out = bytearray()
        self._buf = bytearray()
        self._pos = 0

    def fill(self, slot: Slot, data: bytes) -> None:
        if self.closed:
            return
        slot.data = data
        self.owed += len(data)
        self.dispatcher.owed_bytes += len(data)
        if (
            self.slots
            and self.slots[0] is slot
            and not self._reader_writes
            and not self._write_queued
        ):
            # An answer filled from outside this connection's reading (a JoinGroup that
            # another member's request or a timer completed, an acknowledged commit):
            # written by whatever filled it, at once or when the server has delivered the
            # Result at hand (Dispatcher.write_after), as the reader writes its own. Waking the
            # writer task for it cost a scheduler pass per member, the most of a
            # 10,000-member rebalance's answers.
            if self.dispatcher.write_after(self):
                self._write_queued = True
            else:
                self.write_now()
        if slot.holds is not None:
            self._release(slot.holds)

    def write_now(self) -> None:
        """Write the answers ready, as much as the socket takes; the writer task is woken
        only for what it does not take, or to meet the error of a write that failed (a
        reset): that is this connection's end, not the caller's."""
        self._write_queued = False
        if self.closed:
            return
        try:
            written = self._write_ready()
        except OSError:
            written = False
        if not written:
            self._wake.set()

    def _release(self, member_id: str) -> None:
        """The member's JoinGroup or SyncGroup is answered: handle what it held back."""
        waiting = self.held.pop(member_id, None)
        while waiting:
            slot, header, request = waiting.popleft()
            self._dispatch(slot, header, request)
            if member_id in self.held:  # that one waits too: keep the rest behind it
                self.held[member_id].extend(waiting)
                return

    def _dispatch(self, slot: Slot, header: RequestHeader, request: Served) -> None:
        member_id = getattr(request, "member_id", None)
        if member_id is not None and member_id in self.held:
            self.held[member_id].append((slot, header, request))
            return
        if member_id is not None and isinstance(request, (JoinGroupRequest, SyncGroupRequest)):
            slot.holds = member_id
            self.held[member_id] = deque()
        self.dispatcher.dispatch(slot, header, request)
        if slot.holds is not None and slot.data is not None and member_id in self.held:
            # Answered at once: nothing needs to wait for it.
            slot.holds = None
            self._release(member_id)

    def finish(self) -> None:
        """Shutdown: stop reading; the writer sends the answers owed, then we close."""
        self.finishing = True
        self._reading.cancel()
        self._wake.set()

    def close(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, reason)
        self.closed = True

    def drop(self, reason: str) -> None:
        """Close at once, from anywhere (a fault rule): what is owed is not sent."""
        log.info("dropping connection from %s: %s", self.peer, reason)
        self.closed = True
        self._reading.cancel()
        self._wake.set()

    # -- reading ------------------------------------------------------------------------

    async def _reader(self) -> None:
        idle_s = self.dispatcher.config.connections_max_idle_ms / 1000
        waited_from = self._last_io  # idleness is counted from here or the last bytes moved
        while not self.closed:
            # One idle deadline serves many reads: it moves only when it fires early, so a
            # busy connection does not pay for a new cancel scope on every read. Progress
            # lives in self._buf and self._pos, so a cancel anywhere loses nothing.
            deadline = max(self._last_io, waited_from) + idle_s
            with trio.CancelScope(deadline=deadline) as idle:
                while not self.closed:
                    if self._unhandled:  # handed over, or a cancel stopped the handling
                        await self._answer_buffered()
                        continue
                    if self._wait_first:
                        self._wait_first = False
                        if not await self._readable():
                            return
                        continue
                    try:
                        if self.tls is None:
                            data = os.read(self.fd, READ_CHUNK)
                        else:
                            data = self.tls.recv(READ_CHUNK)
                    except BlockingIOError:
                        if not await self._readable():
                            return
                        continue
                    if not data:
                        return
                    self._last_io = trio.current_time()
                    if self._pos:
                        del self._buf[: self._pos]
                        self._pos = 0
                    self._buf += data
                    self._unhandled = True
                    await self._answer_buffered()
                    if self.closed:
                        return
                    if len(data) < READ_CHUNK:
                        # Most likely all there was: wait for more rather than read again.
                        if not await self._readable():
                            return
                    else:
                        await trio.lowlevel.checkpoint()  # let other connections run
            if not idle.cancelled_caught:
                continue
            now = trio.current_time()
            if now < max(self._last_io, waited_from) + idle_s:
                continue  # bytes moved since the deadline was set
            if self._out or (self.slots and self.slots[0].data is not None):
                self.close(
                    f"it has taken no answer for {idle_s * 1000:.0f} ms "
                    f"(connections.max.idle.ms): {self.owed} bytes waiting, "
                    f"{len(self.slots)} more answers queued"
                )
                return
            if self.slots:
                waited_from = now  # waiting for our own answers is not idleness
                continue
            log.info("closing idle connection from %s", self.peer)
            return

    async def _readable(self) -> bool:
        """Wait until there are bytes to handle: parked on the reactor when this connection
        owes nothing, else through Trio. False when the client has closed its end."""
        parking = self.dispatcher.parking
        if parking.reactor is None or not self.parks or not self._owes_nothing():
            await trio.lowlevel.wait_readable(self.fd)
            return True
        self.handover = None
        if not await parking.park(self):
            await trio.lowlevel.wait_readable(self.fd)
            return True
        handover, self.handover = self.handover, None
        if handover is None:
            return True  # a cancel or the reactor's end: read the socket ourselves
        _, answers, rest, more, error, trailing = handover
        self._last_io = trio.current_time()
        for version, extra in trailing or ():
            self._ignored(HeartbeatRequest, version, extra)
        self.take_back(answers, rest)
        self._wait_first = not more
        if error == errno.ENOMEM:
            # What the reactor read could not be kept: the next bytes in the socket may be
            # the middle of a request, so the connection ends here; the client reconnects.
            log.error("connection from %s closed: no memory to keep what it sent", self.peer)
            return False
        if error > 0:
            raise OSError(error, os.strerror(error))
        return error == 0

    def take_back(self, answers: bytes, rest: bytes) -> None:
        """What the reactor took from the socket for us: answers to send first, bytes read
        to handle (also when a cancel took us off the reactor, parking.py)."""
        if answers:
            # The answers of the heartbeats that began the read (or what the socket did not
            # take): first in line, written with what follows by _answer_buffered.
            self._reader_writes = True
            self.fill(self._slot(None), answers)
            self._reader_writes = False
            self._unhandled = True
        if rest:
            if self._pos:
                del self._buf[: self._pos]
                self._pos = 0
            self._buf += rest
            self._unhandled = True

    def _owes_nothing(self) -> bool:
        """Nothing queued, unwritten or unhandled, and no member waiting for its answer."""
        return not (
            self.slots
            or self._out
            or self.held
            or self._commits
            or self._unhandled
            or self._pos < len(self._buf)
            or self.closed
            or self.finishing
        )

    def moved_at(self, t: float) -> None:
        """The reactor moved bytes on this connection at Trio time t."""
        if t > self._last_io:
            self._last_io = t

    async def _answer_buffered(self) -> None:
        """Handle the frames received, and write the answers ready from this task: no
        wake-up of the writer for what is ready now."""
        self._reader_writes = True
        try:
            await self._handle_frames()
            if not self.closed and not self._write_ready():
                self._wake.set()  # the socket is full: the writer waits for it
        finally:
            self._reader_writes = False
        self._unhandled = False

    async def _handle_frames(self) -> None:
        """Handle every complete frame in the buffer; stop reading while the connection
        owes more than its bounds."""
        try:
            await self._handle_frames_in_order()
        finally:
            self._commit_offsets()

    async def _handle_frames_in_order(self) -> None:
        max_size = self.max_frame
        buf = self._buf
        turn_ends = perf_counter_ns() + TURN_NS
        consumer = classic = False  # the read's group requests: which protocol (see below)
        while not self.closed and len(buf) - self._pos >= 4:
            if self._over_bounds():
                self._commit_offsets()
                await self._wait_for_room()
                continue  # closed meanwhile, or within bounds again
            pos = self._pos
            if (
                self.fast
                and len(buf) - pos >= 6
                and buf[pos + 5] in (_HEARTBEAT, _CONSUMER_GROUP_HEARTBEAT)
                and not buf[pos + 4]
            ):
                self._commit_offsets()
                self._pos = pos = self._answer_heartbeats(buf, pos, max_size)
            if len(buf) - pos < 4:
                return
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < 0 or size > max_size:
                self._oversized(size, max_size, bytes(buf[pos : pos + 3]))
                return
            if len(buf) - pos - 4 < size:
                return
            self._pos = pos + 4 + size
            if size >= 2 and not buf[pos + 4]:
                if buf[pos + 5] == _CONSUMER_GROUP_HEARTBEAT:
                    consumer = True
                elif buf[pos + 5] in _CLASSIC_GROUP:
                    classic = True
            self._handle(bytes(memoryview(buf)[pos + 4 : pos + 4 + size]))  # one copy, not two
            if (
                consumer
                and not classic
                and perf_counter_ns() > turn_ends
                and len(buf) - self._pos >= 4
            ):
                # This turn's share is spent: the listener, the clock and the other
                # connections run before the rest of the read. Answers keep their order
                # (the slots), and what was read stays in self._buf. Only in a read of
                # the consumer protocol (ConsumerGroupHeartbeats, no classic group
                # request). Classic reads are handled whole: split over turns, a load
                # generator's members sharing connections (100k in 1,000 groups on 100
                # connections) joined their groups in two rounds rather than one, and a
                # new member's JoinGroup, waiting for an old member of its group to
                # rejoin, then held up on their shared connection the very answer that
                # tells the old member to rejoin. Answers keep their order, so only the
                # old member's session timeout (45 s) broke the wait.
                await self._yield_turn()
                turn_ends = perf_counter_ns() + TURN_NS

    async def _yield_turn(self) -> None:
        """Let the rest of the server run: OffsetCommits read so far go to the core first,
        and the answers ready are written, so that nothing read waits behind the yield."""
        self._commit_offsets()
        if not self._write_ready():
            self._wake.set()
        self.dispatcher.turns_yielded += 1  # the core's tasks take as much (Server._share)
        reader_writes, self._reader_writes = self._reader_writes, False  # fills write meanwhile
        try:
            await trio.lowlevel.checkpoint()
        finally:
            self._reader_writes = reader_writes

    def _oversized(self, size: int, max_size: int, first: bytes) -> None:
        """A frame larger than may be read: the connection closes, saying why. A TLS
        ClientHello read as a size is a client that speaks TLS to a listener without it."""
        if self.tls is None and looks_like_tls(first):
            reason = "it sent a TLS handshake to a listener without TLS"
        elif self.auth is not None and max_size == self.auth.max_receive:
            reason = f"a SASL request of {size} bytes (sasl.server.max.receive.size is {max_size})"
        else:
            reason = f"frame of {size} bytes (socket.request.max.bytes is {max_size})"
        if self.auth is not None and max_size == self.auth.max_receive:
            security.refuse(self, reason)  # a failure during authentication, as Kafka's are
        else:
            self.close(reason)

    def _over_bounds(self) -> bool:
        return (
            len(self.slots) >= self._max_inflight
            or self.owed >= self._max_owed
            or (self.owed > 0 and self.dispatcher.owed_bytes >= self._max_owed_total)
        )

    async def _wait_for_room(self) -> None:
        """The client is not reading its answers fast enough: stop reading its requests
        until the writer has moved enough of them."""
        reader_writes, self._reader_writes = self._reader_writes, False  # fills wake the writer
        try:
            while self._over_bounds() and not self.closed:
                if self._write_ready() and not self._over_bounds():
                    return
                self._room = trio.Event()
                self._wake.set()
                await self._room.wait()
        finally:
            self._reader_writes = reader_writes

    def _answer_heartbeats(self, buf: bytearray, pos: int, max_size: int) -> int:
        """The fast path: heartbeats the member table answers alone (ConsumerGroupHeartbeats
        that change nothing too), from the receive buffer straight into one answer slot. Not
        while a member here waits for its JoinGroup or SyncGroup answer (its heartbeat must
        wait too) or the table may not answer alone."""
        if self.held:
            return pos
        table = self.dispatcher.heartbeat_table()
        if table is None:
            return pos
        out = bytearray()
        trailing: list[tuple[int, int]] = []
        consumer = table.consumer_heartbeat_answers()
        started = perf_counter_ns()
        pos, answered = frames.hot.answer_heartbeats(
            buf, pos, max_size, table, self.dispatcher.now_ms(), out, trailing, self.client_host
        )
        if answered:
            consumer = table.consumer_heartbeat_answers() - consumer
            self.dispatcher.metrics.table_answered(answered, consumer, perf_counter_ns() - started)
            self.fill(self._slot(None), bytes(out))
        for version, extra in trailing:
            self._ignored(HeartbeatRequest, version, extra)
        return pos

    def _ignored(self, cls: type[Served], version: int, extra: int) -> None:
        log.debug(
            "%s sent %s v%d with %d bytes after the message: ignored, as Kafka does",
            self.peer,
            cls.__name__,
            version,
            extra,
        )

    def _handle(self, frame: bytes) -> None:
        if self.gated and not security.admit(self, frame):
            return  # answered or refused by SASL's state machine
        try:
            header, request, extra = frames.decode_request(frame)
        except UnsupportedVersion as exc:
            self._commit_offsets()  # what came before is handled first
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
            self._commit_offsets()
            self.close(f"malformed request: {exc}")
            return
        if extra:
            self._ignored(type(request), header.api_version, extra)
        slot = self._slot(header)
        if type(request) is OffsetCommitBatch and request.member_id not in self.held:
            self._commits.append((slot, request))
        else:
            self._commit_offsets()
            self._dispatch(slot, header, request)

    def _commit_offsets(self) -> None:
        """Hand the OffsetCommits read since the last other request to the core, together:
        one Result, one write for all of them. Any other request, and any wait, comes after
        this, so the core sees every request in the order it was read."""
        if self._commits:
            commits, self._commits = self._commits, []
            self.dispatcher.commit_offsets(commits)

    def new_slot(self, header: RequestHeader | None) -> Slot:
        """A place in the answer order, for an answer made outside request handling."""
        return self._slot(header)

    def _slot(self, header: RequestHeader | None) -> Slot:
        slot = Slot(self, header)
        self.slots.append(slot)
        return slot

    # -- writing ------------------------------------------------------------------------

    def _write_ready(self) -> bool:
        """Write what is ready, as much as the socket takes now, without waiting; True when
        nothing ready is left unwritten. Bytes taken from the queue stay in self._out until
        written, so a stop anywhere cuts no answer."""
        out = self._out
        slots = self.slots
        tls = self.tls
        if tls is not None and tls.pending and not tls.flush():
            return False  # ciphertext still waits for the socket
        while slots and len(out) < WRITE_CHUNK and (data := slots[0].data) is not None:
            slots.popleft()
            out += data
        if not out:
            return True
        try:
            sent = os.write(self.fd, out) if tls is None else tls.send(out)
        except BlockingIOError:
            return False
        del out[:sent]
        self.owed -= sent
        self.dispatcher.owed_bytes -= sent
        self._last_io = trio.current_time()
        if not self._room.is_set() and not self._over_bounds():
            self._room.set()
        return (
            not out
            and not (slots and slots[0].data is not None)
            and (tls is None or not tls.pending)
        )

    async def _writer(self) -> None:
        """Write what the reader could not: answers filled while it waits (a JoinGroup
        completed by another member, a Fetch whose wait is over), and what a full socket
        did not take. This task alone waits for the socket to take more."""
        warned = False  # the client was logged as not reading
        while True:
            if self._write_ready():
                if warned:
                    log.info("client at %s reads its answers again", self.peer)
                    warned = False
                if self.closed or (self.finishing and not self.slots):
                    return  # closed: nothing more is sent; finishing: all owed was sent
                self._wake = trio.Event()
                await self._wake.wait()
            elif warned:
                await trio.lowlevel.wait_writable(self.fd)
            else:
                with trio.move_on_after(SLOW_READER_S) as slow:
                    await trio.lowlevel.wait_writable(self.fd)
                if slow.cancelled_caught:
                    warned = True
                    log.warning(
                        "client at %s has not read its answers for %.0f s (%d bytes waiting)",
                        self.peer,
                        SLOW_READER_S,
                        self.owed,
                    )


def _first(group: BaseExceptionGroup[BaseException]) -> str:
    """The first exception of a (possibly nested) group, for a log line."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
