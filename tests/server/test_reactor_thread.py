"""The reactor over the real member table: its first step (compiled: C over the table's C
index, by drain or by the reactor's thread) against the twin's, and the thread raced against
joins, leaves and rebalances of the members whose heartbeats it answers.

Runs whatever FASTCOORD_NO_EXTENSIONS says for the thread's tests (the twin has no thread:
its drain serves the sockets); the differential test imports both modules directly.
"""

from __future__ import annotations

import bisect
import os
import random
import select
import socket
import struct
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord._ext import member_table as compiled_table  # type: ignore[attr-defined]
from fastcoord._ext import reactor as compiled  # type: ignore[attr-defined]
from fastcoord.core import member_table as twin_table
from fastcoord.core.native import member_table as native_table
from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import ApiVersionsRequest, HeartbeatRequest
from fastcoord.server import reactor as twin
from fastcoord.server.native import reactor as native
from tests.server.test_reactor import pairs, received

MAX_SIZE = 200
FALLBACK = -1
UNKNOWN_MEMBER_ID = 25
STABLE = twin_table.STATE_STABLE
PREPARING = twin_table.STATE_PREPARING_REBALANCE
COMPLETING = twin_table.STATE_COMPLETING_REBALANCE
EMPTY = twin_table.STATE_EMPTY


def heartbeat(
    group: str,
    member: str,
    generation: int,
    version: int = 3,
    correlation: int = 1,
    instance: str | None = None,
) -> bytes:
    header = RequestHeader(ApiKey.HEARTBEAT, version, correlation, "c")
    request = HeartbeatRequest(group, generation, member, instance if version >= 3 else None)
    return framing.encode_request(header, request)


def other(correlation: int = 1) -> bytes:
    return framing.encode_request(
        RequestHeader(ApiKey.API_VERSIONS, 0, correlation, "c"), ApiVersionsRequest()
    )


# -- the first step against the twin's, over the real member table -------------------------

GROUPS = ["g", "h", "k", "é"]  # Stable, PreparingRebalance, CompletingRebalance, Empty
MEMBERS = ["m1", "m2", "mé", "x"]  # "x" is never bound


def fill(table: Any) -> list[int]:
    """Each group with its members but "x"; returns the member slots."""
    slots = []
    for group, state in zip(GROUPS, [STABLE, PREPARING, COMPLETING, EMPTY], strict=True):
        g = table.add_group(state, 2)
        for member in MEMBERS[:-1]:
            slot = table.add_member(g, 10_000, 20_000)
            table.bind(group, member, slot)
            slots.append(slot)
    return slots


@st.composite
def reads(draw: st.DrawFn) -> bytes:
    frames = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["heartbeat"] * 6 + ["static", "padded", "other"]))
        version = draw(st.integers(0, 4))
        frame = heartbeat(
            draw(st.sampled_from(GROUPS)),
            draw(st.sampled_from(MEMBERS)),
            draw(st.integers(1, 3)),
            version,
            draw(st.integers(0, 1 << 20)),
            "i" if kind == "static" else None,
        )
        if kind == "padded":  # bytes after the message
            frame = struct.pack(">i", len(frame) - 4 + 2) + frame[4:] + b"\0\0"
        elif kind == "other":
            frame = other()
        frames.append(frame)
    data = b"".join(frames)
    if draw(st.integers(0, 5)) == 0:
        data = data[: draw(st.integers(1, len(data)))]  # a frame cut by the read
    return data


def play(reactor_module: Any, table_module: Any, script: list[tuple[int, bytes]]) -> list[Any]:
    record: list[Any] = []
    reactor = reactor_module.Reactor(MAX_SIZE)
    table = table_module.MemberTable()
    slots = fill(table)
    try:
        with pairs(3) as sockets:
            for i, (ours, _) in enumerate(sockets):
                reactor.add(ours.fileno(), i)
            for n, (i, data) in enumerate(script):
                sockets[i][1].sendall(data)
                handed = reactor.drain(table, 1_000 + n, float(n))
                record.append(sorted(handed))
                for c, *_ in handed:
                    reactor.add(sockets[c][0].fileno(), c)
                record.append([received(theirs) for _, theirs in sockets])
            record.append(table.heartbeat_answers())
            record.append([table.deadline(slot) for slot in slots])
            record.append([reactor.remove(ours.fileno()) for ours, _ in sockets])
    finally:
        reactor.close()
    return record


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), reads()), min_size=1, max_size=8))
def test_the_first_step_over_the_member_table_matches_the_twin(
    script: list[tuple[int, bytes]],
) -> None:
    assert play(compiled, compiled_table, script) == play(twin, twin_table, script)


