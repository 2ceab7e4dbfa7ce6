"""Connections parked on the reactor, driven over socket pairs in virtual time: whatever way a
request goes (answered by the reactor, or handed back to the connection whole, cut or mixed
with others), answers leave in request order with the answers the ordinary path gives; a
member's requests wait behind its own JoinGroup; idleness, shutdown and a failing reactor
behave as they do without the reactor."""

from __future__ import annotations

import logging
import socket
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord.config import ServerConfig
from fastcoord.core.group import STATE_NUMBERS
from fastcoord.core.native import member_table
from fastcoord.core.state import STABLE
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.framing import decode_response, encode_request
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    MetadataRequest,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from fastcoord.protocol.schema import Request, Response
from fastcoord.server.app import Server
from fastcoord.server.connection import Connection
from fastcoord.server.metrics import Metrics
from fastcoord.server.parking import Parking
from fastcoord.storage.memory import MemoryStore

IDLE_MS = 2_000
GROUP = "g"
HEARTBEAT = int(ApiKey.HEARTBEAT)


def config(**overrides: Any) -> ServerConfig:
    settings_: dict[str, Any] = {
        "group_initial_rebalance_delay_ms": 0,
        "connections_max_idle_ms": IDLE_MS,
        "auto_create_topics": "never",
        "topics": ["t:3"],
        **overrides,
    }
    return ServerConfig(**settings_)


class Wire:
    """The client's end of one connection: requests out, answers in, in order."""

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self.sock = sock
        self.correlation = 0
        self.waiting: deque[tuple[int, int, int]] = deque()  # correlation, api key, version
        self.buf = bytearray()
        self.closed = False

    def frame(self, request: Request, version: int) -> bytes:
        self.correlation += 1
        self.waiting.append((self.correlation, request.API_KEY, version))
        header = RequestHeader(request.API_KEY, version, self.correlation, "parking-test")
        return encode_request(header, request)

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[await self.sock.send(view) :]

    async def ask(self, request: Request, version: int) -> Response:
        await self.send(self.frame(request, version))
        return await self.receive()

    async def receive(self) -> Response:
        """The next answer: its correlation id must be the oldest request's."""
        while len(self.buf) < 4 or len(self.buf) - 4 < int.from_bytes(self.buf[:4], "big"):
            chunk = await self.sock.recv(65536)
            if not chunk:
                self.closed = True
                raise EOFError("the server closed the connection")
            self.buf += chunk
        size = int.from_bytes(self.buf[:4], "big")
        frame = bytes(self.buf[4 : 4 + size])
        del self.buf[: 4 + size]
        correlation, api_key, version = self.waiting.popleft()
        got, response = decode_response(api_key, version, frame)
        assert got == correlation, f"answer {got} came where {correlation} was due"
        return response


class Member:
    def __init__(self, wire: Wire, member_id: str, generation: int) -> None:
        self.wire = wire
        self.member_id = member_id
        self.generation = generation

    def heartbeat(self, version: int = 3, generation: int | None = None) -> bytes:
        gen = self.generation if generation is None else generation
        return self.wire.frame(HeartbeatRequest(GROUP, gen, self.member_id, None), version)


def join_request(member_id: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=GROUP,
        session_timeout_ms=600_000,
        rebalance_timeout_ms=600_000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol("range", b"")],
    )


async def join(wire: Wire) -> Member:
    """A new member joins alone (as leader), syncs and heartbeats: the group is Stable, and
    the connection parked."""
    first = await wire.ask(join_request(""), 5)
    assert isinstance(first, JoinGroupResponse)
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joined = await wire.ask(join_request(first.member_id), 5)
    assert isinstance(joined, JoinGroupResponse) and joined.error_code == 0
    member = Member(wire, joined.member_id, joined.generation_id)
    synced = await wire.ask(sync_request(member), 3)
    assert synced.error_code == 0
    # The connection waited through Trio for the SyncGroup's answer, which the core gives
    # once the assignment is stored: the next read is the connection's own, and then it
    # owes nothing and parks.
    assert (
        await wire.ask(HeartbeatRequest(GROUP, member.generation, member.member_id), 3)
    ).error_code == 0
    await trio.testing.wait_all_tasks_blocked()
    return member


