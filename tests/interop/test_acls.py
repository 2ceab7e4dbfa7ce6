"""ACLs through kafka-python's KafkaAdminClient against the real `fastcoord serve`: those
created at runtime are in the offsets log and come back after a SIGKILL, deletions too;
those of the configuration are in force at every start and never written.

A plaintext listener's principal is User:ANONYMOUS, made a super user here so that the
admin client may manage ACLs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import ClusterAuthorizationFailedError, NoError

from fastcoord.testing import ServerProcess, fastcoord_server

# Real clients and servers, many of them: CI runs these once, in a job of their own.
pytestmark = pytest.mark.security

TIMEOUT_MS = 15_000
CONFIGURED = {
    "principal": "User:ops",
    "resource_type": "Cluster",
    "resource_name": "kafka-cluster",
    "operation": "Describe",
}
ARGS = (
    "--authorizer-class-name",
    "StandardAuthorizer",
    "--super-users",
    "User:ANONYMOUS",
    "--acl",
    json.dumps(CONFIGURED),
)
EVERY_ACL = ACLFilter(
    principal=None,
    host=None,
    operation=ACLOperation.ANY,
    permission_type=ACLPermissionType.ANY,
    resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
)
CONFIGURED_ACL = ACL(
    "User:ops",
    "*",
    ACLOperation.DESCRIBE,
    ACLPermissionType.ALLOW,
    ResourcePattern(ResourceType.CLUSTER, "kafka-cluster"),
)
CREATED = [
    ACL(
        "User:alice",
        "*",
        ACLOperation.READ,
        ACLPermissionType.ALLOW,
        ResourcePattern(ResourceType.TOPIC, "orders-", ACLResourcePatternType.PREFIXED),
    ),
    ACL(
        "User:alice",
        "*",
        ACLOperation.READ,
        ACLPermissionType.ALLOW,
        ResourcePattern(ResourceType.GROUP, "billing"),
    ),
    ACL(
        "User:*",
        "10.1.2.3",
        ACLOperation.ALL,
        ACLPermissionType.DENY,
        ResourcePattern(ResourceType.TOPIC, "*"),
    ),
]


@contextmanager
def admin(server: ServerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(
        bootstrap_servers=server.bootstrap, client_id="acls", request_timeout_ms=TIMEOUT_MS
    )
    try:
        yield client
    finally:
        client.close()


def described(server: ServerProcess) -> set[ACL]:
    with admin(server) as client:
        acls, error = client.describe_acls(EVERY_ACL)
    assert error is NoError
    return set(acls)


def killed(server: ServerProcess) -> None:
    server.kill()


def test_created_and_deleted_acls_survive_sigkill(tmp_path: Path) -> None:
    with fastcoord_server(tmp_path, *ARGS) as server:
        assert described(server) == {CONFIGURED_ACL}
        with admin(server) as client:
            result = client.create_acls(CREATED)
        assert (result["succeeded"], result["failed"]) == (CREATED, [])
        assert described(server) == {CONFIGURED_ACL, *CREATED}
        killed(server)  # acknowledged: durable, whatever happens next

    with fastcoord_server(tmp_path, *ARGS) as server:
        assert described(server) == {CONFIGURED_ACL, *CREATED}
        alice = ACLFilter(
            "User:alice",
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        with admin(server) as client:
            [(_, deleted, error)] = client.delete_acls([alice])
            # The configuration's ACL may be deleted too: until the next start.
            [(_, gone, _)] = client.delete_acls(
                [
                    ACLFilter(
                        "User:ops",
                        None,
                        ACLOperation.ANY,
                        ACLPermissionType.ANY,
                        ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
                    )
                ]
            )
        assert error is NoError
        assert set(deleted) == set(CREATED[:2])
        assert gone == [CONFIGURED_ACL]
        assert described(server) == {CREATED[2]}
        killed(server)

    with fastcoord_server(tmp_path, *ARGS) as server:
        assert described(server) == {CONFIGURED_ACL, CREATED[2]}


def test_without_alter_on_the_cluster_acls_cannot_be_changed(tmp_path: Path) -> None:
    # ANONYMOUS is no super user here: it may describe the cluster (so its ACLs), no more.
    anonymous = dict(CONFIGURED, principal="User:ANONYMOUS")
    args = ("--authorizer-class-name", "StandardAuthorizer", "--acl", json.dumps(anonymous))
    with fastcoord_server(tmp_path, *args) as server:
        with admin(server) as client:
            result = client.create_acls(CREATED[:1])
            acls, error = client.describe_acls(EVERY_ACL)
        assert result["succeeded"] == []
        assert result["failed"] == [ClusterAuthorizationFailedError]  # its error class
        assert error is NoError
        assert [a.principal for a in acls] == ["User:ANONYMOUS"]
