"""The fleet against a real `fastcoord serve`: members of two groups share connections,
whose lanes send their heartbeats and commits and record the plain successes; what is not
one (a rebalance, a lost connection) reaches the fleet, and what it records agrees with
what the server says (DescribeGroups).

Each connection carries one member of each group, as the load test's round robin of groups
does: two members of a group on one connection can stall a rebalance (docs/loadtest.md).
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from fastcoord.client.fleet import Fleet, FleetConfig, Seat
from fastcoord.client.member import State
from fastcoord.loadtest.stats import RebalanceRow, Recorder, Second
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import DescribeGroupsRequest
from fastcoord.testing import ServerProcess, fastcoord_server

SERVER_ARGS = (
    "--group-initial-rebalance-delay-ms",
    "0",
    "--group-min-session-timeout-ms",
    "500",
    "--num-partitions",
    "4",
)
MEMBERS = 8  # four in each group
SHARING = 2  # members per connection: one of each group


def config(server: ServerProcess) -> FleetConfig:
    return FleetConfig(
        bootstrap=(server.host, server.port),
        members_per_connection=SHARING,
        heartbeat_interval_ms=100,
        session_timeout_ms=5_000,
        rebalance_timeout_ms=5_000,
        commit_interval_ms=200,
        request_timeout_ms=5_000,
    )


def describe(server: ServerProcess, groups: list[str]) -> dict[str, tuple[str, int]]:
    """Each group's state and member count, as the server says."""
    with server.connect() as c:
        answer: Any = c.request(DescribeGroupsRequest(groups=groups), 5)
    return {g.group_id: (g.group_state, len(g.members)) for g in answer.groups}


async def until(check: Callable[[], bool], timeout_s: float = 20) -> None:
    with trio.fail_after(timeout_s):
        while not check():
            await trio.sleep(0.05)


def take(recorder: Recorder) -> Second:
    return recorder.take(1, int(time.time() * 1000), {}, 0, time.process_time())


def heartbeats(second: Second) -> tuple[int, dict[int, int]]:
    """(Heartbeats answered, errors by code) in a Second."""
    for api in second.apis:
        if api.api_key == ApiKey.HEARTBEAT:
            return api.count, api.errors
    return 0, {}


@dataclass
class Tally:
    """What the recorder counted over several takes."""

    heartbeats: int = 0
    errors: Counter[int] = field(default_factory=Counter)  # heartbeats' errors, by code
    commits: int = 0
    offsets: int = 0
    rebalances: list[RebalanceRow] = field(default_factory=list)
    unexpected_expirations: int = 0

    def add(self, second: Second) -> None:
        count, errors = heartbeats(second)
        self.heartbeats += count
        self.errors.update(errors)
        self.commits += second.commits
        self.offsets += second.offsets
        self.rebalances += second.rebalances
        self.unexpected_expirations += second.unexpected_expirations


async def tally_until(recorder: Recorder, done: Callable[[Tally], bool]) -> Tally:
    """Take what the recorder counts, every tenth of a second, until `done` says enough."""
    tally = Tally()
    with trio.fail_after(20):
        while not done(tally):
            await trio.sleep(0.1)
            tally.add(take(recorder))
    return tally


