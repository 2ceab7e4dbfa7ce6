"""The client's lane, compiled against the pure-Python twin in the same run.

A load test drives many members over one connection: their heartbeats leave together
(Lane.due) and their answers come back as one run (Lane.read), plain successes recorded in
the lane's sink. One round here is both for 1,000 members with Heartbeat v4, what current
clients send; divide by 1,000 for the cost of one heartbeat out and its answer in.

Inputs are built on first use, never at import. The class has a `setup`, so asv times
every call on its own (asv#966); one call handles 1,000 heartbeats, which keeps the timer's
own cost out of the figures.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from fastcoord._ext import client_lane as compiled  # type: ignore[attr-defined]
from fastcoord.client import lane as twin
from fastcoord.client.native import heartbeat_template
from fastcoord.protocol import framing
from fastcoord.protocol.messages import HeartbeatResponse

from .common import member_id, scaled

IMPLS: dict[str, Any] = {"compiled": compiled.Lane, "twin": twin.Lane}
VERSION = 4
INTERVAL_MS = 3000
MAX_SIZE = 100 * 1024 * 1024


@functools.cache
def templates(members: int) -> list[bytes]:
    """One Heartbeat v4 request per member of one group, as rdkafka names its client."""
    return [
        heartbeat_template(VERSION, "rdkafka", "load-test-group-0007", 42, member_id(i), None)
        for i in range(members)
    ]


@functools.cache
def answers(members: int) -> bytes:
    """The coordinator's answers to one round (correlation ids 1..members), back to back."""
    return b"".join(
        framing.encode_response(cid, VERSION, HeartbeatResponse(0, 0))
        for cid in range(1, members + 1)
    )


class LaneRoundV4:
    """Lane.due then Lane.read: 1,000 members' heartbeats out, their answers in."""

    params = (["compiled", "twin"],)
    param_names = ["impl"]

    def setup(self, impl: str) -> None:
        members = scaled(1000)
        self.lane = IMPLS[impl](members, np.zeros((2, twin.ROW), np.int64), np.zeros(2, np.int64))
        for i, template in enumerate(templates(members)):
            self.lane.start(i, i, template, 0, INTERVAL_MS)
        self.answers = answers(members)
        self.now = 0

    def time_round(self, impl: str) -> None:
        out = bytearray()
        self.lane.due(self.now, 0, out)
        self.lane.stamp(0)
        self.lane.read(bytearray(self.answers), 0, MAX_SIZE, VERSION, 1000, [], [])
        self.now += INTERVAL_MS
