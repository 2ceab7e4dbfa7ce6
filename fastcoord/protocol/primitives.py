"""Kafka's wire primitives: a bounds-checked Reader and an appending Writer.

Layouts follow org.apache.kafka.common.protocol.types and ByteUtils: big-endian fixed-width
integers, zig-zag varints, unsigned varints of at most 5 (int) or 10 (long) bytes, strings
with an int16 length (-1 for null) or, in flexible versions, an unsigned-varint length plus
one (0 for null). The Reader never lets an IndexError, struct.error, UnicodeDecodeError or
MemoryError escape: every failure is a ProtocolError with a reason, and every length is
checked against the bytes left before anything is sliced or allocated.
"""

from __future__ import annotations

import struct
import uuid

from fastcoord.protocol.errors import ProtocolError

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

INT16_MAX = 0x7FFF
INT32_MAX = 0x7FFFFFFF
ZERO_UUID = uuid.UUID(int=0)


class Reader:
    """Reads primitives from `data[pos:end]`, advancing `pos`."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data)

    def remaining(self) -> int:
        return self.end - self.pos

    def _take(self, n: int, what: str) -> int:
        pos = self.pos
        if n > self.end - pos:
            raise ProtocolError(f"{what} needs {n} bytes but {self.end - pos} are left")
        self.pos = pos + n
        return pos

    def int8(self) -> int:
        return int(_I8.unpack_from(self.data, self._take(1, "int8"))[0])

    def boolean(self) -> bool:
        return self.int8() != 0

    def int16(self) -> int:
        return int(_I16.unpack_from(self.data, self._take(2, "int16"))[0])

    def uint16(self) -> int:
        return int(_U16.unpack_from(self.data, self._take(2, "uint16"))[0])

    def int32(self) -> int:
        return int(_I32.unpack_from(self.data, self._take(4, "int32"))[0])

    def uint32(self) -> int:
        return int(_U32.unpack_from(self.data, self._take(4, "uint32"))[0])

    def int64(self) -> int:
        return int(_I64.unpack_from(self.data, self._take(8, "int64"))[0])

    def float64(self) -> float:
        return float(_F64.unpack_from(self.data, self._take(8, "float64"))[0])

    def uuid_(self) -> uuid.UUID:
        pos = self._take(16, "uuid")
        return uuid.UUID(bytes=bytes(self.data[pos : pos + 16]))

    def _uvarint(self, max_bytes: int, what: str) -> int:
        data, pos, end = self.data, self.pos, self.end
        value = 0
        shift = 0
        for i in range(max_bytes):
            if pos + i >= end:
                raise ProtocolError(f"{what} runs past the end of the frame")
            b = data[pos + i]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos + i + 1
                return value
            shift += 7
        raise ProtocolError(f"{what} is longer than {max_bytes} bytes")

    def unsigned_varint(self) -> int:
        value = self._uvarint(5, "unsigned varint")
        if value > 0xFFFFFFFF:
            raise ProtocolError("unsigned varint does not fit in 32 bits")
        return value

    def varint(self) -> int:
        value = self.unsigned_varint()
        return (value >> 1) ^ -(value & 1)

    def varlong(self) -> int:
        value = self._uvarint(10, "varlong")
        if value > 0xFFFFFFFFFFFFFFFF:
            raise ProtocolError("varlong does not fit in 64 bits")
        return (value >> 1) ^ -(value & 1)

    def _utf8(self, n: int) -> str:
        pos = self._take(n, "string")
        try:
            return bytes(self.data[pos : pos + n]).decode("utf-8")
        except UnicodeDecodeError as exc:
            reason = f"string is not valid UTF-8 ({exc.reason} at byte {exc.start})"
            raise ProtocolError(reason) from None

    def _blob(self, n: int) -> bytes:
        pos = self._take(n, "bytes")
        return bytes(self.data[pos : pos + n])

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise ProtocolError(f"non-nullable string has length {n}")
        return self._utf8(n)

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n == -1:
            return None
        if n < 0:
            raise ProtocolError(f"string has invalid length {n}")
        return self._utf8(n)

    def compact_string(self) -> str:
        n = self.unsigned_varint() - 1
        if n < 0:
            raise ProtocolError("non-nullable compact string is null")
        if n > INT16_MAX:
            raise ProtocolError(f"compact string length {n} is over {INT16_MAX}")
        return self._utf8(n)

    def compact_nullable_string(self) -> str | None:
        n = self.unsigned_varint() - 1
        if n < 0:
            return None
        if n > INT16_MAX:
            raise ProtocolError(f"compact string length {n} is over {INT16_MAX}")
        return self._utf8(n)

    def bytes_(self) -> bytes:
        n = self.int32()
        if n < 0:
            raise ProtocolError(f"non-nullable bytes has length {n}")
        return self._blob(n)

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        if n == -1:
            return None
        if n < 0:
            raise ProtocolError(f"bytes has invalid length {n}")
        return self._blob(n)

    def compact_bytes(self) -> bytes:
        n = self.unsigned_varint() - 1
        if n < 0:
            raise ProtocolError("non-nullable compact bytes is null")
        return self._blob(n)

    def compact_nullable_bytes(self) -> bytes | None:
        n = self.unsigned_varint() - 1
        if n < 0:
            return None
        return self._blob(n)

    def array_length(self, compact: bool, min_item_size: int) -> int:
        """Read an array count (-1 for null) and refuse one the bytes left cannot hold.

        The check runs before the caller allocates anything: a 4-byte frame that claims two
        billion elements is refused here, not by the allocator.
        """
        n = self.unsigned_varint() - 1 if compact else self.int32()
        if n < -1:
            raise ProtocolError(f"array has invalid length {n}")
        if n > 0 and n * min_item_size > self.end - self.pos:
            raise ProtocolError(
                f"array claims {n} elements of at least {min_item_size} bytes "
                f"but {self.end - self.pos} bytes are left"
            )
        return n

    def skip(self, n: int) -> None:
        self._take(n, "tagged field")


class Writer:
    """Appends primitives to a bytearray."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self.buf)

    def int8(self, v: int) -> None:
        self.buf += _pack(_I8, v, "int8")

    def boolean(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def int16(self, v: int) -> None:
        self.buf += _pack(_I16, v, "int16")

    def uint16(self, v: int) -> None:
        self.buf += _pack(_U16, v, "uint16")

    def int32(self, v: int) -> None:
        self.buf += _pack(_I32, v, "int32")

    def uint32(self, v: int) -> None:
        self.buf += _pack(_U32, v, "uint32")

    def int64(self, v: int) -> None:
        self.buf += _pack(_I64, v, "int64")

    def float64(self, v: float) -> None:
        self.buf += _F64.pack(v)

    def uuid_(self, v: uuid.UUID) -> None:
        self.buf += v.bytes

    def unsigned_varint(self, v: int) -> None:
        if not 0 <= v <= 0xFFFFFFFF:
            raise ProtocolError(f"unsigned varint {v} is out of range")
        self._uvarint(v)

    def _uvarint(self, v: int) -> None:
        buf = self.buf
        while v >= 0x80:
            buf.append((v & 0x7F) | 0x80)
            v >>= 7
        buf.append(v)

    def varint(self, v: int) -> None:
        if not -0x80000000 <= v <= INT32_MAX:
            raise ProtocolError(f"varint {v} is out of range")
        self._uvarint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)

    def varlong(self, v: int) -> None:
        if not -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF:
            raise ProtocolError(f"varlong {v} is out of range")
        self._uvarint(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)

    def string(self, v: str) -> None:
        data = v.encode("utf-8")
        if len(data) > INT16_MAX:
            raise ProtocolError(f"string of {len(data)} bytes is over {INT16_MAX}")
        self.buf += _I16.pack(len(data))
        self.buf += data

    def nullable_string(self, v: str | None) -> None:
        if v is None:
            self.buf += b"\xff\xff"
        else:
            self.string(v)

    def compact_string(self, v: str) -> None:
        data = v.encode("utf-8")
        if len(data) > INT16_MAX:
            raise ProtocolError(f"string of {len(data)} bytes is over {INT16_MAX}")
        self._uvarint(len(data) + 1)
        self.buf += data

    def compact_nullable_string(self, v: str | None) -> None:
        if v is None:
            self.buf.append(0)
        else:
            self.compact_string(v)

    def bytes_(self, v: bytes) -> None:
        self.buf += _I32.pack(len(v))
        self.buf += v

    def nullable_bytes(self, v: bytes | None) -> None:
        if v is None:
            self.buf += b"\xff\xff\xff\xff"
        else:
            self.bytes_(v)

    def compact_bytes(self, v: bytes) -> None:
        self._uvarint(len(v) + 1)
        self.buf += v

    def compact_nullable_bytes(self, v: bytes | None) -> None:
        if v is None:
            self.buf.append(0)
        else:
            self.compact_bytes(v)

    def array_length(self, n: int | None, compact: bool) -> None:
        if compact:
            self.unsigned_varint(0 if n is None else n + 1)
        else:
            self.buf += _pack(_I32, -1 if n is None else n, "array length")

    def raw(self, data: bytes | bytearray) -> None:
        self.buf += data


def _pack(fmt: struct.Struct, v: int, what: str) -> bytes:
    try:
        return fmt.pack(v)
    except struct.error:
        raise ProtocolError(f"{what} value {v!r} is out of range") from None


def unsigned_varint_size(v: int) -> int:
    size = 1
    while v >= 0x80:
        v >>= 7
        size += 1
    return size
