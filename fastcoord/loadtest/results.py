"""The tables a load test keeps under `--out`, for a Spark report to read.

Each table is a directory of Parquet part files (`latency/part-00000.parquet`, ...); each
part is written under a hidden temporary name (`.part-00000.parquet.tmp`, which Spark and
pyarrow.dataset skip) and renamed into place, and summary.json is replaced the same way, so
a run killed at any moment leaves whole files only, with what it measured up to its last
flush. docs/loadtest.md describes every column.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from fastcoord.output_dir import make_output_dir
from fastcoord.protocol.api_keys import api_name
from fastcoord.protocol.errors import ErrorCode, error_name
from fastcoord.server.event_files import temporary  # the same hidden names Spark skips
from fastcoord.storage.swap import fsync_directory

# The member states the workers report, one column each in `states`.
STATES = ("unjoined", "joining", "syncing", "stable", "leaving", "stopped")

# The protocol's signals to a member (join again with this id; rejoin; commit again with the
# member epoch the heartbeat just brought): answers that say what to do next, expected
# while groups rebalance. They are counted apart from the errors everywhere (tables,
# summary, views), so that a join's MEMBER_ID_REQUIRED handshake is not an error rate.
SIGNALS = frozenset(
    {
        ErrorCode.MEMBER_ID_REQUIRED,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.STALE_MEMBER_EPOCH,
    }
)

TIME = pa.timestamp("ms", tz="UTC")
# The worker that measured a row; empty where a row merges every worker's (the latency and
# states rows of a run of --processes) or is no worker's (the server's).
WORKER = ("worker", pa.int32())

LATENCY = pa.schema(
    [
        ("time", TIME),
        ("elapsed_s", pa.int32()),
        ("api", pa.string()),
        ("count", pa.int64()),
        ("errors", pa.int64()),
        ("signals", pa.int64()),
        ("buckets", pa.list_(pa.int16())),
        ("counts", pa.list_(pa.int64())),
        ("sum_us", pa.int64()),
        ("max_us", pa.int64()),
        WORKER,
    ]
)
REBALANCES = pa.schema(
    [
        ("time", TIME),  # when the rebalance ended for the member
        ("started", TIME),
        ("duration_ms", pa.int64()),
        ("group", pa.string()),
        ("member", pa.string()),
        ("instance_id", pa.string()),
        ("generation", pa.int32()),
        ("reason", pa.string()),
        ("expected", pa.bool_()),
        WORKER,
    ]
)
ERRORS = pa.schema(
    [
        ("time", TIME),
        ("api", pa.string()),
        ("error_code", pa.int16()),
        ("error", pa.string()),
        ("group", pa.string()),
        ("member", pa.string()),
        ("signal", pa.bool_()),
        WORKER,
    ]
)
STATES_SCHEMA = pa.schema(
    [
        ("time", TIME),
        ("elapsed_s", pa.int32()),
        *((state, pa.int64()) for state in STATES),
        ("connections", pa.int64()),
        ("requests", pa.int64()),
        ("cpu_s", pa.float64()),
        WORKER,
    ]
)
# The server's own figures, read from its admin port's /metrics (one row per sample).
SERVER = pa.schema(
    [
        ("time", TIME),
        ("elapsed_s", pa.int32()),
        ("node", pa.string()),  # the admin port asked, HOST:PORT
        ("cpu_s", pa.float64()),  # cumulative, as the server reported it
        ("rss_bytes", pa.int64()),
        WORKER,
    ]
)
SCHEMAS = {
    "latency": LATENCY,
    "rebalances": REBALANCES,
    "errors": ERRORS,
    "states": STATES_SCHEMA,
    "server": SERVER,
}
SUMMARY = "summary.json"
PART = "part-{:05d}.parquet"
FLUSH_S = 5  # between flushes: a killed run loses at most this much of its tables
WORKER_PART = "part-w{:04d}-{:05d}.parquet"  # a distributed run's worker's own part files


def replace_atomically(path: Path, write: Any) -> None:
    """`write(partial_path)`, then rename the whole file over `path`."""
    partial = path.with_name(temporary(path.name))
    try:
        write(partial)
        with open(partial, "rb") as written:
            os.fsync(written.fileno())
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, path)
    fsync_directory(path.parent)


def latency_rows(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=LATENCY)


def error_table(
    rows: Sequence[tuple[int, int, int, str, str]], workers: Sequence[int] | None = None
) -> pa.Table:
    """The errors table from the workers' rows (wall_ms, api_key, code, group, member), and
    the worker of each."""
    return pa.table(
        {
            "time": [r[0] for r in rows],
            "api": [api_name(r[1]) for r in rows],
            "error_code": [r[2] for r in rows],
            "error": [error_name(r[2]) for r in rows],
            "group": [r[3] for r in rows],
            "member": [r[4] for r in rows],
            "signal": [r[2] in SIGNALS for r in rows],
            "worker": workers if workers is not None else [None] * len(rows),
        },
        schema=ERRORS,
    )


def rebalance_table(
    rows: Sequence[tuple[str, str, str | None, int, int, int, str, bool]],
    workers: Sequence[int] | None = None,
) -> pa.Table:
    """The rebalances table from the workers' rows (group, member, instance_id, generation,
    started_ms, ended_ms, reason, expected), and the worker of each."""
    return pa.table(
        {
            "time": [r[5] for r in rows],
            "started": [r[4] for r in rows],
            "duration_ms": [r[5] - r[4] for r in rows],
            "group": [r[0] for r in rows],
            "member": [r[1] for r in rows],
            "instance_id": [r[2] for r in rows],
            "generation": [r[3] for r in rows],
            "reason": [r[6] for r in rows],
            "expected": [r[7] for r in rows],
            "worker": workers if workers is not None else [None] * len(rows),
        },
        schema=REBALANCES,
    )


def states_rows(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(rows), schema=STATES_SCHEMA)


def server_table(rows: Sequence[tuple[int, int, str, float, int]]) -> pa.Table:
    """The server table from samples (wall_ms, elapsed_s, node, cpu_s, rss_bytes)."""
    return pa.table(
        {
            "time": [r[0] for r in rows],
            "elapsed_s": [r[1] for r in rows],
            "node": [r[2] for r in rows],
            "cpu_s": [r[3] for r in rows],
            "rss_bytes": [r[4] for r in rows],
            "worker": [None] * len(rows),
        },
        schema=SERVER,
    )


def earlier_run(out: Path) -> str | None:
    """Why `out` cannot take a run's results (it holds another run's), else None: the check
    Results makes, for the command to make before anything starts."""
    earlier = [name for name in (SUMMARY, *SCHEMAS) if (out / name).exists()]
    if not earlier:
        return None
    names = ", ".join(earlier)
    return f"{out} holds another run's results ({names}): give an empty or new directory"


class Results:
    """The directory of one run's tables and summary; refuses one that holds another run's.

    A distributed run's worker (`worker` given) writes its own part files into the
    directory its driver made and checked, each row marked with the worker, and no
    summary: the driver writes that."""

    def __init__(self, out: Path, worker: int | None = None) -> None:
        self.out = out
        self.worker = worker
        if worker is None:
            make_output_dir(out)  # its .gitignore is no run's: the check below passes it over
            earlier = earlier_run(out)
            if earlier is not None:
                raise FileExistsError(earlier)
        self._parts = dict.fromkeys(SCHEMAS, 0)
        self.rows = dict.fromkeys(SCHEMAS, 0)

    def append(self, name: str, table: pa.Table) -> None:
        """Write `table` as the next part file of table `name` (nothing if it is empty)."""
        if table.num_rows == 0:
            return
        directory = self.out / name
        directory.mkdir(exist_ok=True)
        if self.worker is None:
            part = directory / PART.format(self._parts[name])
        else:
            part = directory / WORKER_PART.format(self.worker, self._parts[name])
            column = table.schema.get_field_index("worker")
            workers = pa.array([self.worker] * table.num_rows, pa.int32())
            table = table.set_column(column, "worker", workers)
        replace_atomically(part, lambda path: pq.write_table(table, path))
        self._parts[name] += 1
        self.rows[name] += table.num_rows

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        if self.worker is not None:
            return  # the driver's to write
        text = json.dumps(summary, indent=2, default=str, allow_nan=False) + "\n"
        replace_atomically(self.out / SUMMARY, lambda path: path.write_text(text))
