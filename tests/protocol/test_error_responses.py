"""error_response: for every served API and version, the answer Kafka gives a request that
failed as a whole, checked on the wire.

Each case encodes a representative request at the version, decodes it with the server's
front door (so that an OffsetCommit arrives as a batch and fields the version lacks hold
their defaults), builds the error response, encodes it with the real encoder and decodes it
back, then checks that the error is where Kafka puts it and the lists match the request.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from fastcoord.protocol import frames, framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.commit_batch import OffsetCommitAnswer, OffsetCommitBatch
from fastcoord.protocol.error_responses import error_response
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    AclCreation,
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilter,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ForgottenTopic,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    MemberIdentity,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
    TopicProduceData,
)
from fastcoord.protocol.schema import Request, Response
from fastcoord.protocol.versions import SERVED

CORRELATION_ID = 4711
CODES = [ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE]
TOPIC_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")

# One request per served API, with every field any served version has, and a couple of
# entries wherever the request has a list.
REQUESTS: dict[int, Request] = {
    ApiKey.PRODUCE: ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            TopicProduceData(
                "a", [PartitionProduceData(0, b"batch"), PartitionProduceData(3, None)]
            ),
            TopicProduceData("b", [PartitionProduceData(1, b"")]),
        ],
    ),
    ApiKey.FETCH: FetchRequest(
        max_wait_ms=500,
        min_bytes=1,
        session_id=17,
        session_epoch=3,
        topics=[
            FetchTopic("a", [FetchPartition(partition=0, fetch_offset=5), FetchPartition(2)]),
            FetchTopic("b", [FetchPartition(partition=1, fetch_offset=9)]),
        ],
        forgotten_topics_data=[ForgottenTopic("c", [0])],
        rack_id="rack",
    ),
    ApiKey.LIST_OFFSETS: ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsTopic("a", [ListOffsetsPartition(0, timestamp=-1), ListOffsetsPartition(3)]),
            ListOffsetsTopic("b", [ListOffsetsPartition(1, current_leader_epoch=2, timestamp=-2)]),
        ],
    ),
    ApiKey.METADATA: MetadataRequest(
        topics=[MetadataRequestTopic(TOPIC_ID, "a"), MetadataRequestTopic(name="b")],
        allow_auto_topic_creation=False,
    ),
    ApiKey.OFFSET_COMMIT: OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=3,
        member_id="m-1",
        group_instance_id="i-1",
        topics=[
            OffsetCommitRequestTopic(
                "a", [OffsetCommitRequestPartition(0, 10), OffsetCommitRequestPartition(1, 11)]
            ),
            OffsetCommitRequestTopic("b", [OffsetCommitRequestPartition(4, 12, 2, -1, "meta")]),
        ],
    ),
    ApiKey.OFFSET_FETCH: OffsetFetchRequest(
        group_id="g",
        topics=[OffsetFetchRequestTopic("a", [0, 1]), OffsetFetchRequestTopic("b", [4])],
        groups=[
            OffsetFetchRequestGroup("g1", topics=[OffsetFetchRequestTopics("a", [0, 1])]),
            OffsetFetchRequestGroup("g2", topics=None),
        ],
        require_stable=True,
    ),
    ApiKey.FIND_COORDINATOR: FindCoordinatorRequest(key="g", coordinator_keys=["g1", "g2"]),
    ApiKey.JOIN_GROUP: JoinGroupRequest(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        member_id="m-1",
        group_instance_id="i-1",
        protocol_type="consumer",
        protocols=[
            JoinGroupRequestProtocol("range", b"r"),
            JoinGroupRequestProtocol("roundrobin", b"rr"),
        ],
        reason="rejoin",
    ),
    ApiKey.HEARTBEAT: HeartbeatRequest("g", 3, "m-1", "i-1"),
    ApiKey.LEAVE_GROUP: LeaveGroupRequest(
        group_id="g",
        member_id="m-1",
        members=[MemberIdentity("m-1"), MemberIdentity("m-2", "i-2", "bye")],
    ),
    ApiKey.SYNC_GROUP: SyncGroupRequest(
        group_id="g",
        generation_id=3,
        member_id="m-1",
        group_instance_id="i-1",
        protocol_type="consumer",
        protocol_name="range",
        assignments=[
            SyncGroupRequestAssignment("m-1", b"a1"),
            SyncGroupRequestAssignment("m-2", b"a2"),
        ],
    ),
    ApiKey.DESCRIBE_GROUPS: DescribeGroupsRequest(
        groups=["g1", "g2"], include_authorized_operations=True
    ),
    ApiKey.LIST_GROUPS: ListGroupsRequest(states_filter=["Stable"], types_filter=["classic"]),
    ApiKey.SASL_HANDSHAKE: SaslHandshakeRequest("SCRAM-SHA-256"),
    ApiKey.API_VERSIONS: ApiVersionsRequest("fastcoord-test", "1.0"),
    ApiKey.DESCRIBE_ACLS: DescribeAclsRequest(2, "t", 3, "User:a", "*", 3, 3),
    ApiKey.CREATE_ACLS: CreateAclsRequest(
        [AclCreation(2, "t", 3, "User:a", "*", 3, 3), AclCreation(3, "g", 4, "User:b", "*", 2, 2)]
    ),
    ApiKey.DELETE_ACLS: DeleteAclsRequest(
        [DeleteAclsFilter(1, None, 1, None, None, 1, 1), DeleteAclsFilter(2, "t", 3, None)]
    ),
    ApiKey.SASL_AUTHENTICATE: SaslAuthenticateRequest(b"n,,n=user,r=nonce"),
    ApiKey.DELETE_GROUPS: DeleteGroupsRequest(["g1", "g2"]),
    ApiKey.OFFSET_DELETE: OffsetDeleteRequest(
        "g",
        [
            OffsetDeleteRequestTopic(
                "a", [OffsetDeleteRequestPartition(0), OffsetDeleteRequestPartition(1)]
            ),
            OffsetDeleteRequestTopic("b", [OffsetDeleteRequestPartition(4)]),
        ],
    ),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="m", member_epoch=3, subscribed_topic_names=["a"]
    ),
    ApiKey.CONSUMER_GROUP_DESCRIBE: ConsumerGroupDescribeRequest(group_ids=["g1", "g2"]),
}

CASES = [
    (api.key, version)
    for api in sorted(SERVED.values(), key=lambda a: a.key)
    for version in range(api.min_version, api.max_version + 1)
]


def case_id(case: tuple[int, int]) -> str:
    api_key, version = case
    return f"{SERVED[api_key].request.__name__}-v{version}"


def decoded_request(api_key: int, version: int, request: Request) -> Request | OffsetCommitBatch:
    """The request as the server gets it: encoded at `version`, through the front door."""
    header = RequestHeader(api_key, version, CORRELATION_ID, "client-1")
    _, decoded, extra = frames.decode_request(framing.encode_request(header, request)[4:])
    assert extra == 0
    return decoded


def on_the_wire(api_key: int, version: int, answer: Response | OffsetCommitAnswer) -> Any:
    """`answer` encoded at `version` by the server's encoder, then decoded as a client would."""
    frame = frames.encode_response(CORRELATION_ID, version, answer)
    correlation_id, response = framing.decode_response(api_key, version, frame[4:])
    assert correlation_id == CORRELATION_ID
    assert isinstance(response, SERVED[api_key].response)
    return response