def test_serve_ready_answers_lone_heartbeats_and_queues_the_rest() -> None:
    reactor = compiled.Reactor(MAX_SIZE)
    table = compiled_table.MemberTable()
    slots = fill(table)
    try:
        with pairs(2) as [(a, ca), (b, cb)]:
            reactor.add(a.fileno(), "a")
            reactor.add(b.fileno(), "b")
            ca.sendall(heartbeat("g", "m1", 2) + heartbeat("h", "m2", 1, 4))
            cb.sendall(other(7))
            ready = select.select([reactor.fileno()], [], [], 5)[0]
            assert ready and reactor.serve_ready(table, 5_000, 2.0) == 2
            assert table.deadline(slots[0]) == 15_000 and table.deadline(slots[4]) == 0
            assert len(received(ca)) == 14 + 16  # v3 and v4 answers
            assert reactor.drain(None, 0, 3.0) == [("b", b"", other(7), False, 0, None)]
            assert reactor.remove(a.fileno()) == 2.0
    finally:
        reactor.close()


# -- the thread ----------------------------------------------------------------------------


def tasks() -> int:
    return len(os.listdir("/proc/self/task"))


def settled_tasks(expected: int) -> int:
    """The process's threads once a joined Python thread is gone from /proc too: its join
    returns when its Python state is freed, a moment before the OS thread exits."""
    deadline = time.monotonic() + 5
    while (count := tasks()) != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return count


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class Pump:
    """The Trio side's part, on a thread of its own: waits on fileno(), drains, and plays
    the connection for each hand-over (the table asked on the full path, anything it will
    not answer refused UNKNOWN_MEMBER_ID), then parks the socket again."""

    def __init__(
        self, reactor: Any, table: Any, sockets: list[tuple[socket.socket, socket.socket]]
    ):
        self.reactor = reactor
        self.table = table
        self.sockets = sockets
        self.stopped = threading.Event()
        self.handed = 0
        self.failure: BaseException | None = None
        self.lock = threading.Lock()  # the table's mutations and drain, as the GIL-bound Trio side
        self.thread = threading.Thread(target=self._run)

    def __enter__(self) -> Pump:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(10)
        if self.failure is not None:
            raise self.failure

    def _run(self) -> None:
        try:
            while not self.stopped.is_set():
                select.select([self.reactor.fileno()], [], [], 0.01)
                with self.lock:
                    handed = self.reactor.drain(self.table, now_ms(), time.monotonic())
                    for i, answers, rest, _, error, _ in handed:
                        self.handed += 1
                        assert error == 0 and not answers
                        self._answer(i, rest)
                        self.reactor.add(self.sockets[i][0].fileno(), i)
        except BaseException as exc:  # reported by __exit__
            self.failure = exc

    def _answer(self, i: int, data: bytes) -> None:
        out = b""
        while data:
            size = struct.unpack(">i", data[:4])[0]
            frame = data[4 : 4 + size]
            if len(frame) < size:  # the rest of it is still on its way
                data += self.sockets[i][0].recv(65536)
                continue
            data = data[4 + size :]
            header, request, _ = framing.decode_request(frame)
            code = self.table.heartbeat_id(
                request.group_id, request.member_id, request.generation_id, now_ms()
            )
            correlation = header.correlation_id
            out += struct.pack(">iiih", 10, correlation, 0, UNKNOWN_MEMBER_ID if code < 0 else code)
        self.sockets[i][0].setblocking(True)
        self.sockets[i][0].sendall(out)
        self.sockets[i][0].setblocking(False)


def now_ms() -> int:
    return int(time.time() * 1000)


def started(table: Any) -> Any:
    reactor = native.Reactor(MAX_SIZE)
    reactor.start(table, 0.0)
    return reactor


