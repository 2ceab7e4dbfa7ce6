"""Compaction of the offsets log: Kafka's LogCleaner, for the closed segments of a partition.

`__consumer_offsets` is a compacted topic: only the latest record of each key (a group's
metadata, a group's offset for one topic partition) matters, and a tombstone (no value)
only needs to outlive the records it deletes. Without compaction the log, and with it the
time to load at start, grows with every commit ever made.

A pass over a partition reads its closed segments (never the active one, which the
appender owns: appends never wait for the cleaner), keeps the last record of each key in
the order they were written, drops tombstones whose segment was last written more than
log.cleaner.delete.retention.ms ago (Kafka's rule; the records they delete went in the same
pass), and swaps the result in. Frames are copied as they are: no record is re-encoded.

Crash safety comes from one commit point, the rename of a manifest:
1. write the output segments as `BASE.log.cleaned`, sync them and the directory;
2. write `compaction.swap` (the inputs and outputs, JSON) through a temporary name: once it
   exists the new segments are complete and the pass is committed;
3. delete the inputs, rename each output to `BASE.log` (over an input of the same name),
   sync the directory, delete the manifest.
Recovery (`swap.recover_swap`) redoes step 3 when a manifest exists, and otherwise deletes
leftover `.cleaned` files: a crash before the commit point leaves the old segments, a crash
after it the new ones, and never a mix.

Output segments are named, as Kafka names its cleaned segments, by the offset their first
record had when it was written, so names stay in order and below the active segment's.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fastcoord.storage.crc32c import FRAME_HEADER
from fastcoord.storage.log import SUFFIX, PartitionLog
from fastcoord.storage.native import compaction, crc32c
from fastcoord.storage.segment import MAX_PAYLOAD
from fastcoord.storage.swap import CLEANED, MANIFEST, finish_swap, fsync_directory, write_manifest

log = logging.getLogger("fastcoord.storage")

CHECKPOINT = "cleaner-offset-checkpoint"  # where the uncleaned part of the log begins


@dataclass(frozen=True, slots=True)
class CleanResult:
    segments_in: int
    bytes_in: int
    records_in: int
    segments_out: int
    bytes_out: int
    records_out: int
    tombstones_dropped: int


class Stopped(Exception):
    """The cleaner was asked to stop during a pass; nothing was changed."""


class DamagedSegment(Exception):
    pass


# -- one pass -------------------------------------------------------------------------------


def clean(
    partition_log: PartitionLog,
    now_s: float,
    delete_retention_ms: int,
    stopping: Callable[[], bool] = lambda: False,
    step: Callable[[str], None] = lambda name: None,
) -> CleanResult | None:
    """Compact the closed segments of `partition_log`; None if it has fewer than one.

    `stopping` is polled between segments (Stopped: nothing changed). `step(name)` is called
    at each stage of the swap, for tests that stop a pass there as a crash would.
    """
    directory = partition_log.path
    if (directory / MANIFEST).exists():
        finish_swap(directory)  # the last pass committed, then failed to finish
    active = partition_log.active_base  # read first: a roll after this only adds segments
    if active is None:
        return None
    closed = [(b, f) for b, f in partition_log.segments() if b < active]
    if not closed:
        return None
    horizon = now_s - delete_retention_ms / 1000
    kept, records_in, dropped = _survivors(closed, horizon, stopping)
    writer = _Writer(directory, partition_log.segment_bytes)
    bytes_in = 0
    try:
        for (base, file), survivors in zip(closed, kept, strict=True):
            if stopping():
                raise Stopped
            data = file.read_bytes()
            bytes_in += len(data)
            mtime = os.stat(file).st_mtime
            view = memoryview(data)
            spans = _spans(file, data)
            for first, last in _runs(survivors):
                writer.add_run(base + first, view, spans[first : last + 1], mtime)
        step("written")
        outputs = writer.finish()
        fsync_directory(directory)
        step("synced")
        write_manifest(directory, [f.name for _, f in closed], outputs)
        step("committed")
        finish_swap(directory, step)
    except BaseException:
        if not (directory / MANIFEST).exists():
            writer.discard()
        raise
    _write_checkpoint(directory, active)
    return CleanResult(
        segments_in=len(closed),
        bytes_in=bytes_in,
        records_in=records_in,
        segments_out=len(outputs),
        bytes_out=writer.bytes_out,
        records_out=writer.records_out,
        tombstones_dropped=dropped,
    )


def _runs(survivors: list[int]) -> list[tuple[int, int]]:
    """The survivors (found last to first) as runs of consecutive indexes, first to last:
    each run is copied as one slice, not frame by frame."""
    runs: list[tuple[int, int]] = []
    for i in reversed(survivors):
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def _spans(file: Path, data: bytes) -> list[tuple[int, int]]:
    spans, _, reason = crc32c.walk_frames(data, 0, MAX_PAYLOAD)
    if reason is not None:
        # Closed segments were checked at start and written by us since: leave it alone
        # for the next start, which names it.
        raise DamagedSegment(f"{file}: {reason}; not compacting this partition")
    return spans


def _survivors(
    closed: list[tuple[int, Path]], horizon: float, stopping: Callable[[], bool]
) -> tuple[list[list[int]], int, int]:
    """Which records of each closed segment to keep (indexes, last first), the records read,
    and the tombstones dropped. Walking the log backwards, the first record met of a key is
    its latest: one look at each record's key decides (storage/compaction.py), and the copy
    after it decodes nothing."""
    seen: set[bytes] = set()
    kept: list[list[int]] = []
    records = dropped = 0
    for _, file in reversed(closed):
        if stopping():
            raise Stopped
        data = file.read_bytes()
        old = os.stat(file).st_mtime < horizon
        spans = _spans(file, data)
        records += len(spans)
        try:
            survivors, gone = compaction.latest_records(data, spans, seen, old)
        except ValueError as exc:
            # The CRC matched, so these bytes are what was written: a bug, not a crash.
            raise DamagedSegment(f"{file}: {exc}; not compacting this partition") from None
        dropped += gone
        kept.append(survivors)
    kept.reverse()
    return kept, records, dropped


class _Writer:
    """Output segments of at most segment_bytes (a larger record gets one of its own)."""

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.files: list[Path] = []
        self._fd: int | None = None
        self._size = 0
        self._mtime = 0.0
        self._buffer: list[memoryview] = []
        self._buffered = 0
        self.bytes_out = 0
        self.records_out = 0

    def add_run(
        self, offset: int, view: memoryview, spans: list[tuple[int, int]], mtime: float
    ) -> None:
        """Consecutive frames of one segment (their payloads at `spans` of `view`), the first
        at `offset`: as `add` of each would write them, a slice per output segment."""
        header = FRAME_HEADER.size
        ends = [end for _, end in spans]
        k = 0
        while k < len(spans):
            start = spans[k][0] - header
            # The frames from k that go in the current output segment: at least frame k
            # (after a roll, if it does not fit), then while the segment has room.
            if self._fd is None or (
                self._size > 0 and self._size + ends[k] - start > self.segment_bytes
            ):
                self._roll(offset + k)
            room = max(self.segment_bytes - self._size, ends[k] - start)
            m = bisect.bisect_right(ends, start + room, lo=k) - 1
            self._take(view[start : ends[m]], m - k + 1, mtime)
            k = m + 1

    def _roll(self, offset: int) -> None:
        self._close()
        path = self.directory / f"{offset:020d}{SUFFIX}{CLEANED}"
        self.files.append(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._size = 0
        self._mtime = 0.0

    def _take(self, frames: memoryview, records: int, mtime: float) -> None:
        self._buffer.append(frames)
        self._buffered += len(frames)
        self._size += len(frames)
        # A tombstone's age is its segment's mtime: an output keeps the newest of its inputs
        # so that no tombstone looks older than it is.
        self._mtime = max(self._mtime, mtime)
        self.bytes_out += len(frames)
        self.records_out += records
        if self._buffered >= 1 << 20:
            self._flush()

    def _flush(self) -> None:
        assert self._fd is not None
        data = b"".join(self._buffer)
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.write(self._fd, view[written:])
        self._buffer.clear()
        self._buffered = 0

    def _close(self) -> None:
        if self._fd is None:
            return
        try:
            self._flush()
            os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = None
        os.utime(self.files[-1], (self._mtime, self._mtime))

    def finish(self) -> list[str]:
        self._close()
        return [f.name[: -len(CLEANED)] for f in self.files]

    def discard(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for f in self.files:
            f.unlink(missing_ok=True)


def _write_checkpoint(directory: Path, offset: int) -> None:
    # Only saves work: without it the next start counts the whole log as dirty.
    temporary = directory / f"{CHECKPOINT}.tmp"
    temporary.write_text(f"{offset}\n")
    os.rename(temporary, directory / CHECKPOINT)


def read_checkpoint(directory: Path) -> int:
    try:
        return int((directory / CHECKPOINT).read_text())
    except (OSError, ValueError):
        return 0


def dirty_ratio(partition_log: PartitionLog) -> tuple[int, float]:
    """(dirty bytes, dirty / all bytes) of the closed segments, as Kafka's cleaner rates a
    log: the part written since the last pass against the whole."""
    active = partition_log.active_base
    if active is None:
        return 0, 0.0
    clean_end = read_checkpoint(partition_log.path)
    if clean_end > active:
        clean_end = 0  # the log was cut below it (log.truncate.damaged): all of it is dirty
    dirty = total = 0
    for base, file in partition_log.segments():
        if base >= active:
            continue
        try:
            size = file.stat().st_size
        except FileNotFoundError:
            continue
        total += size
        if base >= clean_end:
            dirty += size
    return dirty, (dirty / total if total else 0.0)


# -- the thread ------------------------------------------------------------------------------


class LogCleaner:
    """Cleans loaded partitions whose dirty ratio reaches min_cleanable_ratio, checking every
    backoff_ms, in its own thread (the appender's writes do not wait for it)."""

    def __init__(
        self,
        logs: dict[int, PartitionLog],
        backoff_ms: int,
        min_cleanable_ratio: float,
        delete_retention_ms: int,
    ) -> None:
        self.logs = logs
        self.backoff_s = backoff_ms / 1000
        self.min_cleanable_ratio = min_cleanable_ratio
        self.delete_retention_ms = delete_retention_ms
        self._ready: set[int] = set()
        self._lock = threading.Lock()
        self._passing = threading.Lock()  # held through each pass
        self._leaving: set[int] = set()  # unloaded: a pass on one stops
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fastcoord-cleaner", daemon=True)
        self.passes = 0

    def start(self) -> None:
        self._thread.start()

    def loaded(self, partition: int) -> None:
        """`partition` has been read (at start, or when it moved here): from now on it
        may be cleaned."""
        with self._lock:
            self._ready.add(partition)
            self._leaving.discard(partition)

    def unload(self, partition: int) -> None:
        """`partition` leaves this node: it is not cleaned from now on, and a pass under
        way on it is cut short (changing nothing) before this returns. Blocking."""
        with self._lock:
            self._ready.discard(partition)
            self._leaving.add(partition)
        with self._passing:
            pass

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.backoff_s):
            with self._lock:
                ready = sorted(self._ready)
            for partition in ready:
                if self._stop.is_set():
                    return
                with self._passing:
                    if partition in self._ready:
                        self.clean_if_dirty(partition)

    def clean_if_dirty(self, partition: int) -> CleanResult | None:
        partition_log = self.logs[partition]
        dirty, ratio = dirty_ratio(partition_log)
        if dirty == 0 or ratio < self.min_cleanable_ratio:
            return None
        started = time.monotonic()
        try:
            result = clean(
                partition_log,
                time.time(),
                self.delete_retention_ms,
                lambda: self._stop.is_set() or partition in self._leaving,
            )
        except Stopped:
            return None
        except (OSError, DamagedSegment) as exc:
            log.error("cannot compact %s: %s; its log is unchanged", partition_log.path, exc)
            return None
        if result is not None:
            self.passes += 1
            log.info(
                "compacted %s: %d segments, %d records, %d bytes -> %d segments, %d records,"
                " %d bytes (%d tombstones dropped) in %.2f s",
                partition_log.path.name,
                result.segments_in,
                result.records_in,
                result.bytes_in,
                result.segments_out,
                result.records_out,
                result.bytes_out,
                result.tombstones_dropped,
                time.monotonic() - started,
            )
        return result
