"""The storage's compiled modules, or their pure-Python twins with FASTCOORD_NO_EXTENSIONS=1.

As fastcoord/core/native.py, with a Protocol per module so that callers are type-checked
against the interface both implementations share (and not against the twin's internals).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

from fastcoord import _accel

if TYPE_CHECKING:
    from fastcoord.core.records import OffsetCommits
    from fastcoord.storage.crc32c import Bytes


class Crc32cModule(Protocol):
    """_ext/crc32c.pyx and fastcoord/storage/crc32c.py."""

    def crc32c(self, data: Bytes, crc: int = 0) -> int: ...

    def walk_frames(
        self, data: bytes, start: int = 0, max_payload: int = 0x7FFFFFFF
    ) -> tuple[list[tuple[int, int]], int, str | None]: ...


crc32c = cast(Crc32cModule, _accel.load("crc32c", "fastcoord.storage.crc32c"))


class OffsetRecordsModule(Protocol):
    """_ext/offset_records.pyx and fastcoord/storage/offset_records.py."""

    def frame_offset_commits(self, commits: OffsetCommits) -> bytes: ...


offset_records = cast(
    OffsetRecordsModule, _accel.load("offset_records", "fastcoord.storage.offset_records")
)


class CompactionModule(Protocol):
    """_ext/compaction.pyx and fastcoord/storage/compaction.py."""

    def latest_records(
        self, data: bytes, spans: list[tuple[int, int]], seen: set[bytes], drop_tombstones: bool
    ) -> tuple[list[int], int]: ...


compaction = cast(CompactionModule, _accel.load("compaction", "fastcoord.storage.compaction"))
