"""ConsumerGroupDescribe: request and response, versions 0-1.

The DescribeGroups of Kafka's consumer group protocol: epochs, assignor and each member's
current and target assignment by topic id and name. Fields and version ranges follow
Kafka's ConsumerGroupDescribeRequest.json and ConsumerGroupDescribeResponse.json
(clients/src/main/resources/common/message/); both are flexible from version 0, and the
request is the same in both versions.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import field

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.primitives import ZERO_UUID
from fastcoord.protocol.schema import (
    Bool,
    Int8,
    Int16,
    Int32,
    Request,
    Response,
    String,
    Struct,
    Uuid,
    V,
)

# Kafka's MemberType values. v0 has no MemberType: a member decoded at v0 is UNKNOWN.
MEMBER_TYPE_UNKNOWN = -1
MEMBER_TYPE_CLASSIC = 0
MEMBER_TYPE_CONSUMER = 1


class ConsumerGroupDescribeRequest(Request):
    API_KEY = ApiKey.CONSUMER_GROUP_DESCRIBE
    FLEXIBLE = 0

    group_ids: list[String] = []
    include_authorized_operations: Bool = False


class ConsumerGroupDescribeTopicPartitions(Struct):
    topic_id: Uuid = ZERO_UUID
    topic_name: String = ""
    partitions: list[Int32] = []


class ConsumerGroupDescribeAssignment(Struct):
    topic_partitions: list[ConsumerGroupDescribeTopicPartitions] = []


class ConsumerGroupDescribeMember(Struct):
    member_id: String = ""
    instance_id: Annotated[String | None, V(nullable="0+")] = None
    rack_id: Annotated[String | None, V(nullable="0+")] = None
    member_epoch: Int32 = 0
    client_id: String = ""
    client_host: String = ""
    subscribed_topic_names: list[String] = []
    subscribed_topic_regex: Annotated[String | None, V(nullable="0+")] = None
    assignment: ConsumerGroupDescribeAssignment = field(
        default_factory=ConsumerGroupDescribeAssignment
    )
    target_assignment: ConsumerGroupDescribeAssignment = field(
        default_factory=ConsumerGroupDescribeAssignment
    )
    # Ignorable in Kafka: a v0 response drops it rather than failing the request.
    member_type: Annotated[Int8, V("1+")] = MEMBER_TYPE_UNKNOWN


class ConsumerGroupDescribedGroup(Struct):
    error_code: Int16 = 0
    error_message: Annotated[String | None, V(nullable="0+")] = None
    group_id: String = ""
    group_state: String = ""
    group_epoch: Int32 = 0
    assignment_epoch: Int32 = 0
    assignor_name: String = ""
    members: list[ConsumerGroupDescribeMember] = []
    authorized_operations: Int32 = -2147483648


class ConsumerGroupDescribeResponse(Response):
    API_KEY = ApiKey.CONSUMER_GROUP_DESCRIBE
    FLEXIBLE = 0

    throttle_time_ms: Int32 = 0
    groups: list[ConsumerGroupDescribedGroup] = []
