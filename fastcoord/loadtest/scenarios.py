"""What the members of a load test do, scenario by scenario.

Each scenario starts the worker's members in its fleet and then acts on them until the
deadline: nothing more (steady), all joining in the same instant (join-storm), leaving and
rejoining in waves (rolling-restart), crashing without a LeaveGroup while new members join
(churn), or restarting static members within their session timeout, where the coordinator
must not rebalance (static). Members are spread over the workers by index, and over the
groups likewise, so every worker holds a share of every group when there are enough.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import trio

from fastcoord.client import fleet as fleet_module
from fastcoord.client.fleet import Fleet
from fastcoord.client.member import State

SCENARIOS = ("steady", "join-storm", "rolling-restart", "churn", "static")
# Members added, started or left between two checkpoints: a million of them in one go would
# hold the loop for tens of seconds, with no answer read and no second reported meanwhile.
CHUNK = 1_000
_T = TypeVar("_T")
# A seat of either protocol's member: scenarios start, stop and look at members, which both
# kinds do alike.
Seat: TypeAlias = fleet_module.Seat[Any]


@dataclass(frozen=True)
class Plan:
    """A scenario's parameters, the same in every worker."""

    scenario: str
    members: int  # in the whole run
    groups: int
    group_prefix: str
    duration_s: float
    churn_rate: float  # members per second: crashes (churn) or restarts (static)
    wave_size: int  # rolling-restart: members per wave
    wave_interval_ms: int
    restart_pause_ms: int  # static: how long a restarted member stays away
    settle_timeout_s: float  # how long to wait for every member to be stable before acting

    def group_of(self, index: int) -> str:
        """Member `index`'s group: the members are dealt out in blocks, a group's members
        consecutive, so that members sharing a connection (consecutive indexes) share
        groups too. Answers leave a connection in request order, so a JoinGroup waiting for
        its group's rebalance holds every answer behind it; dealt round robin, every
        connection carried a member of every group, each group's rebalance held every
        connection, and 100k members on 100 connections took minutes to form their groups
        (each group rebalancing while the others waited on it)."""
        width = max(4, len(str(self.groups - 1)))
        group = index * self.groups // max(self.members, 1)
        return f"{self.group_prefix}-{group:0{width}d}"

    def mine(self, worker: int, workers: int) -> range:
        """The member indexes this worker drives."""
        return range(worker, self.members, workers)


async def run(fleet: Fleet, plan: Plan, worker: int, workers: int, deadline: float) -> None:
    """Add this worker's members to `fleet` and play the scenario until `deadline`
    (trio.current_time()); the members are still in the group at the end."""
    static = plan.scenario == "static"
    seats: list[Seat] = []
    async for i in _paced(plan.mine(worker, workers)):
        instance = f"{plan.group_of(i)}-member-{i}" if static else None
        seats.append(fleet.add(plan.group_of(i), instance, number=i))
    play = PLAYS[plan.scenario]
    with trio.move_on_at(deadline):
        await play(fleet, plan, seats, deadline)
        await trio.sleep_until(deadline)


async def _paced(items: Iterable[_T]) -> AsyncIterator[_T]:
    """`items`, with a checkpoint every CHUNK of them."""
    for n, item in enumerate(items, 1):
        yield item
        if n % CHUNK == 0:
            await trio.sleep(0)


def _by_group(seats: list[Seat]) -> list[Seat]:
    """The order members start in: a group's members together, as a group's consumers are
    deployed. In the order of their indexes, round robin over the groups, a million members
    reach each group one at a time over minutes, and every group rebalances a hundred times
    while it forms."""
    return sorted(seats, key=lambda seat: seat.member.group_id)


async def _steady(fleet: Fleet, plan: Plan, seats: list[Seat], deadline: float) -> None:
    async for seat in _paced(_by_group(seats)):
        fleet.start(seat)


async def _join_storm(fleet: Fleet, plan: Plan, seats: list[Seat], deadline: float) -> None:
    # Connect everyone and find the coordinator first, so that the storm is of JoinGroups
    # and SyncGroups, not of TCP handshakes.
    fleet.holding = []
    async for seat in _paced(_by_group(seats)):
        fleet.start(seat)
    with trio.move_on_after(plan.settle_timeout_s):
        while len(fleet.holding) < len(seats):
            await trio.sleep(0.05)
    held, fleet.holding = fleet.holding, None
    fleet.storm = {}
    for seat in held:
        fleet.join_now(seat)
    await _settle(fleet, seats, plan)
    fleet.flush_storm()


