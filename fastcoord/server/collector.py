"""The garbage collector, kept from pausing a process that holds 100k members: the
coordinator, and each loadtest worker.

Members, groups, offsets and connections are a million long-lived objects at that scale,
and Python's full collections walk all of them: 150-300 ms with nothing to collect, during
which no request is answered. Once a second this freezes what exists (`gc.freeze`), so the
collector's automatic runs only walk what the last second allocated. Frozen objects that
later become garbage in a reference cycle would be kept, so every `FULL_COLLECTION_S` the
freeze is lifted and one full collection runs, at a time this module chooses and logs,
instead of whenever allocation happens to trigger one.
"""

from __future__ import annotations

import gc
import logging
import time

import trio

log = logging.getLogger("fastcoord.server")

FREEZE_EVERY_S = 1.0
FULL_COLLECTION_S = 600.0


async def run(
    freeze_every_s: float = FREEZE_EVERY_S, full_collection_s: float = FULL_COLLECTION_S
) -> None:
    """Freeze every `freeze_every_s`, collect everything every `full_collection_s`; runs
    until cancelled."""
    last_full = trio.current_time()
    while True:
        gc.freeze()
        await trio.sleep(freeze_every_s)
        if trio.current_time() - last_full >= full_collection_s:
            last_full = trio.current_time()
            full_collection()


def full_collection() -> int:
    """Unfreeze and collect every generation; the number of objects collected."""
    started = time.perf_counter()
    gc.unfreeze()
    collected = gc.collect()
    log.debug(
        "full garbage collection: %d objects collected in %.0f ms",
        collected,
        (time.perf_counter() - started) * 1000,
    )
    return collected
