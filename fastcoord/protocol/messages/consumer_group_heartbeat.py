"""ConsumerGroupHeartbeat: request and response, versions 0-1.

The heartbeat of Kafka's consumer group protocol, where the coordinator assigns partitions
and a member's one request both joins and stays in the group. Fields and version ranges
follow Kafka's ConsumerGroupHeartbeatRequest.json and ConsumerGroupHeartbeatResponse.json
(clients/src/main/resources/common/message/); both are flexible from version 0.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.primitives import ZERO_UUID
from fastcoord.protocol.schema import Int16, Int32, Request, Response, String, Struct, Uuid, V


class ConsumerGroupHeartbeatRequestTopicPartitions(Struct):
    topic_id: Uuid = ZERO_UUID
    partitions: list[Int32] = []


class ConsumerGroupHeartbeatRequest(Request):
    API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT
    FLEXIBLE = 0

    group_id: String = ""
    member_id: String = ""
    member_epoch: Int32 = 0
    # The nullable fields are null when unchanged since the member's last heartbeat.
    instance_id: Annotated[String | None, V(nullable="0+")] = None
    rack_id: Annotated[String | None, V(nullable="0+")] = None
    rebalance_timeout_ms: Int32 = -1
    subscribed_topic_names: Annotated[list[String] | None, V(nullable="0+")] = None
    subscribed_topic_regex: Annotated[String | None, V("1+", nullable="1+")] = None
    server_assignor: Annotated[String | None, V(nullable="0+")] = None
    topic_partitions: Annotated[
        list[ConsumerGroupHeartbeatRequestTopicPartitions] | None, V(nullable="0+")
    ] = None


def changes_nothing(request: ConsumerGroupHeartbeatRequest) -> bool:
    """Every optional field null: the heartbeat of a steady member, which says only that it
    is alive at its epoch (the coordinator may still have news for it)."""
    return (
        request.instance_id is None
        and request.rack_id is None
        and request.rebalance_timeout_ms == -1
        and request.subscribed_topic_names is None
        and request.subscribed_topic_regex is None
        and request.server_assignor is None
        and request.topic_partitions is None
    )


class ConsumerGroupHeartbeatResponseTopicPartitions(Struct):
    topic_id: Uuid = ZERO_UUID
    partitions: list[Int32] = []


class ConsumerGroupHeartbeatResponseAssignment(Struct):
    topic_partitions: list[ConsumerGroupHeartbeatResponseTopicPartitions] = []


class ConsumerGroupHeartbeatResponse(Response):
    API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT
    FLEXIBLE = 0

    throttle_time_ms: Int32 = 0
    error_code: Int16 = 0
    error_message: Annotated[String | None, V(nullable="0+")] = None
    member_id: Annotated[String | None, V(nullable="0+")] = None
    member_epoch: Int32 = 0
    heartbeat_interval_ms: Int32 = 0
    # Null when the assignment has not changed since the member's last heartbeat.
    assignment: Annotated[ConsumerGroupHeartbeatResponseAssignment | None, V(nullable="0+")] = None
