"""The consumer-protocol fleet against a real `fastcoord serve`: once its members are
steady, their heartbeats and commits go through the connections' lanes, which record the
plain answers; an answer that says something new (a newcomer's rebalance) takes a member
out of its lane and back into it at its new epoch, and a lost connection brings its members
back on another.

Each connection carries one member of each group, as the load test's round robin does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from fastcoord.client import lane
from fastcoord.client.consumer_fleet import ConsumerFleet
from fastcoord.client.fleet import FleetConfig, Seat
from fastcoord.loadtest.stats import Recorder
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.testing import ServerProcess, fastcoord_server
from tests.interop.test_fleet import take, until

CGH = ApiKey.CONSUMER_GROUP_HEARTBEAT
SERVER_ARGS = (
    "--num-partitions",
    "4",
    "--group-consumer-heartbeat-interval-ms",
    "100",
    "--group-consumer-min-heartbeat-interval-ms",
    "100",
    "--group-consumer-session-timeout-ms",
    "6000",
    "--group-consumer-min-session-timeout-ms",
    "6000",
)
MEMBERS = 8  # four in each group
SHARING = 2  # members per connection: one of each group


def config(server: ServerProcess) -> FleetConfig:
    return FleetConfig(
        bootstrap=(server.host, server.port),
        members_per_connection=SHARING,
        commit_interval_ms=200,
        request_timeout_ms=5_000,
        group_protocol="consumer",
    )


def in_lane(seats: list[Seat[Any]]) -> bool:
    return all(s.lane is not None for s in seats)


def counts(recorder: Recorder) -> tuple[int, int]:
    """(Heartbeats answered in the lanes, heartbeats answered through Python) so far."""
    return int(recorder.sunk()[0][0, lane.COUNT]), len(recorder.latencies(CGH))


def test_steady_members_heartbeat_and_commit_in_their_lanes(tmp_path: Path) -> None:
    with fastcoord_server(tmp_path, *SERVER_ARGS) as server:
        recorder = Recorder(0, heartbeat_api=ConsumerFleet.LANE_HEARTBEAT)
        seen: dict[str, Any] = {}

        async def main() -> None:
            fleet = ConsumerFleet(config(server), recorder)
            async with trio.open_nursery() as nursery:
                await nursery.start(fleet.run)
                seats = [fleet.add(f"g{i % 2}") for i in range(MEMBERS)]
                for seat in seats:
                    fleet.start(seat)
                await until(lambda: fleet.all_stable(seats) and in_lane(seats))
                take(recorder)  # the joins
                # Twenty heartbeats of each member answered in its lane, however long a
                # loaded machine takes: the count is the check, not the time.
                await until(lambda: counts(recorder)[0] >= 20 * MEMBERS, 60)
                seen["counts"] = counts(recorder)
                seen["commits"] = recorder.sunk()[1].tolist()
                seen["steady"] = take(recorder)
                seen["stable"] = fleet.all_stable(seats)
                # A newcomer in g0: g0's members hear of their new epoch from the lane's
                # heartbeats, leave their lanes, and are back in at the new epoch.
                epochs = [s.member.member_epoch for s in seats]
                newcomer = fleet.add("g0")
                fleet.start(newcomer)
                everyone = [*seats, newcomer]
                await until(
                    lambda: (
                        fleet.all_stable(everyone)
                        and in_lane(everyone)
                        and all(
                            s.member.member_epoch > e
                            for s, e in zip(seats, epochs, strict=True)
                            if s.member.group_id == "g0"
                        )
                    ),
                    60,
                )
                seen["moved"] = [
                    s.member.member_epoch > e for s, e in zip(seats, epochs, strict=True)
                ]
                # And a lost connection: its members come back, on another, into a lane.
                lost = seats[0].connection
                assert lost is not None and lost is seats[1].connection
                lost.close()
                await until(
                    lambda: (
                        seats[0].connection not in (None, lost)
                        and fleet.all_stable(everyone)
                        and in_lane(everyone)
                    ),
                    60,
                )
                before = counts(recorder)[0]
                await until(lambda: counts(recorder)[0] >= before + 5 * len(everyone), 60)
                nursery.cancel_scope.cancel()

        trio.run(main)

    in_lanes, in_python = seen["counts"]
    # Most steady heartbeats are the lanes': only the odd one (none, in a quiet run) comes
    # back to Python.
    assert in_lanes >= 20 * MEMBERS and in_python * 10 <= in_lanes, seen["counts"]
    commits, offsets = seen["commits"]
    assert commits > 0 and offsets >= commits
    steady = seen["steady"]
    apis = {a.api_key: a for a in steady.apis}
    assert ApiKey.HEARTBEAT not in apis  # the lanes' heartbeats are reported as what they are
    assert apis[CGH].count >= in_lanes and apis[CGH].errors == {}
    assert seen["stable"]  # the lanes' plain answers confirm the members
    # g0's members moved to a new epoch; g1's did not need to.
    assert seen["moved"][0::2] == [True] * (MEMBERS // 2)
