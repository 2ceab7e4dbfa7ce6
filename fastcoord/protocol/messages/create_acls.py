"""CreateAcls: request and response, served versions 0-3.

Fields and version ranges follow Kafka's CreateAclsRequest.json and CreateAclsResponse.json
(clients/src/main/resources/common/message/): version 1 adds the resource pattern type
(before it every ACL is LITERAL, the field's default), version 2 is flexible, version 3
admits the USER resource type. Kafka 4.0 serves versions 1-3.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import Int8, Int16, Int32, Request, Response, String, Struct, V

LITERAL = 3  # PatternType.LITERAL: what versions without a pattern type mean


class AclCreation(Struct):
    resource_type: Int8 = 0
    resource_name: String = ""
    resource_pattern_type: Annotated[Int8, V("1+")] = LITERAL
    principal: String = ""
    host: String = ""
    operation: Int8 = 0
    permission_type: Int8 = 0


class CreateAclsRequest(Request):
    API_KEY = ApiKey.CREATE_ACLS
    FLEXIBLE = 2

    creations: list[AclCreation] = []


class AclCreationResult(Struct):
    error_code: Int16 = 0
    error_message: Annotated[String | None, V(nullable="0+")] = None


class CreateAclsResponse(Response):
    API_KEY = ApiKey.CREATE_ACLS
    FLEXIBLE = 2

    throttle_time_ms: Int32 = 0
    results: list[AclCreationResult] = []
