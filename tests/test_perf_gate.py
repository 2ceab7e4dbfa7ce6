"""The performance gate (benches/perf_gate.py) on real builds.

A copy of this tree with work added to the heartbeat path, in the compiled code and
separately in Python, its extensions rebuilt, is measured against this tree: the gate must
fail it and name the benchmark; a line in the commit message accepts it; this tree against
itself passes, the timed benchmarks included. The verdict rules and the accept lines are
also checked on their own, without builds.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benches import gate_ops, perf_gate
from benches.perf_gate import Row

ROOT = Path(__file__).resolve().parents[1]
_IGNORE = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".asv",
    ".perf-gate",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
    ".benchmarks",
    "fastcoord-data",
)


def copy_ignore(directory: str, names: list[str]) -> set[str]:
    """What a copy of this tree leaves out: caches, environments and, of build/, all but the
    generated C (so that a rebuild of the copy compiles only what changed)."""
    ignored = _IGNORE(directory, names)
    if Path(directory).resolve() == ROOT / "build":
        ignored |= {name for name in names if name != "cython"}
    return ignored


GIT = ["git", "-c", "user.name=perf-gate test", "-c", "user.email=gate@example.invalid"]

# Work a careless change might add: a checksum over every Heartbeat frame it decodes.
COMPILED_ANCHOR = "    cur.end = PyBytes_GET_SIZE(frame)\n"
COMPILED_EXTRA = """    cdef Py_ssize_t extra_i
    cdef uint32_t extra_sum = 0
    for extra_i in range(cur.end):
        extra_sum = extra_sum * 31 + cur.p[extra_i]
    if extra_sum == 1:
        raise ValueError("never")
"""
# ... and in Python: a count of heartbeats per group, kept in a dict.
PYTHON_ANCHOR = "    if group_instance_id is None and gm.serves_all():\n"
PYTHON_EXTRA = """    counts = gm.__dict__.setdefault("heartbeats_seen", {})
    counts[group_id] = counts.get(group_id, 0) + 1
