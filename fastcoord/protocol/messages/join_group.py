"""JoinGroup: request and response, served versions 0-9.

Fields and version ranges follow Kafka's JoinGroupRequest.json and JoinGroupResponse.json
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


class JoinGroupRequestProtocol(Struct):
    name: String = ""
    metadata: Bytes = b""


class JoinGroupRequest(Request):
    API_KEY = ApiKey.JOIN_GROUP
    FLEXIBLE = 6

    group_id: String = ""
    session_timeout_ms: Int32 = 0
    rebalance_timeout_ms: Annotated[Int32, V("1+")] = -1
    member_id: String = ""
    group_instance_id: Annotated[String | None, V("5+", nullable="5+")] = None
    protocol_type: String = ""
    protocols: list[JoinGroupRequestProtocol] = []
    reason: Annotated[String | None, V("8+", nullable="8+")] = None


class JoinGroupResponseMember(Struct):
    member_id: String = ""
    group_instance_id: Annotated[String | None, V("5+", nullable="5+")] = None
    metadata: Bytes = b""


class JoinGroupResponse(Response):
    API_KEY = ApiKey.JOIN_GROUP
    FLEXIBLE = 6

    throttle_time_ms: Annotated[Int32, V("2+")] = 0
    error_code: Int16 = 0
    generation_id: Int32 = -1
    protocol_type: Annotated[String | None, V("7+", nullable="7+")] = None
    protocol_name: Annotated[String | None, V(nullable="7+")] = ""
    leader: String = ""
    skip_assignment: Annotated[Bool, V("9+")] = False
    member_id: String = ""
    members: list[JoinGroupResponseMember] = []
