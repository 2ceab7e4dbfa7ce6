"""Three real nodes on loopback route as Kafka's brokers do: any node names the owner of a
group, the owner alone answers for it, and admin clients find every group through one
bootstrap address.

The rule is the documented one: partition = abs(javaHashCode(group)) % 50, owner = the
sorted node ids[partition mod 3]. It is computed here from Java's hash alone, not from
fastcoord's routing module, so that the two are checked against each other.
"""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient

from fastcoord.client.blocking import Connection
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    MemberIdentity,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from fastcoord.protocol.versions import SERVED
from fastcoord.testing import ServerProcess, fastcoord_cluster
from tests.interop.groups import PARTITIONS, SERVER_ARGS, TOPIC

NODES = 3
OFFSETS_PARTITIONS = 50
NOT_COORDINATOR = ErrorCode.NOT_COORDINATOR


def java_hash(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, wrapping at 32 bits."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def owner_of(group: str) -> int:
    h = java_hash(group)
    partition = (0 if h == -(2**31) else abs(h)) % OFFSETS_PARTITIONS  # Kafka's Utils.abs
    return partition % NODES


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    with fastcoord_cluster(
        tmp_path_factory.mktemp("cluster"),
        NODES,
        "--in-memory",
        *SERVER_ARGS,
    ) as running:
        yield running


def random_groups(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "-_.é😀"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))) for _ in range(count)]


def group_of(node: int, tag: str = "") -> str:
    """A group id that node `node` owns."""
    return next(g for i in range(10_000) if owner_of(g := f"{tag}group-{i}") == node)


# -- routing -------------------------------------------------------------------------------


def test_every_node_names_the_documented_owner_of_every_group(
    nodes: list[ServerProcess],
) -> None:
    groups = random_groups(1000, seed=29)
    groups += ["my-group", "polygenelubricants", "console-consumer-1", "\U0001f600"]
    want = {g: nodes[owner_of(g)] for g in groups}
    assert {owner_of(g) for g in groups} == set(range(NODES))
    for node in nodes:
        with node.connect() as c:
            for group in groups:
                answer = c.request(FindCoordinatorRequest(key=group, key_type=0), 3)
                assert isinstance(answer, FindCoordinatorResponse)
                assert answer.error_code == ErrorCode.NONE
                owner = want[group]
                assert (answer.host, answer.port) == (owner.host, owner.port), group
                assert answer.node_id == owner_of(group)
            for start in range(0, len(groups), 100):  # v4+: batched keys
                keys = groups[start : start + 100]
                answer = c.request(FindCoordinatorRequest(key_type=0, coordinator_keys=keys), 4)
                assert isinstance(answer, FindCoordinatorResponse)
                assert [k.key for k in answer.coordinators] == keys
                for entry in answer.coordinators:
                    owner = want[entry.key]
                    assert entry.error_code == ErrorCode.NONE
                    assert (entry.node_id, entry.host, entry.port) == (
                        owner_of(entry.key),
                        owner.host,
                        owner.port,
                    )


def test_known_answers_of_the_rule() -> None:
    # Partitions from Kafka's own hash (the coordinator's docs): 12, 0, 24, 49.
    assert [owner_of(g) for g in ("my-group", "polygenelubricants")] == [0, 0]
    assert [owner_of(g) for g in ("console-consumer-1", "\U0001f600")] == [0, 1]


