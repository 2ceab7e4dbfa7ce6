"""`fastcoord loadtest --faults`, the real command, against the real `fastcoord serve`: a
schedule applied through the admin port, each fault's effect in the summary beside the
rest of the run, and the server's own count of what it injected."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from fastcoord.client.admin import AdminClient
from fastcoord.testing import fastcoord_server
from tests.interop.test_loadtest import FAST, SERVER_ARGS, loadtest

LATENCY_MS = 60
# Each fault over well before the run is: the seconds after the latency's window are part
# of the "outside" that the window is set against, so a latency that outlived its window
# would show there.
SCHEDULE = f"""
[[fault]]
at_ms = 1000
api = "OffsetCommit"
error = "OFFSET_METADATA_TOO_LARGE"
count = 5
duration_ms = 1500

[[fault]]
at_ms = 3000
api = "Heartbeat"
latency_ms = {LATENCY_MS}
duration_ms = 3000
"""


def test_a_schedule_of_faults_and_their_effect(tmp_path: Path) -> None:
    (tmp_path / "server").mkdir()
    schedule = tmp_path / "faults.toml"
    schedule.write_text(SCHEDULE)
    with fastcoord_server(tmp_path / "server", *SERVER_ARGS, "--admin-port", "0") as server:
        result = loadtest(
            server.bootstrap,
            tmp_path / "out",
            "--members",
            "20",
            "--groups",
            "2",
            "--duration",
            "9",
            "--faults",
            str(schedule),
            "--admin",
            server.admin,
            *FAST,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        admin = AdminClient(server.admin)
        left = admin.faults()
        served = {
            s.labels["api"]: s.value
            for family in text_string_to_metric_families(admin.metrics_text())
            for s in family.samples
            if s.name == "fastcoord_requests_total"
        }
    assert left == []  # the run deleted what it added
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    commit, latency = summary["faults"]
    assert commit["apply_error"] is None and latency["apply_error"] is None
    assert commit["injected"] == 5
    # Each injected error was counted once by the load test: as many as the server gave.
    assert summary["apis"]["OffsetCommit"]["errors"] == {"OFFSET_METADATA_TOO_LARGE": 5}
    effect = latency["effect"]["Heartbeat"]
    assert latency["injected"] > 50
    assert effect["window"]["requests"] > 50 and effect["outside"]["requests"] > 50
    # The window's heartbeats were held the latency (a floor, however loaded the machine)...
    assert effect["window"]["p50_ms"] >= LATENCY_MS, effect
    # ...and those outside it were not: the window's median is above theirs by most of the
    # latency, load or not (it slows both alike).
    assert effect["window"]["p50_ms"] - effect["outside"]["p50_ms"] > LATENCY_MS / 2, effect
    assert "Heartbeat: latency 60 ms" in result.stdout
    # The server's count of what it answered is the load test's count of what it got.
    apis = summary["apis"]
    assert served["JoinGroup"] == apis["JoinGroup"]["count"]
    assert served["OffsetCommit"] == apis["OffsetCommit"]["count"]
    assert abs(served["Heartbeat"] - apis["Heartbeat"]["count"]) <= 0.01 * served["Heartbeat"]
