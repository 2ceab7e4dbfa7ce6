"""Every message, request and response, with its nested structs; the served versions are
fastcoord.protocol.versions.SERVED's."""

from __future__ import annotations

from fastcoord.protocol.messages.api_versions import (
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FinalizedFeatureKey,
    SupportedFeatureKey,
)
from fastcoord.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeAssignment,
    ConsumerGroupDescribedGroup,
    ConsumerGroupDescribeMember,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupDescribeTopicPartitions,
)
from fastcoord.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseAssignment,
    ConsumerGroupHeartbeatResponseTopicPartitions,
)
from fastcoord.protocol.messages.create_acls import (
    AclCreation,
    AclCreationResult,
    CreateAclsRequest,
    CreateAclsResponse,
)
from fastcoord.protocol.messages.delete_acls import (
    DeleteAclsFilter,
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsRequest,
    DeleteAclsResponse,
)
from fastcoord.protocol.messages.delete_groups import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
)
from fastcoord.protocol.messages.describe_acls import (
    AclDescription,
    DescribeAclsRequest,
    DescribeAclsResource,
    DescribeAclsResponse,
)
from fastcoord.protocol.messages.describe_groups import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from fastcoord.protocol.messages.fetch import (
    AbortedTransaction,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ForgottenTopic,
    LeaderIdAndEpoch,
    PartitionData,
    SnapshotId,
)
from fastcoord.protocol.messages.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from fastcoord.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from fastcoord.protocol.messages.join_group import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    JoinGroupResponseMember,
)
from fastcoord.protocol.messages.leave_group import (
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    MemberResponse,
)
from fastcoord.protocol.messages.list_groups import (
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)
from fastcoord.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    ListOffsetsTopicResponse,
)
from fastcoord.protocol.messages.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from fastcoord.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from fastcoord.protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from fastcoord.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from fastcoord.protocol.messages.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from fastcoord.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from fastcoord.protocol.messages.sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)

__all__ = [
    "AbortedTransaction",
    "AclCreation",
    "AclCreationResult",
    "AclDescription",
    "ApiVersion",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "ConsumerGroupDescribeAssignment",
    "ConsumerGroupDescribeMember",
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupDescribeResponse",
    "ConsumerGroupDescribeTopicPartitions",
    "ConsumerGroupDescribedGroup",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatRequestTopicPartitions",
    "ConsumerGroupHeartbeatResponse",
    "ConsumerGroupHeartbeatResponseAssignment",
    "ConsumerGroupHeartbeatResponseTopicPartitions",
    "Coordinator",
    "CreateAclsRequest",
    "CreateAclsResponse",
    "DeletableGroupResult",
    "DeleteAclsFilter",
    "DeleteAclsFilterResult",
    "DeleteAclsMatchingAcl",
    "DeleteAclsRequest",
    "DeleteAclsResponse",
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
    "DescribeAclsRequest",
    "DescribeAclsResource",
    "DescribeAclsResponse",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "DescribedGroup",
    "DescribedGroupMember",
    "EpochEndOffset",
    "FetchPartition",
    "FetchRequest",
    "FetchResponse",
    "FetchTopic",
    "FetchableTopicResponse",
    "FinalizedFeatureKey",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "ForgottenTopic",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupRequest",
    "JoinGroupRequestProtocol",
    "JoinGroupResponse",
    "JoinGroupResponseMember",
    "LeaderIdAndEpoch",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "ListOffsetsPartition",
    "ListOffsetsPartitionResponse",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "ListOffsetsTopic",
    "ListOffsetsTopicResponse",
    "ListedGroup",
    "MemberIdentity",
    "MemberResponse",
    "MetadataRequest",
    "MetadataRequestTopic",
    "MetadataResponse",
    "MetadataResponseBroker",
    "MetadataResponsePartition",
    "MetadataResponseTopic",
    "OffsetCommitRequest",
    "OffsetCommitRequestPartition",
    "OffsetCommitRequestTopic",
    "OffsetCommitResponse",
    "OffsetCommitResponsePartition",
    "OffsetCommitResponseTopic",
    "OffsetDeleteRequest",
    "OffsetDeleteRequestPartition",
    "OffsetDeleteRequestTopic",
    "OffsetDeleteResponse",
    "OffsetDeleteResponsePartition",
    "OffsetDeleteResponseTopic",
    "OffsetFetchRequest",
    "OffsetFetchRequestGroup",
    "OffsetFetchRequestTopic",
    "OffsetFetchRequestTopics",
    "OffsetFetchResponse",
    "OffsetFetchResponseGroup",
    "OffsetFetchResponsePartition",
    "OffsetFetchResponsePartitions",
    "OffsetFetchResponseTopic",
    "OffsetFetchResponseTopics",
    "PartitionData",
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
    "SnapshotId",
    "SupportedFeatureKey",
    "SyncGroupRequest",
    "SyncGroupRequestAssignment",
    "SyncGroupResponse",
]
