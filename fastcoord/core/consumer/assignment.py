"""An assignment: topic id -> partition numbers, the unit every consumer group part speaks.

Topics are named by id (a UUID) as ConsumerGroupHeartbeat names them; partitions are
frozensets so an assignment can be compared, hashed and shared without copying.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

Assignment = Mapping[uuid.UUID, frozenset[int]]

EMPTY: Assignment = {}


def normalise(
    assignment: Mapping[uuid.UUID, frozenset[int] | set[int]],
) -> dict[uuid.UUID, frozenset[int]]:
    """The same assignment without topics that have no partitions, every set frozen."""
    return {t: frozenset(p) for t, p in assignment.items() if p}


def union(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    out = dict(a)
    for topic, partitions in b.items():
        out[topic] = out.get(topic, frozenset()) | partitions
    return normalise(out)


def difference(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    """What `a` has that `b` has not."""
    return normalise({t: p - b.get(t, frozenset()) for t, p in a.items()})


def intersection(a: Assignment, b: Assignment) -> dict[uuid.UUID, frozenset[int]]:
    return normalise({t: p & b[t] for t, p in a.items() if t in b})


def size(assignment: Assignment) -> int:
    return sum(len(p) for p in assignment.values())
