"""The storage's speed. CRC-32C, compiled (_ext/crc32c.pyx: SSE4.2 where the CPU has it,
and its slicing-by-8 table forced) against the pure-Python twin (storage/crc32c.py) in the
same run.

MB/s = size / time. Recovery of a log of 1M committed offsets (the aim: under 3 s),
and a compaction pass over it.
CRC inputs are built once at import and the class has no `setup`, for the
reason given in bench_protocol.py (asv#966).
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from fastcoord._ext import crc32c as compiled  # type: ignore[attr-defined]
from fastcoord.core.config import GroupConfig
from fastcoord.core.coordinator import Coordinator
from fastcoord.storage import cleaner, segment
from fastcoord.storage import crc32c as twin
from fastcoord.storage.log import PartitionLog

from .common import SEED, scaled

IMPLS: dict[str, Callable[[bytes], int]] = {
    "compiled": compiled.crc32c,
    "compiled-table": compiled._crc32c_table,
    "twin": twin.crc32c,
}

# A small record batch, and a large one (Kafka's default max.message.bytes is about 1 MiB).
KIB = 1024
MIB = scaled(1 << 20)
DATA = {size: random.Random(SEED).randbytes(size) for size in (KIB, MIB)}


class Crc32c:
    """The checksum of one record batch, as written and as read back."""

    params = ([KIB, MIB], list(IMPLS))
    param_names = ["bytes", "impl"]

    def time_crc32c(self, size: int, impl: str) -> None:
        IMPLS[impl](DATA[size])


# -- recovery: a log of 1M committed offsets, read back and replayed into the core ---------

RECOVERY_OFFSETS = scaled(1_000_000)


def _write_log(path: Path, count: int, keys: int = 1_000_000, segment_bytes: int = 1 << 30) -> None:
    """`count` offset commits of 1,000 groups (a consumer fleet committing as it goes), in
    one partition's log, as the appender writes them; commit i goes to key i % keys."""
    from fastcoord.core.records import OffsetCommitKey, OffsetCommitValue, Record

    log = PartitionLog(path, segment_bytes)
    log.recover()
    batch: list[Record] = []
    for i in range(count):
        group, partition = divmod(i % keys, 1_000)
        batch.append(
            Record(
                OffsetCommitKey(f"group-{group % 1_000}", f"topic-{partition % 10}", partition),
                OffsetCommitValue(i, -1, "", 1_763_700_000_000 + i),
            )
        )
        if len(batch) == scaled(10_000):
            log.append(segment.encode_all(batch), len(batch))
            batch = []
    if batch:
        log.append(segment.encode_all(batch), len(batch))
    log.sync()
    log.close()


class Recovery:
    """Start-up time for 1M committed offsets (aim: under 3 s): read and check
    the segment (CRC32C, decode), then replay every record into a fresh Coordinator."""

    timeout = 300
    number = 1
    repeat = 3

    def setup_cache(self) -> str:
        # asv runs setup_cache in a scratch directory that it keeps for the benchmarks and
        # then removes (tests/test_benches.py runs it in a tmp_path).
        directory = Path("recovery-log").absolute()
        _write_log(directory, RECOVERY_OFFSETS)
        return str(directory)

    def time_read(self, directory: str) -> None:
        records = PartitionLog(Path(directory), 1 << 30).recover()
        assert len(records) == RECOVERY_OFFSETS

    def time_read_and_replay(self, directory: str) -> None:
        records = PartitionLog(Path(directory), 1 << 30).recover()
        co = Coordinator(GroupConfig(), now_ms=0)
        for record in records:
            co.replay(record, 0, loading=True)
        assert co.offset_manager.count() == min(RECOVERY_OFFSETS, 1_000_000)


# -- compaction: the same 1M commits, in 8 MiB segments, compacted by one cleaner pass -------

COMPACTION_SEGMENT_BYTES = scaled(8 << 20)
# "distinct": the recovery log, every commit to its own key (nothing to drop: the cost of
# reading, checking and copying); "overwritten": 1M commits to 10,000 keys (100 each).
COMPACTION_KEYS = {"distinct": 1_000_000, "overwritten": 10_000}


class Compaction:
    """One cleaner pass over the closed segments of a log of 1M committed offsets."""

    timeout = 600
    number = 1
    repeat = 3
    params = (list(COMPACTION_KEYS),)
    param_names = ["keys"]

    def setup_cache(self) -> str:
        directory = Path("compaction-logs").absolute()
        for name, keys in COMPACTION_KEYS.items():
            _write_log(directory / name, RECOVERY_OFFSETS, scaled(keys), COMPACTION_SEGMENT_BYTES)
        return str(directory)

    def setup(self, directory: str, keys: str) -> None:
        # A pass rewrites the log: each repeat compacts a fresh copy.
        self.work = Path(directory) / f"work-{keys}"
        shutil.rmtree(self.work, ignore_errors=True)
        shutil.copytree(Path(directory) / keys, self.work)
        self.log = PartitionLog(self.work, COMPACTION_SEGMENT_BYTES)
        self.log.recover()

    def teardown(self, directory: str, keys: str) -> None:
        self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)

    def time_compact(self, directory: str, keys: str) -> None:
        result = cleaner.clean(self.log, time.time(), 86_400_000)
        assert result is not None and result.records_out <= scaled(COMPACTION_KEYS[keys])
