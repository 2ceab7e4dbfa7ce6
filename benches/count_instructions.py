"""Instructions per Heartbeat v4 (request decode + response encode), a load-proof figure.

Shared machines change speed by 2x from one minute to the next; instruction counts do not.
Run under callgrind twice with different iteration counts; the difference divided by the
difference in iterations is the cost of one heartbeat, start-up cancelled out:

    for n in 10000 110000; do
      valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \\
        .venv/bin/python benches/count_instructions.py $n compiled
    done
    # then: (Ir(110000) - Ir(10000)) / 100000, Ir from `callgrind_annotate /tmp/cg.N | head`
"""

from __future__ import annotations

import sys

from fastcoord._ext import hot_frames as compiled  # type: ignore[attr-defined]
from fastcoord.protocol import framing
from fastcoord.protocol import hot_frames as twin
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import HeartbeatRequest, HeartbeatResponse


def main() -> None:
    n = int(sys.argv[1])
    codec = compiled if sys.argv[2] == "compiled" else twin
    frame = framing.encode_request(
        RequestHeader(ApiKey.HEARTBEAT, 4, 123456, "rdkafka"),
        HeartbeatRequest("load-test-group-0007", 42, "consumer-7-2f1c3b0a-6d3e", None),
    )[4:]
    response = HeartbeatResponse(0, 0)
    decode, encode = codec.decode_heartbeat_request, codec.encode_heartbeat_response
    for _ in range(n):
        header, _ = decode(frame)
        encode(header.correlation_id, 4, response)


if __name__ == "__main__":
    main()