# -- what Kafka puts where, per API; each check gets (request, response, version, code) -----


def check_produce(req: ProduceRequest, resp: ProduceResponse, version: int, code: int) -> None:
    assert [(t.name, [p.index for p in t.partition_responses]) for t in resp.responses] == [
        (t.name, [p.index for p in t.partition_data]) for t in req.topic_data
    ]
    for t in resp.responses:
        for p in t.partition_responses:
            assert (p.error_code, p.base_offset, p.log_start_offset) == (code, -1, -1)
            assert p.record_errors == []


def check_fetch(req: FetchRequest, resp: FetchResponse, version: int, code: int) -> None:
    # The top-level error and session exist from v7; every partition carries the error too.
    assert resp.error_code == (code if version >= 7 else 0)
    assert resp.session_id == (req.session_id if version >= 7 else 0)
    assert [(t.topic, [p.partition_index for p in t.partitions]) for t in resp.responses] == [
        (t.topic, [p.partition for p in t.partitions]) for t in req.topics
    ]
    for t in resp.responses:
        for p in t.partitions:
            assert p.error_code == code
            assert (p.high_watermark, p.last_stable_offset, p.log_start_offset) == (-1, -1, -1)
            assert p.records in (b"", None)


def check_list_offsets(
    req: ListOffsetsRequest, resp: ListOffsetsResponse, version: int, code: int
) -> None:
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in resp.topics] == [
        (t.name, [p.partition_index for p in t.partitions]) for t in req.topics
    ]
    for t in resp.topics:
        for p in t.partitions:
            assert (p.error_code, p.offset, p.timestamp, p.leader_epoch) == (code, -1, -1, -1)


