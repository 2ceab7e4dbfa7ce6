"""DescribeGroups and ListGroups: what admin tools see of the groups.

Follows Kafka's GroupCoordinator.handleDescribeGroup / handleListGroups and
GroupMetadata.summary. A group that does not exist, or is a consumer group, is described
as Dead with no error (DescribeGroups v0-5, as Kafka 4 answers them); ListGroups lists
both kinds, each with its type. DeleteGroups, which removes offsets too, is the coordinator's
(cleanup.py).
"""

from __future__ import annotations

from fastcoord.core.group import Group
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.result import Call
from fastcoord.core.state import DEAD, STABLE
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)

# The operations a client may perform on a group (AclOperation codes READ=3, DELETE=6,
# DESCRIBE=8), as a bit field; there are no ACLs, so every client may do all three.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
NOT_REQUESTED = -(2**31)
GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"  # a group of the consumer group protocol


def describe_groups(gm: GroupManager, call: Call, req: DescribeGroupsRequest) -> None:
    handle, result = call.handle, call.result
    operations = (
        GROUP_AUTHORIZED_OPERATIONS if req.include_authorized_operations else (NOT_REQUESTED)
    )
    described = []
    for group_id in req.groups:
        error = gm.group_status_error(group_id, req)
        group = gm.groups.get(group_id) if error is None else None
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


def list_groups(gm: GroupManager, call: Call, req: ListGroupsRequest) -> None:
    handle, version, result = call.handle, call.version, call.result
    error = gm.ctx.status()
    if error == ErrorCode.COORDINATOR_NOT_AVAILABLE:
        result.respond(handle, ListGroupsResponse(error_code=error))
        return
    states = {s.lower() for s in req.states_filter} if version >= 4 else set()
    types = {t.lower() for t in req.types_filter} if version >= 5 else set()
    listed = [
        ListedGroup(
            group_id=group.group_id,
            protocol_type=group.protocol_type or "",
            group_state=str(group.state),
            group_type=GROUP_TYPE,
        )
        for group in gm.groups.values()
        if not group.is_(DEAD)
        and (not states or str(group.state).lower() in states)
        and (not types or GROUP_TYPE in types)
    ]
    listed.extend(
        ListedGroup(
            group_id=group.group_id,
            protocol_type="consumer",
            group_state=str(group.state),
            group_type=CONSUMER_GROUP_TYPE,
        )
        for group in gm.consumer_groups.values()
        if (not states or str(group.state).lower() in states)
        and (not types or CONSUMER_GROUP_TYPE in types)
    )
    result.respond(handle, ListGroupsResponse(error_code=error, groups=listed))
