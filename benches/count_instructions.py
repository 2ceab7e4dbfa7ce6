"""Instructions per heartbeat, a load-proof figure: the codec's, the fast loop's or the core's.

Modes: `compiled` / `twin` time Heartbeat v4 request decode + response encode;
`answer-compiled` / `answer-twin` time answer_heartbeats, the server's fast loop, over
runs of 100 v4 heartbeats in one receive buffer (`answer-table`: compiled, with the real
member table of 10,000 members, 100 of them heartbeating on one connection);
`core-compiled` / `core-twin` time Coordinator.heartbeat over 10,000 loaded members;
`commit-server` times OffsetCommit v8 requests of 100 partitions through a whole
server in this process (connection, codec, core, the in-memory store, the answer), 64 in
flight on a socket pair: per request, with whatever FASTCOORD_NO_EXTENSIONS selects;
`commit-server-log` the same with the offsets log of `--fsync batch` in a temporary
directory (its appender thread and the store's watcher counted too; the kernel's write
and sync are not).

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

MODES = [
    "compiled",
    "twin",
    "answer-compiled",
    "answer-twin",
    "core-compiled",
    "core-twin",
    "commit-server",
    "commit-server-log",
    "answer-table",
]
RUN = 100  # heartbeats per receive buffer in the answer modes


def core(n: int, impl: str) -> None:
    from benches.bench_core import NOW, loaded

    co, ids = loaded(impl, 100, 100)
    beat = co.heartbeat
    for i in range(n):
        group_id, member = ids[(i * 7919) % len(ids)]
        beat(group_id, member, 1, None, 4, NOW + 1000)


def commit_server(n: int, window: int = 64, durable: bool = False) -> None:
    """n OffsetCommit requests through a Server and its Connection, on a socket pair
    (`durable`: with the offsets log of --fsync batch in a temporary directory)."""
    import tempfile
    from pathlib import Path

    import trio

    from benches.bench_commit import CommitRing
    from fastcoord.config import ServerConfig
    from fastcoord.server.app import Server
    from fastcoord.server.connection import Connection
    from fastcoord.storage.memory import MemoryStore
    from fastcoord.storage.store import OffsetsStore, Store

    ring = CommitRing(window)
    answer_len = 4 + int.from_bytes(answer_prefix(ring), "big")

    async def main(data_dir: Path | None) -> None:
        config = ServerConfig(in_memory=data_dir is None)
        partitions = config.offsets_topic_num_partitions
        store: Store
        if data_dir is None:
            store = MemoryStore(partitions)
        else:
            store = OffsetsStore(data_dir, partitions, 1 << 30, "batch", 5)
            store.open()
        server = Server(config, store, max_connections=10)
        store.start(trio.lowlevel.current_trio_token().run_sync_soon, server.appended)
        ours, theirs = trio.socket.socketpair()
        connection = Connection(server, trio.SocketStream(ours), "127.0.0.1:1")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.watch_idle)
            nursery.start_soon(connection.run)
            sent = received = 0
            pending = 0
            while received < n:
                if sent - received < window and sent < n:
                    count = min(window - (sent - received), n - sent)
                    for part in ring.frames(sent, count):
                        while part:
                            part = part[await theirs.send(part) :]
                    sent += count
                data = await theirs.recv(1 << 20)
                pending += len(data)
                received += pending // answer_len
                pending %= answer_len
            nursery.cancel_scope.cancel()
        store.close()

    if not durable:
        trio.run(main, None)
        return
    with tempfile.TemporaryDirectory(prefix="fastcoord-count-") as d:
        trio.run(main, Path(d))


def answer_prefix(ring: object) -> bytes:
    """The size prefix of the answer every ring request gets (the same for all)."""
    from fastcoord.protocol import frames

    _, batch, _ = frames.decode_request(ring.single[0][4:])  # type: ignore[attr-defined]
    from fastcoord.protocol.commit_batch import OffsetCommitAnswer

    return frames.encode_response(0, 8, OffsetCommitAnswer(batch, 0))[:4]  # type: ignore[arg-type]


def answer_table(n: int) -> None:
    from benches.bench_core import NOW, loaded

    co, ids = loaded("compiled", 100, 100)
    # 100 members sharing a connection: each heartbeat is another member's.
    buf = bytearray(
        b"".join(
            framing.encode_request(
                RequestHeader(ApiKey.HEARTBEAT, 4, i, "rdkafka"),
                HeartbeatRequest(group_id, 1, member, None),
            )
            for i, (group_id, member) in enumerate(ids[::100][:RUN])
        )
    )
    table, answer = co.table, compiled.answer_heartbeats
    for _ in range(n // RUN):
        _, count = answer(buf, 0, 1 << 20, table, NOW + 1000, bytearray(), [])
        assert count == RUN, count


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
    if mode in ("commit-server", "commit-server-log"):
        commit_server(n, durable=mode == "commit-server-log")
        return
    if mode == "answer-table":
        answer_table(n)
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