def check_metadata(req: MetadataRequest, resp: MetadataResponse, version: int, code: int) -> None:
    # No top-level error in Metadata: each requested topic carries it, with no partitions.
    assert req.topics is not None
    assert [(t.name, t.topic_id, t.error_code) for t in resp.topics] == [
        (t.name, t.topic_id, code) for t in req.topics
    ]
    assert all(t.partitions == [] for t in resp.topics)
    assert resp.brokers == []


def check_offset_commit(
    req: OffsetCommitBatch, resp: OffsetCommitResponse, version: int, code: int
) -> None:
    assert isinstance(req, OffsetCommitBatch)
    assert [t.name for t in resp.topics] == req.topics
    got = [(t.name, p.partition_index, p.error_code) for t in resp.topics for p in t.partitions]
    assert got == [(topic, partition, code) for topic, partition, *_ in req.rows()]


def check_offset_fetch(
    req: OffsetFetchRequest, resp: OffsetFetchResponse, version: int, code: int
) -> None:
    if version >= 8:
        # Per group: the group's error, no partitions.
        assert [(g.group_id, g.error_code, g.topics) for g in resp.groups] == [
            (g.group_id, code, []) for g in req.groups
        ]
        assert len(resp.groups) == 2
    elif version >= 2:
        # The top-level error alone, as Kafka sends it.
        assert (resp.error_code, resp.topics) == (code, [])
    else:
        # No top-level error before v2: every requested partition carries it.
        assert resp.error_code == 0
        assert req.topics is not None
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in resp.topics] == [
            (t.name, t.partition_indexes) for t in req.topics
        ]
        for t in resp.topics:
            for p in t.partitions:
                assert (p.error_code, p.committed_offset, p.metadata) == (code, -1, "")


def check_find_coordinator(
    req: FindCoordinatorRequest, resp: FindCoordinatorResponse, version: int, code: int
) -> None:
    if version >= 4:
        assert resp.error_code == 0
        assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in resp.coordinators] == [
            (key, code, -1, "", -1) for key in req.coordinator_keys
        ]
        assert len(resp.coordinators) == 2
    else:
        assert resp.coordinators == []
        assert (resp.error_code, resp.node_id, resp.host, resp.port) == (code, -1, "", -1)


def check_join_group(
    req: JoinGroupRequest, resp: JoinGroupResponse, version: int, code: int
) -> None:
    assert (resp.error_code, resp.generation_id, resp.member_id, resp.leader) == (code, -1, "", "")
    assert resp.protocol_name == (None if version >= 7 else "")
    assert resp.protocol_type is None
    assert resp.members == []


def check_heartbeat(
    req: HeartbeatRequest, resp: HeartbeatResponse, version: int, code: int
) -> None:
    assert resp.error_code == code


def check_leave_group(
    req: LeaveGroupRequest, resp: LeaveGroupResponse, version: int, code: int
) -> None:
    # v3+ too: the top-level error, and no member listed (Kafka lists none).
    assert (resp.error_code, resp.members) == (code, [])


def check_sync_group(
    req: SyncGroupRequest, resp: SyncGroupResponse, version: int, code: int
) -> None:
    assert (resp.error_code, resp.assignment) == (code, b"")
    assert (resp.protocol_type, resp.protocol_name) == (None, None)


def check_describe_groups(
    req: DescribeGroupsRequest, resp: DescribeGroupsResponse, version: int, code: int
) -> None:
    assert [(g.group_id, g.error_code, g.members) for g in resp.groups] == [
        (g, code, []) for g in req.groups
    ]
    assert len(resp.groups) == 2


def check_list_groups(
    req: ListGroupsRequest, resp: ListGroupsResponse, version: int, code: int
) -> None:
    assert (resp.error_code, resp.groups) == (code, [])


def check_sasl_handshake(
    req: SaslHandshakeRequest, resp: SaslHandshakeResponse, version: int, code: int
) -> None:
    # Kafka lists no mechanisms with an error.
    assert (resp.error_code, resp.mechanisms) == (code, [])


