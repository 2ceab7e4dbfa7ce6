"""The installed entry points: `fastcoord`, `python -m fastcoord`, and the package version."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import fastcoord


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def fastcoord_script() -> str:
    path = shutil.which("fastcoord", path=os.path.dirname(sys.executable))
    assert path, "the console script `fastcoord` is installed beside the interpreter"
    return path


def test_version_attribute() -> None:
    assert fastcoord.__version__.count(".") == 2


@pytest.mark.parametrize("how", ["script", "module"])
def test_version_and_help(how: str) -> None:
    cmd = [fastcoord_script()] if how == "script" else [sys.executable, "-m", "fastcoord"]
    version = run(*cmd, "--version")
    assert version.returncode == 0
    assert version.stdout.strip() == f"fastcoord {fastcoord.__version__}"
    help_ = run(*cmd, "--help")
    assert help_.returncode == 0
    assert "serve" in help_.stdout


def test_serve_listens_says_where_and_stops_on_sigterm(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [fastcoord_script(), "serve", "--port", "0", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert re.fullmatch(r"listening on 127\.0\.0\.1:\d+\n", line), line
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def test_a_sigterm_repeated_until_it_exits_still_stops_it_cleanly(tmp_path: Path) -> None:
    """A supervisor that repeats SIGTERM while the server stops (as benchmarks that stop
    several servers at once do) must not kill it on its way out: exit 0 whenever they land."""
    from fastcoord.testing import start_fastcoord

    server = start_fastcoord(tmp_path)
    try:
        while server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)  # Popen: never a reused PID
            time.sleep(0.001)
        assert server.process.returncode == 0, server.log()
    finally:
        server.stop()


def test_report_takes_event_logs_repeated_and_separated_by_commas(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from fastcoord import cli
    from fastcoord.pipeline import report

    monkeypatch.chdir(tmp_path)  # a run and event logs there, or the report refuses to start
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text("{}")
    for log in ("data/events", *(f"data/node-{n}/events" for n in range(3))):
        (tmp_path / log).mkdir(parents=True)
    calls: list[tuple[Any, ...]] = []

    options: list[Any] = []

    def make_report(*args: Any, **kw: Any) -> Any:
        calls.append(args)
        options.append(kw.get("options"))
        return SimpleNamespace(tables={"latency_phases": Path("x")})

    monkeypatch.setattr(report, "make_report", make_report)
    argv = ["report", "run", "--events", "data/node-0/events,data/node-1/events"]
    assert cli.main([*argv, "--events", "data/node-2/events", "--events", "more,"]) == 0
    assert cli.main(["report", "run", "--events", "data/events"]) == 0
    assert cli.main(["report", "run"]) == 0
    logs = [call[1] for call in calls]
    assert logs == [
        [Path(f"data/node-{n}/events") for n in range(3)] + [Path("more")],
        [Path("data/events")],
        None,
    ]
    assert [(o.window, o.formation, o.top) for o in options] == [(None, False, 20)] * 3
    assert cli.main(["report", "run", "--window", "30:290.5", "--formation", "--top", "5"]) == 0
    assert (options[-1].window, options[-1].formation, options[-1].top) == ((30.0, 290.5), True, 5)
    assert cli.main(["report", "run", "--window", "30:"]) == 0
    assert options[-1].window == (30.0, None)


@pytest.mark.parametrize("window", ["30", "a:b", "40:30", "-1:5", "5:5"])
def test_report_refuses_a_window_that_is_not_from_to(
    window: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from fastcoord import cli

    assert cli.main(["report", "run", f"--window={window}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fastcoord report: --window {window!r}: expected FROM:TO") and (
        err.count("\n") == 1
    )
