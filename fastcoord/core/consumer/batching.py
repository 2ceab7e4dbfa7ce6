"""The target assignment computed once per batch of heartbeats, not once per heartbeat.

Kafka's coordinator computes a group's new target assignment off the request path: a storm
of joins moves the group epoch, and the assignor runs for the group as it then is, not once
for each join. Here, when the server asks for it (GroupManager.batch_assignments), a
heartbeat that finds its group's target behind the group epoch (a join, a new subscription,
a member gone) writes what it changed of the member, moving the group epoch only if the
target was at it, and waits: the server runs `run` once the heartbeats read together are
handled (the end of its loop turn), which computes each waiting group's target once and
then takes every waiting member its step towards it, in the order they came, with the
answers they would have had one at a time (a member's epoch is the target's). Without the
server's request the core keeps Kafka's order: the assignor runs in the heartbeat.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastcoord.core.consumer.assignment import Assignment
from fastcoord.core.result import Call


@dataclass(slots=True)
class Waiting:
    """A heartbeat whose step towards the target waits for the group's target assignment:
    what that step needs of the request."""

    call: Call
    member_id: str
    owned: Assignment | None  # what the member said it owns, None if it said nothing
    full: bool  # the answer carries the assignment whatever changed (a join, a full request)
    assigned: Assignment  # the member's assignment before this heartbeat


class Batches:
    """Groups whose target assignment is due, with the heartbeats that wait for it, in the
    order they came."""

    __slots__ = ("waiting",)

    def __init__(self) -> None:
        self.waiting: dict[str, list[Waiting]] = {}

    def __bool__(self) -> bool:
        return bool(self.waiting)

    def add(self, group_id: str, waiting: Waiting) -> None:
        queue = self.waiting.get(group_id)
        if queue is None:
            self.waiting[group_id] = [waiting]
        else:
            queue.append(waiting)

    def next(self) -> tuple[str, list[Waiting]]:
        """The group due first and its heartbeats, no longer due."""
        group_id = next(iter(self.waiting))
        return group_id, self.waiting.pop(group_id)
