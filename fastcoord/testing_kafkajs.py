"""kafkajs as a test peer: consumer group members run by the Node.js client, each a `node`
subprocess driven through its stdin and followed through its stdout, as
fastcoord.testing_java runs the Java client's: the member process itself (waiting, closing,
killing, cleaning up) is fastcoord.testing_peers's, and what is here is kafkajs's own (its
install, its command line, its JSON events and commands).

fastcoord claims that real Kafka clients work against it unchanged, and kafkajs is one whose
group code shares nothing with the others: its own protocol versions (JoinGroup v5, Fetch
v11, OffsetFetch v4), its own round-robin assignor, heartbeats sent from its fetch loop,
LeaveGroup on disconnect(). Only kafkajs itself can hold fastcoord to that. The member is
fastcoord/js/group_member.js (its docstring lists its commands and events); kafkajs, pinned
to KAFKAJS_VERSION, is installed by npm into a cache directory the first time it is wanted,
and found by the member through NODE_PATH. Installing needs `node` (14 or later) and `npm`
on PATH and the npm registry in reach, once: `python -m fastcoord.testing_kafkajs install`
does it ahead of the tests.

    with start_member(server.bootstrap, ["orders"], "orders-app", name="m0") as member:
        member.wait_for(lambda: member.partitions("orders"))
        member.commit("orders", 0, 42)
        assert member.committed("orders") == {0: 42}
    # closed (it left its group), or killed if it did not exit in time

A member takes any bootstrap list and any kafkajs consumer option (`consumer_options`).
kafkajs speaks the classic group protocol only.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fastcoord import testing_peers
from fastcoord.testing_peers import PeerMember

KAFKAJS_VERSION = "2.2.4"
SCRIPT = Path(__file__).with_name("js") / "group_member.js"
NODE_MIN_MAJOR = 14  # kafkajs 2's engines.node
CACHE_ENV = "FASTCOORD_KAFKAJS_CACHE"  # installs go to <it>/<version>; ~/.cache/fastcoord/kafkajs
INSTALL_TIMEOUT_S = 300.0
# Between fetches kafkajs heartbeats, and it learns of a rebalance from a heartbeat: an empty
# topic's Fetch waits its whole max wait (kafkajs's default, 5 s) for records that never
# come, so members wait a short while and hear of rebalances soon.
MAX_WAIT_TIME_MS = 100

Event = dict[str, Any]


class KafkajsUnavailable(RuntimeError):
    """No node or no npm: the message says what to install."""


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise KafkajsUnavailable(
            f"no {name} on PATH: install Node.js {NODE_MIN_MAJOR} or later with npm "
            "(nodejs and npm on Debian)"
        )
    return found


def node() -> str:
    """The `node` on PATH, if it is recent enough for kafkajs."""
    found = _tool("node")
    version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30)
    major = re.match(r"v(\d+)\.", version.stdout.strip())
    if major is None or int(major.group(1)) < NODE_MIN_MAJOR:
        raise KafkajsUnavailable(
            f"{found} is {version.stdout.strip() or 'not Node.js'}: kafkajs "
            f"{KAFKAJS_VERSION} needs Node.js {NODE_MIN_MAJOR} or later"
        )
    return found


def npm() -> str:
    return _tool("npm")


def cache_root() -> Path:
    return testing_peers.cache_root(CACHE_ENV, "kafkajs")


def _installed_version(directory: Path) -> str | None:
    try:
        manifest = json.loads((directory / "node_modules/kafkajs/package.json").read_text())
    except (OSError, ValueError):
        return None
    version = manifest.get("version")
    return version if isinstance(version, str) else None


@functools.cache
def installed() -> Path:
    """The directory whose node_modules holds kafkajs KAFKAJS_VERSION, installed by npm the
    first time."""

    def build(building: Path) -> None:
        node()  # kafkajs would not run on it: say so before installing
        manifest = {"private": True, "dependencies": {"kafkajs": KAFKAJS_VERSION}}
        (building / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
        command = [npm(), "install", "--no-audit", "--no-fund", "--ignore-scripts"]
        done = subprocess.run(
            command, cwd=building, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
        )
        if done.returncode != 0 or _installed_version(building) != KAFKAJS_VERSION:
            raise RuntimeError(
                f"npm install of kafkajs {KAFKAJS_VERSION} failed ({done.returncode}):\n"
                f"{done.stdout}{done.stderr}"
            )

    return testing_peers.build_once(
        cache_root() / KAFKAJS_VERSION,
        lambda target: _installed_version(target) == KAFKAJS_VERSION,
        build,
    )


def brokers(bootstrap: str | Sequence[str]) -> list[str]:
    """kafkajs's brokers list from one HOST:PORT (or several joined by commas) or a list."""
    if isinstance(bootstrap, str):
        return [b for b in bootstrap.split(",") if b]
    return list(bootstrap)


