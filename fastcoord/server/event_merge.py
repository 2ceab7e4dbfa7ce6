"""Rolling the event log: its small files merged into rolled ones, and its retention.

A flush writes one small file every event.log.flush.ms (17,280 a day at the default), and a
reader such as Spark pays for every file. So the files fall into rolls, as a Kafka log into
segments: a roll begins at a file and takes the files after it while they begin within
event.log.roll.ms of its first event, and until it holds event.log.roll.bytes. A roll that
another follows is closed: its files are merged into one `-rolled` file, which only
retention touches after that. The last roll is open: its files are merged FANIN at a time
(`-m1`), FANIN of those at a time (`-m2`), and so on, so that it stays a few dozen files
whatever the flush interval, and an event is rewritten a few times at most.

A merge streams: it holds one input row group and one output row group at most. It writes
its output under a hidden temporary name, syncs it, and renames it into place: that rename
commits it. The output lists the files it replaced in its metadata; they are deleted after
the rename, and until they are (a crash may come first) readers skip them and the next
start deletes them. A crash before the rename leaves only the temporary file, which the next
start deletes. So the log is the inputs or the output, never both, never neither. Why not a
manifest, as the offsets log has: the output is itself the record of what it replaced, so
there is one file to write and one rename to commit it, and nothing to keep in step.

A file whose newest event is older than event.log.retention.ms is deleted: at start, after
each roll, and every RETENTION_CHECK_MS.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fastcoord.server.event_files import (
    REPLACES,
    SCHEMA,
    EventFile,
    conform,
    is_temporary,
    merged_name,
    newest_ms,
    parse,
    replaced_by,
    scan,
    temporary,
)
from fastcoord.storage.swap import fsync_directory

log = logging.getLogger("fastcoord.server")

FANIN = 16  # files of one level merged at a time in the open roll
MAX_INPUTS = 1000  # bounds the list of names in a merged file's metadata
ROW_GROUP_ROWS = 262_144  # the output's row groups; a merge holds about two of them
RETENTION_CHECK_MS = 300_000


class Stopped(Exception):
    """Asked to stop during a merge: its temporary file is gone, its inputs are untouched."""


class Unreadable(Exception):
    """An input that Parquet cannot read: left where it is, and merged no more."""

    def __init__(self, name: str, cause: BaseException) -> None:
        super().__init__(f"{name}: {cause}")
        self.name = name


@dataclass(frozen=True, slots=True)
class Merge:
    inputs: list[EventFile]
    level: int
    closed: bool

    @property
    def output(self) -> str:
        return merged_name(self.inputs[0], self.level, self.closed)


def rolls(run: Sequence[EventFile], roll_bytes: int, roll_ms: int) -> list[list[EventFile]]:
    """A run of open files cut into rolls: each closes with the file that brings it to
    roll_bytes, or before the first file that begins roll_ms after its first."""
    out: list[list[EventFile]] = []
    size = start = 0
    for f in run:
        if not out or size >= roll_bytes or f.first_ms >= start + roll_ms:
            out.append([f])
            size, start = f.size, f.first_ms
        else:
            out[-1].append(f)
            size += f.size
    return out


def plan(
    files: Sequence[EventFile],
    roll_bytes: int,
    roll_ms: int,
    fanin: int = FANIN,
    skip: frozenset[str] | set[str] = frozenset(),
) -> Merge | None:
    """The next merge for these live files (in the log's order), or None.

    A merge takes consecutive files only, so that the log's order is kept. Rolled files and
    `skip` (unreadable ones) are never inputs: the runs between them are rolled apart."""
    runs: list[tuple[list[EventFile], bool]] = [([], False)]
    for f in files:
        if f.closed or f.name in skip:
            runs[-1] = (runs[-1][0], True)  # what comes before it can grow no more
            runs.append(([], False))
        else:
            runs[-1][0].append(f)
    for run, followed in runs:
        if not run:
            continue
        cut = rolls(run, roll_bytes, roll_ms)
        for i, roll in enumerate(cut):
            closed = followed or i < len(cut) - 1 or sum(f.size for f in roll) >= roll_bytes
            if closed and len(roll) > MAX_INPUTS:
                level = max(f.level for f in roll) + 1
                return Merge(roll[:MAX_INPUTS], level, closed=False)
            if closed and len(roll) > 1:
                return Merge(roll, 0, closed=True)
            if not closed:
                same = _first_tier(roll, fanin)
                if same:
                    return Merge(same[:MAX_INPUTS], same[0].level + 1, closed=False)
    return None


def _first_tier(roll: list[EventFile], fanin: int) -> list[EventFile]:
    """The first stretch of at least `fanin` consecutive files of one level."""
    start = 0
    for i in range(1, len(roll) + 1):
        if i == len(roll) or roll[i].level != roll[start].level:
            if i - start >= fanin:
                return roll[start:i]
            start = i
    return []


def merge(
    directory: Path,
    m: Merge,
    stopping: Callable[[], bool] = lambda: False,
    step: Callable[[str], None] = lambda stage: None,
) -> int:
    """Write `m`'s inputs as one file and swap it in; the rows written. `step(stage)` is
    called at each stage, for tests that stop a merge there as a crash would."""
    final = directory / m.output
    partial = directory / temporary(m.output)
    if final.exists():
        raise FileExistsError(f"{final} exists: a merge would replace it")
    schema = SCHEMA.with_metadata({REPLACES: json.dumps([f.name for f in m.inputs])})
    try:
        rows = _write(directory, m.inputs, partial, schema, stopping, step)
        fd = os.open(partial, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        step("written")
        if stopping():
            raise Stopped
    except Exception:
        partial.unlink(missing_ok=True)
        raise
    os.rename(partial, final)  # the commit point
    fsync_directory(directory)
    step("committed")
    for f in m.inputs:
        (directory / f.name).unlink(missing_ok=True)
        step("input deleted")
    fsync_directory(directory)
    return rows


def _write(
    directory: Path,
    inputs: list[EventFile],
    partial: Path,
    schema: pa.Schema,
    stopping: Callable[[], bool],
    step: Callable[[str], None],
) -> int:
    rows = 0
    held: list[pa.Table] = []
    held_rows = 0
    with pq.ParquetWriter(partial, schema) as writer:
        for f in inputs:
            try:
                source = pq.ParquetFile(directory / f.name)
            except (OSError, pa.ArrowException) as exc:
                raise Unreadable(f.name, exc) from exc
            with source:
                for i in range(source.num_row_groups):
                    if stopping():
                        raise Stopped
                    try:
                        table = source.read_row_group(i).replace_schema_metadata(None)
                    except (OSError, pa.ArrowException) as exc:
                        raise Unreadable(f.name, exc) from exc
                    # An older version's file lacks the newer columns: null there.
                    table = conform(table)
                    held.append(table)
                    held_rows += table.num_rows
                    rows += table.num_rows
                    if held_rows >= ROW_GROUP_ROWS:
                        rest = pa.concat_tables(held)
                        while rest.num_rows >= ROW_GROUP_ROWS:
                            writer.write_table(rest.slice(0, ROW_GROUP_ROWS), ROW_GROUP_ROWS)
                            rest = rest.slice(ROW_GROUP_ROWS)
                            step("writing")
                        held, held_rows = [rest], rest.num_rows
        if held_rows:
            writer.write_table(pa.concat_tables(held), ROW_GROUP_ROWS)
            step("writing")
    return rows


def _swapped(directory: Path, files: list[EventFile], done: Merge) -> list[EventFile]:
    # The listing after a merge, without listing again (a backlog may be 100,000 files);
    # files flushed since are left for the next pass.
    parsed = parse(done.output)
    assert parsed is not None
    output = EventFile(done.output, *parsed, (directory / done.output).stat().st_size)
    i = files.index(done.inputs[0])
    return [*files[:i], output, *files[i + len(done.inputs) :]]


class Merger:
    """Merges and retention for one directory. Its passes run in a worker thread, one at a
    time; flushes may add files meanwhile, and nothing else changes the directory."""

    def __init__(
        self,
        directory: Path,
        roll_bytes: int,
        roll_ms: int,
        retention_ms: int,
        clock: Callable[[], int],
        fanin: int = FANIN,
    ) -> None:
        self.directory = directory
        self.roll_bytes = roll_bytes
        self.roll_ms = roll_ms
        self.retention_ms = retention_ms
        self.clock = clock
        self.fanin = fanin
        self.stop = threading.Event()
        self.step: Callable[[str], None] = lambda stage: None
        # What footers said, by name: a name is never given to two files.
        self._replaces: dict[str, list[str]] = {}
        self._newest: dict[str, int | None] = {}
        self._unreadable: set[str] = set()
        self._retention_due = 0  # at the first pass

    def recover(self) -> int:
        """At start: remove temporary files, finish a merge interrupted after its commit;
        the number for the next flush's file (above every name the directory knows, so
        that no name given now was ever replaced)."""
        for name in os.listdir(self.directory):
            if is_temporary(name):
                log.info("event log: removing %s, left by an interrupted write", name)
                (self.directory / name).unlink(missing_ok=True)
        files = scan(self.directory)
        self._drop_replaced(files)
        numbers = [f.n for f in files]
        for names in self._replaces.values():
            numbers.extend(parsed[2] for parsed in map(parse, names) if parsed is not None)
        return max(numbers, default=0) + 1

    def run_pass(self) -> None:
        """Finish, expire and merge until nothing is left to do or `stop` is set."""
        files = self._drop_replaced(scan(self.directory))
        if self.clock() >= self._retention_due:
            files = self._expire(files)
        while not self.stop.is_set():
            todo = plan(files, self.roll_bytes, self.roll_ms, self.fanin, self._unreadable)
            if todo is None:
                break
            try:
                rows = merge(self.directory, todo, self.stop.is_set, self.step)
            except Unreadable as exc:
                self._cannot_read(exc.name, exc.__cause__)
                continue
            except Stopped:
                return
            self._replaces[todo.output] = [f.name for f in todo.inputs]
            size = sum(f.size for f in todo.inputs)
            if todo.closed:
                log.info(
                    "event log: rolled %d files (%d events, %d bytes) into %s",
                    len(todo.inputs),
                    rows,
                    size,
                    todo.output,
                )
            else:
                log.debug(
                    "event log: merged %d files (%d bytes) into %s",
                    len(todo.inputs),
                    size,
                    todo.output,
                )
            files = _swapped(self.directory, files, todo)
            if todo.closed:
                files = self._expire(files)
        names = {f.name for f in files}
        for cache in (self._replaces, self._newest):
            for name in cache.keys() - names:
                del cache[name]

    def _drop_replaced(self, files: list[EventFile]) -> list[EventFile]:
        """Delete the files that merged files replaced (a crash came between a merge's
        commit and their deletion); the rest."""
        replaced: set[str] = set()
        for f in files:
            if f.merged:
                replaced.update(self._replaced(f))
        left = [f for f in files if f.name in replaced]
        if left:
            log.warning("event log: finishing a merge that a stop interrupted")
            for f in left:
                (self.directory / f.name).unlink(missing_ok=True)
            fsync_directory(self.directory)
        return [f for f in files if f.name not in replaced]

    def _replaced(self, f: EventFile) -> list[str]:
        if f.name not in self._replaces:
            try:
                self._replaces[f.name] = replaced_by(self.directory / f.name)
            except (OSError, pa.ArrowException, ValueError) as exc:
                self._cannot_read(f.name, exc)
                self._replaces[f.name] = []
        return self._replaces[f.name]

    def _cannot_read(self, name: str, exc: BaseException | None) -> None:
        # Damage: a disk error, or a flush that a machine crash cut short (a flush is not
        # synced). Left for a person to look at; the files around it are merged apart.
        if name not in self._unreadable:
            self._unreadable.add(name)
            log.warning("event log: cannot read %s (%s); it is no longer merged", name, exc)

    def _expire(self, files: list[EventFile]) -> list[EventFile]:
        now = self.clock()
        horizon = now - self.retention_ms
        expired = []
        for f in files:
            if f.name not in self._newest:
                try:
                    self._newest[f.name] = newest_ms(self.directory / f.name)
                except (OSError, pa.ArrowException) as exc:
                    self._cannot_read(f.name, exc)
                    # Its rows cannot say: it was written just after its newest event.
                    mtime = (self.directory / f.name).stat().st_mtime
                    self._newest[f.name] = int(mtime * 1000)
            newest = self._newest[f.name]
            if newest is not None and newest < horizon:
                expired.append(f)
        gone = {f.name for f in expired}
        for name in gone:
            (self.directory / name).unlink(missing_ok=True)
        if expired:
            fsync_directory(self.directory)
            log.info(
                "event log: deleted %d files of events older than event.log.retention.ms",
                len(expired),
            )
        self._retention_due = now + RETENTION_CHECK_MS
        return [f for f in files if f.name not in gone]
