"""The compiled body codec (_ext/struct_codec.pyx) against its twin, for every message.

Same objects from the same bytes, same bytes from the same objects, same errors from
broken bytes and from values that cannot be encoded. Runs whatever FASTCOORD_NO_EXTENSIONS
says: both modules are imported directly.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastcoord._ext import struct_codec as compiled  # type: ignore[attr-defined]
from fastcoord.protocol import struct_codec as twin
from fastcoord.protocol.codec import Op, is_flexible, plan_for
from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.messages import (
    FetchableTopicResponse,
    FetchResponse,
    JoinGroupRequest,
    LeaderIdAndEpoch,
    MetadataResponse,
    MetadataResponseTopic,
    PartitionData,
)
from fastcoord.protocol.schema import Message
from tests.protocol.strategies import (
    ALL_MESSAGE_VERSIONS,
    edge_instance,
    message_id,
    struct_strategy,
)
from tests.protocol.test_fuzz import mutate


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(*args))
    except ProtocolError as exc:
        return (type(exc).__name__, str(exc))


def test_op_numbers_agree() -> None:
    assert {op.name: int(op) for op in Op} == compiled.OPS


@pytest.mark.parametrize("case", ALL_MESSAGE_VERSIONS, ids=message_id)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_messages_agree(case: tuple[type[Message], int], data: st.DataObject) -> None:
    cls, version = case
    plan = plan_for(cls, version, is_flexible(cls, version))
    msg = data.draw(struct_strategy(cls, version))
    encoded = compiled.encode_body(plan, msg)
    assert encoded == twin.encode_body(plan, msg)
    decoded = (msg, len(encoded))
    assert compiled.decode_body(plan, encoded, 0) == twin.decode_body(plan, encoded, 0) == decoded
    # Bytes after the message are not read: the codec says where the message ended.
    padded = encoded + data.draw(st.binary(min_size=1, max_size=12))
    assert compiled.decode_body(plan, padded, 0) == twin.decode_body(plan, padded, 0) == decoded


@pytest.mark.parametrize("case", ALL_MESSAGE_VERSIONS, ids=message_id)
def test_edge_and_mutated_messages_agree(case: tuple[type[Message], int]) -> None:
    cls, version = case
    plan = plan_for(cls, version, is_flexible(cls, version))
    rng = random.Random(f"{cls.__name__}-{version}")
    for mode in ("min", "null", "max"):
        msg = edge_instance(cls, version, mode)
        encoded = compiled.encode_body(plan, msg)
        assert encoded == twin.encode_body(plan, msg)
        assert compiled.decode_body(plan, encoded, 0) == (msg, len(encoded))
        for _ in range(30):
            broken = mutate(rng, encoded)
            assert outcome(compiled.decode_body, plan, broken, 0) == outcome(
                twin.decode_body, plan, broken, 0
            )
            padded = encoded + rng.randbytes(rng.randint(1, 8))
            assert compiled.decode_body(plan, padded, 0) == (msg, len(encoded))
            assert twin.decode_body(plan, padded, 0) == (msg, len(encoded))


def test_body_after_an_offset_and_other_buffer_types() -> None:
    msg = JoinGroupRequest(group_id="g", protocol_type="consumer")
    plan = plan_for(JoinGroupRequest, 7, True)
    body = compiled.encode_body(plan, msg)
    end = len(body)
    assert compiled.decode_body(plan, b"header" + body, 6) == (msg, 6 + end)
    assert compiled.decode_body(plan, b"header" + body + b"more", 6) == (msg, 6 + end)
    assert compiled.decode_body(plan, bytearray(body), 0) == (msg, end)
    assert compiled.decode_body(plan, memoryview(body + b"more"), 0) == (msg, end)


def test_tagged_fields_are_written_only_when_not_default() -> None:
    plan = plan_for(FetchResponse, 12, True)
    plain = FetchResponse(responses=[FetchableTopicResponse("t", [PartitionData(0)])])
    tagged = FetchResponse(
        responses=[
            FetchableTopicResponse("t", [PartitionData(0, current_leader=LeaderIdAndEpoch(1, 2))])
        ]
    )
    a, b = compiled.encode_body(plan, plain), compiled.encode_body(plan, tagged)
    assert a == twin.encode_body(plan, plain) and b == twin.encode_body(plan, tagged)
    assert len(b) == len(a) + 1 + 1 + 9  # tag, size, two int32s and the struct's tag count
    assert compiled.decode_body(plan, b, 0) == (tagged, len(b))


BAD_VALUES = [
    JoinGroupRequest(session_timeout_ms=2**31),
    JoinGroupRequest(session_timeout_ms=1.5),  # type: ignore[arg-type]
    JoinGroupRequest(group_id=None),  # type: ignore[arg-type]
    JoinGroupRequest(group_id="x" * 40000),
    JoinGroupRequest(group_id="\ud800"),  # a lone surrogate cannot be UTF-8
    JoinGroupRequest(protocols=None),  # type: ignore[arg-type]
    JoinGroupRequest(protocols=[1]),  # type: ignore[list-item]
    MetadataResponse(topics=[MetadataResponseTopic(topic_id="not-a-uuid")]),  # type: ignore[arg-type]
    MetadataResponse(topics=[MetadataResponseTopic(topic_id=uuid.UUID(int=5))]),
    MetadataResponse(topics=(MetadataResponseTopic(),)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("msg", BAD_VALUES, ids=range(len(BAD_VALUES)))
def test_unencodable_values_fail_the_same(msg: Message) -> None:
    for version in (5, 7, 10):
        plan = plan_for(type(msg), version, is_flexible(type(msg), version))
        assert outcome(compiled.encode_body, plan, msg) == outcome(twin.encode_body, plan, msg)