def test_a_group_rebalances_while_another_beats_on_the_same_connection(tmp_path: Path) -> None:
    with fastcoord_server(tmp_path, *SERVER_ARGS) as server:
        recorder = Recorder(0)
        seen: dict[str, Any] = {}

        async def main() -> None:
            fleet = Fleet(config(server), recorder)
            async with trio.open_nursery() as nursery:
                await nursery.start(fleet.run)
                seats = [fleet.add(f"g{i % 2}") for i in range(MEMBERS)]
                for seat in seats:
                    fleet.start(seat)
                await until(lambda: fleet.all_stable(seats))
                assert seats[0].connection is seats[1].connection  # a g0 and a g1 member
                take(recorder)  # the joins
                # Heartbeats enough for five a member, and a commit, whatever the pace.
                seen["steady"] = await tally_until(
                    recorder, lambda t: t.heartbeats >= MEMBERS * 5 and t.commits > 0
                )
                # A ninth member joins g0: g0's members hear of the rebalance from their
                # heartbeats and rejoin, while g1's keep beating on the same connection.
                newcomer = fleet.add("g0")
                fleet.start(newcomer)
                seen["rebalance"] = await tally_until(
                    recorder,
                    lambda t: (
                        fleet.all_stable([*seats, newcomer])
                        and len({row[1] for row in t.rebalances}) >= 5
                    ),
                )
                seen["described"] = describe(server, ["g0", "g1"])
                nursery.cancel_scope.cancel()

        trio.run(main)

    steady = seen["steady"]
    # Every heartbeat of the 8 members a plain success, and their commits recorded.
    assert steady.errors == {}
    assert steady.offsets >= steady.commits
    rebalance = seen["rebalance"]
    errors = rebalance.errors
    assert errors.get(ErrorCode.REBALANCE_IN_PROGRESS, 0) >= 4  # each of g0's four
    assert set(errors) <= {ErrorCode.REBALANCE_IN_PROGRESS}
    rows = rebalance.rebalances
    assert {row[0] for row in rows} == {"g0"}  # g1 saw none
    assert len({row[1] for row in rows}) == 5  # g0's four and the newcomer
    assert rebalance.heartbeats > 0 and rebalance.unexpected_expirations == 0
    assert seen["described"] == {"g0": ("Stable", 5), "g1": ("Stable", 4)}


# Connections of two members, in order: the lost one (the first) holds two of g0, so that only
# g0 rebalances. Had it held one of each group, both groups would rebalance at once on
# shared connections, where each group's JoinGroup answers can wait behind the other's (the
# stall docs/loadtest.md describes), and the groups would form again only after rebalance
# timeouts: not what this test is about.
LOSS_GROUPS = ["g0", "g0", "g0", "g1", "g0", "g1", "g1", "g1"]


def test_members_whose_connection_is_lost_come_back_on_another(tmp_path: Path) -> None:
    with fastcoord_server(tmp_path, *SERVER_ARGS) as server:
        recorder = Recorder(0)
        seen: dict[str, Any] = {}

        async def main() -> None:
            fleet = Fleet(config(server), recorder)
            async with trio.open_nursery() as nursery:
                await nursery.start(fleet.run)
                seats = [fleet.add(group) for group in LOSS_GROUPS]
                for seat in seats:
                    fleet.start(seat)
                await until(lambda: fleet.all_stable(seats))
                lost = seats[0].connection
                assert lost is not None and lost.stream is not None
                on_it = [seat for seat in seats if seat.connection is lost]
                assert len(on_it) == SHARING
                take(recorder)
                # The network drops the connection: both ends see it end.
                lost.stream.socket.shutdown(socket.SHUT_RDWR)
                await until(lambda: lost.closed)
                seen["states"] = _states(on_it)
                seen["finding"] = [seat.finding for seat in on_it]
                await until(
                    lambda: all(s.connection not in (None, lost) and not s.finding for s in seats)
                )
                await until(lambda: fleet.all_stable(seats))
                seen["loss"] = take(recorder)
                seen["after"] = await tally_until(recorder, lambda t: t.heartbeats >= MEMBERS * 5)
                nursery.cancel_scope.cancel()

        trio.run(main)

    # The moment it was lost, every member on it went to find its coordinator again, each
    # with one NETWORK_EXCEPTION, still in its group (STABLE, its generation kept, as Java's
    # consumer does), and heartbeat on another connection: nobody rebalanced.
    assert set(seen["states"]) == {State.STABLE} and all(seen["finding"])
    errors = heartbeats(seen["loss"])[1]
    assert errors == {ErrorCode.NETWORK_EXCEPTION: SHARING}
    assert seen["loss"].unexpected_expirations == 0
    # Back to plain successes: heartbeats enough for five a member, none an error.
    assert seen["after"].errors == {}


def _states(seats: list[Seat]) -> set[State]:
    return {seat.member.state for seat in seats}
