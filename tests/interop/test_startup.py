"""Starting the real `fastcoord serve`: refusals in one line, and what a start says.

Every start that cannot succeed exits 2 with one line on stderr (the cause and what to
do), no traceback, and leaves no data directory behind. Read-only and full disks are real
file systems: a tmpfs mounted in a mount namespace of the server's own (`unshare -m`).
"""

from __future__ import annotations

import os
import resource
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fastcoord.core.partition import partition_for
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.messages import ApiVersionsRequest
from fastcoord.testing import fastcoord_server, serve_command
from tests.interop.test_durability import commit, committed
from tests.interop.test_raw_frames import member


def refused(argv: list[str]) -> str:
    """Run a start that must fail; return its one line."""
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("fastcoord serve: cannot start: "), lines[0]
    return lines[0]


def serve(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "fastcoord", "serve", "--data-dir", str(data_dir), *args]


def test_a_port_in_use_names_the_process_that_holds_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "a" / "b" / "data"
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        argv = serve(data_dir, "--port", str(port))
        line = refused(argv)
    assert f"port {port} on 127.0.0.1 is in use by pid {os.getpid()} (" in line
    assert "choose another --port" in line
    assert not (tmp_path / "a").exists()  # nothing was created


@pytest.mark.parametrize(
    ("host", "says"),
    [
        ("no-such-host.invalid", "host 'no-such-host.invalid' does not resolve"),
        ("192.0.2.1", "host '192.0.2.1' is not an address of this machine"),  # TEST-NET-1
    ],
)
def test_a_host_that_is_not_here_is_refused(tmp_path: Path, host: str, says: str) -> None:
    data_dir = tmp_path / "data"
    line = refused(serve(data_dir, "--host", host, "--port", "0"))
    assert says in line and "give --host" in line
    assert not data_dir.exists()


def test_a_data_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "data"
    file.write_text("not a directory")
    line = refused(serve(file, "--port", "0"))
    assert f"data.dir {file} is a file, not a directory" in line
    assert "--in-memory" in line
    beneath = tmp_path / "data" / "deeper"
    line = refused(serve(beneath, "--port", "0"))
    assert f"{file} is a file" in line


def _private_mount_works() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "true"], timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


private_mounts = pytest.mark.skipif(
    not _private_mount_works(),
    reason="needs `unshare -m` (a mount namespace) to mount a small tmpfs for the server alone",
)


def refused_on_tmpfs(tmp_path: Path, options: str, fill: bool) -> tuple[str, Path]:
    """Start the server on a tmpfs of its own (mounted with `options`, filled to the last
    byte if `fill`); the mount lives and dies with the server's namespace."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    data_dir = mount / "data"
    steps = [f"mount -t tmpfs -o {options} tmpfs {shlex.quote(str(mount))}"]
    if fill:
        steps.append(
            f"(dd if=/dev/zero of={shlex.quote(str(mount / 'fill'))} bs=64k 2>/dev/null; true)"
        )
    steps.append("exec " + shlex.join(serve(data_dir, "--port", "0")))
    line = refused(["unshare", "-m", "sh", "-c", " && ".join(steps)])
    return line, data_dir


@private_mounts
def test_a_read_only_file_system_is_refused(tmp_path: Path) -> None:
    line, data_dir = refused_on_tmpfs(tmp_path, "ro,size=4m", fill=False)
    assert f"data.dir {data_dir} is on a read-only file system" in line


@private_mounts
def test_a_full_disk_is_refused(tmp_path: Path) -> None:
    line, data_dir = refused_on_tmpfs(tmp_path, "size=2m", fill=True)
    assert f"the disk of data.dir {data_dir} is full (0 bytes free)" in line
    assert "free some space" in line


def test_a_second_server_on_the_same_data_dir_says_what_to_do(tmp_path: Path) -> None:
    with fastcoord_server(tmp_path) as first:
        line = refused(serve_command(tmp_path))
    assert f"in use by another fastcoord server (pid {first.process.pid})" in line
    assert "choose another --data-dir" in line


# -- max.connections and the open-file limit ---------------------------------------------


def test_max_connections_above_the_open_file_limit_is_refused_with_the_numbers(
    tmp_path: Path,
) -> None:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 1000))

    argv = serve(tmp_path / "data", "--max-connections", "5000")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, preexec_fn=limit)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "fastcoord serve: cannot start: max.connections 5000 is more than the open-file limit "
        "allows: 1000 files (hard limit 1000) less 114 kept for the logs leaves 886; lower "
        "max.connections (or leave it auto), or raise the hard limit (ulimit -Hn)"
    )
    assert not (tmp_path / "data").exists()


def group_in(partition: int) -> str:
    return next(g for i in range(10_000) if partition_for(g := f"g{i}", 50) == partition)


def test_auto_max_connections_follows_the_raised_open_file_limit(tmp_path: Path) -> None:
    """Soft limit 100, hard 300: the server raises the soft one to 300 and keeps 114 for the
    logs, so 186 connections are served while every partition's log is open, and the
    next one is refused."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (100, 300))

    with fastcoord_server(tmp_path, preexec_fn=limit) as server:
        assert (
            "max.connections 186 (auto: open-file limit 300, raised from 100, less 114 kept "
            "for the logs)" in server.log()
        )
        first = server.connect()
        for partition in range(50):  # every partition's active segment is now open
            assert commit(first, group_in(partition), 1) == 0
        clients = [first] + [server.connect() for _ in range(185)]
        for c in clients:
            c.send(ApiVersionsRequest(), 0)
        for c in clients:
            assert c.receive(ApiKey.API_VERSIONS, 0).error_code == 0
        one_too_many = server.connect()
        assert one_too_many.closed_by_server()
        assert "max.connections (186) reached" in server.log()
        # The logs still have their files: a commit to a new group is written.
        assert commit(first, "after-the-connections", 2) == 0
        for c in clients:
            c.close()


# -- what a start says it loaded, and --in-memory -----------------------------------------


def test_a_start_says_how_many_groups_members_and_offsets_it_loaded_and_from_where(
    tmp_path: Path,
) -> None:
    with fastcoord_server(tmp_path) as server:
        c, _ = member(server, "g")
        assert commit(server.connect(), "offsets-only", 7) == 0
        c.close()
    with fastcoord_server(tmp_path) as server:
        assert (
            f"loaded 2 groups with 1 members and 4 committed offsets from {tmp_path / 'data'} "
            "(--in-memory keeps nothing)" in server.log()
        )
        assert committed(server.connect(), "offsets-only") == dict.fromkeys(range(4), 7)


def test_in_memory_keeps_nothing_and_says_so(tmp_path: Path) -> None:
    with fastcoord_server(tmp_path, "--in-memory") as server:
        assert "in memory: nothing is kept (no data directory, no event log)" in server.log()
        assert "loaded 0 groups with 0 members and 0 committed offsets from memory" in server.log()
        c = server.connect()
        assert commit(c, "g", 7) == 0  # acknowledged
        assert committed(c, "g") == dict.fromkeys(range(4), 7)
        member(server, "members")
    assert not server.data_dir.exists()
    with fastcoord_server(tmp_path, "--in-memory") as server:
        assert committed(server.connect(), "g") == dict.fromkeys(range(4), -1)
    assert not server.data_dir.exists()
