"""The client's heartbeat path, compiled against the pure-Python twin in the same run.

A load test drives many members over one connection: their heartbeats leave as one batch
(heartbeat_frames) and their answers come back as one run (read_answers). Both are timed
on 1,000 members with Heartbeat v4, what current clients send; divide by 1,000 for the
cost of one heartbeat.

Inputs are built on first use, never at import. The classes have a `setup`, so asv times
every call on its own (asv#966): read_answers pops the members it answers, and each call
needs the full dict again. One call handles 1,000 heartbeats, which keeps the timer's own
cost out of the figures.
"""

from __future__ import annotations

import functools
from types import ModuleType

from fastcoord._ext import client_frames as compiled  # type: ignore[attr-defined]
from fastcoord.client import frames as twin
from fastcoord.client.native import heartbeat_template
from fastcoord.protocol import framing
from fastcoord.protocol.messages import HeartbeatResponse

from .common import member_id, scaled

IMPLS: dict[str, ModuleType] = {"compiled": compiled, "twin": twin}
VERSION = 4
FIRST_CORRELATION = 100_000
MAX_SIZE = 100 * 1024 * 1024


@functools.cache
def templates(members: int) -> list[bytes]:
    """One Heartbeat v4 request per member of one group, as rdkafka names its client."""
    return [
        heartbeat_template(VERSION, "rdkafka", "load-test-group-0007", 42, member_id(i), None)
        for i in range(members)
    ]


@functools.cache
def answers(members: int) -> tuple[bytes, dict[int, object]]:
    """The coordinator's answers to one batch, back to back, and the members by correlation
    id as the client keeps them while the answers are due."""
    ids = range(FIRST_CORRELATION, FIRST_CORRELATION + members)
    buf = b"".join(framing.encode_response(cid, VERSION, HeartbeatResponse(0, 0)) for cid in ids)
    return buf, {cid: member_id(i) for i, cid in enumerate(ids)}


class HeartbeatBatchV4:
    """heartbeat_frames: 1,000 templates copied out with fresh correlation ids."""

    params = (["compiled", "twin"],)
    param_names = ["impl"]

    def setup(self, impl: str) -> None:
        self.templates = templates(scaled(1000))

    def time_heartbeat_frames(self, impl: str) -> None:
        IMPLS[impl].heartbeat_frames(self.templates, FIRST_CORRELATION)


class AnswerRunV4:
    """read_answers: a run of 1,000 Heartbeat v4 answers matched to their members."""

    params = (["compiled", "twin"],)
    param_names = ["impl"]

    def setup(self, impl: str) -> None:
        buf, members = answers(scaled(1000))
        self.buf = bytearray(buf)
        self.heartbeats = dict(members)
        self.answered: list[tuple[object, int]] = []
        self.others: list[tuple[int, bytes]] = []

    def time_read_answers(self, impl: str) -> None:
        IMPLS[impl].read_answers(
            self.buf, 0, MAX_SIZE, self.heartbeats, VERSION, self.answered, self.others
        )
