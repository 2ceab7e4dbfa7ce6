"""`fastcoord loadtest --group-protocol consumer`, the real command, against the real
`fastcoord serve`: every member joins, the groups' assignments (ConsumerGroupDescribe while
it runs) are complete and disjoint, heartbeats see no error, commits are stored, and what
the summary says agrees with the server's event log."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from fastcoord.client.admin import AdminClient
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse
from fastcoord.testing import ServerProcess, child_env, fastcoord_server
from tests.interop.test_admin_port import scrape, value
from tests.interop.test_loadtest import (
    SERVER_ARGS,
    loadtest_command,
    scenario,
    server_events,
    summary,
    table,
)

PARTITIONS = 6  # SERVER_ARGS' --num-partitions: the loadtest topic's
# The coordinator sets these members' sessions and heartbeats: short ones for a short run.
CONSUMER_GROUPS = (
    "--group-consumer-session-timeout-ms",
    "6000",
    "--group-consumer-min-session-timeout-ms",
    "6000",
    "--group-consumer-heartbeat-interval-ms",
    "500",
    "--group-consumer-min-heartbeat-interval-ms",
    "500",
)
GROUPS = ["kip848-0000", "kip848-0001", "kip848-0002"]
MEMBERS = 30


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with fastcoord_server(tmp_path, *SERVER_ARGS, *CONSUMER_GROUPS, "--admin-port", "0") as running:
        yield running


def assignments(server: ServerProcess) -> dict[str, tuple[str, list[list[int]]]]:
    """Each group's state and its members' partitions of the loadtest topic, as the
    coordinator describes them."""
    with server.connect() as c:
        answer = c.request(ConsumerGroupDescribeRequest(group_ids=GROUPS), 1)
    assert isinstance(answer, ConsumerGroupDescribeResponse)
    out = {}
    for g in answer.groups:
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            continue  # not formed yet
        assert g.error_code == 0, g
        owned = [
            sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions)
            for m in g.members
        ]
        out[g.group_id] = (g.group_state, owned)
    return out


def settled(seen: dict[str, tuple[str, list[list[int]]]]) -> bool:
    """Every group Stable with its 10 members, each partition owned by exactly one."""
    for group in GROUPS:
        state, owned = seen.get(group, ("", []))
        flat = [p for partitions in owned for p in partitions]
        if state != "Stable" or len(owned) != MEMBERS // len(GROUPS):
            return False
        if sorted(flat) != list(range(PARTITIONS)):
            return False
    return True


def test_steady_consumer_protocol_members_join_share_out_the_partitions_and_commit(
    server: ServerProcess, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    command = loadtest_command(
        server.bootstrap,
        out,
        *("--group-protocol", "consumer"),
        *("--members", str(MEMBERS), "--groups", str(len(GROUPS)), "--group-prefix", "kip848"),
        *("--duration", "10", "--commit-interval-ms", "500", "--request-timeout-ms", "5000"),
        *("--members-per-connection", "5"),
    )
    with subprocess.Popen(
        command, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as run:
        seen: dict[str, tuple[str, list[list[int]]]] = {}
        # Until the groups settle or the run ends (its members leave at the end): however
        # long a loaded machine takes to start the run.
        while not settled(seen) and run.poll() is None:
            time.sleep(0.2)
            seen = assignments(server)
        output, _ = run.communicate(timeout=60)
    assert settled(seen), (seen, output)
    assert run.returncode == 0, output

    s = summary(out)
    assert s["complete"] and s["outcome"] == "completed"
    assert s["config"]["group_protocol"] == "consumer"
    assert s["members"]["peak_stable"] == MEMBERS
    assert s["members"]["final"]["stopped"] == MEMBERS  # every member left at the end
    heartbeats = s["apis"]["ConsumerGroupHeartbeat"]
    # Twice a second for most of 10 s, each member (and the classic APIs not at all).
    assert heartbeats["count"] > MEMBERS * 10, s["apis"]
    assert heartbeats["errors"] == heartbeats["signals"] == {}, s["apis"]
    assert not {"JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup"} & s["apis"].keys()
    assert s["unexpected_expirations"] == 0
    assert s["commits"]["count"] > 0 and s["commits"]["offsets"] > 0
    rows = table(out, "rebalances")
    # A commit sent at the member's epoch while its heartbeat moves it to a new one (as
    # members join, and as they leave at the end) meets STALE_MEMBER_EPOCH, as Java's does,
    # and is sent again: a signal, and only ever one whose member heard of its new epoch
    # first (the heartbeat went ahead of the commit on the connection). Nothing else: the
    # coordinator moves a member's epoch only when that member heartbeats.
    stale = ErrorCode.STALE_MEMBER_EPOCH.name
    commit_rows = table(out, "errors") if s["commits"]["signals"] or s["commits"]["errors"] else []
    unexplained = [
        r
        for r in commit_rows
        if r["api"] == "OffsetCommit"
        and not (
            r["error"] == stale
            and r["signal"]
            and any(
                b["member"] == r["member"] and 0 <= (r["time"] - b["time"]).total_seconds() <= 5
                for b in rows
            )
        )
    ]
    assert s["commits"]["errors"] == 0 and not unexplained, (unexplained, s["commits"])
    assert s["apis"]["OffsetCommit"]["errors"] == {}
    assert set(s["apis"]["OffsetCommit"]["signals"]) <= {stale}
    assert s["requests"]["errors"] == 0, s["apis"]

    # Each member's first rebalance row is its join, at the epoch the coordinator gave it.
    joins = [r for r in rows if r["reason"] == "join"]
    assert len({r["member"] for r in joins}) == MEMBERS
    assert Counter(r["group"] for r in joins) == dict.fromkeys(GROUPS, MEMBERS // len(GROUPS))
    assert all(r["generation"] > 0 and r["expected"] for r in rows)

    # The server saw each member join once and leave once; it stored the offsets committed.
    events = server_events(server)
    joined = Counter(e["group_id"] for e in events if e["kind"] == "member_joined")
    left = Counter(e["group_id"] for e in events if e["kind"] == "member_left")
    assert joined == left == dict.fromkeys(GROUPS, MEMBERS // len(GROUPS)), (joined, left)
    stored = sum(e["members"] for e in events if e["kind"] == "offsets_committed")
    assert s["commits"]["offsets"] == stored
    assert [e for e in events if e["kind"] == "member_expired"] == []

    # Steady members' heartbeats change nothing: the member table answered most of them in
    # compiled code (the rest are joins, catching up with new epochs, and leaves).
    samples = scrape(AdminClient(server.admin))
    api = {"api": "ConsumerGroupHeartbeat"}
    answered = value(samples, "fastcoord_requests_total", **api)
    fast = value(samples, "fastcoord_fast_path_answers_total", **api)
    assert answered >= heartbeats["count"] and fast > answered / 2, (fast, answered)


def test_static_members_come_back_to_their_places_without_a_rebalance(
    server: ServerProcess, tmp_path: Path
) -> None:
    s, events = scenario(
        server,
        tmp_path / "run",
        *("--group-protocol", "consumer", "--scenario", "static"),
        *("--members", "12", "--groups", "2", "--group-prefix", "static848"),
        *("--churn-rate", "2", "--restart-pause-ms", "300", "--duration", "8"),
    )
    assert s["rebalances"]["unexpected"] == 0
    assert s["apis"]["ConsumerGroupHeartbeat"]["errors"] == {}
    # The restarts happened: each is a leave at epoch -2 and a new process finding its
    # coordinator and joining under the same instance id...
    assert s["apis"]["FindCoordinator"]["count"] > 12 + 4
    # ...and from the moment each group had all its 6 members to the run's end (where they
    # left at epoch -2, keeping their places), the coordinator started no rebalance.
    ended = datetime.fromisoformat(s["ended"])
    for group in ("static848-0000", "static848-0001"):
        kinds = [e["kind"] for e in events if e["group_id"] == group and e["at"] <= ended]
        formed = max(i for i, kind in enumerate(kinds) if kind == "member_joined")
        assert kinds[:formed].count("member_joined") == 5
        # The last join's own epoch, then nothing more.
        settled = kinds.index("rebalance_completed", formed)
        assert "rebalance_started" not in kinds[settled:], kinds
        assert "member_expired" not in kinds and "member_left" not in kinds
