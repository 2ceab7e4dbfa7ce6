"""`fastcoord loadtest`, the real command, against the real `fastcoord serve` and the
librdkafka mock cluster: what its summary and Parquet say is checked against what the
server saw (DescribeGroups while it runs, the event log after)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow
import pyarrow.dataset as ds
import pytest

from fastcoord.protocol.messages import DescribeGroupsRequest
from fastcoord.server import event_log
from fastcoord.testing import ServerProcess, child_env, fastcoord_server, mock_cluster

# Short timeouts so that expirations and restarts happen within a test's seconds.
SERVER_ARGS = (
    "--group-initial-rebalance-delay-ms",
    "0",
    "--group-min-session-timeout-ms",
    "500",
    "--event-log-flush-ms",
    "100",
    "--num-partitions",
    "6",
)
FAST = (
    "--heartbeat-interval-ms",
    "200",
    "--session-timeout-ms",
    "2000",
    "--rebalance-timeout-ms",
    "5000",
    "--commit-interval-ms",
    "300",
    "--request-timeout-ms",
    "5000",
)


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with fastcoord_server(tmp_path, *SERVER_ARGS) as running:
        yield running


def loadtest_command(bootstrap: str, out: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "fastcoord",
        "loadtest",
        "--bootstrap",
        bootstrap,
        "--out",
        str(out),
        *args,
    ]


def loadtest(
    bootstrap: str, out: Path, *args: str, timeout: float = 90, **kw: Any
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        loadtest_command(bootstrap, out, *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(),
        **kw,
    )


def summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())  # type: ignore[no-any-return]


def table(out: Path, name: str) -> list[dict[str, Any]]:
    return ds.dataset(out / name, format="parquet").to_table().to_pylist()  # type: ignore[no-any-return]


def server_events(server: ServerProcess) -> list[dict[str, Any]]:
    """The server's events once its log has caught up with the run: the log is flushed every
    100 ms, and the members' last leaves come moments before the run's end, so the first
    rows to appear are not all of them (on a busy machine the last flush came after the
    read). Caught up: two reads 300 ms apart, three flushes, find the same rows."""
    assert server.data_dir is not None
    deadline = time.monotonic() + 10
    seen = -1
    while True:
        rows = event_log.read(server.data_dir / "events").to_pylist()
        if (rows and len(rows) == seen) or time.monotonic() > deadline:
            return rows  # type: ignore[no-any-return]
        seen = len(rows)
        time.sleep(0.3)


def scenario(
    server: ServerProcess, out: Path, *args: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A loadtest with FAST timings that must pass: its summary, and the server's events."""
    result = loadtest(server.bootstrap, out, *args, *FAST)
    assert result.returncode == 0, result.stdout + result.stderr
    return summary(out), server_events(server)


def describe(server: ServerProcess, groups: list[str]) -> dict[str, tuple[str, int]]:
    with server.connect() as c:
        answer: Any = c.request(DescribeGroupsRequest(groups=groups), 5)
    return {g.group_id: (g.group_state, len(g.members)) for g in answer.groups}


