"""The final committed offsets per group, read from the server's offsets log.

The event log says that a commit was stored and how many offsets it held, not their
values; the offsets log (`DATA_DIR/__consumer_offsets-N/`, beside `DATA_DIR/events`)
holds them. It is read here without being touched (no lock, no repair: a torn tail is
read up to the tear and named), each partition's records in order, the last record of a
(group, topic, partition) winning as it does when the server loads, a tombstone removing
the offset. Its size is bounded by what compaction leaves plus one segment's tail per
partition, and only the final offsets are kept, one row per committed partition.

A cluster has an offsets log per node, beside each node's event log. A group lives on one
node, so its offsets are in one node's log; they are read node by node and put together,
each row with its node.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from fastcoord.core.records import OffsetCommitKey, OffsetCommitValue
from fastcoord.storage import segment
from fastcoord.storage.log import SUFFIX

SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("metadata", pa.string()),
        ("commit_timestamp", pa.timestamp("ms", tz="UTC")),
    ]
)
NODES_SCHEMA = SCHEMA.append(pa.field("node_id", pa.int32()))


def _segments(directory: Path) -> list[Path]:
    found = [
        (int(f.name[: -len(SUFFIX)]), f)
        for f in directory.glob(f"*{SUFFIX}")
        if f.name[: -len(SUFFIX)].isdigit()
    ]
    return [f for _, f in sorted(found)]


def committed_offsets(data_dir: Path, problems: list[str]) -> pa.Table | None:
    """One row per (group, topic, partition) with an offset; None without an offsets log."""
    partitions = sorted(data_dir.glob("__consumer_offsets-*"))
    if not partitions:
        problems.append(f"{data_dir}: no offsets log (__consumer_offsets-N): no final offsets")
        return None
    latest: dict[OffsetCommitKey, OffsetCommitValue | None] = {}
    for directory in partitions:
        for file in _segments(directory):
            scan = segment.scan(file.read_bytes())
            for record in scan.records:
                if isinstance(record.key, OffsetCommitKey):
                    latest[record.key] = record.value  # type: ignore[assignment]
            if scan.damage is not None:
                problems.append(
                    f"{file}: damaged record at byte {scan.damage.position} "
                    f"({scan.damage.reason}): the records after it not read"
                )
    rows = sorted(
        (key.group, key.topic, key.partition, value)
        for key, value in latest.items()
        if value is not None
    )
    return pa.table(
        {
            "group_id": [r[0] for r in rows],
            "topic": [r[1] for r in rows],
            "partition": pa.array([r[2] for r in rows], pa.int32()),
            "offset": pa.array([r[3].offset for r in rows], pa.int64()),
            "metadata": [r[3].metadata for r in rows],
            "commit_timestamp": pa.array(
                [r[3].commit_timestamp for r in rows], pa.timestamp("ms", tz="UTC")
            ),
        },
        schema=SCHEMA,
    )


def nodes_offsets(
    data_dirs: Sequence[tuple[Path, int | None]], problems: list[str]
) -> pa.Table | None:
    """committed_offsets of each (data directory, node) as one table, with a node_id column;
    None without any offsets log. Were a (group, topic, partition) in two nodes' logs (a
    group that moved), the later commit is the final one."""
    final: dict[tuple[str, str, int], dict[str, Any]] = {}
    found = False
    for data_dir, node in data_dirs:
        table = committed_offsets(data_dir, problems)
        if table is None:
            continue
        found = True
        for row in table.to_pylist():
            key = (row["group_id"], row["topic"], row["partition"])
            held = final.get(key)
            if held is None or row["commit_timestamp"] >= held["commit_timestamp"]:
                final[key] = {**row, "node_id": node}
    if not found:
        return None
    return pa.Table.from_pylist([final[key] for key in sorted(final)], schema=NODES_SCHEMA)
