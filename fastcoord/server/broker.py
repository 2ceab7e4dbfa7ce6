"""The broker-side answers a consumer needs besides its group: who is where, and offsets.

Topics are always empty. Metadata lists every node of the cluster (a lone server is a
cluster of one) and leaders spread over them as the cluster's rule says (cluster/routing.py),
FindCoordinator names the owner of each group's partition whichever node is asked,
ListOffsets answers 0 for both ends of every partition, Fetch answers, after max_wait_ms,
that there are no records, and Produce is refused (INVALID_REQUEST on every partition, the
same whatever the topic, so it tells nothing an ACL would hide). Sans-IO: these are
functions of the configuration, the cluster and the topic registry.

The offsets topic, `__consumer_offsets`, is described when a Metadata request names it, as
Kafka's internal topic: its partitions' leaders are their owners, so that a tool can read
the cluster's routing from any node. It is never created and is left out of every-topic
answers, which list only the topics consumers use.

A Fetch names the consumer's position as the high watermark, so that a consumer that
resumes from a committed offset sees no lag and no OFFSET_OUT_OF_RANGE; its position stays
where its group left it.

An every-topic Metadata answer is encoded once per version and kept until a topic is added:
with thousands of partitions it takes milliseconds to build, and a client may ask for it
many times a second.

A topic has an id as well as a name: the consumer group protocol hands consumers their
assignments by id, and they then ask Metadata (v12+) for those ids. An index from id to
name answers them, and lets the coordinator resolve a subscription without creating topics
(topic_by_name, topic_by_id). Topics are only ever added, so the index only grows.
"""

from __future__ import annotations

import copy
import struct
import uuid

from fastcoord.cluster.routing import OFFSETS_TOPIC, Cluster
from fastcoord.config import ServerConfig
from fastcoord.core.consumer.topics import topic_id_for
from fastcoord.protocol.error_responses import error_response, produce_refused
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.framing import encode_response
from fastcoord.protocol.messages import (
    Coordinator,
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    PartitionData,
    ProduceRequest,
    ProduceResponse,
)
from fastcoord.protocol.primitives import ZERO_UUID

MAX_TOPICS = 100_000  # topics created on request; a client cannot grow this without bound
KEY_TYPE_GROUP = 0
PRODUCE_REFUSED = "fastcoord is a group coordinator and keeps no records"
# A group whose partition no node owns yet (a ZooKeeper-kept cluster before its first map):
# Kafka's answer while the offsets topic has no leader; clients ask again.
UNKNOWN = ErrorCode.COORDINATOR_NOT_AVAILABLE
# Metadata v10 put topic ids and null names in the request, but Kafka's brokers answered
# neither until v12 and refuse both in v10-11 (MetadataRequest.json).
FIRST_METADATA_BY_ID = 12
_CORRELATION = struct.Struct(">i")


