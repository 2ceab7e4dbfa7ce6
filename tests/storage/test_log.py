"""The partition log: records come back as written; a torn tail is repaired with a
warning; damage in the middle is refused, or cut away only when asked; rolls; locks."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
)
from fastcoord.storage import segment
from fastcoord.storage.lock import DataDirLock, DataDirLocked
from fastcoord.storage.log import LogCorruption, PartitionLog


def commit(i: int, group: str = "g") -> Record:
    return Record(
        OffsetCommitKey(group, "t", i % 12), OffsetCommitValue(i, -1, f"m{i}", 1_700_000_000_000)
    )


def metadata(generation: int) -> Record:
    member = MemberMetadataValue("m-1", None, "c", "/127.0.0.1", 30_000, 10_000, b"s", b"a")
    return Record(
        GroupMetadataKey("g"),
        GroupMetadataValue("consumer", generation, "range", "m-1", 1, (member,)),
    )


RECORDS = [commit(i) for i in range(50)] + [metadata(3), Record(GroupMetadataKey("g"), None)]


def written(path: Path, records: list[Record], segment_bytes: int = 1 << 20) -> PartitionLog:
    log = PartitionLog(path, segment_bytes)
    assert log.recover() == []
    for r in records:
        log.append(segment.encode(r), 1)
    log.sync()
    log.close()
    return log


def test_records_come_back_in_order_across_segments(tmp_path: Path) -> None:
    written(tmp_path, RECORDS, segment_bytes=300)
    log = PartitionLog(tmp_path, 300)
    assert log.recover() == RECORDS
    assert log.next_offset == len(RECORDS)
    bases = [base for base, _ in log.segments()]
    assert len(bases) > 3 and bases[0] == 0 and bases == sorted(bases)
    # Appending after recovery continues the same log.
    log.append(segment.encode(commit(99)), 1)
    log.close()
    assert PartitionLog(tmp_path, 300).recover() == [*RECORDS, commit(99)]


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(1, 200))
def test_a_torn_tail_is_truncated_with_a_warning(
    tmp_path_factory: pytest.TempPathFactory, cut: int
) -> None:
    path = tmp_path_factory.mktemp("torn")
    written(path, RECORDS[:10])
    [(_, file)] = PartitionLog(path, 1 << 20).segments()
    data = file.read_bytes()
    cut = min(cut, len(segment.encode(RECORDS[9])) - 1)
    file.write_bytes(data[:-cut])  # the last write, torn
    log = PartitionLog(path, 1 << 20)
    assert log.recover() == RECORDS[:9]
    assert file.stat().st_size == len(segment.encode_all(RECORDS[:9]))
    log.append(segment.encode(RECORDS[9]), 1)
    log.close()
    assert PartitionLog(path, 1 << 20).recover() == RECORDS[:10]


def test_flipped_bytes_in_the_last_record_are_a_torn_tail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    written(tmp_path, RECORDS[:5])
    [(_, file)] = PartitionLog(tmp_path, 1 << 20).segments()
    data = bytearray(file.read_bytes())
    data[-3] ^= 0x40
    file.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        assert PartitionLog(tmp_path, 1 << 20).recover() == RECORDS[:4]
    position = len(segment.encode_all(RECORDS[:4]))
    assert f"{file}: damaged record at byte {position} (CRC32C" in caplog.text


def test_damage_in_the_middle_is_refused_then_cut_only_when_asked(tmp_path: Path) -> None:
    written(tmp_path, RECORDS[:20])
    [(_, file)] = PartitionLog(tmp_path, 1 << 20).segments()
    data = bytearray(file.read_bytes())
    position = len(segment.encode_all(RECORDS[:7]))
    data[position + 10] ^= 0x01  # inside record 7's payload
    file.write_bytes(bytes(data))
    with pytest.raises(LogCorruption) as refused:
        PartitionLog(tmp_path, 1 << 20).recover()
    assert refused.value.path == file and refused.value.position == position
    assert str(position) in str(refused.value) and "--log-truncate-damaged" in str(refused)
    assert file.read_bytes() == bytes(data)  # refusing changed nothing
    assert PartitionLog(tmp_path, 1 << 20).recover(truncate_damaged=True) == RECORDS[:7]
    assert PartitionLog(tmp_path, 1 << 20).recover() == RECORDS[:7]


def test_damage_in_an_earlier_segment_is_refused(tmp_path: Path) -> None:
    written(tmp_path, RECORDS, segment_bytes=300)
    segments = PartitionLog(tmp_path, 300).segments()
    first = segments[0][1]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0x01  # the end of a segment that is not the last: not a torn tail
    first.write_bytes(bytes(data))
    with pytest.raises(LogCorruption):
        PartitionLog(tmp_path, 300).recover()
    kept = PartitionLog(tmp_path, 300).recover(truncate_damaged=True)
    assert kept == RECORDS[: len(kept)] and len(kept) < len(RECORDS)
    assert len(PartitionLog(tmp_path, 300).segments()) == 1


def test_a_second_server_cannot_lock_the_data_dir(tmp_path: Path) -> None:
    first = DataDirLock(tmp_path)
    first.acquire()
    with pytest.raises(DataDirLocked, match="in use by another fastcoord server"):
        DataDirLock(tmp_path).acquire()
    first.release()
    second = DataDirLock(tmp_path)
    second.acquire()  # released: free again
    second.release()
