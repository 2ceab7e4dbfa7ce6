"""The response Kafka gives a request that failed as a whole, for every served API and
for the consumer group protocol's APIs, defined ahead of being served.

Fault injection answers a request with an error instead of handling it. A client must not
be able to tell that answer from a real broker's, so each response puts the error where
Kafka's `getErrorResponse` puts it (on every partition, every group or coordinator key, or
at the top level, as the API and version allow) and Kafka's placeholders everywhere else:
no generation, no leader, no coordinator node, no offset. The request is one decoded at
`version`: fields the version does not have hold their defaults and are not read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.commit_batch import OffsetCommitAnswer, OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    AclCreationResult,
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerGroupDescribedGroup,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    Coordinator,
    CreateAclsRequest,
    CreateAclsResponse,
    DeletableGroupResult,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchableTopicResponse,
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
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseTopic,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
    PartitionData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicProduceResponse,
)
from fastcoord.protocol.schema import Request, Response
from fastcoord.protocol.versions import SERVED

__all__ = ["error_response", "produce_refused"]

Answer = Response | OffsetCommitAnswer

NO_GENERATION = -1
NO_NODE = -1  # Kafka's Node.noNode(): id -1, host "", port -1
NO_OFFSET = -1
NO_TIMESTAMP = -1
NO_LEADER_EPOCH = -1
NO_REPLICA = -1
FIRST_NULL_PROTOCOL_NAME = 7  # JoinGroup
FIRST_OFFSET_FETCH_TOP_LEVEL_ERROR = 2
FIRST_OFFSET_FETCH_GROUPS = 8
FIRST_FIND_COORDINATOR_KEYS = 4


def error_response(request: Request | OffsetCommitBatch, version: int, code: int) -> Answer:
    """What Kafka answers `request` (decoded at `version`) when all of it fails with
    `code`. An OffsetCommitBatch gets an OffsetCommitAnswer; every other request a Response
    of its API. A type with no builder here (not a served request, nor one of the consumer
    group protocol's) raises TypeError."""
    build = _BUILDERS.get(type(request))
    if build is None:
        raise TypeError(f"no error response for {type(request).__name__}")
    return build(request, version, code)


# -- group membership ---------------------------------------------------------------------


def _join_group(request: JoinGroupRequest, version: int, code: int) -> JoinGroupResponse:
    # Kafka's unknown member id, whatever the request named: an injected MEMBER_ID_REQUIRED
    # hands out no id to join with, as Kafka's own error answer would.
    return JoinGroupResponse(
        error_code=code,
        generation_id=NO_GENERATION,
        protocol_type=None,
        protocol_name=None if version >= FIRST_NULL_PROTOCOL_NAME else "",
        leader="",
        member_id="",
        members=[],
    )


def _sync_group(request: SyncGroupRequest, version: int, code: int) -> SyncGroupResponse:
    return SyncGroupResponse(error_code=code, protocol_type=None, protocol_name=None)


def _heartbeat(request: HeartbeatRequest, version: int, code: int) -> HeartbeatResponse:
    return HeartbeatResponse(error_code=code)


def _leave_group(request: LeaveGroupRequest, version: int, code: int) -> LeaveGroupResponse:
    # v3+ could list each leaving member with the error; Kafka lists none, and the
    # top-level error stands for the whole batch.
    return LeaveGroupResponse(error_code=code, members=[])


# -- the consumer group protocol -----------------------------------------------------------


def _consumer_group_heartbeat(
    request: ConsumerGroupHeartbeatRequest, version: int, code: int
) -> ConsumerGroupHeartbeatResponse:
    # Kafka sets the code alone: no message, no member id, epoch 0 and no assignment.
    return ConsumerGroupHeartbeatResponse(error_code=code, error_message=None)


def _consumer_group_describe(
    request: ConsumerGroupDescribeRequest, version: int, code: int
) -> ConsumerGroupDescribeResponse:
    return ConsumerGroupDescribeResponse(
        groups=[ConsumerGroupDescribedGroup(error_code=code, group_id=g) for g in request.group_ids]
    )


# -- offsets ------------------------------------------------------------------------------


def _offset_commit_batch(batch: OffsetCommitBatch, version: int, code: int) -> OffsetCommitAnswer:
    return OffsetCommitAnswer(batch, error_code=code)


def _offset_commit(request: OffsetCommitRequest, version: int, code: int) -> OffsetCommitResponse:
    # The server decodes commits into batches; a request decoded by the schema codec alone
    # gets the same response, as a Response.
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                t.name,
                [OffsetCommitResponsePartition(p.partition_index, code) for p in t.partitions],
            )
            for t in request.topics
        ]
    )


