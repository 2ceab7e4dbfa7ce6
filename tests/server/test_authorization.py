"""Authorization through the server: each API's ACL check as Kafka makes it, a request at a
time through Server.dispatch (and commit_offsets), answers decoded from the bytes a
connection would send.

alice may read (so describe) group g and every topic starting with "t"; "secret" is a
topic she may not touch; admin is a super user; carol has no ACL at all.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from fastcoord.config import ServerConfig
from fastcoord.protocol import framing
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    AclCreation,
    ApiVersionsRequest,
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreateAclsRequest,
    DeleteAclsFilter,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DescribeAclsRequest,
    DescribeGroupsRequest,
    FetchPartition,
    FetchRequest,
    FetchTopic,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
    MetadataRequest,
    MetadataRequestTopic,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    SyncGroupRequest,
)
from fastcoord.protocol.schema import Request
from fastcoord.security.entries import AclEntry
from fastcoord.server.app import Server
from fastcoord.server.connection import Slot
from fastcoord.storage.memory import MemoryStore

OK = ErrorCode.NONE
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
READ, DESCRIBE, DELETE = 3, 8, 6


def acl_entry(resource_type: str, name: str, operation: str, **fields: str) -> dict[str, str]:
    """An ACL of alice's (or of `principal`), as the configuration writes it."""
    return {
        "principal": "User:alice",
        "resource_type": resource_type,
        "resource_name": name,
        "operation": operation,
    } | fields


ALICE = [
    acl_entry("Group", "g", "Read"),
    {
        "principal": "User:alice",
        "resource_type": "Topic",
        "resource_name": "t",
        "pattern_type": "PREFIXED",
        "operation": "Read",
    },
]


class Conn:
    """A connection without a socket: a principal, a host, and the bytes it is given."""

    def __init__(self, server: Server, principal: str, host: str = "/10.0.0.1") -> None:
        self.dispatcher = server
        self.principal = principal
        self.client_host = host
        self.peer = host[1:] + ":5000"
        self.endpoint = None
        self.closed = False

    def fill(self, slot: Slot, data: bytes) -> None:
        slot.data = data


class Bench:
    """A server on a store that acknowledges when told, and its clients by principal."""

    def __init__(self, acls: list[dict[str, str]], authorize: bool = True, **settings: Any):
        config = ServerConfig(
            in_memory=True,
            event_log=False,
            topics=["t1:2", "t2:2", "secret:2"],
            group_initial_rebalance_delay_ms=0,
            authorizer_class_name="StandardAuthorizer" if authorize else "",
            super_users=["User:admin"],
            acl=[AclEntry(**a) for a in acls],
            **settings,
        )
        self.store = MemoryStore(config.offsets_topic_num_partitions)
        self.server = Server(config, self.store, max_connections=10)
        self.reports: list[Callable[[], None]] = []
        self.store.start(self.reports.append, self.server.appended)
        self._ids = itertools.count(1)

    def send(self, principal: str, request: Request, version: int, host: str = "/10.0.0.1") -> Slot:
        """Dispatch `request` as `principal` would send it; every write is then durable."""
        conn = Conn(self.server, principal, host)
        header = RequestHeader(request.API_KEY, version, next(self._ids), "client")
        slot = Slot(conn, header)  # type: ignore[arg-type]
        if isinstance(request, OffsetCommitRequest):
            batch = OffsetCommitBatch.from_request(request, version)
            self.server.commit_offsets([(slot, batch)])
        else:
            self.server.dispatch(slot, header, request)
        self.settle()
        return slot

    def settle(self) -> None:
        self.server.run_assignments()  # the server's assign task, at once
        while self.reports:
            self.reports.pop(0)()

    def ask(self, principal: str, request: Request, version: int, host: str = "/10.0.0.1") -> Any:
        """The answer to `request`, as its client decodes it."""
        slot = self.send(principal, request, version, host)
        return answer(slot)


