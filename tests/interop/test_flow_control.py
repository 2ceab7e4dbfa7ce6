"""Slow and vanished clients against the real server: answers are never cut, a slow reader
gets everything in order, a client that never reads costs the server its bound and no
more, and one that leaves costs nothing."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fastcoord.client.stalling import every_topic_metadata, new_member_join, pipeline, read_all
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.messages import ApiVersionsRequest
from fastcoord.testing import ServerProcess, fastcoord_server
from fastcoord.testing_cpu import rss_bytes, sched_seconds

# 200 topics of 50 partitions: an every-topic Metadata answer is about 260 KB.
TOPICS = [arg for i in range(200) for arg in ("--topic", f"t{i}:50")]
# 300 big answers, then a JoinGroup that waits out the initial rebalance delay.
REQUESTS = [*every_topic_metadata(300), new_member_join("g")]


def metadata_size(server: ServerProcess) -> int:
    """The size of an every-topic Metadata v1 answer (after its size prefix)."""
    with server.connect() as c:
        c.send(every_topic_metadata(1)[0][0], 1)
        return len(c.read_frame())


def log_lines(server: ServerProcess, text: str) -> list[str]:
    return [line for line in server.log().splitlines() if text in line]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """connections.max.idle.ms 2000; a first JoinGroup waits 5 s."""
    with fastcoord_server(
        tmp_path,
        "--connections-max-idle-ms",
        "2000",
        "--group-initial-rebalance-delay-ms",
        "5000",
        *TOPICS,
    ) as running:
        yield running


def test_a_client_that_stalls_past_the_idle_time_gets_whole_frames_then_a_close(
    server: ServerProcess,
) -> None:
    """300 answers of 260 KB and a JoinGroup wait for a client that reads nothing for four
    times connections.max.idle.ms: the server closes the connection, and what the client
    then reads is whole answers in order (a cut one only as the last bytes)."""
    sock = socket.create_connection((server.host, server.port))
    port = sock.getsockname()[1]
    closing = f"closing connection from 127.0.0.1:{port}"
    with sock:
        sock.sendall(pipeline(REQUESTS))
        wait_for(lambda: log_lines(server, closing), 30)  # reading nothing meanwhile
        got = read_all(sock, time.monotonic() + 30)
    assert got.closed
    got.check()
    assert {size for _, size in got.frames} <= {metadata_size(server)}
    (line,) = log_lines(server, closing)
    assert "it has taken no answer for 2000 ms" in line and "bytes waiting" in line, line


def test_a_slow_client_within_the_idle_time_gets_every_answer_whole_and_in_order(
    server: ServerProcess,
) -> None:
    """It stalls for less than connections.max.idle.ms, then reads slowly: 78 MB at 1 MiB
    per 50 ms takes twice the idle time, and the connection is not idle while its answers
    move. Then it waits for its JoinGroup, which waits out the initial delay."""
    sock = socket.create_connection((server.host, server.port))
    with sock:
        sock.sendall(pipeline(REQUESTS))
        time.sleep(1.0)  # half the idle time: the other half is a busy machine's to take
        got = read_all(sock, time.monotonic() + 60, want=len(REQUESTS), pace=(1 << 20, 0.05))
    assert not got.closed and len(got.frames) == len(REQUESTS), got
    got.check()
    sizes = {size for _, size in got.frames[:-1]}
    assert len(sizes) == 1 and sizes.pop() > 250_000  # every Metadata answer, whole
    assert not log_lines(server, "closing")


def test_a_client_that_never_reads_costs_its_bound_and_nothing_once_gone(
    tmp_path: Path,
) -> None:
    """4,000 every-topic Metadata requests (a GB of answers) from a client that never
    reads: the server stops at connection.queued.max.response.bytes, other clients are
    answered meanwhile, and once the client disconnects the server is idle again."""
    bound = 16 << 20
    with fastcoord_server(
        tmp_path, "--connection-queued-max-response-bytes", str(bound), *TOPICS
    ) as server:
        other = server.connect()
        other.request(every_topic_metadata(1)[0][0], 1)  # the answer is built and kept
        before = rss_bytes(server.pid)
        hog = socket.create_connection((server.host, server.port))
        hog.sendall(pipeline(every_topic_metadata(4000)))
        port = hog.getsockname()[1]
        wait_for(lambda: log_lines(server, f"client at 127.0.0.1:{port} has not read"), 60)
        for _ in range(10):  # the server carries on for others
            assert other.request(ApiVersionsRequest(), 0).error_code == 0
            time.sleep(0.1)
        grown = rss_bytes(server.pid) - before
        assert grown < bound + (16 << 20), (
            f"RSS grew {grown >> 20} MiB for a {bound >> 20} MiB bound"
        )
        hog.close()  # with answers unread: a reset
        wait_for(lambda: log_lines(server, f"connection from 127.0.0.1:{port} ended by"), 10)
        # Idle again once what the hog left is dropped, however long a busy machine takes
        # to get there; a server that kept working for it never gets there.
        deadline = time.monotonic() + 30
        while (busy := cpu_share(server.pid, 1.0)) >= 0.1:
            assert time.monotonic() < deadline, (
                f"the server still works for a client that left: {busy:.0%} of a core"
            )
        other.send(ApiVersionsRequest(), 0)
        assert other.receive(ApiKey.API_VERSIONS, 0).error_code == 0
        other.close()


def cpu_share(pid: int, seconds: float) -> float:
    first = sched_seconds(pid)
    time.sleep(seconds)
    last = sched_seconds(pid)
    assert first is not None and last is not None
    return (last[0] - first[0]) / seconds


def wait_for(condition: Callable[[], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
