"""fastcoord.testing and fastcoord.client.blocking: servers start, answer and are gone after,
a failed start says why, the pytest plugin serves a user's suite, and the benchmarks' peers
(the librdkafka mock cluster, the reference responder) start, answer and stop."""

from __future__ import annotations

import os
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