def answer(slot: Slot) -> Any:
    assert slot.data is not None, "not answered"
    correlation_id, response = framing.decode_response(slot.api_key, slot.version, slot.data[4:])
    assert correlation_id == slot.correlation_id
    return response


@pytest.fixture
def bench() -> Bench:
    b = Bench(ALICE)
    for group, topic in (("g", "t1"), ("g", "secret"), ("other", "t1")):
        assert commit(b, "User:admin", group, {topic: [0]}) == [OK]
    return b


def commit(b: Bench, principal: str, group: str, topics: dict[str, list[int]]) -> list[int]:
    response = b.ask(
        principal,
        OffsetCommitRequest(
            group_id=group,
            topics=[
                OffsetCommitRequestTopic(t, [OffsetCommitRequestPartition(p, 10 + p) for p in ps])
                for t, ps in topics.items()
            ],
        ),
        8,
    )
    return [p.error_code for t in response.topics for p in t.partitions]


def join(group: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol("range", b"")],
    )


# -- who passes ------------------------------------------------------------------------------


def test_authorization_is_off_without_an_authorizer() -> None:
    b = Bench([], authorize=False)
    assert b.server.authorization is None
    assert b.server.fast_path_allowed("User:anyone")
    assert b.ask("User:carol", join("g"), 7).error_code == ErrorCode.MEMBER_ID_REQUIRED
    # Kafka's answer to the ACL APIs without an authorizer.
    assert b.ask("User:admin", DescribeAclsRequest(1, None, 1, None, None, 1, 1), 3).error_code == (
        ErrorCode.SECURITY_DISABLED
    )


def test_super_users_pass_and_alone_keep_the_heartbeat_fast_path(bench: Bench) -> None:
    assert bench.ask("User:admin", join("anything"), 7).error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert bench.server.fast_path_allowed("User:admin")
    assert not bench.server.fast_path_allowed("User:alice")


def test_api_versions_is_always_answered(bench: Bench) -> None:
    assert bench.ask("User:carol", ApiVersionsRequest("c", "1"), 3).error_code == OK


def test_no_acl_for_a_resource_is_a_refusal_unless_everyone_is_allowed() -> None:
    closed = Bench(ALICE)
    assert closed.ask("User:carol", join("free"), 7).error_code == GROUP_DENIED
    opened = Bench(ALICE, allow_everyone_if_no_acl_found=True)
    assert opened.ask("User:carol", join("free"), 7).error_code == ErrorCode.MEMBER_ID_REQUIRED
    # g has ACLs (alice's): carol is not let in by the setting.
    assert opened.ask("User:carol", join("g"), 7).error_code == GROUP_DENIED


def test_an_acl_of_another_host_does_not_apply() -> None:
    b = Bench([acl_entry("Group", "g", "Read", principal="User:dave", host="10.0.0.2")])
    assert b.ask("User:dave", join("g"), 7, host="/10.0.0.1").error_code == GROUP_DENIED
    assert b.ask("User:dave", join("g"), 7, host="/10.0.0.2").error_code == (
        ErrorCode.MEMBER_ID_REQUIRED
    )


# -- group membership ----------------------------------------------------------------------------


def test_group_membership_needs_read_on_the_group(bench: Bench) -> None:
    assert bench.ask("User:alice", join("g"), 7).error_code == ErrorCode.MEMBER_ID_REQUIRED
    refused = [
        (join("other"), 7),
        (HeartbeatRequest("other", 1, "m"), 4),
        (LeaveGroupRequest(group_id="other", member_id="m"), 2),
        (SyncGroupRequest(group_id="other", generation_id=1, member_id="m"), 5),
    ]
    for request, version in refused:
        assert bench.ask("User:alice", request, version).error_code == GROUP_DENIED, request


