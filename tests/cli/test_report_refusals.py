"""`fastcoord report` given nothing it can use refuses at once, before Spark starts (pyspark
is not even imported), with exit status 2 and a line per argument saying what to give
instead; given something usable beside it, the report goes on and leaves the rest out."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastcoord.pipeline.inputs import expand_events, refusals
from fastcoord.testing import child_env

LOADTEST_OUT = "as RUN_DIR the directory of `fastcoord loadtest --out`"


def layout(base: Path) -> None:
    """Every kind of directory a report may be given, under `base`."""
    (base / "run" / "latency").mkdir(parents=True)
    (base / "run" / "summary.json").write_text("{}")
    (base / "empty").mkdir()
    (base / "fresh").mkdir()  # a load test that wrote nothing but its .gitignore
    (base / "fresh" / ".gitignore").write_text("*\n")
    (base / "a-file").write_text("x")
    (base / "data" / "events").mkdir(parents=True)
    (base / "data" / "__consumer_offsets-0").mkdir()
    (base / "offsets-only" / "__consumer_offsets-3").mkdir(parents=True)
    (base / "cluster" / "node-0" / "events").mkdir(parents=True)
    (base / "cluster" / "node-1").mkdir()
    (base / "notes" / "2026").mkdir(parents=True)
    (base / "notes" / "todo.txt").write_text("x")
    (base / "logs").mkdir()
    (base / "logs" / "events-1-2-3.parquet").write_bytes(b"")
    (base / "old-report" / "tables").mkdir(parents=True)
    (base / "old-report" / "report.html").write_text("")


def report(base: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "fastcoord", "report", *args],
        cwd=base,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, time.monotonic() - started


# The arguments, and the lines of standard error they get.
CASES: list[tuple[list[str], list[str]]] = [
    (["missing"], [f"missing: no such directory: give {LOADTEST_OUT}"]),
    (["a-file"], [f"a-file: not a directory: give {LOADTEST_OUT}"]),
    (["empty"], [f"empty: an empty directory: give {LOADTEST_OUT}"]),
    (["fresh"], [f"fresh: an empty directory: give {LOADTEST_OUT}"]),
    (
        ["data"],
        [
            "data is a server's data directory, not a load test's results: give it as "
            f"--events data (its event log), and {LOADTEST_OUT}"
        ],
    ),
    (
        ["offsets-only"],
        [
            "offsets-only is a server's data directory (without an event log), not a "
            f"load test's results: give {LOADTEST_OUT}"
        ],
    ),
    (
        ["cluster"],
        [
            "cluster is a cluster's data directory, not a load test's results: give it "
            f"as --events cluster (its nodes' event logs), and {LOADTEST_OUT}"
        ],
    ),
    (
        ["data/events"],
        [
            "data/events is a server's event log, not a load test's results: give it as "
            f"--events data/events, and {LOADTEST_OUT}"
        ],
    ),
    (
        ["notes"],
        [
            "notes is not a load test's results (no summary.json, no latency, "
            f"rebalances, errors, states or server directory in it): give {LOADTEST_OUT}"
        ],
    ),
    (
        ["old-report"],
        [
            "old-report is a report's output (`fastcoord report --out`), not a load "
            f"test's results: give {LOADTEST_OUT}"
        ],
    ),
    (
        ["missing", "data", "run", "--events", "notes"],  # a run, but no event log
        [
            "--events notes is not an event log (no events-*.parquet, no events/ "
            "directory, no node-N/events in it): give the event log of `fastcoord serve` "
            "(DATA_DIR/events), its data directory, or a cluster's data directory"
        ],
    ),
    (
        ["empty", "--events", "run,missing"],
        [
            f"empty: an empty directory: give {LOADTEST_OUT}",
            "--events run is a load test's results, not an event log: give it as "
            "RUN_DIR, and as --events the server's data directory (or DATA_DIR/events)",
            "--events missing: no such directory: give the event log of `fastcoord "
            "serve` (DATA_DIR/events), its data directory, or a cluster's data directory",
        ],
    ),
]


@pytest.mark.parametrize(("args", "lines"), CASES, ids=[" ".join(args) for args, _ in CASES])
def test_nothing_usable_is_refused_at_once(
    tmp_path: Path, args: list[str], lines: list[str]
) -> None:
    layout(tmp_path)
    done, seconds = report(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"fastcoord report: {line}" for line in lines]
    assert done.stdout == ""
    assert seconds < 5  # generous: a Spark start alone takes longer
    assert not (tmp_path / "report").exists()


def test_the_refusal_imports_no_spark(tmp_path: Path) -> None:
    layout(tmp_path)
    before = set(sys.modules)
    assert len(refusals([tmp_path / "data", tmp_path / "empty"], [tmp_path / "notes"])) == 3
    assert not [m for m in set(sys.modules) - before if m.split(".")[0] == "pyspark"]
    assert "pyspark" not in sys.modules or "pyspark" in before
    # In a fresh interpreter too, the command as a whole: refused, and pyspark never loaded.
    code = (
        "import sys; from fastcoord import cli; status = cli.main(['report', 'data']); "
        "print(status, [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'matplotlib')])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "2 []", done.stderr


def test_what_is_usable_goes_on(tmp_path: Path) -> None:
    layout(tmp_path)
    base = tmp_path
    # One usable run is enough: the rest are left out later, with their reasons.
    assert refusals([base / "missing", base / "data", base / "run"], []) == []
    # One usable event log is enough, however it is named.
    for events in ("data", "data/events", "cluster", "logs", "missing,data"):
        given = [base / p for p in events.split(",")]
        assert refusals([base / "run"], given) == [], events
    assert refusals([], []) == [f"no RUN_DIR: give {LOADTEST_OUT}"]


def test_a_data_directory_stands_for_its_event_log(tmp_path: Path) -> None:
    layout(tmp_path)
    data, cluster = tmp_path / "data", tmp_path / "cluster"
    problems: list[str] = []
    assert expand_events([data, data / "events"], problems) == [data / "events"]
    assert expand_events([cluster], problems) == [cluster / "node-0" / "events"]
    (tmp_path / "logs" / "events").mkdir()  # a log's own files win over a directory in it
    assert expand_events([tmp_path / "logs"], problems) == [tmp_path / "logs"]
    assert problems == [
        f"{cluster / 'node-1'}: no events directory: no server-side figures of node 1"
    ]
