"""fastcoord's wire codec against an independent implementation: kafka-python's.

The round-trip tests only show that fastcoord's encoder and decoder agree with each other:
a field in the wrong place or version, a wrong tag or nullability, or a compact length off
by one in both would pass them. Here every served (message, version) that kafka-python also
knows is encoded by one implementation and decoded by the other, both ways, with the
schema-derived values of strategies.py (random ones, the edge instances, all defaults), and
whole frames with headers go between them as between a client and the coordinator.
"""

from __future__ import annotations

import functools
import struct
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastcoord.protocol.codec import decode, encode
from fastcoord.protocol.framing import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    ApiVersionsResponse,
    MetadataResponse,
    MetadataResponseTopic,
)
from fastcoord.protocol.schema import ArrayOf, FieldSpec, Kind, Message, Struct, TypeRef, fields_of
from fastcoord.protocol.versions import SERVED, api_versions_response
from tests.protocol.strategies import (
    ALL_MESSAGE_VERSIONS,
    edge_instance,
    message_id,
    struct_strategy,
)

# kafka-python reads its JSON schemas with importlib.resources.read_text when its classes are
# created, which Python 3.11 and 3.12 deprecate; the suite turns warnings into errors.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)
    from kafka.protocol import sasl as kp_sasl
    from kafka.protocol.admin import acl as kp_acl
    from kafka.protocol.admin import groups as kp_groups
    from kafka.protocol.consumer import fetch as kp_fetch
    from kafka.protocol.consumer import group as kp_group
    from kafka.protocol.consumer import offsets as kp_offsets
    from kafka.protocol.metadata import api_versions as kp_api_versions
    from kafka.protocol.metadata import find_coordinator as kp_find_coordinator
    from kafka.protocol.metadata import metadata as kp_metadata
    from kafka.protocol.producer import produce as kp_produce

_KP_MODULES = (
    kp_produce,
    kp_fetch,
    kp_offsets,
    kp_metadata,
    kp_group,
    kp_find_coordinator,
    kp_groups,
    kp_api_versions,
    kp_acl,
    kp_sasl,
)

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

# kafka-python's MetadataResponse.json_patch renames both authorized-operations fields.
_KP_NAMES: dict[tuple[type[Struct], str], str] = {
    (MetadataResponse, "cluster_authorized_operations"): "authorized_operations",
    (MetadataResponseTopic, "topic_authorized_operations"): "authorized_operations",
}


def kp_class(cls: type[Message]) -> Any:
    """kafka-python's class of the same name (and API key) as a fastcoord message."""
    for module in _KP_MODULES:
        kp_cls = getattr(module, cls.__name__, None)
        if kp_cls is not None:
            assert kp_cls.API_KEY == cls.API_KEY
            return kp_cls
    raise LookupError(f"kafka-python has no {cls.__name__}")


def kp_valid_versions(cls: type[Message]) -> tuple[int, int]:
    """The JSON validVersions; kafka-python's min_version says 0 whatever the schema says."""
    lo, hi = kp_class(cls).valid_versions
    return lo, hi


def _kp_knows(cls: type[Message]) -> bool:
    return any(getattr(module, cls.__name__, None) is not None for module in _KP_MODULES)


def _case(cls: type[Message], version: int) -> Any:
    if not _kp_knows(cls):
        # The consumer group protocol's messages are checked byte by byte against Kafka's
        # schemas in test_consumer_group_messages.py instead.
        reason = f"kafka-python has no {cls.__name__}"
        return pytest.param(
            (cls, version), id=message_id((cls, version)), marks=[pytest.mark.skip(reason=reason)]
        )
    lo, hi = kp_valid_versions(cls)
    marks = []
    if not lo <= version <= hi:
        reason = f"kafka-python's {cls.__name__} has validVersions {lo}-{hi}, not v{version}"
        marks.append(pytest.mark.skip(reason=reason))
    return pytest.param((cls, version), id=message_id((cls, version)), marks=marks)


