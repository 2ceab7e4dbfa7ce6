"""Compaction: the latest record of each key survives in order, and the core rebuilt from the
compacted log equals the one rebuilt from the whole log; tombstones go only after the
retention; the active segment is never touched, so appends go on during a pass; a pass
stopped at any stage of its swap (as a crash would stop it) loses nothing."""

from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fastcoord.core.config import GroupConfig
from fastcoord.core.coordinator import Coordinator
from fastcoord.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    RecordKey,
)
from fastcoord.storage import segment
from fastcoord.storage.cleaner import (
    CHECKPOINT,
    LogCleaner,
    Stopped,
    _Writer,
    clean,
    dirty_ratio,
)
from fastcoord.storage.crc32c import FRAME_HEADER
from fastcoord.storage.log import PartitionLog
from fastcoord.storage.swap import CLEANED, MANIFEST

HOUR_MS = 3_600_000
DAY_S = 86_400.0


def offset_record(group: int, partition: int, offset: int | None) -> Record:
    key = OffsetCommitKey(f"g{group}", "t", partition)
    if offset is None:
        return Record(key, None)
    return Record(key, OffsetCommitValue(offset, -1, "", 1_700_000_000_000 + offset))


def group_record(group: int, generation: int | None, members: int = 1) -> Record:
    key = GroupMetadataKey(f"g{group}")
    if generation is None:
        return Record(key, None)
    member_values = tuple(
        MemberMetadataValue(f"m{i}", None, "c", "/127.0.0.1", 30_000, 10_000, b"s", b"a")
        for i in range(members)
    )
    return Record(
        key,
        GroupMetadataValue(
            "consumer",
            generation,
            "range" if members else None,
            "m0" if members else None,
            1,
            member_values,
        ),
    )


records_strategy = st.lists(
    st.one_of(
        st.builds(
            offset_record,
            st.integers(0, 1),
            st.integers(0, 2),
            st.one_of(st.none(), st.integers(0, 1000)),
        ),
        st.builds(
            group_record,
            st.integers(0, 1),
            st.one_of(st.none(), st.integers(1, 9)),
            st.integers(0, 2),
        ),
    ),
    min_size=1,
    max_size=200,
)


def write(log: PartitionLog, records: list[Record], batch: int = 3) -> None:
    for i in range(0, len(records), batch):
        chunk = records[i : i + batch]
        log.append(segment.encode_all(chunk), len(chunk))
    log.sync()


def new_log(path: Path, records: list[Record], segment_bytes: int = 400) -> PartitionLog:
    log = PartitionLog(path, segment_bytes)
    log.recover()
    write(log, records)
    return log


def latest(records: list[Record]) -> dict[RecordKey, Record]:
    out: dict[RecordKey, Record] = {}
    for r in records:
        out[r.key] = r
    return out


def live(records: list[Record]) -> dict[RecordKey, Record]:
    return {k: r for k, r in latest(records).items() if r.value is not None}


def snapshot(records: list[Record]) -> object:
    co = Coordinator(GroupConfig(), now_ms=0)
    for r in records:
        co.replay(r, 0, loading=True)
    return co.snapshot()


def reread(path: Path, segment_bytes: int = 400) -> list[Record]:
    log = PartitionLog(path, segment_bytes)
    try:
        return log.recover()
    finally:
        log.close()


def age_closed_segments(log: PartitionLog, seconds: float) -> None:
    for base, file in log.segments():
        if base != log.active_base:
            t = time.time() - seconds
            os.utime(file, (t, t))


def is_subsequence(small: list[Record], big: list[Record]) -> bool:
    it = iter(big)
    return all(any(r == b for b in it) for r in small)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(records=records_strategy, drop_tombstones=st.booleans())
# A tombstone of a group that had members: the group goes at load, as in Kafka's.
@example(
    records=[
        group_record(0, 1, 2),
        *[offset_record(1, 0, i) for i in range(8)],
        group_record(0, None),
    ],
    drop_tombstones=False,
)
def test_compaction_keeps_what_the_log_means(
    tmp_path_factory: pytest.TempPathFactory, records: list[Record], drop_tombstones: bool
) -> None:
    path = tmp_path_factory.mktemp("log")
    log = new_log(path, records, segment_bytes=250)
    if drop_tombstones:
        age_closed_segments(log, 2 * DAY_S)
    active = log.active_base
    result = clean(log, time.time(), 24 * HOUR_MS)
    log.close()
    after = reread(path, 250)
    # Nothing is invented or reordered; each key keeps its latest record or, for a
    # tombstone past the retention, nothing; the core rebuilt from it is the same.
    assert is_subsequence(after, records)
    assert live(after) == live(records)
    if not drop_tombstones:
        assert latest(after) == latest(records)
    assert snapshot(after) == snapshot(records)
    # The closed part holds each key once; the active segment is as it was.
    closed = after[: len(after) - _in_active(path, active)]
    assert len({r.key for r in closed}) == len(closed)
    if result is not None:
        assert result.records_out == len(closed)
        assert result.records_in - result.records_out >= result.tombstones_dropped
        if not drop_tombstones:
            assert result.tombstones_dropped == 0
    # Appending goes on where the log ended.
    log = PartitionLog(path, 250)
    log.recover()
    write(log, [offset_record(9, 9, 1)])
    log.close()
    assert reread(path, 250) == [*after, offset_record(9, 9, 1)]


