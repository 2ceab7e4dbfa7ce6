"""OffsetDelete: request and response, served versions 0-0.

Fields and version ranges follow Kafka's OffsetDeleteRequest.json and OffsetDeleteResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out.
"""

from __future__ import annotations

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import Int16, Int32, Request, Response, String, Struct


class OffsetDeleteRequestPartition(Struct):
    partition_index: Int32 = 0


class OffsetDeleteRequestTopic(Struct):
    name: String = ""
    partitions: list[OffsetDeleteRequestPartition] = []


class OffsetDeleteRequest(Request):
    API_KEY = ApiKey.OFFSET_DELETE
    FLEXIBLE = None

    group_id: String = ""
    topics: list[OffsetDeleteRequestTopic] = []


class OffsetDeleteResponsePartition(Struct):
    partition_index: Int32 = 0
    error_code: Int16 = 0


class OffsetDeleteResponseTopic(Struct):
    name: String = ""
    partitions: list[OffsetDeleteResponsePartition] = []


class OffsetDeleteResponse(Response):
    API_KEY = ApiKey.OFFSET_DELETE
    FLEXIBLE = None

    error_code: Int16 = 0
    throttle_time_ms: Int32 = 0
    topics: list[OffsetDeleteResponseTopic] = []
