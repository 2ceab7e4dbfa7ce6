"""ConsumerGroupHeartbeat and ConsumerGroupDescribe, versions 0-1: round trips, bytes checked
against Kafka's JSON field order, and the error answer of each.

The expected bytes are written by hand from Kafka's message schemas, independently of the
codec: flexible from version 0, so strings and arrays are compact (uvarint of length + 1,
0 for null) and every struct ends with its tagged fields (0x00 when there are none). A field
declared out of order, or at the wrong version, changes the bytes.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import msgspec
import pytest

from fastcoord.protocol.api_keys import ApiKey, api_name
from fastcoord.protocol.codec import decode, encode
from fastcoord.protocol.error_responses import error_response
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ConsumerGroupDescribeAssignment,
    ConsumerGroupDescribedGroup,
    ConsumerGroupDescribeMember,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupDescribeTopicPartitions,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupHeartbeatResponseAssignment,
    ConsumerGroupHeartbeatResponseTopicPartitions,
)
from fastcoord.protocol.messages.consumer_group_describe import (
    MEMBER_TYPE_CONSUMER,
    MEMBER_TYPE_UNKNOWN,
)
from fastcoord.protocol.schema import Message
from fastcoord.protocol.versions import SERVED
from tests.protocol.strategies import edge_instance

VERSIONS = [0, 1]
TOPIC_A = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
TOPIC_B = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")

# -- Kafka's flexible encoding, by hand ---------------------------------------------------


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def i8(n: int) -> bytes:
    return struct.pack(">b", n)


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def boolean(b: bool) -> bytes:
    return b"\x01" if b else b"\x00"


def cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    data = s.encode()
    return uvarint(len(data) + 1) + data


def carray(items: list[bytes] | None) -> bytes:
    if items is None:
        return b"\x00"
    return uvarint(len(items) + 1) + b"".join(items)


NO_TAGS = b"\x00"


# -- ConsumerGroupHeartbeat ---------------------------------------------------------------


def heartbeat_request_full(version: int) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id="g1",
        member_id="m-1",
        member_epoch=5,
        instance_id="i-1",
        rack_id="r1",
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=["a", "bc"],
        subscribed_topic_regex="^t.*" if version >= 1 else None,
        server_assignor="uniform",
        topic_partitions=[
            ConsumerGroupHeartbeatRequestTopicPartitions(TOPIC_A, [0, 2]),
            ConsumerGroupHeartbeatRequestTopicPartitions(TOPIC_B, []),
        ],
    )


def heartbeat_request_full_bytes(version: int) -> bytes:
    return b"".join(
        [
            cstr("g1"),  # GroupId
            cstr("m-1"),  # MemberId
            i32(5),  # MemberEpoch
            cstr("i-1"),  # InstanceId
            cstr("r1"),  # RackId
            i32(30_000),  # RebalanceTimeoutMs
            carray([cstr("a"), cstr("bc")]),  # SubscribedTopicNames
            cstr("^t.*") if version >= 1 else b"",  # SubscribedTopicRegex, v1+
            cstr("uniform"),  # ServerAssignor
            carray(  # TopicPartitions
                [
                    TOPIC_A.bytes + carray([i32(0), i32(2)]) + NO_TAGS,
                    TOPIC_B.bytes + carray([]) + NO_TAGS,
                ]
            ),
            NO_TAGS,
        ]
    )


def heartbeat_request_null() -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id="g1",
        member_id="m-1",
        member_epoch=-1,
        instance_id=None,
        rack_id=None,
        rebalance_timeout_ms=-1,
        subscribed_topic_names=None,
        subscribed_topic_regex=None,
        server_assignor=None,
        topic_partitions=None,
    )


def heartbeat_request_null_bytes(version: int) -> bytes:
    return b"".join(
        [
            cstr("g1"),
            cstr("m-1"),
            i32(-1),
            cstr(None),  # InstanceId
            cstr(None),  # RackId
            i32(-1),
            carray(None),  # SubscribedTopicNames
            cstr(None) if version >= 1 else b"",  # SubscribedTopicRegex, v1+
            cstr(None),  # ServerAssignor
            carray(None),  # TopicPartitions
            NO_TAGS,
        ]
    )


def heartbeat_response_full() -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(
        throttle_time_ms=7,
        error_code=ErrorCode.FENCED_MEMBER_EPOCH,
        error_message="fenced",
        member_id="m-1",
        member_epoch=12,
        heartbeat_interval_ms=5_000,
        assignment=ConsumerGroupHeartbeatResponseAssignment(
            [
                ConsumerGroupHeartbeatResponseTopicPartitions(TOPIC_A, [1, 3]),
                ConsumerGroupHeartbeatResponseTopicPartitions(TOPIC_B, [0]),
            ]
        ),
    )


def heartbeat_response_full_bytes() -> bytes:
    return b"".join(
        [
            i32(7),  # ThrottleTimeMs
            i16(ErrorCode.FENCED_MEMBER_EPOCH),  # ErrorCode
            cstr("fenced"),  # ErrorMessage
            cstr("m-1"),  # MemberId
            i32(12),  # MemberEpoch
            i32(5_000),  # HeartbeatIntervalMs
            i8(1),  # Assignment: a nullable struct's marker, 1 when present
            carray(
                [
                    TOPIC_A.bytes + carray([i32(1), i32(3)]) + NO_TAGS,
                    TOPIC_B.bytes + carray([i32(0)]) + NO_TAGS,
                ]
            ),
            NO_TAGS,  # Assignment's tagged fields
            NO_TAGS,
        ]
    )


def heartbeat_response_null() -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        member_id=None,
        member_epoch=3,
        heartbeat_interval_ms=5_000,
        assignment=None,
    )


# -- ConsumerGroupDescribe ----------------------------------------------------------------


def describe_request() -> ConsumerGroupDescribeRequest:
    return ConsumerGroupDescribeRequest(group_ids=["g1", "g2"], include_authorized_operations=True)


def describe_request_bytes() -> bytes:
    return carray([cstr("g1"), cstr("g2")]) + boolean(True) + NO_TAGS


def describe_member(version: int, *, nulls: bool = False) -> ConsumerGroupDescribeMember:
    return ConsumerGroupDescribeMember(
        member_id="m-1",
        instance_id=None if nulls else "i-1",
        rack_id=None if nulls else "r1",
        member_epoch=9,
        client_id="client-1",
        client_host="/10.0.0.1",
        subscribed_topic_names=["a"],
        subscribed_topic_regex=None if nulls else "^a",
        assignment=ConsumerGroupDescribeAssignment(
            [ConsumerGroupDescribeTopicPartitions(TOPIC_A, "a", [0, 1])]
        ),
        target_assignment=ConsumerGroupDescribeAssignment(
            [
                ConsumerGroupDescribeTopicPartitions(TOPIC_A, "a", [0]),
                ConsumerGroupDescribeTopicPartitions(TOPIC_B, "b", [2]),
            ]
        ),
        member_type=MEMBER_TYPE_CONSUMER if version >= 1 else MEMBER_TYPE_UNKNOWN,
    )


def describe_response(version: int, *, nulls: bool = False) -> ConsumerGroupDescribeResponse:
    return ConsumerGroupDescribeResponse(
        throttle_time_ms=3,
        groups=[
            ConsumerGroupDescribedGroup(
                error_code=ErrorCode.NONE,
                error_message=None if nulls else "ok",
                group_id="g1",
                group_state="Stable",
                group_epoch=4,
                assignment_epoch=4,
                assignor_name="uniform",
                members=[describe_member(version, nulls=nulls)],
                authorized_operations=0x0F,
            ),
            ConsumerGroupDescribedGroup(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND, group_id="g2", error_message="gone"
            ),
        ],
    )


def topic_partitions_bytes(topic_id: uuid.UUID, name: str, partitions: list[int]) -> bytes:
    return topic_id.bytes + cstr(name) + carray([i32(p) for p in partitions]) + NO_TAGS


def describe_response_bytes(version: int) -> bytes:
    member = b"".join(
        [
            cstr("m-1"),  # MemberId
            cstr("i-1"),  # InstanceId
            cstr("r1"),  # RackId
            i32(9),  # MemberEpoch
            cstr("client-1"),  # ClientId
            cstr("/10.0.0.1"),  # ClientHost
            carray([cstr("a")]),  # SubscribedTopicNames
            cstr("^a"),  # SubscribedTopicRegex
            carray([topic_partitions_bytes(TOPIC_A, "a", [0, 1])]) + NO_TAGS,  # Assignment
            carray(  # TargetAssignment
                [
                    topic_partitions_bytes(TOPIC_A, "a", [0]),
                    topic_partitions_bytes(TOPIC_B, "b", [2]),
                ]
            )
            + NO_TAGS,
            i8(MEMBER_TYPE_CONSUMER) if version >= 1 else b"",  # MemberType, v1+
            NO_TAGS,
        ]
    )
    group_1 = b"".join(
        [
            i16(ErrorCode.NONE),  # ErrorCode
            cstr("ok"),  # ErrorMessage
            cstr("g1"),  # GroupId
            cstr("Stable"),  # GroupState
            i32(4),  # GroupEpoch
            i32(4),  # AssignmentEpoch
            cstr("uniform"),  # AssignorName
            carray([member]),  # Members
            i32(0x0F),  # AuthorizedOperations
            NO_TAGS,
        ]
    )
    group_2 = b"".join(
        [
            i16(ErrorCode.GROUP_ID_NOT_FOUND),
            cstr("gone"),
            cstr("g2"),
            cstr(""),
            i32(0),
            i32(0),
            cstr(""),
            carray([]),
            i32(-(2**31)),  # AuthorizedOperations' default
            NO_TAGS,
        ]
    )
    return i32(3) + carray([group_1, group_2]) + NO_TAGS


# -- the tables ---------------------------------------------------------------------------


def test_api_keys_and_names() -> None:
    assert (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE) == (68, 69)
    assert api_name(68) == "ConsumerGroupHeartbeat"
    assert api_name(69) == "ConsumerGroupDescribe"
    classes: dict[type[Message], int] = {
        ConsumerGroupHeartbeatRequest: ApiKey.CONSUMER_GROUP_HEARTBEAT,
        ConsumerGroupHeartbeatResponse: ApiKey.CONSUMER_GROUP_HEARTBEAT,
        ConsumerGroupDescribeRequest: ApiKey.CONSUMER_GROUP_DESCRIBE,
        ConsumerGroupDescribeResponse: ApiKey.CONSUMER_GROUP_DESCRIBE,
    }
    for cls, api_key in classes.items():
        # Flexible from version 0: compact strings and tagged fields in every version.
        assert api_key == cls.API_KEY
        assert cls.FLEXIBLE == 0


def test_served_versions() -> None:
    for key in (ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE):
        assert (SERVED[key].min_version, SERVED[key].max_version) == (0, 1)


# -- round trips --------------------------------------------------------------------------


def round_trip(msg: Message, version: int) -> Any:
    return decode(type(msg), version, encode(msg, version))


@pytest.mark.parametrize("version", VERSIONS)
def test_heartbeat_request_round_trips(version: int) -> None:
    for msg in (heartbeat_request_full(version), heartbeat_request_null()):
        assert round_trip(msg, version) == msg


@pytest.mark.parametrize("version", VERSIONS)
def test_describe_round_trips(version: int) -> None:
    request = describe_request()
    assert round_trip(request, version) == request
    for nulls in (False, True):
        response = describe_response(version, nulls=nulls)
        assert round_trip(response, version) == response


@pytest.mark.parametrize("version", VERSIONS)
def test_heartbeat_response_round_trips(version: int) -> None:
    for msg in (heartbeat_response_full(), heartbeat_response_null()):
        assert round_trip(msg, version) == msg


EDGE_CASES = [
    (cls, version, mode)
    for cls in (
        ConsumerGroupHeartbeatRequest,
        ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse,
    )
    for version in VERSIONS
    for mode in ("min", "null", "max")
]


@pytest.mark.parametrize("case", EDGE_CASES, ids=lambda c: f"{c[0].__name__}-v{c[1]}-{c[2]}")
def test_edge_values_round_trip(case: tuple[type[Message], int, str]) -> None:
    # The same edge instances as the served messages get: extreme numbers, long multi-byte
    # strings, and null wherever the version allows it.
    cls, version, mode = case
    msg = edge_instance(cls, version, mode)
    assert round_trip(msg, version) == msg


# -- the bytes, field by field ------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_heartbeat_request_bytes_follow_kafka(version: int) -> None:
    cases = [
        (heartbeat_request_full(version), heartbeat_request_full_bytes(version)),
        (heartbeat_request_null(), heartbeat_request_null_bytes(version)),
    ]
    for msg, expected in cases:
        assert encode(msg, version) == expected
        assert decode(ConsumerGroupHeartbeatRequest, version, expected) == msg


@pytest.mark.parametrize("version", VERSIONS)
def test_describe_request_bytes_follow_kafka(version: int) -> None:
    # Version 1 of the request is version 0: only the response changed.
    assert encode(describe_request(), version) == describe_request_bytes()
    assert decode(ConsumerGroupDescribeRequest, version, describe_request_bytes()) == (
        describe_request()
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_describe_response_bytes_follow_kafka(version: int) -> None:
    response = describe_response(version)
    assert encode(response, version) == describe_response_bytes(version)
    assert decode(ConsumerGroupDescribeResponse, version, describe_response_bytes(version)) == (
        response
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_heartbeat_response_bytes_follow_kafka(version: int) -> None:
    # Versions 0 and 1 of the response are the same.
    assert encode(heartbeat_response_full(), version) == heartbeat_response_full_bytes()
    null_assignment = b"".join(
        [i32(0), i16(0), cstr(None), cstr(None), i32(3), i32(5_000), i8(-1), NO_TAGS]
    )
    assert encode(heartbeat_response_null(), version) == null_assignment


# -- fields of version 1 only -------------------------------------------------------------


def test_subscribed_topic_regex_is_not_written_in_v0() -> None:
    with_regex = msgspec.structs.replace(heartbeat_request_full(0), subscribed_topic_regex="^t.*")
    encoded = encode(with_regex, 0)
    assert encoded == heartbeat_request_full_bytes(0)
    assert b"^t.*" not in encoded
    # Read back at v0, the field holds Kafka's default.
    assert decode(ConsumerGroupHeartbeatRequest, 0, encoded).subscribed_topic_regex is None


def test_member_type_is_not_written_in_v0() -> None:
    v1 = describe_response(1)
    encoded = encode(v1, 0)
    assert encoded == describe_response_bytes(0)
    assert len(encode(v1, 1)) == len(encoded) + 1  # MemberType is one int8
    members = decode(ConsumerGroupDescribeResponse, 0, encoded).groups[0].members
    assert members[0].member_type == MEMBER_TYPE_UNKNOWN


# -- the error answers --------------------------------------------------------------------

CODES = [ErrorCode.NOT_COORDINATOR, ErrorCode.GROUP_AUTHORIZATION_FAILED]


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
@pytest.mark.parametrize("version", VERSIONS)
def test_heartbeat_error_response(version: int, code: ErrorCode) -> None:
    request = decode(
        ConsumerGroupHeartbeatRequest, version, encode(heartbeat_request_full(version), version)
    )
    answer = error_response(request, version, code)
    # Kafka's getErrorResponse: the code, and every other field at its default.
    assert answer == ConsumerGroupHeartbeatResponse(error_code=code)
    assert isinstance(answer, ConsumerGroupHeartbeatResponse)
    assert (answer.error_message, answer.member_id, answer.assignment) == (None, None, None)
    assert (answer.member_epoch, answer.heartbeat_interval_ms) == (0, 0)


@pytest.mark.parametrize("version", VERSIONS)
def test_heartbeat_error_response_on_the_wire(version: int) -> None:
    answer = error_response(heartbeat_request_full(version), version, ErrorCode.NOT_COORDINATOR)
    assert isinstance(answer, ConsumerGroupHeartbeatResponse)
    assert round_trip(answer, version) == answer


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
@pytest.mark.parametrize("version", VERSIONS)
def test_describe_error_response(version: int, code: ErrorCode) -> None:
    request = decode(ConsumerGroupDescribeRequest, version, encode(describe_request(), version))
    answer = error_response(request, version, code)
    assert isinstance(answer, ConsumerGroupDescribeResponse)
    response = round_trip(answer, version)
    # One described group per requested id, in order, carrying the code and nothing else.
    assert response.groups == [
        ConsumerGroupDescribedGroup(error_code=code, group_id=g) for g in ["g1", "g2"]
    ]
    assert response.groups[0].error_message is None
    assert response.groups[0].authorized_operations == -(2**31)
    assert response.throttle_time_ms == 0


def test_describe_error_response_of_no_groups() -> None:
    answer = error_response(ConsumerGroupDescribeRequest(), 1, ErrorCode.NOT_COORDINATOR)
    assert answer == ConsumerGroupDescribeResponse(groups=[])
