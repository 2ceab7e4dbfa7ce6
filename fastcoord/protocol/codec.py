"""The one schema-driven decoder and encoder for every message and version.

`decode(cls, version, data)` and `encode(message, version)` compile the struct's schema
(fastcoord.protocol.schema) once per (struct, version, flexible) into a plan: a list of
field readers and writers. Flexible versions use compact strings, bytes and arrays and end
every struct with tagged fields (unknown tags are skipped; a tagged field is written only
when it differs from its default). Errors are ProtocolErrors whose path names the field,
e.g. "JoinGroupRequest v7: protocols[2].metadata: bytes needs 1000 bytes but 12 are left".

Plans are interpreted by _ext/struct_codec.pyx, compiled, or by their own Python closures
(protocol/struct_codec.py, the twin, with FASTCOORD_NO_EXTENSIONS=1).
"""

from __future__ import annotations

import enum
import functools
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from fastcoord import _accel
from fastcoord.protocol.errors import ProtocolError
from fastcoord.protocol.primitives import Reader, Writer
from fastcoord.protocol.schema import ArrayOf, FieldSpec, Kind, Message, Struct, TypeRef, fields_of

Buffer = bytes | bytearray | memoryview
ReadFn = Callable[[Reader], Any]
WriteFn = Callable[[Writer, Any], None]
S = TypeVar("S", bound=Struct)
M = TypeVar("M", bound=Message)

# (reader, writer, smallest encoding in bytes) per (kind, nullable, flexible).
_SCALARS: dict[Kind, tuple[ReadFn, WriteFn, int]] = {
    Kind.INT8: (Reader.int8, Writer.int8, 1),
    Kind.INT16: (Reader.int16, Writer.int16, 2),
    Kind.UINT16: (Reader.uint16, Writer.uint16, 2),
    Kind.INT32: (Reader.int32, Writer.int32, 4),
    Kind.INT64: (Reader.int64, Writer.int64, 8),
    Kind.FLOAT64: (Reader.float64, Writer.float64, 8),
    Kind.BOOL: (Reader.boolean, Writer.boolean, 1),
    Kind.UUID: (Reader.uuid_, Writer.uuid_, 16),
}
_STRINGS: dict[tuple[bool, bool], tuple[ReadFn, WriteFn, int]] = {
    # (nullable, flexible)
    (False, False): (Reader.string, Writer.string, 2),
    (True, False): (Reader.nullable_string, Writer.nullable_string, 2),
    (False, True): (Reader.compact_string, Writer.compact_string, 1),
    (True, True): (Reader.compact_nullable_string, Writer.compact_nullable_string, 1),
}
_BYTES: dict[tuple[bool, bool], tuple[ReadFn, WriteFn, int]] = {
    (False, False): (Reader.bytes_, Writer.bytes_, 4),
    (True, False): (Reader.nullable_bytes, Writer.nullable_bytes, 4),
    (False, True): (Reader.compact_bytes, Writer.compact_bytes, 1),
    (True, True): (Reader.compact_nullable_bytes, Writer.compact_nullable_bytes, 1),
}

_ENCODE_ERRORS = (AttributeError, TypeError, ValueError, OverflowError, struct.error)


class Op(enum.IntEnum):
    """Wire operations of a compiled plan; _ext/struct_codec.pyx mirrors these numbers."""

    INT8 = 1
    INT16 = 2
    UINT16 = 3
    INT32 = 4
    INT64 = 5
    FLOAT64 = 6
    BOOL = 7
    UUID = 8
    STRING = 9
    NULLABLE_STRING = 10
    COMPACT_STRING = 11
    COMPACT_NULLABLE_STRING = 12
    BYTES = 13
    NULLABLE_BYTES = 14
    COMPACT_BYTES = 15
    COMPACT_NULLABLE_BYTES = 16
    ARRAY = 17
    STRUCT = 18


@dataclass(frozen=True, slots=True)
class Wire:
    """How one value is laid out: the plan as data, for the compiled interpreter."""

    op: Op
    nullable: bool = False  # arrays and structs: may be null
    compact: bool = False  # arrays: unsigned-varint length
    min_item: int = 1  # arrays: smallest encoding of one element
    item: Wire | None = None  # arrays: the element
    plan: StructPlan | None = None  # structs


_SCALAR_OPS = {
    Kind.INT8: Op.INT8,
    Kind.INT16: Op.INT16,
    Kind.UINT16: Op.UINT16,
    Kind.INT32: Op.INT32,
    Kind.INT64: Op.INT64,
    Kind.FLOAT64: Op.FLOAT64,
    Kind.BOOL: Op.BOOL,
    Kind.UUID: Op.UUID,
}
# (nullable, flexible) -> op
_STRING_OPS = {
    (False, False): Op.STRING,
    (True, False): Op.NULLABLE_STRING,
    (False, True): Op.COMPACT_STRING,
    (True, True): Op.COMPACT_NULLABLE_STRING,
}
_BYTES_OPS = {
    (False, False): Op.BYTES,
    (True, False): Op.NULLABLE_BYTES,
    (False, True): Op.COMPACT_BYTES,
    (True, True): Op.COMPACT_NULLABLE_BYTES,
}


