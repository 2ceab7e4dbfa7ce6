"""The client's connection against a real `fastcoord serve`: its lane's requests, written
straight to the socket with what does not fit left to the writer task, keep their order
among themselves and with other requests, and every one is answered once."""

from __future__ import annotations

from typing import Any

import numpy as np
import trio

from fastcoord.client.connection import Connection, LaneAnswer
from fastcoord.client.lane import ROW
from fastcoord.client.native import heartbeat_template, make_lane
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import MetadataRequest, MetadataResponse
from fastcoord.protocol.schema import Response
from fastcoord.testing import ServerProcess

# 200k heartbeats of ~50 bytes: far more than a loopback socket takes in one write.
COUNT = 200_000


def test_a_flush_larger_than_the_socket_buffer_is_answered_whole_and_in_order(
    fastcoord_serve: ServerProcess,
) -> None:
    answered: list[LaneAnswer] = []
    others: list[str] = []
    leftover: list[int] = []
    latency, commits = np.zeros((2, ROW), np.int64), np.zeros(2, np.int64)

    def on_lane(answers: list[LaneAnswer], _now: int) -> None:
        answered.extend(answers)

    async def main() -> None:
        lane = make_lane(COUNT, latency, commits)
        connection = Connection((fastcoord_serve.host, fastcoord_serve.port), lane, on_lane)
        await connection.open()

        def metadata(name: str) -> None:
            def on_answer(response: Response | None, _latency_ns: int) -> None:
                assert isinstance(response, MetadataResponse)
                others.append(name)

            connection.send(MetadataRequest(topics=[]), on_answer)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(connection.run)
            template = heartbeat_template(
                connection.heartbeat_version, connection.client_id, "g", 1, "m", None
            )
            for i in range(COUNT):
                lane.start(i, i, template, 0, 3_600_000)
            metadata("before")
            connection.flush(0)
            leftover.append(connection.unsent_bytes)
            metadata("after")
            with trio.fail_after(60):
                while len(answered) < COUNT or len(others) < 2:
                    await trio.sleep(0.01)
            assert lane.in_flight == 0
            for i in range(COUNT):  # else the connection's end reports them lost
                lane.stop(i)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert leftover[0] > 0, "the flush fitted in one write: the writer's part went untested"
    tokens = [token for token, *_ in answered]
    assert tokens == list(range(COUNT))
    # No such group: every heartbeat gets the same error, none is lost or doubled, and each
    # latency runs from its write (the writer stamps what it writes).
    assert {(api, current, error) for _, api, current, _, error, _ in answered} == {
        (ApiKey.HEARTBEAT, True, answered[0][4])
    }
    assert answered[0][4] != 0
    assert all(0 < latency_ns < 60e9 for _, _, _, latency_ns, _, _ in answered)
    assert latency[0, -3] == 0  # no plain success among them
    assert others == ["before", "after"]


def test_a_lost_connection_is_told_to_every_member_of_its_lane(
    fastcoord_serve: ServerProcess,
) -> None:
    answered: list[Any] = []

    async def main() -> None:
        lane = make_lane(3, np.zeros((2, ROW), np.int64), np.zeros(2, np.int64))
        connection = Connection(
            (fastcoord_serve.host, fastcoord_serve.port),
            lane,
            lambda answers, _now: answered.extend(answers),
        )
        await connection.open()
        template = heartbeat_template(connection.heartbeat_version, "c", "g", 1, "m", None)
        lane.start(0, "a", template, 10**9, 3000)  # not due: nothing in flight
        lane.start(2, "b", template, 10**9, 3000)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(connection.run)
            await trio.sleep(0.1)
            connection.close()

    trio.run(main)
    lost = ApiKey.HEARTBEAT, True, 0, ErrorCode.NETWORK_EXCEPTION, None  # no latency
    assert answered == [("a", *lost), ("b", *lost)]
