"""The client's connection against a real `fastcoord serve`: heartbeats written straight
to the socket, with what does not fit left to the writer task, keep their order among
themselves and with other requests, and every one is answered once."""

from __future__ import annotations

from typing import Any

import trio

from fastcoord.client.connection import Connection
from fastcoord.client.native import heartbeat_template
from fastcoord.protocol.messages import MetadataRequest, MetadataResponse
from fastcoord.protocol.schema import Response
from fastcoord.testing import ServerProcess


class Token:
    """What the fleet passes with a heartbeat: the connection stamps it when written."""

    def __init__(self, i: int) -> None:
        self.i = i
        self.sent_ns = 0


# 200k heartbeats of ~50 bytes: far more than a loopback socket takes in one write.
COUNT = 200_000


def test_a_batch_larger_than_the_socket_buffer_is_answered_whole_and_in_order(
    fastcoord_serve: ServerProcess,
) -> None:
    answered: list[tuple[Any, int]] = []
    others: list[str] = []
    leftover: list[int] = []

    async def main() -> None:
        connection = Connection(
            (fastcoord_serve.host, fastcoord_serve.port),
            lambda answers, _now: answered.extend(answers),
        )
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
            metadata("before")
            connection.send_heartbeats([template] * COUNT, [Token(i) for i in range(COUNT)])
            leftover.append(connection.unsent_bytes)
            metadata("after")
            with trio.fail_after(60):
                while len(answered) < COUNT or len(others) < 2:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert leftover[0] > 0, "the batch fitted in one write: the writer's part went untested"
    assert [token.i for token, _ in answered] == list(range(COUNT))
    assert all(token.sent_ns > 0 for token, _ in answered)
    # No such group: every heartbeat gets the same error, and none is lost or doubled.
    assert len({code for _, code in answered}) == 1 and answered[0][1] != 0
    assert others == ["before", "after"]
