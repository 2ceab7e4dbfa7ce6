"""Start-up checks and their undoing, in-process: the data directory a failed start created
goes again, and nothing else does."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from fastcoord.server import startup


def test_a_failed_start_removes_the_directories_it_created_and_only_those(
    tmp_path: Path,
) -> None:
    existing = tmp_path / "kept"
    existing.mkdir()
    data_dir = existing / "a" / "b"
    created = startup.create_data_dir(data_dir)
    assert created == [existing / "a", data_dir]
    (data_dir / ".lock").write_text("123\n")  # what the lock leaves
    (data_dir / "events").mkdir()  # what the event log makes at once
    startup.remove_if_empty(created)
    assert existing.is_dir() and not (existing / "a").exists()


def test_a_created_directory_that_holds_data_is_left_alone(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    created = startup.create_data_dir(data_dir)
    (data_dir / "__consumer_offsets-0").mkdir()
    (data_dir / "__consumer_offsets-0" / "00000000000000000000.log").write_bytes(b"x")
    startup.remove_if_empty(created)
    assert (data_dir / "__consumer_offsets-0" / "00000000000000000000.log").exists()


def test_an_existing_data_directory_is_not_created_so_never_removed(tmp_path: Path) -> None:
    assert startup.create_data_dir(tmp_path) == []
    startup.check_data_dir(tmp_path)  # a writable directory passes


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="no /proc here")
def test_the_port_holder_is_read_from_proc() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        assert startup.port_holder(port) is None  # bound, not listening
        listener.listen()
        holder = startup.port_holder(port)
    assert holder is not None and holder.startswith("pid ")
