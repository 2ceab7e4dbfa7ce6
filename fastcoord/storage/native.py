"""The storage's compiled modules, or their pure-Python twins with FASTCOORD_NO_EXTENSIONS=1.

As fastcoord/core/native.py, with a Protocol per module so that callers are type-checked
against the interface both implementations share (and not against the twin's internals).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

from fastcoord import _accel

if TYPE_CHECKING:
    from fastcoord.storage.crc32c import Bytes


class Crc32cModule(Protocol):
    """_ext/crc32c.pyx and fastcoord/storage/crc32c.py."""

    def crc32c(self, data: Bytes, crc: int = 0) -> int: ...

    def walk_frames(
        self, data: bytes, start: int = 0, max_payload: int = 0x7FFFFFFF
    ) -> tuple[list[tuple[int, int]], int, str | None]: ...


crc32c = cast(Crc32cModule, _accel.load("crc32c", "fastcoord.storage.crc32c"))
