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

from dataclasses import dataclass

import msgspec

from fastcoord.core.records import Record
from fastcoord.storage.crc32c import FRAME_HEADER
from fastcoord.storage.native import crc32c

# A record holds a group's metadata with its members' subscriptions and assignments; a
# length beyond this is damage, not a record.
MAX_PAYLOAD = 256 << 20

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)


def encode(record: Record) -> bytes:
    payload = _encoder.encode(record)
    return FRAME_HEADER.pack(len(payload), crc32c.crc32c(payload)) + payload


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


def scan(data: bytes, start: int = 0) -> Scan:
    """Read every good frame from `start`; stop at the first damaged one."""
    spans, stop, reason = crc32c.walk_frames(data, start, MAX_PAYLOAD)
    view = memoryview(data)
    decode = _decoder.decode
    records: list[Record] = []
    try:
        for begin, end in spans:
            records.append(decode(view[begin:end]))
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        # The CRC matched, so these bytes are what was written: a bug, not a crash.
        position = begin - FRAME_HEADER.size
        return Scan(
            records, position, Damage(position, f"undecodable record: {exc}", end >= len(data))
        )
    if reason is None:
        return Scan(records, stop, None)
    # A torn write leaves a prefix of a frame at the very end. Damage with a good frame
    # anywhere after it (a flipped length may claim to reach past the end) is damage in
    # the middle.
    return Scan(records, stop, Damage(stop, reason, not _good_frame_after(data, stop)))


def _good_frame_after(data: bytes, position: int) -> bool:
    end = len(data)
    if end - position < FRAME_HEADER.size:
        return False  # not even a header: nothing can follow
    frame_end = position + FRAME_HEADER.size + FRAME_HEADER.unpack_from(data, position)[0]
    if frame_end < end:
        return True  # the damaged frame ends before the data does: more was written after it
    return any(crc32c.walk_frames(data, q, MAX_PAYLOAD)[0] for q in range(position + 1, end))