def sync_request(member: Member) -> SyncGroupRequest:
    return SyncGroupRequest(
        group_id=GROUP,
        generation_id=member.generation,
        member_id=member.member_id,
        assignments=[SyncGroupRequestAssignment(member.member_id, b"")],
    )


@asynccontextmanager
async def serving(cfg: ServerConfig, count: int = 1) -> AsyncIterator[tuple[Server, list[Wire]]]:
    """A server with its reactor and clock, listening on loopback, and `count` connections
    to it (TCP_NODELAY: a cut request must not wait in the client's kernel for an ACK that
    comes in real time)."""
    store = MemoryStore(1)
    server = Server(cfg, store, max_connections=10)
    store.start(trio.lowlevel.current_trio_token().run_sync_soon, server.appended)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.parking.run)
        nursery.start_soon(server.clock)
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, server.handle_connection, listeners)
        wires = []
        for _ in range(count):
            sock = trio.socket.socket()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await sock.connect(("127.0.0.1", port))
            wires.append(Wire(sock))
        try:
            yield server, wires
        finally:
            nursery.cancel_scope.cancel()
            for wire in wires:
                wire.sock.close()


def run(main: Any) -> None:
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


# -- whatever way requests go, their answers are the ordinary path's, in order ---------------

KINDS = ["good", "good", "good", "good-v4", "stale", "unknown", "static", "versions", "metadata"]
EXPECTED = {
    "good": ErrorCode.NONE,
    "good-v4": ErrorCode.NONE,
    "stale": ErrorCode.ILLEGAL_GENERATION,  # the member table answers it alone
    "unknown": ErrorCode.UNKNOWN_MEMBER_ID,  # the full path's
    "static": ErrorCode.NONE,  # an instance id the group does not know fences nobody
    "versions": ErrorCode.NONE,
    "metadata": None,
}


def request_of(member: Member, kind: str) -> bytes:
    wire = member.wire
    if kind == "good":
        return member.heartbeat()
    if kind == "good-v4":
        return member.heartbeat(4)
    if kind == "stale":
        return member.heartbeat(generation=member.generation + 7)
    if kind == "unknown":
        return wire.frame(HeartbeatRequest(GROUP, member.generation, "nobody", None), 3)
    if kind == "static":
        return wire.frame(HeartbeatRequest(GROUP, member.generation, member.member_id, "i"), 3)
    if kind == "versions":
        return wire.frame(ApiVersionsRequest(), 0)
    return wire.frame(MetadataRequest(topics=None), 1)


Write = tuple[list[str], list[int], list[int], int]  # kinds, cuts, pauses (ms), pause after


