"""The ACLs of the log: CreateAcls and DeleteAcls write records, are answered once those are
durable, and replaying the records rebuilds the ACLs in force."""

from __future__ import annotations

from fastcoord.core.coordinator import Coordinator
from fastcoord.core.native import partition
from fastcoord.core.records import ACL_PARTITION, AclKey, AclValue, Record
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    AclCreation,
    CreateAclsRequest,
    DeleteAclsFilter,
    DeleteAclsRequest,
    DescribeAclsRequest,
)
from fastcoord.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
)
from tests.core.harness import Harness

ALICE_READS_T = AclCreation(2, "t", 3, "User:alice", "*", 3, 3)
BOB_WRITES_PREFIX = AclCreation(2, "o-", 4, "User:bob", "*", 4, 2)
CONFIGURED = AclBinding(
    ResourceType.GROUP,
    "g",
    PatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)
EVERY_FILTER = DeleteAclsFilter(1, None, 1, None, None, 1, 1)


def harness() -> tuple[Harness, Authorizer]:
    h = Harness()
    authorizer = Authorizer(["User:admin"], bindings=[CONFIGURED])
    h.co.acls.enable(authorizer, frozenset([CONFIGURED]))
    return h, authorizer


def reloaded(h: Harness) -> Authorizer:
    """A new coordinator with the same configuration, its log replayed as at a start."""
    co = Coordinator()
    authorizer = Authorizer(["User:admin"], bindings=[CONFIGURED])
    co.acls.enable(authorizer, frozenset([CONFIGURED]))
    for record in h.records:
        co.replay(record, h.now, loading=True)
    return authorizer


def test_acl_records_go_to_partition_0_whatever_the_partition_count() -> None:
    record = Record(AclKey(2, "t", 3, "User:a", "*", 3, 3), AclValue())
    assert ACL_PARTITION == 0
    assert {partition.partition_for(record.group_id, n) for n in (1, 3, 50, 1000)} == {0}


def test_created_acls_are_answered_once_durable_and_come_back_from_the_log() -> None:
    h, authorizer = harness()
    h.hold_appends = True
    handle = h.send(CreateAclsRequest([ALICE_READS_T, BOB_WRITES_PREFIX, ALICE_READS_T]), 3)
    assert h.answer(handle) is None  # not before the records are durable
    assert len(authorizer) == 1  # nor in force
    h.ack()
    assert [r.error_code for r in h.answer(handle).results] == [ErrorCode.NONE] * 3
    assert len(h.records) == 2  # the same ACL twice is one record
    assert len(authorizer) == 3
    assert set(reloaded(h)) == set(authorizer)


def test_creating_an_acl_that_exists_writes_nothing() -> None:
    h, _ = harness()
    h.send(CreateAclsRequest([ALICE_READS_T]), 3)
    written = len(h.records)
    assert [
        r.error_code for r in h.answer(h.send(CreateAclsRequest([ALICE_READS_T]), 3)).results
    ] == [ErrorCode.NONE]
    assert len(h.records) == written


def test_a_failed_write_answers_each_creation_and_changes_nothing() -> None:
    h, authorizer = harness()
    h.hold_appends = True
    handle = h.send(
        CreateAclsRequest([ALICE_READS_T, AclCreation(2, "", 3, "User:a", "*", 3, 3)]), 3
    )
    h.ack(ErrorCode.NOT_ENOUGH_REPLICAS)
    results = h.answer(handle).results
    assert [r.error_code for r in results] == [
        ErrorCode.COORDINATOR_NOT_AVAILABLE,  # Kafka's answer to a failed append
        ErrorCode.INVALID_REQUEST,
    ]
    assert results[1].error_message == "Resource name should not be empty"
    assert len(authorizer) == 1


def test_deleted_acls_are_tombstoned_and_stay_deleted_but_configured_ones_return() -> None:
    h, authorizer = harness()
    h.send(CreateAclsRequest([ALICE_READS_T, BOB_WRITES_PREFIX]), 3)
    deleted = h.answer(
        h.send(DeleteAclsRequest([EVERY_FILTER, DeleteAclsFilter(2, None, 1, None, None, 1, 1)]), 3)
    )
    matched = [[m.resource_name for m in r.matching_acls] for r in deleted.filter_results]
    # Each filter lists what it matched; every ACL gets one tombstone.
    assert matched == [["o-", "t", "g"], ["o-", "t"]]
    assert [r.value for r in h.records[-3:]] == [None, None, None]
    assert len(authorizer) == 0
    # The configuration's ACL is in force again at the next start; the others stay gone.
    assert set(reloaded(h)) == {CONFIGURED}


def test_describe_groups_the_acls_by_resource() -> None:
    h, _ = harness()
    h.send(CreateAclsRequest([ALICE_READS_T, AclCreation(2, "t", 3, "User:bob", "*", 8, 3)]), 3)
    described = h.answer(h.send(DescribeAclsRequest(2, None, 1, None, None, 1, 1), 3))
    assert described.error_code == ErrorCode.NONE
    assert [(r.resource_name, [a.principal for a in r.acls]) for r in described.resources] == [
        ("t", ["User:alice", "User:bob"])
    ]
    bad = h.answer(h.send(DescribeAclsRequest(0, None, 1, None, None, 1, 1), 3))
    assert bad.error_code == ErrorCode.INVALID_REQUEST


def test_acls_are_changed_only_where_partition_0_is_loaded_and_owned() -> None:
    h, _ = harness()
    h.co.loading_partitions.add(0)
    loading = h.answer(h.send(CreateAclsRequest([ALICE_READS_T]), 3))
    assert loading.results[0].error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    h.co.loading_partitions.clear()
    h.co.owned_partitions = {1, 2}
    elsewhere = h.answer(h.send(DeleteAclsRequest([EVERY_FILTER]), 3))
    assert elsewhere.filter_results[0].error_code == ErrorCode.NOT_CONTROLLER
    assert h.records == []
