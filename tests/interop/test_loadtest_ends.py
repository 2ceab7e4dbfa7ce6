"""`fastcoord loadtest`'s ends and its view of the server, the real command against the real
`fastcoord serve`: --admin alone samples the server's CPU and memory into the server table;
SIGTERM ends a run as Ctrl-C does (the members leave, the summary is written, exit 143); an
--out that holds a run is refused before anything starts; and workers whose parent was
killed end by themselves."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow
import pytest

from fastcoord.client.admin import AdminClient
from fastcoord.loadtest.sampler import Sample, ServerSampler
from fastcoord.testing import ServerProcess, child_env, fastcoord_server
from tests.interop.test_loadtest import (
    FAST,
    SERVER_ARGS,
    loadtest,
    loadtest_command,
    server_events,
    summary,
    table,
    wait_for_apis,
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    (tmp_path / "server").mkdir()
    with fastcoord_server(tmp_path / "server", *SERVER_ARGS, "--admin-port", "0") as running:
        yield running


def test_the_sampler_reads_a_real_servers_cpu_and_memory(server: ServerProcess) -> None:
    sampler = ServerSampler([server.admin], every_s=0.2)
    sampler.start(time.time())
    samples: list[Sample] = []
    failed = 0
    with server.connect() as connection:  # work for the server, so that its CPU moves
        # Until a few samples show it move, however slowly a busy machine gets there.
        deadline = time.monotonic() + 30
        while len(samples) < 4 or samples[-1][3] == samples[0][3]:
            assert time.monotonic() < deadline, samples
            AdminClient(server.admin).groups()
            connection.api_versions()
            taken, failures = sampler.take()
            samples += taken
            failed += failures[server.admin]
    sampler.stop()
    taken, failures = sampler.take()
    samples += taken
    assert failed + failures[server.admin] == 0
    cpu = [s[3] for s in samples]
    assert cpu == sorted(cpu)
    assert all(s[4] > 10_000_000 for s in samples)  # a Python process's resident memory


def server_rows(out: Path) -> list[dict[str, Any]]:
    """The run's server table so far: empty while no part is there or one is being written."""
    try:
        return table(out, "server")
    except (OSError, pyarrow.ArrowInvalid):
        return []


def start(
    server: ServerProcess, out: Path, args: tuple[str, ...], output: int
) -> subprocess.Popen[str]:
    """A load test in a process group of its own (its workers with it), left running."""
    return subprocess.Popen(
        loadtest_command(server.bootstrap, out, *args, *FAST),
        env=child_env(),
        stdout=output,
        stderr=output,
        text=True,
        start_new_session=True,
    )


def test_sigterm_ends_a_run_as_ctrl_c_does(server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = start(
        server,
        out,
        ("--members", "10", "--groups", "2", "--duration", "60", "--admin", server.admin),
        subprocess.PIPE,
    )
    try:
        wait_for_apis(out, {"Heartbeat"})
        # Two samples of the server at least, for its CPU to be counted up below.
        deadline = time.monotonic() + 30
        while len(server_rows(out)) < 2:
            assert time.monotonic() < deadline, "the server was not sampled twice"
            time.sleep(0.1)
        # The whole process group, as a service manager stops one: the workers ignore it,
        # the parent stops them.
        os.killpg(run.pid, signal.SIGTERM)
        stdout, stderr = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 143, stdout + stderr
    assert "terminated by SIGTERM" in stderr and "Traceback" not in stderr
    s = summary(out)
    assert s["complete"] is False and s["outcome"] == "terminated"
    assert "SIGTERM" in s["message"]
    assert s["phases"]["leaving"] is not None  # from the stop, long before the planned end
    assert s["phases"]["leaving"]["last_s"] < 30
    # Every member left when told to.
    events = server_events(server)
    joined = sum(e["kind"] == "member_joined" for e in events)
    assert joined == sum(e["kind"] == "member_left" for e in events) == 10
    # --admin alone: the server sampled every second, its CPU counted up.
    rows = sorted(table(out, "server"), key=lambda r: r["time"])
    assert len(rows) >= 2 and {r["node"] for r in rows} == {server.admin}
    cpu = [r["cpu_s"] for r in rows]
    assert cpu == sorted(cpu) and cpu[-1] > cpu[0]
    assert all(r["rss_bytes"] > 0 for r in rows)
    assert [r["elapsed_s"] for r in rows] == sorted(r["elapsed_s"] for r in rows)
    node = s["server"][server.admin]
    assert node["samples"] == len(rows) and node["failed"] == 0
    assert node["cpu_s"] == pytest.approx(cpu[-1] - cpu[0], abs=1e-3)
    assert node["peak_rss_bytes"] >= node["rss_bytes_at_end"] > 0
    assert f"server {server.admin}: CPU" in stdout


def test_an_out_that_holds_a_run_is_refused_before_the_start(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text("{}\n")
    result = loadtest("127.0.0.1:9", out, "--duration", "2")
    assert result.returncode == 2
    assert result.stderr == (
        f"fastcoord loadtest: --out {out} holds another run's results (summary.json): give "
        "an empty or new directory\n"
    )
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a parent to reap it."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_workers_end_when_their_parent_is_killed(server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run = start(
        server, out, ("--members", "10", "--processes", "2", "--duration", "60"), subprocess.DEVNULL
    )
    try:
        wait_for_apis(out, {"Heartbeat"})
        workers = children(run.pid)
        assert len(workers) >= 2
        os.kill(run.pid, signal.SIGKILL)  # the parent alone
        run.wait()
        deadline = time.monotonic() + 20
        while any(alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [w for w in workers if alive(w)] == []
    finally:
        os.killpg(run.pid, signal.SIGKILL)
    # Their members left as they ended, rather than waiting out their sessions.
    events = server_events(server)
    assert sum(e["kind"] == "member_left" for e in events) == 10
