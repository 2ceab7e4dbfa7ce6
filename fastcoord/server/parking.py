"""Idle connections parked on the reactor, so that a lone heartbeat costs no Trio task.

With one member per connection, as real clients have, nearly every read is one Heartbeat,
and waking the connection's task for it (the scheduler pass, Trio's epoll_ctl re-arm, the
Python of the read and the write) was most of the server's CPU. So a connection that owes
nothing (no answer queued or unwritten, no unhandled bytes, no member waiting for its
JoinGroup or SyncGroup answer) parks its socket on the reactor (server/native.py:
_ext/reactor.pyx or its twin), one epoll descriptor on which one Trio task, `run`, waits.
When parked sockets are readable, one compiled call reads each and answers a read of
heartbeats that the member table answers alone with one write. Anything else comes back to
the connection's task with the bytes read, and is handled the ordinary way (connection.py):
the connection leaves the reactor until it owes nothing again. So every rule of the
connection (answers in request order, a member's requests behind its own JoinGroup, the
bounds, idleness, malformed frames, shutdown) holds whichever way a request goes.

It must never hold a connection that owes anything, nor keep a parked task from its
cancellation: a cancelled park (the idle deadline, shutdown) takes the socket off the
reactor before the task goes on.
"""

from __future__ import annotations

import logging
import math
from time import perf_counter, perf_counter_ns
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.server.native import reactor as native

if TYPE_CHECKING:
    from fastcoord.server.connection import Connection
    from fastcoord.server.dispatcher import Dispatcher

log = logging.getLogger("fastcoord.server")
HEARTBEAT = int(ApiKey.HEARTBEAT)


# How often the thread's counts reach the metrics when nothing else wakes the Trio side (a
# scrape collects them first: see Server.fast_path_answers).
STATS_INTERVAL_S = 1.0


class Parking:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        self.reactor: Any = None  # while run() runs; connections park only then
        self._tasks: dict[Connection, trio.lowlevel.Task] = {}
        self._refused = False  # a socket could not join the reactor (logged once)

    def __len__(self) -> int:
        return len(self._tasks)

    def refresh(self) -> None:
        """What heartbeat_table() says may have changed (a fault rule, loading, shutdown):
        tell the reactor's thread at once, before it answers another heartbeat."""
        reactor = self.reactor
        if reactor is not None:
            reactor.serve(self.dispatcher.heartbeat_table())

    def collect(self) -> None:
        """Count the heartbeats the reactor's thread answered in the metrics."""
        reactor = self.reactor
        if reactor is not None:
            answered, ns = reactor.take_stats()
            self.dispatcher.metrics.table_answered(answered, 0, ns)

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve parked connections until cancelled. A bug met here is logged, and the
        connections carry on without the reactor.

        Under Trio's own clock the reactor's thread serves the parked sockets, and this task
        wakes only for the reads it hands over. Under a virtual clock (tests) it does not:
        the clock could not see the thread's work, and would jump past it; `drain` then
        serves the sockets itself when they are readable."""
        server = self.dispatcher
        reactor = native.Reactor(server.config.socket_request_max_bytes)
        if not isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock):
            # Trio's clock is time.perf_counter() plus an offset; the thread reads the same
            # clock (CLOCK_MONOTONIC) and stamps when bytes move in Trio's terms.
            reactor.start(server.heartbeat_table(), trio.current_time() - perf_counter())
        threaded = reactor.threaded
        fd = reactor.fileno()
        self.reactor = reactor
        task_status.started()
        try:
            while True:
                with trio.move_on_after(STATS_INTERVAL_S if threaded else math.inf):
                    await trio.lowlevel.wait_readable(fd)
                table = server.heartbeat_table()
                if table is not None:
                    before = table.heartbeat_answers()
                    consumer = table.consumer_heartbeat_answers()
                    started = perf_counter_ns()
                handed = reactor.drain(table, server.now_ms(), trio.current_time())
                if table is not None:
                    # The drain's time, shared by the heartbeats it answered (its reads and
                    # writes included: on this path they are most of a heartbeat's cost).
                    # With the thread, only this drain's: the thread counts its own.
                    elapsed = perf_counter_ns() - started
                    consumer = table.consumer_heartbeat_answers() - consumer
                    if threaded:
                        answered, ns = reactor.take_stats()
                        answered += reactor.drained - consumer
                        elapsed += ns
                    else:
                        answered = sum(table.heartbeat_answers().values()) - sum(before.values())
                    server.metrics.table_answered(answered + consumer, consumer, elapsed)
                elif threaded:
                    self.collect()
                for item in handed:
                    conn = item[0]
                    conn.handover = item
                    trio.lowlevel.reschedule(self._tasks.pop(conn))
        except Exception:
            log.exception("the reactor failed: parked connections fall back to Trio from now on")
        finally:
            self.collect()
            self.reactor = None
            reactor.stop()  # joined: it reads nothing more
            for conn, task in self._tasks.items():
                conn.moved_at(reactor.remove(conn.fd))
                # What the thread read for the Trio side and it has not seen: the
                # connection's, first.
                pending = reactor.take_pending(conn.fd)
                conn.handover = None if pending is None else (conn, *pending, None)
                trio.lowlevel.reschedule(task)
            self._tasks.clear()
            trio.lowlevel.notify_closing(fd)
            reactor.close()

    async def park(self, conn: Connection) -> bool:
        """Wait, parked, until the reactor hands the connection back (conn.handover says
        with what; None: the reactor has stopped); False at once if the socket could not
        join the reactor (the connection then waits through Trio). A cancel takes it off
        the reactor."""
        reactor = self.reactor
        fd = conn.fd
        try:
            reactor.add(fd, conn)
        except OSError as exc:  # the kernel's limit of epoll watches, or its memory
            if not self._refused:
                self._refused = True
                log.warning(
                    "a connection cannot park on the reactor (%s): it falls back to Trio", exc
                )
            return False
        self._tasks[conn] = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            del self._tasks[conn]
            conn.moved_at(reactor.remove(fd))
            pending = reactor.take_pending(fd)
            if pending is not None:
                # The thread took bytes off the socket for the Trio side, which has not
                # handed them over yet: the connection handles them when it reads again
                # (an error or the client's end it meets again in the socket).
                answers, rest, _, _ = pending
                conn.take_back(answers, rest)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        return True
