"""fastcoord.testing and fastcoord.client.blocking: servers start, answer and are gone after,
a failed start says why, the pytest plugin serves a user's suite, and the benchmarks' peers
(the librdkafka mock cluster, the reference responder) start, answer and stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import fastcoord
from fastcoord import testing
from fastcoord.client.blocking import PeerError, join_group
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.framing import encode_request
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    HeartbeatRequest,
    MetadataRequest,
    MetadataRequestTopic,
)
from fastcoord.testing import ServerProcess


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_server_starts_answers_and_is_gone_after(tmp_path: Path) -> None:
    with testing.fastcoord_server(tmp_path) as server:
        assert server.data_dir == tmp_path / "data" and server.data_dir.is_dir()
        assert server.log_path == tmp_path / "server.log"
        assert "loaded 0 groups" in server.log()  # waited for the load
        assert server.bootstrap == f"127.0.0.1:{server.port}" and server.port != 0
        assert server in testing.running()
        with server.connect() as c:
            assert {ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT} <= set(c.api_versions())
        pid = server.pid
    assert server.process.returncode == 0  # SIGTERM: a clean exit
    assert gone(pid)
    assert server not in testing.running()
    assert server.data_dir.is_dir()  # the caller's directory is left as it was


def test_a_server_that_cannot_start_raises_with_its_output(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="exited early") as raised,
        testing.fastcoord_server(tmp_path, "--num-partitions", "0"),
    ):
        pass
    assert "num.partitions: expected `int` >= 1" in str(raised.value)
    assert testing.running() == []
    refused = testing.refused_start(tmp_path, "--num-partitions", "0")
    assert refused.returncode == 2
    assert "num.partitions: expected `int` >= 1" in refused.stderr


def test_extra_args_win_and_a_directory_made_for_the_server_goes_with_it() -> None:
    server = testing.start_fastcoord(
        None, "--num-partitions", "2", extra_args=("--num-partitions", "3")
    )
    try:
        assert server.temporary is not None and server.log_path.parent == server.temporary
        with server.connect() as c:
            metadata = c.request(
                MetadataRequest(
                    topics=[MetadataRequestTopic(name="made")], allow_auto_topic_creation=True
                ),
                4,
            )
        [topic] = metadata.topics
        assert len(topic.partitions) == 3
        directory = server.temporary
    finally:
        server.stop()
    assert not directory.exists()
    assert gone(server.pid)


def test_a_server_is_pinned_to_its_core(tmp_path: Path) -> None:
    core = max(os.sched_getaffinity(0))
    with testing.fastcoord_server(tmp_path, core=core, wait_loaded=False) as server:
        assert os.sched_getaffinity(server.pid) == {core}


STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("listening on 127.0.0.1:1", flush=True)
time.sleep(60)
"""


def test_stop_kills_a_process_that_ignores_sigterm(tmp_path: Path) -> None:
    server = testing.start("stubborn", [sys.executable, "-c", STUBBORN], tmp_path)
    assert (server.host, server.port) == ("127.0.0.1", 1)
    server.stop(timeout=0.5)
    assert server.process.returncode == -9
    assert gone(server.pid)


