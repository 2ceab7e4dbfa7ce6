"""Which live node owns each offsets partition, when nodes come and go.

With ZooKeeper, the elected node keeps a map of the offsets topic's partitions to live
nodes, and every node serves what the map gives it. A change of that map is a coordinator
move for every group of a partition that changed hands: its members meet NOT_COORDINATOR,
find the new owner and wait while it loads the partition. So the map moves as little as
it can: `spread` keeps every partition whose owner is live where it is, unless that owner
holds more than its share, and deals the rest out to the nodes with the fewest. Sans-IO:
a function of the map, the live nodes and the partition count; deterministic, so that
any node computes the same map from the same inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def shares(
    nodes: Iterable[int], partitions: int, holding: Mapping[int, int] | None = None
) -> dict[int, int]:
    """Each node's share of `partitions`, as even as can be. The extra ones go to the
    nodes `holding` the most already (then the lower ids), so that no more moves than
    needed; deterministic, so the same whoever computes it."""
    ordered = sorted(set(nodes))
    if not ordered:
        raise ValueError("no live node to own the partitions")
    have = holding or {}
    base, extra = divmod(partitions, len(ordered))
    first = sorted(ordered, key=lambda n: (-have.get(n, 0), n))[:extra]
    return {node: base + (node in first) for node in ordered}


def spread(current: Mapping[int, int], live: Iterable[int], partitions: int) -> dict[int, int]:
    """The map of partitions 0..partitions-1 to `live` nodes that moves the fewest of
    `current`'s: a partition stays with a live owner that is within its share (the lowest
    partitions kept first), and every other goes, in partition order, to the live node
    furthest below its share (the lowest id among equals)."""
    alive = set(live)
    holding: dict[int, int] = {}
    for partition in range(partitions):
        owner = current.get(partition)
        if owner in alive:
            holding[owner] = holding.get(owner, 0) + 1
    quota = shares(alive, partitions, holding)
    held = dict.fromkeys(quota, 0)
    result: dict[int, int] = {}
    for partition in range(partitions):
        owner = current.get(partition)
        if owner in quota and held[owner] < quota[owner]:
            result[partition] = owner
            held[owner] += 1
    for partition in range(partitions):
        if partition not in result:
            node = min(quota, key=lambda n: (held[n] - quota[n], n))
            result[partition] = node
            held[node] += 1
    return result


def move(current: Mapping[int, int], partition: int, node: int) -> dict[int, int]:
    """`current` with `partition` given to `node` (a move asked for by an operator): the
    shares are not rebalanced, so that only that partition's groups move."""
    if partition not in current:
        raise ValueError(f"no partition {partition} in the map")
    return {**current, partition: node}


def moves(before: Mapping[int, int], after: Mapping[int, int]) -> list[tuple[int, int | None, int]]:
    """(partition, old owner or None, new owner) of each partition that changed hands."""
    return [
        (partition, before.get(partition), owner)
        for partition, owner in sorted(after.items())
        if before.get(partition) != owner
    ]