def _in_active(path: Path, active: int | None) -> int:
    if active is None:
        return 0
    return len(segment.scan((path / f"{active:020d}.log").read_bytes()).records)


def test_a_pass_compacts_only_closed_segments(tmp_path: Path) -> None:
    records = [offset_record(0, i % 3, i) for i in range(60)]
    log = new_log(tmp_path, records)
    before = log.segments()
    active = before[-1]
    active_bytes = active[1].read_bytes()
    result = clean(log, time.time(), HOUR_MS)
    assert result is not None
    assert result.segments_in == len(before) - 1 and result.records_out <= 3
    assert log.segments()[-1] == active and active[1].read_bytes() == active_bytes
    names = [base for base, _ in log.segments()]
    assert names == sorted(names) and len(names) == result.segments_out + 1
    assert not list(tmp_path.glob(f"*{CLEANED}")) and not (tmp_path / MANIFEST).exists()
    log.close()
    assert latest(reread(tmp_path)) == latest(records)


def test_tombstones_stay_for_the_retention(tmp_path: Path) -> None:
    records = [offset_record(0, 0, 1), group_record(0, 1, 0), offset_record(0, 0, None)]
    records += [group_record(0, None)] + [offset_record(1, i % 2, i) for i in range(40)]
    log = new_log(tmp_path, records)
    age_closed_segments(log, 3600.0)  # an hour old: within a day's retention
    kept = clean(log, time.time(), 24 * HOUR_MS)
    assert kept is not None and kept.tombstones_dropped == 0
    assert latest(reread(tmp_path))[OffsetCommitKey("g0", "t", 0)].value is None
    # The output keeps its inputs' age, so the tombstones do not look newer than they are.
    oldest = min(f.stat().st_mtime for b, f in log.segments() if b != log.active_base)
    assert oldest < time.time() - 3000
    gone = clean(log, time.time(), 30 * 60 * 1000)  # retention half an hour: they go
    assert gone is not None and gone.tombstones_dropped == 2
    log.close()
    after = reread(tmp_path)
    assert OffsetCommitKey("g0", "t", 0) not in latest(after)
    assert GroupMetadataKey("g0") not in latest(after)
    assert live(after) == live(records)


SWAP_STEPS = ["written", "synced", "committed", "inputs deleted", "renamed"]


class Crash(Exception):
    pass


@pytest.mark.parametrize("stage", SWAP_STEPS)
def test_a_pass_stopped_at_any_stage_loses_nothing(tmp_path: Path, stage: str) -> None:
    records = [offset_record(i % 4, i % 5, i) for i in range(120)] + [offset_record(0, 0, None)]
    log = new_log(tmp_path, records, segment_bytes=300)

    def step(name: str) -> None:
        if name == stage:
            raise Crash(name)

    with pytest.raises(Crash):
        clean(log, time.time(), HOUR_MS, step=step)
    log.close()
    committed = SWAP_STEPS.index(stage) >= SWAP_STEPS.index("committed")
    assert (tmp_path / MANIFEST).exists() == committed
    after = reread(tmp_path, 300)  # recovery finishes or forgets the swap
    assert latest(after) == latest(records)
    assert not (tmp_path / MANIFEST).exists() and not list(tmp_path.glob(f"*{CLEANED}"))
    closed_keys = [r.key for r in after[: len(after) - _in_active(tmp_path, log.active_base)]]
    assert (len(set(closed_keys)) == len(closed_keys)) == committed


def test_a_failed_swap_is_finished_by_the_next_pass(tmp_path: Path) -> None:
    records = [offset_record(0, i % 2, i) for i in range(80)]
    log = new_log(tmp_path, records, segment_bytes=300)

    def step(name: str) -> None:
        if name == "inputs deleted":
            raise OSError("disk gone for a moment")

    with pytest.raises(OSError):
        clean(log, time.time(), HOUR_MS, step=step)
    assert clean(log, time.time(), HOUR_MS) is not None
    assert not (tmp_path / MANIFEST).exists()
    log.close()
    assert latest(reread(tmp_path, 300)) == latest(records)


def test_a_stopped_pass_changes_nothing(tmp_path: Path) -> None:
    log = new_log(tmp_path, [offset_record(0, i % 3, i) for i in range(80)], segment_bytes=300)
    before = {f.name: f.read_bytes() for _, f in log.segments()}
    calls = iter(range(100))
    with pytest.raises(Stopped):
        clean(log, time.time(), HOUR_MS, stopping=lambda: next(calls) > 3)
    assert {f.name: f.read_bytes() for _, f in log.segments()} == before
    assert not list(tmp_path.glob(f"*{CLEANED}"))
    log.close()