"""


# -- without builds ---------------------------------------------------------------------------


def test_a_row_fails_only_beyond_its_threshold() -> None:
    assert Row("x", "instructions", 1000, 1019, 0.02).verdict == "ok"
    assert Row("x", "instructions", 1000, 1021, 0.02).failed
    assert Row("x", "instructions", 1000, 900, 0.02).verdict == "faster"
    # A rate: fewer per second is slower.
    rate = Row("x", "heartbeats/s", 1_000_000, 700_000, 0.25, higher_is_better=True)
    assert rate.ratio == pytest.approx(1 / 0.7)
    assert rate.failed
    assert not Row("x", "heartbeats/s", 1_000_000, 850_000, 0.25, higher_is_better=True).failed


def test_an_accepted_regression_passes_up_to_what_was_accepted() -> None:
    row = Row("x", "instructions", 1000, 1100, 0.02, accepted=(8.0, "a checksum"))
    assert not row.failed
    assert row.verdict == "accepted +8%: a checksum"
    row.head = 1110  # 11%: more than accepted plus the threshold
    assert row.failed


def test_a_benchmark_the_base_cannot_run_is_new_and_passes() -> None:
    row = Row("x", "instructions", None, 1000, 0.02, note="new (base cannot run it)")
    assert not row.failed
    assert row.verdict.startswith("new")


def test_a_head_that_cannot_run_what_its_base_ran_fails() -> None:
    assert Row("x", "instructions", 1000, None, 0.02, note="head failed").failed


def test_accept_lines_are_read_from_the_commits_after_the_base(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run([*GIT, "init", "-q", str(repo)], check=True)
    (repo / "a").write_text("1")
    subprocess.run([*GIT, "-C", str(repo), "add", "a"], check=True)
    message = "an older one\n\nperf-gate: accept timing_wheel +9%, before the base"
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", message], check=True)
    (repo / "a").write_text("2")
    message = (
        "heartbeats: check every frame\n\n"
        "perf-gate: accept heartbeat_frame +4%, a checksum on every frame\n"
        "perf-gate: accept core_heartbeat 2.5%, counted per group"
    )
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qam", message], check=True)
    assert perf_gate.accepted(repo, "HEAD^") == {
        "heartbeat_frame": (4.0, "a checksum on every frame"),
        "core_heartbeat": (2.5, "counted per group"),
    }


@pytest.mark.parametrize("op", sorted(gate_ops.OPS))
def test_every_counted_operation_runs(op: str) -> None:
    """Natively, a few times (with the twins too, under FASTCOORD_NO_EXTENSIONS=1): an
    operation that raised would leave the gate without a figure."""
    assert op in perf_gate.COUNTS
    gate_ops.OPS[op]()(min(perf_gate.COUNTS[op][0], 200))


# -- on real builds ---------------------------------------------------------------------------


def committed_copy(tmp_path: Path) -> Path:
    """This tree, built, committed as the first commit of a new repository."""
    copy = tmp_path / "head"
    shutil.copytree(ROOT, copy, ignore=copy_ignore)
    subprocess.run([*GIT, "init", "-q", str(copy)], check=True)
    subprocess.run([*GIT, "-C", str(copy), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(copy), "commit", "-qm", "base"], check=True)
    return copy


def changed_copy(tmp_path: Path, path: str, anchor: str, extra: str, before: bool) -> Path:
    """committed_copy, then `extra` added before or after `anchor` in `path` and
    committed; the extensions rebuilt (only what changed compiles)."""
    copy = committed_copy(tmp_path)
    source = copy / path
    text = source.read_text()
    assert text.count(anchor) == 1, f"{path} changed: the test's anchor is not there once"
    source.write_text(text.replace(anchor, extra + anchor if before else anchor + extra))
    subprocess.run([*GIT, "-C", str(copy), "commit", "-qam", "more work a heartbeat"], check=True)
    perf_gate.build(copy)
    return copy


def gate(head: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benches.perf_gate",
            "--base",
            "HEAD^",
            "--base-tree",
            str(ROOT),
            "--head-tree",
            str(head),
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    print(done.stdout, done.stderr)  # shown when a test fails, or with -s
    return done


def assert_caught(head: Path, slowed: str, untouched: str) -> None:
    """The gate of `head` against this tree fails `slowed`, and only it."""
    done = gate(head, "--only", f"{slowed},{untouched}", "--no-time")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SLOWER" in verdict(done.stdout, slowed)
    assert verdict(done.stdout, untouched).endswith(" ok")
    assert f"slower than the threshold: {slowed}\n" in done.stdout


def verdict(output: str, name: str) -> str:
    for line in output.splitlines():
        if line.startswith(name + " "):
            return line
    raise AssertionError(f"no row {name} in:\n{output}")


needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None, reason="the gate counts instructions with valgrind"
)


@pytest.mark.slow
@needs_valgrind
def test_work_added_to_the_compiled_heartbeat_path_is_caught(tmp_path: Path) -> None:
    head = changed_copy(
        tmp_path, "_ext/hot_frames.pyx", COMPILED_ANCHOR, COMPILED_EXTRA, before=False
    )
    assert_caught(head, "heartbeat_frame", "partition_for")

    # Accepted on purpose, in the commit message: the same build passes, and says why.
    message = (
        "heartbeats: a checksum of every frame\n\n"
        "perf-gate: accept heartbeat_frame +40%, a checksum of every frame"
    )
    subprocess.run([*GIT, "-C", str(head), "commit", "-q", "--amend", "-m", message], check=True)
    done = gate(head, "--only", "heartbeat_frame", "--no-time")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "accepted +40%: a checksum of every frame" in verdict(done.stdout, "heartbeat_frame")


@pytest.mark.slow
@needs_valgrind
def test_work_added_to_the_python_heartbeat_path_is_caught(tmp_path: Path) -> None:
    head = changed_copy(
        tmp_path, "fastcoord/core/classic/session.py", PYTHON_ANCHOR, PYTHON_EXTRA, before=True
    )
    assert_caught(head, "core_heartbeat", "timing_wheel")


@pytest.mark.slow
@needs_valgrind
def test_an_unchanged_tree_passes(tmp_path: Path) -> None:
    """Every benchmark, the timed ones included: this tree against a copy of itself."""
    copy = committed_copy(tmp_path)
    subprocess.run([*GIT, "-C", str(copy), "commit", "-q", "--allow-empty", "-m", "no change"])
    done = gate(copy)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in (*perf_gate.COUNTS, *perf_gate.TIME_THRESHOLDS):
        assert " ok" in verdict(done.stdout, name) or "faster" in verdict(done.stdout, name)
