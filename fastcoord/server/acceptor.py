"""Accepting connections: every connection waiting is accepted in one turn of the loop.

Trio's serve_listeners accepts one connection per turn of its loop (each accept is a
checkpoint), and a turn runs every task with work: while a storm of requests keeps the
connections busy, a turn is long, and a hundred clients connecting at once waited a hundred
turns to be accepted, past their connect timeout. Kafka's Acceptor takes every connection
ready at each select. Here the listening socket is waited on through Trio, and once it is
readable each connection pending is accepted (up to ACCEPTS_PER_TURN) and given its task
before the next checkpoint.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Awaitable, Callable

import trio

log = logging.getLogger("fastcoord.server")

ACCEPTS_PER_TURN = 1024
# Out of descriptors or memory: the connections wait in the backlog until some close.
CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
CAPACITY_BACKOFF_S = 0.1
# A connection that went before it was accepted (Trio's list).
IGNORED_ERRNOS = {errno.ECONNABORTED, errno.EPERM, errno.EPROTO}

Handler = Callable[[trio.SocketStream], Awaitable[object]]


async def serve(
    listeners: list[trio.SocketListener], handler: Handler, nursery: trio.Nursery
) -> None:
    """Accept on every listener until cancelled; each connection runs `handler` in
    `nursery`, and its stream is closed when the handler returns."""
    async with trio.open_nursery() as accepting:
        for listener in listeners:
            accepting.start_soon(_accept, listener, handler, nursery)


async def _accept(listener: trio.SocketListener, handler: Handler, nursery: trio.Nursery) -> None:
    listening = listener.socket
    # The same listening socket as a standard one (a duplicate descriptor of it, which
    # shares its non-blocking mode), so that accept does not checkpoint.
    raw = socket.socket(fileno=os.dup(listening.fileno()))
    try:
        while True:
            await trio.lowlevel.wait_readable(listening)
            for _ in range(ACCEPTS_PER_TURN):
                try:
                    conn, _ = raw.accept()
                except BlockingIOError:
                    break
                except OSError as exc:
                    if exc.errno in IGNORED_ERRNOS:
                        continue
                    if exc.errno in CAPACITY_ERRNOS:
                        log.error(
                            "accept: %s; the connections waiting are accepted in %.0f ms",
                            os.strerror(exc.errno or 0),
                            CAPACITY_BACKOFF_S * 1000,
                        )
                        await trio.sleep(CAPACITY_BACKOFF_S)
                        break
                    raise
                stream = trio.SocketStream(trio.socket.from_stdlib_socket(conn))
                nursery.start_soon(_run, handler, stream)
    finally:
        raw.close()


async def _run(handler: Handler, stream: trio.SocketStream) -> None:
    try:
        await handler(stream)
    finally:
        await trio.aclose_forcefully(stream)
