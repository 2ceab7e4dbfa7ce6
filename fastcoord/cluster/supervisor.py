"""`fastcoord cluster`: the nodes of one machine's cluster, started and kept running.

One `fastcoord serve` holds one core's worth of requests and one process's open files; a
cluster of N nodes (routing.py) on one machine holds N times that. This starts node i on
port BASE+i with its own data directory (DATA_DIR/node-i) and admin port (ADMIN+i), relays
their output line by line under a `node i |` prefix, and once all of them listen prints one
summary of where each listens. A node that dies is started again with the same id, address
and data directory, after `restart.delay.ms` (doubled, up to a minute, while it keeps dying
before it listens), and the restart is logged and counted; `/v1/cluster` on the
supervisor's own admin port (ADMIN+N) names the nodes, their state and restarts, and its
`/metrics` counts them for Prometheus. SIGINT or SIGTERM stops every node (SIGTERM, then
SIGKILL after their shutdown grace) and then the supervisor, exit 0.

A node that cannot start the first time (a port in use, a peer with another list) stops
the whole cluster: exit 2 with that node's reason, as `fastcoord serve` gives it. Nodes run
in sessions of their own, so that a terminal's Ctrl-C reaches the supervisor alone and the
nodes stop in order; if the supervisor itself is killed, the kernel sends them SIGTERM.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio

from fastcoord.cluster.routing import Cluster, Node, cluster_id_of, describe, zookeeper_cluster_id
from fastcoord.cluster.zookeeper import split_hosts
from fastcoord.server import http, startup
from fastcoord.server.http import HttpError, Reply, Request, allow, json_reply

log = logging.getLogger("fastcoord.cluster")

LISTENING = re.compile(r"listening on (\S+):(\d+)")
ADMIN = re.compile(r"admin on (\S+):(\d+)")
CANNOT_START = re.compile(r"fastcoord serve: (cannot start: .*)")
MAX_RESTART_DELAY_MS = 60_000
STOP_SLACK_S = 5.0  # beyond a node's shutdown grace, before SIGKILL
CANNOT_START_EXIT = 2
PR_SET_PDEATHSIG = 1
LINE_LIMIT = 65_536  # a node's output line longer than this is relayed in pieces


class NodeView(msgspec.Struct):
    node_id: int
    host: str
    port: int
    admin: str | None
    data_dir: str | None
    state: str  # starting, running, restarting, stopped
    pid: int | None
    restarts: int
    partitions: int  # offsets partitions it owns
    started_ms: int | None
    last_exit_code: int | None  # negative: the signal that ended it
    last_exit_ms: int | None


class ClusterView(msgspec.Struct):
    cluster_id: str
    bootstrap: str
    nodes: list[NodeView]


@dataclass(eq=False)
class NodeProcess:
    """One node as the supervisor keeps it."""

    node: Node
    argv: list[str]
    partitions: int
    data_dir: Path | None
    core: int | None
    state: str = "starting"
    pid: int | None = None
    admin: str | None = None
    restarts: int = 0
    started_ms: int | None = None
    last_exit_code: int | None = None
    last_exit_ms: int | None = None
    listening: trio.Event = field(default_factory=trio.Event)
    failure: str | None = None  # why its first start failed

    def view(self) -> NodeView:
        n = self.node
        return NodeView(
            n.node_id,
            n.host,
            n.port,
            self.admin,
            None if self.data_dir is None else str(self.data_dir),
            self.state,
            self.pid,
            self.restarts,
            self.partitions,
            self.started_ms,
            self.last_exit_code,
            self.last_exit_ms,
        )


@dataclass
class Plan:
    """What `fastcoord cluster` was asked for."""

    nodes: int
    host: str
    port: int  # node i listens on port+i; 0: free ports
    admin_host: str
    admin_port: int | None  # node i's admin on admin_port+i, the supervisor's on +nodes
    data_dir: Path | None  # None: --in-memory
    partitions: int  # offsets.topic.num.partitions
    restart_delay_ms: int
    pin: bool
    serve_args: list[str]  # every other setting, given to each node
    shutdown_grace_ms: int = 5000  # each node's, as its settings give it
    # With a ZooKeeper (its --zookeeper, among serve_args): the nodes register there, share
    # one data directory, and partitions move; else the static list of the nodes.
    zookeeper: str = ""


def node_ports(plan: Plan) -> list[int]:
    if plan.port:
        return [plan.port + i for i in range(plan.nodes)]
    return free_ports(plan.nodes, plan.host)  # chosen once: a node restarted keeps its own


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports free on `host` now (a cluster's addresses must be known
    before its nodes start; another process could take one meanwhile, rarely)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def node_argv(
    plan: Plan, cluster_list: str, node_id: int, data_dir: Path | None, port: int = 0
) -> list[str]:
    argv = [sys.executable, "-m", "fastcoord", "serve", "--node-id", str(node_id)]
    if plan.zookeeper:
        argv += ["--host", plan.host, "--port", str(port)]  # the rest is ZooKeeper's
    else:
        argv += ["--cluster", cluster_list]
    argv += plan.serve_args
    if data_dir is not None:
        argv += ["--data-dir", str(data_dir)]
    if plan.admin_port is not None:
        port = plan.admin_port + node_id if plan.admin_port else 0
        argv += ["--admin-host", plan.admin_host, "--admin-port", str(port)]
    return argv


class Supervisor:
    def __init__(self, plan: Plan) -> None:
        from fastcoord.core.native import partition

        self.plan = plan
        nodes = [Node(i, plan.host, port) for i, port in enumerate(node_ports(plan))]
        self.cluster_list = describe(nodes)
        self.cluster_id = cluster_id_of(nodes)
        cores = sorted(os.sched_getaffinity(0))
        self.nodes: list[NodeProcess] = []
        if plan.zookeeper:
            self.cluster_id = zookeeper_cluster_id(split_hosts(plan.zookeeper)[1])
        for node in nodes:
            cluster = Cluster(nodes, node.node_id, plan.partitions, partition.partition_for)
            data_dir = None if plan.data_dir is None else plan.data_dir / f"node-{node.node_id}"
            if plan.zookeeper:
                data_dir = plan.data_dir  # one for all: partitions move between the nodes
            self.nodes.append(
                NodeProcess(
                    node,
                    node_argv(plan, self.cluster_list, node.node_id, data_dir, node.port),
                    # With ZooKeeper, what a node owns changes: any share, up to every one.
                    plan.partitions if plan.zookeeper else len(cluster.owned),
                    data_dir,
                    cores[node.node_id % len(cores)] if plan.pin else None,
                )
            )
        self.stopping = False
        self.failed: NodeProcess | None = None
        self._changed = trio.Event()  # a node listens, or failed its first start

    # -- the views ------------------------------------------------------------------------

    def view(self) -> ClusterView:
        bootstrap = ",".join(n.node.address for n in self.nodes)
        return ClusterView(self.cluster_id, bootstrap, [n.view() for n in self.nodes])

    def route(self, request: Request) -> Reply:
        path = request.path.split("?", 1)[0].rstrip("/")
        if path == "/v1/cluster":
            allow(request.method, "GET")
            return json_reply(200, self.view())
        if path == "/metrics":
            allow(request.method, "GET")
            return Reply(200, self.exposition(), "text/plain; version=0.0.4; charset=utf-8")
        raise HttpError(404, f"no such resource: {path or '/'}")

    def exposition(self) -> bytes:
        lines = [
            "# HELP fastcoord_cluster_node_up whether the node is running (it listens)",
            "# TYPE fastcoord_cluster_node_up gauge",
            *(
                f'fastcoord_cluster_node_up{{node="{n.node.node_id}"}} '
                f"{1 if n.state == 'running' else 0}"
                for n in self.nodes
            ),
            "# HELP fastcoord_cluster_node_restarts_total times the node was started again",
            "# TYPE fastcoord_cluster_node_restarts_total counter",
            *(
                f'fastcoord_cluster_node_restarts_total{{node="{n.node.node_id}"}} {n.restarts}'
                for n in self.nodes
            ),
        ]
        return ("\n".join(lines) + "\n").encode()

    def summary(self, admin: str | None) -> str:
        rows = [f"cluster {self.cluster_id}: {len(self.nodes)} nodes"]
        for n in self.nodes:
            parts = [f"  node {n.node.node_id}  {n.node.address}"]
            if n.admin:
                parts.append(f"admin {n.admin}")
            parts.append(f"{n.partitions} offsets partitions")
            parts.append(str(n.data_dir) if n.data_dir is not None else "in memory")
            if n.core is not None:
                parts.append(f"core {n.core}")
            parts.append(f"pid {n.pid}")
            rows.append("  ".join(parts))
        rows.append("bootstrap.servers=" + ",".join(n.node.address for n in self.nodes))
        if admin:
            rows.append(f"cluster admin on {admin}: /v1/cluster, /metrics")
        return "\n".join(rows)

    # -- running --------------------------------------------------------------------------

    async def run(self, signals: Any, admin_listeners: list[trio.SocketListener]) -> int:
        """Start the nodes, keep them running until a signal; the exit status."""
        async with trio.open_nursery() as nursery:
            for node in self.nodes:
                nursery.start_soon(self._keep, node)
            while not all(n.listening.is_set() for n in self.nodes) and self.failed is None:
                await self._changed.wait()
                self._changed = trio.Event()
            if self.failed is not None:
                await self._stop_all()
                nursery.cancel_scope.cancel()
                return CANNOT_START_EXIT
            admin = None
            if admin_listeners:
                host, port = admin_listeners[0].socket.getsockname()[:2]
                admin = f"{host}:{port}"
                nursery.start_soon(http.serve, self.route, admin_listeners)
            print(self.summary(admin), flush=True)
            async for signum in signals:
                log.info("received %s: stopping every node", signal.Signals(signum).name)
                break
            await self._stop_all()
            nursery.cancel_scope.cancel()
        return 0

    async def _keep(self, node: NodeProcess) -> None:
        delay = self.plan.restart_delay_ms
        first = True
        while not self.stopping:
            listened = await self._run_once(node)
            if self.stopping:
                break
            if first and not listened:
                node.failure = node.failure or (
                    f"node {node.node.node_id} exited ({node.last_exit_code}) before listening"
                )
                self.failed = node
                self._changed.set()
                return
            first = False
            delay = self.plan.restart_delay_ms if listened else min(2 * delay, MAX_RESTART_DELAY_MS)
            node.restarts += 1
            node.state = "restarting"
            log.warning(
                "node %d (pid %s) exited with %s; starting it again in %d ms (restart %d)",
                node.node.node_id,
                node.pid,
                _exit(node.last_exit_code),
                delay,
                node.restarts,
            )
            await trio.sleep(delay / 1000)
        node.state = "stopped"

    async def _run_once(self, node: NodeProcess) -> bool:
        """Run the node until it exits; whether it listened."""
        node.state = "starting"
        # Forked here, on the event loop's own thread, not in a worker thread as
        # trio.run_process would: the kernel's parent-death signal is tied to the thread
        # that forked, and a worker thread ends when it idles.
        process = subprocess.Popen(
            node.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        node.pid = process.pid
        node.started_ms = int(time.time() * 1000)
        if node.core is not None:
            os.sched_setaffinity(process.pid, {node.core})
        assert process.stdout is not None
        output = trio.lowlevel.FdStream(os.dup(process.stdout.fileno()))
        process.stdout.close()
        listened = False
        prefix = f"node {node.node.node_id} | "
        pending = b""
        try:
            while chunk := await output.receive_some(LINE_LIMIT):
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                if len(pending) > LINE_LIMIT:
                    lines.append(pending)
                    pending = b""
                for raw in lines:
                    line = raw.decode(errors="replace")
                    print(prefix + line, flush=True)
                    if not listened and LISTENING.search(line):
                        listened = True
                        node.state = "running"
                        node.listening.set()
                        self._changed.set()
                    elif (match := ADMIN.search(line)) is not None:
                        node.admin = f"{match.group(1)}:{match.group(2)}"
                    elif (match := CANNOT_START.search(line)) is not None:
                        node.failure = f"node {node.node.node_id}: {match.group(1)}"
            if pending:
                print(prefix + pending.decode(errors="replace"), flush=True)
        finally:
            await output.aclose()
        # Its output has ended: it is exiting (a node never closes its output otherwise).
        node.last_exit_code = await trio.to_thread.run_sync(process.wait)
        node.last_exit_ms = int(time.time() * 1000)
        return listened

    async def _stop_all(self) -> None:
        """SIGTERM to every node; SIGKILL to those still running after their grace."""
        self.stopping = True
        pids = [n.pid for n in self.nodes if n.pid is not None and n.state != "stopped"]
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        grace = self.plan.shutdown_grace_ms / 1000 + STOP_SLACK_S
        with trio.move_on_after(grace):
            while any(_alive(pid) for pid in pids):
                await trio.sleep(0.05)
        for pid in pids:
            if _alive(pid):
                log.warning("pid %d did not stop within %.0f s: killing it", pid, grace)
                _signal(pid, signal.SIGKILL)
        for node in self.nodes:
            node.state = "stopped"


def _exit(code: int | None) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it has exited meanwhile
        os.kill(pid, signum)


def _alive(pid: int) -> bool:
    """Whether `pid` is a child that has not been reaped (trio reaps it in _run_once)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies (Linux), so that a
    supervisor killed outright leaves no nodes behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


async def supervise(plan: Plan) -> int:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        admin_listeners: list[trio.SocketListener] = []
        if plan.admin_port is not None:
            port = plan.admin_port + plan.nodes if plan.admin_port else 0
            admin_listeners = await startup.open_listeners(
                plan.admin_host, port, "--admin-host", "--admin-port"
            )
        supervisor = Supervisor(plan)
        try:
            status = await supervisor.run(signals, admin_listeners)
        finally:
            for listener in admin_listeners:
                await listener.aclose()
        if supervisor.failed is not None:
            print(
                f"fastcoord cluster: cannot start: {supervisor.failed.failure}",
                file=sys.stderr,
                flush=True,
            )
        return status


def run(plan: Plan) -> int:
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return trio.run(supervise, plan)
    except startup.StartupError as exc:
        print(f"fastcoord cluster: cannot start: {exc}", file=sys.stderr, flush=True)
        return CANNOT_START_EXIT