def test_appends_and_rolls_go_on_during_a_pass(tmp_path: Path) -> None:
    """The appender owns the active segment: what it writes (and rolls) while a pass runs,
    the pass leaves alone."""
    first = [offset_record(0, i % 3, i) for i in range(100)]
    log = new_log(tmp_path, first, segment_bytes=300)
    during = [offset_record(1, i % 3, i) for i in range(100)]

    def step(name: str) -> None:
        if name in ("written", "inputs deleted"):
            write(log, during[:50] if name == "written" else during[50:])

    assert clean(log, time.time(), HOUR_MS, step=step) is not None
    write(log, [offset_record(2, 0, 1)])
    log.close()
    assert latest(reread(tmp_path, 300)) == latest([*first, *during, offset_record(2, 0, 1)])


def test_appends_from_another_thread_during_passes(tmp_path: Path) -> None:
    log = new_log(tmp_path, [], segment_bytes=2_000)
    written: list[Record] = []
    done = threading.Event()

    def appender() -> None:
        for i in range(3_000):
            r = offset_record(i % 7, i % 11, i)
            log.append(segment.encode(r), 1)
            written.append(r)
        log.sync()
        done.set()

    thread = threading.Thread(target=appender)
    thread.start()
    passes = 0
    while not done.is_set() or passes == 0:
        if clean(log, time.time(), HOUR_MS) is not None:
            passes += 1
    thread.join()
    log.close()
    assert passes > 0
    assert latest(reread(tmp_path, 2_000)) == latest(written)


def test_the_cleaner_waits_for_dirt(tmp_path: Path) -> None:
    log = new_log(tmp_path, [offset_record(0, i % 3, i) for i in range(100)], segment_bytes=300)
    cleaner = LogCleaner(
        {0: log}, backoff_ms=60_000, min_cleanable_ratio=0.5, delete_retention_ms=0
    )
    assert dirty_ratio(log)[1] == 1.0
    assert cleaner.clean_if_dirty(0) is not None
    assert (tmp_path / CHECKPOINT).exists() and dirty_ratio(log) == (0, 0.0)
    assert cleaner.clean_if_dirty(0) is None  # nothing new
    # A little more than the clean part (a few records) makes it dirty enough again.
    write(log, [offset_record(1, i % 3, i) for i in range(100)])
    dirty, ratio = dirty_ratio(log)
    assert dirty > 0 and ratio >= 0.5
    assert cleaner.clean_if_dirty(0) is not None
    log.close()


def test_the_cleaner_thread_cleans_loaded_partitions_only(tmp_path: Path) -> None:
    logs = {
        p: new_log(tmp_path / str(p), [offset_record(0, i % 3, i) for i in range(100)], 300)
        for p in (0, 1)
    }
    cleaner = LogCleaner(logs, backoff_ms=10, min_cleanable_ratio=0.5, delete_retention_ms=0)
    cleaner.start()
    cleaner.loaded(1)
    deadline = time.monotonic() + 10
    while cleaner.passes == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    cleaner.close()
    assert cleaner.passes >= 1
    assert (tmp_path / "1" / CHECKPOINT).exists()
    assert not (tmp_path / "0" / CHECKPOINT).exists()
    for log in logs.values():
        log.close()


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 120), min_size=1, max_size=40),
    segment_bytes=st.integers(1, 400),
    cuts=st.sets(st.integers(0, 40)),
)
def test_runs_are_written_as_frame_by_frame(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], segment_bytes: int, cuts: set[int]
) -> None:
    """A pass copies runs of consecutive surviving frames a slice at a time: the output
    segments (their names, sizes and bytes) are those of copying frame by frame, where a
    frame goes in a new segment when it does not fit, and a larger one gets one of its own."""
    data = b"".join(bytes([i % 251]) * (FRAME_HEADER.size + n) for i, n in enumerate(sizes))
    spans, pos = [], 0
    for n in sizes:
        spans.append((pos + FRAME_HEADER.size, pos + FRAME_HEADER.size + n))
        pos += FRAME_HEADER.size + n
    expected: list[tuple[int, bytes]] = []  # (first offset, bytes) of each output segment
    for i, (begin, end) in enumerate(spans):
        frame = data[begin - FRAME_HEADER.size : end]
        if not expected or (expected[-1][1] and len(expected[-1][1]) + len(frame) > segment_bytes):
            expected.append((100 + i, b""))
        expected[-1] = (expected[-1][0], expected[-1][1] + frame)
    directory = tmp_path_factory.mktemp("runs")
    writer = _Writer(directory, segment_bytes)
    bounds = sorted({0, len(spans), *(c for c in cuts if c < len(spans))})
    for first, end in itertools.pairwise(bounds):
        writer.add_run(100 + first, memoryview(data), spans[first:end], 0.0)
    names = writer.finish()
    got = [
        (int(name[: -len(".log")]), (directory / f"{name}.cleaned").read_bytes()) for name in names
    ]
    assert got == expected
    assert writer.records_out == len(sizes) and writer.bytes_out == len(data)