class KafkajsMember(PeerMember[Event]):
    """One group_member.js process: its events as they come (`events`, one dict each), the
    partitions it holds by its last join (`assignment`), the generation a heartbeat
    confirmed for that assignment (`generation`), where it fetches from (`positions`), and
    commands to commit, fetch and close."""

    def _prepare(self) -> None:
        self.member_id: str | None = None
        self._generation: int | None = None
        self._positions: dict[tuple[str, int], int] = {}
        self._next_id = 0

    @property
    def generation(self) -> int | None:
        """The generation of its last assignment, once a heartbeat in it was accepted; None
        until then (and after each join)."""
        return self._generation

    @property
    def positions(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the offset its first Fetch since its last join asked for."""
        return dict(self._positions)

    @property
    def errors(self) -> list[Event]:
        return [e for e in self.events if e["event"] in ("error", "crash")]

    def _parse(self, line: str) -> Event:
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict) or "event" not in event:
            return {"event": "unreadable", "line": line}
        return event

    def _note(self, event: Event) -> None:
        kind = event["event"]
        if kind == "joined":
            # kafkajs's assignors are eager: each join hands over all it holds.
            self.member_id = event["memberId"]
            self._assignment = frozenset(
                (topic, int(p)) for topic, listed in event["assignment"].items() for p in listed
            )
            self._generation = None
            self._positions = {}
        elif kind == "heartbeat":
            self._generation = int(event["generation"])
        elif kind == "fetching":
            key = (event["topic"], int(event["partition"]))
            self._positions[key] = int(event["offset"])

    def _send_close(self) -> None:
        self.send({"command": "close"})  # consumer.disconnect(), then node exits

    def send(self, command: Mapping[str, object]) -> None:
        self._write(json.dumps(command))

    def _ask(self, command: Mapping[str, object]) -> Event:
        """Send `command` with an id of its own; the event that answers it (any but an
        error), or RuntimeError with the error."""
        with self._changed:
            self._next_id += 1
            ident = self._next_id
        start = len(self.events)
        self.send({**command, "id": ident})
        answer = self._await(lambda e: e.get("id") == ident, start)
        if answer["event"] == "error":
            raise RuntimeError(f"{self.name}: {command['command']} failed: {answer['error']}")
        return answer

    def commit(self, topic: str, partition: int, offset: int) -> None:
        """consumer.commitOffsets of one offset, in the member's generation; raises with
        kafkajs's error if it failed."""
        self._ask({"command": "commit", "topic": topic, "partition": partition, "offset": offset})

    def committed(self, topic: str) -> dict[int, int]:
        """The group's committed offsets of `topic`'s partitions, as kafkajs's admin
        fetchOffsets reads them: partition -> offset, for those that have one."""
        answer = self._ask({"command": "fetch", "topic": topic})
        offsets = {int(p): int(o) for p, o in answer["offsets"].items()}
        return {p: o for p, o in offsets.items() if o >= 0}


# Every client's running members, by PID (tests check that a killed one is gone from it).
_running = testing_peers.RUNNING


def start_member(
    bootstrap: str | Sequence[str],
    topics: Sequence[str],
    group: str,
    *,
    name: str = "kafkajs-member",
    session_timeout_ms: int | None = None,
    heartbeat_interval_ms: int | None = None,
    rebalance_timeout_ms: int | None = None,
    consumer_options: Mapping[str, object] | None = None,
    directory: Path | None = None,
    log_level: str = "warn",
) -> KafkajsMember:
    """Start a group_member.js subscribed to `topics` in `group` (client id `name`), from
    the beginning of partitions without a committed offset. Unset timeouts are kafkajs's
    defaults (session 30 s, heartbeat 3 s, rebalance 60 s); `consumer_options` are any
    other kafkajs consumer options, and win. kafkajs's log lines at `log_level` and above
    go to `directory / NAME.log` (a temporary directory if None, removed once it has
    exited). A `with` block stops it."""
    config: dict[str, object] = {
        "brokers": brokers(bootstrap),
        "topics": list(topics),
        "groupId": group,
        "clientId": name,
        "logLevel": log_level.upper(),
        "sessionTimeout": session_timeout_ms,
        "heartbeatInterval": heartbeat_interval_ms,
        "rebalanceTimeout": rebalance_timeout_ms,
        "consumer": {"maxWaitTimeInMs": MAX_WAIT_TIME_MS, **(consumer_options or {})},
    }
    env = {**os.environ, "NODE_PATH": str(installed() / "node_modules")}
    command = [node(), str(SCRIPT), json.dumps(config)]
    return testing_peers.spawn(KafkajsMember, name, command, directory, client="kafkajs", env=env)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fastcoord.testing_kafkajs",
        description=f"kafkajs {KAFKAJS_VERSION} for the interop tests, in {CACHE_ENV} "
        "(default ~/.cache/fastcoord/kafkajs)",
    )
    parser.add_argument("action", choices=["install"], help="install kafkajs unless it is there")
    parser.parse_args(argv)
    try:
        print(installed())
    except KafkajsUnavailable as e:
        print(f"kafkajs not installed: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
