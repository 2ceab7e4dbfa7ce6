"""DeleteAcls: request and response, served versions 0-3.

Fields and version ranges follow Kafka's DeleteAclsRequest.json and DeleteAclsResponse.json
(clients/src/main/resources/common/message/): version 1 adds the resource pattern type
(before it every filter and ACL is LITERAL, the field's default), version 2 is flexible,
version 3 admits the USER resource type. Kafka 4.0 serves versions 1-3.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import Int8, Int16, Int32, Request, Response, String, Struct, V

LITERAL = 3  # PatternType.LITERAL: what versions without a pattern type mean


class DeleteAclsFilter(Struct):
    resource_type_filter: Int8 = 0
    resource_name_filter: Annotated[String | None, V(nullable="0+")] = None
    pattern_type_filter: Annotated[Int8, V("1+")] = LITERAL
    principal_filter: Annotated[String | None, V(nullable="0+")] = None
    host_filter: Annotated[String | None, V(nullable="0+")] = None
    operation: Int8 = 0
    permission_type: Int8 = 0


class DeleteAclsRequest(Request):
    API_KEY = ApiKey.DELETE_ACLS
    FLEXIBLE = 2

    filters: list[DeleteAclsFilter] = []


class DeleteAclsMatchingAcl(Struct):
    error_code: Int16 = 0
    error_message: Annotated[String | None, V(nullable="0+")] = None
    resource_type: Int8 = 0
    resource_name: String = ""
    pattern_type: Annotated[Int8, V("1+")] = LITERAL
    principal: String = ""
    host: String = ""
    operation: Int8 = 0
    permission_type: Int8 = 0


class DeleteAclsFilterResult(Struct):
    error_code: Int16 = 0
    error_message: Annotated[String | None, V(nullable="0+")] = None
    matching_acls: list[DeleteAclsMatchingAcl] = []


class DeleteAclsResponse(Response):
    API_KEY = ApiKey.DELETE_ACLS
    FLEXIBLE = 2

    throttle_time_ms: Int32 = 0
    filter_results: list[DeleteAclsFilterResult] = []
