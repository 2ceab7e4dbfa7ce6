"""Headers, the served-version table, ApiVersions, and what refusals say."""

from __future__ import annotations

import pytest

from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.codec import decode, encode
from fastcoord.protocol.errors import ErrorCode, ProtocolError, UnsupportedVersion
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from fastcoord.protocol.primitives import Writer
from fastcoord.protocol.versions import SERVED, api_versions_response

KAFKA_RANGES = {
    ApiKey.PRODUCE: (3, 8),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (0, 12),
    ApiKey.OFFSET_COMMIT: (0, 9),
    ApiKey.OFFSET_FETCH: (0, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.DESCRIBE_ACLS: (0, 3),
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
}
KAFKA_FLEXIBLE = {
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 9,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 6,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 6,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 4,
    ApiKey.SYNC_GROUP: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 3,
    ApiKey.SASL_HANDSHAKE: None,
    ApiKey.API_VERSIONS: 3,
    ApiKey.DESCRIBE_ACLS: 2,
    ApiKey.CREATE_ACLS: 2,
    ApiKey.DELETE_ACLS: 2,
    ApiKey.SASL_AUTHENTICATE: 2,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.OFFSET_DELETE: None,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: 0,
    ApiKey.CONSUMER_GROUP_DESCRIBE: 0,
}


def test_served_table_is_the_documented_one() -> None:
    assert {k: (a.min_version, a.max_version) for k, a in SERVED.items()} == KAFKA_RANGES
    for key, api in SERVED.items():
        assert api.request.API_KEY == api.response.API_KEY == key
        assert api.request.FLEXIBLE == api.response.FLEXIBLE == KAFKA_FLEXIBLE[key]


def test_api_versions_response_lists_the_table() -> None:
    resp = api_versions_response()
    assert [(a.api_key, a.min_version, a.max_version) for a in resp.api_keys] == sorted(
        (k, lo, hi) for k, (lo, hi) in KAFKA_RANGES.items()
    )


def header(api_key: int, version: int) -> RequestHeader:
    return RequestHeader(api_key, version, 42, "client-1")


def test_flexible_request_uses_header_v2_and_keeps_the_int16_client_id() -> None:
    frame = framing.encode_request(header(ApiKey.API_VERSIONS, 3), ApiVersionsRequest("py", "1"))
    # size | key 18 | version 3 | correlation 42 | client id, int16 length | header tags
    assert frame[4:23] == b"\x00\x12\x00\x03\x00\x00\x00\x2a\x00\x08client-1\x00"
    hdr, body, extra = framing.decode_request(frame[4:])
    assert (hdr, extra) == (header(ApiKey.API_VERSIONS, 3), 0)
    assert body == ApiVersionsRequest("py", "1")


def test_api_versions_response_header_is_v0_even_when_flexible() -> None:
    frame = framing.encode_response(42, 3, api_versions_response())
    assert frame[4:8] == b"\0\0\0\x2a"
    # No header tagged-field byte: the body's error code follows the correlation id.
    assert frame[8:10] == b"\0\0"
    correlation_id, body = framing.decode_response(ApiKey.API_VERSIONS, 3, frame[4:])
    assert (correlation_id, body) == (42, api_versions_response())


def test_other_flexible_responses_use_header_v1() -> None:
    from fastcoord.protocol.messages import HeartbeatResponse

    frame = framing.encode_response(42, 4, HeartbeatResponse(error_code=27))
    assert frame[4:9] == b"\0\0\0\x2a\0"


def test_unknown_api_key_is_unsupported_with_the_correlation_id() -> None:
    frame = b"\x00\x63\x00\x00\x00\x00\x00\x07"
    with pytest.raises(UnsupportedVersion, match="unknown API key 99") as info:
        framing.decode_request(frame)
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (99, 0, 7)


def test_produce_before_v3_is_not_served() -> None:
    # Versions 0-2 predate the v2 message format, which is all a client negotiates for.
    with pytest.raises(UnsupportedVersion, match="is not served"):
        framing.decode_request(b"\x00\x00\x00\x02\x00\x00\x00\x07\xff\xff")


@pytest.mark.parametrize(("api_key", "version"), [(18, 5), (18, -1), (11, 10), (1, 3), (47, 1)])
def test_unserved_version_is_unsupported(api_key: int, version: int) -> None:
    frame = api_key.to_bytes(2, "big") + version.to_bytes(2, "big", signed=True) + b"\0\0\0\x07"
    with pytest.raises(UnsupportedVersion, match="is not served") as info:
        framing.decode_request(frame + b"\x00\x00\x00")
    assert info.value.correlation_id == 7


def test_unsupported_api_versions_reply_is_v0_encodable() -> None:
    # KIP-511: the reply to an ApiVersions request of an unknown version is v0 with the ranges.
    reply = api_versions_response(ErrorCode.UNSUPPORTED_VERSION)
    frame = framing.encode_response(7, 0, reply)
    _, body = framing.decode_response(ApiKey.API_VERSIONS, 0, frame[4:])
    assert isinstance(body, ApiVersionsResponse)
    assert body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert len(body.api_keys) == len(SERVED)


def test_errors_name_message_version_and_field_path() -> None:
    msg = JoinGroupRequest(
        group_id="g",
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol("range", b"x"), JoinGroupRequestProtocol("rr", b"y")],
    )
    data = encode(msg, 7)
    with pytest.raises(ProtocolError) as info:
        decode(JoinGroupRequest, 7, data[:-3])
    assert str(info.value).startswith("JoinGroupRequest v7: protocols[1].")

    commit = OffsetCommitRequest(
        group_id="g",
        topics=[OffsetCommitRequestTopic("t", [OffsetCommitRequestPartition(0, 5)])],
    )
    data = bytearray(encode(commit, 2))
    data[-2:] = b"\x00\x09"  # committed_metadata claims 9 bytes, 0 follow
    with pytest.raises(
        ProtocolError,
        match=r"^OffsetCommitRequest v2: topics\[0\]\.partitions\[0\]\.committed_metadata: "
        r"string needs 9 bytes but 0 are left$",
    ):
        decode(OffsetCommitRequest, 2, bytes(data))


