"""CRC-32C speed, compiled (_ext/crc32c.pyx: SSE4.2 where the CPU has it, and its slicing-by-8
table forced) against the pure-Python twin (storage/crc32c.py) in the same run.

MB/s = size / time. Inputs are built once at import and the class has no `setup`, for the
reason given in bench_protocol.py (asv#966).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from fastcoord._ext import crc32c as compiled  # type: ignore[attr-defined]
from fastcoord.storage import crc32c as twin

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