class StructPlan:
    """A compiled codec for one struct at one version."""

    __slots__ = (
        "cls",
        "flexible",
        "min_size",
        "native",
        "regular",
        "regular_wire",
        "tagged_read",
        "tagged_wire",
        "tagged_write",
    )

    def __init__(self, cls: type[Struct], version: int, flexible: bool) -> None:
        self.cls = cls
        self.flexible = flexible
        self.regular: list[tuple[str, ReadFn, WriteFn]] = []
        self.tagged_read: dict[int, tuple[str, ReadFn]] = {}
        self.tagged_write: list[tuple[int, str, WriteFn, FieldSpec]] = []
        # The same plan as data, for _ext/struct_codec.pyx, which caches its own form in
        # `native` on first use.
        self.regular_wire: list[tuple[str, Wire]] = []
        self.tagged_wire: list[tuple[int, str, Wire, FieldSpec]] = []
        self.native: object = None
        self.min_size = 1 if flexible else 0  # the tagged-field count
        for spec in fields_of(cls):
            if not spec.exists_in(version):
                continue
            read, write, size, wire = _field_codec(
                spec.type, spec.nullable_in(version), version, flexible
            )
            if flexible and spec.tagged_in(version):
                assert spec.v.tag is not None
                self.tagged_read[spec.v.tag] = (spec.name, read)
                self.tagged_write.append((spec.v.tag, spec.name, write, spec))
                self.tagged_wire.append((spec.v.tag, spec.name, wire, spec))
            else:
                self.regular.append((spec.name, read, write))
                self.regular_wire.append((spec.name, wire))
                self.min_size += size
        self.tagged_write.sort(key=lambda t: t[0])
        self.tagged_wire.sort(key=lambda t: t[0])

    def read(self, r: Reader) -> Any:
        values: dict[str, Any] = {}
        for name, read, _ in self.regular:
            try:
                values[name] = read(r)
            except ProtocolError as exc:
                raise exc.within(name) from None
        if self.flexible:
            self._read_tagged(r, values)
        return self.cls(**values)

    def _read_tagged(self, r: Reader, values: dict[str, Any]) -> None:
        try:
            count = r.unsigned_varint()
            if count > r.remaining():
                raise ProtocolError(f"{count} tagged fields cannot fit in {r.remaining()} bytes")
        except ProtocolError as exc:
            raise exc.within("(tagged fields)") from None
        for _ in range(count):
            try:
                tag = r.unsigned_varint()
                size = r.unsigned_varint()
            except ProtocolError as exc:
                raise exc.within("(tagged fields)") from None
            field = self.tagged_read.get(tag)
            if field is None:
                try:
                    r.skip(size)
                except ProtocolError as exc:
                    raise exc.within(f"(unknown tag {tag})") from None
                continue
            name, read = field
            if size > r.remaining():
                raise ProtocolError(f"tagged field of {size} bytes runs past the end").within(name)
            end, r.end = r.end, r.pos + size
            try:
                values[name] = read(r)
                if r.pos != r.end:
                    raise ProtocolError(f"{r.end - r.pos} bytes left over in tagged field")
            except ProtocolError as exc:
                raise exc.within(name) from None
            finally:
                r.end = end

    def write(self, w: Writer, obj: Any) -> None:
        for name, _, write in self.regular:
            value = getattr(obj, name)
            try:
                write(w, value)
            except ProtocolError as exc:
                raise exc.within(name) from None
            except _ENCODE_ERRORS as exc:
                raise ProtocolError(f"cannot encode {value!r}: {exc}").within(name) from None
        if self.flexible:
            self._write_tagged(w, obj)

    def _write_tagged(self, w: Writer, obj: Any) -> None:
        present = []
        for tag, name, write, spec in self.tagged_write:
            value = getattr(obj, name)
            if value != spec.default_value():
                present.append((tag, name, write, value))
        w.unsigned_varint(len(present))
        for tag, name, write, value in present:
            sub = Writer()
            try:
                write(sub, value)
            except ProtocolError as exc:
                raise exc.within(name) from None
            except _ENCODE_ERRORS as exc:
                raise ProtocolError(f"cannot encode {value!r}: {exc}").within(name) from None
            w.unsigned_varint(tag)
            w.unsigned_varint(len(sub.buf))
            w.raw(sub.buf)


