"""The admin port's routing over a host of the test's own: the groups it holds as JSON (a
list, one group with its members, 404 for another), the fault rules added, listed and
ended through a real FaultInjector, and /metrics built from what the host reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from fastcoord.core.group import Group, Member
from fastcoord.core.native import member_table
from fastcoord.core.state import STABLE
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.server.admin import Admin
from fastcoord.server.fault_injection import FaultInjector
from fastcoord.server.http import Request
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
    return reply.status, msgspec.json.decode(reply.body)


def test_the_groups_of_the_host() -> None:
    admin = Admin(Host())
    status, groups = ask(admin, "GET", "/v1/groups")
    assert status == 200
    assert groups == [
        {
            "group_id": "orders",
            "state": "Stable",
            "protocol_type": "consumer",
            "protocol": "range",
            "generation": 3,
            "members": 2,
        },
        {
            "group_id": "audit",
            "state": "Empty",
            "protocol_type": None,
            "protocol": None,
            "generation": 0,
            "members": 0,
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
