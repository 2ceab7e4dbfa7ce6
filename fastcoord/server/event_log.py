"""The event log: coordinator events as columnar Parquet files, for `fastcoord report`.

The core returns Events with its Results; the server hands them here, which only appends
them to a list (the hot path pays one list append per event, and heartbeats make none). A
background task swaps the list out every event.log.flush.ms, or sooner when a batch is
full, and a worker thread writes it as one Parquet file under DATA_DIR/events/. Each file is
written under a hidden temporary name and renamed, so a reader, or a crash, never sees half
a file. Each row carries the node's id (node.id), so that a cluster's logs, one per node,
can be read as one. If the disk falls behind, at most MAX_BUFFERED events wait; later ones
are dropped and counted, with one warning per flush, rather than growing without bound.

After each flush another worker thread merges the small files into rolled ones and deletes
files past retention (event_merge.py); `read` returns the same events in the same order
whatever it has done, or was doing when a crash came (event_files.py).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import trio

from fastcoord.core.result import Event
from fastcoord.server.event_files import (
    SCHEMA,
    flush_name,
    others,
    parse,
    replaced_by,
    scan,
    temporary,
)
from fastcoord.server.event_merge import RETENTION_CHECK_MS, Merger

__all__ = ["SCHEMA", "EventLog", "files", "read", "to_table"]

log = logging.getLogger("fastcoord.server")

BATCH_ROWS = 65_536  # a full batch is written without waiting for the interval
MAX_BUFFERED = 1_000_000
RETRY_S = 60  # after a pass that failed (a full disk, say): no retry at every flush
READ_ATTEMPTS = 20


def wall_ms() -> int:
    return int(time.time() * 1000)


def to_table(events: list[Event], node_id: int = 0) -> pa.Table:
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
            # One value a file: Parquet's dictionary and run-length encoding store it in bytes.
            "node_id": pa.repeat(pa.scalar(node_id, pa.int32()), len(events)),
        }
    ).cast(SCHEMA)


def files(directory: str | Path) -> list[Path]:
    """The files that hold the log, oldest first: without those that a merged file replaced
    (a crash may leave them until the next start). For a reader that cannot skip them
    itself, such as Spark: `spark.read.parquet(*map(str, files(directory)))`."""
    directory = Path(directory)
    found = scan(directory)
    replaced: set[str] = set()
    for f in found:
        if f.merged:
            replaced.update(replaced_by(directory / f.name))
    live = [directory / f.name for f in found if f.name not in replaced]
    return live + [directory / name for name in others(directory)]


def read(directory: str | Path) -> pa.Table:
    """Every event written under `directory` (DATA_DIR/events), once each, oldest first.

    While a server runs, a merge or retention may change the directory during the read:
    a file read vanished, or a merged file appeared where a listing may have missed it and
    its inputs both. Then it reads again."""
    directory = Path(directory)
    if not directory.is_dir():
        return SCHEMA.empty_table()
    for _ in range(READ_ATTEMPTS):
        before = _names(directory)
        try:
            tables = [pq.read_table(path, schema=SCHEMA) for path in files(directory)]
        except FileNotFoundError:
            continue
        after = _names(directory)
        if not before - after and not any(_merged(name) for name in after - before):
            return pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    raise RuntimeError(f"{directory} changed during each of {READ_ATTEMPTS} reads")


def _names(directory: Path) -> set[str]:
    return {n for n in os.listdir(directory) if n.startswith("events-") and n.endswith(".parquet")}


def _merged(name: str) -> bool:
    parsed = parse(name)
    return parsed is not None and (parsed[3] > 0 or parsed[4])


class EventLog:
    def __init__(
        self,
        directory: str | Path,
        flush_ms: int,
        roll_bytes: int = 134_217_728,
        roll_ms: int = 3_600_000,
        retention_ms: int = 604_800_000,
        clock: Callable[[], int] = wall_ms,
        node_id: int = 0,
    ) -> None:
        self.directory = Path(directory)
        self.node_id = node_id  # written in every row
        self.flush_s = flush_ms / 1000
        self.pending: list[Event] = []
        self.dropped = 0
        self.written = 0
        self._full = trio.Event()
        self._wake = trio.Event()  # a file was written: the merger may have work
        self._merging: trio.Event | None = None  # set once the pass under way has ended
        self.directory.mkdir(parents=True, exist_ok=True)
        self.merger = Merger(self.directory, roll_bytes, roll_ms, retention_ms, clock)
        # Before any flush: the start removes temporary files, this process's among them.
        self._files = self.merger.recover() - 1

    def add(self, events: list[Event]) -> None:
        room = MAX_BUFFERED - len(self.pending)
        if len(events) > room:
            self.dropped += len(events) - max(room, 0)
            events = events[: max(room, 0)]
        self.pending.extend(events)
        if len(self.pending) >= BATCH_ROWS:
            self._full.set()

    async def run(self) -> None:
        """Write batches, and merge files, until cancelled; the caller then calls `close`."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._merge)
            while True:
                with trio.move_on_after(self.flush_s):
                    await self._full.wait()
                self._full = trio.Event()
                await self.flush()

    async def close(self) -> None:
        """At shutdown, before `run` is cancelled: stop merging (a merge under way stops
        within a row group, its inputs untouched) and write what waits."""
        self.merger.stop.set()
        if self._merging is not None:
            await self._merging.wait()
        await self.flush()

    async def _merge(self) -> None:
        # A pass at start (leftovers, retention), after each flush, and every few minutes
        # for retention when nothing is written.
        while not self.merger.stop.is_set():
            self._wake = trio.Event()
            done = self._merging = trio.Event()
            try:
                ok = await trio.to_thread.run_sync(self._pass, abandon_on_cancel=True)
            except trio.Cancelled:
                self.merger.stop.set()  # the abandoned thread sees it within a row group
                raise
            finally:
                done.set()
            if not ok:
                await trio.sleep(RETRY_S)
                continue
            with trio.move_on_after(RETENTION_CHECK_MS / 1000):
                await self._wake.wait()

    def _pass(self) -> bool:
        try:
            self.merger.run_pass()
        except Exception as exc:
            # The event log is for analysis: a merge that fails must not stop the coordinator.
            log.warning(
                "event log: cannot merge or expire files: %s (again in %d s)",
                exc,
                RETRY_S,
                exc_info=not isinstance(exc, OSError),
            )
            return False
        return True

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
        name = flush_name(batch[0].at_ms, os.getpid(), self._files)
        try:
            await trio.to_thread.run_sync(self._write, batch, name)
        except OSError as exc:
            # The event log is for analysis: losing a batch must not stop the coordinator.
            log.warning("event log: cannot write %s: %s (%d events lost)", name, exc, len(batch))
            return
        self.written += len(batch)
        self._wake.set()

    def _write(self, batch: list[Event], name: str) -> None:
        partial = self.directory / temporary(name)
        pq.write_table(to_table(batch, self.node_id), partial)
        os.replace(partial, self.directory / name)
