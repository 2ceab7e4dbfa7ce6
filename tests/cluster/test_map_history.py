"""The audit of a cluster's answers against its map's history catches a partition served by
two nodes, and lets through what a move looks like from outside."""

from __future__ import annotations

import pytest

from tests.interop.map_history import Answer, Version, check_served_once, map_history

# Partition 0 moves from node 1 to node 2 at t=10 (version 1); partition 1 stays on node 1.
HISTORY = [Version(0, 0.0, (1, 1)), Version(1, 10.0, (2, 1))]


def served(node: int, sent: float, received: float, partition: int = 0) -> Answer:
    return Answer(node, "g", partition, sent, received, 0)


def test_a_move_seen_from_outside_passes() -> None:
    answers = [
        served(1, 1, 2),
        served(1, 9, 11),  # asked before the move, answered after it: the old node's
        served(1, 10.5, 10.6),  # the old node has not read the new map yet: nobody else has
        served(2, 10.4, 10.8),  # overlaps the old node's last: either may have come first
        served(2, 12, 13),
        served(1, 12, 13, partition=1),
        Answer(1, "g", 0, 12, 13, 16),  # NOT_COORDINATOR: nothing served
    ]
    assert check_served_once(answers, HISTORY) == {0: [1, 2], 1: [1]}


def test_the_old_node_serving_after_the_new_one_fails() -> None:
    answers = [served(1, 1, 2), served(2, 11, 12), served(1, 12.5, 13)]
    with pytest.raises(AssertionError, match="partition 0 served by node 1"):
        check_served_once(answers, HISTORY)


def test_serving_before_the_map_gave_the_partition_fails() -> None:
    with pytest.raises(AssertionError, match="partition 0 served by node 2"):
        check_served_once([served(2, 5, 6)], HISTORY)


def test_given_back_by_a_later_version_a_node_may_serve_again() -> None:
    history = [*HISTORY, Version(2, 20.0, (1, 1))]
    answers = [served(1, 1, 2), served(2, 11, 12), served(1, 21, 22)]
    assert check_served_once(answers, history) == {0: [1, 2, 1]}
    # ... but not before that version was written.
    with pytest.raises(AssertionError):
        check_served_once([served(1, 1, 2), served(2, 11, 12), served(1, 13, 14)], history)


def test_the_history_is_read_from_the_logs_and_must_be_whole() -> None:
    line = "2026-11-27 20:00:00,000 INFO fastcoord.cluster: "
    line += "ownership map version {} at {}: owners {}\n"
    logs = [line.format(0, 0, "1 1") + line.format(1, 10000, "2 1"), line.format(1, 10000, "2 1")]
    assert map_history(logs) == HISTORY
    with pytest.raises(AssertionError):
        map_history([line.format(0, 1000, "1 1") + line.format(2, 10000, "2 1")])
