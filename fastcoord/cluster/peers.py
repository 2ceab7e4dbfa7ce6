"""A node's look at its peers before it serves: the same cluster list, or no start.

Every node routes by the list it was given (routing.py), so two nodes with different lists
would each send clients to owners the other does not agree on, and groups would be
coordinated twice or not at all. Before listening, a node asks each peer that answers
for its Metadata (over the Kafka protocol, as any client would) and compares the nodes it
lists, and the owners of the offsets topic's partitions, with its own. A difference stops
the start with one line naming the peer and the difference. A peer that is not up (its
connection refused, or no answer in time) does not stop it: a node serves its own
partitions whoever else is up, as a Kafka broker does.
"""

from __future__ import annotations

import logging

from fastcoord.client.blocking import Connection, PeerError
from fastcoord.cluster.routing import OFFSETS_TOPIC, Cluster, Node, describe
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import MetadataRequest, MetadataRequestTopic, MetadataResponse

log = logging.getLogger("fastcoord.cluster")

PEER_TIMEOUT_S = 2.0
CLIENT_ID = "fastcoord-peer-check"
METADATA_VERSION = 9  # any version with cluster_id (v2+); the peer may serve fewer


def check(cluster: Cluster, timeout: float = PEER_TIMEOUT_S) -> str | None:
    """Why this node must not start beside its peers (one line), or None. Blocking: call
    it from a worker thread."""
    for peer in cluster.peers():
        try:
            answer = _metadata(peer, timeout)
        except (OSError, PeerError, ValueError) as exc:
            log.info("peer %s (%s) not checked: %s", peer.node_id, peer.address, exc)
            continue
        difference = _difference(cluster, answer)
        if difference is not None:
            return f"peer node {peer.node_id} at {peer.address} {difference}"
        log.info("peer %s (%s) has the same cluster list", peer.node_id, peer.address)
    return None


def _metadata(peer: Node, timeout: float) -> MetadataResponse:
    with Connection(peer.host, peer.port, timeout, CLIENT_ID) as connection:
        connection.sock.settimeout(timeout)
        try:
            connection.api_versions()
            request = MetadataRequest(
                topics=[MetadataRequestTopic(name=OFFSETS_TOPIC)], allow_auto_topic_creation=False
            )
            response = connection.request(
                request, connection.version(ApiKey.METADATA, METADATA_VERSION)
            )
        except TimeoutError:
            raise OSError(f"no answer within {timeout} s") from None
    assert isinstance(response, MetadataResponse)
    return response


def _difference(cluster: Cluster, answer: MetadataResponse) -> str | None:
    """What differs between this node's view and a peer's Metadata answer, or None."""
    theirs = [Node(b.node_id, b.host, b.port) for b in answer.brokers]
    ours = list(cluster.nodes)
    if set(theirs) != set(ours):
        missing_there = sorted(set(ours) - set(theirs), key=lambda n: n.node_id)
        missing_here = sorted(set(theirs) - set(ours), key=lambda n: n.node_id)
        parts = []
        if missing_here:
            parts.append("lists " + describe(missing_here) + " that this node's does not")
        if missing_there:
            parts.append("lacks " + describe(missing_there))
        return (
            f"has another cluster list, {describe(theirs) or 'none'} ({'; '.join(parts)}); "
            f"this node's --cluster is {cluster.describe()}"
        )
    topic = next((t for t in answer.topics if t.name == OFFSETS_TOPIC), None)
    if topic is None or topic.error_code != ErrorCode.NONE:
        return None  # not a fastcoord that describes its routing: the lists are all we have
    if len(topic.partitions) != cluster.partitions:
        return (
            f"has {len(topic.partitions)} offsets partitions, this node "
            f"{cluster.partitions}: give every node the same offsets.topic.num.partitions"
        )
    for p in topic.partitions:
        owner = cluster.owner(p.partition_index).node_id
        if p.leader_id != owner:
            return (
                f"names node {p.leader_id} the owner of offsets partition "
                f"{p.partition_index}, this node names node {owner}"
            )
    return None