def test_metadata_from_each_node_lists_the_three_nodes_and_one_cluster_id(
    nodes: list[ServerProcess],
) -> None:
    expected = [(i, n.host, n.port) for i, n in enumerate(nodes)]
    cluster_ids = set()
    for node in nodes:
        with node.connect() as c:
            for version in (2, 9, SERVED[ApiKey.METADATA].max_version):  # cluster id: v2+
                request = MetadataRequest(
                    topics=[MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=False
                )
                answer = c.request(request, version)
                assert isinstance(answer, MetadataResponse)
                assert sorted((b.node_id, b.host, b.port) for b in answer.brokers) == expected
                assert answer.controller_id == 0
                cluster_ids.add(answer.cluster_id)
                [topic] = answer.topics
                # Leaders round-robin over the nodes.
                assert [p.leader_id for p in topic.partitions] == [
                    p % NODES for p in range(PARTITIONS)
                ]
            offsets = MetadataRequest(topics=[MetadataRequestTopic(name="__consumer_offsets")])
            answer = c.request(offsets, 9)
            assert isinstance(answer, MetadataResponse)
            [topic] = answer.topics
            assert topic.is_internal
            assert [p.leader_id for p in topic.partitions] == [
                p % NODES for p in range(OFFSETS_PARTITIONS)
            ]
    assert len(cluster_ids) == 1
    (cluster_id,) = cluster_ids
    assert cluster_id is not None and cluster_id.startswith("fastcoord-")


# -- refusal -------------------------------------------------------------------------------


def versions(api: int) -> range:
    served = SERVED[api]
    return range(served.min_version, served.max_version + 1)


def test_every_group_api_sent_to_another_node_is_answered_not_coordinator(
    nodes: list[ServerProcess],
) -> None:
    group = group_of(1)
    asked = nodes[0]  # not the owner
    with asked.connect() as c:
        for v in versions(ApiKey.JOIN_GROUP):
            join = JoinGroupRequest(
                group_id=group,
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                member_id="",
                protocol_type="consumer",
                protocols=[JoinGroupRequestProtocol("range", b"")],
            )
            answer = c.request(join, v)
            assert isinstance(answer, JoinGroupResponse)
            assert answer.error_code == NOT_COORDINATOR, v
        for v in versions(ApiKey.SYNC_GROUP):
            sync = SyncGroupRequest(
                group_id=group,
                generation_id=1,
                member_id="m",
                protocol_type="consumer",
                protocol_name="range",
            )
            answer = c.request(sync, v)
            assert isinstance(answer, SyncGroupResponse)
            assert answer.error_code == NOT_COORDINATOR, v
        for v in versions(ApiKey.HEARTBEAT):
            answer = c.request(HeartbeatRequest(group_id=group, generation_id=1, member_id="m"), v)
            assert isinstance(answer, HeartbeatResponse)
            assert answer.error_code == NOT_COORDINATOR, v
        for v in versions(ApiKey.LEAVE_GROUP):
            leave = LeaveGroupRequest(
                group_id=group, member_id="m", members=[MemberIdentity(member_id="m")]
            )
            answer = c.request(leave, v)
            assert isinstance(answer, LeaveGroupResponse)
            assert answer.error_code == NOT_COORDINATOR, v
        for v in versions(ApiKey.OFFSET_COMMIT):
            commit = OffsetCommitRequest(
                group_id=group,
                topics=[
                    OffsetCommitRequestTopic(
                        TOPIC,
                        [OffsetCommitRequestPartition(0, 5), OffsetCommitRequestPartition(1, 6)],
                    )
                ],
            )
            answer = c.request(commit, v)
            assert isinstance(answer, OffsetCommitResponse)
            errors = [p.error_code for t in answer.topics for p in t.partitions]
            assert errors == [NOT_COORDINATOR] * 2, v
        for v in versions(ApiKey.OFFSET_FETCH):
            if v < 8:
                fetch = OffsetFetchRequest(
                    group_id=group, topics=[OffsetFetchRequestTopic(TOPIC, [0, 1])]
                )
                answer = c.request(fetch, v)
                assert isinstance(answer, OffsetFetchResponse)
                if v >= 2:
                    assert answer.error_code == NOT_COORDINATOR, v
                else:  # no top-level error before v2: each partition carries it
                    errors = [p.error_code for t in answer.topics for p in t.partitions]
                    assert errors == [NOT_COORDINATOR] * 2, v
                continue
            # v8+: per group, the owned one answered beside the refused one.
            mine = group_of(0)
            fetch = OffsetFetchRequest(
                groups=[
                    OffsetFetchRequestGroup(
                        group_id=g, topics=[OffsetFetchRequestTopics(TOPIC, [0])]
                    )
                    for g in (group, mine)
                ]
            )
            answer = c.request(fetch, v)
            assert isinstance(answer, OffsetFetchResponse)
            assert [(g.group_id, g.error_code) for g in answer.groups] == [
                (group, NOT_COORDINATOR),
                (mine, ErrorCode.NONE),
            ], v
        for v in versions(ApiKey.OFFSET_DELETE):
            delete = OffsetDeleteRequest(
                group_id=group,
                topics=[OffsetDeleteRequestTopic(TOPIC, [OffsetDeleteRequestPartition(0)])],
            )
            answer = c.request(delete, v)
            assert isinstance(answer, OffsetDeleteResponse)
            assert answer.error_code == NOT_COORDINATOR, v
        for v in versions(ApiKey.CONSUMER_GROUP_HEARTBEAT):
            heartbeat = ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id=str(uuid.uuid4()),
                member_epoch=0,
                rebalance_timeout_ms=10_000,
                subscribed_topic_names=[TOPIC],
                topic_partitions=[],
            )
            answer = c.request(heartbeat, v)
            assert isinstance(answer, ConsumerGroupHeartbeatResponse)
            assert answer.error_code == NOT_COORDINATOR, v
        mine = group_of(0)
        for v in versions(ApiKey.CONSUMER_GROUP_DESCRIBE):
            describe = ConsumerGroupDescribeRequest(group_ids=[group, mine])
            answer = c.request(describe, v)
            assert isinstance(answer, ConsumerGroupDescribeResponse)
            assert [(g.group_id, g.error_code) for g in answer.groups] == [
                (group, NOT_COORDINATOR),
                (mine, ErrorCode.GROUP_ID_NOT_FOUND),
            ], v
        for v in versions(ApiKey.DESCRIBE_GROUPS):
            answer = c.request(DescribeGroupsRequest(groups=[group, mine]), v)
            assert isinstance(answer, DescribeGroupsResponse)
            assert [(g.group_id, g.error_code) for g in answer.groups] == [
                (group, NOT_COORDINATOR),
                (mine, ErrorCode.NONE),
            ], v
        for v in versions(ApiKey.DELETE_GROUPS):
            answer = c.request(DeleteGroupsRequest(groups_names=[group, mine]), v)
            assert isinstance(answer, DeleteGroupsResponse)
            assert [(r.group_id, r.error_code) for r in answer.results] == [
                (group, NOT_COORDINATOR),
                (mine, ErrorCode.GROUP_ID_NOT_FOUND),
            ], v


