"""DescribeGroups: request and response, served versions 0-5.

Fields and version ranges follow Kafka's DescribeGroupsRequest.json and DescribeGroupsResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import (
    Bool,
    Bytes,
    Int16,
    Int32,
    Request,
    Response,
    String,
    Struct,
    V,
)


class DescribeGroupsRequest(Request):
    API_KEY = ApiKey.DESCRIBE_GROUPS
    FLEXIBLE = 5

    groups: list[String] = []
    include_authorized_operations: Annotated[Bool, V("3+")] = False


class DescribedGroupMember(Struct):
    member_id: String = ""
    group_instance_id: Annotated[String | None, V("4+", nullable="4+")] = None
    client_id: String = ""
    client_host: String = ""
    member_metadata: Bytes = b""
    member_assignment: Bytes = b""


class DescribedGroup(Struct):
    error_code: Int16 = 0
    group_id: String = ""
    group_state: String = ""
    protocol_type: String = ""
    protocol_data: String = ""
    members: list[DescribedGroupMember] = []
    authorized_operations: Annotated[Int32, V("3+")] = -2147483648


class DescribeGroupsResponse(Response):
    API_KEY = ApiKey.DESCRIBE_GROUPS
    FLEXIBLE = 5

    throttle_time_ms: Annotated[Int32, V("1+")] = 0
    groups: list[DescribedGroup] = []
