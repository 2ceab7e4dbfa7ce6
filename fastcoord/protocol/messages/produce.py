"""Produce: request and response, served versions 3-8.

fastcoord keeps no records, yet it advertises Produce: librdkafka enables its v2 message
format only for a broker that serves Produce v3 and Fetch v4, and without that feature it
builds Fetch at v0, finds the broker does not serve it, and retries at once, without end: a
core per consumer. Every Produce is answered with an error (server/broker.py).

Fields and version ranges follow Kafka's ProduceRequest.json and ProduceResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out (v9+ is flexible).
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import (
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


class PartitionProduceData(Struct):
    index: Int32 = 0
    records: Annotated[Records | None, V(nullable="0+")] = None


class TopicProduceData(Struct):
    name: String = ""
    partition_data: list[PartitionProduceData] = []


class ProduceRequest(Request):
    API_KEY = ApiKey.PRODUCE
    FLEXIBLE = 9

    transactional_id: Annotated[String | None, V("3+", nullable="3+")] = None
    acks: Int16 = 0
    timeout_ms: Int32 = 0
    topic_data: list[TopicProduceData] = []


class BatchIndexAndErrorMessage(Struct):
    batch_index: Annotated[Int32, V("8+")] = 0
    batch_index_error_message: Annotated[String | None, V("8+", nullable="8+")] = None


class PartitionProduceResponse(Struct):
    index: Int32 = 0
    error_code: Int16 = 0
    base_offset: Int64 = -1
    log_append_time_ms: Annotated[Int64, V("2+")] = -1
    log_start_offset: Annotated[Int64, V("5+")] = -1
    record_errors: Annotated[list[BatchIndexAndErrorMessage], V("8+")] = []
    error_message: Annotated[String | None, V("8+", nullable="8+")] = None


class TopicProduceResponse(Struct):
    name: String = ""
    partition_responses: list[PartitionProduceResponse] = []


class ProduceResponse(Response):
    API_KEY = ApiKey.PRODUCE
    FLEXIBLE = 9

    responses: list[TopicProduceResponse] = []
    throttle_time_ms: Annotated[Int32, V("1+")] = 0
