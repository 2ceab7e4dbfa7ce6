"""The whole report: from a real load test against a real server (with a fault window, the
server's CPU and memory sampled, and another run's events in the same event log), each
figure of the page checked against the same figure computed directly from the run's own
tables; the page opened in a real browser; bad inputs."""

from __future__ import annotations

import io
import itertools
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from kafka import KafkaAdminClient
from rich.console import Console

from fastcoord.loadtest.histogram import Histogram
from fastcoord.loadtest.summary import SIGNALS
from fastcoord.pipeline.report import Options, Report, make_report
from fastcoord.protocol.errors import error_name
from fastcoord.testing import fastcoord_server
from fastcoord.testing_browser import dump_dom, parse
from tests.interop.test_loadtest import loadtest as run_loadtest

from .generated import latency_run, other_tables

MASTER = "local[1]"
MEMBERS = 60
FAULTS = """
[[fault]]
at_ms = 7000
api = "Heartbeat"
latency_ms = 30
duration_ms = 3000
"""


def quiet() -> Console:
    return Console(file=io.StringIO())


def table(report: Report, name: str) -> list[dict[str, Any]]:
    return pq.read_table(report.tables[name]).to_pylist()


def loadtest(bootstrap: str, out: Path, *args: str) -> None:
    done = run_loadtest(
        bootstrap, out, "--heartbeat-interval-ms", "300", "--session-timeout-ms", "3000", *args
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def reported(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One report over a real run (a churn load test with a fault window, the server's CPU
    and memory read from its admin port), after another run of other groups in the same
    server, a generated run to compare it with, and bad inputs: an empty directory, a run
    of an older schema (summary.json's version, a part file without a column), a directory
    that does not exist. One report, because Spark's start and its jobs cost seconds each."""
    base = tmp_path_factory.mktemp("report")
    run = base / "run"
    (base / "server").mkdir()
    (base / "faults.toml").write_text(FAULTS)
    with fastcoord_server(
        base / "server",
        "--group-initial-rebalance-delay-ms",
        "200",
        "--event-log-flush-ms",
        "200",
        "--group-min-session-timeout-ms",
        "500",
        "--admin-port",
        "0",
    ) as server:
        # Another run first, of other groups: its events are in the log, not in the report.
        loadtest(
            server.bootstrap,
            base / "before",
            "--members",
            "10",
            "--groups",
            "2",
            "--duration",
            "4",
            "--group-prefix",
            "before",
        )
        loadtest(
            server.bootstrap,
            run,
            "--members",
            str(MEMBERS),
            "--groups",
            "6",
            "--duration",
            "16",
            "--scenario",
            "churn",
            "--churn-rate",
            "1",
            "--commit-interval-ms",
            "1000",
            "--faults",
            str(base / "faults.toml"),
            "--admin",
            server.admin,
        )
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
        try:
            groups = [g["group_id"] for g in admin.list_groups()]
            fetched = {
                (group, tp.topic, tp.partition): meta.offset
                for group in groups
                if group.startswith("loadtest-")
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
    (old.path / "summary.json").write_text('{"schema_version": 1}')
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
        "base": base,
        "run": run,
        "report": report,
        "fetched": fetched,
        "empty": empty,
        "old": old.path,
        "part": part,
        "missing": base / "missing",
        "dom": dump_dom(report.html) if report.html else "",
    }


def run_table(run: Path, name: str) -> list[dict[str, Any]]:
    return pq.read_table(run / name).to_pylist() if (run / name).is_dir() else []


def merged(rows: list[dict[str, Any]], api: str, first: int, last: int) -> Histogram:
    """The latency rows of `api` in seconds first..last, merged as the load test does."""
    h = Histogram()
    for r in rows:
        if r["api"] == api and first <= r["elapsed_s"] <= last:
            h.merge(
                Histogram.from_sparse(
                    np.array(r["buckets"], np.int16),
                    np.array(r["counts"], np.int64),
                    r["sum_us"] * 1000,
                    r["max_us"] * 1000,
                )
            )
    return h


def page_figures(dom: str) -> dict[str, str]:
    return dict(re.findall(r'data-figure="([^"]+)"[^>]*data-value="([^"]*)"', dom))


def rows_of(report: Report, name: str, run: str) -> list[dict[str, Any]]:
    return [r for r in table(report, name) if r.get("run", run) == run]


def test_phase_boundaries_come_from_the_members_states(reported: dict[str, Any]) -> None:
    run, report = reported["run"], reported["report"]
    states = sorted(run_table(run, "states"), key=lambda r: r["elapsed_s"])
    joined = next(s["elapsed_s"] for s in states if s["stable"] >= MEMBERS)
    summary = json.loads((run / "summary.json").read_text())
    phases = {r["phase"]: r for r in rows_of(report, "phases", "run")}
    assert summary["phases"]["joining"]["last_s"] == joined == phases["joining"]["last_s"]
    assert summary["phases"]["steady"]["first_s"] == joined + 1 == phases["steady"]["first_s"]
    assert phases["steady"]["last_s"] == summary["phases"]["steady"]["last_s"]
    # The steady phase ends where the members began to leave: at the planned duration.
    assert phases["leaving"]["first_s"] == 17 == phases["steady"]["last_s"] + 1
    assert phases["run"]["last_s"] == max(s["elapsed_s"] for s in states)


def test_the_headline_figures_are_the_steady_windows(reported: dict[str, Any]) -> None:
    run, report = reported["run"], reported["report"]
    latency = run_table(run, "latency")
    spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in rows_of(report, "phases", "run"):
        spans[r["phase"]].append((r["first_s"], r["last_s"]))
    phases = {r["phase"]: r for r in rows_of(report, "phases", "run")}
    steady = phases["steady"]
    # The steady seconds outside the fault's window, in two spans: before it and after.
    fault = json.loads((run / "summary.json").read_text())["faults"][0]["window"]
    assert spans["calm"] == [
        (steady["first_s"], fault["start_ms"] // 1000),
        (-(-fault["end_ms"] // 1000) + 1, steady["last_s"]),
    ]
    got = {(r["phase"], r["api"]): r for r in rows_of(report, "latency_phases", "run")}
    for (phase, api), row in got.items():
        want = Histogram()
        for first, last in spans[phase]:
            want.merge(merged(latency, api, first, last))
        assert row["count"] == want.count
        assert row["seconds"] == sum(last - first + 1 for first, last in spans[phase])
        for name, q in (("p50_ms", 50), ("p99_ms", 99), ("p99_9_ms", 99.9)):
            assert row[name] == pytest.approx(want.percentile_ms(q), abs=1e-9), (phase, api)
    figures = page_figures(reported["dom"])
    heartbeats = merged(latency, "Heartbeat", steady["first_s"], steady["last_s"])
    for name, q in (("p50_ms", 50), ("p99_ms", 99), ("p99_9_ms", 99.9)):
        assert float(figures[f"run.heartbeat_{name}"]) == pytest.approx(
            heartbeats.percentile_ms(q), abs=1e-6
        )
    calm = Histogram()
    for first, last in spans["calm"]:
        calm.merge(merged(latency, "Heartbeat", first, last))
    assert float(figures["run.calm_heartbeat_p99_ms"]) == pytest.approx(
        calm.percentile_ms(99), abs=1e-6
    )
    # The whole run's p99 of Heartbeat is no headline: the join is in it.
    whole = merged(latency, "Heartbeat", 1, phases["run"]["last_s"])
    assert whole.count > heartbeats.count
    states = run_table(run, "states")
    assert int(figures["run.members_reached"]) == max(s["stable"] for s in states) == MEMBERS


def test_signals_are_counted_apart_from_errors(reported: dict[str, Any]) -> None:
    run, report = reported["run"], reported["report"]
    latency = run_table(run, "latency")
    rows = run_table(run, "errors")
    assert rows and all(r["signal"] == (r["error_code"] in SIGNALS) for r in rows)
    assert {error_name(c) for c in SIGNALS} >= {r["error"] for r in rows if r["signal"]}
    requests = sum(r["count"] for r in latency)
    errors = sum(r["errors"] for r in latency)
    signals = sum(r["signals"] for r in latency)
    assert signals >= MEMBERS
    summary = json.loads((run / "summary.json").read_text())
    assert summary["requests"]["errors"] == errors
    assert summary["requests"]["signals"] == signals
    # Every member's first JoinGroup is answered MEMBER_ID_REQUIRED: a signal, not an error.
    assert "MEMBER_ID_REQUIRED" not in summary["apis"]["JoinGroup"]["errors"]
    assert summary["apis"]["JoinGroup"]["signals"]["MEMBER_ID_REQUIRED"] >= MEMBERS
    figures = page_figures(reported["dom"])
    assert float(figures["run.error_rate"]) == pytest.approx(errors / requests)
    by_code = rows_of(report, "errors_by_code", "run")
    assert {(r["error"], r["signal"], r["count"]) for r in by_code} == {
        (e, s, sum(1 for r in rows if (r["error"], r["signal"]) == (e, s)))
        for e, s in {(r["error"], r["signal"]) for r in rows}
    }
    by_api = rows_of(report, "errors_by_api", "run")
    assert sum(r["errors"] for r in by_api) == errors
    assert sum(r["signals"] for r in by_api) == signals


def test_the_servers_cpu_and_memory_in_the_steady_window(reported: dict[str, Any]) -> None:
    run = reported["run"]
    samples = sorted(run_table(run, "server"), key=lambda r: r["time"])
    assert len(samples) >= 10 and all(s["rss_bytes"] > 0 for s in samples)
    phases = {r["phase"]: r for r in rows_of(reported["report"], "phases", "run")}
    steady = phases["steady"]
    used = spans = 0.0
    peak = 0
    for prev, cur in itertools.pairwise(samples):
        if steady["first_s"] <= cur["elapsed_s"] <= steady["last_s"]:
            used += max(0.0, cur["cpu_s"] - prev["cpu_s"])
            spans += (cur["time"] - prev["time"]).total_seconds()
            peak = max(peak, cur["rss_bytes"])
    figures = page_figures(reported["dom"])
    assert float(figures["run.server_cores"]) == pytest.approx(used / spans)
    assert int(float(figures["run.server_peak_rss_bytes"])) == peak


def test_rebalances_leave_the_formation_apart(reported: dict[str, Any]) -> None:
    run, report = reported["run"], reported["report"]
    generations: dict[str, set[int]] = defaultdict(set)
    for r in run_table(run, "rebalances"):
        generations[r["group"]].add(r["generation"])
    later = sum(len(g) - 1 for g in generations.values())
    assert later > 0  # churn: members crashed and replaced
    assert int(page_figures(reported["dom"])["run.rebalances"]) == later
    slowest = rows_of(report, "slowest_rebalances", "run")
    assert slowest and not any(r["formation"] for r in slowest)
    curve = [r for r in rows_of(report, "rebalance_distribution", "run") if not r["formation"]]
    assert curve and max(r["q"] for r in curve) == 100


def test_server_side_figures_are_this_runs_only(reported: dict[str, Any]) -> None:
    report = reported["report"]
    scope = {r["run"]: r["events"] for r in table(report, "event_scope")}
    assert scope["run"] > 0 and scope[None] > 0  # the run before: left out
    for name in ("group_commits", "rebalances_server"):
        groups = {r["group_id"] for r in rows_of(report, name, "run")}
        assert groups and all(g.startswith("loadtest-") for g in groups), name
    summary = json.loads((reported["run"] / "summary.json").read_text())
    stored = sum(r["offsets"] for r in rows_of(report, "group_commits", "run"))
    assert stored == summary["commits"]["offsets"]
    final = {
        (r["group_id"], r["topic"], r["partition"]): r["offset"]
        for r in rows_of(report, "committed_offsets", "run")
    }
    assert final and final == reported["fetched"]
    assert "events of other groups or times left out" in reported["dom"]


def test_the_page_opens_offline_and_draws_every_chart(reported: dict[str, Any]) -> None:
    page = reported["report"].html.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    root = parse(reported["dom"])
    assert root.find("html").attrs.get("data-script-errors") in (None, "", "[]")
    charts = root.find_all(data_drawn=True)
    assert len(charts) >= 8
    assert [e.attrs.get("data-state") for e in charts] == ["drawn"] * len(charts)
    assert all(int(e.attrs["data-drawn"]) > 0 for e in charts)
    # The fault's window is shaded on the time charts, where the run recorded it.
    summary = json.loads((reported["run"] / "summary.json").read_text())
    window = summary["faults"][0]["window"]
    specs = json.loads(
        re.search(r'id="fastcoord-charts"[^>]*>(.*?)</script>', page, re.S)[1].replace(  # type: ignore[index]
            "<\\/", "</"
        )
    )
    bands = [b for spec in specs for b in spec["bands"] if b["kind"] == "fault"]
    assert bands and bands[0]["from"] == window["start_ms"] / 1000


def test_a_window_chooses_the_headline(spark: Any, reported: dict[str, Any]) -> None:
    run, base = reported["run"], reported["base"]
    report = make_report([run], None, base / "windowed", MASTER, quiet(), Options(window=(5, 12)))
    latency = run_table(run, "latency")
    phases = {r["phase"]: r for r in table(report, "phases")}
    assert (phases["steady"]["first_s"], phases["steady"]["last_s"]) == (6, 12)
    assert phases["steady"]["source"] == "window"
    steady = {r["api"]: r for r in table(report, "latency_phases") if r["phase"] == "steady"}
    want = merged(latency, "Heartbeat", 6, 12)
    assert steady["Heartbeat"]["count"] == want.count
    assert steady["Heartbeat"]["p99_ms"] == pytest.approx(want.percentile_ms(99))


def test_runs_are_compared_side_by_side(reported: dict[str, Any]) -> None:
    report = reported["report"]
    rows = {r["figure"]: r for r in table(report, "comparison")}
    heartbeat = rows["Heartbeat p99 ms"]
    assert heartbeat["ratio other"] == pytest.approx(heartbeat["other"] / heartbeat["run"])
    steady = next(
        r
        for r in table(report, "latency_phases")
        if (r["run"], r["phase"], r["api"]) == ("run", "steady", "Heartbeat")
    )
    assert heartbeat["run"] == steady["p99_ms"]
    assert "Runs compared" in report.html.read_text()


def test_bad_inputs_are_named_and_the_rest_is_reported(reported: dict[str, Any]) -> None:
    report, empty, old = reported["report"], reported["empty"], reported["old"]
    problems = "\n".join(report.problems)
    assert f"{empty / 'summary.json'}: missing" in problems
    assert f"{empty / 'latency'}: no part files" in problems
    assert f"{old / 'summary.json'}: schema_version 1, this report reads 2" in problems
    assert f"{reported['part']}: no column max_us (an older schema?): left out" in problems
    assert f"{reported['missing']}: not a directory" in problems
    # What could be read still is: old's other latency parts, every other table of it.
    assert {r["run"] for r in table(report, "latency_phases")} == {"run", "other", "old"}
    assert "Inputs left out" in report.html.read_text()