async def _rolling_restart(fleet: Fleet, plan: Plan, seats: list[Seat], deadline: float) -> None:
    await _start_and_settle(fleet, plan, seats)
    size = max(1, min(len(seats), math.ceil(plan.wave_size * len(seats) / max(1, plan.members))))
    position = 0
    while True:
        await trio.sleep(plan.wave_interval_ms / 1000)
        for _ in range(size):
            seat = seats[position % len(seats)]
            position += 1

            def rejoin(seat: Seat = seat) -> None:
                seat.member.restart()
                fleet.start(seat)

            fleet.leave(seat, then=rejoin)


async def _churn(fleet: Fleet, plan: Plan, seats: list[Seat], deadline: float) -> None:
    await _start_and_settle(fleet, plan, seats)

    def act(seat: Seat) -> None:
        fleet.crash(seat)
        seat.member.restart()  # a new consumer in its place, a new member to the group
        fleet.start(seat)

    await _at_rate(fleet, plan, seats, act)


async def _static(fleet: Fleet, plan: Plan, seats: list[Seat], deadline: float) -> None:
    await _start_and_settle(fleet, plan, seats)
    # From here on, the coordinator should hand restarted members their old places: any
    # rebalance a member sees is flagged.
    fleet.rebalances_expected = False

    def act(seat: Seat) -> None:
        fleet.crash(seat)
        fleet.call_later(plan.restart_pause_ms, lambda: fleet.start(seat))

    def bounce(seat: Seat) -> None:
        # A static member of the consumer protocol that vanishes without a word keeps its
        # instance id taken until its session ends (its return is refused with
        # UNRELEASED_INSTANCE_ID, fatal to a consumer); a restart is a close that says it
        # will be back (epoch -2), then a new process under the same instance id.
        def back() -> None:
            seat.member.restart()
            fleet.start(seat)

        fleet.leave(seat, then=lambda: fleet.call_later(plan.restart_pause_ms, back))

    await _at_rate(fleet, plan, seats, bounce if fleet.config.group_protocol == "consumer" else act)


async def _at_rate(
    fleet: Fleet, plan: Plan, seats: list[Seat], act: Callable[[Seat], None]
) -> None:
    """Act on stable members, round robin, at this worker's share of churn_rate."""
    rate = plan.churn_rate * len(seats) / max(1, plan.members)
    if rate <= 0:
        return
    position = 0
    owed = 0.0
    tick = 0.1
    while True:
        await trio.sleep(tick)
        owed += rate * tick
        while owed >= 1:
            owed -= 1
            for _ in range(len(seats)):
                seat = seats[position % len(seats)]
                position += 1
                if seat.member.state is State.STABLE and not seat.down:
                    act(seat)
                    break


async def _start_and_settle(fleet: Fleet, plan: Plan, seats: list[Seat]) -> None:
    async for seat in _paced(_by_group(seats)):
        fleet.start(seat)
    await _settle(fleet, seats, plan)


async def _settle(fleet: Fleet, seats: list[Seat], plan: Plan) -> None:
    with trio.move_on_after(plan.settle_timeout_s):
        while not fleet.all_stable(seats):
            await trio.sleep(0.05)


async def leave_all(fleet: Fleet, timeout_s: float) -> None:
    """Every stable member leaves, as consumers closing at the end of a test do."""
    leaving = [s for s in fleet.seats if s.member.state is State.STABLE and not s.down]
    if not leaving:
        return
    left = trio.Event()
    waiting = [len(leaving)]  # counted first: answers come in while the rest are sent

    def done() -> None:
        waiting[0] -= 1
        if waiting[0] == 0:
            left.set()

    async for seat in _paced(leaving):
        fleet.leave(seat, then=done)  # one no longer stable is done at once
    with trio.move_on_after(timeout_s):
        await left.wait()


Play = Callable[[Fleet, Plan, list[Seat], float], Awaitable[None]]
PLAYS: dict[str, Play] = {
    "steady": _steady,
    "join-storm": _join_storm,
    "rolling-restart": _rolling_restart,
    "churn": _churn,
    "static": _static,
}
