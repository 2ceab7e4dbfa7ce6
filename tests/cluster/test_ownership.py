"""The map of offsets partitions to live nodes: every partition owned by a live node, the
shares even, and the fewest partitions moved when nodes come and go."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastcoord.cluster.ownership import move, moves, spread

NODES = st.sets(st.integers(0, 9), min_size=1, max_size=6)


@st.composite
def situations(draw: st.DrawFn) -> tuple[dict[int, int], set[int], int]:
    partitions = draw(st.integers(1, 60))
    owners = draw(st.lists(st.integers(0, 9) | st.none(), min_size=partitions, max_size=partitions))
    current = {p: o for p, o in enumerate(owners) if o is not None}
    return current, draw(NODES), partitions


def kept_at_most(current: dict[int, int], live: set[int], partitions: int) -> int:
    """The most partitions any even map can leave with their owners: each live node keeps
    up to the base share, and as many as there are extra partitions keep one more, if
    they hold that many."""
    holding = Counter(o for p, o in current.items() if o in live and p < partitions)
    base, extra = divmod(partitions, len(live))
    over = sum(1 for n in live if holding[n] > base)
    return sum(min(holding[n], base) for n in live) + min(extra, over)


@given(situations())
def test_every_partition_has_a_live_owner_and_the_shares_are_even(
    situation: tuple[dict[int, int], set[int], int],
) -> None:
    current, live, partitions = situation
    result = spread(current, live, partitions)
    assert sorted(result) == list(range(partitions))
    assert set(result.values()) <= live
    counts = Counter(result.values())
    loads = [counts.get(n, 0) for n in live]
    assert max(loads) - min(loads) <= 1


@given(situations())
def test_the_fewest_partitions_move(situation: tuple[dict[int, int], set[int], int]) -> None:
    current, live, partitions = situation
    result = spread(current, live, partitions)
    kept = sum(1 for p, o in result.items() if current.get(p) == o)
    assert kept == kept_at_most(current, live, partitions)
    assert spread(result, live, partitions) == result  # nothing more to move


@given(situations(), st.integers(0, 9))
def test_a_node_that_leaves_moves_only_its_own_partitions(
    situation: tuple[dict[int, int], set[int], int], leaving: int
) -> None:
    _, live, partitions = situation
    before = spread(situation[0], live | {leaving}, partitions)
    if live - {leaving}:
        after = spread(before, live - {leaving}, partitions)
        assert all(old == leaving for _, old, _ in moves(before, after))


@given(situations(), st.integers(10, 12))
def test_a_node_that_joins_only_takes(
    situation: tuple[dict[int, int], set[int], int], joining: int
) -> None:
    current, live, partitions = situation
    before = spread(current, live, partitions)
    after = spread(before, live | {joining}, partitions)
    assert all(new == joining for _, _, new in moves(before, after))


def test_a_fixed_case() -> None:
    # Shares 2, 2, 1 (the extras to the lower ids, nobody holding anything yet); each
    # partition to the node furthest below its share.
    three = spread({}, {1, 2, 3}, 5)
    assert three == {0: 1, 1: 2, 2: 1, 3: 2, 4: 3}
    # Node 2 leaves: node 1 holds the most, so it takes the extra share (3, and 3's 2);
    # only node 2's partitions move.
    two = spread(three, {1, 3}, 5)
    assert two == {0: 1, 1: 1, 2: 1, 3: 3, 4: 3}
    assert moves(three, two) == [(1, 2, 1), (3, 2, 3)]
    assert moves({0: 1, 1: 2}, {0: 1, 1: 3}) == [(1, 2, 3)]
    assert move({0: 1, 1: 2}, 1, 5) == {0: 1, 1: 5}
    with pytest.raises(ValueError):
        move({0: 1}, 3, 1)
    with pytest.raises(ValueError):
        spread({}, set(), 3)
