"""Codec speed, compiled against the pure-Python twin in the same run.

Inputs are built once at import, and the classes have no `setup`: asv_runner times every
call on its own when a class has setup hooks (asv#966), which buries sub-microsecond
operations under the timer's own cost. Without them asv batches calls as timeit does.

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
from fastcoord.protocol.codec import is_flexible, plan_for
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


class Inputs:
    """Encoded and decoded forms of one message at one version, with its plan."""

    def __init__(self, msg: Message, version: int) -> None:
        self.msg = msg
        self.plan = plan_for(type(msg), version, is_flexible(type(msg), version))
        self.encoded = struct_codec.encode_body(self.plan, msg)


HEARTBEAT_FRAME = framing.encode_request(
    RequestHeader(ApiKey.HEARTBEAT, 4, 123456, "rdkafka"), heartbeat_request()
)[4:]
HEARTBEAT_RESPONSE = HeartbeatResponse(0, 0)
JOIN_REQUEST = Inputs(join_group_request(), 7)
JOIN_LEADER_RESPONSE = {n: Inputs(join_group_leader_response(n), 7) for n in (10, 1000)}
COMMIT_REQUEST = {n: Inputs(offset_commit_request(n), 8) for n in (100,)}
COMMIT_RESPONSE = {n: Inputs(offset_commit_response(n), 8) for n in (100,)}


class HeartbeatV4:
    """Request frame decode, response frame encode, and both: what one heartbeat costs."""

    params = (["compiled", "twin"],)
    param_names = ["impl"]

    def time_decode_request(self, impl: str) -> None:
        IMPLS[impl].decode_heartbeat_request(HEARTBEAT_FRAME)

    def time_encode_response(self, impl: str) -> None:
        IMPLS[impl].encode_heartbeat_response(123456, 4, HEARTBEAT_RESPONSE)

    def time_decode_request_encode_response(self, impl: str) -> None:
        codec = IMPLS[impl]
        header, _, _ = codec.decode_heartbeat_request(HEARTBEAT_FRAME)
        codec.encode_heartbeat_response(header.correlation_id, 4, HEARTBEAT_RESPONSE)


class JoinGroupV7:
    """A member's request, and the leader's response carrying every member's subscription."""

    params = ([10, 1000], ["compiled", "twin"])
    param_names = ["members", "impl"]

    def time_decode_request(self, members: int, impl: str) -> None:
        BODY_IMPLS[impl].decode_body(JOIN_REQUEST.plan, JOIN_REQUEST.encoded, 0)

    def time_encode_request(self, members: int, impl: str) -> None:
        BODY_IMPLS[impl].encode_body(JOIN_REQUEST.plan, JOIN_REQUEST.msg)

    def time_decode_leader_response(self, members: int, impl: str) -> None:
        inputs = JOIN_LEADER_RESPONSE[members]
        BODY_IMPLS[impl].decode_body(inputs.plan, inputs.encoded, 0)

    def time_encode_leader_response(self, members: int, impl: str) -> None:
        inputs = JOIN_LEADER_RESPONSE[members]
        BODY_IMPLS[impl].encode_body(inputs.plan, inputs.msg)


class OffsetCommitV8:
    params = ([100], ["compiled", "twin"])
    param_names = ["partitions", "impl"]

    def time_decode_request(self, partitions: int, impl: str) -> None:
        inputs = COMMIT_REQUEST[partitions]
        BODY_IMPLS[impl].decode_body(inputs.plan, inputs.encoded, 0)

    def time_encode_request(self, partitions: int, impl: str) -> None:
        inputs = COMMIT_REQUEST[partitions]
        BODY_IMPLS[impl].encode_body(inputs.plan, inputs.msg)

    def time_decode_response(self, partitions: int, impl: str) -> None:
        inputs = COMMIT_RESPONSE[partitions]
        BODY_IMPLS[impl].decode_body(inputs.plan, inputs.encoded, 0)

    def time_encode_response(self, partitions: int, impl: str) -> None:
        inputs = COMMIT_RESPONSE[partitions]
        BODY_IMPLS[impl].encode_body(inputs.plan, inputs.msg)
