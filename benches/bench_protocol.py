"""Codec speed, compiled against the pure-Python twin in the same run.

HeartbeatV4 times the hand-written hot-frame codec (whole frames, header included);
JoinGroupV7 and OffsetCommitV8 time message bodies through the schema-driven codec's plans
(_ext/struct_codec.pyx, or its twin protocol/struct_codec.py).
"""

from __future__ import annotations

from types import ModuleType

from fastcoord._ext import hot_frames as compiled  # type: ignore[attr-defined]
from fastcoord._ext import struct_codec as compiled_bodies  # type: ignore[attr-defined]
from fastcoord.protocol import framing, struct_codec
from fastcoord.protocol import hot_frames as twin
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.codec import StructPlan, is_flexible, plan_for
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import HeartbeatResponse
from fastcoord.protocol.schema import Message

from .common import (
    heartbeat_request,
    join_group_leader_response,
    join_group_request,
    offset_commit_request,
    offset_commit_response,
)

IMPLS: dict[str, ModuleType] = {"compiled": compiled, "twin": twin}
BODY_IMPLS: dict[str, ModuleType] = {"compiled": compiled_bodies, "twin": struct_codec}


def plan_of(msg: Message, version: int) -> StructPlan:
    return plan_for(type(msg), version, is_flexible(type(msg), version))


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

    params = ([10, 1000], ["compiled", "twin"])
    param_names = ["members", "impl"]

    def setup(self, members: int, impl: str) -> None:
        self.codec = BODY_IMPLS[impl]
        self.request = join_group_request()
        self.request_plan = plan_of(self.request, 7)
        self.request_bytes = struct_codec.encode_body(self.request_plan, self.request)
        self.response = join_group_leader_response(members)
        self.response_plan = plan_of(self.response, 7)
        self.response_bytes = struct_codec.encode_body(self.response_plan, self.response)

    def time_decode_request(self, members: int, impl: str) -> None:
        self.codec.decode_body(self.request_plan, self.request_bytes, 0)

    def time_encode_request(self, members: int, impl: str) -> None:
        self.codec.encode_body(self.request_plan, self.request)

    def time_decode_leader_response(self, members: int, impl: str) -> None:
        self.codec.decode_body(self.response_plan, self.response_bytes, 0)

    def time_encode_leader_response(self, members: int, impl: str) -> None:
        self.codec.encode_body(self.response_plan, self.response)


class OffsetCommitV8:
    params = ([100], ["compiled", "twin"])
    param_names = ["partitions", "impl"]

    def setup(self, partitions: int, impl: str) -> None:
        self.codec = BODY_IMPLS[impl]
        self.request = offset_commit_request(partitions)
        self.request_plan = plan_of(self.request, 8)
        self.request_bytes = struct_codec.encode_body(self.request_plan, self.request)
        self.response = offset_commit_response(partitions)
        self.response_plan = plan_of(self.response, 8)
        self.response_bytes = struct_codec.encode_body(self.response_plan, self.response)

    def time_decode_request(self, partitions: int, impl: str) -> None:
        self.codec.decode_body(self.request_plan, self.request_bytes, 0)

    def time_encode_request(self, partitions: int, impl: str) -> None:
        self.codec.encode_body(self.request_plan, self.request)

    def time_decode_response(self, partitions: int, impl: str) -> None:
        self.codec.decode_body(self.response_plan, self.response_bytes, 0)

    def time_encode_response(self, partitions: int, impl: str) -> None:
        self.codec.encode_body(self.response_plan, self.response)
