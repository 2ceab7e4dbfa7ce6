"""What the group interop tests share: the topic, a server that serves it, and the wait for
a group's assignments to settle into one complete, disjoint cover of the topic."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence, Set
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from fastcoord.testing import ServerProcess, fastcoord_server

TOPIC = "events"
PARTITIONS = 12
ALL = frozenset(range(PARTITIONS))


# A server's settings for group tests: TOPIC declared, no initial rebalance delay.
SERVER_ARGS = ("--group-initial-rebalance-delay-ms", "0", "--topic", f"{TOPIC}:{PARTITIONS}")


@contextmanager
def group_server(tmp_path: Path, *args: str) -> Iterator[ServerProcess]:
    """A server with SERVER_ARGS (later flags win)."""
    with fastcoord_server(tmp_path, *SERVER_ARGS, *args) as running:
        yield running


def covers_once(owned: Sequence[Set[int]]) -> bool:
    """Every partition of TOPIC owned by exactly one member."""
    return set().union(*owned) == ALL and sum(len(o) for o in owned) == PARTITIONS


class Owner(Protocol):
    @property
    def owned(self) -> Set[int]: ...


def settled(owners: Sequence[Owner]) -> list[set[int]] | None:
    owned = [set(o.owned) for o in owners]
    return owned if all(owned) and covers_once(owned) else None


def settle(owners: Sequence[Owner], timeout_s: float = 20) -> list[set[int]]:
    """Wait until the owners' assignments cover TOPIC once, disjointly, none empty."""
    deadline = time.monotonic() + timeout_s
    while (owned := settled(owners)) is None:
        if time.monotonic() > deadline:
            raise AssertionError(
                f"assignments did not settle within {timeout_s} s: {[o.owned for o in owners]}"
            )
        time.sleep(0.02)
    return owned
