"""Heartbeats of well-behaved clients while others misbehave, on a fresh `fastcoord serve`.

    python -m benches.slow_clients_run

A `fastcoord loadtest` (3,000 members in 300 groups, a connection each, heartbeats every
3 s) runs for 65 s against a server with 200 topics of 50 partitions, where an every-topic
Metadata answer is about 260 KB. From second 25 to second 45 three clients misbehave:

- a hog sends 4,000 every-topic Metadata requests (a GB of answers) and never reads, then
  disconnects with its answers unread (a reset);
- a staller sends 300 of them and a JoinGroup, reads nothing for 8 s, then reads it all;
- a client resets its connection while its answers wait, every second.

Prints the loadtest's heartbeat latency before, during and after, and the server's CPU and
RSS in each window. The server and the loadtest are pinned to a core each where there are
two. Nothing here runs at import (asv imports benches/).
"""

from __future__ import annotations

import argparse
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benches.loadtest_run import rss_mb, window_figures
from fastcoord.client.stalling import every_topic_metadata, new_member_join, pipeline, read_all
from fastcoord.testing import ServerProcess, child_env, fastcoord_server
from fastcoord.testing_cpu import cores, sched_seconds

TOPICS = [arg for i in range(200) for arg in ("--topic", f"t{i}:50")]
WINDOWS = {"before": (14, 24), "during": (26, 44), "after": (50, 63)}
MISBEHAVE_FROM, MISBEHAVE_TO = 25.0, 45.0


def hog(server: ServerProcess, until: float) -> None:
    sock = socket.create_connection((server.host, server.port))
    sock.sendall(pipeline(every_topic_metadata(4000)))
    time.sleep(max(0.0, until - time.monotonic()))
    sock.close()  # answers unread: the kernel resets the connection


def staller(server: ServerProcess) -> None:
    with socket.create_connection((server.host, server.port)) as sock:
        sock.sendall(pipeline([*every_topic_metadata(300), new_member_join("staller")]))
        time.sleep(8)
        got = read_all(sock, time.monotonic() + 30, want=301)
    got.check()
    print(f"staller: {len(got.frames)} of 301 answers, whole and in order", flush=True)


def resetter(server: ServerProcess, until: float) -> None:
    while time.monotonic() < until:
        sock = socket.create_connection((server.host, server.port))
        sock.sendall(pipeline(every_topic_metadata(20)))
        time.sleep(0.5)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=3_000)
    parser.add_argument("--groups", type=int, default=300)
    args = parser.parse_args(argv)
    duration = 65.0
    client_core, server_core = cores()
    with tempfile.TemporaryDirectory(prefix="fastcoord-slow-clients-") as tmp:
        out = Path(tmp) / "run"
        with fastcoord_server(Path(tmp), "--in-memory", *TOPICS, core=server_core) as server:
            command = [
                *(["taskset", "-c", str(client_core)] if client_core is not None else []),
                sys.executable,
                *("-m", "fastcoord", "loadtest", "--bootstrap", server.bootstrap),
                *("--members", str(args.members), "--groups", str(args.groups)),
                *("--members-per-connection", "1", "--duration", str(duration)),
                *("--out", str(out)),
            ]
            started = time.monotonic()
            run = subprocess.Popen(
                command, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            usage: dict[str, tuple[float, float]] = {}
            marks: dict[float, tuple[float, float]] = {}
            threads: list[threading.Thread] = []
            points = sorted({t for w in WINDOWS.values() for t in w} | {MISBEHAVE_FROM})
            for point in points:
                time.sleep(max(0.0, started + point - time.monotonic()))
                cpu = sched_seconds(server.pid)
                marks[point] = (cpu[0] if cpu else float("nan"), rss_mb(server.pid))
                if point == MISBEHAVE_FROM:
                    until = started + MISBEHAVE_TO
                    threads = [
                        threading.Thread(target=hog, args=(server, until)),
                        threading.Thread(target=staller, args=(server,)),
                        threading.Thread(target=resetter, args=(server, until)),
                    ]
                    for thread in threads:
                        thread.start()
            for name, (first, last) in WINDOWS.items():
                usage[name] = ((marks[last][0] - marks[first][0]) / (last - first), marks[last][1])
            run.wait(timeout=duration + 120)
            for thread in threads:
                thread.join()
            ended = [line for line in server.log().splitlines() if "ended by the client" in line]
            closed = [line for line in server.log().splitlines() if "closing connection" in line]
        for name, (first, last) in WINDOWS.items():
            f = window_figures(out, first, last)
            cpu, rss = usage[name]
            print(
                f"{name:>6} (s {first}-{last}): {f['heartbeats_per_s']:,.0f} heartbeats/s, "
                f"p50 {f['p50_ms']:.2f} ms, p99 {f['p99_ms']:.2f} ms, "
                f"p99.9 {f['p99_9_ms']:.2f} ms, max {f['max_ms']:.1f} ms; "
                f"server {cpu:.2f} cores, RSS {rss:.0f} MB"
            )
    print(f"connections ended by their clients: {len(ended)}; closed by the server: {len(closed)}")
    return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