CASES = [_case(cls, version) for cls, version in ALL_MESSAGE_VERSIONS]


def _frame_cases(kind: str) -> list[Any]:
    """Each request (or response) class at its lowest and highest version both sides know."""
    cases = []
    for api in sorted(SERVED.values(), key=lambda a: a.key):
        cls = api.request if kind == "request" else api.response
        if not _kp_knows(cls):
            cases.append(_case(cls, api.min_version))
            continue
        kp_lo, kp_hi = kp_valid_versions(cls)
        lo, hi = max(api.min_version, kp_lo), min(api.max_version, kp_hi)
        cases += [_case(cls, version) for version in sorted({lo, hi})]
    return cases


REQUEST_FRAME_CASES = _frame_cases("request")
RESPONSE_FRAME_CASES = _frame_cases("response")

# Header values that go with each edge mode: (correlation id, client id).
HEADER_EDGES: dict[str, tuple[int, str | None]] = {
    "min": (INT32_MIN, ""),
    "null": (0, None),
    "max": (INT32_MAX, "grüße-client-\U0001f600-" + "c" * 300),
}


# --- values between the two object models ------------------------------------------------


def _kp_field(cls: type[Struct], spec: FieldSpec, kp_fields: dict[str, Any]) -> Any:
    name = _KP_NAMES.get((cls, spec.name), spec.name)
    assert name in kp_fields, f"kafka-python's {cls.__name__} has no field {name!r}"
    return kp_fields[name]


def _int32_from_bits(bits: set[int] | None) -> int:
    """kafka-python reads an authorized-operations int32 as its set bits, None for INT32_MIN."""
    if bits is None:
        return INT32_MIN
    value = sum(1 << bit for bit in bits)
    return value - (1 << 32) if value > INT32_MAX else value


def _bits_from_int32(value: int) -> set[int] | None:
    if value == INT32_MIN:
        return None
    return {bit for bit in range(32) if value >> bit & 1}


def _uuid_from_kp(raw: Any) -> uuid.UUID:
    if raw is None:  # kafka-python reads the zero UUID as None
        return uuid.UUID(int=0)
    if isinstance(raw, uuid.UUID):
        return raw
    if isinstance(raw, bytes | bytearray | memoryview):
        return uuid.UUID(bytes=bytes(raw))
    return uuid.UUID(str(raw))


def _value_from_kp(ref: TypeRef, kp_field: Any, version: int, raw: Any) -> Any:
    if isinstance(ref, ArrayOf):
        if raw is None:
            return None
        item_field = kp_field if isinstance(ref.item, type) else kp_field.array_of
        return [_value_from_kp(ref.item, item_field, version, item) for item in raw]
    if isinstance(ref, type):
        return struct_from_kp(ref, kp_field.fields, version, raw)
    if ref is Kind.UUID:
        return _uuid_from_kp(raw)
    if kp_field.type_str == "bitfield":
        return _int32_from_bits(raw)
    if ref in (Kind.BYTES, Kind.RECORDS) and raw is not None:
        return bytes(raw)
    return raw


def struct_from_kp(cls: type[Struct], kp_fields: dict[str, Any], version: int, kp_obj: Any) -> Any:
    """The fastcoord struct holding what a kafka-python object holds at `version`."""
    values = {}
    for spec in fields_of(cls):
        if not spec.exists_in(version):
            continue
        kp_field = _kp_field(cls, spec, kp_fields)
        raw = getattr(kp_obj, kp_field.name)
        if raw is None and isinstance(spec.type, type) and spec.tagged_in(version):
            # An absent tagged struct is None to kafka-python and its default to Kafka.
            values[spec.name] = spec.default_value()
        else:
            values[spec.name] = _value_from_kp(spec.type, kp_field, version, raw)
    return cls(**values)