def committed_group(node: ServerProcess, group: str) -> None:
    """`group` made to exist on its owner `node` by a simple commit (generation -1)."""
    with node.connect() as c:
        commit = OffsetCommitRequest(
            group_id=group,
            topics=[OffsetCommitRequestTopic(TOPIC, [OffsetCommitRequestPartition(0, 7)])],
        )
        answer = c.request(commit, 2)
        assert isinstance(answer, OffsetCommitResponse)
        assert [p.error_code for t in answer.topics for p in t.partitions] == [ErrorCode.NONE]


def test_list_groups_answers_each_nodes_own_and_admin_clients_see_them_all(
    nodes: list[ServerProcess],
) -> None:
    made = {i: [group_of(i, f"listed-{k}-") for k in range(3)] for i in range(NODES)}
    for i, groups in made.items():
        for group in groups:
            committed_group(nodes[i], group)
    everything = {g for groups in made.values() for g in groups}
    for i, node in enumerate(nodes):
        with node.connect() as c:
            answer = c.request(ListGroupsRequest(), 3)
            assert isinstance(answer, ListGroupsResponse)
            listed = {g.group_id for g in answer.groups}
            assert everything & listed == set(made[i])  # its own, none of the others'
            assert all(owner_of(g) == i for g in listed)
    bootstrap = nodes[2].bootstrap  # one address: the clients find the rest in Metadata
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        seen = {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()
    assert everything <= seen
    confluent = AdminClient({"bootstrap.servers": bootstrap})
    listings = confluent.list_consumer_groups(request_timeout=10).result(timeout=15)
    assert not listings.errors
    assert everything <= {g.group_id for g in listings.valid}


def test_a_group_is_served_by_its_owner_alone(nodes: list[ServerProcess]) -> None:
    group = group_of(2, "served-")
    committed_group(nodes[2], group)
    for i, node in enumerate(nodes):
        with node.connect() as c:
            fetch = OffsetFetchRequest(group_id=group, topics=[OffsetFetchRequestTopic(TOPIC, [0])])
            answer = c.request(fetch, 5)
            assert isinstance(answer, OffsetFetchResponse)
            if i == 2:
                assert answer.error_code == ErrorCode.NONE
                assert answer.topics[0].partitions[0].committed_offset == 7
            else:
                assert answer.error_code == NOT_COORDINATOR


def test_a_node_is_reached_through_another_as_a_client_would(
    nodes: list[ServerProcess],
) -> None:
    """FindCoordinator through node 0, then the group's requests at the named node."""
    group = group_of(1, "found-")
    with nodes[0].connect() as c:
        answer = c.request(FindCoordinatorRequest(key=group), 2)
        assert isinstance(answer, FindCoordinatorResponse)
    with Connection(answer.host, answer.port) as owner:
        assert owner.address == (nodes[1].host, nodes[1].port)
        join = JoinGroupRequest(
            group_id=group,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol("range", b"")],
        )
        joined = owner.request(join, 4)
        assert isinstance(joined, JoinGroupResponse)
        assert joined.error_code == ErrorCode.MEMBER_ID_REQUIRED
