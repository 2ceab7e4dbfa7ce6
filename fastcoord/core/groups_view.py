"""Every group as the offset manager sees it: classic groups and consumer groups alike.

The offset manager asks one GroupView; this one answers for whichever kind of group the
id names (for commits, it names that kind's check, once for a run of commits to the
group). A consumer group admits a commit from a member at its current epoch
(STALE_MEMBER_EPOCH otherwise), or, while it has no members, from anyone (Kafka's
ConsumerGroup.validateOffsetCommit), and a fetch that names a member must carry its epoch;
its offsets of topics no member subscribes to expire by their commit time, and those of
subscribed topics cannot be deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from fastcoord.core.classic.offsets_view import ClassicGroupView
from fastcoord.core.consumer.group import ConsumerGroup
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.offset_manager import CommitCheck, Expiration
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode


class GroupsView:
    def __init__(self, gm: GroupManager) -> None:
        self.gm = gm
        self.classic = ClassicGroupView(gm)
        # Bound once: building the bound method for each run of commits costs more than
        # the rest of the dispatch.
        self._classic_commit_check: CommitCheck = self.classic.validate_offset_commit

    def offset_commit_check(self, group_id: str) -> CommitCheck:
        group = self.gm.consumer_groups.get(group_id)
        if group is None:
            return self._classic_commit_check
        return partial(_validate_consumer_commit, group)

    def validate_offset_fetch(
        self, group_id: str, member_id: str | None, member_epoch: int
    ) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetFetch: a fetch that names no member (an
        admin client, a classic consumer) is always answered; one that names a member of a
        consumer group must carry its epoch. Classic groups answer every fetch."""
        group = self.gm.consumer_groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    def offsets_visible(self, group_id: str) -> bool:
        return group_id in self.gm.consumer_groups or self.classic.offsets_visible(group_id)

    def validate_offset_delete(self, group_id: str) -> ErrorCode | Callable[[str], bool]:
        group = self.gm.consumer_groups.get(group_id)
        if group is None:
            return self.classic.validate_offset_delete(group_id)
        return group.is_subscribed_to

    def ensure_group(self, group_id: str, now_ms: int) -> None:
        # Every durable commit asks: a classic group already there (an id names one group
        # of either kind) is answered here, without the classic view's call and its own.
        gm = self.gm
        if group_id not in gm.groups and group_id not in gm.consumer_groups:
            self.classic.ensure_group(group_id, now_ms)

    def offset_expiration(self, group_id: str) -> Expiration | None:
        group = self.gm.consumer_groups.get(group_id)
        if group is None:
            return self.classic.offset_expiration(group_id)
        return Expiration(None, lambda topic: not group.is_subscribed_to(topic))


def _validate_consumer_commit(
    group: ConsumerGroup, batch: OffsetCommitBatch, now_ms: int
) -> ErrorCode | None:
    """Kafka's ConsumerGroup.validateOffsetCommit: a CommitCheck once bound to its group."""
    epoch = batch.generation_id
    if epoch < 0 and not group.members:
        return None
    member = group.members.get(batch.member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if epoch != member.member_epoch:
        return ErrorCode.STALE_MEMBER_EPOCH
    return None
