"""DeleteGroups: request and response, served versions 0-2.

Fields and version ranges follow Kafka's DeleteGroupsRequest.json and DeleteGroupsResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out.
"""

from __future__ import annotations

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import Int16, Int32, Request, Response, String, Struct


class DeleteGroupsRequest(Request):
    API_KEY = ApiKey.DELETE_GROUPS
    FLEXIBLE = 2

    groups_names: list[String] = []


class DeletableGroupResult(Struct):
    group_id: String = ""
    error_code: Int16 = 0


class DeleteGroupsResponse(Response):
    API_KEY = ApiKey.DELETE_GROUPS
    FLEXIBLE = 2

    throttle_time_ms: Int32 = 0
    results: list[DeletableGroupResult] = []