def test_find_coordinator_needs_describe_per_key(bench: Bench) -> None:
    assert bench.ask("User:alice", FindCoordinatorRequest(key="g"), 3).error_code == OK
    refused = bench.ask("User:alice", FindCoordinatorRequest(key="other"), 3)
    assert (refused.error_code, refused.node_id) == (GROUP_DENIED, -1)
    batched = bench.ask(
        "User:alice", FindCoordinatorRequest(coordinator_keys=["other", "g", "x"]), 4
    )
    assert [(c.key, c.error_code, c.node_id) for c in batched.coordinators] == [
        ("other", GROUP_DENIED, -1),
        ("g", OK, 0),
        ("x", GROUP_DENIED, -1),
    ]


def test_consumer_group_heartbeat_needs_read_on_the_group_and_describe_on_its_topics() -> None:
    b = Bench([*ALICE, acl_entry("Group", "cg", "Read")])

    def heartbeat(group: str, topics: list[str]) -> int:
        request = ConsumerGroupHeartbeatRequest(
            group_id=group,
            member_id=str(uuid.uuid4()),
            member_epoch=0,
            rebalance_timeout_ms=10_000,
            subscribed_topic_names=topics,
            topic_partitions=[],
        )
        return int(b.ask("User:alice", request, 0).error_code)

    assert heartbeat("other", ["t1"]) == GROUP_DENIED
    assert heartbeat("cg", ["t1", "secret"]) == TOPIC_DENIED
    assert heartbeat("cg", ["t1", "t2"]) == OK


def test_consumer_group_describe_hides_groups_and_groups_with_hidden_topics() -> None:
    b = Bench([*ALICE, acl_entry("Group", "cg", "Describe")])
    # admin's member of cg is assigned secret's partitions.
    joined = b.ask(
        "User:admin",
        ConsumerGroupHeartbeatRequest(
            group_id="cg",
            member_id=str(uuid.uuid4()),
            member_epoch=0,
            rebalance_timeout_ms=10_000,
            subscribed_topic_names=["secret"],
            topic_partitions=[],
        ),
        0,
    )
    assert joined.error_code == OK
    seen = b.ask("User:admin", ConsumerGroupDescribeRequest(["cg"]), 0).groups[0]
    assert {tp.topic_name for m in seen.members for tp in m.target_assignment.topic_partitions} == {
        "secret"
    }
    described = b.ask("User:alice", ConsumerGroupDescribeRequest(["other", "cg", "g"]), 0)
    assert [(g.group_id, g.error_code, g.members) for g in described.groups] == [
        ("other", GROUP_DENIED, []),
        ("cg", TOPIC_DENIED, []),
        ("g", ErrorCode.GROUP_ID_NOT_FOUND, []),  # passed on: the core's answer
    ]
    assert described.groups[1].error_message == (
        "The group has described topic(s) that the client is not authorized to describe."
    )


# -- offsets -------------------------------------------------------------------------------------


def test_a_commit_is_refused_whole_without_read_on_the_group(bench: Bench) -> None:
    assert commit(bench, "User:alice", "other", {"t1": [0, 1]}) == [GROUP_DENIED] * 2


def test_denied_partitions_get_29_and_the_others_are_committed(bench: Bench) -> None:
    codes = commit(bench, "User:alice", "g", {"t1": [0, 1], "secret": [1], "t2": [1]})
    assert codes == [OK, OK, TOPIC_DENIED, OK]
    committed = dict(bench.server.coordinator.offset_manager.offsets("g").items())
    assert {k: v.offset for k, v in committed.items()} == {
        ("t1", 0): 10,
        ("t1", 1): 11,
        ("t2", 1): 11,
        ("secret", 0): 10,  # admin's, before: alice's secret commit was not made
    }
    # A commit of nothing alice may read is answered at once, every partition 29.
    assert commit(bench, "User:alice", "g", {"secret": [0, 1]}) == [TOPIC_DENIED] * 2