def check_api_versions(
    req: ApiVersionsRequest, resp: ApiVersionsResponse, version: int, code: int
) -> None:
    assert (resp.error_code, resp.api_keys) == (code, [])


def check_describe_acls(
    req: DescribeAclsRequest, resp: DescribeAclsResponse, version: int, code: int
) -> None:
    assert (resp.error_code, resp.resources) == (code, [])


def check_create_acls(
    req: CreateAclsRequest, resp: CreateAclsResponse, version: int, code: int
) -> None:
    assert [r.error_code for r in resp.results] == [code, code]


def check_delete_acls(
    req: DeleteAclsRequest, resp: DeleteAclsResponse, version: int, code: int
) -> None:
    assert [(r.error_code, r.matching_acls) for r in resp.filter_results] == [(code, [])] * 2


def check_sasl_authenticate(
    req: SaslAuthenticateRequest, resp: SaslAuthenticateResponse, version: int, code: int
) -> None:
    # No token, and no session lifetime: the request did not authenticate anything.
    assert (resp.error_code, resp.auth_bytes, resp.session_lifetime_ms) == (code, b"", 0)


def check_delete_groups(
    req: DeleteGroupsRequest, resp: DeleteGroupsResponse, version: int, code: int
) -> None:
    assert [(r.group_id, r.error_code) for r in resp.results] == [
        (g, code) for g in req.groups_names
    ]
    assert len(resp.results) == 2


def check_offset_delete(
    req: OffsetDeleteRequest, resp: OffsetDeleteResponse, version: int, code: int
) -> None:
    assert (resp.error_code, resp.topics) == (code, [])


def check_consumer_group_heartbeat(
    req: ConsumerGroupHeartbeatRequest,
    resp: ConsumerGroupHeartbeatResponse,
    version: int,
    code: int,
) -> None:
    # Kafka's getErrorResponse: the code and nothing else (no member id, epoch 0).
    assert (resp.error_code, resp.member_id, resp.member_epoch) == (code, None, 0)
    assert (resp.assignment, resp.heartbeat_interval_ms) == (None, 0)


def check_consumer_group_describe(
    req: ConsumerGroupDescribeRequest,
    resp: ConsumerGroupDescribeResponse,
    version: int,
    code: int,
) -> None:
    assert [(g.group_id, g.error_code, g.members) for g in resp.groups] == [
        (g, code, []) for g in req.group_ids
    ]


CHECKS: dict[int, Callable[[Any, Any, int, int], None]] = {
    ApiKey.PRODUCE: check_produce,
    ApiKey.FETCH: check_fetch,
    ApiKey.LIST_OFFSETS: check_list_offsets,
    ApiKey.METADATA: check_metadata,
    ApiKey.OFFSET_COMMIT: check_offset_commit,
    ApiKey.OFFSET_FETCH: check_offset_fetch,
    ApiKey.FIND_COORDINATOR: check_find_coordinator,
    ApiKey.JOIN_GROUP: check_join_group,
    ApiKey.HEARTBEAT: check_heartbeat,
    ApiKey.LEAVE_GROUP: check_leave_group,
    ApiKey.SYNC_GROUP: check_sync_group,
    ApiKey.DESCRIBE_GROUPS: check_describe_groups,
    ApiKey.LIST_GROUPS: check_list_groups,
    ApiKey.SASL_HANDSHAKE: check_sasl_handshake,
    ApiKey.API_VERSIONS: check_api_versions,
    ApiKey.DESCRIBE_ACLS: check_describe_acls,
    ApiKey.CREATE_ACLS: check_create_acls,
    ApiKey.DELETE_ACLS: check_delete_acls,
    ApiKey.SASL_AUTHENTICATE: check_sasl_authenticate,
    ApiKey.DELETE_GROUPS: check_delete_groups,
    ApiKey.OFFSET_DELETE: check_offset_delete,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: check_consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: check_consumer_group_describe,
}


def test_every_served_api_is_covered() -> None:
    assert set(REQUESTS) == set(SERVED) == set(CHECKS)


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_error_is_where_kafka_puts_it(case: tuple[int, int], code: ErrorCode) -> None:
    api_key, version = case
    request = decoded_request(api_key, version, REQUESTS[api_key])
    answer = error_response(request, version, code)
    if api_key == ApiKey.OFFSET_COMMIT:
        assert isinstance(answer, OffsetCommitAnswer)
    else:
        assert type(answer) is SERVED[api_key].response
    CHECKS[api_key](request, on_the_wire(api_key, version, answer), version, code)


