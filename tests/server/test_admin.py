"""The admin port's routing over a host of the test's own: the groups it holds as JSON (a
list sorted by id, filtered by state and paged with a Link to the next page; one group with
its members, 404 for another), the fault rules added, listed and ended through a real
FaultInjector, and /metrics built from what the host reads."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fastcoord.core.group import Group, Member
from fastcoord.core.native import member_table
from fastcoord.core.state import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupState,
)
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.server.admin import Admin
from fastcoord.server.fault_injection import FaultInjector
from fastcoord.server.http import Reply, Request
from fastcoord.server.metrics import Metrics
from fastcoord.timings import Timings


def member(group: Group, member_id: str, client_id: str) -> Member:
    joined = Member(group, member_id, None, client_id, "/10.0.0.7", 60_000, 10_000, "consumer", [])
    group.add(joined, None, 0)
    return joined


class Host:
    """An AdminHost holding two groups: "orders", Stable in generation 3 with two members,
    and "audit", Empty. Its clock moves when the test moves it; no request is handled
    through it."""

    def __init__(self) -> None:
        self.metrics = Metrics()
        self.event_log = None
        self.now = 7_000
        self.timers: list[tuple[int, Callable[[], object]]] = []
        self.injector = FaultInjector(self)
        self.moves = None  # not a cluster kept in ZooKeeper
        self.table = member_table.MemberTable()
        orders = Group("orders", 0, self.table)
        member(orders, "orders-1", "billing")
        member(orders, "orders-2", "shipping")
        orders.protocol_name = "range"
        orders.generation_id = 3
        orders.state = STABLE
        self._groups = {"orders": orders, "audit": Group("audit", 0, self.table)}

    def now_ms(self) -> int:
        return self.now

    def groups(self) -> dict[str, Group]:
        return self._groups

    # What the injector needs of its host

    def later(self, at_ms: int, fn: Callable[[], object]) -> None:
        self.timers.append((at_ms, fn))

    def handle(self, slot: Any, header: Any, request: Any) -> None:
        raise AssertionError("no request comes through the admin port")

    def commit_offsets_now(self, commits: Any) -> None:
        raise AssertionError("no request comes through the admin port")

    # What a scrape reads

    def connection_count(self) -> int:
        return 1

    def group_states(self) -> list[int]:
        return list(self.table.group_states())

    def member_count(self) -> int:
        return len(self.table)

    def heartbeat_answers(self) -> dict[int, int]:
        return {}

    def fast_path_answers(self) -> tuple[int, int]:
        return 0, 0

    def disk_timings(self) -> tuple[Timings, Timings] | None:
        return None


def ask(admin: Admin, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    content = b"" if body is None else msgspec.json.encode(body)
    reply = admin.reply(Request(method, path, True, content))
    assert isinstance(reply, Reply)  # every route of this host answers at once
    return reply.status, msgspec.json.decode(reply.body)


def test_partitions_move_only_with_zookeeper() -> None:
    admin = Admin(Host())
    for method, path in (("GET", "/v1/partitions"), ("POST", "/v1/partitions/3/move")):
        status, answer = ask(admin, method, path, {"node": 1})
        assert (status, answer["error"]) == (
            404,
            "partitions move only in a cluster kept in ZooKeeper (--zookeeper)",
        )


def test_the_groups_of_the_host() -> None:
    admin = Admin(Host())
    status, groups = ask(admin, "GET", "/v1/groups")
    assert status == 200
    assert groups == [  # sorted by id
        {
            "group_id": "audit",
            "state": "Empty",
            "protocol_type": None,
            "protocol": None,
            "generation": 0,
            "members": 0,
        },
        {
            "group_id": "orders",
            "state": "Stable",
            "protocol_type": "consumer",
            "protocol": "range",
            "generation": 3,
            "members": 2,
        },
    ]
    status, orders = ask(admin, "GET", "/v1/groups/orders?verbose")
    assert status == 200
    assert (orders["leader"], orders["generation"]) == ("orders-1", 3)
    assert [(m["member_id"], m["client_id"]) for m in orders["members"]] == [
        ("orders-1", "billing"),
        ("orders-2", "shipping"),
    ]
    assert ask(admin, "GET", "/v1/groups/payments") == (404, {"error": "no group 'payments'"})
    assert ask(admin, "DELETE", "/v1/groups/orders")[0] == 405


def many_groups() -> tuple[Host, dict[str, GroupState]]:
    """A host with the two groups of Host and 40 more in every state but Dead, their ids
    in no order and some needing percent-encoding in a URL."""
    host = Host()
    states = {"orders": STABLE, "audit": EMPTY}
    cycle = [EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE]
    for n in range(40):
        group_id = f"g{(n * 17) % 40:02d}" + (" a/b&c=d" if n % 7 == 0 else "")
        group = Group(group_id, 0, host.table)
        group.state = cycle[n % 4]
        host._groups[group_id] = group
        states[group_id] = group.state
    return host, states


def page(admin: Admin, path: str) -> tuple[list[str], str | None]:
    """The ids of one answer of /v1/groups, and the path its Link gives to the next."""
    reply = admin.reply(Request("GET", path, True, b""))
    assert isinstance(reply, Reply)
    assert reply.status == 200, reply.body
    links = [value for name, value in reply.headers if name == "Link"]
    following = None
    if links:
        (link,) = links
        match = re.fullmatch(r'<(/v1/groups\?[^>]*)>; rel="next"', link)
        assert match, link
        following = match[1]
    return [g["group_id"] for g in msgspec.json.decode(reply.body)], following


def test_groups_filtered_by_state() -> None:
    host, states = many_groups()
    admin = Admin(host)
    ids, following = page(admin, "/v1/groups")
    assert ids == sorted(states) and following is None
    for query, wanted in [
        ("Stable", {STABLE}),
        ("stable", {STABLE}),
        ("Stable,Empty", {STABLE, EMPTY}),
        ("EMPTY, completingrebalance", {EMPTY, COMPLETING_REBALANCE}),
        ("Dead", set()),
    ]:
        ids, _ = page(admin, f"/v1/groups?state={quote(query)}")
        assert ids == sorted(g for g, state in states.items() if state in wanted), query
    status, refused = ask(admin, "GET", "/v1/groups?state=Stable,Rebalancing")
    assert (status, refused) == (
        400,
        {
            "error": "unknown state 'Rebalancing': the states are Empty, PreparingRebalance, "
            "CompletingRebalance, Stable, Dead (any case)"
        },
    )
    assert ask(admin, "GET", "/v1/groups?state=")[0] == 400


@pytest.mark.parametrize("size", [1, 3, 7, 42, 10_000])
def test_groups_in_pages_follow_the_link(size: int) -> None:
    host, states = many_groups()
    admin = Admin(host)
    seen: list[str] = []
    path: str | None = f"/v1/groups?limit={size}"
    pages = 0
    while path is not None:
        ids, path = page(admin, path)
        assert 1 <= len(ids) <= size
        assert path is None or f"limit={size}" in path
        seen += ids
        pages += 1
    assert seen == sorted(states)
    assert pages == -(-len(states) // size)  # no empty last page


def test_a_filtered_page_keeps_its_filter_and_starts_after_an_id() -> None:
    host, states = many_groups()
    admin = Admin(host)
    stable = sorted(g for g, state in states.items() if state == STABLE)
    ids, following = page(admin, "/v1/groups?state=stable,Stable&limit=4")
    assert ids == stable[:4]
    assert following == f"/v1/groups?state=Stable&after={quote(stable[3], safe='')}&limit=4"
    ids, following = page(admin, following)
    assert ids == stable[4:8]
    # `after` need not be a group's id: the groups whose id sorts after it.
    ids, following = page(admin, "/v1/groups?after=g2&limit=10000")
    assert ids == [g for g in sorted(states) if g > "g2"] and following is None
    ids, _ = page(admin, "/v1/groups?after=" + quote(stable[-1], safe="") + "&state=Stable")
    assert ids == []


@pytest.mark.parametrize(
    ("query", "status", "error"),
    [
        ("limit=0", 400, "limit must be a number from 1 to 10000, not '0'"),
        ("limit=10001", 400, "limit must be a number from 1 to 10000, not '10001'"),
        ("limit=-1", 400, "limit must be a number from 1 to 10000, not '-1'"),
        ("limit=ten", 400, "limit must be a number from 1 to 10000, not 'ten'"),
        ("limit=" + "9" * 5000, 400, "limit must be a number from 1 to 10000, not '999"),
        ("limit=%D9%A3", 400, "limit must be a number from 1 to 10000, not '٣'"),
        ("limit=2&limit=3", 400, "limit given twice"),
        ("sort=id", 400, "unknown parameter 'sort': /v1/groups takes state, limit, after"),
        ("verbose", 400, "unknown parameter 'verbose'"),
        ("after=%FF", 400, "malformed query string"),
        ("a=1&" * 20, 400, "malformed query string: Max number of fields exceeded"),
        ("after=" + "x" * 9000, 414, "a query string of 9006 bytes; at most 8192"),
    ],
    ids=lambda v: v[:30] if isinstance(v, str) else str(v),
)
def test_bad_parameters_are_refused_saying_why(query: str, status: int, error: str) -> None:
    admin = Admin(Host())
    got, body = ask(admin, "GET", f"/v1/groups?{query}")
    assert got == status
    assert body["error"].startswith(error)


def test_fault_rules_through_the_hosts_injector() -> None:
    host = Host()
    admin = Admin(host)
    status, added = ask(admin, "POST", "/v1/faults", {"api": "JoinGroup", "pause": True})
    assert status == 201
    assert (added["id"], added["state"], added["added_ms"]) == (1, "active", 7_000)
    assert host.injector.faults.touches(ApiKey.JOIN_GROUP)
    status, listed = ask(admin, "GET", "/v1/faults")
    assert [f["description"] for f in listed] == ["#1 JoinGroup: pause"]
    assert ask(admin, "POST", "/v1/faults", {"api": "JoinGroup"})[0] == 400
    host.now = 9_000
    status, ended = ask(admin, "DELETE", "/v1/faults/1")
    assert (status, ended["state"]) == (200, "ended")
    assert not host.injector.faults.live
    assert ask(admin, "GET", "/v1/faults") == (200, [])
    assert host.metrics.admin_timings.cumulative()[-1][1] == 5  # each request, timed


def test_metrics_from_what_the_host_reads() -> None:
    admin = Admin(Host())
    reply = admin.reply(Request("GET", "/metrics", True, b""))
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(reply.body.decode())
        for sample in family.samples
    }
    assert samples[("fastcoord_groups", (("state", "Stable"),))] == 1
    assert samples[("fastcoord_groups", (("state", "Empty"),))] == 1
    assert samples[("fastcoord_members", ())] == 2
    assert samples[("fastcoord_connections", ())] == 1