def test_offset_fetch_refuses_the_group_then_each_partition(bench: Bench) -> None:
    refused = bench.ask("User:alice", OffsetFetchRequest(group_id="other", topics=[]), 7)
    assert refused.error_code == GROUP_DENIED
    asked = OffsetFetchRequest(
        group_id="g",
        topics=[
            OffsetFetchRequestTopic("t1", [0]),
            OffsetFetchRequestTopic("secret", [0, 1]),
            OffsetFetchRequestTopic("t2", [1]),
        ],
    )
    fetched = bench.ask("User:alice", asked, 7)
    assert [
        (t.name, [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions])
        for t in fetched.topics
    ] == [
        ("t1", [(0, 10, OK)]),
        ("secret", [(0, -1, TOPIC_DENIED), (1, -1, TOPIC_DENIED)]),
        ("t2", [(1, -1, OK)]),
    ]
    # Every offset of the group: only the topics alice may describe.
    every = bench.ask("User:alice", OffsetFetchRequest(group_id="g", topics=None), 7)
    assert [t.name for t in every.topics] == ["t1"]
    assert sorted(
        t.name
        for t in bench.ask("User:admin", OffsetFetchRequest(group_id="g", topics=None), 7).topics
    ) == ["secret", "t1"]


def test_offset_fetch_of_many_groups_refuses_each_in_its_entry(bench: Bench) -> None:
    asked = OffsetFetchRequest(
        groups=[
            OffsetFetchRequestGroup("other", topics=None),
            OffsetFetchRequestGroup(
                "g",
                topics=[
                    OffsetFetchRequestTopics("secret", [0]),
                    OffsetFetchRequestTopics("t1", [0]),
                ],
            ),
            OffsetFetchRequestGroup("g", topics=None),
        ]
    )
    fetched = bench.ask("User:alice", asked, 8)
    out = [
        (
            g.group_id,
            g.error_code,
            [
                (t.name, [(p.committed_offset, p.error_code) for p in t.partitions])
                for t in g.topics
            ],
        )
        for g in fetched.groups
    ]
    assert out == [
        ("other", GROUP_DENIED, []),
        ("g", OK, [("secret", [(-1, TOPIC_DENIED)]), ("t1", [(10, OK)])]),
        ("g", OK, [("t1", [(10, OK)])]),
    ]


def test_offset_delete_needs_delete_on_the_group_then_read_on_each_topic(bench: Bench) -> None:
    request = OffsetDeleteRequest(
        "g",
        [
            OffsetDeleteRequestTopic("secret", [OffsetDeleteRequestPartition(0)]),
            OffsetDeleteRequestTopic("t1", [OffsetDeleteRequestPartition(0)]),
        ],
    )
    assert bench.ask("User:alice", request, 0).error_code == GROUP_DENIED
    b = Bench([*ALICE, acl_entry("Group", "g", "Delete")])
    assert commit(b, "User:admin", "g", {"t1": [0], "secret": [0]}) == [OK, OK]
    deleted = b.ask("User:alice", request, 0)
    assert deleted.error_code == OK
    assert [(t.name, [p.error_code for p in t.partitions]) for t in deleted.topics] == [
        ("secret", [TOPIC_DENIED]),
        ("t1", [OK]),
    ]
    assert {k for k, _ in b.server.coordinator.offset_manager.offsets("g").items()} == {
        ("secret", 0)
    }


# -- group administration ----------------------------------------------------------------------


def test_describe_groups_refuses_each_group_in_its_entry(bench: Bench) -> None:
    described = bench.ask(
        "User:alice", DescribeGroupsRequest(["other", "g"], include_authorized_operations=True), 5
    )
    assert [(g.group_id, g.error_code) for g in described.groups] == [
        ("other", GROUP_DENIED),
        ("g", OK),
    ]
    # What alice may do to g: Read, and so Describe; not Delete.
    assert described.groups[1].authorized_operations == (1 << READ) | (1 << DESCRIBE)
    whole = bench.ask("User:admin", DescribeGroupsRequest(["g"], True), 5)
    assert whole.groups[0].authorized_operations == (1 << READ) | (1 << DESCRIBE) | (1 << DELETE)


