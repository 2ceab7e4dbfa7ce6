"""A confluent-kafka consumer in an OS process of its own, for test_confluent.py.

    python tests/interop/confluent_proc.py BOOTSTRAP GROUP TOPIC [--client-id ID]
                                           [--session-timeout-ms MS]
                                           [--group-protocol classic|consumer]

It subscribes, polls, and prints one line per assignment change, `assignment 0,1,2`
(`assignment ` alone when it owns nothing), flushed at once, so that a test can follow it
from its stdout. SIGTERM closes the consumer (it leaves the group) and exits 0; tests also
SIGKILL it to play a crashed member.
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType

from confluent_kafka import Consumer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("group")
    parser.add_argument("topic")
    parser.add_argument("--client-id", default="confluent-proc")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--group-protocol", default="classic")
    args = parser.parse_args(argv)

    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    config = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.client_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "max.poll.interval.ms": max(30_000, args.session_timeout_ms),
    }
    if args.group_protocol == "classic":
        config.update({"session.timeout.ms": args.session_timeout_ms, "heartbeat.interval.ms": 500})
    else:
        config["group.protocol"] = args.group_protocol  # the coordinator sets the session
    consumer = Consumer(config)
    consumer.subscribe([args.topic])
    last: list[int] | None = None
    try:
        while not stopping:
            consumer.poll(0.1)
            owned = sorted(tp.partition for tp in consumer.assignment())
            if owned != last:
                print("assignment " + ",".join(map(str, owned)), flush=True)
                last = owned
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