def _value_to_kp(ref: TypeRef, kp_field: Any, version: int, value: Any) -> Any:
    if isinstance(ref, ArrayOf):
        if value is None:
            return None
        item_field = kp_field if isinstance(ref.item, type) else kp_field.array_of
        return [_value_to_kp(ref.item, item_field, version, item) for item in value]
    if isinstance(ref, type):
        return struct_to_kp(value, kp_field.data_class, kp_field.fields, version)
    if kp_field.type_str == "bitfield":
        return _bits_from_int32(value)
    return value


def struct_to_kp(obj: Struct, kp_cls: Any, kp_fields: dict[str, Any], version: int) -> Any:
    """A kafka-python object with the values of every field `obj` has at `version`."""
    cls = type(obj)
    kwargs = {}
    for spec in fields_of(cls):
        if spec.exists_in(version):
            kp_field = _kp_field(cls, spec, kp_fields)
            value = getattr(obj, spec.name)
            kwargs[kp_field.name] = _value_to_kp(spec.type, kp_field, version, value)
    return kp_cls(version=version, **kwargs)


def message_to_kp(msg: Message, version: int) -> Any:
    kp_cls = kp_class(type(msg))
    return struct_to_kp(msg, kp_cls, kp_cls.fields, version)


def message_from_kp(cls: type[Message], version: int, kp_obj: Any) -> Any:
    return struct_from_kp(cls, kp_class(cls).fields, version, kp_obj)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:150] + "...(" + str(len(text)) + " chars)"


def difference(want: Any, got: Any, path: str = "") -> str:
    """Where two values first differ, for assertion messages."""
    if isinstance(want, Struct) and type(got) is type(want):
        for name in want.__struct_fields__:
            found = difference(getattr(want, name), getattr(got, name), f"{path}.{name}")
            if found:
                return found
        return ""
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            found = difference(w, g, f"{path}[{i}]")
            if found:
                return found
        return ""
    if want != got:
        return f"{path or 'message'}: sent {_short(want)}, received {_short(got)}"
    return ""


# --- the two directions -------------------------------------------------------------------


def _kp_decode_body(cls: type[Message], version: int, data: bytes) -> Any:
    kp_cls = kp_class(cls)
    if kp_cls is kp_api_versions.ApiVersionsResponse:
        # Its decode() reads any body whose error_code is not 0 as v0 (a broker's answer to an
        # ApiVersions version it does not speak); cross-check the versioned schema itself.
        return super(kp_cls, kp_cls).decode(data, version=version)
    return kp_cls.decode(data, version=version)


def fastcoord_to_kafka_python(msg: Message, version: int) -> None:
    """fastcoord encodes, kafka-python decodes the same values and re-encodes the same bytes."""
    cls = type(msg)
    data = encode(msg, version)
    kp_obj = _kp_decode_body(cls, version, data)
    got = message_from_kp(cls, version, kp_obj)
    assert got == msg, difference(msg, got)
    # Nothing was left unread and both omit the same tagged fields. (The object knows its
    # version; encode(version=...) would trip over the header slot that decode leaves unset.)
    again = bytes(kp_obj.encode())
    assert again == data, f"kafka-python re-encodes {_short(again)}, fastcoord sent {_short(data)}"


def kafka_python_to_fastcoord(msg: Message, version: int) -> None:
    """kafka-python encodes the values, fastcoord decodes the object they came from."""
    cls = type(msg)
    data = bytes(message_to_kp(msg, version).encode(version=version))
    got = decode(cls, version, data)
    assert got == msg, difference(msg, got)


DIRECTIONS = [
    pytest.param(fastcoord_to_kafka_python, id="fastcoord-to-kafka-python"),
    pytest.param(kafka_python_to_fastcoord, id="kafka-python-to-fastcoord"),
]
Check = Callable[[Message, int], None]


# --- the schema ---------------------------------------------------------------------------


