"""ListOffsets: request and response, served versions 1-7.

Fields and version ranges follow Kafka's ListOffsetsRequest.json and ListOffsetsResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import (
    Int8,
    Int16,
    Int32,
    Int64,
    Request,
    Response,
    String,
    Struct,
    V,
)


class ListOffsetsPartition(Struct):
    partition_index: Int32 = 0
    current_leader_epoch: Annotated[Int32, V("4+")] = -1
    timestamp: Int64 = 0


class ListOffsetsTopic(Struct):
    name: String = ""
    partitions: list[ListOffsetsPartition] = []


class ListOffsetsRequest(Request):
    API_KEY = ApiKey.LIST_OFFSETS
    FLEXIBLE = 6

    replica_id: Int32 = 0
    isolation_level: Annotated[Int8, V("2+")] = 0
    topics: list[ListOffsetsTopic] = []


class ListOffsetsPartitionResponse(Struct):
    partition_index: Int32 = 0
    error_code: Int16 = 0
    timestamp: Annotated[Int64, V("1+")] = -1
    offset: Annotated[Int64, V("1+")] = -1
    leader_epoch: Annotated[Int32, V("4+")] = -1


class ListOffsetsTopicResponse(Struct):
    name: String = ""
    partitions: list[ListOffsetsPartitionResponse] = []


class ListOffsetsResponse(Response):
    API_KEY = ApiKey.LIST_OFFSETS
    FLEXIBLE = 6

    throttle_time_ms: Annotated[Int32, V("2+")] = 0
    topics: list[ListOffsetsTopicResponse] = []
