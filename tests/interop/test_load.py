"""Start-up with a large offsets log, against the real server: it listens at once, answers
the loading groups COORDINATOR_LOAD_IN_PROGRESS, shows a progress line, and then has every
offset of the log."""

from __future__ import annotations

import time
from pathlib import Path

from fastcoord.client.blocking import Connection
from fastcoord.core.partition import partition_for
from fastcoord.core.records import OffsetCommitKey, OffsetCommitValue, Record
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
)
from fastcoord.server.load_progress import MIN_BYTES
from fastcoord.storage import segment
from fastcoord.storage.log import PartitionLog, directory
from fastcoord.testing import fastcoord_server

GROUP = "big-fleet"
TOPIC_PARTITIONS = 2_000


def write_large_log(data_dir: Path) -> int:
    """Commits of GROUP to TOPIC_PARTITIONS partitions, round after round, until the log is
    past the progress line's threshold; the number of records."""
    log = PartitionLog(directory(data_dir, partition_for(GROUP)), 1 << 30)
    log.recover()
    written = i = 0
    while written < MIN_BYTES + (1 << 20):
        batch = [
            Record(
                OffsetCommitKey(GROUP, "t", j % TOPIC_PARTITIONS),
                OffsetCommitValue(j, -1, "", 1_763_700_000_000),
            )
            for j in range(i, i + 10_000)
        ]
        data = segment.encode_all(batch)
        log.append(data, len(batch))
        written += len(data)
        i += len(batch)
    log.sync()
    log.close()
    return i


def fetch(c: Connection, partitions: list[int]) -> tuple[int, dict[int, int]]:
    c.send(OffsetFetchRequest(group_id=GROUP, topics=[OffsetFetchRequestTopic("t", partitions)]), 3)
    response = c.receive(ApiKey.OFFSET_FETCH, 3)
    offsets = {p.partition_index: p.committed_offset for t in response.topics for p in t.partitions}
    return response.error_code, offsets


def test_a_large_log_loads_behind_a_progress_line(tmp_path: Path) -> None:
    count = write_large_log(tmp_path / "data")
    with fastcoord_server(tmp_path, wait_loaded=False) as server:
        c = server.connect()
        first, _ = fetch(c, [0])
        c.send(ApiVersionsRequest(), 3)  # the server answers other requests meanwhile
        assert c.receive(ApiKey.API_VERSIONS, 3).error_code == 0
        assert first == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "loaded before it was asked"
        deadline = time.monotonic() + 60
        while (answer := fetch(c, [0, 1, TOPIC_PARTITIONS - 1]))[0] != 0:
            assert answer[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            assert time.monotonic() < deadline, "the log did not load"
            time.sleep(0.05)
        last_round = count - TOPIC_PARTITIONS
        assert answer[1] == {
            0: last_round,
            1: last_round + 1,
            TOPIC_PARTITIONS - 1: count - 1,
        }
        while f"{count} records of 50 partitions" not in server.log():
            assert time.monotonic() < deadline, "the load did not finish"
            time.sleep(0.05)  # the partitions after this group's are still loading
    # Off a terminal rich prints the finished line once.
    assert "loading the offsets log: 50/50 partitions" in server.log()
    assert "100%" in server.log()
