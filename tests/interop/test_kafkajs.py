"""kafkajs (the Node.js client, each member a `node` process of its own, run by
fastcoord.testing_kafkajs) against the real `fastcoord serve`.

A group grows from one member to three (each holds exactly the partitions that kafkajs's
round-robin assignor deals it, at one generation, higher than before) and shrinks as
members close: their LeaveGroup moves the partitions to the others long before a session
timeout could. Offsets committed by kafkajs read back through kafkajs's admin client and
fastcoord's own, and a member started after the whole group has gone fetches from them.
A member killed by SIGKILL sends nothing: its partitions move once its session (6 s, the
server's group.min.session.timeout.ms) has expired, not before.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from fastcoord import testing_kafkajs
from fastcoord.testing import ServerProcess, fastcoord_server
from fastcoord.testing_kafkajs import KafkajsMember

# A Node.js process a member: with the Java client's tests, in the real-clients job.
pytestmark = pytest.mark.kafkajs

TOPIC = "orders"
PARTITIONS = 6
ALL = frozenset(range(PARTITIONS))
HEARTBEAT_MS = 500
# The shortest session the server accepts (group.min.session.timeout.ms, Kafka's default).
SESSION_MS = 6000
# Where only a LeaveGroup may move partitions: far longer than a test waits for them.
LONG_SESSION_MS = 60_000
LEFT_WITHIN_S = 10.0
SERVER_FLAGS = ("--group-initial-rebalance-delay-ms", "0", "--topic", f"{TOPIC}:{PARTITIONS}")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with fastcoord_server(tmp_path, *SERVER_FLAGS) as running:
        yield running


def start(
    server: ServerProcess,
    group: str,
    name: str,
    directory: Path,
    session_timeout_ms: int = LONG_SESSION_MS,
) -> KafkajsMember:
    return testing_kafkajs.start_member(
        server.bootstrap,
        [TOPIC],
        group,
        name=name,
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=HEARTBEAT_MS,
        directory=directory,
    )


def round_robin(member_ids: Sequence[str]) -> dict[str, frozenset[int]]:
    """kafkajs's RoundRobinAssigner: the partitions dealt in turn to the member ids sorted."""
    ordered = sorted(member_ids)
    return {m: frozenset(range(i, PARTITIONS, len(ordered))) for i, m in enumerate(ordered)}


def settle(members: Sequence[KafkajsMember], timeout_s: float = 30.0) -> int:
    """Wait until the members are the whole group: each holds exactly its round-robin share
    of the topic, at one generation that a heartbeat of each confirmed. That generation."""
    deadline = time.monotonic() + timeout_s
    while True:
        ids = [m.member_id for m in members]
        generations = {m.generation for m in members}
        if None not in ids and None not in generations and len(generations) == 1:
            wanted = round_robin([i for i in ids if i is not None])
            if all(m.partitions(TOPIC) == wanted[m.member_id or ""] for m in members):
                (generation,) = generations
                assert generation is not None
                return generation
        if time.monotonic() > deadline:
            state = {m.name: (m.member_id, m.generation, sorted(m.assignment)) for m in members}
            logs = {m.name: (m.events, m.log()) for m in members}
            raise AssertionError(f"the group did not settle in {timeout_s} s: {state}\n{logs}")
        time.sleep(0.05)


def held(members: Sequence[KafkajsMember]) -> list[frozenset[int]]:
    """Each member's partitions, after checking that they cover the topic once."""
    sets = [m.partitions(TOPIC) for m in members]
    assert frozenset().union(*sets) == ALL and sum(map(len, sets)) == PARTITIONS, sets
    return sets


def fetch_offsets(server: ServerProcess, group: str) -> dict[int, int]:
    """The group's committed offsets of the topic, by fastcoord's own blocking client."""
    with server.connect() as connection:
        found = connection.committed(group, TOPIC, range(PARTITIONS))
    return {partition: offset for partition, offset in found.items() if offset >= 0}


def test_a_group_grows_and_shrinks(server: ServerProcess, tmp_path: Path) -> None:
    members = [start(server, "grows", "kafkajs-0", tmp_path)]
    try:
        alone = settle(members)
        assert members[0].partitions(TOPIC) == ALL

        members += [start(server, "grows", f"kafkajs-{i}", tmp_path) for i in (1, 2)]
        three = settle(members)
        assert three > alone
        assert sorted(map(len, held(members))) == [2, 2, 2]

        # Each close is a LeaveGroup: the others rebalance at once, not after 60 s.
        generation = three
        for leaving in (members[2], members[1]):
            staying = members[: members.index(leaving)]
            assert leaving.close() == 0, leaving.log()
            assert leaving.events[-1]["event"] == "closed"
            later = settle(staying, timeout_s=LEFT_WITHIN_S)
            assert later > generation
            generation = later
        assert members[0].partitions(TOPIC) == ALL
        for member in members:
            assert member.errors == [], (member.name, member.log())
    finally:
        for member in members:
            member.stop()
    log = server.log()
    for member in members:
        assert f"group grows: member left {member.member_id}" in log
    assert "member expired" not in log


