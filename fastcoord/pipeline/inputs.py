"""The report's inputs, checked before Spark reads them: run directories and event logs.

A run directory is what `fastcoord loadtest --out` leaves (summary.json and four tables of
Parquet part files, docs/loadtest.md); an event log is `DATA_DIR/events` of `fastcoord
serve` (docs/server.md). Every part file's schema is read from its footer (no data) and
checked for the columns the report uses: a file that lacks one (written by an older
version, or not by fastcoord at all) is named with what it lacks and left out, and the
report goes on with the rest. So a problem costs the figures that need it, not the report.

A cluster has an event log per node, at DATA_DIR/node-N/events; the report reads them as
one. Each log's files are listed in their own directory, because a merged file names the
files it replaced by name only, and two nodes may give a file the same name. A log's node
comes from the directory's name, for the rows of files written before the event log
recorded it.

Given nothing usable at all (no RUN_DIR that is a load test's results, or no --events that
is an event log), the report refuses before Spark starts, which takes seconds, and says what
to give instead: the usual mistakes are a server's data directory given as a run, and the
data directory given where its event log is meant (which is taken as DATA_DIR/events).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from fastcoord.loadtest.results import SCHEMAS, SUMMARY
from fastcoord.server import event_files, event_log

SUMMARY_SCHEMA_VERSION = 2
TABLES = tuple(SCHEMAS)  # latency, rebalances, errors, states
# The columns the report reads: not `worker`, which files written before it lack.
COLUMNS = {table: set(schema.names) - {"worker"} for table, schema in SCHEMAS.items()}
EVENT_COLUMNS = set(event_log.SCHEMA.names) - event_files.ADDED  # older files lack those
NODE = re.compile(r"node-(\d+)")  # a node's data directory in a cluster's


@dataclass
class Run:
    """One run directory: its name in the report, its summary, its usable part files."""

    name: str
    path: Path
    summary: dict[str, Any] | None = None
    files: dict[str, list[str]] = field(default_factory=dict)  # table -> part files


@dataclass
class EventDir:
    """One node's event log: its directory, its node as the directory's name says (None
    where it does not: then only the files' own column says), its usable files."""

    path: Path
    node: int | None
    files: list[str] = field(default_factory=list)


@dataclass
class Inputs:
    runs: list[Run]
    event_dirs: list[EventDir]
    problems: list[str]  # one sentence each, naming the file and what is wrong

    @property
    def event_files(self) -> list[str]:
        return [f for d in self.event_dirs for f in d.files]


def _usable(paths: list[Path], columns: set[str], problems: list[str]) -> list[str]:
    usable = []
    for path in paths:
        try:
            names = set(pq.read_schema(path).names)
        except Exception as e:  # a truncated or foreign file: say so, go on
            problems.append(f"{path}: not a readable Parquet file ({e}): left out")
            continue
        missing = sorted(columns - names)
        if missing:
            problems.append(f"{path}: no column {', '.join(missing)} (an older schema?): left out")
            continue
        usable.append(str(path))
    return usable


def _summary(path: Path, problems: list[str]) -> dict[str, Any] | None:
    file = path / "summary.json"
    if not file.exists():
        problems.append(f"{file}: missing: the run's summary figures are not compared")
        return None
    try:
        summary = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        problems.append(f"{file}: not readable JSON ({e}): left out")
        return None
    if not isinstance(summary, dict):
        problems.append(f"{file}: not a JSON object: left out")
        return None
    version = summary.get("schema_version")
    if version != SUMMARY_SCHEMA_VERSION:
        problems.append(
            f"{file}: schema_version {version}, this report reads {SUMMARY_SCHEMA_VERSION}: "
            "left out"
        )
        return None
    return dict(summary)


def open_run(path: Path, name: str, problems: list[str]) -> Run:
    run = Run(name, path)
    if not path.is_dir():
        problems.append(f"{path}: not a directory: no figures from it")
        return run
    run.summary = _summary(path, problems)
    for table in TABLES:
        directory = path / table
        parts = (
            sorted(p for p in directory.glob("*.parquet") if not p.name.startswith((".", "_")))
            if directory.is_dir()
            else []
        )
        written = (run.summary or {}).get("tables", {}).get(table)
        if not parts and written != 0:  # a table the run wrote no rows to is no problem
            problems.append(f"{directory}: no part files: no {table} figures for {name}")
        run.files[table] = _usable(parts, COLUMNS[table], problems)
    return run


def run_names(paths: list[Path]) -> list[str]:
    """Each run's name in the report: its directory's name, made unique with its parent's
    when two share one (two `run` directories of different tests)."""
    names = [p.resolve().name for p in paths]
    out = []
    for path, name in zip(paths, names, strict=True):
        if names.count(name) > 1:
            name = f"{path.resolve().parent.name}/{name}"
        while name in out:
            name += "'"
        out.append(name)
    return out


def node_of(events: Path) -> int | None:
    """N for DATA_DIR/node-N/events, where a cluster puts node N's event log; else None."""
    events = events.resolve()
    match = NODE.fullmatch(events.parent.name)
    return int(match[1]) if match and events.name == "events" else None


def _nodes(cluster: Path, problems: list[str]) -> list[Path]:
    """The event logs of a cluster's data directory, node-N/events, in the order of N; none
    if `cluster` is not one (no node-N/events in it)."""
    if not cluster.is_dir():
        return []
    nodes = sorted(
        (int(match[1]), child)
        for child in cluster.iterdir()
        if (match := NODE.fullmatch(child.name)) and child.is_dir()
    )
    if not any((child / "events").is_dir() for _, child in nodes):
        return []
    for n, child in nodes:
        if not (child / "events").is_dir():
            problems.append(f"{child}: no events directory: no server-side figures of node {n}")
    return [child / "events" for _, child in nodes if (child / "events").is_dir()]


def _events_of(path: Path) -> Path:
    """DATA_DIR/events for a server's data directory given where its event log is meant
    (it holds events/ and no event file of its own); any other path as it is."""
    if (path / "events").is_dir() and not _event_files(path):
        return path / "events"
    return path


def expand_events(paths: Sequence[Path], problems: list[str]) -> list[Path]:
    """The event logs that --events names, in order, each once: a directory as it is given,
    a cluster's data directory (one holding node-N/events) as its nodes' logs, a server's
    data directory (one holding events/) as its log."""
    given: dict[Path, Path] = {}  # by the resolved path: a log named twice is read once
    for path in paths:
        given.setdefault(path.resolve(), path)
    found: dict[Path, Path] = {}
    for path in given.values():
        for events in _nodes(path, problems) or [_events_of(path)]:
            found.setdefault(events.resolve(), events)
    return list(found.values())


def open_event_dir(events: Path, problems: list[str]) -> EventDir:
    opened = EventDir(events, node_of(events))
    if not events.is_dir():
        problems.append(f"{events}: not a directory: no server-side figures")
        return opened
    found = event_log.files(events)  # without the files a merge replaced
    if not found:
        problems.append(f"{events}: no event files: no server-side figures")
    opened.files = _usable(found, EVENT_COLUMNS, problems)
    return opened


def open_inputs(run_dirs: list[Path], events: Path | Sequence[Path] | None) -> Inputs:
    """The runs, and the event logs of `events`: one directory, or several (expand_events)."""
    problems: list[str] = []
    runs = [
        open_run(path, name, problems)
        for path, name in zip(run_dirs, run_names(run_dirs), strict=True)
    ]
    given = [] if events is None else [events] if isinstance(events, Path) else list(events)
    dirs = [open_event_dir(path, problems) for path in expand_events(given, problems)]
    return Inputs(runs, dirs, problems)


# -- what the report refuses before it starts -----------------------------------------------

OFFSETS_PARTITION = re.compile(r"__consumer_offsets-\d+")
RUN_WANTED = "as RUN_DIR the directory of `fastcoord loadtest --out`"
EVENTS_WANTED = (
    "give the event log of `fastcoord serve` (DATA_DIR/events), its data directory, or a "
    "cluster's data directory"
)


def _listing(path: Path) -> dict[str, bool] | str:
    """What a directory holds, name -> is a directory; else why it cannot be listed."""
    if not path.exists():
        return "no such directory"
    if not path.is_dir():
        return "not a directory"
    try:
        with os.scandir(path) as entries:
            return {entry.name: entry.is_dir() for entry in entries}
    except OSError as e:
        return f"cannot be listed ({e.strerror or e})"


def _event_files(path: Path) -> bool:
    """Whether `path` holds files named as the event log names them."""
    try:
        with os.scandir(path) as entries:
            return any(
                e.name.startswith("events-") and e.name.endswith(".parquet") for e in entries
            )
    except OSError:
        return False


def _is_run(held: dict[str, bool]) -> bool:
    return SUMMARY in held or any(held.get(table) for table in TABLES)


def _is_cluster(path: Path, held: dict[str, bool]) -> bool:
    """Whether `path` is a cluster's data directory with a node's event log in it."""
    return any(
        is_dir and NODE.fullmatch(name) and (path / name / "events").is_dir()
        for name, is_dir in held.items()
    )


def _is_data_dir(held: dict[str, bool]) -> bool:
    """Whether it is a server's (or a cluster's) data directory, with an event log or not."""
    return any(
        is_dir and (name == "events" or OFFSETS_PARTITION.fullmatch(name) or NODE.fullmatch(name))
        for name, is_dir in held.items()
    )


def _run_refusal(path: Path) -> str | None:
    """Why `path` is not a load test's results, saying what to give instead; None if it is."""
    held = _listing(path)
    if isinstance(held, str):
        return f"{path}: {held}: give {RUN_WANTED}"
    if _is_run(held):
        return None
    if path.resolve().name == "events" or _event_files(path):
        return (
            f"{path} is a server's event log, not a load test's results: give it as "
            f"--events {path}, and {RUN_WANTED}"
        )
    if not [name for name in held if not name.startswith(".")]:
        return f"{path}: an empty directory: give {RUN_WANTED}"
    if _is_cluster(path, held):
        return (
            f"{path} is a cluster's data directory, not a load test's results: give it as "
            f"--events {path} (its nodes' event logs), and {RUN_WANTED}"
        )
    if held.get("events"):
        return (
            f"{path} is a server's data directory, not a load test's results: give it as "
            f"--events {path} (its event log), and {RUN_WANTED}"
        )
    if _is_data_dir(held):
        return (
            f"{path} is a server's data directory (without an event log), not a load "
            f"test's results: give {RUN_WANTED}"
        )
    if "report.html" in held:
        return (
            f"{path} is a report's output (`fastcoord report --out`), not a load test's "
            f"results: give {RUN_WANTED}"
        )
    return (
        f"{path} is not a load test's results (no {SUMMARY}, no {', '.join(TABLES[:-1])} "
        f"or {TABLES[-1]} directory in it): give {RUN_WANTED}"
    )


def _events_refusal(path: Path) -> str | None:
    """Why `path` given as --events is no event log, saying what to give instead; None if
    it is one, a server's data directory (holding events/) or a cluster's."""
    held = _listing(path)
    if isinstance(held, str):
        return f"--events {path}: {held}: {EVENTS_WANTED}"
    if path.resolve().name == "events" or _event_files(path):
        return None
    if held.get("events") or _is_cluster(path, held):
        return None
    if _is_run(held):
        return (
            f"--events {path} is a load test's results, not an event log: give it as RUN_DIR, "
            "and as --events the server's data directory (or DATA_DIR/events)"
        )
    return (
        f"--events {path} is not an event log (no events-*.parquet, no events/ directory, no "
        f"node-N/events in it): {EVENTS_WANTED}"
    )


def refusals(run_dirs: Sequence[Path], events: Sequence[Path] = ()) -> list[str]:
    """Why the report cannot start, one line per argument that cannot be used: every RUN_DIR
    when none is a load test's results, every --events when none is an event log. Empty
    when it can start; an unusable argument beside usable ones is left out later, with its
    reason (open_inputs). Only directories are listed, so it answers at once, and without
    pyspark: the report refuses before Spark starts."""
    runs = [_run_refusal(path) for path in run_dirs]
    if not run_dirs:
        runs = [f"no RUN_DIR: give {RUN_WANTED}"]
    logs = [_events_refusal(path) for path in events]
    out = [r for r in runs if r] if all(runs) else []
    if logs and all(logs):
        out += [r for r in logs if r]
    return out
