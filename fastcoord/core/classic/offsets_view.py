"""Classic groups as the offset manager sees them (Kafka's ClassicGroup.validateOffset*).

A commit names a member and generation, checked against the group; a member's commit
counts as a sign of life and restarts its session. A commit with no member (generation -1)
is a "simple" commit, allowed only while the group is Empty, and creates the group if it
is not there. Offsets of an Empty group expire counting from when it became empty (from
each commit, for a group that never had members); while it has members, only offsets of
topics none of them subscribes to expire (KIP-496).
"""

from __future__ import annotations

from collections.abc import Callable

from fastcoord.core.classic.session import schedule_session, validate_current_member
from fastcoord.core.classic.subscriptions import subscribed_topics
from fastcoord.core.group import Group
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.offset_manager import Expiration
from fastcoord.core.state import COMPLETING_REBALANCE, DEAD, EMPTY
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode


def _never(topic: str) -> bool:
    return False


def _always(topic: str) -> bool:
    return True


class ClassicGroupView:
    def __init__(self, gm: GroupManager) -> None:
        self.gm = gm

    def validate_offset_commit(self, batch: OffsetCommitBatch, now_ms: int) -> ErrorCode | None:
        gm = self.gm
        generation, member_id = batch.generation_id, batch.member_id
        group = gm.groups.get(batch.group_id)
        if group is None:
            if generation >= 0:
                # A commit from an old generation of a group that is gone.
                return ErrorCode.ILLEGAL_GENERATION
            # A "simple" commit: the group does not use Kafka for membership.
            group = gm.get_or_create_group(batch.group_id, now_ms)
        error = _validate_commit(group, generation, member_id, batch.group_instance_id)
        if error is not None:
            return error
        if not (generation < 0 and group.is_(EMPTY)):
            if group.is_(COMPLETING_REBALANCE):
                # The member has its JoinGroup answer but not yet its assignment.
                return ErrorCode.REBALANCE_IN_PROGRESS
            schedule_session(gm, group, group.get(member_id), now_ms)
        return None

    def offsets_visible(self, group_id: str) -> bool:
        group = self.gm.groups.get(group_id)
        return group is not None and not group.is_(DEAD)

    def validate_offset_delete(self, group_id: str) -> ErrorCode | Callable[[str], bool]:
        group = self.gm.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.is_(EMPTY):
            return _never
        if group.protocol_type != "consumer":
            return ErrorCode.NON_EMPTY_GROUP
        subscribed = subscribed_topics(group)
        if subscribed is None:
            return _always
        return subscribed.__contains__

    def ensure_group(self, group_id: str, now_ms: int) -> None:
        self.gm.get_or_create_group(group_id, now_ms)

    def offset_expiration(self, group_id: str) -> Expiration | None:
        group = self.gm.groups.get(group_id)
        if group is None or group.is_(DEAD):
            return None
        if group.is_(EMPTY):
            return Expiration(group.state_timestamp_ms if group.protocol_type else None, _always)
        subscribed = subscribed_topics(group)
        if subscribed is None:
            return None
        return Expiration(None, lambda topic: topic not in subscribed)


def _validate_commit(
    group: Group, generation: int, member_id: str, instance_id: str | None
) -> ErrorCode | None:
    if group.is_(DEAD):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation >= 0 or member_id != "" or instance_id is not None:
        error = validate_current_member(group, member_id, instance_id)
        if error is not None:
            return error
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return None
    if not group.is_(EMPTY):
        # Once a group has members, only they may commit.
        return ErrorCode.UNKNOWN_MEMBER_ID
    return None
