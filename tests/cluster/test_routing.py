"""The cluster's rule, as every node computes it from the list alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastcoord.cluster.routing import (
    LONE_CLUSTER_ID,
    Cluster,
    ClusterListError,
    MappedCluster,
    Node,
    cluster_id_of,
    describe,
    parse_nodes,
    zookeeper_cluster_id,
)
from fastcoord.config import ConfigError, load
from fastcoord.core.native import partition


def cluster(text: str, node_id: int, partitions: int = 50) -> Cluster:
    return Cluster(parse_nodes(text), node_id, partitions, partition.partition_for)


def test_a_list_is_parsed_sorted_by_id() -> None:
    nodes = parse_nodes("7@b:9093, 3@a:9092,5@[::1]:9094")
    assert nodes == (Node(3, "a", 9092), Node(5, "::1", 9094), Node(7, "b", 9093))
    assert describe(nodes) == "3@a:9092,5@::1:9094,7@b:9093"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("0@host", "is not ID@HOST:PORT"),
        ("x@host:1", "is not ID@HOST:PORT"),
        ("0@:9092", "is not ID@HOST:PORT"),
        ("0@h:0", "port 0 is not 1-65535"),
        ("0@h:70000", "port 70000 is not 1-65535"),
        ("0@h:1,0@h:2", "node id 0 is listed twice"),
        ("0@h:1,1@h:1", "h:1 is listed twice"),
    ],
)
def test_a_list_that_cannot_be_used_says_why(text: str, says: str) -> None:
    with pytest.raises(ClusterListError, match=says):
        parse_nodes(text)


def test_owners_go_round_the_sorted_ids() -> None:
    c = cluster("9@h:3,2@h:1,5@h:2", node_id=5)
    assert [c.owner(p).node_id for p in range(6)] == [2, 5, 9, 2, 5, 9]
    assert c.owned == frozenset(range(1, 50, 3))
    assert [c.leader(p) for p in range(4)] == [2, 5, 9, 2]
    assert c.controller_id == 2
    assert [n.node_id for n in c.peers()] == [2, 9]


def test_a_group_belongs_to_the_owner_of_its_partition() -> None:
    c = cluster("0@h:1,1@h:2,2@h:3", node_id=0)
    # Kafka's partitions for 50: my-group 12, console-consumer-1 24, the emoji 49.
    assert c.coordinator("my-group").node_id == 12 % 3
    assert c.coordinator("console-consumer-1").node_id == 24 % 3
    assert c.coordinator("\U0001f600").node_id == 49 % 3


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=12, unique=True), st.data())
def test_every_partition_has_one_owner_and_the_nodes_split_them_evenly(
    ids: list[int], data: st.DataObject
) -> None:
    nodes = [Node(i, "h", 1000 + k) for k, i in enumerate(ids)]
    partitions = data.draw(st.integers(1, 200))
    owned = [Cluster(nodes, i, partitions, partition.partition_for).owned for i in ids]
    assert sum(len(o) for o in owned) == partitions
    assert frozenset().union(*owned) == frozenset(range(partitions))
    assert max(map(len, owned)) - min(map(len, owned)) <= 1


def test_one_cluster_id_per_list_whatever_its_order() -> None:
    a = parse_nodes("0@h:1,1@h:2")
    b = parse_nodes("1@h:2,0@h:1")
    assert cluster_id_of(a) == cluster_id_of(b)
    assert cluster_id_of(a) != cluster_id_of(parse_nodes("0@h:1,1@h:3"))
    assert cluster_id_of(a).startswith("fastcoord-")  # how fastcoord's clients know one
    assert len(cluster_id_of(a)) == len("fastcoord-") + 16


def test_a_lone_server_is_a_cluster_of_one_owning_everything() -> None:
    lone = Cluster.alone(Node(4, "h", 9092), 50, partition.partition_for)
    assert lone.owns_all() and lone.owned == frozenset(range(50))
    assert lone.cluster_id == LONE_CLUSTER_ID and lone.controller_id == 4


def test_the_settings_take_a_list_and_refuse_one_without_this_node(tmp_path: Path) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text('node.id = 1\ncluster = "0@127.0.0.1:9092,1@127.0.0.1:9093"\n')
    config = load(str(toml))
    assert config.listen_address() == ("127.0.0.1", 9093)
    c = config.cluster_for(0)
    assert (c.node_id, len(c.nodes), len(c.owned)) == (1, 2, 25)
    with pytest.raises(ConfigError, match=r"node\.id 2 is not in the cluster list"):
        load(str(toml), {"node.id": "2"})
    with pytest.raises(ConfigError, match="is not ID@HOST:PORT"):
        load(None, {"cluster": "0@nowhere"})
    assert load(None, {}).cluster_for(9092).lone


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"zookeeper": "nohost"}, "expected HOST:PORT"),
        ({"zookeeper": "127.0.0.1:2181", "cluster": "0@127.0.0.1:9092"}, "give no cluster list"),
        ({"zookeeper": "127.0.0.1:2181", "in.memory": "true"}, "--in-memory keeps none"),
        ({"zookeeper": "127.0.0.1:2181", "zookeeper.session.timeout.ms": "999"}, "at least 1000"),
    ],
)
def test_zookeeper_settings_that_cannot_work_are_refused(
    settings: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        load(None, settings)


def test_a_mapped_cluster_routes_by_its_map_and_has_no_owner_before_one() -> None:
    me = Node(1, "127.0.0.1", 9093)
    empty = MappedCluster(me, 50, partition.partition_for, "fastcoord-x")
    assert empty.coordinator("g") is None and empty.owned == frozenset()
    assert empty.cluster_id == "fastcoord-x" and not empty.owns_all()
    nodes = {0: Node(0, "127.0.0.1", 9092), 1: me}
    owners = {p: p % 2 for p in range(50)}
    mapped = MappedCluster(me, 50, partition.partition_for, "fastcoord-x", owners, nodes)
    group = next(
        g for g in (f"g{i}" for i in range(100)) if partition.partition_for(g, 50) % 2 == 0
    )
    assert mapped.coordinator(group) == nodes[0]
    assert mapped.owned == frozenset(range(1, 50, 2))
    assert zookeeper_cluster_id("/a") == zookeeper_cluster_id("/a") != zookeeper_cluster_id("/b")