def test_the_thread_answers_hands_over_and_stops_without_leaks() -> None:
    before_tasks, before_fds = tasks(), fds()
    table = native_table.MemberTable()
    fill(table)
    reactor = started(table)
    try:
        assert reactor.threaded == hasattr(reactor, "serve_ready")
        with pairs(2) as sockets, Pump(reactor, table, sockets) as pump:
            for i, (ours, _) in enumerate(sockets):
                reactor.add(ours.fileno(), i)
            (_, a), (_, b) = sockets
            a.settimeout(10)
            b.settimeout(10)
            for correlation in range(50):
                a.sendall(heartbeat("g", "m1", 2, 3, correlation))
                assert a.recv(14) == struct.pack(">iiih", 10, correlation, 0, 0)
            assert pump.handed == 0 or not reactor.threaded
            b.sendall(heartbeat("g", "x", 2, 3, 9))  # unknown: handed over, answered there
            assert b.recv(14) == struct.pack(">iiih", 10, 9, 0, UNKNOWN_MEMBER_ID)
            assert table.heartbeat_answers()[0] == 50
            answered, ns = reactor.take_stats()
            assert answered == (50 if reactor.threaded else 0) and ns >= 0
    finally:
        reactor.close()
    assert len(reactor) == 0 and settled_tasks(before_tasks) == before_tasks
    assert fds() == before_fds


def test_after_remove_the_thread_never_touches_the_socket() -> None:
    table = native_table.MemberTable()
    fill(table)
    reactor = started(table)
    try:
        with pairs(2) as [(a, ca), (b, cb)]:
            reactor.add(b.fileno(), "b")
            cb.settimeout(10)
            for correlation in range(300):
                reactor.add(a.fileno(), "a")
                ca.sendall(heartbeat("g", "m1", 2, 3, correlation))
                reactor.remove(a.fileno())
                # A barrier: the thread has served b's heartbeat sent after the remove.
                cb.sendall(heartbeat("g", "m2", 2, 3, correlation))
                if not reactor.threaded:
                    reactor.drain(table, now_ms(), 0.0)
                assert cb.recv(14) == struct.pack(">iiih", 10, correlation, 0, 0)
                # Either the thread served a's heartbeat before the remove, or its bytes are
                # all still in the socket: never read and dropped, never answered later.
                answer, request = received(ca), received(a)
                assert (answer, request) in (
                    (struct.pack(">iiih", 10, correlation, 0, 0), b""),
                    (b"", heartbeat("g", "m1", 2, 3, correlation)),
                )
    finally:
        reactor.close()


def test_heartbeat_table_none_reaches_the_thread() -> None:
    table = native_table.MemberTable()
    fill(table)
    reactor = started(table)
    try:
        with pairs(1) as [(a, ca)]:
            ca.settimeout(10)
            reactor.add(a.fileno(), "a")
            reactor.serve(None)  # a fault rule on heartbeats, say: every read goes to drain
            ca.sendall(heartbeat("g", "m1", 2))
            select.select([reactor.fileno()], [], [], 10)
            handed = []
            deadline = time.monotonic() + 10
            while not handed and time.monotonic() < deadline:
                handed = reactor.drain(None, now_ms(), 1.0)
            assert handed == [("a", b"", heartbeat("g", "m1", 2), False, 0, None)]
            assert table.heartbeat_answers()[0] == 0
    finally:
        reactor.close()


