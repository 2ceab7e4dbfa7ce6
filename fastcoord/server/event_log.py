"""The event log: coordinator events as columnar Parquet files, for `fastcoord report`.

The core returns Events with its Results; the server hands them here, which only appends
them to a list (the hot path pays one list append per event, and heartbeats make none). A
background task swaps the list out every event.log.flush.ms, or sooner when a batch is
full, and a worker thread writes it as one Parquet file under DATA_DIR/events/. Each file is
written under a temporary name and renamed, so a reader, or a crash, never sees half a file.
If the disk falls behind, at most MAX_BUFFERED events wait; later ones are dropped and
counted, with one warning per flush, rather than growing without bound.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import trio

from fastcoord.core.result import Event

log = logging.getLogger("fastcoord.server")

BATCH_ROWS = 65_536  # a full batch is written without waiting for the interval
MAX_BUFFERED = 1_000_000

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
    ]
)


def to_table(events: list[Event]) -> pa.Table:
    return pa.table(
        {
            "at": pa.array([e.at_ms for e in events], pa.timestamp("ms", tz="UTC")),
            "kind": pa.array([e.kind for e in events], pa.string()).dictionary_encode(),
            "group_id": [e.group_id for e in events],
            "member_id": [e.member_id for e in events],
            "generation": pa.array([e.generation for e in events], pa.int32()),
            "members": pa.array([e.members for e in events], pa.int32()),
            "duration_ms": pa.array([e.duration_ms for e in events], pa.int64()),
            "reason": [e.reason for e in events],
        }
    ).cast(SCHEMA)


def read(directory: str | Path) -> pa.Table:
    """Every event written under `directory` (DATA_DIR/events), oldest file first."""
    files = sorted(Path(directory).glob("events-*.parquet"))
    if not files:
        return SCHEMA.empty_table()
    return pa.concat_tables([pq.read_table(f, schema=SCHEMA) for f in files])


class EventLog:
    def __init__(self, directory: str | Path, flush_ms: int) -> None:
        self.directory = Path(directory)
        self.flush_s = flush_ms / 1000
        self.pending: list[Event] = []
        self.dropped = 0
        self.written = 0
        self._files = 0
        self._full = trio.Event()
        self.directory.mkdir(parents=True, exist_ok=True)

    def add(self, events: list[Event]) -> None:
        room = MAX_BUFFERED - len(self.pending)
        if len(events) > room:
            self.dropped += len(events) - max(room, 0)
            events = events[: max(room, 0)]
        self.pending.extend(events)
        if len(self.pending) >= BATCH_ROWS:
            self._full.set()

    async def run(self) -> None:
        """Write batches until cancelled; the caller flushes the rest with `flush`."""
        while True:
            with trio.move_on_after(self.flush_s):
                await self._full.wait()
            self._full = trio.Event()
            await self.flush()

    async def flush(self) -> None:
        if self.dropped:
            log.warning(
                "event log: %d events dropped (the disk is behind; %d are waiting)",
                self.dropped,
                len(self.pending),
            )
            self.dropped = 0
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        self._files += 1
        name = f"events-{batch[0].at_ms:013d}-{os.getpid()}-{self._files:06d}.parquet"
        try:
            await trio.to_thread.run_sync(self._write, batch, name)
        except OSError as exc:
            # The event log is for analysis: losing a batch must not stop the coordinator.
            log.warning("event log: cannot write %s: %s (%d events lost)", name, exc, len(batch))
            return
        self.written += len(batch)

    def _write(self, batch: list[Event], name: str) -> None:
        final = self.directory / name
        partial = final.with_suffix(".parquet.tmp")
        pq.write_table(to_table(batch), partial)
        os.replace(partial, final)