def test_commits_read_back_and_the_restarted_group_resumes_from_them(
    server: ServerProcess, tmp_path: Path
) -> None:
    wanted = {p: 1000 + 7 * p for p in range(PARTITIONS)}
    members = [start(server, "commits", f"kafkajs-{i}", tmp_path) for i in range(2)]
    try:
        settle(members)
        for member in members:  # each commits the partitions it holds, in its generation
            for partition in sorted(member.partitions(TOPIC)):
                member.commit(TOPIC, partition, wanted[partition])
        for member in members:
            assert member.committed(TOPIC) == wanted
        assert fetch_offsets(server, "commits") == wanted
        for member in members:
            assert member.close() == 0, member.log()
            assert member.errors == [], (member.name, member.log())
    finally:
        for member in members:
            member.stop()

    # The whole group gone (Empty, its offsets kept), a new member resumes from them.
    with start(server, "commits", "kafkajs-2", tmp_path) as resumed:
        settle([resumed])
        resumed.wait_for(lambda: len(resumed.positions) == PARTITIONS)
        assert resumed.positions == {(TOPIC, p): o for p, o in wanted.items()}
        assert resumed.committed(TOPIC) == wanted
        assert resumed.close() == 0, resumed.log()
        assert resumed.errors == [], resumed.log()
    assert fetch_offsets(server, "commits") == wanted


def test_a_killed_member_loses_its_partitions_after_its_session(
    server: ServerProcess, tmp_path: Path
) -> None:
    members = [
        start(server, "kills", f"kafkajs-{i}", tmp_path, session_timeout_ms=SESSION_MS)
        for i in range(3)
    ]
    try:
        before = settle(members)
        victim, survivors = members[2], members[:2]
        killed_at = time.monotonic()
        victim.kill()
        assert victim.process.returncode == -signal.SIGKILL
        assert victim.pid not in testing_kafkajs._running
        after = settle(survivors, timeout_s=SESSION_MS / 1000 + 15)
        took = time.monotonic() - killed_at
        assert after > before
        assert sorted(map(len, held(survivors))) == [3, 3]
        # Its last heartbeat was at most a heartbeat interval (and a fetch) before the
        # kill: the session ran out no sooner than that much before SESSION_MS.
        assert took > (SESSION_MS - 2 * HEARTBEAT_MS) / 1000, took
        for member in survivors:
            assert member.errors == [], (member.name, member.log())
    finally:
        for member in members:
            member.stop()
    log = server.log()
    assert f"group kills: member expired {victim.member_id} (session timeout)" in log
    assert f"group kills: member left {victim.member_id}" not in log


def test_without_node_or_npm_a_member_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", "")
    monkeypatch.setenv(testing_kafkajs.CACHE_ENV, str(tmp_path))
    with pytest.raises(testing_kafkajs.KafkajsUnavailable, match="no node on PATH"):
        testing_kafkajs.node()
    with pytest.raises(testing_kafkajs.KafkajsUnavailable, match="no npm on PATH"):
        testing_kafkajs.npm()
    testing_kafkajs.installed.cache_clear()
    try:
        with pytest.raises(testing_kafkajs.KafkajsUnavailable, match=r"install Node\.js"):
            testing_kafkajs.installed()
    finally:
        testing_kafkajs.installed.cache_clear()


def test_kafkajs_is_installed_once_into_its_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """npm installs the pinned version into a directory beside the cache's, renamed into
    place; once there, nothing runs npm again. Here npm is a stand-in that writes what
    npm would."""
    calls: list[list[str]] = []

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        if command[1:] == ["--version"]:
            return subprocess.CompletedProcess(command, 0, "v20.0.0\n", "")
        manifest = json.loads((kwargs["cwd"] / "package.json").read_text())
        package = kwargs["cwd"] / "node_modules" / "kafkajs"
        package.mkdir(parents=True)
        version = manifest["dependencies"]["kafkajs"]
        (package / "package.json").write_text(json.dumps({"version": version}))
        return subprocess.CompletedProcess(command, 0, "added 1 package\n", "")

    monkeypatch.setenv(testing_kafkajs.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    target = tmp_path / testing_kafkajs.KAFKAJS_VERSION
    testing_kafkajs.installed.cache_clear()
    try:
        assert testing_kafkajs.installed() == target
        assert [c[1] for c in calls] == ["--version", "install"]
        assert sorted(p.name for p in tmp_path.iterdir()) == [testing_kafkajs.KAFKAJS_VERSION]

        calls.clear()
        testing_kafkajs.installed.cache_clear()
        assert testing_kafkajs.main(["install"]) == 0
        assert capsys.readouterr().out == f"{target}\n"
        assert calls == []
    finally:
        testing_kafkajs.installed.cache_clear()


def test_bootstrap_lists() -> None:
    assert testing_kafkajs.brokers("a:1") == ["a:1"]
    assert testing_kafkajs.brokers("a:1,b:2") == ["a:1", "b:2"]
    assert testing_kafkajs.brokers(["a:1", "b:2"]) == ["a:1", "b:2"]
