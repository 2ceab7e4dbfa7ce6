"""Codec speed: the Heartbeat hot path (compiled and twin) and the schema-driven codec."""

from __future__ import annotations

from types import ModuleType

from fastcoord._ext import hot_frames as compiled  # type: ignore[attr-defined]
from fastcoord.protocol import framing
from fastcoord.protocol import hot_frames as twin
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.codec import decode, encode
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
)

from .common import (
    heartbeat_request,
    join_group_leader_response,
    join_group_request,
    offset_commit_request,
    offset_commit_response,
)

IMPLS: dict[str, ModuleType] = {"compiled": compiled, "twin": twin}


class HeartbeatV4:
    """Request frame decode, response frame encode, and both: what one heartbeat costs."""

    params = (["compiled", "twin"],)
    param_names = ["impl"]

    def setup(self, impl: str) -> None:
        self.codec = IMPLS[impl]
        header = RequestHeader(ApiKey.HEARTBEAT, 4, 123456, "rdkafka")
        self.frame = framing.encode_request(header, heartbeat_request())[4:]
        self.response = HeartbeatResponse(0, 0)

    def time_decode_request(self, impl: str) -> None:
        self.codec.decode_heartbeat_request(self.frame)

    def time_encode_response(self, impl: str) -> None:
        self.codec.encode_heartbeat_response(123456, 4, self.response)

    def time_decode_request_encode_response(self, impl: str) -> None:
        header, _ = self.codec.decode_heartbeat_request(self.frame)
        self.codec.encode_heartbeat_response(header.correlation_id, 4, self.response)


class JoinGroupV7:
    """A member's request, and the leader's response carrying every member's subscription."""

    params = ([10, 1000],)
    param_names = ["members"]

    def setup(self, members: int) -> None:
        self.request = join_group_request()
        self.request_bytes = encode(self.request, 7)
        self.response = join_group_leader_response(members)
        self.response_bytes = encode(self.response, 7)

    def time_decode_request(self, members: int) -> None:
        decode(JoinGroupRequest, 7, self.request_bytes)

    def time_encode_request(self, members: int) -> None:
        encode(self.request, 7)

    def time_decode_leader_response(self, members: int) -> None:
        decode(JoinGroupResponse, 7, self.response_bytes)

    def time_encode_leader_response(self, members: int) -> None:
        encode(self.response, 7)


class OffsetCommitV8:
    params = ([100],)
    param_names = ["partitions"]

    def setup(self, partitions: int) -> None:
        self.request = offset_commit_request(partitions)
        self.request_bytes = encode(self.request, 8)
        self.response = offset_commit_response(partitions)
        self.response_bytes = encode(self.response, 8)

    def time_decode_request(self, partitions: int) -> None:
        decode(OffsetCommitRequest, 8, self.request_bytes)

    def time_encode_request(self, partitions: int) -> None:
        encode(self.request, 8)

    def time_decode_response(self, partitions: int) -> None:
        decode(OffsetCommitResponse, 8, self.response_bytes)

    def time_encode_response(self, partitions: int) -> None:
        encode(self.response, 8)
