"""ConsumerGroupDescribe: what admin tools see of a consumer group (Kafka's
GroupMetadataManager.consumerGroupDescribe).

A group id that names no group, or a classic group, is answered GROUP_ID_NOT_FOUND; a
consumer group is described with its epochs, its assignor, and each member's epoch,
subscription, current assignment and target assignment, topics by id and name.
"""

from __future__ import annotations

from fastcoord.core.admin import GROUP_AUTHORIZED_OPERATIONS, NOT_REQUESTED
from fastcoord.core.consumer.assignment import Assignment
from fastcoord.core.consumer.group import ConsumerGroup
from fastcoord.core.group_manager import GroupManager
from fastcoord.core.result import Call
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ConsumerGroupDescribeAssignment,
    ConsumerGroupDescribedGroup,
    ConsumerGroupDescribeMember,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupDescribeTopicPartitions,
)
from fastcoord.protocol.messages.consumer_group_describe import MEMBER_TYPE_CONSUMER


def consumer_group_describe(
    gm: GroupManager, call: Call, req: ConsumerGroupDescribeRequest
) -> None:
    operations = (
        GROUP_AUTHORIZED_OPERATIONS if req.include_authorized_operations else (NOT_REQUESTED)
    )
    described = []
    for group_id in req.group_ids:
        error = gm.group_status_error(group_id, req)
        group = gm.consumer_groups.get(group_id) if error is None else None
        if error is not None:
            described.append(ConsumerGroupDescribedGroup(error_code=error, group_id=group_id))
        elif group is None:
            message = (
                f"Group {group_id} is not a consumer group."
                if group_id in gm.groups
                else f"Group {group_id} not found."
            )
            described.append(
                ConsumerGroupDescribedGroup(
                    error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                    error_message=message,
                    group_id=group_id,
                )
            )
        else:
            described.append(_described(gm, group, operations))
    call.respond(ConsumerGroupDescribeResponse(groups=described))


def _described(
    gm: GroupManager, group: ConsumerGroup, operations: int
) -> ConsumerGroupDescribedGroup:
    return ConsumerGroupDescribedGroup(
        group_id=group.group_id,
        group_state=str(group.state),
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.preferred_assignor(gm.config.group_consumer_assignors[0]),
        members=[
            ConsumerGroupDescribeMember(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed_topic_names),
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=_assignment(gm, m.current.assigned),
                target_assignment=_assignment(gm, group.target.get(m.member_id, {})),
                member_type=MEMBER_TYPE_CONSUMER,
            )
            for m in group.members.values()
        ],
        authorized_operations=operations,
    )


def _assignment(gm: GroupManager, assignment: Assignment) -> ConsumerGroupDescribeAssignment:
    out = []
    for topic_id, partitions in sorted(assignment.items(), key=lambda item: item[0].int):
        found = gm.topics.topic_by_id(topic_id)
        out.append(
            ConsumerGroupDescribeTopicPartitions(
                topic_id=topic_id,
                topic_name=found[0] if found is not None else "",
                partitions=sorted(partitions),
            )
        )
    return ConsumerGroupDescribeAssignment(topic_partitions=out)
