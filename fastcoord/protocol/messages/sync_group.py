"""SyncGroup: request and response, served versions 0-5.

Fields and version ranges follow Kafka's SyncGroupRequest.json and SyncGroupResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import Bytes, Int16, Int32, Request, Response, String, Struct, V


class SyncGroupRequestAssignment(Struct):
    member_id: String = ""
    assignment: Bytes = b""


class SyncGroupRequest(Request):
    API_KEY = ApiKey.SYNC_GROUP
    FLEXIBLE = 4

    group_id: String = ""
    generation_id: Int32 = 0
    member_id: String = ""
    group_instance_id: Annotated[String | None, V("3+", nullable="3+")] = None
    protocol_type: Annotated[String | None, V("5+", nullable="5+")] = None
    protocol_name: Annotated[String | None, V("5+", nullable="5+")] = None
    assignments: list[SyncGroupRequestAssignment] = []


class SyncGroupResponse(Response):
    API_KEY = ApiKey.SYNC_GROUP
    FLEXIBLE = 4

    throttle_time_ms: Annotated[Int32, V("1+")] = 0
    error_code: Int16 = 0
    protocol_type: Annotated[String | None, V("5+", nullable="5+")] = None
    protocol_name: Annotated[String | None, V("5+", nullable="5+")] = None
    assignment: Bytes = b""
