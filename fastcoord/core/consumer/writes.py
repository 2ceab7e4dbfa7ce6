"""Writing and answering: what a ConsumerGroupHeartbeat (or a timer) decided, made so.

The records are replayed into the group at once, so that the next request sees them; the
answer leaves once they, and every write to the group before them, are durable. The events
of a rebalance are reported from the group as it was before and after the replay. Also
the error a heartbeat is refused with: whichever step finds it, nothing is written.
"""

from __future__ import annotations

from fastcoord.core.consumer import columns
from fastcoord.core.consumer.group import ConsumerGroupState
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.offsets import storage_error
from fastcoord.core.records import GroupMetadataKey, Record
from fastcoord.core.result import Result
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import ConsumerGroupHeartbeatResponse


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def error_response(error: HeartbeatError) -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(error_code=error.code, error_message=error.message)


def commit(
    gm: GroupManager,
    result: Result,
    now_ms: int,
    written: list[Record],
    handle: object = None,
    response: ConsumerGroupHeartbeatResponse | None = None,
    group_id: str | None = None,
) -> None:
    """Replay `written` into the groups now, ask for it to be made durable, and answer
    once it is. An answer that writes nothing still reflects its group's records: it waits
    for those not yet durable (an append of nothing completes after every append before
    it), and goes at once when there are none, which is the steady heartbeat's case."""
    unsettled = gm.unsettled_writes
    if not written and (group_id is None or group_id not in unsettled):
        if response is not None:
            result.respond(handle, response)
        return
    groups = {r.key.group for r in written}
    before = {g: _state(gm, g) for g in groups}
    for record in written:
        if isinstance(record.key, GroupMetadataKey):
            continue  # the Empty classic group it deletes has gone with the replay below
        gm.replay_consumer(record, now_ms)
    for g, state in before.items():
        _report(gm, result, now_ms, g, state)
    for g in groups:
        unsettled[g] = unsettled.get(g, 0) + 1
        _sync(gm, g)

    def stored(error: ErrorCode, now_ms: int, result: Result) -> None:
        for g in groups:
            left = unsettled[g] - 1
            if left:
                unsettled[g] = left
            else:
                del unsettled[g]
                _sync(gm, g)
        if response is None:
            return
        if error == ErrorCode.NONE:
            result.respond(handle, response)
        else:
            result.respond(handle, ConsumerGroupHeartbeatResponse(error_code=storage_error(error)))

    gm.append(result, written, stored)


def _sync(gm: GroupManager, group_id: str) -> None:
    group = gm.consumer_groups.get(group_id)
    if group is not None:
        columns.sync(gm, group)


def _state(gm: GroupManager, group_id: str) -> tuple[int, ConsumerGroupState | None]:
    group = gm.consumer_groups.get(group_id)
    return (0, None) if group is None else (group.group_epoch, group.state)


def _report(
    gm: GroupManager,
    result: Result,
    now_ms: int,
    group_id: str,
    before: tuple[int, ConsumerGroupState | None],
) -> None:
    """Events for the event log: a new group epoch starts a rebalance; reaching Stable
    completes the one started. Stable is reached without one too (a static member back
    from its -2 leave at the epoch it had, or a group loaded mid-rebalance): no event."""
    group = gm.consumer_groups.get(group_id)
    if group is None:
        return
    epoch, state = before
    if group.group_epoch > epoch:
        if group.rebalance_started_ms is None:
            group.rebalance_started_ms = now_ms
        gm.ctx.event(
            result,
            now_ms,
            "rebalance_started",
            group_id,
            generation=epoch,
            members=len(group.members),
            reason=f"group epoch {group.group_epoch}",
        )
    started = group.rebalance_started_ms
    if (
        group.state is ConsumerGroupState.STABLE
        and state is not ConsumerGroupState.STABLE
        and started is not None
    ):
        group.rebalance_started_ms = None
        gm.ctx.event(
            result,
            now_ms,
            "rebalance_completed",
            group_id,
            generation=group.group_epoch,
            members=len(group.members),
            duration_ms=now_ms - started,
        )
