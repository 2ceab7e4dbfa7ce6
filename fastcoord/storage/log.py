"""A coordinator partition's log: segment files in one directory, appended and recovered.

DATA_DIR/__consumer_offsets-P/ holds segments named, as Kafka names them, by the offset of
their first record (00000000000000000000.log, ...). Appends go to the last segment, which
is rolled once it reaches log.segment.bytes. Recovery reads every segment in order:

- a damaged frame at the very end of the last segment is the torn tail of a write that a
  crash interrupted: the segment is truncated after the last good record, with a warning
  that names the file and position;
- damage anywhere else is refused (LogCorruption names the file and position), unless the
  operator asked to truncate there: then the log ends at that point, and later segments go.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from fastcoord.core.records import Record
from fastcoord.storage import segment
from fastcoord.storage.swap import fsync_directory, recover_swap

log = logging.getLogger("fastcoord.storage")

SUFFIX = ".log"


class LogCorruption(Exception):
    """A damaged record that is not a torn tail; the message says where and how to go on."""

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(
            f"{path}: damaged record at byte {position} ({reason}), with more data after it. "
            "The server will not drop data silently: restore the file, or start with "
            "--log-truncate-damaged true to cut this log at that point (the records from "
            "there on are lost)."
        )
        self.path = path
        self.position = position


def directory(data_dir: Path, partition: int) -> Path:
    return data_dir / f"__consumer_offsets-{partition}"


class PartitionLog:
    def __init__(self, path: Path, segment_bytes: int) -> None:
        self.path = path
        self.segment_bytes = segment_bytes
        self.next_offset = 0  # offset of the next record appended
        self._active: int | None = None  # descriptor of the last segment, open to append
        self.active_base: int | None = None  # its name; the cleaner leaves it alone
        self._active_size = 0
        self._new_segment = False  # a segment was created since the last sync

    # -- recovery -------------------------------------------------------------------------

    def recover(self, truncate_damaged: bool = False) -> list[Record]:
        """Every good record, in order; repairs a torn tail (see the module docstring)."""
        recover_swap(self.path)  # a compaction's swap interrupted by a crash
        segments = self.segments() if self.path.exists() else []
        records: list[Record] = []
        in_last = 0  # records in the last segment read
        for i, (_base, file) in enumerate(segments):
            data = file.read_bytes()
            scan = segment.scan(data)
            records.extend(scan.records)
            in_last = len(scan.records)
            if scan.damage is None:
                continue
            last = i == len(segments) - 1
            where = f"{file}: damaged record at byte {scan.damage.position} ({scan.damage.reason})"
            if last and scan.damage.at_end:
                log.warning("%s: a torn write; truncating the segment to that point", where)
            elif truncate_damaged:
                log.warning("%s: truncating the log there, as asked; later records are lost", where)
                for _, later in segments[i + 1 :]:
                    later.unlink()
            else:
                raise LogCorruption(file, scan.damage.position, scan.damage.reason)
            with open(file, "r+b") as f:
                f.truncate(scan.valid_bytes)
                os.fsync(f.fileno())
            segments = segments[: i + 1]
            break
        # Compaction leaves gaps in the offsets of earlier segments; the last one is whole.
        self.next_offset = segments[-1][0] + in_last if segments else 0
        if segments:
            self._open(segments[-1][1])
        return records

    def segments(self) -> list[tuple[int, Path]]:
        found = []
        for file in self.path.glob(f"*{SUFFIX}"):
            stem = file.name[: -len(SUFFIX)]
            if stem.isdigit():
                found.append((int(stem), file))
        return sorted(found)

    # -- appending ------------------------------------------------------------------------

    def append(self, data: bytes, records: int) -> None:
        """Write whole frames; on error the segment is cut back to where it was, so a
        failed write never leaves a partial frame before later ones."""
        if self._active is None or (
            self._active_size > 0 and self._active_size + len(data) > self.segment_bytes
        ):
            self._roll()
        assert self._active is not None
        before = self._active_size
        try:
            view = memoryview(data)
            written = 0
            while written < len(view):
                written += os.write(self._active, view[written:])
        except OSError:
            try:
                os.ftruncate(self._active, before)
            except OSError:
                log.exception("%s: cannot cut a failed write back", self.path)
            raise
        self._active_size += len(data)
        self.next_offset += records

    def sync(self) -> None:
        if self._active is not None:
            os.fsync(self._active)
        if self._new_segment:
            fsync_directory(self.path)
            self._new_segment = False

    def close(self) -> None:
        if self._active is not None:
            os.close(self._active)
            self._active = None

    def _roll(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        if self._active is not None:
            os.fsync(self._active)  # a closed segment is complete on disk
            os.close(self._active)
        self._open(self.path / f"{self.next_offset:020d}{SUFFIX}")
        self._new_segment = True

    def _open(self, file: Path) -> None:
        self._active = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._active_size = os.fstat(self._active).st_size
        self.active_base = int(file.name[: -len(SUFFIX)])