def test_header_errors_name_the_header() -> None:
    with pytest.raises(ProtocolError, match=r"^request header: int32 needs 4 bytes"):
        framing.decode_request(b"\x00\x0c\x00\x04\x00")
    with pytest.raises(ProtocolError, match=r"^HeartbeatRequest v4 header: client_id: string"):
        framing.decode_request(b"\x00\x0c\x00\x04\x00\x00\x00\x01\x00\x05ab")


def test_bytes_left_over_after_a_message_are_refused() -> None:
    with pytest.raises(ProtocolError, match=r"^MetadataRequest v1: 1 bytes left over"):
        decode(MetadataRequest, 1, encode(MetadataRequest(topics=None), 1) + b"\0")


def test_non_nullable_none_and_out_of_range_values_are_refused_on_encode() -> None:
    with pytest.raises(ProtocolError, match=r"^JoinGroupRequest v5: group_id: cannot encode None"):
        encode(JoinGroupRequest(group_id=None), 5)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="session_timeout_ms: int32 value 2147483648"):
        encode(JoinGroupRequest(session_timeout_ms=2**31), 5)
    with pytest.raises(ProtocolError, match=r"^MetadataRequest v0: topics: non-nullable array"):
        encode(MetadataRequest(topics=None), 0)


def test_absent_fields_take_kafka_defaults() -> None:
    # rebalance_timeout_ms arrived in v1; a v0 request decodes to Kafka's default of -1.
    msg = decode(JoinGroupRequest, 0, encode(JoinGroupRequest(session_timeout_ms=10), 0))
    assert msg.rebalance_timeout_ms == -1
    assert msg.group_instance_id is None


def test_writer_output_is_independent_of_reused_buffers() -> None:
    w = Writer()
    w.int32(1)
    first = w.getvalue()
    w.int32(2)
    assert first == b"\0\0\0\x01"
