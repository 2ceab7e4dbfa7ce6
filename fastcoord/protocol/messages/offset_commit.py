"""OffsetCommit: request and response, served versions 0-9.

Fields and version ranges follow Kafka's OffsetCommitRequest.json and OffsetCommitResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import Int16, Int32, Int64, Request, Response, String, Struct, V


class OffsetCommitRequestPartition(Struct):
    partition_index: Int32 = 0
    committed_offset: Int64 = 0
    committed_leader_epoch: Annotated[Int32, V("6+")] = -1
    commit_timestamp: Annotated[Int64, V("1")] = -1
    committed_metadata: Annotated[String | None, V(nullable="0+")] = ""


class OffsetCommitRequestTopic(Struct):
    name: Annotated[String, V("0-9")] = ""
    partitions: list[OffsetCommitRequestPartition] = []


class OffsetCommitRequest(Request):
    API_KEY = ApiKey.OFFSET_COMMIT
    FLEXIBLE = 8

    group_id: String = ""
    generation_id_or_member_epoch: Annotated[Int32, V("1+")] = -1
    member_id: Annotated[String, V("1+")] = ""
    group_instance_id: Annotated[String | None, V("7+", nullable="7+")] = None
    retention_time_ms: Annotated[Int64, V("2-4")] = -1
    topics: list[OffsetCommitRequestTopic] = []


class OffsetCommitResponsePartition(Struct):
    partition_index: Int32 = 0
    error_code: Int16 = 0


class OffsetCommitResponseTopic(Struct):
    name: Annotated[String, V("0-9")] = ""
    partitions: list[OffsetCommitResponsePartition] = []


class OffsetCommitResponse(Response):
    API_KEY = ApiKey.OFFSET_COMMIT
    FLEXIBLE = 8

    throttle_time_ms: Annotated[Int32, V("3+")] = 0
    topics: list[OffsetCommitResponseTopic] = []
