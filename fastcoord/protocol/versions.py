"""The one table of served APIs and versions; the ApiVersions response is built from it.

Ranges are those of docs/protocol.md. Produce is advertised only so that librdkafka
enables the message format its Fetch needs; every Produce is refused (server/broker.py):
fastcoord is a group coordinator whose topics are always empty.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    ProduceRequest,
    ProduceResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from fastcoord.protocol.schema import Request, Response


@dataclass(frozen=True)
class Api:
    key: ApiKey
    min_version: int
    max_version: int
    request: type[Request]
    response: type[Response]

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


SERVED: dict[int, Api] = {
    api.key: api
    for api in (
        Api(ApiKey.PRODUCE, 3, 8, ProduceRequest, ProduceResponse),
        Api(ApiKey.FETCH, 4, 12, FetchRequest, FetchResponse),
        Api(ApiKey.LIST_OFFSETS, 1, 7, ListOffsetsRequest, ListOffsetsResponse),
        Api(ApiKey.METADATA, 0, 12, MetadataRequest, MetadataResponse),
        Api(ApiKey.OFFSET_COMMIT, 0, 9, OffsetCommitRequest, OffsetCommitResponse),
        Api(ApiKey.OFFSET_FETCH, 0, 9, OffsetFetchRequest, OffsetFetchResponse),
        Api(ApiKey.FIND_COORDINATOR, 0, 6, FindCoordinatorRequest, FindCoordinatorResponse),
        Api(ApiKey.JOIN_GROUP, 0, 9, JoinGroupRequest, JoinGroupResponse),
        Api(ApiKey.HEARTBEAT, 0, 4, HeartbeatRequest, HeartbeatResponse),
        Api(ApiKey.LEAVE_GROUP, 0, 5, LeaveGroupRequest, LeaveGroupResponse),
        Api(ApiKey.SYNC_GROUP, 0, 5, SyncGroupRequest, SyncGroupResponse),
        Api(ApiKey.DESCRIBE_GROUPS, 0, 5, DescribeGroupsRequest, DescribeGroupsResponse),
        Api(ApiKey.LIST_GROUPS, 0, 5, ListGroupsRequest, ListGroupsResponse),
        Api(ApiKey.SASL_HANDSHAKE, 0, 1, SaslHandshakeRequest, SaslHandshakeResponse),
        Api(ApiKey.API_VERSIONS, 0, 4, ApiVersionsRequest, ApiVersionsResponse),
        Api(ApiKey.DESCRIBE_ACLS, 0, 3, DescribeAclsRequest, DescribeAclsResponse),
        Api(ApiKey.CREATE_ACLS, 0, 3, CreateAclsRequest, CreateAclsResponse),
        Api(ApiKey.DELETE_ACLS, 0, 3, DeleteAclsRequest, DeleteAclsResponse),
        Api(ApiKey.SASL_AUTHENTICATE, 0, 2, SaslAuthenticateRequest, SaslAuthenticateResponse),
        Api(ApiKey.DELETE_GROUPS, 0, 2, DeleteGroupsRequest, DeleteGroupsResponse),
        Api(ApiKey.OFFSET_DELETE, 0, 0, OffsetDeleteRequest, OffsetDeleteResponse),
        Api(
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            0,
            1,
            ConsumerGroupHeartbeatRequest,
            ConsumerGroupHeartbeatResponse,
        ),
        Api(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            0,
            1,
            ConsumerGroupDescribeRequest,
            ConsumerGroupDescribeResponse,
        ),
    )
}


def api_versions_response(error_code: int = ErrorCode.NONE) -> ApiVersionsResponse:
    """The ApiVersions answer: every served API with its range, in API key order."""
    return ApiVersionsResponse(
        error_code=error_code,
        api_keys=[
            ApiVersion(api_key=a.key, min_version=a.min_version, max_version=a.max_version)
            for a in sorted(SERVED.values(), key=lambda a: a.key)
        ],
    )