def _field_codec(
    ref: TypeRef, nullable: bool, version: int, flexible: bool
) -> tuple[ReadFn, WriteFn, int, Wire]:
    if isinstance(ref, Kind):
        if ref is Kind.STRING:
            return (*_STRINGS[(nullable, flexible)], Wire(_STRING_OPS[(nullable, flexible)]))
        if ref in (Kind.BYTES, Kind.RECORDS):
            return (*_BYTES[(nullable, flexible)], Wire(_BYTES_OPS[(nullable, flexible)]))
        return (*_SCALARS[ref], Wire(_SCALAR_OPS[ref]))
    if isinstance(ref, ArrayOf):
        return _array_codec(ref.item, nullable, version, flexible)
    plan = plan_for(ref, version, flexible)
    if not nullable:
        return plan.read, plan.write, plan.min_size, Wire(Op.STRUCT, plan=plan)
    return _nullable_struct(plan)


def _nullable_struct(plan: StructPlan) -> tuple[ReadFn, WriteFn, int, Wire]:
    # Kafka writes an int8 before a nullable struct: -1 for null, 1 for a struct that follows.
    read_struct, write_struct = plan.read, plan.write

    def read(r: Reader) -> Any:
        return None if r.int8() < 0 else read_struct(r)

    def write(w: Writer, value: Any) -> None:
        if value is None:
            w.int8(-1)
            return
        w.int8(1)
        write_struct(w, value)

    return read, write, 1, Wire(Op.STRUCT, nullable=True, plan=plan)


def _array_codec(
    item: TypeRef, nullable: bool, version: int, flexible: bool
) -> tuple[ReadFn, WriteFn, int, Wire]:
    read_item, write_item, item_size, item_wire = _field_codec(item, False, version, flexible)
    min_item = max(item_size, 1)
    wire = Wire(Op.ARRAY, nullable, flexible, min_item, item_wire)

    def read(r: Reader) -> list[Any] | None:
        n = r.array_length(flexible, min_item)
        if n < 0:
            if nullable:
                return None
            raise ProtocolError("non-nullable array is null")
        out = []
        for i in range(n):
            try:
                out.append(read_item(r))
            except ProtocolError as exc:
                raise exc.within(f"[{i}]") from None
        return out

    def write(w: Writer, values: list[Any] | None) -> None:
        if values is None:
            if not nullable:
                raise ProtocolError("non-nullable array is None")
            w.array_length(None, flexible)
            return
        w.array_length(len(values), flexible)
        for i, value in enumerate(values):
            try:
                write_item(w, value)
            except ProtocolError as exc:
                raise exc.within(f"[{i}]") from None
            except _ENCODE_ERRORS as exc:
                raise ProtocolError(f"cannot encode {value!r}: {exc}").within(f"[{i}]") from None

    return read, write, 1 if flexible else 4, wire


@functools.cache
def plan_for(cls: type[Struct], version: int, flexible: bool) -> StructPlan:
    return StructPlan(cls, version, flexible)


def is_flexible(cls: type[Message], version: int) -> bool:
    return cls.FLEXIBLE is not None and version >= cls.FLEXIBLE


class BodyCodec(Protocol):
    """The interface that _ext/struct_codec.pyx and protocol/struct_codec.py share."""

    def decode_body(self, plan: StructPlan, data: Buffer, pos: int) -> tuple[Any, int]:
        """The struct that starts at `pos`, and the position after it: what follows is
        the caller's business (a request may be followed by bytes Kafka ignores)."""
        ...

    def encode_body(self, plan: StructPlan, obj: Any) -> bytes: ...


body_codec: BodyCodec = _accel.load("struct_codec", "fastcoord.protocol.struct_codec")


def read_message_at(cls: type[M], version: int, data: Buffer, pos: int) -> tuple[M, int]:
    """Decode one message body that starts at `pos`: the message and the position after it."""
    try:
        decoded: tuple[M, int] = body_codec.decode_body(
            plan_for(cls, version, is_flexible(cls, version)), data, pos
        )
    except ProtocolError as exc:
        raise exc.at(f"{cls.__name__} v{version}") from None
    return decoded


def read_message(cls: type[M], version: int, data: Buffer, pos: int = 0) -> M:
    """Decode one message body that starts at `pos` and ends the frame (responses, whole
    bodies: bytes left over mean the two sides disagree on the layout)."""
    msg, end = read_message_at(cls, version, data, pos)
    if end != len(data):
        raise ProtocolError(f"{len(data) - end} bytes left over after the message").at(
            f"{cls.__name__} v{version}"
        )
    return msg


def write_message(w: Writer, msg: Message, version: int) -> None:
    cls = type(msg)
    try:
        w.raw(body_codec.encode_body(plan_for(cls, version, is_flexible(cls, version)), msg))
    except ProtocolError as exc:
        raise exc.at(f"{cls.__name__} v{version}") from None


def decode(cls: type[M], version: int, data: Buffer) -> M:
    """Decode a message body (no header) of the given version."""
    return read_message(cls, version, data)


def encode(msg: Message, version: int) -> bytes:
    """Encode a message body (no header) at the given version."""
    w = Writer()
    write_message(w, msg, version)
    return w.getvalue()
