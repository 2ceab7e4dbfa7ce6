"""The group state machine: five states, one table of valid transitions, one checked move.

Every state change of a group goes through `transition`, which refuses a move the table does
not allow with an error naming the group, both states and why the move was attempted. The
table is Kafka's (GroupMetadata.scala, ClassicGroupState.java): each state lists the states
it may be entered from.

  Empty               no members; offsets may still be committed (simple commits) and expire.
                      Entered when the last member leaves or expires, or at creation.
  PreparingRebalance  waiting for members to (re)join; JoinGroup responses are held until
                      every known member has rejoined or the rebalance timeout passes.
  CompletingRebalance every member has joined; waiting for the leader's SyncGroup assignment.
  Stable              assignment in place; heartbeats keep members alive.
  Dead                no members, no metadata; about to be removed (deleted, or its offsets
                      expired). Nothing leaves Dead.
"""

from __future__ import annotations

import enum


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

# target state -> states it may be entered from
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    EMPTY: frozenset({PREPARING_REBALANCE}),
    PREPARING_REBALANCE: frozenset({STABLE, COMPLETING_REBALANCE, EMPTY}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset({STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD}),
}


class IllegalStateTransition(RuntimeError):
    """A bug: the core tried a move the state table does not allow."""


def transition(group_id: str, current: GroupState, target: GroupState, why: str) -> GroupState:
    """Return `target` if the table allows current -> target, else raise."""
    if current not in VALID_PREVIOUS[target]:
        raise IllegalStateTransition(
            f"group {group_id!r}: cannot move from {current} to {target} ({why}); "
            f"{target} may only be entered from "
            + ", ".join(sorted(str(s) for s in VALID_PREVIOUS[target]))
        )
    return target