def _offset_fetch(request: OffsetFetchRequest, version: int, code: int) -> OffsetFetchResponse:
    if version >= FIRST_OFFSET_FETCH_GROUPS:
        return OffsetFetchResponse(
            groups=[
                OffsetFetchResponseGroup(group_id=g.group_id, topics=[], error_code=code)
                for g in request.groups
            ]
        )
    if version >= FIRST_OFFSET_FETCH_TOP_LEVEL_ERROR:
        # Kafka lists no partitions: the top-level error covers them, and a request for all
        # of a group's offsets (null topics) names none to list.
        return OffsetFetchResponse(topics=[], error_code=code)
    # No top-level error before v2: every requested partition carries it.
    return OffsetFetchResponse(
        topics=[
            OffsetFetchResponseTopic(
                t.name,
                [
                    OffsetFetchResponsePartition(
                        partition_index=p,
                        committed_offset=NO_OFFSET,
                        committed_leader_epoch=NO_LEADER_EPOCH,
                        metadata="",
                        error_code=code,
                    )
                    for p in t.partition_indexes
                ],
            )
            for t in request.topics or []
        ]
    )


def _offset_delete(request: OffsetDeleteRequest, version: int, code: int) -> OffsetDeleteResponse:
    return OffsetDeleteResponse(error_code=code, topics=[])


# -- coordinator discovery and group administration ---------------------------------------


def _find_coordinator(
    request: FindCoordinatorRequest, version: int, code: int
) -> FindCoordinatorResponse:
    # Kafka also sends its error's default message; fastcoord has no text for every code,
    # and the field is nullable in every version that has it.
    if version >= FIRST_FIND_COORDINATOR_KEYS:
        return FindCoordinatorResponse(
            coordinators=[
                Coordinator(
                    key=key,
                    node_id=NO_NODE,
                    host="",
                    port=NO_NODE,
                    error_code=code,
                    error_message=None,
                )
                for key in request.coordinator_keys
            ]
        )
    return FindCoordinatorResponse(
        error_code=code, error_message=None, node_id=NO_NODE, host="", port=NO_NODE
    )


def _describe_groups(
    request: DescribeGroupsRequest, version: int, code: int
) -> DescribeGroupsResponse:
    return DescribeGroupsResponse(
        groups=[DescribedGroup(error_code=code, group_id=g) for g in request.groups]
    )


def _list_groups(request: ListGroupsRequest, version: int, code: int) -> ListGroupsResponse:
    return ListGroupsResponse(error_code=code, groups=[])


def _delete_groups(request: DeleteGroupsRequest, version: int, code: int) -> DeleteGroupsResponse:
    return DeleteGroupsResponse(
        results=[DeletableGroupResult(g, code) for g in request.groups_names]
    )


def _api_versions(request: ApiVersionsRequest, version: int, code: int) -> ApiVersionsResponse:
    api_keys = []
    if code == ErrorCode.UNSUPPORTED_VERSION:
        # Kafka names the ApiVersions range it serves, so that the client can ask again at
        # a version the broker reads.
        api = SERVED[ApiKey.API_VERSIONS]
        api_keys.append(ApiVersion(api.key, api.min_version, api.max_version))
    return ApiVersionsResponse(error_code=code, api_keys=api_keys)


# -- SASL: what a request of the exchange gets outside its turn ----------------------------


def _sasl_handshake(
    request: SaslHandshakeRequest, version: int, code: int
) -> SaslHandshakeResponse:
    # Kafka lists no mechanisms with an error (SaslHandshakeRequest.getErrorResponse); only
    # the UNSUPPORTED_SASL_MECHANISM answer of the exchange itself names the enabled ones.
    return SaslHandshakeResponse(error_code=code, mechanisms=[])


def _sasl_authenticate(
    request: SaslAuthenticateRequest, version: int, code: int
) -> SaslAuthenticateResponse:
    # No token and no session lifetime; Kafka's message is its exception's, and fastcoord has
    # no text for every code (the field is nullable in every version).
    return SaslAuthenticateResponse(error_code=code, error_message=None, auth_bytes=b"")


# -- ACLs ---------------------------------------------------------------------------------


def _describe_acls(request: DescribeAclsRequest, version: int, code: int) -> DescribeAclsResponse:
    # Kafka also sends its exception's message; fastcoord has no text for every code.
    return DescribeAclsResponse(error_code=code, error_message=None, resources=[])


