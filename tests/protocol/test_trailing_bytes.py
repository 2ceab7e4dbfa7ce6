"""Bytes after a well-formed request body are ignored and counted; responses stay strict
unless the caller, a client, asks otherwise.

Kafka's broker reads a request's header, then its body, and never looks at what follows
(RequestContext.parseRequest, AbstractRequest.parseRequest), so clients that write a few
bytes too many are served. librdkafka 2.16 does: its all-topics Metadata v9+ request
carries the topic list as four zero bytes where the compact form is one. A frame that is
malformed inside its message is still refused. Runs whatever FASTCOORD_NO_EXTENSIONS says
(frames.decode_request sends Heartbeat frames through the selected hot-frame codec, and
OffsetCommit frames through the selected commit codec, which gives an OffsetCommitBatch).
"""

from __future__ import annotations

import pytest

from fastcoord.protocol import frames, framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.codec import decode, encode
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
)
from fastcoord.protocol.schema import Message, Request
from tests.protocol.strategies import ALL_MESSAGE_VERSIONS, edge_instance, message_id

REQUESTS = [(cls, v) for cls, v in ALL_MESSAGE_VERSIONS if issubclass(cls, Request)]
RESPONSES = [(cls, v) for cls, v in ALL_MESSAGE_VERSIONS if not issubclass(cls, Request)]
# What a client might leave after its message: zeros (librdkafka's case), a varint's
# continuation bytes, what reads as a huge length, and plain junk.
TRAILERS = [b"\0", b"\x01\0\0", b"\0\0\0\0", b"\x80\x80", b"\xff" * 5, bytes(range(1, 40))]


def request_frame(cls: type[Message], version: int, mode: str) -> tuple[RequestHeader, Message]:
    return RequestHeader(cls.API_KEY, version, 7, "trailing"), edge_instance(cls, version, mode)


def as_served(msg: Request, version: int) -> Request | OffsetCommitBatch:
    """What frames.decode_request gives for a frame of `msg`."""
    if isinstance(msg, OffsetCommitRequest):
        return OffsetCommitBatch.from_request(msg, version)
    return msg


@pytest.mark.parametrize("case", REQUESTS, ids=message_id)
def test_bytes_after_a_request_are_ignored_and_counted(case: tuple[type[Message], int]) -> None:
    cls, version = case
    for mode in ("min", "null", "max"):
        header, msg = request_frame(cls, version, mode)
        assert isinstance(msg, Request)
        frame = framing.encode_request(header, msg)[4:]
        served = as_served(msg, version)
        assert frames.decode_request(frame) == (header, served, 0)
        for extra in TRAILERS:
            assert frames.decode_request(frame + extra) == (header, served, len(extra)), (
                mode,
                extra,
            )
            expected = (header, msg, len(extra))
            assert framing.decode_request(frame + extra) == expected, (mode, extra)
        assert framing.decode_request(bytearray(frame + b"\0\0")) == (header, msg, 2)
        assert framing.decode_request(memoryview(frame + b"\0\0")) == (header, msg, 2)


@pytest.mark.parametrize("case", REQUESTS, ids=message_id)
def test_a_request_cut_short_is_still_refused(case: tuple[type[Message], int]) -> None:
    """A frame that ends inside its message is malformed, whatever may follow elsewhere."""
    cls, version = case
    header, msg = request_frame(cls, version, "max")
    frame = framing.encode_request(header, msg)[4:]
    body = len(encode(msg, version))
    start = len(frame) - body
    cuts = sorted({start + body * k // 16 for k in range(16)} - {len(frame)})
    for cut in cuts:
        with pytest.raises(ProtocolError):
            frames.decode_request(frame[:cut])


def test_librdkafkas_all_topics_metadata_request() -> None:
    # What librdkafka 2.16 writes for "every topic" at v12: header, then an int32 zero
    # where the compact array goes, then allow_auto_topic_creation, the authorized
    # operations flag and the tagged fields. Kafka reads the first zero as a null array
    # (every topic), the next three as the two flags and an empty tag section, and
    # ignores the three bytes left.
    frame = bytes.fromhex("0003000c00000003000772646b61666b6100") + b"\0\0\0\0\x01\0\0"
    header, request, extra = frames.decode_request(frame)
    assert header == RequestHeader(ApiKey.METADATA, 12, 3, "rdkafka")
    assert request == MetadataRequest(topics=None, allow_auto_topic_creation=False)
    assert extra == 3


@pytest.mark.parametrize(
    "broken",
    [
        b"\xff\xfe",  # a group id of length -2
        b"\x00\x03g\xff",  # invalid UTF-8 in the group id
    ],
    ids=["negative-length", "invalid-utf8"],
)
def test_a_request_broken_inside_is_refused_even_with_bytes_after_it(broken: bytes) -> None:
    frame = framing.encode_request(
        RequestHeader(ApiKey.JOIN_GROUP, 5, 1, "c"),
        JoinGroupRequest(protocols=[JoinGroupRequestProtocol("range", b"m")]),
    )[4:]
    # The header ends with the client id "c"; the body starts with the group id.
    start = frame.index(b"\x00\x01c") + 3
    with pytest.raises(ProtocolError, match=r"^JoinGroupRequest v5: group_id: "):
        frames.decode_request(frame[:start] + broken + b"\0" * 40)
    heartbeat = framing.encode_request(
        RequestHeader(ApiKey.HEARTBEAT, 3, 1, "c"), HeartbeatRequest("g", 1, "m", None)
    )[4:]
    start = heartbeat.index(b"\x00\x01c") + 3
    with pytest.raises(ProtocolError, match=r"^HeartbeatRequest v3: group_id: "):
        frames.decode_request(heartbeat[:start] + broken + b"\0" * 12)


@pytest.mark.parametrize("case", RESPONSES, ids=message_id)
def test_bytes_after_a_response_are_refused(case: tuple[type[Message], int]) -> None:
    cls, version = case
    frame = framing.encode_response(9, version, edge_instance(cls, version, "min"))[4:]
    assert frames.decode_response(cls.API_KEY, version, frame)[0] == 9
    for extra in (b"\0", b"\0\0\0"):
        with pytest.raises(ProtocolError, match=rf"{len(extra)} bytes left over after the message"):
            frames.decode_response(cls.API_KEY, version, frame + extra)


@pytest.mark.parametrize("case", RESPONSES, ids=message_id)
def test_a_client_may_ignore_bytes_after_a_response(case: tuple[type[Message], int]) -> None:
    # As Kafka's clients read a response: the fields they know, then stop. fastcoord's own
    # client asks for this, for servers (the librdkafka mock cluster) that write more.
    cls, version = case
    message = edge_instance(cls, version, "min")
    frame = framing.encode_response(9, version, message)[4:]
    got = framing.decode_response(cls.API_KEY, version, frame + b"\0\0\0", ignore_trailing=True)
    assert got == framing.decode_response(cls.API_KEY, version, frame)


def test_whole_body_decoding_stays_strict() -> None:
    body = encode(MetadataResponse(), 12)
    assert decode(MetadataResponse, 12, body) == MetadataResponse()
    with pytest.raises(ProtocolError, match=r"^MetadataResponse v12: 2 bytes left over"):
        decode(MetadataResponse, 12, body + b"\0\0")
