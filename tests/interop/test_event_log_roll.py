"""The event log of the real `fastcoord serve`: many small flushes end as few files that
read back each event once, and a server killed while it merges leaves none twice.

Every commit goes to a group of its own, so its `offsets_committed` event is told apart
from the others by its group id."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

from fastcoord.server import event_log
from fastcoord.server.event_files import parse, replaced_by, scan
from fastcoord.testing import ServerProcess, fastcoord_server
from tests.interop.test_durability import commit


def small_rolls(roll_ms: int) -> tuple[str, ...]:
    return (
        "--fsync",
        "never",  # commits as fast as the loopback allows: many events per second
        "--event-log-flush-ms",
        "10",
        "--event-log-roll-bytes",
        "40000",
        "--event-log-roll-ms",
        str(roll_ms),
    )


def committer(server: ServerProcess, prefix: str, acked: list[str], stop: threading.Event) -> None:
    c = server.connect()
    i = 0
    try:
        while not stop.is_set():
            group = f"{prefix}-{i}"
            assert commit(c, group, 1) == 0
            acked.append(group)
            i += 1
    except (ConnectionError, OSError):
        pass  # killed mid-request
    finally:
        c.close()


def committed_groups(events_dir: Path) -> list[str]:
    table = event_log.read(events_dir).to_pylist()
    return [e["group_id"] for e in table if e["kind"] == "offsets_committed"]


def merging(events_dir: Path) -> bool:
    """A merge's temporary file is there."""
    return any(n.startswith(".") and ("-m" in n or "-rolled" in n) for n in os.listdir(events_dir))


def hidden(events_dir: Path) -> list[str]:
    """A merge's output not yet in place (or the leftover of a killed one)."""
    return [n for n in os.listdir(events_dir) if n.startswith(".")]


def test_many_flushes_end_as_few_files_each_event_read_once(tmp_path: Path) -> None:
    events_dir = tmp_path / "data" / "events"
    acked: list[str] = []
    stop = threading.Event()
    with fastcoord_server(tmp_path, *small_rolls(2000)) as server:
        thread = threading.Thread(target=committer, args=(server, "g", acked, stop))
        thread.start()
        deadline = time.monotonic() + 60
        while max((f.n for f in scan(events_dir)), default=0) < 150:  # flushes so far, at least
            assert thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.05)
        stop.set()
        thread.join(timeout=30)
        # Merges run in a thread of their own beside the flushes, and a loaded machine can
        # leave them behind for a while; once the flushes stop they catch up.
        while len(scan(events_dir)) >= max(f.n for f in scan(events_dir)) / 5:
            assert time.monotonic() < deadline, "the merges did not catch up"
            time.sleep(0.05)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=15) == 0
    groups = committed_groups(events_dir)
    assert groups == acked  # each once, in the order they were committed
    files = scan(events_dir)
    # Flushes are numbered 1, 2, ...: the highest number anywhere is how many there were.
    flushes = max(
        parsed[2]
        for f in files
        for parsed in (parse(f.name), *map(parse, replaced_by(events_dir / f.name)))
        if parsed is not None
    )
    assert flushes >= 150  # files flushed, every 10 ms...
    assert len(files) < flushes / 5  # ...and few left
    assert sum(f.closed for f in files) >= 3
    assert "event log: rolled" in server.log()
    assert not hidden(events_dir)


def test_sigkill_during_merges_leaves_no_event_twice(tmp_path: Path) -> None:
    events_dir = tmp_path / "data" / "events"
    everything: set[str] = set()
    interrupted = 0
    for round_ in range(4):
        acked: list[str] = []
        stop = threading.Event()
        with fastcoord_server(tmp_path, *small_rolls(500)) as server:
            after_start = committed_groups(events_dir)
            assert Counter(after_start) == Counter(everything)  # leftovers finished or cleaned
            # The start removed what the killed merge left; the merge pass it then begins
            # runs beside serving, and may be writing a hidden file of its own as we look.
            deadline = time.monotonic() + 10
            while hidden(events_dir) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not hidden(events_dir)
            thread = threading.Thread(target=committer, args=(server, f"r{round_}", acked, stop))
            thread.start()
            time.sleep(0.5)
            deadline = time.monotonic() + 5
            while not merging(events_dir) and time.monotonic() < deadline:
                time.sleep(0.001)
            server.kill()
            stop.set()
            thread.join(timeout=30)
        replaced = {
            name for f in scan(events_dir) if f.merged for name in replaced_by(events_dir / f.name)
        }
        names = os.listdir(events_dir)
        interrupted += any(n.startswith(".") for n in names) or bool(replaced & set(names))
        groups = committed_groups(events_dir)
        assert len(groups) == len(set(groups))  # read() skips what the killed merge left
        assert everything <= set(groups)
        new = set(groups) - everything
        # Events of acknowledged commits, and at most the one whose answer the kill cut off;
        # those of the last batch, not yet flushed, may be lost.
        assert new and len(new - set(acked)) <= 1
        everything = set(groups)
    with fastcoord_server(tmp_path, *small_rolls(500)) as server:
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=15) == 0
    assert Counter(committed_groups(events_dir)) == Counter(everything)
    assert interrupted  # a kill did land in a merge
