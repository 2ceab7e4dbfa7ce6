"""The admin port: Prometheus metrics, the groups as JSON, and fault rules, over HTTP.

It runs on the server's Trio loop, beside the Kafka listener, so that what it reads (the
coordinator's groups, the counters) and changes (the fault rules) needs no lock: a scrape
is a moment of the loop's time, between requests. It is off unless `admin.port` is set.

HTTP/1.1, bounded in everything a client sends, is http.py's; this module routes.

    GET    /metrics             Prometheus text format
    GET    /v1/groups           the groups by id: id, state, protocol, generation, members;
                                ?state=Stable,Empty filters, ?limit=N&after=ID pages (Link)
    GET    /v1/groups/{id}      one group with its members
    GET    /v1/faults           the fault rules, with their state and injections
    POST   /v1/faults           add a rule (JSON); 201 and its view
    DELETE /v1/faults/{id}      end a rule
    DELETE /v1/faults           end every rule
    GET    /v1/partitions       with --zookeeper: the map of offsets partitions to nodes as
                                this node last read it, and what it serves and loads
    POST   /v1/partitions/{p}/move  with --zookeeper: {"node": ID} gives partition p to
                                that live node; 200 and the map written, 409 if it cannot

The admin port sees the server only as its `AdminHost`: what a scrape reads (the metrics'
`MetricsSource`), the groups and the fault rules, so that this module does not import the
server and a test can route requests over anything with those parts.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Awaitable, Iterable, Mapping
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, quote, unquote

import msgspec
import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry
from prometheus_client.process_collector import ProcessCollector

from fastcoord.cluster.zookeeper import MoveRefused
from fastcoord.core.group import Group
from fastcoord.core.state import GroupState
from fastcoord.faults import Fault, FaultError, decode_rule
from fastcoord.server import http
from fastcoord.server.http import HttpError, Reply, Request, allow, error_reply, json_reply
from fastcoord.server.metrics import MetricsCollector, MetricsSource, exposition

if TYPE_CHECKING:
    from fastcoord.server.coordinator_moves import CoordinatorMoves
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


# -- the list of groups: a filter by state, and pages --------------------------------------

# Everything a client puts in the query is bounded: its length, and the page it may ask for
# (each group of a page costs the loop its view; a pass over the groups finds the page).
MAX_QUERY = 8192
MAX_LIMIT = 10_000
STATES = {str(state).lower(): state for state in GroupState}  # Kafka's names, any case
QUERY_KEYS = ("state", "limit", "after")


class GroupQuery(msgspec.Struct):
    states: frozenset[GroupState] | None = None  # None: any
    limit: int | None = None  # None: every group, in one answer
    after: str | None = None  # only ids that sort after this one


def group_query(query: str) -> GroupQuery:
    """The query string of GET /v1/groups; HttpError 400 (414) saying what is wrong."""
    if len(query) > MAX_QUERY:
        raise HttpError(414, f"a query string of {len(query)} bytes; at most {MAX_QUERY}")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, errors="strict", max_num_fields=16)
    except ValueError as exc:  # too many fields, percent-encoded bytes that are not UTF-8
        raise HttpError(400, f"malformed query string: {exc}") from None
    given: dict[str, str] = {}
    for key, value in pairs:
        if key not in QUERY_KEYS:
            raise HttpError(400, f"unknown parameter {key!r}: /v1/groups takes state, limit, after")
        if key in given:
            raise HttpError(400, f"{key} given twice")
        given[key] = value
    result = GroupQuery(after=given.get("after"))
    if "state" in given:
        names = [name.strip() for name in given["state"].split(",") if name.strip()]
        unknown = [name for name in names if name.lower() not in STATES]
        if unknown or not names:
            known = ", ".join(str(state) for state in GroupState)
            what = f"unknown state {', '.join(map(repr, unknown))}" if unknown else "no state"
            raise HttpError(400, f"{what}: the states are {known} (any case)")
        result.states = frozenset(STATES[name.lower()] for name in names)
    if "limit" in given:
        text = given["limit"]
        digits = text.isascii() and text.isdigit() and len(text) <= len(str(MAX_LIMIT))
        if not (digits and 1 <= int(text) <= MAX_LIMIT):
            raise HttpError(400, f"limit must be a number from 1 to {MAX_LIMIT}, not {text!r}")
        result.limit = int(text)
    return result


def next_page(query: GroupQuery, last: str) -> str:
    """The Link header to the page after the group `last`, with the same filter and size."""
    state = [] if query.states is None else [s for s in GroupState if s in query.states]
    params = [f"state={','.join(map(str, state))}"] if state else []
    params += [f"after={quote(last, safe='')}", f"limit={query.limit}"]
    return f'</v1/groups?{"&".join(params)}>; rel="next"'


def groups_page(groups: Mapping[str, Group], query: GroupQuery) -> Reply:
    """The groups the query chooses, sorted by id; a Link to the next page if more remain."""
    chosen: Iterable[tuple[str, Group]] = (
        (group_id, group)
        for group_id, group in groups.items()
        if (query.states is None or group.state in query.states)
        and (query.after is None or group_id > query.after)
    )
    by_id = itemgetter(0)
    if query.limit is None:
        page = sorted(chosen, key=by_id)
    else:
        # The page's groups and one more (so we know whether more remain), without sorting
        # them all: a pass over the groups and a heap of limit + 1.
        page = heapq.nsmallest(query.limit + 1, chosen, key=by_id)
    more = query.limit is not None and len(page) > query.limit
    if more:
        del page[query.limit :]
    reply = json_reply(200, [group_view(group) for _, group in page])
    if more:
        reply.headers = (("Link", next_page(query, page[-1][0])),)
    return reply


# -- routing --------------------------------------------------------------------------------


class AdminHost(MetricsSource, Protocol):
    """What the admin port reads and changes of the server: the metrics' source, the
    groups, and the fault rules."""

    injector: FaultInjector
    moves: CoordinatorMoves | None  # a ZooKeeper-kept cluster's; None otherwise

    def now_ms(self) -> int: ...

    def groups(self) -> Mapping[str, Group]:
        """The classic groups coordinated here, by id."""


class Admin:
    def __init__(self, host: AdminHost) -> None:
        self.host = host
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(MetricsCollector(host))
        ProcessCollector(namespace="fastcoord", registry=self.registry)

    def route(self, request: Request) -> Reply | Awaitable[Reply]:
        path, _, query = request.path.partition("?")
        parts = [unquote(p) for p in path.strip("/").split("/")] if path != "/" else []
        method = request.method
        if parts == ["metrics"]:
            allow(method, "GET")
            return Reply(200, exposition(self.registry), CONTENT_TYPE_LATEST)
        if parts[:2] == ["v1", "groups"] and len(parts) <= 3:
            allow(method, "GET")
            if len(parts) == 2:
                return groups_page(self.host.groups(), group_query(query))
            return self._group(parts[2])
        if parts[:2] == ["v1", "faults"] and len(parts) == 2:
            allow(method, "GET, POST, DELETE")
            return self._faults(method, request.body)
        if parts[:2] == ["v1", "faults"] and len(parts) == 3:
            allow(method, "DELETE")
            return self._delete_fault(parts[2])
        if parts == ["v1", "partitions"]:
            allow(method, "GET")
            return json_reply(200, self._moves().view())
        if parts[:2] == ["v1", "partitions"] and len(parts) == 4 and parts[3] == "move":
            allow(method, "POST")
            return self._move(parts[2], request.body)
        raise HttpError(404, f"no such resource: {path}")

    def _moves(self) -> CoordinatorMoves:
        moves = self.host.moves
        if moves is None:
            raise HttpError(
                404, "partitions move only in a cluster kept in ZooKeeper (--zookeeper)"
            )
        return moves

    def _move(self, text: str, body: bytes) -> Awaitable[Reply]:
        moves = self._moves()
        if not text.isdigit():
            raise HttpError(404, f"no partition {text!r}: partitions are numbers")
        try:
            wanted = msgspec.json.decode(body or b"null")
        except msgspec.DecodeError:
            raise HttpError(400, 'expected {"node": ID}') from None
        node = wanted.get("node") if isinstance(wanted, dict) else None
        if not isinstance(node, int) or isinstance(node, bool):
            raise HttpError(400, 'expected {"node": ID}')

        async def moved() -> Reply:
            try:
                written = await moves.move(int(text), node)
            except MoveRefused as exc:
                return error_reply(409, str(exc))
            except Exception as exc:  # ZooKeeper unreachable, or the session ended
                log.warning("move of partition %s to node %d failed: %r", text, node, exc)
                return error_reply(503, f"ZooKeeper did not take the move: {exc!r}")
            owners = {str(p): n for p, n in written.owners.items()}
            return json_reply(200, {"map_version": written.version, "owners": owners})

        return moved()

    def _group(self, group_id: str) -> Reply:
        group = self.host.groups().get(group_id)
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

    def reply(self, request: Request) -> Reply | Awaitable[Reply]:
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
