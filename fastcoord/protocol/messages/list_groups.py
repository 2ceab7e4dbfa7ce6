"""ListGroups: request and response, served versions 0-5.

Fields and version ranges follow Kafka's ListGroupsRequest.json and ListGroupsResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import Int16, Int32, Request, Response, String, Struct, V


class ListGroupsRequest(Request):
    API_KEY = ApiKey.LIST_GROUPS
    FLEXIBLE = 3

    states_filter: Annotated[list[String], V("4+")] = []
    types_filter: Annotated[list[String], V("5+")] = []


class ListedGroup(Struct):
    group_id: String = ""
    protocol_type: String = ""
    group_state: Annotated[String, V("4+")] = ""
    group_type: Annotated[String, V("5+")] = ""


class ListGroupsResponse(Response):
    API_KEY = ApiKey.LIST_GROUPS
    FLEXIBLE = 3

    throttle_time_ms: Annotated[Int32, V("1+")] = 0
    error_code: Int16 = 0
    groups: list[ListedGroup] = []