def test_delete_groups_refuses_each_group_in_its_result(bench: Bench) -> None:
    b = Bench([*ALICE, acl_entry("Group", "gone", "Delete")])
    deleted = b.ask("User:alice", DeleteGroupsRequest(["g", "gone"]), 2)
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("g", GROUP_DENIED),
        ("gone", ErrorCode.GROUP_ID_NOT_FOUND),
    ]


def test_list_groups_lists_what_may_be_described_and_is_never_refused(bench: Bench) -> None:
    def listed(principal: str, b: Bench = bench) -> list[str]:
        response = b.ask(principal, ListGroupsRequest(), 4)
        assert response.error_code == OK
        return sorted(g.group_id for g in response.groups)

    assert listed("User:alice") == ["g"]
    assert listed("User:carol") == []
    assert listed("User:admin") == ["g", "other"]
    b = Bench([acl_entry("Cluster", "kafka-cluster", "Describe", principal="User:ops")])
    assert commit(b, "User:admin", "x", {"t1": [0]}) == [OK]
    assert listed("User:ops", b) == ["x"]


# -- the broker's answers ----------------------------------------------------------------------


def test_metadata_names_topics_that_may_be_described_and_refuses_the_others(bench: Bench) -> None:
    named = MetadataRequest(
        topics=[MetadataRequestTopic(name=n) for n in ("secret", "t1", "tnew")],
        allow_auto_topic_creation=True,
    )
    topics = bench.ask("User:alice", named, 12).topics
    # tnew would be created: that needs Create, on the cluster or the topic.
    assert [(t.name, t.error_code, len(t.partitions)) for t in topics] == [
        ("secret", TOPIC_DENIED, 0),
        ("t1", OK, 2),
        ("tnew", TOPIC_DENIED, 0),
    ]
    assert "tnew" not in bench.server.broker.topics
    every = bench.ask("User:alice", MetadataRequest(topics=None), 12)
    assert [t.name for t in every.topics] == ["t1", "t2"]
    assert [b.node_id for b in every.brokers] == [0]
    assert bench.ask("User:carol", MetadataRequest(topics=[]), 0).topics == []


def test_metadata_creates_a_topic_for_a_principal_who_may_create_it() -> None:
    b = Bench([*ALICE, acl_entry("Cluster", "kafka-cluster", "Create")])
    named = MetadataRequest(topics=[MetadataRequestTopic(name="tnew")])
    assert [(t.name, t.error_code) for t in b.ask("User:alice", named, 12).topics] == [("tnew", OK)]
    assert "tnew" in b.server.broker.topics


def test_list_offsets_and_fetch_refuse_each_partition_of_a_denied_topic(bench: Bench) -> None:
    listed = bench.ask(
        "User:alice",
        ListOffsetsRequest(
            replica_id=-1,
            topics=[
                ListOffsetsTopic("secret", [ListOffsetsPartition(0, timestamp=-1)]),
                ListOffsetsTopic("t1", [ListOffsetsPartition(1, timestamp=-1)]),
            ],
        ),
        7,
    )
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in listed.topics
    ] == [
        ("secret", [(0, TOPIC_DENIED)]),
        ("t1", [(1, OK)]),
    ]
    fetch = FetchRequest(
        max_wait_ms=0,
        topics=[
            FetchTopic("t1", [FetchPartition(0)]),
            FetchTopic("secret", [FetchPartition(0), FetchPartition(1)]),
        ],
    )
    fetched = bench.ask("User:alice", fetch, 12)
    assert [
        (t.topic, [(p.partition_index, p.error_code) for p in t.partitions])
        for t in fetched.responses
    ] == [
        ("t1", [(0, OK)]),
        ("secret", [(0, TOPIC_DENIED), (1, TOPIC_DENIED)]),
    ]
    # Nothing left to fetch: answered at once, however long the fetch may wait.
    waiting = FetchRequest(max_wait_ms=60_000, topics=[FetchTopic("secret", [FetchPartition(0)])])
    assert [t.topic for t in bench.ask("User:alice", waiting, 12).responses] == ["secret"]


