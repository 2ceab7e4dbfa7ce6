"""The files of the event log, DATA_DIR/events: their schema, their names, and which of them
are the log.

The log is its files in the order of their names' keys, each file's rows in the order they
happened. A flush writes `events-{first_at_ms:013d}-{pid}-{n:06d}.parquet` (the scheme
earlier versions wrote too). A merge writes one file in place of a run of consecutive files
and names it after the first of them, with a tag: `-m{level}` while its roll is open,
`-rolled` once closed (event_merge.py). It lists the files it replaced in its key-value
metadata; until they are deleted (a crash can come first) readers skip them, so a merge is
committed by one rename. Temporary files begin with "." so that Spark and Hadoop, which skip
hidden files, never read half a file.

Each row names the node that wrote it (`node_id`), so that the logs of several nodes can be
read as one. Files written before that column lack it: `conform` gives their rows a null
node, for a merge that takes them with newer files; a reader fills it from elsewhere.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

SCHEMA = pa.schema(
    [
        pa.field("at", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("kind", pa.dictionary(pa.int8(), pa.string()), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("member_id", pa.string()),
        pa.field("generation", pa.int32(), nullable=False),
        pa.field("members", pa.int32(), nullable=False),
        pa.field("duration_ms", pa.int64(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        # Columns added since the first version come last, nullable: an older file lacks them.
        pa.field("node_id", pa.int32()),
    ]
)
# The columns an older file may lack (and be read, merged and reported all the same).
ADDED = frozenset({"node_id"})

REPLACES = b"fastcoord.replaces"  # key-value metadata: the names a merged file replaced
ROLLED = "rolled"
_NAME = re.compile(r"events-(\d+)-(\d+)-(\d+)(?:-(m\d+|rolled))?\.parquet")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class EventFile:
    name: str
    first_ms: int  # the first event's time, from the name
    pid: int
    n: int
    level: int  # 0: a flush; k: k merges deep within an open roll
    closed: bool  # a rolled file: never merged again
    size: int

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.first_ms, self.pid, self.n)

    @property
    def merged(self) -> bool:
        return self.closed or self.level > 0


def parse(name: str) -> tuple[int, int, int, int, bool] | None:
    """(first_ms, pid, n, level, closed) of a name this module gives, else None."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    first, pid, n, tag = match.groups()
    level = 0 if tag is None or tag == ROLLED else int(tag[1:])
    return int(first), int(pid), int(n), level, tag == ROLLED


def flush_name(first_ms: int, pid: int, n: int) -> str:
    return f"events-{first_ms:013d}-{pid}-{n:06d}.parquet"


def merged_name(first: EventFile, level: int, closed: bool) -> str:
    # Named after its first input so that it sorts where its rows were.
    tag = ROLLED if closed else f"m{level}"
    return f"events-{first.first_ms:013d}-{first.pid}-{first.n:06d}-{tag}.parquet"


def temporary(name: str) -> str:
    return f".{name}.tmp"


def is_temporary(name: str) -> bool:
    # Earlier versions wrote `events-....parquet.tmp`, which Spark would have tried to read.
    return (name.startswith(".events-") and name.endswith(".tmp")) or (
        name.startswith("events-") and name.endswith(".parquet.tmp")
    )


def scan(directory: Path) -> list[EventFile]:
    """The files named as this module names them, in the log's order, replaced ones included."""
    files = []
    for entry in os.scandir(directory):
        parsed = parse(entry.name)
        if parsed is None:
            continue
        try:
            size = entry.stat().st_size
        except FileNotFoundError:
            continue  # deleted while we looked: a merge or retention in another process
        files.append(EventFile(entry.name, *parsed, size))
    files.sort(key=lambda f: f.key)
    return files


def others(directory: Path) -> list[str]:
    """`events-*.parquet` files not named as this module names them: read, never touched."""
    return sorted(
        name
        for name in os.listdir(directory)
        if name.startswith("events-") and name.endswith(".parquet") and parse(name) is None
    )


def replaced_by(path: Path) -> list[str]:
    """The names a merged file replaced (from its footer; nothing for a flush's file)."""
    metadata = pq.read_schema(path).metadata or {}
    names: list[str] = json.loads(metadata.get(REPLACES, b"[]"))
    return names


def live(files: Iterable[EventFile], replaced: set[str]) -> list[EventFile]:
    return [f for f in files if f.name not in replaced]


def conform(table: pa.Table) -> pa.Table:
    """A table read from an event file, as SCHEMA: the ADDED columns it lacks (an older
    version wrote it) as nulls. Anything else that differs is an error, as a cast gives."""
    if table.schema == SCHEMA:
        return table
    for f in SCHEMA:
        if f.name in ADDED and f.name not in table.column_names:
            # Appended: the ADDED columns are SCHEMA's last.
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    return table.cast(SCHEMA)


def newest_ms(path: Path) -> int | None:
    """The time of a file's newest event: from the column statistics, which pyarrow writes,
    else from the column itself."""
    metadata = pq.read_metadata(path)
    column = next(i for i in range(metadata.num_columns) if metadata.schema.column(i).name == "at")
    newest: int | None = None
    for i in range(metadata.num_row_groups):
        stats = metadata.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max:
            values = pq.read_table(path, columns=["at"]).column("at")
            found = pc.max(values.cast(pa.int64())).as_py()
            return None if found is None else int(found)
        value = stats.max
        if value.tzinfo is None:  # a writer that did not mark the column as UTC
            value = value.replace(tzinfo=datetime.UTC)
        at = (value - _EPOCH) // _MS
        newest = at if newest is None else max(newest, at)
    return newest