def _type_differences(ref: TypeRef, kp_field: Any, version: int, where: str) -> Iterator[str]:
    if isinstance(ref, ArrayOf):
        if not kp_field.is_array():
            yield f"{where}: an array here, {kp_field.type_str} in kafka-python"
            return
        item_field = kp_field if isinstance(ref.item, type) else kp_field.array_of
        yield from _type_differences(ref.item, item_field, version, f"{where}[]")
    elif isinstance(ref, type):
        if not (kp_field.is_struct() or kp_field.is_struct_array()):
            yield f"{where}: a struct here, {kp_field.type_str} in kafka-python"
            return
        yield from schema_differences(ref, kp_field.fields, version, where)
    else:
        theirs = "int32" if kp_field.type_str == "bitfield" else kp_field.type_str
        if ref.value != theirs:
            yield f"{where}: {ref.value} here, {theirs} in kafka-python"


def schema_differences(
    cls: type[Struct], kp_fields: dict[str, Any], version: int, path: str
) -> Iterator[str]:
    ours = [spec for spec in fields_of(cls) if spec.exists_in(version)]
    theirs = [field for field in kp_fields.values() if field.for_version_q(version)]
    our_names = [_KP_NAMES.get((cls, spec.name), spec.name) for spec in ours]
    their_names = [field.name for field in theirs]
    if our_names != their_names:
        yield f"{path}: fields {our_names}, in kafka-python {their_names}"
        return
    for spec, kp_field in zip(ours, theirs, strict=True):
        where = f"{path}.{spec.name}"
        nullable = spec.nullable_in(version)
        if nullable != kp_field.nullable_for_version_q(version):
            yield f"{where}: nullable={nullable} here, not in kafka-python"
        our_tag = spec.v.tag if spec.tagged_in(version) else None
        their_tag = kp_field.tag if kp_field.tagged_field_q(version) else None
        if our_tag != their_tag:
            yield f"{where}: tag {our_tag} here, {their_tag} in kafka-python"
        yield from _type_differences(spec.type, kp_field, version, where)


@pytest.mark.parametrize("case", CASES)
def test_fields_match_kafka_python_schema(case: tuple[type[Message], int]) -> None:
    """Same fields in the same order, types, nullability and tags (null and field order are
    what value round trips alone cannot see: both sides read a null that Kafka forbids)."""
    cls, version = case
    problems = list(schema_differences(cls, kp_class(cls).fields, version, cls.__name__))
    assert not problems, "\n".join(problems)


# --- message bodies -----------------------------------------------------------------------


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("mode", ["default", "min", "null", "max"])
def test_edge_values(case: tuple[type[Message], int], mode: str, direction: Check) -> None:
    cls, version = case
    msg = cls() if mode == "default" else edge_instance(cls, version, mode)
    direction(msg, version)


# Built once per case: building the strategy costs about as much as drawing from it.
_struct_strategy = functools.cache(struct_strategy)


@pytest.mark.parametrize("case", CASES)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_values(case: tuple[type[Message], int], data: st.DataObject) -> None:
    cls, version = case
    msg = data.draw(_struct_strategy(cls, version))
    fastcoord_to_kafka_python(msg, version)
    kafka_python_to_fastcoord(msg, version)


# --- whole frames -------------------------------------------------------------------------


def _size_prefix_ok(frame: bytes) -> bool:
    return bool(struct.unpack_from(">i", frame)[0] == len(frame) - 4)


@pytest.mark.parametrize("case", REQUEST_FRAME_CASES)
@pytest.mark.parametrize("mode", ["min", "null", "max"])
def test_request_frame_from_kafka_python(case: tuple[type[Message], int], mode: str) -> None:
    cls, version = case
    correlation_id, client_id = HEADER_EDGES[mode]
    msg = edge_instance(cls, version, mode)
    kp_obj = message_to_kp(msg, version)
    kp_obj.with_header(correlation_id=correlation_id, client_id=client_id)
    frame = bytes(kp_obj.encode(version=version, header=True, framed=True))
    assert _size_prefix_ok(frame)
    header, body, extra = decode_request(frame[4:])
    assert header == RequestHeader(cls.API_KEY, version, correlation_id, client_id)
    assert extra == 0
    assert body == msg, difference(msg, body)