class Broker:
    def __init__(self, config: ServerConfig, cluster: Cluster) -> None:
        self.config = config
        self.cluster = cluster
        self.topics: dict[str, int] = config.declared_topics()
        # Both directions, so that neither a Metadata answer nor a lookup hashes a name again.
        self._ids: dict[str, uuid.UUID] = {}
        self._names: dict[uuid.UUID, str] = {}
        for name in self.topics:
            self._index(name)
        # version -> an every-topic Metadata frame (correlation id 0), for this many topics
        self._every_topic: dict[int, bytes] = {}
        self._every_topic_for: tuple[int, int] = (-1, -1)  # (topics, cluster) it was built for

    def view(self, cluster: Cluster) -> Broker:
        """The same topics, with the cluster as another listener names it: the dicts of
        topics are shared, so a topic created through one view exists in every one."""
        other = copy.copy(self)
        other.cluster = cluster
        other._every_topic = {}
        other._every_topic_for = (-1, -1)
        return other

    # -- Metadata -----------------------------------------------------------------------

    def topic_partitions(self, name: str, create: bool) -> int | None:
        count = self.topics.get(name)
        if count is None and create and len(self.topics) < MAX_TOPICS and _valid_topic(name):
            count = self.topics[name] = self.config.num_partitions
            self._index(name)
        return count

    def _index(self, name: str) -> None:
        tid = self._ids[name] = topic_id(name)
        self._names[tid] = name

    def topic_by_name(self, name: str) -> tuple[uuid.UUID, int] | None:
        """(id, partitions) of the topic named `name`, if it exists; never creates it."""
        count = self.topics.get(name)
        return None if count is None else (self._ids[name], count)

    def topic_by_id(self, topic_id: uuid.UUID) -> tuple[str, int] | None:
        """(name, partitions) of the topic whose id is `topic_id`, if it exists."""
        name = self._names.get(topic_id)
        return None if name is None else (name, self.topics[name])

    def topic_names(self) -> list[str]:
        return list(self.topics)

    def version(self) -> int:
        """Grows when a topic is added (the coordinator's TopicImage: a consumer group
        resolves its subscriptions again when it changes)."""
        return len(self.topics)

    def metadata_frame(self, req: MetadataRequest, version: int, correlation_id: int) -> bytes:
        """The Metadata answer as a frame; every-topic answers come from the cache."""
        if not _every_topic(req, version):
            return encode_response(correlation_id, version, self.metadata(req, version))
        built_for = (len(self.topics), id(self.cluster))  # topics are only ever added
        if self._every_topic_for != built_for:
            self._every_topic.clear()
            self._every_topic_for = built_for
        frame = self._every_topic.get(version)
        if frame is None:
            frame = self._every_topic[version] = encode_response(
                0, version, self.metadata(req, version)
            )
        return frame[:4] + _CORRELATION.pack(correlation_id) + frame[8:]

    def metadata(self, req: MetadataRequest, version: int) -> MetadataResponse:
        every = _every_topic(req, version)
        requested = [] if every else req.topics or []
        if version < FIRST_METADATA_BY_ID and any(
            t.name is None or t.topic_id != ZERO_UUID for t in requested
        ):
            # Kafka throws InvalidRequestException, which answers the whole request.
            refused = error_response(req, version, ErrorCode.INVALID_REQUEST)
            assert isinstance(refused, MetadataResponse)
            return refused
        # As in Kafka, a request that names any topic by id is answered by id alone (each id
        # once): its names are not read, and nothing is created.
        ids = [t.topic_id for t in requested if t.topic_id != ZERO_UUID]
        if ids:
            topics = [self._by_id(tid) for tid in dict.fromkeys(ids)]
        else:
            names = sorted(self.topics) if every else [t.name or "" for t in requested]
            create = self._creates(version < 4 or req.allow_auto_topic_creation)
            topics = [self._by_name(name, create) for name in names]
        cluster = self.cluster
        return MetadataResponse(
            brokers=[
                MetadataResponseBroker(n.node_id, n.host, n.port, None) for n in cluster.nodes
            ],
            cluster_id=cluster.cluster_id,
            controller_id=cluster.controller_id,
            topics=topics,
        )

    def _by_name(self, name: str, create: bool) -> MetadataResponseTopic:
        if name == OFFSETS_TOPIC:
            return self._described(name, self.cluster.partitions, internal=True)
        count = self.topic_partitions(name, create)
        if count is None:
            return MetadataResponseTopic(
                error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                name=name,
            )
        return self._described(name, count)

    def _by_id(self, tid: uuid.UUID) -> MetadataResponseTopic:
        name = self._names.get(tid)
        if name is None:  # Kafka's answer: no name, the id echoed, no partitions
            return MetadataResponseTopic(
                error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                name=None,
                topic_id=tid,
            )
        return self._described(name, self.topics[name])

    def _described(self, name: str, count: int, internal: bool = False) -> MetadataResponseTopic:
        leader = self._offsets_leader if internal else self.cluster.leader
        return MetadataResponseTopic(
            error_code=ErrorCode.NONE,
            name=name,
            topic_id=self._ids[name] if not internal else topic_id(name),
            is_internal=internal,
            partitions=[
                MetadataResponsePartition(
                    error_code=ErrorCode.NONE,
                    partition_index=p,
                    leader_id=(node := leader(p)),
                    leader_epoch=0,
                    replica_nodes=[node],
                    isr_nodes=[node],
                )
                for p in range(count)
            ],
        )

    def _offsets_leader(self, partition: int) -> int:
        """An offsets partition's leader is its owner, the coordinator of its groups (-1
        while it has none)."""
        owner = self.cluster.owner(partition)
        return -1 if owner is None else owner.node_id

    def _creates(self, client_allows: bool) -> bool:
        """Whether a topic a Metadata request names comes into being (auto.create.topics).

        Kafka creates one only when the request allows it and the broker's
        auto.create.topics.enable is on. fastcoord's default, always, creates it whatever
        the request says: a consumer's Metadata (librdkafka's among them) says false, and a
        coordinator for load tests has no data to protect from a mistyped name."""
        mode = self.config.auto_create_topics
        return mode == "always" or (mode == "client" and client_allows)

    # -- FindCoordinator ------------------------------------------------------------------

    def find_coordinator(
        self, req: FindCoordinatorRequest, version: int
    ) -> FindCoordinatorResponse:
        # The owner of each key's partition, by the rule every node shares: any node answers
        # for every group, needing no group state.
        group = req.key_type == KEY_TYPE_GROUP
        error = ErrorCode.NONE if group else ErrorCode.INVALID_REQUEST  # no transactions here
        coordinator = self.cluster.coordinator
        if version < 4:
            if not group:
                return FindCoordinatorResponse(error_code=error, node_id=-1, host="", port=-1)
            node = coordinator(req.key)
            if node is None:
                return FindCoordinatorResponse(error_code=UNKNOWN, node_id=-1, host="", port=-1)
            return FindCoordinatorResponse(
                error_code=error,
                error_message=None,
                node_id=node.node_id,
                host=node.host,
                port=node.port,
            )
        coordinators = []
        for key in req.coordinator_keys:
            if not group:
                coordinators.append(
                    Coordinator(key=key, node_id=-1, host="", port=-1, error_code=error)
                )
                continue
            node = coordinator(key)
            if node is None:
                coordinators.append(
                    Coordinator(key=key, node_id=-1, host="", port=-1, error_code=UNKNOWN)
                )
                continue
            coordinators.append(
                Coordinator(
                    key=key,
                    node_id=node.node_id,
                    host=node.host,
                    port=node.port,
                    error_code=error,
                    error_message=None,
                )
            )
        return FindCoordinatorResponse(coordinators=coordinators)

    # -- ListOffsets and Fetch ------------------------------------------------------------

    def list_offsets(self, req: ListOffsetsRequest, version: int) -> ListOffsetsResponse:
        topics = []
        for t in req.topics:
            count = self.topic_partitions(t.name, create=False)
            topics.append(
                ListOffsetsTopicResponse(
                    t.name,
                    [
                        ListOffsetsPartitionResponse(
                            partition_index=p.partition_index,
                            error_code=(
                                ErrorCode.NONE
                                if count is not None and 0 <= p.partition_index < count
                                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                            ),
                            timestamp=-1,
                            offset=0,
                            leader_epoch=0,
                        )
                        for p in t.partitions
                    ],
                )
            )
        return ListOffsetsResponse(topics=topics)

    def produce(self, req: ProduceRequest) -> ProduceResponse:
        return produce_refused(req, PRODUCE_REFUSED)

    def fetch(self, req: FetchRequest, version: int) -> FetchResponse:
        responses = []
        for t in req.topics:
            count = self.topic_partitions(t.topic, create=False)
            partitions = []
            for p in t.partitions:
                known = count is not None and 0 <= p.partition < count
                position = max(p.fetch_offset, 0)
                partitions.append(
                    PartitionData(
                        partition_index=p.partition,
                        error_code=ErrorCode.NONE
                        if known
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        high_watermark=position,
                        last_stable_offset=position,
                        log_start_offset=0,
                        aborted_transactions=None,
                        records=b"",
                    )
                )
            responses.append(FetchableTopicResponse(t.topic, partitions))
        return FetchResponse(error_code=ErrorCode.NONE, session_id=0, responses=responses)


def _every_topic(req: MetadataRequest, version: int) -> bool:
    # v0: an empty list means every topic; v1+: null means every topic.
    return req.topics is None or (version == 0 and not req.topics)


def topic_id(name: str) -> uuid.UUID:
    """A stable topic id per name (Metadata v10+), the one consumer group assignments use."""
    return topic_id_for(name)


def _valid_topic(name: str) -> bool:
    # Kafka's rule: 1-249 characters of [a-zA-Z0-9._-], not "." or "..".
    return (
        0 < len(name) <= 249
        and name not in (".", "..")
        and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    )
