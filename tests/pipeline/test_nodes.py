"""A cluster's event logs, one per node, reported as one: the same per-group results as one
log holding every event, each row with the node that wrote it, and a cluster's data
directory standing for its nodes' logs."""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from fastcoord.core.records import OffsetCommitKey, OffsetCommitValue, Record
from fastcoord.pipeline import commits, membership, nodes, rebalances
from fastcoord.pipeline.inputs import expand_events, node_of, open_inputs
from fastcoord.pipeline.report import make_report
from fastcoord.pipeline.tables import load
from fastcoord.server.event_files import REPLACES
from fastcoord.storage import segment

from .generated import (
    START_MS,
    event_row,
    event_rows,
    group,
    iso,
    latency_run,
    other_tables,
    write_events,
    write_summary,
)

MASTER = "local[1]"
GROUPS = 8  # per node, each its own: a group lives on one node


def roll(directory: Path, leftovers: list[str]) -> None:
    """A directory's files merged into one rolled file, as the server's merge does, and left
    behind (a crash between the merge's commit and their deletion) under `leftovers`."""
    files = sorted(directory.glob("events-*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files])
    rolled = directory / files[0].name.replace(".parquet", "-rolled.parquet")
    pq.write_table(table.replace_schema_metadata({REPLACES: json.dumps(leftovers)}), rolled)
    for f, name in zip(files, leftovers, strict=True):
        f.rename(directory / name)


def offsets_log(data_dir: Path, commits: list[tuple[str, str, int, int, int]]) -> None:
    """An offsets log of one partition: (group, topic, partition, offset, time) in order."""
    directory = data_dir / "__consumer_offsets-0"
    directory.mkdir(parents=True)
    records = [
        Record(OffsetCommitKey(g, t, p), OffsetCommitValue(offset, -1, "", at))
        for g, t, p, offset, at in commits
    ]
    (directory / "00000000000000000000.log").write_bytes(segment.encode_all(records))


@pytest.fixture(scope="module")
def cluster(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three nodes' logs under a cluster's data directory, their events interleaved in time:
    node 0's written before the node's column; node 1's rolled into one file whose inputs a
    crash left behind, under the names of node 0's files (each log is listed in its own
    directory, so neither hides the other's); node 2's one file of each kind. And one log
    holding every event, without the column, as one server would have written them."""
    base = tmp_path_factory.mktemp("nodes")
    data = base / "cluster"
    rows = {
        n: event_rows(seed=20 + n, groups=range(n * GROUPS, (n + 1) * GROUPS)) for n in range(3)
    }
    # Group 0's partition moves from node 0 to node 1 after everything else.
    moved = max(int(str(r["at"])) for n in rows for r in rows[n]) + 1000
    rows[0].append(event_row(moved, "group_unloaded", 0, None, 4, 3, 0, ""))
    rows[1].append(event_row(moved + 60, "group_loaded", 0, None, 4, 3, 0, "Stable"))
    names = write_events(data / "node-0" / "events", rows[0], None)
    write_events(data / "node-1" / "events", rows[1], 1)
    roll(data / "node-1" / "events", names)
    write_events(data / "node-2" / "events", rows[2], 2)
    first = sorted((data / "node-2" / "events").glob("*.parquet"))[0]
    pq.write_table(pq.read_table(first).drop_columns(["node_id"]), first)
    every = sorted((r for n in rows for r in rows[n]), key=lambda r: int(str(r["at"])))
    write_events(base / "one" / "events", every, None)
    merged = open_inputs([], [data])
    one = open_inputs([], base / "one" / "events")
    assert merged.problems == [] and one.problems == []
    return {
        "data": data,
        "base": base,
        "rows": rows,
        "merged": merged,
        "tables": load(spark, merged),
        "one": load(spark, one),
    }


def test_a_clusters_data_directory_stands_for_its_nodes_logs(cluster: dict[str, Any]) -> None:
    data = cluster["data"]
    logs = [(d.path, d.node, len(d.files)) for d in cluster["merged"].event_dirs]
    files = {0: 2, 1: 1, 2: 2}  # node 1: its rolled file only, not the two it replaced
    assert logs == [(data / f"node-{n}" / "events", n, files[n]) for n in range(3)]


def rows_of(frame: Any) -> list[str]:
    return sorted(repr(r.asDict(recursive=True)) for r in frame.collect())


SERVER_SIDE: dict[str, Callable[[Any], Any]] = {
    "group_commits": commits.per_group,
    "membership_server": lambda e: membership.server_changes(
        e, e.sparkSession.createDataFrame([("", START_MS)], "run string, start_ms long"), 10
    ),
    "rebalances_server": rebalances.server_side,
    "rebalance_sizes_server": lambda e: rebalances.by_size(rebalances.server_side(e), []),
}


@pytest.mark.parametrize("name", SERVER_SIDE)
def test_the_nodes_logs_give_what_one_log_of_every_event_gives(
    cluster: dict[str, Any], name: str
) -> None:
    compute = SERVER_SIDE[name]
    got = rows_of(compute(cluster["tables"].events))
    assert got and got == rows_of(compute(cluster["one"].events))


def test_the_slowest_rebalances_are_the_slowest_of_every_node(cluster: dict[str, Any]) -> None:
    def slowest(events: Any) -> list[Any]:
        return [
            r.asDict(recursive=True)
            for r in rebalances.slowest(rebalances.server_side(events), True).collect()
        ]

    got = slowest(cluster["tables"].events)
    assert got == slowest(cluster["one"].events)
    syncs = [
        r for n in cluster["rows"] for r in cluster["rows"][n] if r["kind"] == "sync_completed"
    ]
    assert len({r["group_id"] for r in got}) > GROUPS  # from more than one node
    assert [r["duration_ms"] for r in got] == sorted(
        (int(r["duration_ms"]) for r in syncs), reverse=True
    )[: rebalances.SLOWEST]


def test_each_row_names_the_node_that_wrote_it(cluster: dict[str, Any]) -> None:
    rows = cluster["rows"]
    events = cluster["tables"].events
    got = Counter((r.node_id, r.group_id) for r in events.select("node_id", "group_id").collect())
    want = Counter((n, r["group_id"]) for n in rows for r in rows[n])
    assert got == want
    # One server's log of files without the column, outside a cluster: no node to give.
    assert {r.node_id for r in cluster["one"].events.select("node_id").collect()} == {None}
    per_node = [r.asDict() for r in nodes.per_node(events).collect()]
    assert [(r["node_id"], r["events"], r["groups"]) for r in per_node] == [
        (n, len(rows[n]), len({r["group_id"] for r in rows[n]})) for n in rows
    ]  # node 1 logs the group that moved to it too
    for r in per_node:
        mine = rows[r["node_id"]]
        assert r["rebalances"] == sum(e["kind"] == "sync_completed" for e in mine)
        assert r["commits"] == sum(e["kind"] == "offsets_committed" for e in mine)
        assert int(r["first"].timestamp() * 1000) == min(int(e["at"]) for e in mine)
        assert int(r["last"].timestamp() * 1000) == max(int(e["at"]) for e in mine)


def test_a_report_over_a_cluster(spark: Any, cluster: dict[str, Any]) -> None:
    data, base = cluster["data"], cluster["base"]
    # Offsets logs beside nodes 0 and 1, none beside node 2; a group that moved from node
    # 0 to node 1 (g0's partition 1): its later commit is the final one. A group of
    # another run is left out.
    g0, g8 = group(0), group(8)
    offsets_log(
        data / "node-0",
        [(g0, "t", 0, 5, START_MS), (g0, "t", 0, 9, START_MS + 1), (g0, "t", 1, 4, START_MS)],
    )
    offsets_log(
        data / "node-1",
        [(g8, "t", 0, 3, START_MS), (g0, "t", 1, 7, START_MS + 5), ("other-0", "t", 0, 1, 0)],
    )
    run = latency_run(base / "run", 5, seed=1)
    other_tables(run, 5, seed=1)
    # The run lasted as long as the events: every one of them is its own.
    last = max(int(str(r["at"])) for rows in cluster["rows"].values() for r in rows)
    run.summary["ended"] = iso(last)
    write_summary(run)
    report = make_report(
        [run.path],
        [data / "node-0" / "events", data],  # node 0 named twice: read once
        base / "report",
        MASTER,
        Console(file=io.StringIO()),
    )
    assert report.problems == [
        f"{data / 'node-2'}: no offsets log (__consumer_offsets-N): no final offsets"
    ]
    by_node = pq.read_table(report.tables["events_by_node"]).to_pylist()
    assert [(r["node_id"], r["events"]) for r in by_node] == [
        (n, len(cluster["rows"][n])) for n in range(3)
    ]
    final = pq.read_table(report.tables["committed_offsets"]).to_pylist()
    assert [(r["group_id"], r["partition"], r["offset"], r["node_id"]) for r in final] == [
        (g0, 0, 9, 0),
        (g0, 1, 7, 1),
        (g8, 0, 3, 1),
    ]
    moves = pq.read_table(report.tables["coordinator_moves"]).to_pylist()
    assert [
        (r["group_id"], r["from_node"], r["to_node"], r["stable_after_unload_ms"]) for r in moves
    ] == [(g0, 0, 1, 60)]
    page = (base / "report" / "report.html").read_text()
    assert "The server&#x27;s event log" in page and "Coordinator moves" in page
    assert (base / "report" / ".gitignore").read_text().splitlines()[-1] == "*"  # git: not ours


def test_expansion_order_and_what_is_missing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for n in (10, 2, 0):
        (data / f"node-{n}" / "events").mkdir(parents=True)
    (data / "node-3").mkdir()  # a node without an event log
    (data / "node-x" / "events").mkdir(parents=True)  # not a node's
    (data / "events").mkdir()  # a cluster's data directory is its nodes' logs only
    problems: list[str] = []
    got = expand_events([data, data / "node-2" / "events", tmp_path / "single"], problems)
    assert got == [data / f"node-{n}" / "events" for n in (0, 2, 10)] + [tmp_path / "single"]
    assert problems == [f"{data / 'node-3'}: no events directory: no server-side figures of node 3"]
    assert [node_of(p) for p in got] == [0, 2, 10, None]
    # A directory with no node's log in it is an event log itself, as before.
    assert expand_events([data / "node-3"], []) == [data / "node-3"]
    inputs = open_inputs([], data / "node-2" / "events")
    assert [(d.path, d.node) for d in inputs.event_dirs] == [(data / "node-2" / "events", 2)]
    assert inputs.problems == [
        f"{data / 'node-2' / 'events'}: no event files: no server-side figures"
    ]
