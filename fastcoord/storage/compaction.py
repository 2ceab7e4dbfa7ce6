"""Which records of a segment compaction keeps: the pure-Python twin of _ext/compaction.pyx.

The log cleaner walks the closed segments from the newest record to the oldest, and keeps
a record only if no later record has its key. A pass over a log written by a busy
coordinator reads millions of records, and decoding each key into a Struct to hash it cost
a microsecond or two each (more CPU than the commits that wrote them). A key is compared
here by its bytes instead: every record is written by one encoder (msgspec's, or the
compiled offset records that match it byte for byte), which writes equal keys as equal
bytes.

A payload is a MessagePack array of two values, the key and the value (nil for a
tombstone). This twin decodes it with msgspec, keeping both as raw bytes; the compiled
module walks the same bytes and accepts exactly what this accepts.
"""

from __future__ import annotations

import msgspec

TOMBSTONE = b"\xc0"  # MessagePack nil: a record without a value


class _Record(msgspec.Struct, array_like=True, gc=False):
    key: msgspec.Raw
    value: msgspec.Raw


_decode = msgspec.msgpack.Decoder(_Record).decode


def split_record(payload: bytes | memoryview) -> tuple[bytes, bool]:
    """(the key's bytes, whether the value is nil) of one record's payload. ValueError for a
    payload that is not an array of a key and a value."""
    try:
        record = _decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise ValueError(f"not an array of a key and a value: {exc}") from None
    return bytes(record.key), bytes(record.value) == TOMBSTONE


def latest_records(
    data: bytes, spans: list[tuple[int, int]], seen: set[bytes], drop_tombstones: bool
) -> tuple[list[int], int]:
    """Walk the records at `spans` of `data` (payloads, as walk_frames gives them) from the
    last to the first: keep each whose key is not in `seen`, and add its key. With
    `drop_tombstones`, a kept tombstone is dropped instead (what it deletes is dropped
    too). Returns (the indexes kept, last first; the tombstones dropped). ValueError for a
    payload that is not an array of a key and a value, naming its index."""
    view = memoryview(data)
    kept: list[int] = []
    dropped = 0
    for i in range(len(spans) - 1, -1, -1):
        begin, end = spans[i]
        try:
            key, tombstone = split_record(view[begin:end])
        except ValueError as exc:
            raise ValueError(f"record {i}: {exc}") from None
        if key in seen:
            continue  # a later record of this key follows
        seen.add(key)
        if drop_tombstones and tombstone:
            dropped += 1
            continue
        kept.append(i)
    return kept, dropped
