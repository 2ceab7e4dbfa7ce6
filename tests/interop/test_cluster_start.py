"""How a node of a cluster starts: beside peers that are not up yet it serves its own
partitions; beside a peer whose cluster list differs it refuses, exit 2, one line naming
the peer and the difference; a list it cannot use is refused before anything starts."""

from __future__ import annotations

from pathlib import Path

from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse
from fastcoord.testing import cluster_list, free_ports, refused_start, start_node, stopping


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_node_serves_while_its_peers_are_not_up(tmp_path: Path) -> None:
    cluster = cluster_list(free_ports(3))
    with stopping(start_node(tmp_path / "node-2", 2, cluster, "--in-memory")) as node:
        with node.connect() as c:
            answer = c.request(FindCoordinatorRequest(key="my-group"), 3)  # node 0's group
            assert isinstance(answer, FindCoordinatorResponse)
            assert answer.error_code == ErrorCode.NONE and answer.node_id == 0
        assert "peer 0" in node.log() and "not checked" in node.log()


def test_a_node_whose_list_differs_from_a_running_peer_refuses_to_start(
    tmp_path: Path,
) -> None:
    ports = free_ports(4)
    ours = cluster_list(ports[:3])
    with stopping(start_node(tmp_path / "node-0", 0, ours, "--in-memory")) as peer:
        # A node told of a fourth node, which node 0 has never heard of.
        theirs = cluster_list(ports)
        refused = refused_start(tmp_path, "--node-id", "1", "--cluster", theirs, "--in-memory")
        assert refused.returncode == 2, refused.stderr
        line = one_line(refused.stderr)
        assert f"peer node 0 at {peer.bootstrap}" in line
        assert f"lacks 3@127.0.0.1:{ports[3]}" in line
        assert theirs in line and ours in line
        # Another address for node 2.
        moved = cluster_list([*ports[:2], ports[3]])
        refused = refused_start(tmp_path, "--node-id", "1", "--cluster", moved, "--in-memory")
        assert refused.returncode == 2
        line = one_line(refused.stderr)
        assert f"peer node 0 at {peer.bootstrap}" in line
        assert f"2@127.0.0.1:{ports[2]}" in line and f"2@127.0.0.1:{ports[3]}" in line
        # Another count of offsets partitions: another owner for most groups.
        refused = refused_start(
            tmp_path,
            "--node-id",
            "1",
            "--cluster",
            ours,
            "--in-memory",
            "--offsets-topic-num-partitions",
            "30",
        )
        assert refused.returncode == 2
        line = one_line(refused.stderr)
        assert "peer node 0" in line and "50 offsets partitions" in line
        # The same list starts.
        with stopping(start_node(tmp_path / "node-1", 1, ours, "--in-memory")) as node:
            assert "peer 0 (127.0.0.1" in node.log() and "same cluster list" in node.log()


def test_a_cluster_list_that_cannot_be_used_is_refused(tmp_path: Path) -> None:
    ports = free_ports(2)
    cases = {
        "0@127.0.0.1": "is not ID@HOST:PORT",
        f"0@127.0.0.1:{ports[0]},0@127.0.0.1:{ports[1]}": "node id 0 is listed twice",
        f"0@127.0.0.1:{ports[0]},1@127.0.0.1:{ports[0]}": "is listed twice",
        f"1@127.0.0.1:{ports[0]},2@127.0.0.1:{ports[1]}": "node.id 0 is not in the cluster list",
    }
    for cluster, says in cases.items():
        refused = refused_start(tmp_path, "--node-id", "0", "--cluster", cluster)
        assert refused.returncode == 2, cluster
        assert says in one_line(refused.stderr), refused.stderr
