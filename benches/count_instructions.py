"""Instructions per heartbeat, a load-proof figure: the codec's, the fast loop's or the core's.

Modes: `compiled` / `twin` time Heartbeat v4 request decode + response encode;
`answer-compiled` / `answer-twin` time answer_heartbeats, the server's fast loop, over
runs of 100 v4 heartbeats in one receive buffer; `core-compiled` / `core-twin` time
Coordinator.heartbeat over 10,000 loaded members.

Shared machines change speed by 2x from one minute to the next; instruction counts do not.
Run under callgrind twice with different iteration counts; the difference divided by the
difference in iterations is the cost of one heartbeat, start-up cancelled out:

    for n in 10000 110000; do
      PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \\
        .venv/bin/python -m benches.count_instructions $n compiled
    done
    # then: (Ir(110000) - Ir(10000)) / 100000, Ir from `callgrind_annotate /tmp/cg.N | head`
"""

from __future__ import annotations

import argparse

from fastcoord._ext import hot_frames as compiled  # type: ignore[attr-defined]
from fastcoord.protocol import framing
from fastcoord.protocol import hot_frames as twin
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import HeartbeatRequest, HeartbeatResponse

MODES = ["compiled", "twin", "answer-compiled", "answer-twin", "core-compiled", "core-twin"]
RUN = 100  # heartbeats per receive buffer in the answer modes


def core(n: int, impl: str) -> None:
    from benches.bench_core import NOW, loaded

    co, ids = loaded(impl, 100, 100)
    beat = co.heartbeat
    for i in range(n):
        group_id, member = ids[(i * 7919) % len(ids)]
        beat(group_id, member, 1, None, 4, NOW + 1000)


class Table:
    """A member table that knows every member: the fast loop answers every frame."""

    def heartbeat_id(self, group_id: str, member_id: str, generation: int, now_ms: int) -> int:
        return 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("n", type=int, help="heartbeats to decode and answer")
    parser.add_argument("mode", choices=MODES)
    args = parser.parse_args()
    n, mode = args.n, args.mode
    if mode.startswith("core-"):
        core(n, mode.removeprefix("core-"))
        return
    codec = compiled if mode.endswith("compiled") else twin
    frame = framing.encode_request(
        RequestHeader(ApiKey.HEARTBEAT, 4, 123456, "rdkafka"),
        HeartbeatRequest("load-test-group-0007", 42, "consumer-7-2f1c3b0a-6d3e", None),
    )
    if mode.startswith("answer-"):
        buf, table, answer = bytearray(frame * RUN), Table(), codec.answer_heartbeats
        for _ in range(n // RUN):
            answer(buf, 0, 1 << 20, table, 5, bytearray(), [])
        return
    body = frame[4:]
    response = HeartbeatResponse(0, 0)
    decode, encode = codec.decode_heartbeat_request, codec.encode_heartbeat_response
    for _ in range(n):
        header, _, _ = decode(body)
        encode(header.correlation_id, 4, response)


if __name__ == "__main__":
    main()
