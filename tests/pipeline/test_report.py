"""The whole report: from a real load test against a real server, and from bad inputs."""

from __future__ import annotations

import base64
import io
import json
import re
import struct
import subprocess
import sys
import zlib
from typing import Any

import pyarrow.parquet as pq
import pytest
from kafka import KafkaAdminClient
from rich.console import Console

from fastcoord.pipeline.report import Report, make_report
from fastcoord.testing import child_env, fastcoord_server

from .generated import latency_run, other_tables

MASTER = "local[1]"


def quiet() -> Console:
    return Console(file=io.StringIO())


def assert_png(data: bytes) -> None:
    """A PNG whose chunks all check (length, type, CRC) from IHDR to IEND."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, kinds = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, kind
        kinds.append(kind)
        pos += 12 + length
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND"
    width, height = struct.unpack(">II", kinds and data[16:24])
    assert width > 100 and height > 100


def assert_charts(report: Report) -> None:
    page = report.html.read_text() if report.html else ""
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)" [^>]*data-file="([^"]+)"', page)
    assert {name for _, name in embedded} == {f"charts/{p.name}" for p in report.charts.values()}
    assert len(embedded) == 4
    for data, name in embedded:
        assert_png(base64.b64decode(data))
        assert (report.out / name).read_bytes() == base64.b64decode(data)


def table(report: Report, name: str) -> list[dict[str, Any]]:
    return pq.read_table(report.tables[name]).to_pylist()


@pytest.fixture(scope="module")
def reported(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One report over a real run (a short churn load test against a real server, and the
    server's event log), a generated run to compare it with, and bad inputs: an empty
    directory, a run of an older schema (summary.json's version, a part file without a
    column), a directory that does not exist. One report, because Spark's start and its
    jobs cost seconds each."""
    base = tmp_path_factory.mktemp("report")
    run = base / "run"
    (base / "server").mkdir()
    with fastcoord_server(
        base / "server", "--group-initial-rebalance-delay-ms", "200", "--event-log-flush-ms", "200"
    ) as server:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "fastcoord",
                "loadtest",
                "--bootstrap",
                server.bootstrap,
                "--members",
                "60",
                "--groups",
                "6",
                "--duration",
                "12",
                "--scenario",
                "churn",
                "--churn-rate",
                "1",
                "--commit-interval-ms",
                "1000",
                "--out",
                str(run),
            ],
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        try:
            groups = [g["group_id"] for g in admin.list_groups()]
            fetched = {
                (group, tp.topic, tp.partition): meta.offset
                for group in groups
                for tp, meta in admin.list_group_offsets({group: None})[group].items()
            }
        finally:
            admin.close()
    other = latency_run(base / "other", 20, seed=3)
    other_tables(other, 20, seed=3)
    empty = base / "empty"
    empty.mkdir()
    old = latency_run(base / "old", 15, seed=5)
    other_tables(old, 15, seed=5)
    (old.path / "summary.json").write_text('{"schema_version": 0}')
    part = sorted((old.path / "latency").glob("*.parquet"))[0]
    pq.write_table(pq.read_table(part).drop(["max_us"]), part)
    report = make_report(
        [run, other.path, empty, old.path, base / "missing"],
        base / "server" / "data" / "events",
        base / "report",
        MASTER,
        quiet(),
    )
    return {
        "run": run,
        "report": report,
        "fetched": fetched,
        "empty": empty,
        "old": old.path,
        "part": part,
        "missing": base / "missing",
    }


def rows_of(report: Report, name: str, run: str) -> list[dict[str, Any]]:
    return [r for r in table(report, name) if r.get("run", run) == run]


def test_the_report_of_a_real_run_agrees_with_its_summary(reported: dict[str, Any]) -> None:
    run, report = reported["run"], reported["report"]
    summary = json.loads((run / "summary.json").read_text())
    latency = {r["api"]: r for r in rows_of(report, "latency_run", "run")}
    assert set(latency) == set(summary["apis"])
    for api, figures in summary["apis"].items():
        row = latency[api]
        assert row["count"] == figures["count"], api
        assert row["errors"] == sum(figures["errors"].values()), api
        for name in ("p50_ms", "p99_ms", "p99_9_ms", "max_ms"):
            if figures[name] is None:
                assert row[name] is None
            else:  # summary.json rounds to the microsecond
                assert row[name] == pytest.approx(figures[name], abs=0.0011), (api, name)
    commits = sum(r["commits"] for r in rows_of(report, "commits_per_second", "run"))
    assert commits == summary["commits"]["count"]
    seen = sum(r["members"] for r in rows_of(report, "rebalances_client", "run"))
    assert seen == summary["rebalances"]["count"]
    server = table(report, "rebalances_server")
    assert server and all(r["duration_ms"] >= 0 for r in server)
    stored = sum(r["offsets"] for r in table(report, "group_commits"))
    assert stored == summary["commits"]["offsets"]


def test_the_final_offsets_are_those_a_client_fetches(reported: dict[str, Any]) -> None:
    final = {
        (r["group_id"], r["topic"], r["partition"]): r["offset"]
        for r in table(reported["report"], "committed_offsets")
    }
    assert final and final == reported["fetched"]


def test_the_page_embeds_and_references_valid_charts(reported: dict[str, Any]) -> None:
    assert_charts(reported["report"])


def test_runs_are_compared_side_by_side(reported: dict[str, Any]) -> None:
    report = reported["report"]
    rows = {r["figure"]: r for r in table(report, "comparison")}
    heartbeat = rows["Heartbeat p99 ms"]
    assert heartbeat["ratio other"] == pytest.approx(heartbeat["other"] / heartbeat["run"])
    assert "Runs compared" in report.html.read_text()


def test_bad_inputs_are_named_and_the_rest_is_reported(reported: dict[str, Any]) -> None:
    report, empty, old = reported["report"], reported["empty"], reported["old"]
    problems = "\n".join(report.problems)
    assert f"{empty / 'summary.json'}: missing" in problems
    assert f"{empty / 'latency'}: no part files" in problems
    assert f"{old / 'summary.json'}: schema_version 0, this report reads 1" in problems
    assert f"{reported['part']}: no column max_us (an older schema?): left out" in problems
    assert f"{reported['missing']}: not a directory" in problems
    assert len(report.problems) == 5 + 2 + 1  # empty: its summary and 4 tables; old: 2
    # What could be read still is: old's other latency parts, every other table of it.
    assert {r["run"] for r in table(report, "latency_run")} == {"run", "other", "old"}
    assert "Inputs left out" in report.html.read_text()
