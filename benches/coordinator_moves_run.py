"""Coordinator moves, measured: three nodes kept in ZooKeeper, one group of N members driven by
`fastcoord loadtest`, and its coordinator moved by a `move_coordinator` fault.

For each size it reports, from the nodes' event logs (their log lines), how long after
the move the new node had the group loaded and Stable (`group_loaded`), and from the load
test's summary the heartbeats in the move's window against the rest of the run: how many
met NOT_COORDINATOR, and their p99.

    python benches/coordinator_moves_run.py --members 10 100 1000

With --moves-every S and --members M --groups G, the same over many groups with a move every
S seconds (each of a group in turn), the figures of the groups not moved against the run
without moves.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from fastcoord.client.admin import AdminClient
from fastcoord.testing import child_env, start_zookeeper_node
from fastcoord.testing_zookeeper import zookeeper_server

NODES = 3
SESSION_MS = 6000
STAMP = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"


def at(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def settled(admins: list[AdminClient]) -> bool:
    views = [a.partitions() for a in admins]
    return len({v["map_version"] for v in views}) == 1 and all(v["serving"] for v in views)


def loadtest(
    bootstrap: str,
    admins: list[AdminClient],
    out: Path,
    members: int,
    groups: int,
    duration_s: int,
    moves: list[tuple[int, str]],
    per_connection: int,
    session_timeout_ms: int,
) -> dict[str, Any]:
    schedule = out.parent / f"{out.name}.toml"
    schedule.write_text(
        "".join(
            f'[[fault]]\nat_ms = {at_ms}\napi = "*"\ngroup = "{group}"\n'
            f"move_coordinator = true\nduration_ms = 5000\n\n"
            for at_ms, group in moves
        )
    )
    argv = [
        sys.executable, "-m", "fastcoord", "loadtest",
        "--bootstrap", bootstrap,
        "--members", str(members),
        "--groups", str(groups),
        "--members-per-connection", str(per_connection),
        "--duration", str(duration_s),
        "--out", str(out),
        "--group-prefix", out.name,
        "--session-timeout-ms", str(session_timeout_ms),
    ]  # fmt: skip
    if moves:
        argv += ["--faults", str(schedule), "--admin", ",".join(a.address for a in admins)]
    subprocess.run(argv, check=False, env=child_env(), timeout=duration_s * 3 + 120)
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--groups", type=int, default=1)
    parser.add_argument("--moves-every", type=int, default=0)
    parser.add_argument("--duration", type=int, default=40)
    parser.add_argument("--members-per-connection", type=int, default=10)
    parser.add_argument("--session-timeout-ms", type=int, default=45_000)
    parser.add_argument(
        "--baseline", action="store_true", help="each size run once without moves first"
    )
    parser.add_argument("--keep", action="store_true", help="keep the nodes' logs and data")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="coordinator-moves-"))
    try:
        with zookeeper_server(work / "zookeeper") as zk:
            nodes = [
                start_zookeeper_node(
                    work / f"node-{i}", i, zk.hosts, work / "data",
                    "--zookeeper-session-timeout-ms", str(SESSION_MS),
                    "--group-initial-rebalance-delay-ms", "0",
                )
                for i in range(NODES)
            ]  # fmt: skip
            try:
                admins = [AdminClient(n.admin) for n in nodes]
                deadline = time.monotonic() + 60
                while not settled(admins) and time.monotonic() < deadline:
                    time.sleep(0.2)
                for members in args.members:
                    if args.baseline:
                        run(args, work, nodes, admins, members, moving=False)
                    run(args, work, nodes, admins, members)
            finally:
                for node in nodes:
                    node.stop(check=False)  # fault lines are warnings
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def run(
    args: argparse.Namespace,
    work: Path,
    nodes: list[Any],
    admins: list[AdminClient],
    members: int,
    moving: bool = True,
) -> None:
    name = f"{'moves' if moving else 'still'}-{members}"
    if not moving:
        moves = []
    elif args.moves_every:
        moves = [
            (s * 1000, f"{name}-{k % args.groups:04d}")
            for k, s in enumerate(range(15, args.duration - 5, args.moves_every))
        ]
    else:
        moves = [(args.duration * 1000 // 2, f"{name}-0000")]
    summary = loadtest(
        nodes[0].bootstrap, admins, work / name, members, args.groups, args.duration, moves,
        args.members_per_connection, args.session_timeout_ms,
    )  # fmt: skip
    logs = "".join(n.log() for n in nodes)
    moved = {
        m[2]: at(m[1])
        for m in re.finditer(STAMP + r" WARNING fastcoord\.events: group (\S+): fault #\d+", logs)
    }
    loaded: dict[str, tuple[float, str]] = {}
    for m in re.finditer(STAMP + r" INFO fastcoord\.events: group (\S+): loaded (\w+)", logs):
        if m[2] in moved and at(m[1]) >= moved[m[2]]:
            loaded.setdefault(m[2], (at(m[1]) - moved[m[2]], m[3]))
    print(f"== {members} members in {args.groups} groups, {len(moves)} moves")
    for group, (seconds, state) in sorted(loaded.items()):
        print(f"  {group}: loaded {state} on its new node {seconds * 1000:.0f} ms after the move")
    for fault in summary.get("faults") or []:
        effect = (fault.get("effect") or {}).get("Heartbeat")
        if effect:
            w, o = effect["window"], effect["outside"]
            print(
                f"  {fault['description']}: heartbeats in its window p99 {w['p99_ms']} ms, "
                f"signals {w['signals']}, errors {w['errors']}; outside p99 {o['p99_ms']} ms"
            )
    steady = ((summary.get("phases") or {}).get("steady") or {}).get("apis") or {}
    heartbeat = steady.get("Heartbeat")
    if heartbeat:
        print(
            f"  steady phase heartbeats: {heartbeat['count']} p50 {heartbeat.get('p50_ms')} ms "
            f"p99 {heartbeat.get('p99_ms')} ms p99.9 {heartbeat.get('p99_9_ms')} ms, "
            f"errors {heartbeat['errors']}"
        )
    # Each member of a moved group hears it from the old node on whichever of its requests
    # comes first: a heartbeat, a commit or an offset fetch.
    told = {
        api: a["errors"]["NOT_COORDINATOR"]
        for api, a in steady.items()
        if "NOT_COORDINATOR" in a["errors"]
    }
    print(f"  steady phase NOT_COORDINATOR answers: {sum(told.values())} {told}")


if __name__ == "__main__":
    main()
