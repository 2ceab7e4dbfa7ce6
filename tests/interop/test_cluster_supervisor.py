"""`fastcoord cluster` as a user runs it: one summary of where each node listens, the nodes
in /v1/cluster, a dead node started again, SIGTERM stopping every node, and a node that
cannot start stopping the whole start with its reason."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from fastcoord.client.admin import AdminClient
from fastcoord.client.blocking import Connection
from fastcoord.protocol.messages import MetadataRequest, MetadataResponse
from fastcoord.testing import child_env, start_cluster


def gone(pid: int, timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_summary_the_nodes_a_restart_and_a_stop(tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path, 2, "--in-memory", "--restart-delay-ms", "100")
    try:
        admin = AdminClient(cluster.admin)
        view = admin.cluster()
        nodes = view["nodes"]
        assert [(n["node_id"], n["state"], n["partitions"]) for n in nodes] == [
            (0, "running", 25),
            (1, "running", 25),
        ]
        assert all(n["data_dir"] is None and n["restarts"] == 0 for n in nodes)
        log = cluster.log()
        assert f"cluster {view['cluster_id']}: 2 nodes" in log
        for n in nodes:
            assert f"node {n['node_id']}  {n['host']}:{n['port']}  admin {n['admin']}" in log
        assert "bootstrap.servers=" + view["bootstrap"] in log
        # A node answers as a member of the cluster the supervisor described.
        with Connection(nodes[1]["host"], nodes[1]["port"]) as c:
            answer = c.request(MetadataRequest(topics=[]), 9)
            assert isinstance(answer, MetadataResponse)
            assert answer.cluster_id == view["cluster_id"]
            assert sorted(b.port for b in answer.brokers) == sorted(n["port"] for n in nodes)
        # A node that dies is started again, on the same address.
        first = nodes[0]["pid"]
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:
            node = admin.cluster()["nodes"][0]
            if node["state"] == "running" and node["pid"] != first:
                break
            assert time.monotonic() < deadline, node
            time.sleep(0.1)
        assert node["restarts"] == 1 and node["port"] == nodes[0]["port"]
        assert 'fastcoord_cluster_node_restarts_total{node="0"} 1' in admin.metrics_text()
        pids = [n["pid"] for n in admin.cluster()["nodes"]]
    finally:
        cluster.terminate()
        cluster.process.wait(30)
        cluster.stop()
    assert cluster.process.returncode == 0
    assert all(gone(pid) for pid in pids)
    assert cluster.log().count("INFO fastcoord.server: stopped") == 2


def taken_after_a_free_port() -> tuple[socket.socket, int]:
    """A listening socket on some port P + 1 where P was free a moment ago: node 1's port
    taken, node 0's free, for `fastcoord cluster --port P`."""
    for _ in range(100):
        holder = socket.socket()
        try:
            holder.bind(("127.0.0.1", 0))
            port = holder.getsockname()[1] - 1
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port))
        except OSError:
            holder.close()
            continue
        holder.listen()
        return holder, port
    raise AssertionError("no free port below a free port in 100 tries")


def test_a_node_that_cannot_start_stops_the_start(tmp_path: Path) -> None:
    holder, port = taken_after_a_free_port()
    with holder:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "fastcoord",
                "cluster",
                "--nodes",
                "2",
                "--port",
                str(port),
                "--in-memory",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=child_env(),
            cwd=tmp_path,
        )
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    # Node 0's port could have been taken meanwhile by another process: either node's
    # refusal stops the start, with its reason.
    assert last.startswith("fastcoord cluster: cannot start: node "), last
    assert "cannot start: port" in last and "on 127.0.0.1 is in use" in last, last


def test_settings_it_sets_itself_are_refused() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fastcoord", "cluster", "--node-id", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    assert done.returncode == 2
    assert "--node-id and --cluster are set for each node" in done.stderr
