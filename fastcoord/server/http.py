"""HTTP/1.1 in the small part that a scraper, curl or a script uses, for the admin ports.

A request line, headers, a Content-Length body; keep-alive. Everything a client sends is
bounded (the head, the body, the time to send them, the connections), and anything else
gets its 4xx answer and the connection closes, with nothing else affected. A `route`
turns a Request into a Reply; it runs on the caller's Trio loop, so what it reads needs no
lock. Both the server's admin port (admin.py) and `fastcoord cluster`'s serve through it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

MAX_HEAD = 16_384  # the request line and headers
MAX_BODY = 65_536  # what the admin ports take (a fault rule) is a few hundred bytes
REQUEST_TIMEOUT_S = 10.0  # to send a whole request; an idle keep-alive connection as well
MAX_CONNECTIONS = 64
READ_CHUNK = 65_536
REASONS = {
    200: "OK",
    201: "Created",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    411: "Length Required",
    413: "Content Too Large",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    409: "Conflict",
    503: "Service Unavailable",
}
JSON = "application/json"


class HttpError(Exception):
    def __init__(self, status: int, message: str, allow: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.allow = allow


class Request(msgspec.Struct):
    method: str
    path: str
    keep_alive: bool
    body: bytes


class Reply(msgspec.Struct):
    status: int
    body: bytes
    content_type: str = JSON
    allow: str | None = None
    # More headers, (name, value): the route's own text, never a client's verbatim (a Link
    # carries a group id percent-encoded), so that no CR or LF reaches the head.
    headers: tuple[tuple[str, str], ...] = ()


# A route answers at once, or (for what must wait on something else: ZooKeeper) gives an
# awaitable of its answer, which the connection awaits.
Route = Callable[["Request"], "Reply | Awaitable[Reply]"]


class HttpServer:
    """Connections answered by `route`, at most MAX_CONNECTIONS at once."""

    def __init__(self, route: Route) -> None:
        self.route = route
        self._connections = 0

    async def handle_connection(self, stream: trio.SocketStream) -> None:
        if self._connections >= MAX_CONNECTIONS:
            await send(stream, error_reply(503, "too many admin connections"), keep_alive=False)
            await trio.aclose_forcefully(stream)
            return
        self._connections += 1
        buf = bytearray()
        try:
            while True:
                with trio.move_on_after(REQUEST_TIMEOUT_S) as waited:
                    try:
                        request = await read_request(stream, buf)
                    except HttpError as exc:
                        await send(stream, error_reply(exc.status, str(exc)), keep_alive=False)
                        return
                if waited.cancelled_caught:
                    if buf:
                        await send(stream, error_reply(408, "request not sent in time"), False)
                    return
                if request is None:
                    return  # the client closed
                answer = self.route(request)
                reply = await answer if inspect.isawaitable(answer) else answer
                await send(stream, reply, request.keep_alive)
                if not request.keep_alive:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            return
        finally:
            self._connections -= 1
            await trio.aclose_forcefully(stream)


async def serve(
    route: Route,
    listeners: list[trio.SocketListener],
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answer HTTP on `listeners` with `route` until cancelled."""
    server = HttpServer(route)
    await trio.serve_listeners(server.handle_connection, listeners, task_status=task_status)


def allow(method: str, allowed: str) -> None:
    if method not in allowed.split(", "):
        raise HttpError(405, f"{method} is not allowed here (allowed: {allowed})", allowed)


def json_reply(status: int, value: Any) -> Reply:
    return Reply(status, msgspec.json.encode(value))


def error_reply(status: int, message: str, allow: str | None = None) -> Reply:
    return Reply(status, msgspec.json.encode({"error": message}), JSON, allow)


async def read_request(stream: trio.SocketStream, buf: bytearray) -> Request | None:
    """The next request on the connection; None when the client has closed it."""
    while (end := buf.find(b"\r\n\r\n")) < 0:
        if len(buf) > MAX_HEAD:
            raise HttpError(431, f"request head over {MAX_HEAD} bytes")
        data = await stream.receive_some(READ_CHUNK)
        if not data:
            if buf:
                raise HttpError(400, "connection closed in the middle of a request")
            return None
        buf += data
    if end > MAX_HEAD:
        raise HttpError(431, f"request head over {MAX_HEAD} bytes")
    head = bytes(buf[:end]).decode("latin-1")
    del buf[: end + 4]
    line, *header_lines = head.split("\r\n")
    words = line.split(" ")
    if len(words) != 3 or not words[2].startswith("HTTP/1.") or not words[1].startswith("/"):
        raise HttpError(400, f"not an HTTP/1.x request line: {line[:100]!r}")
    method, path, version = words
    headers: dict[str, str] = {}
    for header in header_lines:
        name, sep, value = header.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, f"malformed header line: {header[:100]!r}")
        headers[name.lower()] = value.strip()
    if "transfer-encoding" in headers:
        raise HttpError(411, "send the body with a Content-Length")
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit():
        raise HttpError(400, f"bad Content-Length {length_text[:40]!r}")
    length = int(length_text)
    if length > MAX_BODY:
        raise HttpError(413, f"a body of {length} bytes; at most {MAX_BODY}")
    while len(buf) < length:
        data = await stream.receive_some(READ_CHUNK)
        if not data:
            raise HttpError(400, "connection closed in the middle of the body")
        buf += data
    body = bytes(buf[:length])
    del buf[:length]
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return Request(method, path, keep_alive, body)


async def send(stream: trio.SocketStream, reply: Reply, keep_alive: bool) -> None:
    head = [
        f"HTTP/1.1 {reply.status} {REASONS.get(reply.status, '')}",
        f"Content-Type: {reply.content_type}",
        f"Content-Length: {len(reply.body)}",
        "Connection: " + ("keep-alive" if keep_alive else "close"),
    ]
    if reply.allow:
        head.append(f"Allow: {reply.allow}")
    head += [f"{name}: {value}" for name, value in reply.headers]
    await stream.send_all(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + reply.body)