def test_steady_agrees_with_the_servers_view(server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "run"
    groups = ["steady-0000", "steady-0001", "steady-0002"]
    command = loadtest_command(
        server.bootstrap,
        out,
        "--members",
        "30",
        "--groups",
        "3",
        "--group-prefix",
        "steady",
        "--duration",
        "6",
        *FAST,
    )
    with subprocess.Popen(
        command, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as run:
        seen: dict[str, tuple[str, int]] = {}
        deadline = time.monotonic() + 15
        while seen != dict.fromkeys(groups, ("Stable", 10)) and time.monotonic() < deadline:
            time.sleep(0.2)
            seen = describe(server, groups)
        output, _ = run.communicate(timeout=60)
    assert seen == dict.fromkeys(groups, ("Stable", 10)), output
    assert run.returncode == 0, output
    s = summary(out)
    assert s["complete"] and s["outcome"] == "completed"
    assert s["members"]["peak_stable"] == 30
    heartbeats = s["apis"]["Heartbeat"]
    assert heartbeats["count"] > 30 * 3 and heartbeats["errors"] == {}
    # With no rebalance delay, a group whose members' joins straggle in (a slow machine's
    # reads cut the generator's burst) forms in two rounds, and the heartbeats of the first
    # round's members are told to rejoin: the protocol's signal, while joining only. Once
    # every member is stable nothing rebalances.
    phases = s["phases"]
    joining = phases["joining"]["apis"].get("Heartbeat", {}).get("signals", {})
    assert set(heartbeats["signals"]) <= {"REBALANCE_IN_PROGRESS"}
    assert heartbeats["signals"] == joining
    steady = phases["steady"]["apis"]["Heartbeat"]
    assert steady["count"] > 0 and steady["errors"] == steady["signals"] == {}
    assert s["unexpected_expirations"] == 0
    # A join's MEMBER_ID_REQUIRED is the protocol's signal, no error.
    joins = s["apis"]["JoinGroup"]
    assert joins["errors"] == {} and joins["signals"]["MEMBER_ID_REQUIRED"] == 30
    assert s["requests"]["errors"] == 0 and s["requests"]["signals"] >= 30
    # Every member stable well before the end: the steady phase lies between the joins and
    # the leaves, and the figures lead with it.
    assert s["steady_by"] == "members"
    assert phases["joining"]["last_s"] + 1 == phases["steady"]["first_s"]
    assert phases["steady"]["last_s"] == 6 and phases["leaving"]["first_s"] == 7
    assert "JoinGroup" not in phases["steady"]["apis"]
    assert phases["leaving"]["apis"]["LeaveGroup"]["count"] == 30
    events = server_events(server)
    # Every generation a member saw complete is one the server completed, and the commits
    # the members counted are the offsets the server stored.
    synced = {(e["group_id"], e["generation"]) for e in events if e["kind"] == "sync_completed"}
    seen_generations = {(r["group"], r["generation"]) for r in table(out, "rebalances")}
    assert seen_generations and seen_generations <= synced
    stored = sum(e["members"] for e in events if e["kind"] == "offsets_committed")
    assert s["commits"]["offsets"] == stored > 0
    joined = Counter(e["group_id"] for e in events if e["kind"] == "member_joined")
    left = Counter(e["group_id"] for e in events if e["kind"] == "member_left")
    assert joined == left == dict.fromkeys(groups, 10)  # and every member left at the end
    assert "Heartbeat" in output and "p99" in output


def test_join_storm_times_each_group(server: ServerProcess, tmp_path: Path) -> None:
    s, events = scenario(
        server,
        tmp_path / "run",
        "--scenario",
        "join-storm",
        "--members",
        "60",
        "--groups",
        "2",
        "--group-prefix",
        "storm",
        # Room for the storm to settle while the other suite saturates both cores; the
        # bounds below stay those of a 5 s storm.
        "--duration",
        "10",
        "--members-per-connection",
        "5",
    )
    storm = s["join_storm"]
    assert storm["groups"] == 2
    # The server's own rebalance durations (from PreparingRebalance to Stable) fit within
    # what the members measured from their last JoinGroup to their last SyncGroup answer.
    rebalances = [e for e in events if e["kind"] == "sync_completed"]
    assert {e["group_id"] for e in rebalances} == {"storm-0000", "storm-0001"}
    assert 0 < storm["max_ms"] < 5_000
    # Each group had a JoinGroup answered with a generation before its last SyncGroup answer.
    assert 0 < storm["after_delay"]["max_ms"] < 5_000


def test_churn_expires_the_crashed_and_nobody_else(server: ServerProcess, tmp_path: Path) -> None:
    s, events = scenario(
        server,
        tmp_path / "run",
        "--scenario",
        "churn",
        "--members",
        "20",
        "--groups",
        "2",
        "--group-prefix",
        "churn",
        "--churn-rate",
        "2",
        "--duration",
        "8",
    )
    expired = [e for e in events if e["kind"] == "member_expired"]
    assert expired, "crashed members were not expired by the server"
    assert s["unexpected_expirations"] == 0
    # Members saw rebalances after the first joins: the crashed members' departures.
    assert s["rebalances"]["count"] > 20


def test_static_restarts_cause_no_rebalance(server: ServerProcess, tmp_path: Path) -> None:
    s, events = scenario(
        server,
        tmp_path / "run",
        "--scenario",
        "static",
        "--members",
        "12",
        "--groups",
        "2",
        "--group-prefix",
        "static",
        "--churn-rate",
        "2",
        "--restart-pause-ms",
        "300",
        "--duration",
        "7",
    )
    assert s["rebalances"]["unexpected"] == 0
    # The restarts happened (a static member's return is a join under a new member id)...
    joins = Counter(e["group_id"] for e in events if e["kind"] == "member_joined")
    assert sum(joins.values()) > 12 + 4
    # ...and from the moment each group was Stable with all its 6 members until they left
    # at the end, the server started no rebalance: it kept every static member's place.
    for group in ("static-0000", "static-0001"):
        mine = [e for e in events if e["group_id"] == group]
        kinds = [e["kind"] for e in mine]
        formed = next(
            i for i, e in enumerate(mine) if e["kind"] == "sync_completed" and e["members"] == 6
        )
        ended = kinds.index("member_left")
        assert formed < ended
        assert "rebalance_started" not in kinds[formed:ended], mine[formed:ended]
        assert [e for e in mine if e["kind"] == "member_expired"] == []


def test_rolling_restart_waves_leave_and_rejoin(server: ServerProcess, tmp_path: Path) -> None:
    s, events = scenario(
        server,
        tmp_path / "run",
        "--scenario",
        "rolling-restart",
        "--members",
        "12",
        "--groups",
        "2",
        "--group-prefix",
        "rolling",
        "--wave-size",
        "3",
        "--wave-interval-ms",
        "1000",
        "--duration",
        "7",
    )
    left = [e for e in events if e["kind"] == "member_left"]
    # Waves of 3 every second after the group settled, then everyone leaves at the end.
    assert len(left) >= 12 + 3 * 2
    assert s["apis"]["LeaveGroup"]["count"] == len(left)
    assert s["rebalances"]["count"] >= 12 + 3 * 2


def test_steady_against_the_librdkafka_mock_cluster(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # One member per group: the mock answers a follower's SyncGroup with a null assignment,
    # which no Kafka broker sends (docs/loadtest.md).
    with mock_cluster() as mock:
        result = loadtest(
            mock.bootstrap,
            out,
            *("--members", "6", "--groups", "6", "--duration", "8"),
            *("--heartbeat-interval-ms", "300", "--commit-interval-ms", "500"),
            *("--session-timeout-ms", "6000"),
        )
    assert result.returncode == 0, result.stdout + result.stderr
    s = summary(out)
    assert s["config"]["server_is_fastcoord"] is False
    assert s["members"]["peak_stable"] == 6
    heartbeats = s["apis"]["Heartbeat"]
    assert heartbeats["count"] > 6 and heartbeats["errors"] == heartbeats["signals"] == {}
    assert s["commits"]["offsets"] > 0


def test_shared_connections_are_refused_against_other_servers(tmp_path: Path) -> None:
    with mock_cluster() as mock:
        result = loadtest(mock.bootstrap, tmp_path / "run", "--members-per-connection", "4")
    assert result.returncode == 2
    assert "Kafka mutes a connection while a JoinGroup" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_bootstrap_is_a_clear_refusal(tmp_path: Path) -> None:
    result = loadtest("127.0.0.1:9", tmp_path / "run", "--duration", "2")
    assert result.returncode == 2
    assert "cannot reach the bootstrap 127.0.0.1:9 (connection refused)" in result.stderr
    assert "Traceback" not in result.stderr


def test_more_members_than_files_is_refused_with_the_way_out(
    server: ServerProcess, tmp_path: Path
) -> None:
    def few_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    result = loadtest(server.bootstrap, tmp_path / "run", "--members", "1000", preexec_fn=few_files)
    assert result.returncode == 2
    assert "use --processes 6" in result.stderr, result.stderr


def test_a_server_that_dies_mid_run_ends_it_with_results_kept(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with fastcoord_server(tmp_path, *SERVER_ARGS) as server:
        run = subprocess.Popen(
            loadtest_command(server.bootstrap, out, "--members", "10", "--duration", "60", *FAST),
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_for_parts(out)
            server.kill()
            output, _ = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    assert run.returncode == 3, output
    s = summary(out)
    assert s["complete"] is False and s["outcome"] == "cut short", s
    assert s["apis"]["Heartbeat"]["count"] > 0
    assert "Traceback" not in output


def test_a_killed_run_leaves_readable_parquet(server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = subprocess.Popen(
        loadtest_command(server.bootstrap, out, "--members", "10", "--duration", "60", *FAST),
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # Killed once it has recorded joins and heartbeats (how long that takes depends on
        # the machine), in the middle of writing more.
        wait_for_apis(out, {"Heartbeat", "JoinGroup"})
        time.sleep(0.3)
    finally:
        os.killpg(run.pid, signal.SIGKILL)  # the parent and its workers, mid-write perhaps
        run.wait()
    latency = table(out, "latency")
    assert {r["api"] for r in latency} >= {"Heartbeat", "JoinGroup"}
    assert table(out, "states")
    assert summary(out)["complete"] is False


def wait_for_apis(out: Path, apis: set[str]) -> None:
    """Until the run's latency parts hold answers of every one of `apis`."""
    deadline = time.monotonic() + 30
    while True:
        try:
            if {r["api"] for r in table(out, "latency")} >= apis:
                return
        except (OSError, pyarrow.ArrowInvalid):
            pass  # no part yet, or one being written
        assert time.monotonic() < deadline, f"no answers of {apis} recorded"
        time.sleep(0.1)


def wait_for_parts(out: Path) -> None:
    deadline = time.monotonic() + 30
    while not list((out / "latency").glob("*.parquet")) if (out / "latency").exists() else True:
        assert time.monotonic() < deadline, "no results were written"
        time.sleep(0.1)
