"""Heartbeat: request and response, served versions 0-4.

Fields and version ranges follow Kafka's HeartbeatRequest.json and HeartbeatResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import Int16, Int32, Request, Response, String, V


class HeartbeatRequest(Request):
    API_KEY = ApiKey.HEARTBEAT
    FLEXIBLE = 4

    group_id: String = ""
    generation_id: Int32 = 0
    member_id: String = ""
    group_instance_id: Annotated[String | None, V("3+", nullable="3+")] = None


class HeartbeatResponse(Response):
    API_KEY = ApiKey.HEARTBEAT
    FLEXIBLE = 4

    throttle_time_ms: Annotated[Int32, V("1+")] = 0
    error_code: Int16 = 0