@st.composite
def writes(draw: st.DrawFn) -> Write:
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=6))
    cuts = draw(st.lists(st.integers(1, 400), max_size=3))  # where the bytes are cut
    pauses = draw(st.lists(st.integers(0, IDLE_MS // 3), min_size=len(cuts), max_size=len(cuts)))
    return kinds, cuts, pauses, draw(st.integers(0, IDLE_MS // 3))


@settings(max_examples=40, deadline=None)
@given(st.lists(writes(), min_size=1, max_size=12), st.booleans())
def test_answers_are_the_ordinary_paths_in_order_whatever_way_requests_go(
    script: list[Write], read_as_we_go: bool
) -> None:
    async def main() -> None:
        async with serving(config()) as (server, [wire]):
            member = await join(wire)
            expected: list[ErrorCode | None] = []
            answers: list[Response] = []

            async def read(count: int) -> None:
                for _ in range(count):
                    answers.append(await wire.receive())

            for kinds, cuts, pauses, after in script:
                data = b"".join(request_of(member, kind) for kind in kinds)
                expected += [EXPECTED[kind] for kind in kinds]
                at = 0
                for cut, pause in zip(sorted(set(cuts)), pauses, strict=False):
                    if at < cut < len(data):
                        await wire.send(data[at:cut])
                        await trio.sleep(pause / 1000)
                        at = cut
                await wire.send(data[at:])
                if read_as_we_go:
                    await read(len(kinds))
                await trio.sleep(after / 1000)
            await read(len(expected) - len(answers))
            codes = [getattr(a, "error_code", None) for a in answers]
            assert [c if e is not None else None for c, e in zip(codes, expected, strict=True)] == (
                expected
            )
            await trio.testing.wait_all_tasks_blocked()
            assert len(server.parking) == 1  # owes nothing: parked again
            assert server.owed_bytes == 0

    run(main)


def test_lone_heartbeats_never_wake_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    handled: list[int] = []
    handle = Connection._handle_frames

    async def counting(self: Connection) -> None:
        handled.append(1)
        await handle(self)

    monkeypatch.setattr(Connection, "_handle_frames", counting)

    async def main() -> None:
        async with serving(config()) as (server, [wire]):
            member = await join(wire)
            joined = len(handled)
            for _ in range(20):
                await wire.send(member.heartbeat())
                assert (await wire.receive()).error_code == 0
                # Not a fraction of the idle time: a heartbeat that comes in the instant the
                # idle deadline takes the connection off the reactor is read by the
                # connection itself (answered all the same).
                await trio.sleep(0.3)
            assert len(handled) == joined  # every one answered by the reactor
            await wire.send(member.heartbeat() + member.heartbeat())  # one read, two answers
            assert [(await wire.receive()).error_code for _ in range(2)] == [0, 0]
            assert len(handled) == joined
            assert (await wire.ask(ApiVersionsRequest(), 0)).error_code == 0
            assert len(handled) == joined + 1  # handed back, handled, parked again
            await trio.testing.wait_all_tasks_blocked()
            assert len(server.parking) == 1

    run(main)


# -- a member's requests wait behind its own JoinGroup ----------------------------------------


def test_heartbeats_behind_a_waiting_joingroup_wait_for_its_answer() -> None:
    """A Stable member, parked; a second member joins, and the group rebalances. The first
    member's heartbeat is answered REBALANCE_IN_PROGRESS by the reactor; then it sends its
    JoinGroup, a heartbeat and an ApiVersions in one write: the heartbeat waits for the
    JoinGroup's answer (as Kafka's muting makes it), and everything is answered in order."""

    async def main() -> None:
        async with serving(config(), count=2) as (server, [wa, wb]):
            a = await join(wa)
            await trio.testing.wait_all_tasks_blocked()
            assert len(server.parking) == 2
            b_first = await wb.ask(join_request(""), 5)
            async with trio.open_nursery() as nursery:
                b_answer: list[Response] = []

                async def b_joins() -> None:
                    b_answer.append(await wb.ask(join_request(b_first.member_id), 5))

                nursery.start_soon(b_joins)
                await trio.testing.wait_all_tasks_blocked()
                assert (
                    await wa.ask(HeartbeatRequest(GROUP, 1, a.member_id, None), 3)
                ).error_code == (ErrorCode.REBALANCE_IN_PROGRESS)
                await wa.send(
                    wa.frame(join_request(a.member_id), 5)
                    + a.heartbeat()
                    + wa.frame(ApiVersionsRequest(), 0)
                )
                rejoined = await wa.receive()
                assert isinstance(rejoined, JoinGroupResponse) and rejoined.error_code == 0
                held = await wa.receive()  # handled after the JoinGroup's answer, not before
                assert held.error_code != ErrorCode.REBALANCE_IN_PROGRESS
                assert (await wa.receive()).error_code == 0
            assert b_answer[0].error_code == 0
            a.generation = rejoined.generation_id
            assert (await wa.ask(sync_request(a), 3)).error_code == 0
            await wb.ask(
                SyncGroupRequest(GROUP, a.generation, b_answer[0].member_id, assignments=[]), 3
            )
            await wa.send(a.heartbeat())
            assert (await wa.receive()).error_code == 0
            await trio.testing.wait_all_tasks_blocked()
            assert len(server.parking) == 2  # both owe nothing again

    run(main)


# -- idleness, shutdown, a failing reactor -----------------------------------------------------


def test_a_parked_connection_is_idle_only_if_no_bytes_move(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "fastcoord.server")
    ports: list[int] = []

    async def main() -> None:
        async with serving(config(), count=2) as (server, [busy, silent]):
            member = await join(busy)
            for _ in range(8):  # four times the idle time, answered by the reactor alone
                await busy.send(member.heartbeat())
                assert (await busy.receive()).error_code == 0
                await trio.sleep(IDLE_MS / 1000 / 2)
            assert await silent.sock.recv(1) == b""  # closed for idleness
            ports.append(silent.sock.getsockname()[1])
            assert (await busy.ask(ApiVersionsRequest(), 0)).error_code == 0
            assert len(server.parking) == 1

    run(main)
    closed = [r.getMessage() for r in caplog.records if "closing idle connection" in r.getMessage()]
    assert closed == [f"closing idle connection from 127.0.0.1:{ports[0]}"]


def test_shutdown_ends_parked_connections_and_answers_what_is_owed() -> None:
    async def main() -> None:
        async with serving(config(), count=2) as (server, [parked, waiting]):
            await join(parked)
            # A second member: its JoinGroup waits for the first to rejoin.
            await waiting.send(waiting.frame(join_request(""), 3))
            await trio.testing.wait_all_tasks_blocked()
            assert len(server.parking) == 1  # the other owes the JoinGroup's answer
            with trio.fail_after(10):
                await server.shutdown()
            assert len(server.parking) == 0 and not server.connections
            answer = await waiting.receive()  # what was owed, then the end
            assert answer.error_code == ErrorCode.NOT_COORDINATOR
            assert await waiting.sock.recv(1) == b""
            assert await parked.sock.recv(1) == b""

    run(main)


def test_a_failing_reactor_is_logged_and_connections_carry_on_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        async with serving(config()) as (server, [wire]):
            member = await join(wire)
            await trio.testing.wait_all_tasks_blocked()
            table = server.heartbeat_table
            failed: list[bool] = []

            def fails_once() -> Any:  # the reactor asks first
                if not failed:
                    failed.append(True)
                    raise RuntimeError("a bug")
                return table()

            server.heartbeat_table = fails_once  # type: ignore[method-assign]
            await wire.send(member.heartbeat())
            assert (await wire.receive()).error_code == 0
            assert server.parking.reactor is None and len(server.parking) == 0
            for _ in range(3):
                await wire.send(member.heartbeat())
                assert (await wire.receive()).error_code == 0

    run(main)
    assert any("the reactor failed" in r.getMessage() for r in caplog.records)


def test_a_read_the_reactor_cannot_keep_closes_its_connection_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """When the reactor has no memory to keep a read for the Trio side, the bytes are gone
    from the socket: that connection closes with a log line (it must not read on from the
    middle of a request), and the others, and the members of its group, carry on."""

    async def main() -> None:
        async with serving(config(), count=2) as (server, [a, b]):
            member = await join(a)
            assert (await b.ask(ApiVersionsRequest(), 0)).error_code == 0
            await trio.testing.wait_all_tasks_blocked()
            assert len(server.parking) == 2
            server.parking.reactor._fail_copies(1)
            await a.send(a.frame(ApiVersionsRequest(), 0))
            with pytest.raises(EOFError):
                await a.receive()
            assert (await b.ask(ApiVersionsRequest(), 0)).error_code == 0
            await b.send(b.frame(HeartbeatRequest(GROUP, member.generation, member.member_id), 3))
            assert (await b.receive()).error_code == 0
            assert len(server.connections) == 1

    with caplog.at_level(logging.INFO, logger="fastcoord.server"):
        run(main)
    closed = [r for r in caplog.records if "no memory to keep what it sent" in r.getMessage()]
    assert len(closed) == 1 and closed[0].levelname == "ERROR"
    assert not [r for r in caplog.records if r.exc_info], "a traceback: not the ENOMEM path"


class Refusing:
    """A reactor that takes no more sockets, as when the kernel's epoll watches run out."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def add(self, fd: int, conn: Any) -> None:
        raise OSError(28, "No space left on device")


def test_a_socket_the_reactor_refuses_waits_through_trio(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with serving(config(), count=2) as (server, [a, b]):
            ma = await join(a)
            server.parking.reactor = Refusing(server.parking.reactor)
            for _ in range(3):  # handed back, and then not parked again
                assert (await a.ask(ApiVersionsRequest(), 0)).error_code == 0
                await a.send(ma.heartbeat())
                assert (await a.receive()).error_code == 0
            assert (await b.ask(ApiVersionsRequest(), 0)).error_code == 0
            assert len(server.parking) == 0

    run(main)
    refused = [r for r in caplog.records if "cannot park" in r.getMessage()]
    assert len(refused) == 1 and refused[0].levelname == "WARNING"


class OneMemberDispatcher:
    """Of a Dispatcher, what the parking uses: the request size bound, the clock, the
    counters, and a member table of one Stable group with one member."""

    def __init__(self) -> None:
        self.config = config()
        self.metrics = Metrics()
        self.table = member_table.MemberTable()
        group = self.table.add_group(STATE_NUMBERS[STABLE], 1)
        self.table.bind(GROUP, "m", self.table.add_member(group, 10_000, 10_000))

    def now_ms(self) -> int:
        return 1_000

    def heartbeat_table(self) -> Any:
        return self.table


class Parked:
    """What the parking needs of a connection: its socket, and a place for the hand-over."""

    def __init__(self, sock: socket.socket) -> None:
        self.fd = sock.fileno()
        self.client_host = "/127.0.0.1"
        self.handover: tuple[Any, ...] | None = None
        self.moved: list[float] = []
        self.taken: list[tuple[bytes, bytes]] = []

    def moved_at(self, t: float) -> None:
        self.moved.append(t)

    def take_back(self, answers: bytes, rest: bytes) -> None:
        self.taken.append((answers, rest))


def test_parking_over_a_dispatcher_of_its_own() -> None:
    async def main() -> None:
        dispatcher = OneMemberDispatcher()
        parking = Parking(dispatcher)
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        client = Wire(trio.socket.from_stdlib_socket(theirs))
        conn = Parked(ours)
        stopped = trio.CancelScope()

        async def run_parking(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            with stopped:
                await parking.run(task_status=task_status)

        async with trio.open_nursery() as nursery:
            await nursery.start(run_parking)
            parked: list[bool] = []

            async def park() -> None:
                parked.append(await parking.park(conn))

            nursery.start_soon(park)
            await trio.testing.wait_all_tasks_blocked()
            # A lone heartbeat: answered on the reactor's thread by the dispatcher's table
            # and counted in its metrics (collected as a scrape does); the connection stays
            # parked.
            assert parking.reactor.threaded == hasattr(parking.reactor, "serve_ready")
            await client.send(client.frame(HeartbeatRequest(GROUP, 1, "m", None), 3))
            assert (await client.receive()).error_code == 0
            assert dispatcher.table.heartbeat_answers()[0] == 1
            parking.collect()
            assert dispatcher.metrics.handling[HEARTBEAT] is not None
            assert len(parking) == 1 and not parked
            # Anything else goes back to its connection with the bytes read (the thread
            # hands it to the Trio side: waited for, with a bound).
            request = client.frame(ApiVersionsRequest(), 0)
            await client.send(request)
            with trio.fail_after(10):
                while not parked:
                    await trio.sleep(0.001)
            assert parked == [True] and len(parking) == 0
            assert conn.handover == (conn, b"", request, False, 0, None)
            # Parked again when the reactor stops: handed back with nothing.
            nursery.start_soon(park)
            await trio.testing.wait_all_tasks_blocked()
            stopped.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert parked == [True, True] and conn.handover is None and len(conn.moved) == 1
        ours.close()
        theirs.close()

    trio.run(main)
