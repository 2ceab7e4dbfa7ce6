"""The rebalance: PreparingRebalance to CompletingRebalance (or Empty).

prepareRebalance with InitialDelayedJoin (KIP-134: the first rebalance of an Empty group
waits for more members) or DelayedJoin; the join completes as soon as every known member
has rejoined, or when the rebalance timeout ends it, removing those that did not; then a
new generation, a leader and a protocol, and every waiting JoinGroup is answered.
"""

from __future__ import annotations

from fastcoord.core.classic.records import group_metadata_record
from fastcoord.core.classic.responses import (
    answer_join,
    join_response,
    member_list,
    reset_and_propagate_assignment_error,
)
from fastcoord.core.classic.session import drop_member, schedule_session
from fastcoord.core.group import Group
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.result import Result
from fastcoord.core.state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from fastcoord.protocol.errors import ErrorCode


def maybe_prepare_rebalance(
    gm: GroupManager, group: Group, now_ms: int, result: Result, reason: str
) -> None:
    if group.is_(STABLE) or group.is_(COMPLETING_REBALANCE) or group.is_(EMPTY):
        prepare_rebalance(gm, group, now_ms, result, reason)


def prepare_rebalance(
    gm: GroupManager, group: Group, now_ms: int, result: Result, reason: str
) -> None:
    if group.is_(COMPLETING_REBALANCE):
        reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS, result)
    gm.cancel(("sync", group.group_id, group.generation_id))
    key = ("join", group.group_id)
    if group.is_(EMPTY):
        # KIP-134: the first rebalance waits for more members, extended while they come.
        delay = gm.config.group_initial_rebalance_delay_ms
        group.initial_join = (delay, max(group.rebalance_timeout_ms() - delay, 0))
        gm.schedule(key, now_ms + delay)
    else:
        group.initial_join = None
        gm.schedule(key, now_ms + group.rebalance_timeout_ms())
    old_generation = group.generation_id
    group.transition_to(PREPARING_REBALANCE, now_ms, reason)
    group.rebalance_started_ms = now_ms
    gm.event(
        result,
        now_ms,
        "rebalance_started",
        group,
        generation=old_generation,
        members=len(group.members),
        reason=reason,
    )
    try_complete_join(gm, group, now_ms, result)


def try_complete_join(gm: GroupManager, group: Group, now_ms: int, result: Result) -> None:
    """DelayedJoin.tryComplete: done as soon as every known member has rejoined.

    The initial delayed join never completes early (InitialDelayedJoin.tryComplete).
    """
    if (
        group.is_(PREPARING_REBALANCE)
        and group.initial_join is None
        and group.has_all_members_joined()
    ):
        gm.cancel(("join", group.group_id))
        on_complete_join(gm, group, now_ms, result)


def on_join_timer(gm: GroupManager, group_id: str, now_ms: int, result: Result) -> None:
    group = gm.groups.get(group_id)
    if group is None or not group.is_(PREPARING_REBALANCE):
        return
    if group.initial_join is not None:
        delay, remaining = group.initial_join
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            next_delay = min(gm.config.group_initial_rebalance_delay_ms, remaining)
            group.initial_join = (next_delay, max(remaining - delay, 0))
            gm.schedule(("join", group_id), now_ms + next_delay)
            return
    on_complete_join(gm, group, now_ms, result)


def on_complete_join(gm: GroupManager, group: Group, now_ms: int, result: Result) -> None:
    group.initial_join = None
    for member in group.not_yet_rejoined():
        if not member.is_static:
            gm.event(
                result,
                now_ms,
                "member_removed",
                group,
                member_id=member.member_id,
                reason="did not rejoin within the rebalance timeout",
            )
            drop_member(gm, group, member, result)
    if group.is_(DEAD):
        return
    if group.members and not group.maybe_elect_new_joined_leader():
        # Nobody rejoined: wait another rebalance timeout while sessions expire.
        gm.schedule(("join", group.group_id), now_ms + group.rebalance_timeout_ms())
        return
    group.generation_id += 1
    group.pending_sync_members.clear()
    if not group.members:
        group.protocol_name = None
        group.leader_id = None
        group.transition_to(EMPTY, now_ms, "rebalance completed with no members")
        _rebalance_completed(gm, group, now_ms, result)
        gm.append(result, [group_metadata_record(group, now_ms)], _ignore_store_error)
        return
    group.protocol_name = group.select_protocol()
    group.transition_to(COMPLETING_REBALANCE, now_ms, "every member joined")
    _rebalance_completed(gm, group, now_ms, result)
    members = member_list(group)
    for member in group.members.values():
        leader = group.is_leader(member.member_id)
        answer_join(
            result,
            group,
            member,
            join_response(
                member.awaiting_join_version,
                ErrorCode.NONE,
                member.member_id,
                group,
                members if leader else [],
            ),
        )
        schedule_session(gm, group, member, now_ms)
        member.is_new = False
        group.pending_sync_members.add(member.member_id)
    gm.schedule(
        ("sync", group.group_id, group.generation_id), now_ms + group.rebalance_timeout_ms()
    )


def _rebalance_completed(gm: GroupManager, group: Group, now_ms: int, result: Result) -> None:
    gm.event(
        result,
        now_ms,
        "rebalance_completed",
        group,
        generation=group.generation_id,
        members=len(group.members),
        duration_ms=now_ms - group.rebalance_started_ms,
    )


def _ignore_store_error(error: ErrorCode, now_ms: int, result: Result) -> None:
    # Kafka: if the empty group's metadata is lost, the previous generation comes back at
    # load and times out, which is safe for a group with no active members.
    return
