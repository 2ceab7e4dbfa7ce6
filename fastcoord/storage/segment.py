"""One segment of a partition's log: records framed as length, CRC32C, payload.

A frame is a 4-byte big-endian payload length, the payload's 4-byte CRC32C, and the payload:
the core's Record (key and value, the value None for a tombstone) encoded by msgspec as
MessagePack. Frames follow each other with nothing in between, so a segment is read by
walking the lengths; the CRC tells a record written whole from one torn by a crash or
damaged on disk.

`scan` walks a segment's bytes and stops at the first frame that is incomplete or fails
its check, saying where and whether anything follows it: with nothing after it, it is the
torn tail of the last write; with more bytes after it, it is damage in the middle, which
only an operator may decide to cut away.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import msgspec

from fastcoord.core.records import Record
from fastcoord.storage.native import crc32c

HEADER = struct.Struct(">II")  # payload length, CRC32C of the payload
# A record holds a group's metadata with its members' subscriptions and assignments; a
# length beyond this is damage, not a record.
MAX_PAYLOAD = 256 << 20

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)


def encode(record: Record) -> bytes:
    payload = _encoder.encode(record)
    return HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload


def encode_all(records: list[Record]) -> bytes:
    return b"".join(encode(r) for r in records)


@dataclass(frozen=True, slots=True)
class Damage:
    """Where a scan stopped: the frame at `position` is incomplete or fails its check."""

    position: int
    reason: str
    at_end: bool  # nothing but this frame's bytes follows: a torn tail


@dataclass(slots=True)
class Scan:
    records: list[Record]
    valid_bytes: int  # the position after the last good frame
    damage: Damage | None


def scan(data: bytes | memoryview, start: int = 0) -> Scan:
    """Read every good frame from `start`; stop at the first damaged one."""
    view = memoryview(data)
    end = len(view)
    position = start
    records: list[Record] = []
    while position < end:
        damage = _check(view, position, end)
        if isinstance(damage, str):
            # A torn write leaves a prefix of a frame at the very end. Damage with a good
            # frame anywhere after it (a flipped length may claim to reach past the end) is
            # damage in the middle.
            at_end = not _good_frame_after(view, position, end)
            return Scan(records, position, Damage(position, damage, at_end))
        length = damage
        payload = view[position + HEADER.size : position + HEADER.size + length]
        try:
            records.append(_decoder.decode(payload))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            # The CRC matched, so these bytes are what was written: a bug, not a crash.
            at_end = position + HEADER.size + length >= end
            return Scan(records, position, Damage(position, f"undecodable record: {exc}", at_end))
        position += HEADER.size + length
    return Scan(records, position, None)


def _good_frame_after(view: memoryview, position: int, end: int) -> bool:
    if end - position < HEADER.size:
        return False  # not even a header: nothing can follow
    frame_end = position + HEADER.size + HEADER.unpack_from(view, position)[0]
    if frame_end < end:
        return True  # the damaged frame ends before the data does: more was written after it
    return any(isinstance(_check(view, q, end), int) for q in range(position + 1, end))


def _check(view: memoryview, position: int, end: int) -> int | str:
    """The payload length of the good frame at `position`, or why it is not good."""
    if end - position < HEADER.size:
        return f"{end - position} bytes, less than a frame header"
    length: int
    crc: int
    length, crc = HEADER.unpack_from(view, position)
    if length > MAX_PAYLOAD:
        return f"a length of {length} bytes"
    if end - position - HEADER.size < length:
        return f"a frame of {length} bytes with only {end - position - HEADER.size} written"
    actual = crc32c.crc32c(view[position + HEADER.size : position + HEADER.size + length])
    if actual != crc:
        return f"CRC32C {actual:#010x}, expected {crc:#010x}"
    return length
