"""OffsetFetch: request and response, served versions 0-9.

Fields and version ranges follow Kafka's OffsetFetchRequest.json and OffsetFetchResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import (
    Bool,
    Int16,
    Int32,
    Int64,
    Request,
    Response,
    String,
    Struct,
    V,
)


class OffsetFetchRequestTopic(Struct):
    name: Annotated[String, V("0-7")] = ""
    partition_indexes: Annotated[list[Int32], V("0-7")] = []


class OffsetFetchRequestTopics(Struct):
    name: Annotated[String, V("8-9")] = ""
    partition_indexes: Annotated[list[Int32], V("8+")] = []


class OffsetFetchRequestGroup(Struct):
    group_id: Annotated[String, V("8+")] = ""
    member_id: Annotated[String | None, V("9+", nullable="9+")] = None
    member_epoch: Annotated[Int32, V("9+")] = -1
    topics: Annotated[list[OffsetFetchRequestTopics] | None, V("8+", nullable="8+")] = []


class OffsetFetchRequest(Request):
    API_KEY = ApiKey.OFFSET_FETCH
    FLEXIBLE = 6

    group_id: Annotated[String, V("0-7")] = ""
    topics: Annotated[list[OffsetFetchRequestTopic] | None, V("0-7", nullable="2-7")] = []
    groups: Annotated[list[OffsetFetchRequestGroup], V("8+")] = []
    require_stable: Annotated[Bool, V("7+")] = False


class OffsetFetchResponsePartition(Struct):
    partition_index: Annotated[Int32, V("0-7")] = 0
    committed_offset: Annotated[Int64, V("0-7")] = 0
    committed_leader_epoch: Annotated[Int32, V("5-7")] = -1
    metadata: Annotated[String | None, V("0-7", nullable="0-7")] = ""
    error_code: Annotated[Int16, V("0-7")] = 0


class OffsetFetchResponseTopic(Struct):
    name: Annotated[String, V("0-7")] = ""
    partitions: Annotated[list[OffsetFetchResponsePartition], V("0-7")] = []


class OffsetFetchResponsePartitions(Struct):
    partition_index: Annotated[Int32, V("8+")] = 0
    committed_offset: Annotated[Int64, V("8+")] = 0
    committed_leader_epoch: Annotated[Int32, V("8+")] = -1
    metadata: Annotated[String | None, V("8+", nullable="8+")] = ""
    error_code: Annotated[Int16, V("8+")] = 0


class OffsetFetchResponseTopics(Struct):
    name: Annotated[String, V("8-9")] = ""
    partitions: Annotated[list[OffsetFetchResponsePartitions], V("8+")] = []


class OffsetFetchResponseGroup(Struct):
    group_id: Annotated[String, V("8+")] = ""
    topics: Annotated[list[OffsetFetchResponseTopics], V("8+")] = []
    error_code: Annotated[Int16, V("8+")] = 0


class OffsetFetchResponse(Response):
    API_KEY = ApiKey.OFFSET_FETCH
    FLEXIBLE = 6

    throttle_time_ms: Annotated[Int32, V("3+")] = 0
    topics: Annotated[list[OffsetFetchResponseTopic], V("0-7")] = []
    error_code: Annotated[Int16, V("2-7")] = 0
    groups: Annotated[list[OffsetFetchResponseGroup], V("8+")] = []
