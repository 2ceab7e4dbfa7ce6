"""How a Kafka message is declared: a msgspec Struct whose annotations are its wire schema.

A message is written once, following Kafka's JSON message schemas
(clients/src/main/resources/common/message/*.json): each field's Python type names its wire
type (Int32, String, list[SomeStruct], ...) and an optional V(...) marker gives the versions
it exists in, the versions where it may be null, and its tag if it is a tagged field. A
field without V exists in every version ("0+"). The codec compiles these declarations into
one decoder and one encoder per (message, version); the objects it returns are these typed
Structs, so the core reads `request.generation_id`, never a dict.

Field defaults are Kafka's: the value a field takes in versions where it does not exist,
and the value a tagged field is omitted at.
"""

from __future__ import annotations

import enum
import functools
import types
import typing
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Union

import msgspec

VERSION_MAX = 0x7FFF


class Kind(enum.Enum):
    """Wire types of scalar fields."""

    INT8 = "int8"
    INT16 = "int16"
    UINT16 = "uint16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT64 = "float64"
    BOOL = "bool"
    UUID = "uuid"
    STRING = "string"
    BYTES = "bytes"
    RECORDS = "records"


Int8 = Annotated[int, Kind.INT8]
Int16 = Annotated[int, Kind.INT16]
Uint16 = Annotated[int, Kind.UINT16]
Int32 = Annotated[int, Kind.INT32]
Int64 = Annotated[int, Kind.INT64]
Float64 = Annotated[float, Kind.FLOAT64]
Bool = Annotated[bool, Kind.BOOL]
Uuid = Annotated[uuid.UUID, Kind.UUID]
String = Annotated[str, Kind.STRING]
Bytes = Annotated[bytes, Kind.BYTES]
Records = Annotated[bytes, Kind.RECORDS]


def parse_versions(text: str) -> tuple[int, int]:
    """Kafka's version range syntax: "0+", "3-5", "7", or "none" (an empty range)."""
    text = text.strip()
    if text == "none":
        return (1, 0)
    if text.endswith("+"):
        return (int(text[:-1]), VERSION_MAX)
    if "-" in text:
        lo, hi = text.split("-")
        return (int(lo), int(hi))
    return (int(text), int(text))


@dataclass(frozen=True)
class V:
    """Field versions: `versions`, `nullable` (nullableVersions), `tag` and `tagged`."""

    versions: str = "0+"
    nullable: str = "none"
    tag: int | None = None
    tagged: str = "none"

    @functools.cached_property
    def range(self) -> tuple[int, int]:
        return parse_versions(self.versions)

    @functools.cached_property
    def nullable_range(self) -> tuple[int, int]:
        return parse_versions(self.nullable)

    @functools.cached_property
    def tagged_range(self) -> tuple[int, int]:
        return parse_versions(self.tagged)


ALL_VERSIONS = V()


class Struct(msgspec.Struct, gc=False, repr_omit_defaults=True):
    """Base of every schema struct, nested or top level. Holds no fields of its own."""


class Message(Struct):
    """A top-level request or response. Subclasses set API_KEY and FLEXIBLE."""

    API_KEY: ClassVar[int]
    FLEXIBLE: ClassVar[int | None]  # first flexible version, None if never flexible


class Request(Message):
    pass


class Response(Message):
    pass


@dataclass(frozen=True)
class ArrayOf:
    item: TypeRef


TypeRef = Kind | ArrayOf | type[Struct]


@dataclass(frozen=True)
class FieldSpec:
    """One field of a struct, as the codec sees it."""

    name: str
    type: TypeRef
    v: V
    nullable_type: bool  # the Python type admits None
    default: Any
    default_factory: Any

    def exists_in(self, version: int) -> bool:
        lo, hi = self.v.range
        return lo <= version <= hi

    def nullable_in(self, version: int) -> bool:
        lo, hi = self.v.nullable_range
        return lo <= version <= hi

    def tagged_in(self, version: int) -> bool:
        lo, hi = self.v.tagged_range
        return self.v.tag is not None and lo <= version <= hi

    def default_value(self) -> Any:
        if self.default_factory is not msgspec.NODEFAULT:
            return self.default_factory()
        return self.default


def _type_ref(tp: Any, where: str) -> tuple[TypeRef, bool]:
    """Resolve a field's annotation to a TypeRef and whether it admits None."""
    nullable = False
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"{where}: a field is one wire type, optionally | None")
        nullable = True
        tp = args[0]
        origin = typing.get_origin(tp)
    if origin is Annotated:
        kinds = [m for m in tp.__metadata__ if isinstance(m, Kind)]
        if len(kinds) != 1:
            raise TypeError(f"{where}: expected exactly one wire Kind in {tp!r}")
        return kinds[0], nullable
    if origin is list:
        (item,) = typing.get_args(tp)
        item_ref, item_nullable = _type_ref(item, where)
        if item_nullable:
            raise TypeError(f"{where}: array elements cannot be null")
        return ArrayOf(item_ref), nullable
    if isinstance(tp, type) and issubclass(tp, Struct):
        return tp, nullable
    raise TypeError(f"{where}: {tp!r} is not a wire type")


@functools.cache
def fields_of(cls: type[Struct]) -> tuple[FieldSpec, ...]:
    """The fields of a schema struct in declaration (= wire) order."""
    hints = typing.get_type_hints(cls, include_extras=True)
    infos = {f.name: f for f in msgspec.structs.fields(cls)}
    specs = []
    for name in cls.__struct_fields__:
        tp = hints[name]
        marker = ALL_VERSIONS
        if typing.get_origin(tp) is Annotated:
            markers = [m for m in tp.__metadata__ if isinstance(m, V)]
            if len(markers) > 1:
                raise TypeError(f"{cls.__name__}.{name}: more than one V(...)")
            if markers:
                marker = markers[0]
                # Strip the V marker but keep a Kind marker of a nested alias such as Int32.
                rest = [m for m in tp.__metadata__ if not isinstance(m, V)]
                base = tp.__origin__
                tp = Annotated[(base, *rest)] if rest else base
        ref, nullable_type = _type_ref(tp, f"{cls.__name__}.{name}")
        info = infos[name]
        if info.required:
            raise TypeError(f"{cls.__name__}.{name}: every schema field needs Kafka's default")
        if marker.nullable != "none" and not nullable_type:
            raise TypeError(f"{cls.__name__}.{name}: nullable versions need an `| None` type")
        specs.append(
            FieldSpec(name, ref, marker, nullable_type, info.default, info.default_factory)
        )
    return tuple(specs)
