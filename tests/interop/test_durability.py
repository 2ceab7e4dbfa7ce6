"""Durability against the real server: every acknowledged commit survives SIGKILL, also
while the cleaner compacts; one server per data directory; a damaged log is refused,
naming the file and position; deleted groups and expired offsets stay gone."""

from __future__ import annotations

import random
import resource
import threading
import time
from pathlib import Path

import pytest

from fastcoord.client.blocking import Connection
from fastcoord.core.partition import partition_for
from fastcoord.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
)
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    DeleteGroupsRequest,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from fastcoord.storage import segment
from fastcoord.storage.log import PartitionLog, directory
from fastcoord.testing import ServerProcess, fastcoord_server, refused_start
from tests.interop.test_raw_frames import heartbeat_ok, member

PARTITIONS = 4


def commit(c: Connection, group: str, offset: int) -> int:
    """Commit `offset` on every partition of topic t, as a simple (memberless) commit;
    retried while the server is still loading, as clients do."""
    deadline = time.monotonic() + 15
    while (code := _commit_once(c, group, offset)) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        assert time.monotonic() < deadline, "the offsets log did not load"
        time.sleep(0.02)
    return code


def _commit_once(c: Connection, group: str, offset: int) -> int:
    c.send(
        OffsetCommitRequest(
            group_id=group,
            topics=[
                OffsetCommitRequestTopic(
                    "t",
                    [
                        OffsetCommitRequestPartition(p, offset, committed_metadata=f"o{offset}")
                        for p in range(PARTITIONS)
                    ],
                )
            ],
        ),
        2,
    )
    response = c.receive(ApiKey.OFFSET_COMMIT, 2)
    codes = {p.error_code for t in response.topics for p in t.partitions}
    assert len(codes) == 1
    return codes.pop()


def committed(c: Connection, group: str) -> dict[int, int]:
    return c.committed(group, "t", [0, 1, 2, 3], version=3)


def committer(
    server: ServerProcess, group: str, start: int, acked: dict[str, int], stop: threading.Event
) -> None:
    """Commit start + 1, start + 2, ... until stopped; `acked` gets the last acknowledged."""
    c = server.connect()
    offset = start
    try:
        while not stop.is_set():
            offset += 1
            code = commit(c, group, offset)
            assert code == 0, code
            acked[group] = offset  # the server said it is durable
    except (ConnectionError, OSError):
        pass  # killed mid-request: that commit was never acknowledged
    finally:
        c.close()


# Small segments and a cleaner that looks every 20 ms: kills land during compaction passes.
COMPACTING = ("--offsets-topic-segment-bytes", "2048", "--log-cleaner-backoff-ms", "20")


KILLED_SERVERS = pytest.mark.parametrize(
    ("fsync", "extra"),
    [("always", ()), ("batch", ()), ("batch", COMPACTING)],
    ids=["always", "batch", "batch-compacting"],
)


@KILLED_SERVERS
def test_acknowledged_commits_survive_sigkill(
    tmp_path: Path, fsync: str, extra: tuple[str, ...]
) -> None:
    kill_during_commits(tmp_path, fsync, extra, rounds=5, seed=0)


@pytest.mark.slow
@KILLED_SERVERS
@pytest.mark.parametrize("seed", [1, 2])
def test_acknowledged_commits_survive_many_sigkills(
    tmp_path: Path, fsync: str, extra: tuple[str, ...], seed: int
) -> None:
    kill_during_commits(tmp_path, fsync, extra, rounds=25, seed=seed)


def kill_during_commits(
    tmp_path: Path, fsync: str, extra: tuple[str, ...], rounds: int, seed: int
) -> None:
    """Rounds of: start (on the last round's data), commit from four clients, SIGKILL at a
    random moment; every acknowledged commit must be there at the next start."""
    rng = random.Random(f"{fsync}{extra}{seed}")
    groups = [f"g{i}" for i in range(4)]
    history: list[dict[str, int]] = []
    compactions = 0
    for _ in range(rounds):
        acked: dict[str, int] = {}
        # Not waiting for the load: the committers start at once and retry
        # COORDINATOR_LOAD_IN_PROGRESS, as clients of a restarted coordinator do.
        with fastcoord_server(tmp_path, "--fsync", fsync, *extra, wait_loaded=False) as server:
            reader = server.connect()
            before = {g: committed(reader, g).get(0, -1) for g in groups}
            reader.close()
            for g in groups:  # what the last round acknowledged is still there
                assert before[g] >= (history[-1].get(g, -1) if history else -1)
            stop = threading.Event()
            threads = [
                threading.Thread(target=committer, args=(server, g, before[g], acked, stop))
                for g in groups
            ]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 15
            while len(acked) < len(groups) and time.monotonic() < deadline:
                time.sleep(0.01)  # every committer under way (the log may still be loading)
            while extra and "compacted __consumer_offsets-" not in server.log():
                assert time.monotonic() < deadline, "the cleaner did not run"
                time.sleep(0.01)  # the cleaner at work: the kill may land in a pass
            time.sleep(rng.uniform(0.05, 0.8))
            server.kill()  # at a random moment
            stop.set()
            for t in threads:
                t.join(timeout=10)
            compactions += server.log().count("compacted __consumer_offsets-")
        assert acked, "no commit was acknowledged before the kill"
        history.append({g: max(acked.get(g, -1), before[g]) for g in groups})
    with fastcoord_server(tmp_path, "--fsync", fsync, *extra) as server:
        c = server.connect()
        for g in groups:
            offsets = committed(c, g)
            assert set(offsets) == set(range(PARTITIONS))
            # Every acknowledged commit is there (a later one may be too: written, but
            # killed before its answer left).
            assert min(offsets.values()) >= history[-1][g]
    if extra:
        assert compactions >= rounds, "the cleaner hardly ran: the kills did not test it"


