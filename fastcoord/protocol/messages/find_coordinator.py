"""FindCoordinator: request and response, served versions 0-6.

Fields and version ranges follow Kafka's FindCoordinatorRequest.json and
FindCoordinatorResponse.json (clients/src/main/resources/common/message/); fields of
versions fastcoord does not serve are left out.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import Int8, Int16, Int32, Request, Response, String, Struct, V


class FindCoordinatorRequest(Request):
    API_KEY = ApiKey.FIND_COORDINATOR
    FLEXIBLE = 3

    key: Annotated[String, V("0-3")] = ""
    key_type: Annotated[Int8, V("1+")] = 0
    coordinator_keys: Annotated[list[String], V("4+")] = []


class Coordinator(Struct):
    key: Annotated[String, V("4+")] = ""
    node_id: Annotated[Int32, V("4+")] = 0
    host: Annotated[String, V("4+")] = ""
    port: Annotated[Int32, V("4+")] = 0
    error_code: Annotated[Int16, V("4+")] = 0
    error_message: Annotated[String | None, V("4+", nullable="4+")] = ""


class FindCoordinatorResponse(Response):
    API_KEY = ApiKey.FIND_COORDINATOR
    FLEXIBLE = 3

    throttle_time_ms: Annotated[Int32, V("1+")] = 0
    error_code: Annotated[Int16, V("0-3")] = 0
    error_message: Annotated[String | None, V("1-3", nullable="1-3")] = ""
    node_id: Annotated[Int32, V("0-3")] = 0
    host: Annotated[String, V("0-3")] = ""
    port: Annotated[Int32, V("0-3")] = 0
    coordinators: Annotated[list[Coordinator], V("4+")] = []
