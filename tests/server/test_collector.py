"""The server's garbage-collector policy, in virtual time: what exists is frozen every
second (automatic collections skip it), and a full collection on schedule still frees a
reference cycle that became garbage after it was frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from fastcoord.server import collector


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_a_frozen_cycle_is_kept_until_the_full_collection() -> None:
    ref = cycle()
    gc.freeze()
    gc.collect()
    assert ref() is not None  # frozen: the automatic and the explicit runs skip it
    assert collector.full_collection() >= 2
    assert ref() is None


def test_run_freezes_each_second_and_collects_all_on_schedule() -> None:
    seen: dict[str, object] = {}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            ref = cycle()
            nursery.start_soon(collector.run, 1.0, 3.0)
            await trio.sleep(0.5)
            seen["frozen"] = gc.get_freeze_count()
            gc.collect()
            seen["kept"] = ref() is not None
            await trio.sleep(3.0)  # past the full collection at 3 s
            seen["freed"] = ref() is None
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert seen == {"frozen": seen["frozen"], "kept": True, "freed": True}
    assert isinstance(seen["frozen"], int) and seen["frozen"] > 0