def test_a_second_server_on_the_same_data_dir_refuses_to_start(tmp_path: Path) -> None:
    with fastcoord_server(tmp_path):
        second = refused_start(tmp_path)
    assert second.returncode == 2
    assert "in use by another fastcoord server" in second.stderr + second.stdout


def test_a_damaged_log_is_refused_until_the_operator_truncates(tmp_path: Path) -> None:
    with fastcoord_server(tmp_path) as server:
        c = server.connect()
        for offset in range(1, 6):
            assert commit(c, "g", offset) == 0
        c.close()
    [file] = sorted(directory(tmp_path / "data", 0).parent.glob("__consumer_offsets-*/*.log"))
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF  # in the middle: not a torn tail
    file.write_bytes(bytes(data))
    refused = refused_start(tmp_path)
    assert refused.returncode == 2
    assert str(file) in refused.stderr and "damaged record at byte" in refused.stderr
    with fastcoord_server(tmp_path, "--log-truncate-damaged", "true") as server:
        kept = committed(server.connect(), "g")
        assert 1 <= kept[0] < 5  # the commits before the damage, none after
    assert "truncating the log there, as asked" in server.log()


def test_deleted_groups_stay_deleted_after_a_restart(tmp_path: Path) -> None:
    with fastcoord_server(tmp_path) as server:
        c = server.connect()
        assert commit(c, "gone", 7) == 0 and commit(c, "kept", 8) == 0
        c.send(DeleteGroupsRequest(groups_names=["gone"]), 2)
        [result] = c.receive(ApiKey.DELETE_GROUPS, 2).results
        assert result.error_code == 0
    with fastcoord_server(tmp_path) as server:  # the tombstones were replayed
        c = server.connect()
        assert committed(c, "gone") == dict.fromkeys(range(PARTITIONS), -1)
        assert committed(c, "kept") == dict.fromkeys(range(PARTITIONS), 8)


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # a disk that fills up at 4 KiB


def test_a_full_disk_refuses_commits_and_heartbeats_go_on(tmp_path: Path) -> None:
    with fastcoord_server(
        tmp_path,
        "--event-log",
        "false",
        "--group-initial-rebalance-delay-ms",
        "0",
        preexec_fn=_limit_file_size,
        expect=[
            r"ERROR fastcoord.storage: cannot write the offsets log: \[Errno 27\] File too large"
        ],
    ) as server:
        good, member_id = member(server)
        c = server.connect()
        codes = [commit(c, "g2", offset) for offset in range(1, 60)]
        assert codes[0] == 0
        assert ErrorCode.COORDINATOR_NOT_AVAILABLE in codes  # never acknowledged
        first_refused = codes.index(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        assert set(codes[first_refused:]) == {ErrorCode.COORDINATOR_NOT_AVAILABLE}
        assert heartbeat_ok(good, member_id)
        assert committed(c, "g2")[0] == first_refused  # the last acknowledged one
        assert server.process.poll() is None
    assert server.log().count("cannot write the offsets log") == 1  # once per interval


def test_expired_offsets_stay_expired_after_a_restart(tmp_path: Path) -> None:
    """Offsets retention writes tombstones: a log from eight days ago, loaded by a server
    that checks retention every 100 ms, loses its old offsets, durably; a server that
    would not check for ten minutes finds them gone after a SIGKILL."""
    week_ago_ms = int(time.time() * 1000) - 8 * 24 * 3600 * 1000
    now_ms = int(time.time() * 1000)
    old_group = Record(
        GroupMetadataKey("old-consumers"),
        GroupMetadataValue("consumer", 3, None, None, week_ago_ms, ()),
    )

    def offsets(group: str, offset: int, at_ms: int) -> list[Record]:
        return [
            Record(OffsetCommitKey(group, "t", p), OffsetCommitValue(offset, -1, "", at_ms))
            for p in range(PARTITIONS)
        ]

    records = [
        old_group,
        *offsets("old-consumers", 10, week_ago_ms),
        *offsets("old-standalone", 20, week_ago_ms),
        *offsets("fresh", 30, now_ms),
    ]
    for group in ("old-consumers", "old-standalone", "fresh"):
        log = PartitionLog(directory(tmp_path / "data", partition_for(group)), 1 << 20)
        log.recover()
        mine = [r for r in records if r.group_id == group]
        log.append(segment.encode_all(mine), len(mine))
        log.sync()
        log.close()
    with fastcoord_server(tmp_path, "--offsets-retention-check-interval-ms", "100") as server:
        c = server.connect()
        deadline = time.monotonic() + 10
        while committed(c, "old-consumers")[0] != -1 or committed(c, "old-standalone")[0] != -1:
            assert time.monotonic() < deadline, "old offsets did not expire"
            time.sleep(0.05)
        assert committed(c, "fresh") == dict.fromkeys(range(PARTITIONS), 30)
        server.kill()  # the tombstones were durable before; the offsets went from memory
    with fastcoord_server(tmp_path) as server:  # retention checked only in ten minutes
        c = server.connect()
        assert committed(c, "old-consumers") == dict.fromkeys(range(PARTITIONS), -1)
        assert committed(c, "old-standalone") == dict.fromkeys(range(PARTITIONS), -1)
        assert committed(c, "fresh") == dict.fromkeys(range(PARTITIONS), 30)
