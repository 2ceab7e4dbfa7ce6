"""CRC-32C (Castagnoli) in plain Python: the twin of _ext/crc32c.pyx.

Why it exists: fastcoord's durable log keeps __consumer_offsets records in batches that carry
a CRC-32C as Kafka's record batches do, so that a torn or corrupted write is found when the
log is read back. This is what FASTCOORD_NO_EXTENSIONS=1 runs, and the reference that
tests/storage/test_crc32c.py holds the compiled module to.

The standard CRC-32C (iSCSI, RFC 3720; Kafka's org.apache.kafka.common.utils.Crc32C):
reflected polynomial 0x82F63B78, initial value and final XOR 0xFFFFFFFF. Short inputs go
through the textbook byte-at-a-time table; longer ones four to five times faster through
big-integer parities (see _parity_masks), since a Python loop over bytes is the cost to avoid.
"""

from __future__ import annotations

import functools
import operator
import struct

POLYNOMIAL = 0x82F63B78  # Castagnoli's, bit-reflected
MASK32 = 0xFFFFFFFF
SHORT = 32  # below this many bytes the byte loop is the faster way
CHUNK = 4096  # bytes per step of the parity way (a power of 2), the size of each of its 32 masks

Bytes = bytes | bytearray | memoryview


def _byte_table() -> tuple[int, ...]:
    """The register after one byte b, from a zero register, for each b."""
    table: list[int] = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ POLYNOMIAL if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


TABLE = _byte_table()


def _update_bytes(state: int, data: memoryview) -> int:
    """The register after the bytes of data, one at a time."""
    table = TABLE
    for b in data:
        state = table[(state ^ b) & 0xFF] ^ (state >> 8)
    return state


def _advance(columns: list[int], register: int) -> int:
    """A linear map of registers, given by its columns (the images of 1 << j), applied."""
    out = 0
    for j, column in enumerate(columns):
        if register >> j & 1:
            out ^= column
    return out


@functools.cache
def _parity_masks() -> tuple[tuple[int, int], ...]:
    """(1 << k, mask_k) for each bit k of the register, to checksum a chunk with 64 big-integer
    operations instead of a Python step per byte. Built on first use, in a few milliseconds.

    From a zero register, the CRC register is linear in the message bits over GF(2): the
    register after a message is the XOR of what each of its set bits gives alone. What a bit
    gives depends only on its place from the end of the message, because a register of zero
    stays zero through leading zero bytes. So read a chunk as v = int.from_bytes(chunk, "big"),
    where bit p = 8 * d + j is bit j of the byte d places from the end, and let mask_k hold the
    bits p whose contribution has bit k set: then bit k of the register is the parity of
    v & mask_k. Masks made for CHUNK bytes serve any shorter chunk, which is the same number
    as itself padded with leading zero bytes.

    The masks grow by doubling. A bit `length` bytes further from the end gives what it gave
    before, advanced through `length` more zero bytes, which is a linear map A: bit k of A(c)
    is the XOR of bits j of c over the j whose column A(1 << j) has bit k. So the new upper
    half of mask_k is the XOR of the masks_j for those j, and A for twice the length is A
    applied twice.
    """
    # One byte: bit j of it gives TABLE[1 << j].
    masks = [sum((TABLE[1 << j] >> k & 1) << j for j in range(8)) for k in range(32)]
    # The columns of A for one zero byte: the register 1 << j after a zero byte.
    columns = [TABLE[(1 << j) & 0xFF] ^ ((1 << j) >> 8) for j in range(32)]
    length = 1
    while length < CHUNK:
        upper = [0] * 32
        for j, column in enumerate(columns):
            for k in range(32):
                if column >> k & 1:
                    upper[k] ^= masks[j]
        masks = [mask | upper_k << (8 * length) for mask, upper_k in zip(masks, upper, strict=True)]
        columns = [_advance(columns, column) for column in columns]
        length *= 2
    return tuple((1 << k, mask) for k, mask in enumerate(masks))


