"""Run directories of generated data, written as `fastcoord loadtest` writes them, and the
same data kept in Python to compute each statistic directly.

A generated run's members ramp up to TARGET, stand stable, then leave, and its summary's
phases say so as the load test would (joining up to the first second with every member
stable, leaving for its last seconds); its groups are PREFIX-NNNN, as the load test names
them."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from fastcoord.loadtest.histogram import Histogram
from fastcoord.loadtest.results import SCHEMAS

START_MS = 1_764_000_000_000
APIS = ("Heartbeat", "JoinGroup", "SyncGroup", "OffsetCommit")
PREFIX = "gen"
TARGET = 150  # members
NODE = "127.0.0.1:9644"  # the admin port the server samples come from


def group(n: int) -> str:
    """The load test's name of group n."""
    return f"{PREFIX}-{n:04d}"


@dataclass
class GeneratedRun:
    path: Path
    # (api, elapsed_s) -> the second's histogram, for the Python side of each check
    seconds: dict[tuple[str, int], Histogram] = field(default_factory=dict)
    errors: dict[tuple[str, int], int] = field(default_factory=dict)
    signals: dict[tuple[str, int], int] = field(default_factory=dict)
    summary: dict[str, object] = field(default_factory=dict)


def latency_run(path: Path, seconds: int, seed: int, parts: int = 3) -> GeneratedRun:
    """A run directory whose latency table holds `seconds` seconds of every API, latencies
    drawn log-normally (a long tail, some in the overflow bucket), in `parts` part files."""
    rng = random.Random(seed)
    nprng = np.random.default_rng(seed)
    run = GeneratedRun(path)
    rows: list[dict[str, object]] = []
    for second in range(1, seconds + 1):
        for api in APIS:
            if rng.random() < 0.1:
                continue  # an API with nothing that second
            n = rng.randrange(0, 400)
            latencies = nprng.lognormal(mean=6.5, sigma=1.2, size=n)
            if rng.random() < 0.02:
                latencies = np.append(latencies, 2.0e9)  # past the last bucket
            hist = Histogram()
            hist.add_us(latencies.astype(np.int64))
            errors = rng.randrange(0, 5)
            signals = rng.randrange(0, 7)
            run.seconds[(api, second)] = hist
            run.errors[(api, second)] = errors
            run.signals[(api, second)] = signals
            buckets, counts = hist.nonzero()
            rows.append(
                {
                    "time": START_MS + second * 1000,
                    "elapsed_s": second,
                    "api": api,
                    "count": hist.count,
                    "errors": errors,
                    "signals": signals,
                    "buckets": buckets.tolist(),
                    "counts": counts.tolist(),
                    "sum_us": hist.sum_us,
                    "max_us": -(-hist.max_ns // 1000),
                }
            )
    write_table(path / "latency", rows, SCHEMAS["latency"], parts)
    run.summary = {
        "schema_version": 2,
        "complete": True,
        "outcome": "completed",
        "config": {"members": TARGET, "group_prefix": PREFIX, "group_protocol": "classic"},
        "started": iso(START_MS),
        "ended": iso(START_MS + seconds * 1000 + 400),
        "phases": {"joining": None, "steady": None, "leaving": None},
        "steady_by": None,
        "thresholds": {"max_error_rate": None, "max_p99_ms": None},
        "faults": None,
    }
    write_summary(run)
    return run


def iso(epoch_ms: int) -> str:
    from fastcoord.loadtest.summary import iso as summary_iso

    return summary_iso(epoch_ms)


def write_summary(run: GeneratedRun) -> None:
    (run.path / "summary.json").write_text(json.dumps(run.summary) + "\n")


def write_table(
    directory: Path, rows: list[dict[str, object]], schema: pa.Schema, parts: int
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    size = max(1, -(-len(rows) // parts))
    for i in range(0, max(1, len(rows)), size):
        table = pa.Table.from_pylist(rows[i : i + size], schema=schema)
        pq.write_table(table, directory / f"part-{i // size:05d}.parquet")


ERROR_NAMES = {
    25: "UNKNOWN_MEMBER_ID",
    27: "REBALANCE_IN_PROGRESS",
    22: "ILLEGAL_GENERATION",
    79: "MEMBER_ID_REQUIRED",
}
SIGNALS = {27, 79}


def joined_by(seconds: int) -> int:
    """The second in which a generated run's members all stand stable."""
    return max(1, seconds // 4)


def other_tables(run: GeneratedRun, seconds: int, seed: int) -> dict[str, list[dict[str, object]]]:
    """errors, states, rebalances and server rows for a run written by latency_run (kept
    as rows, so that each check can compute its statistic from them directly), and its
    summary's phases: joining to joined_by(seconds), leaving for the last two seconds."""
    rng = random.Random(seed + 1000)
    errors = [
        {
            "time": START_MS + second * 1000 - rng.randrange(1, 1000),
            "api": rng.choice(APIS),
            "error_code": (code := rng.choice(list(ERROR_NAMES))),
            "error": ERROR_NAMES[code],
            "signal": code in SIGNALS,
            "group": group(rng.randrange(5)),
            "member": f"m{rng.randrange(50)}",
        }
        for second in range(1, seconds + 1)
        for _ in range(rng.randrange(0, 6))
    ]
    joined, leaving = joined_by(seconds), seconds - 1
    states = []
    for second in range(1, seconds + 1):
        stable = min(TARGET, TARGET * second // joined)
        if second >= leaving:
            stable = rng.randrange(TARGET // 2)
        rest = TARGET - stable
        joining = rng.randrange(rest + 1)
        states.append(
            {
                "time": START_MS + second * 1000,
                "elapsed_s": second,
                "unjoined": 0,
                "joining": joining if second < leaving else 0,
                "syncing": rest - joining if second < leaving else 0,
                "stable": stable,
                "leaving": rest if second >= leaving else 0,
                "stopped": 0,
                "connections": 7,
                "requests": rng.randrange(1000),
                "cpu_s": rng.random(),
            }
        )
    cpu = 0.0
    server = []
    for second in range(1, seconds + 1):
        cpu += rng.random()
        server.append(
            {
                "time": START_MS + second * 1000 + rng.randrange(0, 200),
                "elapsed_s": second,
                "node": NODE,
                "cpu_s": cpu,
                "rss_bytes": 50_000_000 + rng.randrange(10_000_000),
            }
        )
    rebalances = []
    for g in range(6):
        size = (1, 3, 12, 40, 7, 150)[g]
        for generation in range(1, rng.randrange(2, 5)):
            start = START_MS + rng.randrange(0, seconds * 1000)
            for member in range(size):
                began = start + rng.randrange(0, 500)
                rebalances.append(
                    {
                        "time": began + rng.randrange(1, 3000),
                        "started": began,
                        "duration_ms": 0,
                        "group": group(g),
                        "member": f"{group(g)}-m{member}",
                        "instance_id": None,
                        "generation": generation,
                        "reason": "joining",
                        "expected": rng.random() < 0.9,
                    }
                )
    for row in rebalances:
        row["duration_ms"] = int(row["time"]) - int(row["started"])  # type: ignore[call-overload]
    tables = {"errors": errors, "states": states, "rebalances": rebalances, "server": server}
    for table, rows in tables.items():
        write_table(run.path / table, rows, SCHEMAS[table], 2)
    run.summary["phases"] = {
        "joining": {"first_s": 1, "last_s": joined},
        "steady": {"first_s": joined + 1, "last_s": leaving - 1},
        "leaving": {"first_s": leaving, "last_s": seconds},
    }
    run.summary["steady_by"] = "members"
    write_summary(run)
    return tables


def events(
    directory: Path, seed: int, groups: range = range(8), node_id: int | None = None
) -> list[dict[str, object]]:
    """An event log: groups that rebalance (joins, some expirations, sync_completed), commits,
    leaves; written as the server names its files, by node `node_id` (None: as versions
    before the node's column wrote them, without it)."""
    rows = event_rows(seed, groups)
    write_events(directory, rows, node_id)
    return rows


def event_rows(seed: int, groups: range = range(8)) -> list[dict[str, object]]:
    """The rows of `events`, oldest first, without writing them."""
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    at = START_MS
    for n in groups:
        members = 0
        for generation in range(1, rng.randrange(2, 6)):
            at += rng.randrange(100, 5000)
            started = at
            rows.append(
                event_row(at, "rebalance_started", n, None, generation - 1, members, 0, "join")
            )
            for m in range(rng.randrange(1, 30)):
                at += rng.randrange(1, 200)
                kind = "member_expired" if rng.random() < 0.1 else "member_joined"
                members += 1 if kind == "member_joined" else -1 if members else 0
                rows.append(
                    event_row(at, kind, n, f"{group(n)}-m{m}-{generation}", -1, members, 0, "")
                )
            at += rng.randrange(1, 300)
            rows.append(
                event_row(at, "rebalance_completed", n, None, generation, members, at - started, "")
            )
            at += rng.randrange(1, 300)
            rows.append(
                event_row(at, "sync_completed", n, None, generation, members, at - started, "")
            )
            for _ in range(rng.randrange(0, 4)):
                at += rng.randrange(1, 1000)
                rows.append(
                    event_row(at, "offsets_committed", n, None, -1, rng.randrange(1, 20), 0, "")
                )
            if rng.random() < 0.3:
                at += 10
                rows.append(event_row(at, "member_left", n, f"{group(n)}-leaver", -1, 0, 0, ""))
    return rows


def write_events(
    directory: Path, rows: list[dict[str, object]], node_id: int | None = None
) -> list[str]:
    """`rows` as two files of an event log, by node `node_id` (None: without the node's
    column); their names."""
    from fastcoord.pipeline.tables import plain
    from fastcoord.server.event_log import SCHEMA

    directory.mkdir(parents=True, exist_ok=True)
    half = len(rows) // 2
    names = []
    for n, part in enumerate((rows[:half], rows[half:]), 1):
        first = part[0]["at"]
        table = pa.Table.from_pylist(
            [{**row, "node_id": node_id} for row in part], schema=plain(SCHEMA)
        ).cast(SCHEMA)
        if node_id is None:
            table = table.drop_columns(["node_id"])
        names.append(f"events-{first}-1-{n:06d}.parquet")
        pq.write_table(table, directory / names[-1])
    return names


def event_row(
    at: int,
    kind: str,
    n: int,
    member: str | None,
    generation: int,
    members: int,
    duration_ms: int,
    reason: str,
) -> dict[str, object]:
    return {
        "at": at,
        "kind": kind,
        "group_id": group(n),
        "member_id": member,
        "generation": generation,
        "members": members,
        "duration_ms": duration_ms,
        "reason": reason,
    }