def test_heartbeats_raced_against_joins_leaves_and_rebalances() -> None:
    """Members heartbeat as fast as they are answered while their group rebalances and
    members leave and join again: every answer is one that some state of the group between
    the heartbeat's send and its answer allows."""
    count = 8
    table = native_table.MemberTable()
    group = table.add_group(STABLE, 1)
    members = [f"m{i}" for i in range(count)]
    slots = {m: table.add_member(group, 10_000, 10_000) for m in members}
    for m, slot in slots.items():
        table.bind("g", m, slot)
    # History: (time the change began, time it ended, state, generation, bound members).
    history: list[tuple[float, float, int, int, frozenset[str]]] = [
        (0.0, 0.0, STABLE, 1, frozenset(members))
    ]
    answers: list[tuple[float, float, str, int, int]] = []  # (sent, received, member, gen, code)
    reactor = started(table)
    stop = threading.Event()
    try:
        with pairs(count) as sockets, Pump(reactor, table, sockets) as pump:
            for i, (ours, _) in enumerate(sockets):
                reactor.add(ours.fileno(), i)

            def clients() -> None:
                rng = random.Random(1)
                correlation = 0
                while not stop.is_set():
                    sent = time.monotonic()
                    asked = []
                    for i, (_, theirs) in enumerate(sockets):
                        generation = history[-1][3] - rng.randint(0, 1)
                        correlation += 1
                        theirs.sendall(heartbeat("g", members[i], generation, 3, correlation))
                        asked.append((generation, correlation))
                    for i, (_, theirs) in enumerate(sockets):
                        theirs.settimeout(10)
                        got = theirs.recv(14)
                        _, corr, _, code = struct.unpack(">iiih", got)
                        assert corr == asked[i][1]
                        answers.append((sent, time.monotonic(), members[i], asked[i][0], code))

            client = threading.Thread(target=clients)
            client.start()
            rng = random.Random(2)
            state, generation, bound = STABLE, 1, set(members)
            until = time.monotonic() + 1.0
            while time.monotonic() < until and client.is_alive():
                began = time.monotonic()
                with pump.lock:
                    step = rng.choice(["rebalance", "complete", "stable", "leave", "join"])
                    if step == "rebalance":
                        state = PREPARING
                        table.set_group(group, state, generation)
                    elif step == "complete":
                        state, generation = COMPLETING, generation + 1
                        table.set_group(group, state, generation)
                    elif step == "stable":
                        state = STABLE
                        table.set_group(group, state, generation)
                    elif step == "leave" and bound:
                        m = rng.choice(sorted(bound))
                        table.unbind("g", m)
                        table.remove_member(slots[m])
                        bound.discard(m)
                    elif step == "join":
                        for m in set(members) - bound:
                            slots[m] = table.add_member(group, 10_000, 10_000)
                            table.bind("g", m, slots[m])
                            bound.add(m)
                history.append((began, time.monotonic(), state, generation, frozenset(bound)))
                time.sleep(0.0005)
            stop.set()
            client.join(15)
            assert not client.is_alive()
    finally:
        stop.set()
        reactor.close()
    assert len(answers) > 100
    begins = [h[0] for h in history]
    ends = [h[1] for h in history]
    for sent, got, member, gen, code in answers:
        # The states in force at some moment between the send and the answer: from the
        # last change over before the send to the last begun before the answer.
        first = max(0, bisect.bisect_right(ends, sent) - 1)
        last = bisect.bisect_right(begins, got) - 1
        allowed = set()
        for _, _, state, generation, bound in history[first : last + 1]:
            if member not in bound:
                allowed.add(UNKNOWN_MEMBER_ID)
            elif state == PREPARING:
                allowed.add(27)
            else:
                allowed.add(0 if gen == generation else 22)
        assert code in allowed, (member, gen, code, history[first : last + 1])


@pytest.mark.skipif(not hasattr(native.Reactor, "serve_ready"), reason="the twin has no thread")
def test_without_a_table_the_thread_hands_every_read_over() -> None:
    reactor = started(None)
    try:
        with pairs(1) as [(a, ca)]:
            reactor.add(a.fileno(), "a")
            ca.sendall(other())
            select.select([reactor.fileno()], [], [], 10)
            handed = []
            deadline = time.monotonic() + 10
            while not handed and time.monotonic() < deadline:
                handed = reactor.drain(None, 0, 1.0)
            assert handed == [("a", b"", other(), False, 0, None)]
        with pytest.raises(ValueError):
            reactor.start(None, 0.0)  # running already
    finally:
        reactor.close()
    with pytest.raises(ValueError):
        reactor.drain(None, 0, 0.0)


@pytest.mark.skipif(not hasattr(native.Reactor, "serve_ready"), reason="the twin has no thread")
def test_what_the_thread_read_for_drain_survives_a_remove() -> None:
    """A park cancelled (the idle deadline, say) between the thread's read and drain: the
    bytes are gone from the socket, so remove keeps them for the connection."""
    table = native_table.MemberTable()
    fill(table)
    reactor = started(table)
    try:
        with pairs(1) as [(a, ca)]:
            reactor.add(a.fileno(), "a")
            ca.sendall(other(3))
            assert select.select([reactor.fileno()], [], [], 10)[0]  # queued for drain
            reactor.remove(a.fileno())
            assert reactor.take_pending(a.fileno()) == (b"", other(3), False, 0)
            assert reactor.take_pending(a.fileno()) is None
            assert reactor.drain(table, now_ms(), 1.0) == []
            assert received(a) == b""
    finally:
        reactor.close()