@pytest.mark.parametrize("case", REQUEST_FRAME_CASES)
@pytest.mark.parametrize("mode", ["min", "null", "max"])
def test_request_frame_to_kafka_python(case: tuple[type[Message], int], mode: str) -> None:
    cls, version = case
    correlation_id, client_id = HEADER_EDGES[mode]
    msg = edge_instance(cls, version, mode)
    frame = encode_request(RequestHeader(cls.API_KEY, version, correlation_id, client_id), msg)
    assert _size_prefix_ok(frame)
    kp_obj = kp_class(cls).decode(frame[4:], version=version, header=True)
    kp_header = kp_obj.header
    assert (
        kp_header.request_api_key,
        kp_header.request_api_version,
        kp_header.correlation_id,
        kp_header.client_id,
    ) == (cls.API_KEY, version, correlation_id, client_id)
    body = message_from_kp(cls, version, kp_obj)
    assert body == msg, difference(msg, body)


def _response_edge(cls: type[Message], version: int, mode: str) -> Any:
    msg = edge_instance(cls, version, mode)
    if cls is ApiVersionsResponse and version > 0:
        # kafka-python reads an ApiVersionsResponse with an error as v0; see _kp_decode_body.
        msg = msgspec.structs.replace(msg, error_code=0)
    return msg


@pytest.mark.parametrize("case", RESPONSE_FRAME_CASES)
@pytest.mark.parametrize("mode", ["min", "null", "max"])
def test_response_frame_to_kafka_python(case: tuple[type[Message], int], mode: str) -> None:
    cls, version = case
    correlation_id, _ = HEADER_EDGES[mode]
    msg = _response_edge(cls, version, mode)
    frame = encode_response(correlation_id, version, msg)
    assert _size_prefix_ok(frame)
    kp_obj = kp_class(cls).decode(frame[4:], version=version, header=True)
    assert kp_obj.header.correlation_id == correlation_id
    body = message_from_kp(cls, version, kp_obj)
    assert body == msg, difference(msg, body)


@pytest.mark.parametrize("case", RESPONSE_FRAME_CASES)
@pytest.mark.parametrize("mode", ["min", "null", "max"])
def test_response_frame_from_kafka_python(case: tuple[type[Message], int], mode: str) -> None:
    cls, version = case
    correlation_id, _ = HEADER_EDGES[mode]
    msg = _response_edge(cls, version, mode)
    kp_obj = message_to_kp(msg, version)
    kp_obj.with_header(correlation_id=correlation_id)
    # Without version=: setting it on a response with a header fails in kafka-python 3.0.12
    # (it sets request_api_version on the ResponseHeader); the object has its version.
    frame = bytes(kp_obj.encode(header=True, framed=True))
    assert _size_prefix_ok(frame)
    got_correlation_id, body = decode_response(cls.API_KEY, version, frame[4:])
    assert got_correlation_id == correlation_id
    assert body == msg, difference(msg, body)


@pytest.mark.parametrize("version", range(5))
def test_api_versions_answer_matches_kafka_python(version: int) -> None:
    """The coordinator's real ApiVersions answer reads as kafka-python's client reads it, and
    both write the same frame: response header v0 (no tagged fields) even in flexible versions.
    """
    answer = api_versions_response()
    frame = encode_response(123, version, answer)
    assert frame[4:8] == struct.pack(">i", 123)
    assert frame[8:] == encode(answer, version)  # the body follows the correlation id
    kp_obj = kp_api_versions.ApiVersionsResponse.decode(frame[4:], version=version, header=True)
    assert kp_obj.header.correlation_id == 123
    assert kp_obj.error_code == 0
    served = sorted((a.key, a.min_version, a.max_version) for a in SERVED.values())
    assert [(k.api_key, k.min_version, k.max_version) for k in kp_obj.api_keys] == served
    assert message_from_kp(ApiVersionsResponse, version, kp_obj) == answer
    kp_answer = message_to_kp(answer, version)
    kp_answer.with_header(correlation_id=123)
    assert bytes(kp_answer.encode(header=True, framed=True)) == frame
