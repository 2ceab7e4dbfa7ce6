"""Metadata: request and response, served versions 0-12.

Fields and version ranges follow Kafka's MetadataRequest.json and MetadataResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.primitives import ZERO_UUID
from fastcoord.protocol.schema import Bool, Int16, Int32, Request, Response, String, Struct, Uuid, V


class MetadataRequestTopic(Struct):
    topic_id: Annotated[Uuid, V("10+")] = ZERO_UUID
    name: Annotated[String | None, V(nullable="10+")] = ""


class MetadataRequest(Request):
    API_KEY = ApiKey.METADATA
    FLEXIBLE = 9

    topics: Annotated[list[MetadataRequestTopic] | None, V(nullable="1+")] = []
    allow_auto_topic_creation: Annotated[Bool, V("4+")] = True
    include_cluster_authorized_operations: Annotated[Bool, V("8-10")] = False
    include_topic_authorized_operations: Annotated[Bool, V("8+")] = False


class MetadataResponseBroker(Struct):
    node_id: Int32 = 0
    host: String = ""
    port: Int32 = 0
    rack: Annotated[String | None, V("1+", nullable="1+")] = None


class MetadataResponsePartition(Struct):
    error_code: Int16 = 0
    partition_index: Int32 = 0
    leader_id: Int32 = 0
    leader_epoch: Annotated[Int32, V("7+")] = -1
    replica_nodes: list[Int32] = []
    isr_nodes: list[Int32] = []
    offline_replicas: Annotated[list[Int32], V("5+")] = []


class MetadataResponseTopic(Struct):
    error_code: Int16 = 0
    name: Annotated[String | None, V(nullable="12+")] = ""
    topic_id: Annotated[Uuid, V("10+")] = ZERO_UUID
    is_internal: Annotated[Bool, V("1+")] = False
    partitions: list[MetadataResponsePartition] = []
    topic_authorized_operations: Annotated[Int32, V("8+")] = -2147483648


class MetadataResponse(Response):
    API_KEY = ApiKey.METADATA
    FLEXIBLE = 9

    throttle_time_ms: Annotated[Int32, V("3+")] = 0
    brokers: list[MetadataResponseBroker] = []
    cluster_id: Annotated[String | None, V("2+", nullable="2+")] = None
    controller_id: Annotated[Int32, V("1+")] = -1
    topics: list[MetadataResponseTopic] = []
    cluster_authorized_operations: Annotated[Int32, V("8-10")] = -2147483648