def _create_acls(request: CreateAclsRequest, version: int, code: int) -> CreateAclsResponse:
    return CreateAclsResponse(results=[AclCreationResult(code, None) for _ in request.creations])


def _delete_acls(request: DeleteAclsRequest, version: int, code: int) -> DeleteAclsResponse:
    return DeleteAclsResponse(
        filter_results=[DeleteAclsFilterResult(code, None, []) for _ in request.filters]
    )


# -- the broker's answers: metadata, offsets by time, fetch ---------------------------------


def _metadata(request: MetadataRequest, version: int, code: int) -> MetadataResponse:
    # Metadata has no top-level error: each named topic carries it, by name (null names
    # become "", as the response's name is not nullable before v12) and id. A request for
    # every topic (null, or an empty list at v0) names none, and gets an empty list.
    return MetadataResponse(
        brokers=[],
        topics=[
            MetadataResponseTopic(
                error_code=code,
                name=t.name or "",
                topic_id=t.topic_id,
                is_internal=False,
                partitions=[],
            )
            for t in request.topics or []
        ],
    )


def _list_offsets(request: ListOffsetsRequest, version: int, code: int) -> ListOffsetsResponse:
    return ListOffsetsResponse(
        topics=[
            ListOffsetsTopicResponse(
                t.name,
                [
                    ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=code,
                        timestamp=NO_TIMESTAMP,
                        offset=NO_OFFSET,
                        leader_epoch=NO_LEADER_EPOCH,
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def _fetch(request: FetchRequest, version: int, code: int) -> FetchResponse:
    # Kafka sets the error twice: at the top (v7+), which an incremental fetch naming no
    # partition needs, and on every partition, which is all that clients of v6 and older
    # read. Only v13+, by topic id and not served here, drops the partitions.
    return FetchResponse(
        error_code=code,
        session_id=request.session_id,
        responses=[
            FetchableTopicResponse(
                t.topic,
                [
                    PartitionData(
                        partition_index=p.partition,
                        error_code=code,
                        high_watermark=NO_OFFSET,
                        last_stable_offset=NO_OFFSET,
                        log_start_offset=NO_OFFSET,
                        aborted_transactions=None,
                        preferred_read_replica=NO_REPLICA,
                        records=b"",
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


def _produce(
    request: ProduceRequest, version: int, code: int, message: str | None = None
) -> ProduceResponse:
    """Every partition carries the error (and, v8+, `message`), as Kafka answers."""
    return ProduceResponse(
        responses=[
            TopicProduceResponse(
                t.name,
                [
                    PartitionProduceResponse(
                        index=p.index,
                        error_code=code,
                        base_offset=NO_OFFSET,
                        log_append_time_ms=NO_TIMESTAMP,
                        log_start_offset=NO_OFFSET,
                        error_message=message,
                    )
                    for p in t.partition_data
                ],
            )
            for t in request.topic_data
        ]
    )


def produce_refused(request: ProduceRequest, message: str) -> ProduceResponse:
    """The answer to every Produce: INVALID_REQUEST on each partition, with `message` (which
    v8+ carries; the encoder drops it from older versions)."""
    return _produce(request, 0, ErrorCode.INVALID_REQUEST, message)


# Each builder takes the request, the version it was decoded at, and the error code.
_BUILDERS: dict[type[Any], Callable[[Any, int, int], Answer]] = {
    ProduceRequest: _produce,
    FetchRequest: _fetch,
    ListOffsetsRequest: _list_offsets,
    MetadataRequest: _metadata,
    OffsetCommitBatch: _offset_commit_batch,
    OffsetCommitRequest: _offset_commit,
    OffsetFetchRequest: _offset_fetch,
    FindCoordinatorRequest: _find_coordinator,
    JoinGroupRequest: _join_group,
    HeartbeatRequest: _heartbeat,
    LeaveGroupRequest: _leave_group,
    SyncGroupRequest: _sync_group,
    DescribeGroupsRequest: _describe_groups,
    ListGroupsRequest: _list_groups,
    SaslHandshakeRequest: _sasl_handshake,
    ApiVersionsRequest: _api_versions,
    DescribeAclsRequest: _describe_acls,
    CreateAclsRequest: _create_acls,
    DeleteAclsRequest: _delete_acls,
    SaslAuthenticateRequest: _sasl_authenticate,
    DeleteGroupsRequest: _delete_groups,
    OffsetDeleteRequest: _offset_delete,
    ConsumerGroupHeartbeatRequest: _consumer_group_heartbeat,
    ConsumerGroupDescribeRequest: _consumer_group_describe,
}