def _update_chunks(state: int, data: memoryview) -> int:
    """The register after the bytes of data, by _parity_masks, CHUNK bytes at a time."""
    masks = _parity_masks()
    for start in range(0, len(data), CHUNK):
        chunk = data[start : start + CHUNK]
        if len(chunk) < 4:
            state = _update_bytes(state, chunk)
            continue
        # Going on from `state` is going on from zero with `state` XORed into the chunk's first
        # four bytes, little-endian: the top four bytes of v.
        first_four = int.from_bytes(state.to_bytes(4, "little"), "big")
        v = int.from_bytes(chunk, "big") ^ (first_four << (8 * (len(chunk) - 4)))
        state = 0
        for bit, mask in masks:
            if (v & mask).bit_count() & 1:
                state |= bit
    return state


def _checked_view(data: object) -> memoryview:
    """data's bytes as a 1-D memoryview of format "B", or the error the compiled module raises."""
    if isinstance(data, memoryview):
        if data.itemsize != 1:
            raise TypeError(
                f"data must be bytes, bytearray or a memoryview of one-byte items, "
                f"not a memoryview of format {data.format!r}"
            )
        if not data.c_contiguous:
            raise ValueError("data must be C-contiguous")
        # Other one-byte formats ("b", "c", "<B", ...) and shapes: the same bytes, copied.
        return data if data.format == "B" and data.ndim == 1 else memoryview(data.tobytes())
    if isinstance(data, bytes | bytearray):
        return memoryview(data)
    raise TypeError(f"data must be bytes, bytearray or memoryview, not {type(data).__name__}")


def _checked_crc(crc: int) -> int:
    n = operator.index(crc)
    if not 0 <= n <= MASK32:
        raise ValueError(f"crc must be between 0 and {MASK32}, got {n}")
    return n


def crc32c(data: Bytes, crc: int = 0) -> int:
    """The CRC-32C of data (bytes, bytearray or memoryview), continuing `crc` if given.

    crc32c(a + b) == crc32c(b, crc32c(a)); crc32c(b"123456789") == 0xE3069283.
    """
    view = _checked_view(data)
    state = _checked_crc(crc) ^ MASK32
    if len(view) < SHORT:
        return _update_bytes(state, view) ^ MASK32
    return _update_chunks(state, view) ^ MASK32


# A frame of the offsets log: payload length, CRC-32C of the payload (storage/segment.py).
FRAME_HEADER = struct.Struct(">II")


def walk_frames(
    data: bytes, start: int = 0, max_payload: int = 0x7FFFFFFF
) -> tuple[list[tuple[int, int]], int, str | None]:
    """Walk CRC-framed records (4-byte big-endian payload length, 4-byte CRC-32C of the
    payload, the payload), as the offsets log's segments hold them, from `start`.

    Returns the (start, end) of each good frame's payload, the position where the walk
    stopped (len(data) when every frame was good), and why it stopped there (None when
    every frame was good). The compiled twin does this loop in C: reading a log of a
    million records is mostly this loop.
    """
    if not 0 <= start <= len(data):
        raise ValueError("start is outside data")
    spans: list[tuple[int, int]] = []
    pos, n = start, len(data)
    view = memoryview(data)
    while pos < n:
        if n - pos < FRAME_HEADER.size:
            return spans, pos, f"{n - pos} bytes, less than a frame header"
        length, expected = FRAME_HEADER.unpack_from(data, pos)
        if length > max_payload:
            return spans, pos, f"a length of {length} bytes"
        if n - pos - FRAME_HEADER.size < length:
            return spans, pos, f"a frame of {length} bytes with only {n - pos - 8} written"
        actual = crc32c(view[pos + FRAME_HEADER.size : pos + FRAME_HEADER.size + length])
        if actual != expected:
            return spans, pos, f"CRC32C {actual:#010x}, expected {expected:#010x}"
        spans.append((pos + FRAME_HEADER.size, pos + FRAME_HEADER.size + length))
        pos += FRAME_HEADER.size + length
    return spans, pos, None
