"""The admin port: Prometheus metrics, the groups as JSON, and fault rules, over HTTP.

It runs on the server's Trio loop, beside the Kafka listener, so that what it reads (the
coordinator's groups, the counters) and changes (the fault rules) needs no lock: a scrape
is a moment of the loop's time, between requests. It is off unless `admin.port` is set.

HTTP/1.1 is parsed here, in the small part a scraper, curl or a script uses: a request
line, headers, a Content-Length body; keep-alive. Everything a client sends is bounded
(the head, the body, the time to send them, the connections), and anything else gets its
4xx answer and the connection closes, with nothing else affected.

    GET    /metrics             Prometheus text format
    GET    /v1/groups           every group: id, state, protocol, generation, members
    GET    /v1/groups/{id}      one group with its members
    GET    /v1/faults           the fault rules, with their state and injections
    POST   /v1/faults           add a rule (JSON); 201 and its view
    DELETE /v1/faults/{id}      end a rule
    DELETE /v1/faults           end every rule
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import msgspec
import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from fastcoord.core.group import Group
from fastcoord.faults import Fault, FaultError, decode_rule
from fastcoord.server.metrics import MetricsCollector, exposition

if TYPE_CHECKING:
    from fastcoord.server.app import Server

log = logging.getLogger("fastcoord.admin")

MAX_HEAD = 16_384  # the request line and headers
MAX_BODY = 65_536  # a fault rule is a few hundred bytes
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
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
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


# -- the JSON views -------------------------------------------------------------------------


class GroupView(msgspec.Struct):
    group_id: str
    state: str
    protocol_type: str | None
    protocol: str | None
    generation: int
    members: int


class MemberView(msgspec.Struct):
    member_id: str
    client_id: str
    client_host: str
    group_instance_id: str | None
    session_deadline_ms: int | None
    assignment_bytes: int


class GroupDetail(msgspec.Struct):
    group_id: str
    state: str
    protocol_type: str | None
    protocol: str | None
    generation: int
    leader: str | None
    members: list[MemberView]


class FaultView(msgspec.Struct):
    id: int
    rule: Any
    description: str
    state: str
    injected: int
    added_ms: int
    starts_ms: int
    ends_ms: int | None
    held: int  # a pause's requests waiting for its end


def group_view(group: Group) -> GroupView:
    return GroupView(
        group.group_id,
        str(group.state),
        group.protocol_type,
        group.protocol_name,
        group.generation_id,
        len(group.members),
    )


def group_detail(group: Group) -> GroupDetail:
    table = group.table
    members = []
    for m in group.members.values():
        deadline = table.deadline(m.slot)
        members.append(
            MemberView(
                m.member_id,
                m.client_id,
                m.client_host,
                m.group_instance_id,
                deadline if deadline > 0 else None,
                len(m.assignment),
            )
        )
    return GroupDetail(
        group.group_id,
        str(group.state),
        group.protocol_type,
        group.protocol_name,
        group.generation_id,
        group.leader_id,
        members,
    )


def fault_view(fault: Fault, now_ms: int) -> FaultView:
    return FaultView(
        fault.id,
        msgspec.to_builtins(fault.rule),
        fault.describe(),
        fault.state(now_ms),
        fault.injected,
        fault.added_ms,
        fault.starts_ms,
        fault.ends_ms,
        len(fault.held),
    )


# -- routing --------------------------------------------------------------------------------


class Admin:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(MetricsCollector(server))
        ProcessCollector(namespace="fastcoord", registry=self.registry)
        self._connections = 0

    def route(self, request: Request) -> Reply:
        path = request.path.split("?", 1)[0]
        parts = [unquote(p) for p in path.strip("/").split("/")] if path != "/" else []
        method = request.method
        if parts == ["metrics"]:
            _allow(method, "GET")
            return Reply(200, exposition(self.registry), CONTENT_TYPE_LATEST)
        if parts[:2] == ["v1", "groups"] and len(parts) <= 3:
            _allow(method, "GET")
            return self._groups(parts[2] if len(parts) == 3 else None)
        if parts[:2] == ["v1", "faults"] and len(parts) == 2:
            _allow(method, "GET, POST, DELETE")
            return self._faults(method, request.body)
        if parts[:2] == ["v1", "faults"] and len(parts) == 3:
            _allow(method, "DELETE")
            return self._delete_fault(parts[2])
        raise HttpError(404, f"no such resource: {path}")

    def _groups(self, group_id: str | None) -> Reply:
        groups = self.server.coordinator.groups
        if group_id is None:
            return _json(200, [group_view(g) for g in groups.values()])
        group = groups.get(group_id)
        if group is None:
            raise HttpError(404, f"no group {group_id!r}")
        return _json(200, group_detail(group))

    def _faults(self, method: str, body: bytes) -> Reply:
        injector = self.server.injector
        now = self.server.now_ms()
        if method == "GET":
            return _json(200, [fault_view(f, now) for f in injector.faults])
        if method == "DELETE":
            return _json(200, {"deleted": len(injector.clear())})
        try:
            rule = decode_rule(body)
        except FaultError as exc:
            raise HttpError(400, f"invalid fault rule: {exc}") from None
        fault = injector.add(rule)
        return _json(201, fault_view(fault, now))

    def _delete_fault(self, text: str) -> Reply:
        if not text.isdigit():
            raise HttpError(404, f"no fault rule {text!r}: ids are numbers")
        fault = self.server.injector.remove(int(text))
        if fault is None:
            raise HttpError(404, f"no fault rule {text}")
        return _json(200, fault_view(fault, self.server.now_ms()))

    # -- HTTP -------------------------------------------------------------------------------

    async def handle_connection(self, stream: trio.SocketStream) -> None:
        if self._connections >= MAX_CONNECTIONS:
            await _send(stream, _error(503, "too many admin connections"), keep_alive=False)
            await trio.aclose_forcefully(stream)
            return
        self._connections += 1
        buf = bytearray()
        try:
            while True:
                with trio.move_on_after(REQUEST_TIMEOUT_S) as waited:
                    try:
                        request = await _read_request(stream, buf)
                    except HttpError as exc:
                        await _send(stream, _error(exc.status, str(exc)), keep_alive=False)
                        return
                if waited.cancelled_caught:
                    if buf:
                        await _send(stream, _error(408, "request not sent in time"), False)
                    return
                if request is None:
                    return  # the client closed
                reply = self._reply(request)
                await _send(stream, reply, request.keep_alive)
                if not request.keep_alive:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            return
        finally:
            self._connections -= 1
            await trio.aclose_forcefully(stream)

    def _reply(self, request: Request) -> Reply:
        started = time.perf_counter_ns()
        try:
            return self.route(request)
        except HttpError as exc:
            return _error(exc.status, str(exc), exc.allow)
        except Exception:
            log.exception("admin request %s %s failed", request.method, request.path)
            return _error(500, "internal error: see the server's log")
        finally:
            # The loop's time taken from the Kafka clients: what watching the server costs.
            self.server.metrics.admin_timings.observe_ns(time.perf_counter_ns() - started)


def _allow(method: str, allowed: str) -> None:
    if method not in allowed.split(", "):
        raise HttpError(405, f"{method} is not allowed here (allowed: {allowed})", allowed)


def _json(status: int, value: Any) -> Reply:
    return Reply(status, msgspec.json.encode(value))


def _error(status: int, message: str, allow: str | None = None) -> Reply:
    return Reply(status, msgspec.json.encode({"error": message}), JSON, allow)


async def _read_request(stream: trio.SocketStream, buf: bytearray) -> Request | None:
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


async def _send(stream: trio.SocketStream, reply: Reply, keep_alive: bool) -> None:
    head = [
        f"HTTP/1.1 {reply.status} {REASONS.get(reply.status, '')}",
        f"Content-Type: {reply.content_type}",
        f"Content-Length: {len(reply.body)}",
        "Connection: " + ("keep-alive" if keep_alive else "close"),
    ]
    if reply.allow:
        head.append(f"Allow: {reply.allow}")
    await stream.send_all(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + reply.body)


async def serve(
    admin: Admin,
    listeners: list[trio.SocketListener],
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the admin port until cancelled."""
    handler: Callable[[trio.SocketStream], Awaitable[None]] = admin.handle_connection
    await trio.serve_listeners(handler, listeners, task_status=task_status)