def test_the_child_runs_the_callers_fastcoord(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    printed = subprocess.run(
        [sys.executable, "-c", "import fastcoord; print(fastcoord.__file__)"],
        env=testing.child_env(),
        cwd=tmp_path,  # not the caller's directory
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert printed.stdout.strip() == fastcoord.__file__


def test_the_fixture_serves_from_tmp_path(fastcoord_serve: ServerProcess, tmp_path: Path) -> None:
    assert fastcoord_serve.data_dir == tmp_path / "data"
    assert "loaded 0 groups" in fastcoord_serve.log()
    with fastcoord_serve.connect() as c:
        assert ApiKey.OFFSET_COMMIT in c.api_versions()


USERS_TEST = """
import os
from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

def test_my_offsets_are_kept(fastcoord_serve):
    with open(os.environ["PID_FILE"], "w") as f:
        f.write(str(fastcoord_serve.pid))
    consumer = KafkaConsumer(
        bootstrap_servers=fastcoord_serve.bootstrap, group_id="mine", enable_auto_commit=False
    )
    try:
        orders = TopicPartition("orders", 0)
        consumer.commit({orders: OffsetAndMetadata(42, "", -1)})
        assert consumer.committed(orders) == 42
    finally:
        consumer.close()
"""


def test_a_users_suite_loads_the_plugin(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pid_file = pytester.path / "pid"
    monkeypatch.setenv("PID_FILE", str(pid_file))
    monkeypatch.setenv("PYTHONPATH", testing.child_env()["PYTHONPATH"])
    pytester.makeconftest('pytest_plugins = ["fastcoord.testing"]')
    pytester.makepyfile(test_mine=USERS_TEST)
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=1)
    assert gone(int(pid_file.read_text()))


def test_the_mock_cluster_starts_answers_and_stops() -> None:
    with testing.mock_cluster() as mock:
        assert "mock cluster" in mock.log()
        with mock.connect() as c:
            assert {ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT} <= set(c.api_versions())
        directory = mock.temporary
        assert directory is not None and directory.is_dir()
    assert mock.process.returncode == 0
    assert gone(mock.pid)
    assert not directory.exists()


def test_the_responder_starts_answers_and_stops() -> None:
    with testing.responder() as responder, responder.connect() as c:
        # Its one answer, Heartbeat v3 NONE, reads as ApiVersions v0 with no APIs; the
        # correlation ids must match, request() checks.
        assert c.api_versions() == {}
        assert c.request(ApiVersionsRequest(), 0).error_code == 0
        c.send(HeartbeatRequest("g", 1, "m", None), 3)
        assert c.receive(ApiKey.HEARTBEAT, 3).error_code == 0
    assert gone(responder.pid)


def test_a_host_that_is_not_known_is_refused() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "fastcoord.testing", "broker"],
        env=testing.child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "usage: python -m fastcoord.testing mock|responder" in run.stderr


# -- fastcoord.client.blocking --------------------------------------------------------------


def test_request_checks_the_correlation_id(fastcoord_serve: ServerProcess) -> None:
    with fastcoord_serve.connect() as c:
        c.sendall(
            encode_request(RequestHeader(ApiKey.API_VERSIONS, 0, 999, "x"), ApiVersionsRequest())
        )
        with pytest.raises(PeerError, match="correlation id 999, expected 1"):
            c.request(ApiVersionsRequest(), 0)


def test_versions_are_negotiated(fastcoord_serve: ServerProcess) -> None:
    with fastcoord_serve.connect() as c:
        assert c.version(ApiKey.JOIN_GROUP, 5) == 5  # nothing heard yet: as wanted
        low, high = c.api_versions()[ApiKey.JOIN_GROUP]
        assert c.version(ApiKey.JOIN_GROUP, 99) == high
        with pytest.raises(PeerError, match="serves"):
            c.version(ApiKey.JOIN_GROUP, low - 1)


def test_join_group_joins_and_syncs_as_leader(fastcoord_serve: ServerProcess) -> None:
    c, member = join_group(fastcoord_serve.host, fastcoord_serve.port, "g")
    with c:
        assert (member.group_id, member.generation_id) == ("g", 1)
        assert member.join_attempts == 2  # MEMBER_ID_REQUIRED, then with the id given
        assert (member.host, member.port) == (fastcoord_serve.host, fastcoord_serve.port)
        c.send(HeartbeatRequest("g", 1, member.member_id, None), 3)
        assert c.receive(ApiKey.HEARTBEAT, 3).error_code == 0


# -- the test server is held to its log ----------------------------------------------------
#
# A server that meets a bug in one connection logs it and carries on, and a reactor that
# fails falls back to the slower path: clients notice neither. So the test server fails the
# test that used it. These prove it does, on a real server made to meet such a bug: a
# sitecustomize module (first on the child's PYTHONPATH) breaks it as the test asks.

SABOTEUR = """
import os

what = os.environ.get("SABOTAGE")
if what == "connection":
    from fastcoord.server import connection

    async def run(self):
        raise RuntimeError("sabotaged connection handler")

    connection.Connection.run = run
elif what == "reactor":
    from fastcoord.server import parking

    compiled = parking.native

    class Reactor:
        def __init__(self, *args):
            self._reactor = compiled.Reactor(*args)

        def __getattr__(self, name):
            return getattr(self._reactor, name)

        def drain(self, *args):
            raise RuntimeError("sabotaged reactor")

    class Native:
        pass

    Native.Reactor = Reactor
    parking.native = Native
"""

SABOTAGED_TEST = """
import os
from fastcoord.client.blocking import join_group
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.messages import HeartbeatRequest
from fastcoord.testing import fastcoord_server

EXPECT = [os.environ["EXPECT"]] if os.environ.get("EXPECT") else []


def use(server):
    # What any client does; it passes whether or not the server met a bug on the way.
    try:
        with server.connect(timeout=5) as c:
            c.api_versions()
    except Exception:
        return  # the connection was closed on it
    connection, member = join_group(server.host, server.port, "g", session_timeout_ms=6000)
    with connection:
        for _ in range(20):
            request = HeartbeatRequest("g", member.generation_id, member.member_id, None)
            assert connection.request(request, 4).error_code == 0


def test_through_the_fixture(fastcoord_serve):
    fastcoord_serve.expect(*EXPECT)
    use(fastcoord_serve)


def test_in_a_with_block(tmp_path):
    with fastcoord_server(tmp_path, expect=EXPECT) as server:
        use(server)
"""


def run_sabotaged(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, sabotage: str, expect: str = ""
) -> pytest.RunResult:
    saboteur = pytester.mkdir("saboteur")
    (saboteur / "sitecustomize.py").write_text(SABOTEUR)
    path = os.pathsep.join([str(saboteur), testing.child_env()["PYTHONPATH"]])
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("SABOTAGE", sabotage)
    monkeypatch.setenv("EXPECT", expect)
    pytester.makeconftest('pytest_plugins = ["fastcoord.testing"]')
    pytester.makepyfile(test_sabotaged=SABOTAGED_TEST)
    return pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", timeout=120)


def test_a_server_that_met_no_bug_passes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_sabotaged(pytester, monkeypatch, "").assert_outcomes(passed=2)


def test_a_connection_handler_that_raised_fails_the_test_that_used_the_server(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run_sabotaged(pytester, monkeypatch, "connection")
    # The fixture's test fails at its teardown, the with block's in its body.
    result.assert_outcomes(passed=1, failed=1, errors=1)
    output = result.stdout.str()
    assert "ServerFailed" in output and "RuntimeError: sabotaged connection handler" in output
    assert "failed; closing it" in output  # the log line that said so is in the failure


def test_a_reactor_that_fell_back_fails_the_test_that_used_the_server(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run_sabotaged(pytester, monkeypatch, "reactor")
    result.assert_outcomes(passed=1, failed=1, errors=1)
    output = result.stdout.str()
    assert "fall back to Trio" in output and "RuntimeError: sabotaged reactor" in output


def test_a_line_the_test_expects_does_not_fail_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # log.exception's record names the failure; its traceback comes with it.
    result = run_sabotaged(pytester, monkeypatch, "connection", r"connection from .* failed")
    result.assert_outcomes(passed=2)


def test_an_unclean_exit_fails_the_test_and_a_kill_it_asked_for_does_not() -> None:
    with testing.fastcoord_server() as server:
        server.kill()  # a crash the test plays
    assert server.process.returncode == -signal.SIGKILL
    with (
        pytest.raises(testing.ServerFailed, match="exited with signal SIGKILL"),
        testing.fastcoord_server() as server,
    ):
        os.kill(server.pid, signal.SIGKILL)  # a crash nobody asked for
        server.process.wait(10)


def test_unexpected_lines_come_with_their_traceback() -> None:
    log = "\n".join(
        [
            "2026-01-01 00:00:00,000 INFO fastcoord.server: listening on 127.0.0.1:1",
            "2026-01-01 00:00:00,000 WARNING fastcoord.server: closing connection from x: y",
            "2026-01-01 00:00:00,000 ERROR fastcoord.server: connection from x failed",
            "Traceback (most recent call last):",
            '  File "a.py", line 1, in f',
            "ValueError: boom",
            "node 1 | 2026-01-01 00:00:00,000 CRITICAL fastcoord.storage: disk gone",
            "node 1 | Traceback (most recent call last):",
            'node 1 |   File "b.py", line 2, in g',
            "node 1 | OSError: gone",
            "2026-01-01 00:00:00,000 WARNING fastcoord.server: a connection cannot park on "
            "the reactor (x): it falls back to Trio",
        ]
    )
    lines = log.splitlines()
    assert testing.unexpected_lines(log) == lines[2:]
    assert testing.unexpected_lines(log, [r"connection from \S+ failed"]) == lines[6:]
    assert testing.unexpected_lines(log, ["OSError", "disk gone", "failed", "park"]) == []
    assert testing.unexpected_lines(log, ["OSError"]) == lines[2:7] + lines[10:]
