"""The admin port: Prometheus metrics, the groups as JSON, and fault rules, over HTTP.

It runs on the server's Trio loop, beside the Kafka listener, so that what it reads (the
coordinator's groups, the counters) and changes (the fault rules) needs no lock: a scrape
is a moment of the loop's time, between requests. It is off unless `admin.port` is set.

HTTP/1.1, bounded in everything a client sends, is http.py's; this module routes.

    GET    /metrics             Prometheus text format
    GET    /v1/groups           every group: id, state, protocol, generation, members
    GET    /v1/groups/{id}      one group with its members
    GET    /v1/faults           the fault rules, with their state and injections
    POST   /v1/faults           add a rule (JSON); 201 and its view
    DELETE /v1/faults/{id}      end a rule
    DELETE /v1/faults           end every rule

The admin port sees the server only as its `AdminHost`: what a scrape reads (the metrics'
`MetricsSource`), the groups and the fault rules, so that this module does not import the
server and a test can route requests over anything with those parts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote

import msgspec
import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from fastcoord.core.group import Group
from fastcoord.faults import Fault, FaultError, decode_rule
from fastcoord.server import http
from fastcoord.server.http import HttpError, Reply, Request, allow, error_reply, json_reply
from fastcoord.server.metrics import MetricsCollector, MetricsSource, exposition

if TYPE_CHECKING:
    from fastcoord.server.fault_injection import FaultInjector

log = logging.getLogger("fastcoord.admin")

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


class AdminHost(MetricsSource, Protocol):
    """What the admin port reads and changes of the server: the metrics' source, the
    groups, and the fault rules."""

    injector: FaultInjector

    def now_ms(self) -> int: ...

    def groups(self) -> Mapping[str, Group]:
        """The classic groups coordinated here, by id."""


class Admin:
    def __init__(self, host: AdminHost) -> None:
        self.host = host
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(MetricsCollector(host))
        ProcessCollector(namespace="fastcoord", registry=self.registry)

    def route(self, request: Request) -> Reply:
        path = request.path.split("?", 1)[0]
        parts = [unquote(p) for p in path.strip("/").split("/")] if path != "/" else []
        method = request.method
        if parts == ["metrics"]:
            allow(method, "GET")
            return Reply(200, exposition(self.registry), CONTENT_TYPE_LATEST)
        if parts[:2] == ["v1", "groups"] and len(parts) <= 3:
            allow(method, "GET")
            return self._groups(parts[2] if len(parts) == 3 else None)
        if parts[:2] == ["v1", "faults"] and len(parts) == 2:
            allow(method, "GET, POST, DELETE")
            return self._faults(method, request.body)
        if parts[:2] == ["v1", "faults"] and len(parts) == 3:
            allow(method, "DELETE")
            return self._delete_fault(parts[2])
        raise HttpError(404, f"no such resource: {path}")

    def _groups(self, group_id: str | None) -> Reply:
        groups = self.host.groups()
        if group_id is None:
            return json_reply(200, [group_view(g) for g in groups.values()])
        group = groups.get(group_id)
        if group is None:
            raise HttpError(404, f"no group {group_id!r}")
        return json_reply(200, group_detail(group))

    def _faults(self, method: str, body: bytes) -> Reply:
        injector = self.host.injector
        now = self.host.now_ms()
        if method == "GET":
            return json_reply(200, [fault_view(f, now) for f in injector.faults])
        if method == "DELETE":
            return json_reply(200, {"deleted": len(injector.clear())})
        try:
            rule = decode_rule(body)
        except FaultError as exc:
            raise HttpError(400, f"invalid fault rule: {exc}") from None
        fault = injector.add(rule)
        return json_reply(201, fault_view(fault, now))

    def _delete_fault(self, text: str) -> Reply:
        if not text.isdigit():
            raise HttpError(404, f"no fault rule {text!r}: ids are numbers")
        fault = self.host.injector.remove(int(text))
        if fault is None:
            raise HttpError(404, f"no fault rule {text}")
        return json_reply(200, fault_view(fault, self.host.now_ms()))

    def reply(self, request: Request) -> Reply:
        started = time.perf_counter_ns()
        try:
            return self.route(request)
        except HttpError as exc:
            return error_reply(exc.status, str(exc), exc.allow)
        except Exception:
            log.exception("admin request %s %s failed", request.method, request.path)
            return error_reply(500, "internal error: see the server's log")
        finally:
            # The loop's time taken from the Kafka clients: what watching the server costs.
            self.host.metrics.admin_timings.observe_ns(time.perf_counter_ns() - started)


async def serve(
    admin: Admin,
    listeners: list[trio.SocketListener],
    task_status: Any = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the admin port until cancelled."""
    await http.serve(admin.reply, listeners, task_status=task_status)
