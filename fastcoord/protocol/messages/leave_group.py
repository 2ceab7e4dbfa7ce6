"""LeaveGroup: request and response, served versions 0-5.

Fields and version ranges follow Kafka's LeaveGroupRequest.json and LeaveGroupResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import Int16, Int32, Request, Response, String, Struct, V


class MemberIdentity(Struct):
    member_id: Annotated[String, V("3+")] = ""
    group_instance_id: Annotated[String | None, V("3+", nullable="3+")] = None
    reason: Annotated[String | None, V("5+", nullable="5+")] = None


class LeaveGroupRequest(Request):
    API_KEY = ApiKey.LEAVE_GROUP
    FLEXIBLE = 4

    group_id: String = ""
    member_id: Annotated[String, V("0-2")] = ""
    members: Annotated[list[MemberIdentity], V("3+")] = []


class MemberResponse(Struct):
    member_id: Annotated[String, V("3+")] = ""
    group_instance_id: Annotated[String | None, V("3+", nullable="3+")] = ""
    error_code: Annotated[Int16, V("3+")] = 0


class LeaveGroupResponse(Response):
    API_KEY = ApiKey.LEAVE_GROUP
    FLEXIBLE = 4

    throttle_time_ms: Annotated[Int32, V("1+")] = 0
    error_code: Int16 = 0
    members: Annotated[list[MemberResponse], V("3+")] = []