@pytest.mark.parametrize("version", range(0, 13))
def test_metadata_for_every_topic_gets_no_topics(version: int) -> None:
    # Every topic is null from v1 and an empty list at v0: there is no name to carry the error.
    every = MetadataRequest(topics=[] if version == 0 else None)
    request = decoded_request(ApiKey.METADATA, version, every)
    answer = error_response(request, version, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    response = on_the_wire(ApiKey.METADATA, version, answer)
    assert response.topics == []


@pytest.mark.parametrize("version", range(10, 13))
def test_metadata_topic_by_id_alone_gets_an_empty_name(version: int) -> None:
    request = decoded_request(
        ApiKey.METADATA, version, MetadataRequest(topics=[MetadataRequestTopic(TOPIC_ID, None)])
    )
    answer = error_response(request, version, ErrorCode.REBALANCE_IN_PROGRESS)
    response = on_the_wire(ApiKey.METADATA, version, answer)
    assert [(t.name, t.topic_id, t.error_code) for t in response.topics] == [
        ("", TOPIC_ID, ErrorCode.REBALANCE_IN_PROGRESS)
    ]


@pytest.mark.parametrize("version", range(2, 8))
def test_offset_fetch_of_all_partitions_gets_the_top_level_error(version: int) -> None:
    request = decoded_request(
        ApiKey.OFFSET_FETCH, version, OffsetFetchRequest(group_id="g", topics=None)
    )
    answer = error_response(request, version, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    response = on_the_wire(ApiKey.OFFSET_FETCH, version, answer)
    assert (response.error_code, response.topics) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [])


@pytest.mark.parametrize("version", range(0, 5))
def test_unsupported_version_names_the_api_versions_range(version: int) -> None:
    request = decoded_request(ApiKey.API_VERSIONS, version, REQUESTS[ApiKey.API_VERSIONS])
    answer = error_response(request, version, ErrorCode.UNSUPPORTED_VERSION)
    response = on_the_wire(ApiKey.API_VERSIONS, version, answer)
    api = SERVED[ApiKey.API_VERSIONS]
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert response.api_keys == [ApiVersion(api.key, api.min_version, api.max_version)]


@pytest.mark.parametrize("version", range(0, 10))
def test_offset_commit_request_and_batch_get_the_same_frame(version: int) -> None:
    """A request decoded by the schema codec alone gets the response its batch would."""
    api_key, code = ApiKey.OFFSET_COMMIT, ErrorCode.REBALANCE_IN_PROGRESS
    header = RequestHeader(api_key, version, CORRELATION_ID, "client-1")
    frame = framing.encode_request(header, REQUESTS[api_key])[4:]
    _, plain, _ = framing.decode_request(frame)
    _, batch, _ = frames.decode_request(frame)
    assert isinstance(plain, OffsetCommitRequest) and isinstance(batch, OffsetCommitBatch)
    from_plain = error_response(plain, version, code)
    from_batch = error_response(batch, version, code)
    assert isinstance(from_plain, OffsetCommitResponse)
    assert from_batch == OffsetCommitAnswer(batch, error_code=code)
    assert frames.encode_response(1, version, from_plain) == frames.encode_response(
        1, version, from_batch
    )


def test_responses_are_fresh_objects() -> None:
    # A builder that shared its lists would let one answer's edits show in the next.
    request = REQUESTS[ApiKey.LEAVE_GROUP]
    first = error_response(request, 5, ErrorCode.REBALANCE_IN_PROGRESS)
    second = error_response(request, 5, ErrorCode.REBALANCE_IN_PROGRESS)
    assert isinstance(first, LeaveGroupResponse) and isinstance(second, LeaveGroupResponse)
    assert first == second and first.members is not second.members


class UnservedRequest(Request):
    API_KEY = ApiKey.SASL_HANDSHAKE
    FLEXIBLE = None


@pytest.mark.parametrize(
    "request_",
    [UnservedRequest(), HeartbeatResponse(), object()],
    ids=["unserved-request", "a-response", "not-a-message"],
)
def test_an_unknown_type_is_a_type_error(request_: Any) -> None:
    with pytest.raises(TypeError, match=type(request_).__name__):
        error_response(request_, 0, ErrorCode.REBALANCE_IN_PROGRESS)
