"""Kafka's coordinator partition for a group id, in plain Python: the twin of _ext/partition.pyx.

Kafka's GroupCoordinator partitionFor is Utils.abs(groupId.hashCode()) % partitions, where
String.hashCode is h = 31 * h + c over the UTF-16 code units with int32 wraparound, and
Utils.abs maps Integer.MIN_VALUE to 0. Here the code units come from encoding with
surrogatepass, so that a lone surrogate is one code unit, as in Java; the compiled module reads
them from the code points instead, and the tests hold each to the other and to Java.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

MAX_PARTITIONS = 0x7FFFFFFF  # a partition count is a Java int
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"  # native order, for cast("H")


def _hash_bits(s: str) -> int:
    """java.lang.String.hashCode of s as its 32 bits, an int in [0, 2**32)."""
    h = 0
    for unit in memoryview(s.encode(_UTF16, "surrogatepass")).cast("H"):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h


def _kafka_partition(bits: int, partitions: int) -> int:
    """Utils.abs(n) % partitions, with n the Java int whose bits are `bits`."""
    if bits == 0x80000000:  # Integer.MIN_VALUE: Math.abs would leave it negative
        return 0
    n = bits - (1 << 32) if bits & 0x80000000 else bits
    return abs(n) % partitions


def _checked_str(s: object, name: str) -> str:
    if not isinstance(s, str):
        raise TypeError(f"{name} must be str, not {type(s).__name__}")
    return s


def _checked_partitions(partitions: int) -> int:
    n = operator.index(partitions)
    if not 1 <= n <= MAX_PARTITIONS:
        raise ValueError(f"partitions must be between 1 and {MAX_PARTITIONS}, got {n}")
    return n


def java_hash_code(s: str) -> int:
    """java.lang.String.hashCode of s (a signed int32), over its UTF-16 code units."""
    bits = _hash_bits(_checked_str(s, "s"))
    return bits - (1 << 32) if bits & 0x80000000 else bits


def partition_for(group_id: str, partitions: int = 50) -> int:
    """Kafka's coordinator partition: Utils.abs(group_id.hashCode()) % partitions.

    50 is the default of Kafka's offsets.topic.num.partitions.
    """
    count = _checked_partitions(partitions)
    return _kafka_partition(_hash_bits(_checked_str(group_id, "group_id")), count)


def partitions_for(group_ids: Iterable[str], partitions: int = 50) -> npt.NDArray[np.int32]:
    """partition_for of every id in a list (any iterable of str), as an int32 numpy array."""
    import numpy as np  # here, so that `import fastcoord` does not import numpy

    count = _checked_partitions(partitions)
    if isinstance(group_ids, str):
        raise TypeError("group_ids must be an iterable of str, not a str")
    found: list[int] = []
    for i, group_id in enumerate(group_ids):
        if not isinstance(group_id, str):
            raise TypeError(f"group_ids[{i}] must be str, not {type(group_id).__name__}")
        found.append(_kafka_partition(_hash_bits(group_id), count))
    return np.array(found, dtype=np.int32)
