"""The compiled reactor against its pure-Python twin, over socket pairs: the same hand-overs,
the same bytes written to each client, the same questions to the member table.

Runs whatever FASTCOORD_NO_EXTENSIONS says: both modules are imported directly.
"""

from __future__ import annotations

import errno
import math
import select
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord._ext import reactor as compiled  # type: ignore[attr-defined]
from fastcoord.protocol import frames, framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import ApiVersionsRequest, HeartbeatRequest, HeartbeatResponse
from fastcoord.server import reactor as twin
from tests.protocol.test_hot_frames import Table, stream_frames

MODULES = [compiled, twin]
MAX_SIZE = 200


class Conn:
    """What the reactor holds for a parked connection: here, a name."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"Conn({self.index})"


def heartbeat(member: str, version: int = 3, correlation: int = 1) -> bytes:
    header = RequestHeader(ApiKey.HEARTBEAT, version, correlation, "c")
    return framing.encode_request(header, HeartbeatRequest("g", 1, member, None))


def api_versions(correlation: int = 4) -> bytes:
    """A request no heartbeat path answers: handed back whole."""
    return framing.encode_request(
        RequestHeader(ApiKey.API_VERSIONS, 0, correlation, "c"), ApiVersionsRequest()
    )


def answer(member: str, version: int = 3, correlation: int = 1) -> bytes:
    code = (len(member) + 1) % 3 * 11  # what Table answers
    return frames.encode_response(correlation, version, HeartbeatResponse(error_code=code))


@contextmanager
def pairs(count: int) -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    made = [socket.socketpair() for _ in range(count)]
    for ours, _ in made:
        ours.setblocking(False)
    try:
        yield made
    finally:
        for ours, theirs in made:
            ours.close()
            theirs.close()


def received(sock: socket.socket) -> bytes:
    sock.setblocking(False)
    got = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except (BlockingIOError, ConnectionResetError):
            return got
        if not chunk:
            return got
        got += chunk


Step = tuple[str, int, bytes]  # (action, connection, bytes)


@st.composite
def steps(draw: st.DrawFn) -> list[Step]:
    out: list[Step] = []
    for _ in range(draw(st.integers(1, 12))):
        conn = draw(st.integers(0, 3))
        action = draw(st.sampled_from(["send", "send", "send", "drain", "close", "reset"]))
        data = b""
        if action == "send":
            data = b"".join(draw(st.lists(stream_frames(), max_size=5)))
            if data and draw(st.booleans()):
                data = data[: draw(st.integers(1, len(data)))]  # a frame cut by the read
        out.append((action, conn, data))
    return out


def play(module: Any, script: list[Step], answers_alone: list[bool]) -> list[Any]:
    """Run the script against one reactor: what each drain handed over, what each client
    received, what the table was asked and what `remove` says at the end."""
    record: list[Any] = []
    reactor = module.Reactor(MAX_SIZE)
    table = Table()
    conns = [Conn(i) for i in range(4)]
    try:
        with pairs(4) as sockets:
            for conn, (ours, _) in zip(conns, sockets, strict=True):
                reactor.add(ours.fileno(), conn)
            ended: set[int] = set()
            for n, (action, i, data) in enumerate(script):
                ours, theirs = sockets[i]
                if i in ended:
                    continue
                if action == "send":
                    theirs.sendall(data)
                elif action in ("close", "reset"):
                    if action == "reset":
                        theirs.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                    theirs.close()
                    ended.add(i)
                use = table if answers_alone[n % len(answers_alone)] else None
                handed = reactor.drain(use, 7, float(n))
                record.append(sorted((c.index, a, r, m, e, t) for c, a, r, m, e, t in handed))
                for c, *_ in handed:
                    if c.index not in ended:  # parked again, as a connection that owes nothing
                        reactor.add(sockets[c.index][0].fileno(), c)
                record.append(
                    [received(s) if k not in ended else b"" for k, (_, s) in enumerate(sockets)]
                )
            record.append(sorted(table.calls))
            record.append([reactor.remove(ours.fileno()) for ours, _ in sockets])
            record.append(len(reactor))
    finally:
        reactor.close()
    return record


@settings(max_examples=150, deadline=None)
@given(steps(), st.lists(st.booleans(), min_size=1, max_size=4))
def test_the_reactor_matches_the_twin(script: list[Step], answers_alone: list[bool]) -> None:
    assert play(compiled, script, answers_alone) == play(twin, script, answers_alone)


@pytest.mark.parametrize("module", MODULES, ids=["compiled", "twin"])
def test_a_read_of_heartbeats_is_answered_in_one_write(module: Any) -> None:
    reactor = module.Reactor(1 << 20)
    table = Table()
    try:
        with pairs(2) as [(a, client_a), (b, client_b)]:
            reactor.add(a.fileno(), "a")
            reactor.add(b.fileno(), "b")
            assert len(reactor) == 2 and reactor.drain(table, 5, 1.0) == []
            client_a.sendall(heartbeat("m", 3, 1) + heartbeat("mm", 4, 2) + heartbeat("m", 0, 3))
            client_b.sendall(heartbeat("bbb", 1, 9))
            assert reactor.drain(table, 5, 2.0) == []
            assert received(client_a) == answer("m", 3, 1) + answer("mm", 4, 2) + answer("m", 0, 3)
            assert received(client_b) == answer("bbb", 1, 9)
            assert len(reactor) == 2  # still parked: nothing handed back
            assert reactor.remove(a.fileno()) == 2.0  # when bytes last moved
            assert reactor.remove(a.fileno()) == -math.inf  # not parked any more
            assert reactor.remove(b.fileno()) == 2.0 and len(reactor) == 0
    finally:
        reactor.close()


@pytest.mark.parametrize("module", MODULES, ids=["compiled", "twin"])
def test_anything_else_is_handed_back_with_the_answers_of_the_heartbeats_before_it(
    module: Any,
) -> None:
    other = api_versions()
    reactor = module.Reactor(1 << 20)
    try:
        with pairs(5) as sockets:
            for i, (ours, _) in enumerate(sockets):
                reactor.add(ours.fileno(), i)
            inner = framing.encode_request(
                RequestHeader(ApiKey.HEARTBEAT, 3, 1, "c"), HeartbeatRequest("g", 1, "m", None)
            )[4:]
            padded = struct.pack(">i", len(inner) + 2) + inner + b"\0\0"
            reads = [
                heartbeat("m", 3, 1) + other + heartbeat("m", 3, 5),  # another API
                heartbeat("m", 3, 1) + heartbeat("m", 3, 2)[:9],  # a frame cut by the read
                heartbeat("xa", 3, 1),  # the table leaves it to the full path
                padded,  # bytes after the message: answered, and logged by the connection
                b"\xff\xff\xff\xfb",  # a negative size: the connection closes it
            ]
            for (_, theirs), data in zip(sockets, reads, strict=True):
                theirs.sendall(data)
            handed = sorted(reactor.drain(Table(), 5, 1.0))
            assert [h[0] for h in handed] == [0, 1, 2, 3, 4] and len(reactor) == 0
            assert handed[0][1:] == (
                answer("m", 3, 1),
                other + heartbeat("m", 3, 5),
                False,
                0,
                None,
            )
            assert handed[1][1:] == (answer("m", 3, 1), heartbeat("m", 3, 2)[:9], False, 0, None)
            assert handed[2][1:] == (b"", heartbeat("xa", 3, 1), False, 0, None)
            assert handed[3][1:] == (answer("m", 3, 1), b"", False, 0, [(3, 2)])
            assert handed[4][1:] == (b"", b"\xff\xff\xff\xfb", False, 0, None)
            assert all(received(theirs) == b"" for _, theirs in sockets)  # nothing written
    finally:
        reactor.close()


@pytest.mark.parametrize("module", MODULES, ids=["compiled", "twin"])
def test_without_the_table_every_read_is_handed_back(module: Any) -> None:
    reactor = module.Reactor(1 << 20)
    try:
        with pairs(1) as [(ours, theirs)]:
            reactor.add(ours.fileno(), "c")
            theirs.sendall(heartbeat("m"))
            assert reactor.drain(None, 5, 1.0) == [("c", b"", heartbeat("m"), False, 0, None)]
    finally:
        reactor.close()


@pytest.mark.parametrize("module", MODULES, ids=["compiled", "twin"])
def test_the_clients_end_and_failures_are_handed_back(module: Any) -> None:
    reactor = module.Reactor(1 << 20)
    try:
        with pairs(3) as [(a, client_a), (b, client_b), (c, client_c)]:
            reactor.add(a.fileno(), "closed")
            reactor.add(b.fileno(), "reset")
            reactor.add(c.fileno(), "gone")
            client_a.close()
            b.send(b"x")
            client_b.close()  # with a byte unread: the peer's read fails
            client_c.sendall(heartbeat("m"))
            client_c.close()  # the answer cannot be written
            handed = sorted(reactor.drain(Table(), 5, 1.0))
            assert handed == [
                ("closed", b"", b"", False, module.ENDED, None),
                ("gone", answer("m"), b"", False, errno.EPIPE, None),
                ("reset", b"", b"", False, errno.ECONNRESET, None),
            ]
            assert len(reactor) == 0
    finally:
        reactor.close()


@pytest.mark.parametrize("module", MODULES, ids=["compiled", "twin"])
def test_a_read_with_no_memory_to_keep_it_is_handed_back_as_enomem(module: Any) -> None:
    """The bytes of a read the reactor cannot copy for drain are gone from the socket: their
    connection is handed back with ENOMEM and nothing else (it must close, not read on from
    the middle of a request); the other sockets' reads are handed back whole, and lone
    heartbeats, which need no copy, are answered as ever."""
    reactor = module.Reactor(1 << 20)
    versions = api_versions()
    try:
        with pairs(3) as [(a, client_a), (b, client_b), (c, client_c)]:
            for sock, name in ((a, "a"), (b, "b"), (c, "c")):
                reactor.add(sock.fileno(), name)
            reactor._fail_copies(1)
            client_a.sendall(versions)
            client_b.sendall(versions)
            client_c.sendall(heartbeat("m"))
            handed = sorted(reactor.drain(Table(), 5, 1.0))
            assert len(handed) == 2, handed
            failed = [h for h in handed if h[4] == errno.ENOMEM]
            whole = [h for h in handed if h[4] == 0]
            assert [h[1:] for h in failed] == [(b"", b"", False, errno.ENOMEM, None)]
            assert [h[1:] for h in whole] == [(b"", versions, False, 0, None)]
            assert received(client_c) == answer("m")
            assert len(reactor) == 1  # c, parked still
            client_c.sendall(versions)  # the failures asked for are spent
            assert reactor.drain(Table(), 5, 1.0) == [("c", b"", versions, False, 0, None)]
    finally:
        reactor.close()


def test_the_thread_has_a_place_in_its_queue_for_every_read() -> None:
    """The compiled reactor's thread never allocates a place in its queue (a read it could
    not queue would be lost): add and drain reserve one for every socket parked. Of three
    hundred sockets parked, one is read and drained first (the queue drain leaves the
    thread must hold the other 299); then the rest are read at once, a third of them taken
    off while queued and parked again (each then queued a second time in the same queue),
    and all are handed back, none lost."""
    reactor = compiled.Reactor(1 << 20)
    versions = api_versions()

    def queued(fd: int) -> bool:
        ready, _, _ = select.select([fd], [], [], 5)
        return bool(ready)

    try:
        reactor.start(None, 0.0)
        with pairs(300) as made:
            for i, (ours, _) in enumerate(made):
                reactor.add(ours.fileno(), i)
            made[0][1].sendall(versions)
            assert queued(reactor.fileno())
            handed: list[Any] = reactor.drain(None, 5, 1.0)
            assert handed == [(0, b"", versions, False, 0, None)]
            for _, theirs in made[1:]:
                theirs.sendall(versions)
            assert queued(reactor.fileno())
            deadline = time.monotonic() + 10
            taken = 0
            for i, (ours, theirs) in enumerate(made[3::3], 1):
                while True:  # wait for the thread to have queued this one's read
                    reactor.remove(ours.fileno())
                    pending = reactor.take_pending(ours.fileno())
                    if pending is not None or time.monotonic() > deadline:
                        break
                    reactor.add(ours.fileno(), 3 * i)
                    time.sleep(0.001)
                assert pending == (b"", versions, False, 0)
                taken += 1
                reactor.add(ours.fileno(), 3 * i)
                theirs.sendall(versions)
            while len(handed) < len(made) and time.monotonic() < deadline:
                if queued(reactor.fileno()):
                    handed += reactor.drain(None, 5, 1.0)
            assert taken == 99
            assert sorted(h[0] for h in handed) == list(range(len(made)))
            assert all(h[1:] == (b"", versions, False, 0, None) for h in handed)
    finally:
        reactor.close()


@pytest.mark.parametrize("module", MODULES, ids=["compiled", "twin"])
def test_answers_the_socket_does_not_take_are_handed_back_whole(module: Any) -> None:
    """A client that sends heartbeats and reads nothing: once the socket takes no more, the
    answers not written go back to the connection, and nothing is lost or cut."""
    reactor = module.Reactor(1 << 20)
    one = heartbeat("m", 3, 1)
    try:
        with pairs(1) as [(ours, theirs)]:
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            reactor.add(ours.fileno(), "c")
            handed: list[Any] = []
            sent = 0
            while not handed and sent < 100_000:
                theirs.sendall(one * 50)
                sent += 50
                handed = reactor.drain(Table(), 5, 1.0)
            assert len(handed) == 1 and len(reactor) == 0
            _, unsent, rest, _, error, _ = handed[0]
            assert rest == b"" and error == 0 and unsent
            got = received(theirs) + unsent
            assert got == answer("m", 3, 1) * sent
    finally:
        reactor.close()


@pytest.mark.parametrize("module", MODULES, ids=["compiled", "twin"])
def test_a_read_that_fills_the_buffer_says_more_may_wait(module: Any) -> None:
    reactor = module.Reactor(1 << 20)
    other = api_versions()
    try:
        with pairs(1) as [(ours, theirs)]:
            theirs.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            reactor.add(ours.fileno(), "c")
            data = other * (2 * module.READ_SIZE // len(other))
            theirs.sendall(data)
            [(_, answers, rest, more, error, _)] = reactor.drain(Table(), 5, 1.0)
            assert (answers, len(rest), more, error) == (b"", module.READ_SIZE, True, 0)
    finally:
        reactor.close()


@pytest.mark.parametrize("module", MODULES, ids=["compiled", "twin"])
def test_misuse_is_refused(module: Any) -> None:
    reactor = module.Reactor(1 << 20)
    with pairs(1) as [(ours, _)]:
        reactor.add(ours.fileno(), "c")
        with pytest.raises(ValueError):
            reactor.add(ours.fileno(), "again")
        with pytest.raises(ValueError):
            reactor.add(-1, "c")
        with pytest.raises(OSError) as bad:
            reactor.add(10**6, "c")
        assert bad.value.errno == errno.EBADF
        reactor.close()
        assert len(reactor) == 0
        with pytest.raises(ValueError):
            reactor.fileno()
        with pytest.raises(ValueError):
            reactor.drain(None, 0, 0.0)
