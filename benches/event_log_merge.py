"""What merging does to the event log: files, bytes, the merge's time and peak memory, and
read() before and after, for N events in F flushes spanning one hour (the default
event.log.roll.ms), then one flush more, which closes the roll.

    .venv/bin/python -m benches.event_log_merge [--events 1000000] [--flushes 200]

The merge runs in a child process of its own, so that its peak resident memory is the
merge's and not that of building a million events here (VmHWM, from /proc: ru_maxrss
would carry this process's peak across the child's exec); a child that runs a pass over an
empty directory gives the baseline (the interpreter, pyarrow, fastcoord). Arrow's own
allocations are counted by its memory pool.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import trio

from fastcoord.core.result import Event
from fastcoord.server import event_log
from fastcoord.server.event_log import EventLog

T0 = 1_700_000_000_000
HOUR_MS = 3_600_000
KINDS = ["offsets_committed"] * 6 + ["member_joined", "rebalance_started", "sync_completed"]


def batch(rng: random.Random, rows: int, start_ms: int, span_ms: int) -> list[Event]:
    out = []
    for i in range(rows):
        group = rng.randrange(1000)
        out.append(
            Event(
                at_ms=start_ms + i * span_ms // rows,
                kind=rng.choice(KINDS),
                group_id=f"group-{group}",
                member_id=f"consumer-{group}-{rng.randrange(50)}-{rng.getrandbits(128):032x}",
                generation=rng.randrange(100),
                members=rng.randrange(1, 50),
                duration_ms=rng.randrange(10_000),
                reason="",
            )
        )
    return out


def write(directory: Path, events: int, flushes: int) -> None:
    rng = random.Random(0)
    log = EventLog(directory, 5000, clock=lambda: T0 + HOUR_MS)
    span = HOUR_MS // flushes
    rows = events // flushes

    async def main() -> None:
        for f in range(flushes):
            log.add(batch(rng, rows, T0 + f * span, span))
            await log.flush()
        log.add(batch(rng, 1, T0 + HOUR_MS, 1))  # the next roll begins: this one closes
        await log.flush()

    trio.run(main)


def one_pass(directory: Path) -> None:
    """In the child: one pass (the whole merge), its time and the peak memory."""
    log = EventLog(directory, 5000, clock=lambda: T0 + HOUR_MS)
    started = time.perf_counter()
    log.merger.run_pass()
    seconds = time.perf_counter() - started
    status = Path("/proc/self/status").read_text()
    rss_kib = next(int(line.split()[1]) for line in status.splitlines() if line[:6] == "VmHWM:")
    arrow_mib = pa.default_memory_pool().max_memory() / (1 << 20)
    print(json.dumps({"seconds": seconds, "rss_kib": rss_kib, "arrow_mib": arrow_mib}))


def child(directory: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "benches.event_log_merge", "--pass", str(directory)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out)
    return result


def state(directory: Path) -> tuple[int, int, float]:
    files = list(directory.glob("events-*.parquet"))
    started = time.perf_counter()
    rows = event_log.read(directory).num_rows
    seconds = time.perf_counter() - started
    assert rows > 0
    return len(files), sum(f.stat().st_size for f in files), seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--flushes", type=int, default=200)
    parser.add_argument("--pass", dest="one_pass", type=Path)
    args = parser.parse_args()
    if args.one_pass is not None:
        one_pass(args.one_pass)
        return
    with tempfile.TemporaryDirectory() as tmp:
        empty, directory = Path(tmp) / "empty", Path(tmp) / "events"
        empty.mkdir()
        write(directory, args.events, args.flushes)
        files, size, read_s = state(directory)
        print(f"before: {files} files, {size / 1e6:.1f} MB, read() {read_s:.2f} s")
        baseline = child(empty)
        merged = child(directory)
        print(
            f"merge: {merged['seconds']:.2f} s, peak RSS {merged['rss_kib'] / 1024:.0f} MiB "
            f"({(merged['rss_kib'] - baseline['rss_kib']) / 1024:.0f} MiB above a pass over "
            f"an empty directory, {baseline['rss_kib'] / 1024:.0f} MiB); "
            f"Arrow's pool at most {merged['arrow_mib']:.0f} MiB"
        )
        files, size, read_s = state(directory)
        print(f"after: {files} files, {size / 1e6:.1f} MB, read() {read_s:.2f} s")


if __name__ == "__main__":
    main()
