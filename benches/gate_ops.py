"""The operations whose instructions the performance gate counts, run one at a time.

    python benches/gate_ops.py NAME N

sets up operation NAME (not counted), then does it N times. The gate (perf_gate.py) runs
this under callgrind twice, with two values of N, against each tree it compares; the
difference of the two counts over the difference of N is the cost of one operation, the
set-up and the interpreter's start cancelled out (the gate also switches callgrind's
instrumentation on only around the operations, through FASTCOORD_GATE_MARKS). It is run
as a file, never as `benches.gate_ops`, and imports fastcoord only: the fastcoord measured
is whichever tree comes first on PYTHONPATH, and that tree's own benches may differ.

Every operation goes through the modules the server uses (compiled, or the twins with
FASTCOORD_NO_EXTENSIONS=1), so that work added in Python around a compiled call counts
too. Inputs are fixed and iteration i does the same work as iteration j: the counts are
the same from one run to the next.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from collections.abc import Callable

from fastcoord.core.config import GroupConfig
from fastcoord.core.consumer import records as consumer_records
from fastcoord.core.consumer.group import ConsumerMember
from fastcoord.core.consumer.reconciliation import CurrentAssignment
from fastcoord.core.consumer.topics import StaticTopics
from fastcoord.core.coordinator import Coordinator
from fastcoord.core.native import partition
from fastcoord.core.native import timing_wheel as wheels
from fastcoord.core.records import GroupMetadataKey, GroupMetadataValue, MemberMetadataValue, Record
from fastcoord.core.result import Result
from fastcoord.protocol import frames
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.framing import encode_request
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from fastcoord.storage.store import frames as log_frames

MARKS_ENV = "FASTCOORD_GATE_MARKS"  # a library with gate_start and gate_stop (perf_gate.py)
NOW = 1_000_000
CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0)
SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x05topic\xff\xff\xff\xff"
CLIENT_ID = "rdkafka"
HOST = "/127.0.0.1"

Run = Callable[[int], None]


def member_id(i: int) -> str:
    return f"consumer-{i}-2f1c3b0a-6d3e-4c1b-9a7e-{i:012d}"


def loaded(groups: int, per_group: int) -> tuple[Coordinator, list[tuple[str, str]]]:
    """A coordinator holding `groups` Stable groups of `per_group` members, loaded as a
    restart loads them (replayed group metadata)."""
    co = Coordinator(CONFIG, NOW)
    ids = []
    for g in range(groups):
        group_id = f"group-{g}"
        members = [member_id(g * per_group + i) for i in range(per_group)]
        value = GroupMetadataValue(
            protocol_type="consumer",
            generation=1,
            protocol="range",
            leader=members[0],
            current_state_timestamp=NOW,
            members=tuple(
                MemberMetadataValue(
                    m, None, "client", "/127.0.0.1", 300_000, 45_000, SUBSCRIPTION, b"assignment"
                )
                for m in members
            ),
        )
        co.replay(Record(GroupMetadataKey(group_id), value), NOW, loading=True)
        ids.extend((group_id, m) for m in members)
    return co, ids


def heartbeat_frame() -> Run:
    """A Heartbeat v4 request frame decoded and its answer encoded."""
    body = encode_request(
        RequestHeader(ApiKey.HEARTBEAT, 4, 123456, CLIENT_ID),
        HeartbeatRequest("load-test-group-0007", 42, "consumer-7-2f1c3b0a-6d3e", None),
    )[4:]
    answer = HeartbeatResponse(0, 0)
    decode, encode = frames.decode_request, frames.encode_response

    def run(n: int) -> None:
        for _ in range(n):
            header, _, _ = decode(body)
            encode(header.correlation_id, 4, answer)

    return run


RUN = 100  # heartbeats in one receive buffer


def heartbeat_run() -> Run:
    """Runs of 100 Heartbeat v4 frames answered from one receive buffer, as a connection
    shared by 100 members does, with the member table of 10,000 members. N counts
    heartbeats (a multiple of 100)."""
    co, ids = loaded(100, 100)
    buf = bytearray(
        b"".join(
            encode_request(
                RequestHeader(ApiKey.HEARTBEAT, 4, i, CLIENT_ID),
                HeartbeatRequest(group_id, 1, member, None),
            )
            for i, (group_id, member) in enumerate(ids[::100][:RUN])
        )
    )
    table, answer = co.table, frames.hot.answer_heartbeats

    def run(n: int) -> None:
        for _ in range(n // RUN):
            _, count = answer(buf, 0, 1 << 20, table, NOW + 1000, bytearray(), [])
            assert count == RUN, count

    return run


SOCKETS = 100  # parked sockets of reactor_serve


def reactor_serve() -> Run:
    """The reactor's first step for one lone Heartbeat v3 (as librdkafka sends): the
    socket's event, the read, the lookup in the member table of 10,000 members, the answer
    and its write, and the socket armed again, on the calling thread (Reactor.serve_ready;
    the twin's drain). Over 100 parked socket pairs made before counting, in turn; the
    client's write and read of the frames are counted too. N counts heartbeats."""
    import socket
    import weakref

    from fastcoord.server.native import reactor as native

    co, ids = loaded(100, 100)
    reactor = native.Reactor(1 << 20)
    # Raw descriptors (closed with the operation), so that nothing warns of a socket left
    # open when a test runs the operation a few times.
    pairs = [tuple(s.detach() for s in socket.socketpair()) for _ in range(SOCKETS)]
    frames_ = []
    for i, (ours, _) in enumerate(pairs):
        os.set_blocking(ours, False)
        reactor.add(ours, i)
        group_id, member = ids[i * 100]
        frames_.append(
            encode_request(
                RequestHeader(ApiKey.HEARTBEAT, 3, i, CLIENT_ID),
                HeartbeatRequest(group_id, 1, member, None),
            )
        )
    clients = [theirs for _, theirs in pairs]
    table = co.table
    serve = getattr(reactor, "serve_ready", None)
    step = serve if serve is not None else reactor.drain
    write, read = os.write, os.read

    def run(n: int) -> None:
        for i in range(n):
            k = i % SOCKETS
            write(clients[k], frames_[k])
            step(table, NOW + 1000, 1.0)
            assert len(read(clients[k], 64)) == 14

    def close() -> None:
        reactor.close()
        for fd in (fd for pair in pairs for fd in pair):
            os.close(fd)

    weakref.finalize(run, close)
    return run


def consumer_loaded(groups: int, per_group: int) -> tuple[Coordinator, list[tuple[str, str, int]]]:
    """A coordinator holding `groups` Stable consumer groups of `per_group` members, each
    subscribed to one topic of `per_group` partitions: loaded from their records as a
    restart loads them, then one heartbeat each (through the coordinator, the full path),
    as after a restart, which resolves the groups' subscriptions and settles their epochs.
    Returns (group id, member id, epoch) of every member."""
    co = Coordinator(CONFIG, NOW, topics=StaticTopics({"topic": per_group}))
    for g in range(groups):
        group_id = f"group-{g}"
        records = [consumer_records.group_epoch(group_id, 1, 0)]
        for i in range(per_group):
            member = ConsumerMember(
                member_id(g * per_group + i),
                client_id=CLIENT_ID,
                client_host=HOST,
                subscribed_topic_names=("topic",),
                rebalance_timeout_ms=300_000,
            )
            records.append(consumer_records.member_metadata(group_id, member))
            records.append(consumer_records.target_member(group_id, member.member_id, {}))
            records.append(
                consumer_records.current_assignment(
                    group_id, member.member_id, CurrentAssignment(1, 0)
                )
            )
        records.append(consumer_records.target_epoch(group_id, 1))
        for record in records:
            co.replay(record, NOW, loading=True)
    ids = []
    for round_ in range(3):  # the new target's epoch, then its partitions, then steady
        for g in range(groups):
            group_id = f"group-{g}"
            for m in co.consumer_groups[group_id].members.values():
                request = ConsumerGroupHeartbeatRequest(
                    group_id, m.member_id, m.member_epoch, topic_partitions=_owned(m)
                )
                result = co.handle(0, request, 1, NOW, CLIENT_ID, HOST)
                if result.append is not None:
                    co.complete_append(result.append, ErrorCode.NONE, NOW)
                if round_ == 2:
                    ids.append((group_id, m.member_id, m.member_epoch))
    return co, ids


def _owned(member: ConsumerMember) -> list[ConsumerGroupHeartbeatRequestTopicPartitions]:
    return [
        ConsumerGroupHeartbeatRequestTopicPartitions(topic, sorted(parts))
        for topic, parts in member.current.assigned.items()
    ]


def consumer_heartbeat_run() -> Run:
    """Runs of 100 ConsumerGroupHeartbeat v1 frames that change nothing, answered from one
    receive buffer by the member table (10,000 members of 100 Stable consumer groups), as
    heartbeat_run answers classic ones. N counts heartbeats (a multiple of 100)."""
    co, ids = consumer_loaded(100, 100)
    buf = bytearray(
        b"".join(
            encode_request(
                RequestHeader(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, i, CLIENT_ID),
                ConsumerGroupHeartbeatRequest(group_id, member, epoch),
            )
            for i, (group_id, member, epoch) in enumerate(ids[::100][:RUN])
        )
    )
    table, answer = co.table, frames.hot.answer_heartbeats

    def run(n: int) -> None:
        for _ in range(n // RUN):
            _, count = answer(buf, 0, 1 << 20, table, NOW + 1000, bytearray(), [], HOST)
            assert count == RUN, count

    return run


def consumer_core_heartbeat() -> Run:
    """The same heartbeats as consumer_heartbeat_run, decoded, handled by the coordinator
    (the full path, which the member table spares them) and their answers encoded: what
    each cost before the table answered them."""
    co, ids = consumer_loaded(100, 100)
    order = [ids[(i * 7919) % len(ids)] for i in range(len(ids))]
    bodies = [
        encode_request(
            RequestHeader(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, i, CLIENT_ID),
            ConsumerGroupHeartbeatRequest(group_id, member, epoch),
        )[4:]
        for i, (group_id, member, epoch) in enumerate(order)
    ]
    decode, encode = frames.decode_request, frames.encode_response

    def run(n: int) -> None:
        for i in range(n):
            header, request, _ = decode(bodies[i % len(bodies)])
            result = co.handle(i, request, 1, NOW + 1000, CLIENT_ID, HOST)
            ((_, response),) = result.responses
            encode(header.correlation_id, 1, response)

    return run


JOIN_BATCH = 100  # consumer-protocol joins whose target assignment is computed together


def consumer_join_batch() -> Run:
    """A consumer-protocol join storm batched as the server batches it: 100 new members join
    a new group (one topic of 100 partitions) by ConsumerGroupHeartbeat v1, each handled and
    its records acknowledged; then run_assignments computes the group's target assignment
    once and answers all 100. N counts joins (a multiple of 100)."""
    co = Coordinator(CONFIG, NOW, topics=StaticTopics({"topic": JOIN_BATCH}))
    co.batch_assignments()
    batches = [0]

    def settled(result: Result) -> int:
        """The answers of a Result, its records acknowledged (and theirs, in turn)."""
        answered = len(result.responses)
        if result.append is not None:
            log_frames(result.records)
            answered += settled(co.complete_append(result.append, ErrorCode.NONE, NOW))
        return answered

    def run(n: int) -> None:
        for _ in range(n // JOIN_BATCH):
            group_id = f"join-batch-{batches[0]}"
            batches[0] += 1
            answered = 0
            for i in range(JOIN_BATCH):
                request = ConsumerGroupHeartbeatRequest(
                    group_id=group_id,
                    member_id=member_id(i),
                    member_epoch=0,
                    rebalance_timeout_ms=300_000,
                    subscribed_topic_names=["topic"],
                    topic_partitions=[],
                )
                answered += settled(co.handle(i, request, 1, NOW, CLIENT_ID, HOST))
            answered += settled(co.run_assignments(NOW))
            assert answered == JOIN_BATCH, answered

    return run


def timing_wheel() -> Run:
    """A session timer scheduled and cancelled, with 100,000 timers armed over 45 s."""
    wheel = wheels.TimingWheel(NOW)
    for key in range(100_000):
        wheel.schedule(key, NOW + 1 + (key * 7919) % 45_000)
    base = 1_000_000

    def run(n: int) -> None:
        schedule, cancel = wheel.schedule, wheel.cancel
        for i in range(n):
            key = base + i
            schedule(key, NOW + 30_000)
            cancel(key)

    return run


def member_table_heartbeat() -> Run:
    """The member table's heartbeat check of one member among 10,000."""
    co, ids = loaded(100, 100)
    beat = co.table.heartbeat_id
    order = [ids[(i * 7919) % len(ids)] for i in range(len(ids))]

    def run(n: int) -> None:
        for i in range(n):
            group_id, member = order[i % len(order)]
            beat(group_id, member, 1, NOW + 1000)

    return run


def core_heartbeat() -> Run:
    """Coordinator.heartbeat, the call a Heartbeat request makes, among 100,000 members
    in 1,000 Stable groups."""
    co, ids = loaded(1_000, 100)
    order = [ids[(i * 7919) % len(ids)] for i in range(10_000)]
    beat = co.heartbeat

    def run(n: int) -> None:
        for i in range(n):
            group_id, member = order[i % len(order)]
            beat(group_id, member, 1, None, 4, NOW + 1000)

    return run


PARTITIONS = 100


def offset_commit() -> Run:
    """An OffsetCommit v8 of 100 partitions from request bytes to answer bytes: decoded,
    handled by the core, framed for the log, acknowledged, the answer encoded."""
    co = Coordinator(CONFIG, NOW)
    request = OffsetCommitRequest(
        group_id="commit-group",
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            OffsetCommitRequestTopic(
                "orders",
                [OffsetCommitRequestPartition(p, 1000 + p, -1, None) for p in range(PARTITIONS)],
            )
        ],
    )
    body = encode_request(RequestHeader(ApiKey.OFFSET_COMMIT, 8, 1, CLIENT_ID), request)[4:]
    decode, encode = frames.decode_request, frames.encode_response

    def run(n: int) -> None:
        for i in range(n):
            header, batch, _ = decode(body)
            result = co.commit_offsets([(i, batch)], NOW)
            _, count = log_frames(result.records)
            assert count == PARTITIONS, count
            assert result.append is not None
            done = co.complete_appends([result.append], ErrorCode.NONE, NOW)
            for _, answer in done.responses:
                encode(header.correlation_id, header.api_version, answer)

    return run


def partition_for() -> Run:
    """partition_for of a group id: Java's String.hashCode, abs, modulo 50."""
    group_ids = [f"consumer-group-{i:06d}" for i in range(1_000)]
    of = partition.partition_for

    def run(n: int) -> None:
        for i in range(n):
            of(group_ids[i % 1_000], 50)

    return run


GROUP = 1_000
MAX_REBALANCES = 4  # N of join_sync: its SyncGroup frames are built in the set-up


def join_sync() -> Run:
    """A rebalance of a 1,000-member group over the protocol: every member's JoinGroup
    v7 frame decoded and handled, the answers encoded (the leader's with every member), the
    leader's SyncGroup with 1,000 assignments and the followers' decoded and handled, the
    assignment appended and acknowledged, the SyncGroup answers encoded. N counts
    rebalances."""
    co, ids = loaded(1, GROUP)
    members = [m for _, m in ids]
    group_id = ids[0][0]
    protocols = [JoinGroupRequestProtocol("range", SUBSCRIPTION + b"x")]
    joins = [
        encode_request(
            RequestHeader(ApiKey.JOIN_GROUP, 7, i, CLIENT_ID),
            JoinGroupRequest(
                group_id=group_id,
                session_timeout_ms=45_000,
                rebalance_timeout_ms=300_000,
                member_id=m,
                protocol_type="consumer",
                protocols=protocols,
            ),
        )[4:]
        for i, m in enumerate(members)
    ]
    assignments = [SyncGroupRequestAssignment(m, b"partitions") for m in members]
    decode, encode = frames.decode_request, frames.encode_response
    versions: dict[int, int] = {}

    def sync_frames(generation: int) -> list[bytes]:
        return [
            encode_request(
                RequestHeader(ApiKey.SYNC_GROUP, 5, i, CLIENT_ID),
                SyncGroupRequest(
                    group_id=group_id,
                    generation_id=generation,
                    member_id=m,
                    assignments=assignments if i == 0 else [],
                ),
            )[4:]
            for i, m in enumerate(members)
        ]

    syncs = {g: sync_frames(g) for g in range(2, 2 + MAX_REBALANCES)}

    def answer(result: object) -> int:
        count = 0
        for handle, response in result.responses:  # type: ignore[attr-defined]
            encode(handle, versions[handle], response)
            count += 1
        return count

    def run(n: int) -> None:
        assert n <= len(syncs), f"at most {len(syncs)} rebalances"
        for r in range(n):
            answered = 0
            for frame in joins:
                header, request, _ = decode(frame)
                versions[header.correlation_id] = header.api_version
                answered += answer(co.handle(header.correlation_id, request, 7, NOW))
            for frame in syncs[2 + r]:
                header, request, _ = decode(frame)
                versions[header.correlation_id] = header.api_version
                result = co.handle(header.correlation_id, request, 5, NOW)
                answered += answer(result)
                if result.append is not None:
                    log_frames(result.records)
                    answered += answer(co.complete_append(result.append, ErrorCode.NONE, NOW))
            assert answered == 2 * GROUP, answered

    return run


OPS: dict[str, Callable[[], Run]] = {
    "heartbeat_frame": heartbeat_frame,
    "heartbeat_run": heartbeat_run,
    "consumer_heartbeat_run": consumer_heartbeat_run,
    "consumer_core_heartbeat": consumer_core_heartbeat,
    "consumer_join_batch": consumer_join_batch,
    "timing_wheel": timing_wheel,
    "member_table_heartbeat": member_table_heartbeat,
    "reactor_serve": reactor_serve,
    "core_heartbeat": core_heartbeat,
    "offset_commit": offset_commit,
    "partition_for": partition_for,
    "join_sync": join_sync,
}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in OPS:
        print(f"usage: gate_ops.py {{{','.join(OPS)}}} N", file=sys.stderr)
        return 2
    run = OPS[argv[0]]()
    marks = os.environ.get(MARKS_ENV)
    if not marks:
        run(int(argv[1]))
        return 0
    # callgrind started with --instr-atstart=no: start-up and set-up run uninstrumented
    # (five times faster), and only the operations are counted.
    lib = ctypes.CDLL(marks)
    # The cyclic collector runs during the operations and walks every live container, so
    # a tree that imports more would count more for the same operation. Frozen, it walks
    # only what the operations themselves leave.
    gc.collect()
    gc.freeze()
    lib.gate_start()
    run(int(argv[1]))
    lib.gate_stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