# -- the ACL APIs --------------------------------------------------------------------------------

EVERY_ACL = DescribeAclsRequest(1, None, 1, None, None, 1, 1)
DENY_T1 = AclCreation(2, "t1", 3, "User:alice", "*", READ, 2)


def test_acl_apis_need_describe_or_alter_on_the_cluster(bench: Bench) -> None:
    described = bench.ask("User:alice", EVERY_ACL, 3)
    assert (described.error_code, described.resources) == (CLUSTER_DENIED, [])
    created = bench.ask("User:alice", CreateAclsRequest([DENY_T1, DENY_T1]), 3)
    assert [r.error_code for r in created.results] == [CLUSTER_DENIED] * 2
    deleted = bench.ask(
        "User:alice", DeleteAclsRequest([DeleteAclsFilter(1, None, 1, None, None, 1, 1)]), 3
    )
    assert [r.error_code for r in deleted.filter_results] == [CLUSTER_DENIED]
    assert len(bench.server.authorization.authorizer) == 2  # type: ignore[union-attr]


def test_acls_created_and_deleted_at_runtime_take_effect(bench: Bench) -> None:
    fetch = FetchRequest(max_wait_ms=0, topics=[FetchTopic("t1", [FetchPartition(0)])])
    assert bench.ask("User:alice", fetch, 12).responses[0].partitions[0].error_code == OK
    created = bench.ask("User:admin", CreateAclsRequest([DENY_T1]), 3)
    assert [r.error_code for r in created.results] == [OK]
    assert bench.ask("User:alice", fetch, 12).responses[0].partitions[0].error_code == TOPIC_DENIED
    resources = bench.ask("User:admin", EVERY_ACL, 3).resources
    assert [(r.resource_type, r.resource_name, r.pattern_type, len(r.acls)) for r in resources] == [
        (2, "t", 4, 1),
        (2, "t1", 3, 1),
        (3, "g", 3, 1),
    ]
    deleted = bench.ask(
        "User:admin", DeleteAclsRequest([DeleteAclsFilter(2, "t1", 3, None, None, 1, 2)]), 3
    )
    assert [
        (m.resource_name, m.permission_type) for m in deleted.filter_results[0].matching_acls
    ] == [("t1", 2)]
    assert bench.ask("User:alice", fetch, 12).responses[0].partitions[0].error_code == OK


# -- while the ACLs of the log load ----------------------------------------------------------------


def test_requests_an_acl_could_refuse_wait_until_the_acls_are_loaded(bench: Bench) -> None:
    server = bench.server
    server.coordinator.loading_partitions.add(0)
    waiting = [
        bench.send("User:alice", FindCoordinatorRequest(key="g"), 3),
        bench.send("User:admin", EVERY_ACL, 3),
    ]
    bench.send(
        "User:alice",
        OffsetCommitRequest(
            group_id="g",
            topics=[OffsetCommitRequestTopic("t1", [OffsetCommitRequestPartition(0, 99)])],
        ),
        8,
    )
    at_once = bench.send("User:admin", FindCoordinatorRequest(key="g"), 3)
    assert answer(at_once).error_code == OK  # a super user's need not wait
    assert [s.data for s in waiting] == [None, None]

    def tick() -> None:
        for key in server.later_wheel.advance(server.now_ms() + 1000):
            server._later.pop(key)()
        bench.settle()

    tick()  # still loading: kept again
    assert [s.data for s in waiting] == [None, None]
    server.coordinator.loading_partitions.discard(0)
    tick()
    assert answer(waiting[0]).error_code == OK
    assert answer(waiting[1]).error_code == OK
    assert server.coordinator.offset_manager.offsets("g").get(("t1", 0)).offset == 99  # type: ignore[union-attr]
