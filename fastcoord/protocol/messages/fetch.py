"""Fetch: request and response, served versions 4-12.

Fields and version ranges follow Kafka's FetchRequest.json and FetchResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import field

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import (
    Int8,
    Int16,
    Int32,
    Int64,
    Records,
    Request,
    Response,
    String,
    Struct,
    V,
)


class FetchPartition(Struct):
    partition: Int32 = 0
    current_leader_epoch: Annotated[Int32, V("9+")] = -1
    fetch_offset: Int64 = 0
    last_fetched_epoch: Annotated[Int32, V("12+")] = -1
    log_start_offset: Annotated[Int64, V("5+")] = -1
    partition_max_bytes: Int32 = 0


class FetchTopic(Struct):
    topic: Annotated[String, V("0-12")] = ""
    partitions: list[FetchPartition] = []


class ForgottenTopic(Struct):
    topic: Annotated[String, V("7-12")] = ""
    partitions: Annotated[list[Int32], V("7+")] = []


class FetchRequest(Request):
    API_KEY = ApiKey.FETCH
    FLEXIBLE = 12

    cluster_id: Annotated[String | None, V("12+", nullable="12+", tag=0, tagged="12+")] = None
    replica_id: Annotated[Int32, V("0-14")] = -1
    max_wait_ms: Int32 = 0
    min_bytes: Int32 = 0
    max_bytes: Annotated[Int32, V("3+")] = 2147483647
    isolation_level: Annotated[Int8, V("4+")] = 0
    session_id: Annotated[Int32, V("7+")] = 0
    session_epoch: Annotated[Int32, V("7+")] = -1
    topics: list[FetchTopic] = []
    forgotten_topics_data: Annotated[list[ForgottenTopic], V("7+")] = []
    rack_id: Annotated[String, V("11+")] = ""


class EpochEndOffset(Struct):
    epoch: Annotated[Int32, V("12+")] = -1
    end_offset: Annotated[Int64, V("12+")] = -1


class LeaderIdAndEpoch(Struct):
    leader_id: Annotated[Int32, V("12+")] = -1
    leader_epoch: Annotated[Int32, V("12+")] = -1


class SnapshotId(Struct):
    end_offset: Int64 = -1
    epoch: Int32 = -1


class AbortedTransaction(Struct):
    producer_id: Annotated[Int64, V("4+")] = 0
    first_offset: Annotated[Int64, V("4+")] = 0


class PartitionData(Struct):
    partition_index: Int32 = 0
    error_code: Int16 = 0
    high_watermark: Int64 = 0
    last_stable_offset: Annotated[Int64, V("4+")] = -1
    log_start_offset: Annotated[Int64, V("5+")] = -1
    diverging_epoch: Annotated[EpochEndOffset, V("12+", tag=0, tagged="12+")] = field(
        default_factory=EpochEndOffset
    )
    current_leader: Annotated[LeaderIdAndEpoch, V("12+", tag=1, tagged="12+")] = field(
        default_factory=LeaderIdAndEpoch
    )
    snapshot_id: Annotated[SnapshotId, V("12+", tag=2, tagged="12+")] = field(
        default_factory=SnapshotId
    )
    aborted_transactions: Annotated[list[AbortedTransaction] | None, V("4+", nullable="4+")] = []
    preferred_read_replica: Annotated[Int32, V("11+")] = -1
    records: Annotated[Records | None, V(nullable="0+")] = b""


class FetchableTopicResponse(Struct):
    topic: Annotated[String, V("0-12")] = ""
    partitions: list[PartitionData] = []


class FetchResponse(Response):
    API_KEY = ApiKey.FETCH
    FLEXIBLE = 12

    throttle_time_ms: Annotated[Int32, V("1+")] = 0
    error_code: Annotated[Int16, V("7+")] = 0
    session_id: Annotated[Int32, V("7+")] = 0
    responses: list[FetchableTopicResponse] = []
