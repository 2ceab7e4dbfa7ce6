"""A harness for consumer groups: the coordinator in virtual time, with a topic image.

Members are driven as a consumer of the consumer group protocol drives itself: `enter`
(epoch 0), `beat` (its epoch, optionally what it owns), `exit` (-1, or -2 for a static
member). The classic harness's calls stay available beside them. Every record written is
kept, so a test can replay them into a fresh coordinator and compare.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from fastcoord.core.config import GroupConfig
from fastcoord.core.consumer.topics import StaticTopics, topic_id_for
from fastcoord.core.coordinator import Coordinator
from fastcoord.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
)
from tests.core.harness import Harness

Owned = dict[str, list[int]]  # topic name -> partitions


class ConsumerHarness(Harness):
    def __init__(
        self,
        topics: dict[str, int] | None = None,
        config: GroupConfig | None = None,
        start_ms: int = 1_000_000,
        batched: bool = False,
    ) -> None:
        super().__init__(config, start_ms)
        ids = itertools.count(1)
        self.topics = StaticTopics(topics if topics is not None else {"t": 6})
        self.co = Coordinator(
            config or GroupConfig(),
            now_ms=start_ms,
            new_member_id=lambda prefix: f"{prefix}-{next(ids)}",
            topics=self.topics,
        )
        if batched:
            # Target assignments wait for run_assignments, as the server runs them: here
            # after each request (a batch of one) unless a test sends several first.
            self.co.batch_assignments()

    def request(self, request: ConsumerGroupHeartbeatRequest, version: int = 1) -> Any:
        handle = self.send(request, version)
        self.run_assignments()
        return self.answer(handle)

    def run_assignments(self) -> None:
        """The target assignments due, computed and answered (batched mode)."""
        if self.co.assignments_due():
            self.absorb(self.co.run_assignments(self.now))

    def enter(
        self,
        member_id: str,
        topics: list[str] | None = None,
        group_id: str = "g",
        instance_id: str | None = None,
        regex: str | None = None,
        assignor: str | None = None,
        rebalance_ms: int = 30_000,
        version: int = 1,
    ) -> ConsumerGroupHeartbeatResponse:
        answer = self.request(
            ConsumerGroupHeartbeatRequest(
                group_id=group_id,
                member_id=member_id,
                member_epoch=0,
                instance_id=instance_id,
                rebalance_timeout_ms=rebalance_ms,
                subscribed_topic_names=(
                    (topics if topics is not None else ["t"]) if regex is None else None
                ),
                subscribed_topic_regex=regex,
                server_assignor=assignor,
                topic_partitions=[],
            ),
            version,
        )
        assert isinstance(answer, ConsumerGroupHeartbeatResponse)
        return answer

    def beat(
        self,
        member_id: str,
        epoch: int,
        owned: Owned | None = None,
        group_id: str = "g",
        instance_id: str | None = None,
        topics: list[str] | None = None,
    ) -> ConsumerGroupHeartbeatResponse:
        answer = self.request(
            ConsumerGroupHeartbeatRequest(
                group_id=group_id,
                member_id=member_id,
                member_epoch=epoch,
                instance_id=instance_id,
                subscribed_topic_names=topics,
                topic_partitions=None if owned is None else partitions(owned),
            )
        )
        assert isinstance(answer, ConsumerGroupHeartbeatResponse)
        return answer

    def exit(
        self, member_id: str, group_id: str = "g", instance_id: str | None = None, epoch: int = -1
    ) -> ConsumerGroupHeartbeatResponse:
        answer = self.request(
            ConsumerGroupHeartbeatRequest(
                group_id=group_id, member_id=member_id, member_epoch=epoch, instance_id=instance_id
            )
        )
        assert isinstance(answer, ConsumerGroupHeartbeatResponse)
        return answer

    def consumer_group(self, group_id: str = "g") -> Any:
        return self.co.consumer_groups.get(group_id)

    def replayed(self) -> Coordinator:
        """A fresh coordinator rebuilt from every record written so far."""
        fresh = Coordinator(GroupConfig(), now_ms=self.now, topics=self.topics)
        if self.co.group_manager.batches is not None:
            fresh.batch_assignments()
        for record in self.records:
            fresh.replay(record, self.now, loading=True)
        return fresh


def partitions(owned: Owned) -> list[ConsumerGroupHeartbeatRequestTopicPartitions]:
    return [
        ConsumerGroupHeartbeatRequestTopicPartitions(topic_id_for(t), sorted(ps))
        for t, ps in owned.items()
    ]


def assigned(answer: ConsumerGroupHeartbeatResponse, topics: StaticTopics) -> Owned | None:
    """The assignment an answer carries, by topic name; None when it carries none."""
    if answer.assignment is None:
        return None
    out: Owned = {}
    for tp in answer.assignment.topic_partitions:
        found = topics.topic_by_id(tp.topic_id)
        assert found is not None, tp.topic_id
        out[found[0]] = sorted(tp.partitions)
    return out


def tid(name: str) -> uuid.UUID:
    return topic_id_for(name)
