"""Sessions and revocation deadlines, armed after each heartbeat.

A member that stops heartbeating for the session timeout is fenced; a member told to revoke
partitions that has not within its rebalance timeout is fenced too (leave.py fires both
timers). A heartbeat does not touch the timing wheel unless it must: the session deadline
lives in the member table, and the member's timer, when it fires early, re-arms at it.
"""

from __future__ import annotations

from fastcoord.core.consumer import columns
from fastcoord.core.consumer.columns import session_key
from fastcoord.core.consumer.group import ConsumerMember
from fastcoord.core.consumer.reconciliation import MemberState
from fastcoord.core.group_manager import GroupManager


def revocation_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    return ("consumer_revocation", group_id, member_id)


def arm_timers(gm: GroupManager, group_id: str, member_id: str, now_ms: int) -> None:
    """After a heartbeat: the group's subscribed topics are as of the topics there are now;
    the session starts again; a member left revoking gets until its rebalance timeout."""
    group = gm.consumer_groups.get(group_id)
    member = group.members.get(member_id) if group is not None else None
    if group is None or member is None:
        return
    version = gm.topics.version()
    if group.image_version != version:
        group.image_version = version
        columns.sync(gm, group)
    schedule_session(gm, group_id, member, now_ms)
    current = member.current
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if group.revoking_at.get(member_id) != current.member_epoch:
            group.revoking_at[member_id] = current.member_epoch
            gm.schedule(revocation_key(group_id, member_id), now_ms + member.rebalance_timeout_ms)
    elif group.revoking_at.pop(member_id, None) is not None:
        gm.cancel(revocation_key(group_id, member_id))


def schedule_session(gm: GroupManager, group_id: str, member: ConsumerMember, now_ms: int) -> None:
    """The session starts again from now; the timer is moved only when it would fire after
    the new deadline (when it fires early, it re-arms at the deadline)."""
    deadline = now_ms + gm.config.group_consumer_session_timeout_ms
    columns.set_session_deadline(gm, group_id, member.member_id, deadline)
    key = session_key(group_id, member.member_id)
    armed = gm.ctx.deadline(key)
    if armed is None or armed > deadline:
        gm.schedule(key, deadline)
