"""The installed entry points: `fastcoord`, `python -m fastcoord`, and the package version."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

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


def test_serve_says_not_yet_and_shows_its_configuration() -> None:
    result = run(fastcoord_script(), "serve")
    assert result.returncode == 2
    assert "not yet" in result.stderr
    assert "127.0.0.1:9092" in result.stdout
    assert "HEARTBEAT" in result.stdout and "versions 0-4" in result.stdout
