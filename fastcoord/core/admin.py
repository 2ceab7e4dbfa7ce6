"""DescribeGroups, ListGroups and DeleteGroups: what admin tools see and may remove.

Follows Kafka's GroupCoordinator.handleDescribeGroup / handleListGroups /
handleDeleteGroups and GroupMetadata.summary. A group that does not exist is described as
Dead with no error (DescribeGroups v0-5); only an Empty group can be deleted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastcoord.core.group import Group
from fastcoord.core.records import GroupMetadataKey, OffsetCommitKey, Record
from fastcoord.core.result import Call, Result
from fastcoord.core.state import DEAD, EMPTY, STABLE
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)

if TYPE_CHECKING:
    from fastcoord.core.coordinator import Coordinator

# The operations a client may perform on a group (AclOperation codes READ=3, DELETE=6,
# DESCRIBE=8), as a bit field; there are no ACLs, so every client may do all three.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
NOT_REQUESTED = -(2**31)
GROUP_TYPE = "classic"


def describe_groups(co: Coordinator, call: Call, req: DescribeGroupsRequest) -> None:
    handle, result = call.handle, call.result
    operations = (
        GROUP_AUTHORIZED_OPERATIONS if req.include_authorized_operations else (NOT_REQUESTED)
    )
    described = []
    for group_id in req.groups:
        error = co.group_status_error(group_id, req)
        group = co.groups.get(group_id) if error is None else None
        if error is not None:
            described.append(DescribedGroup(error_code=error, group_id=group_id))
        elif group is None or group.is_(DEAD):
            described.append(
                DescribedGroup(
                    group_id=group_id,
                    group_state=str(DEAD),
                    authorized_operations=operations,
                )
            )
        else:
            described.append(_summary(group, operations))
    result.respond(handle, DescribeGroupsResponse(groups=described))


def _summary(group: Group, operations: int) -> DescribedGroup:
    # Metadata and assignments are shown only when they are settled: in Stable.
    stable = group.is_(STABLE)
    protocol = group.protocol_name or ""
    return DescribedGroup(
        group_id=group.group_id,
        group_state=str(group.state),
        protocol_type=group.protocol_type or "",
        protocol_data=protocol if stable else "",
        members=[
            DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata(protocol) if stable else b"",
                member_assignment=m.assignment if stable else b"",
            )
            for m in group.members.values()
        ],
        authorized_operations=operations,
    )


def list_groups(co: Coordinator, call: Call, req: ListGroupsRequest) -> None:
    handle, version, result = call.handle, call.version, call.result
    if not co.active:
        result.respond(handle, ListGroupsResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE))
        return
    states = {s.lower() for s in req.states_filter} if version >= 4 else set()
    types = {t.lower() for t in req.types_filter} if version >= 5 else set()
    error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if co.loading_partitions else ErrorCode.NONE
    listed = [
        ListedGroup(
            group_id=group.group_id,
            protocol_type=group.protocol_type or "",
            group_state=str(group.state),
            group_type=GROUP_TYPE,
        )
        for group in co.groups.values()
        if not group.is_(DEAD)
        and (not states or str(group.state).lower() in states)
        and (not types or GROUP_TYPE in types)
    ]
    result.respond(handle, ListGroupsResponse(error_code=error, groups=listed))


def delete_groups(co: Coordinator, call: Call, req: DeleteGroupsRequest) -> None:
    handle, now_ms, result = call.handle, call.now_ms, call.result
    from fastcoord.core.offsets import storage_error

    errors: dict[str, ErrorCode] = {}
    records: list[Record] = []
    for group_id in req.groups_names:
        error = co.group_status_error(group_id, req)
        group = co.groups.get(group_id) if error is None else None
        if error is not None:
            errors[group_id] = error
        elif group is None or group.is_(DEAD):
            errors[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
        elif not group.is_(EMPTY):
            errors[group_id] = ErrorCode.NON_EMPTY_GROUP
        else:
            errors[group_id] = ErrorCode.NONE
            records.extend(_tombstones(group))
            group.transition_to(DEAD, now_ms, "deleted")

    def respond(result: Result) -> None:
        results = [DeletableGroupResult(group_id, err) for group_id, err in errors.items()]
        result.respond(handle, DeleteGroupsResponse(results=results))

    if not records:
        respond(result)
        return

    def stored(error: ErrorCode, now_ms: int, result: Result) -> None:
        for group_id, err in errors.items():
            group = co.groups.get(group_id)
            if err != ErrorCode.NONE or group is None:
                continue
            if error == ErrorCode.NONE:
                for record in _tombstones(group):
                    co.replay(record, now_ms)
            else:
                errors[group_id] = storage_error(error)
            co.remove_group_if_dead(group)
        respond(result)

    co.append(result, records, stored)


def _tombstones(group: Group) -> list[Record]:
    return [
        *(Record(OffsetCommitKey(group.group_id, t, p), None) for t, p in sorted(group.offsets)),
        Record(GroupMetadataKey(group.group_id), None),
    ]


def remove_empty_group(co: Coordinator, group: Group, now_ms: int, result: Result) -> None:
    """An Empty group with no offsets left is removed, with a tombstone for its metadata."""
    if not (
        group.is_(EMPTY) and not group.offsets and not group.members and not group.pending_members
    ):
        return
    group.transition_to(DEAD, now_ms, "empty with no offsets")
    co.remove_group_if_dead(group)

    def stored(error: ErrorCode, now_ms: int, result: Result) -> None:
        return

    co.append(result, [Record(GroupMetadataKey(group.group_id), None)], stored)
