"""How a fleet deals its members to connections: with one user (plaintext, or SASL with one
user) member i shares connection i // members_per_connection in slot i % members_per_connection,
as it always has; with SASL users, member number i logs in as user i % users, and a
connection only ever holds members of one user."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import trio

from fastcoord.client.fleet import Fleet, FleetConfig, Seat
from fastcoord.client.login import ClientSecurity
from fastcoord.loadtest.stats import Recorder

USERS = ClientSecurity("sasl_plaintext", "PLAIN", "user-{n}", "pw", sasl_users=5)


def seats(
    config: FleetConfig, numbers: list[int] | None = None, count: int = 20
) -> list[Seat[Any]]:
    """The seats a fleet gives `count` members (number `numbers[k]` of the run, if given)."""

    async def add() -> list[Seat[Any]]:
        fleet = Fleet(config, Recorder(0))
        try:
            if numbers is None:
                return [fleet.add("g") for _ in range(count)]
            return [fleet.add("g", number=n) for n in numbers]
        finally:
            fleet._poller.close()

    return trio.run(add)


def test_one_user_shares_connections_by_index_as_before() -> None:
    for security in (ClientSecurity(), ClientSecurity("sasl_ssl", None, "alice", "pw")):
        config = FleetConfig(("127.0.0.1", 9092), members_per_connection=3, security=security)
        placed = [(s.share, s.slot) for s in seats(config)]
        assert placed == [(i // 3, i % 3) for i in range(20)]


def test_members_of_different_users_never_share_a_connection() -> None:
    config = FleetConfig(("127.0.0.1", 9092), members_per_connection=3, security=USERS)
    # A worker's members are every second member of the run (worker 1 of 2).
    numbers = list(range(1, 40, 2))
    by_share: defaultdict[int, list[tuple[int, int]]] = defaultdict(list)
    for number, seat in zip(numbers, seats(config, numbers), strict=True):
        by_share[seat.share].append((number % 5, seat.slot))
    for share, members in by_share.items():
        users = {user for user, _ in members}
        assert users == {share % 5}, (share, members)  # the connection's user, from its key
        assert len(members) <= 3
        assert sorted(slot for _, slot in members) == list(range(len(members)))
    # Each user's 4 members fill two connections (3 + 1): ten in all, not 20 // 3 + 1 = 7.
    assert len(by_share) == 10


def test_plaintext_ignores_a_number_of_users() -> None:
    security = ClientSecurity(sasl_users=5)  # refused by the command; harmless here
    config = FleetConfig(("127.0.0.1", 9092), members_per_connection=4, security=security)
    placed = [(s.share, s.slot) for s in seats(config, list(range(12)))]
    assert placed == [(i // 4, i % 4) for i in range(12)]
