"""The state table: Kafka's valid previous states, and a clear refusal of anything else."""

from __future__ import annotations

import itertools

import pytest

from fastcoord.core.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    VALID_PREVIOUS,
    GroupState,
    IllegalStateTransition,
    transition,
)

KAFKA = {  # ClassicGroupState.validPreviousStates
    PREPARING_REBALANCE: {STABLE, COMPLETING_REBALANCE, EMPTY},
    COMPLETING_REBALANCE: {PREPARING_REBALANCE},
    STABLE: {COMPLETING_REBALANCE},
    DEAD: {STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD},
    EMPTY: {PREPARING_REBALANCE},
}


def test_table_is_kafkas() -> None:
    assert {k: set(v) for k, v in VALID_PREVIOUS.items()} == KAFKA


@pytest.mark.parametrize(("current", "target"), list(itertools.product(GroupState, GroupState)))
def test_every_pair_is_allowed_or_refused_by_the_table(
    current: GroupState, target: GroupState
) -> None:
    if current in KAFKA[target]:
        assert transition("g", current, target, "test") is target
    else:
        with pytest.raises(IllegalStateTransition, match=f"'g': cannot move from {current} "):
            transition("g", current, target, "test")
