"""ACLs as each client library meets them, against one real `fastcoord serve` run with
StandardAuthorizer: kafka-python, confluent-kafka (librdkafka), aiokafka and the Java client
(under the java marker) log in over SASL_SSL (or show a client certificate over mutual TLS)
and each reports a refusal as its own authorization error, as against Kafka; confluent-kafka
and the Java client in Kafka's consumer group protocol (KIP-848) too.

The server's users are alice, bob and admin (a super user). Its ACLs:

- alice may Read groups whose names begin with `alice-`, and Read every topic but
  `secret` (a DENY);
- alice is denied Read on group `alice-secret` (LITERAL), and everyone (`User:*`) on the
  groups whose names begin with `alice-frozen`: one DENY wins over any ALLOW, and a DENY
  of Read takes nothing else away (alice may still describe both);
- the principal of the certificate `client` may Read groups beginning with `mtls-` and
  topic `events`; the certificate `stranger` has no ACL of its own;
- everyone may Describe topic `events`, so that what a principal is refused is the group.

The PLAINTEXT listener's principal, User:ANONYMOUS, is a super user: the tests look at the
server's groups and offsets through it. ACLs made at runtime go through CreateAcls and
DeleteAcls of the admin clients (their survival of a SIGKILL is test_acls.py's).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import aiokafka.errors
import kafka.errors
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.helpers import create_ssl_context
from aiokafka.structs import TopicPartition as AioPartition
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from cryptography import x509
from cryptography.x509.oid import NameOID
from kafka import KafkaAdminClient, KafkaConsumer, OffsetAndMetadata, TopicPartition
from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType
from kafka.admin import ACLResourcePatternType as KafkaPatternType
from kafka.admin import ResourcePattern as KafkaPattern
from kafka.admin import ResourcePatternFilter as KafkaPatternFilter
from kafka.admin import ResourceType as KafkaResourceType

from fastcoord import testing_java
from fastcoord.protocol.messages import (
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from fastcoord.testing import Certificates, ServerProcess, certificates, fastcoord_server
from fastcoord.testing_java import JavaMember
from tests.interop.secured import (
    PASSWORDS,
    Security,
    _pem_keystore,
    aiokafka_config,
    assert_no_secrets,
    confluent_config,
    describe_group,
    java_properties,
    kafka_python_config,
    listed_groups,
    listener_args,
    logged_in,
    user_args,
)

# Real clients and servers, many of them: CI runs these once, in a job of their own.
pytestmark = pytest.mark.security

Secured = tuple[ServerProcess, Certificates]
T = TypeVar("T")

TOPIC = "events"
PARTITIONS = 3
ALL = frozenset(range(PARTITIONS))
SECRET = "secret"  # a topic alice is denied Read on
OFFSETS = {p: 100 + 7 * p for p in ALL}
MOVED = 500  # events-0's offset in a commit that also names the secret topic
SESSION_MS = 1500
HEARTBEAT_MS = 100
DEADLINE_S = 15.0
ADMIN_PASSWORD = "admin-Pw-5Tn$2wQ"
EVERY_PASSWORD = {**PASSWORDS, "admin": ADMIN_PASSWORD}

# Each user logs in with another mechanism: the ACLs know the principal, not how it came.
ALICE = Security("SASL_SSL", "SASL_SSL", "SCRAM-SHA-512")
BOB = Security("SASL_SSL", "SASL_SSL", "SCRAM-SHA-256", user="bob")
MTLS = Security("MTLS", "SSL", client_cert=True)  # shows the certificate `client`
CERTIFICATES = ("client", "stranger")

JAVA = pytest.mark.java
PYTHON_CLIENTS = ("kafka-python", "confluent", "aiokafka")
# confluent-consumer: confluent-kafka in Kafka's consumer group protocol (KIP-848).
REFUSED_CLIENTS = (*PYTHON_CLIENTS, "confluent-consumer")


# -- the server ----------------------------------------------------------------------------


def acl(
    principal: str,
    resource_type: str,
    name: str,
    operation: str,
    *,
    pattern: str = "LITERAL",
    permission: str = "Allow",
) -> str:
    return json.dumps(
        {
            "principal": principal,
            "resource_type": resource_type,
            "resource_name": name,
            "pattern_type": pattern,
            "operation": operation,
            "permission": permission,
        }
    )


# The characters Java's X500Principal.getName() escapes with a backslash, wherever they are
# (sun.security.x509.AVA.toRFC2253String), and the keywords it writes.
JAVA_ESCAPED = ',=+<>#;"\\'
KEYWORDS = {
    NameOID.COMMON_NAME: "CN",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
}


def java_name(name: x509.Name) -> str:
    """A distinguished name as Java's X500Principal.getName() writes it (RFC 2253, most
    specific first)."""

    def escaped(value: str) -> str:
        assert value == value.strip(), f"{value!r}: Java escapes its outer spaces too"
        return "".join("\\" + c if c in JAVA_ESCAPED else c for c in value)

    return ",".join(
        "+".join(f"{KEYWORDS[a.oid]}={escaped(str(a.value))}" for a in rdn)
        for rdn in reversed(name.rdns)
    )


def certificate_principal(chain: Path) -> str:
    """Kafka's default principal of a client showing this certificate: "User:" and its
    subject as Java writes it (trustme's OU, "Testing cert #...", has a `#` it escapes)."""
    cert = x509.load_pem_x509_certificate(chain.read_bytes())  # the first: the client's
    return "User:" + java_name(cert.subject)


def configured_acls(client_principal: str) -> list[str]:
    return [
        acl("User:alice", "Group", "alice-", "Read", pattern="PREFIXED"),
        acl("User:alice", "Topic", "*", "Read"),
        acl("User:alice", "Topic", SECRET, "Read", permission="Deny"),
        acl("User:alice", "Group", "alice-secret", "Read", permission="Deny"),
        acl("User:*", "Group", "alice-frozen", "Read", pattern="PREFIXED", permission="Deny"),
        acl(client_principal, "Group", "mtls-", "Read", pattern="PREFIXED"),
        acl(client_principal, "Topic", TOPIC, "Read"),
        acl("User:*", "Topic", TOPIC, "Describe"),
    ]


def authorizer_args(client_principal: str) -> list[str]:
    return [
        "--authorizer-class-name",
        "StandardAuthorizer",
        "--super-users",
        "User:admin;User:ANONYMOUS",
        *(arg for entry in configured_acls(client_principal) for arg in ("--acl", entry)),
    ]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("acls")
    certs = certificates(directory / "certs", CERTIFICATES)
    principal = certificate_principal(certs.clients["client"][0])
    with fastcoord_server(
        directory,
        "--in-memory",
        "--group-initial-rebalance-delay-ms",
        "0",
        "--group-min-session-timeout-ms",
        "500",
        "--topic",
        f"{TOPIC}:{PARTITIONS}",
        "--topic",
        f"{SECRET}:1",
        *listener_args(certs),
        *user_args(PASSWORDS),
        "--user",
        f"admin:{ADMIN_PASSWORD}",
        *authorizer_args(principal),
    ) as server:
        yield server, certs
    log = server.log()
    assert "Traceback" not in log, log
    assert_no_secrets(log, EVERY_PASSWORD)


# -- each client's settings -------------------------------------------------------------------


def as_admin(client: str, config: dict[str, Any]) -> dict[str, Any]:
    """A client's settings for ALICE's listener, logged in as admin (with PLAIN) instead."""
    if client == "confluent":
        return {
            **config,
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": ADMIN_PASSWORD,
        }
    return {
        **config,
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "admin",
        "sasl_plain_password": ADMIN_PASSWORD,
    }


def client_config(
    client: str, server: ServerProcess, certs: Certificates, sec: Security, certificate: str
) -> dict[str, Any]:
    """The client's settings for `sec`, showing the client certificate `certificate` (one
    of CERTIFICATES) if `sec` shows one."""
    kind = client.removesuffix("-consumer")
    config: dict[str, Any] = {
        "kafka-python": kafka_python_config,
        "confluent": confluent_config,
        "aiokafka": aiokafka_config,
    }[kind](server, certs, sec)
    if not sec.client_cert or certificate == "client":
        return config
    chain, key = certs.clients[certificate]
    if kind == "kafka-python":
        config.update(ssl_certfile=str(chain), ssl_keyfile=str(key))
    elif kind == "confluent":
        config.update({"ssl.certificate.location": str(chain), "ssl.key.location": str(key)})
    else:
        config["ssl_context"] = create_ssl_context(
            cafile=str(certs.ca), certfile=str(chain), keyfile=str(key)
        )
    return config


def consumer_settings(client: str, group: str) -> dict[str, Any]:
    """The group settings of each client, in its own names."""
    if client.startswith("confluent"):
        settings: dict[str, Any] = {
            "group.id": group,
            "client.id": group,
            "enable.auto.commit": False,
        }
        if client == "confluent-consumer":
            settings["group.protocol"] = "consumer"  # the coordinator sets the session
        else:
            settings["session.timeout.ms"] = SESSION_MS
            settings["heartbeat.interval.ms"] = HEARTBEAT_MS
        return settings
    return {
        "group_id": group,
        "client_id": group,
        "enable_auto_commit": False,
        "session_timeout_ms": SESSION_MS,
        "heartbeat_interval_ms": HEARTBEAT_MS,
    }


def wait_until(condition: Callable[[], bool], what: Callable[[], str]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, what()
        time.sleep(0.02)


def run(scenario: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(scenario, 2 * DEADLINE_S))


# -- what the server holds, seen by a super user ----------------------------------------------


def offsets_on_server(server: ServerProcess, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets as OffsetFetch (of every topic) through the PLAINTEXT
    listener answers them."""
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10_000)
    try:
        found = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    return {(tp.topic, tp.partition): meta.offset for tp, meta in found.items()}


def assert_never_created(server: ServerProcess, group: str) -> None:
    """A refused member leaves nothing behind: no group, no rebalance."""
    assert group not in listed_groups(server)
    assert describe_group(server, group).group_state == "Dead"
    assert f"group {group}: rebalance started" not in server.log()


def assert_committed_as_kafka_does(server: ServerProcess, group: str) -> None:
    """OFFSETS were committed, then events-0 moved to MOVED, by a commit that named the
    secret topic too where the client sends one: Kafka refuses the secret partition and
    commits the others."""
    assert offsets_on_server(server, group) == {
        **{(TOPIC, p): o for p, o in OFFSETS.items()},
        (TOPIC, 0): MOVED,
    }


# -- refusals, as each client reports them -----------------------------------------------------


def kafka_python_member(config: Mapping[str, Any], group: str) -> KafkaConsumer:
    """A kafka-python consumer subscribed to events, which knows the topic's partitions
    before its first poll: kafka-python 3.0.12 strands a leader whose first assignment was
    made without them (its rejoin never completes; see kafka_python_member.py)."""
    consumer = KafkaConsumer(**config, **consumer_settings("kafka-python", group))
    try:
        consumer.subscribe([TOPIC])
        assert consumer.partitions_for_topic(TOPIC) == ALL
    except BaseException:
        consumer.close()
        raise
    return consumer


def kafka_python_joined(config: Mapping[str, Any], group: str) -> KafkaConsumer:
    """A kafka-python member of `group`, once it holds every partition of events."""
    consumer = kafka_python_member(config, group)
    try:

        def joined() -> bool:
            consumer.poll(timeout_ms=20)
            return {tp.partition for tp in consumer.assignment()} == ALL

        wait_until(joined, lambda: f"kafka-python holds {consumer.assignment()} of {group}")
    except BaseException:
        consumer.close()
        raise
    return consumer


def kafka_python_refusal(config: Mapping[str, Any], group: str) -> Exception:
    """The error kafka-python's poll raises for a member of `group` (subscribed to events)."""
    consumer = KafkaConsumer(**config, **consumer_settings("kafka-python", group))
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                consumer.poll(timeout_ms=50)
            except kafka.errors.KafkaError as exc:
                return exc
            assert not consumer.assignment(), f"kafka-python joined {group}"
            assert time.monotonic() < deadline, f"kafka-python: no error in {group}"
    finally:
        consumer.close()


def confluent_refusal(client: str, config: Mapping[str, Any], group: str) -> KafkaError:
    """The first error confluent-kafka's poll returns for a member of `group` (or its
    error_cb reports)."""
    reported: list[KafkaError] = []
    consumer = Consumer({**config, **consumer_settings(client, group), "error_cb": reported.append})
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + DEADLINE_S
        while True:
            message = consumer.poll(0.05)
            error = None if message is None else message.error()
            if error is not None:
                return error
            if reported:
                return reported[0]
            assert not consumer.assignment(), f"confluent joined {group}"
            assert time.monotonic() < deadline, f"confluent: no error in {group}"
    finally:
        consumer.close()


def aiokafka_refusal(config: Mapping[str, Any], group: str) -> Exception:
    """The error aiokafka's start or getmany raises for a member of `group`."""

    async def scenario() -> Exception:
        consumer = AIOKafkaConsumer(TOPIC, **config, **consumer_settings("aiokafka", group))
        try:
            await consumer.start()
            deadline = time.monotonic() + DEADLINE_S
            while True:
                await consumer.getmany(timeout_ms=50)
                assert not consumer.assignment(), f"aiokafka joined {group}"
                assert time.monotonic() < deadline, f"aiokafka: no error in {group}"
        except aiokafka.errors.KafkaError as exc:
            return exc
        finally:
            await consumer.stop()

    return run(scenario())


def assert_group_refused(
    client: str, config: dict[str, Any], group: str, *, describable: bool = False
) -> None:
    """A member of `group` fails with the client's own group authorization error.
    `describable`: the principal may Describe the group (FindCoordinator answers it), so
    the refusal comes from JoinGroup or ConsumerGroupHeartbeat, which need Read."""
    if client == "kafka-python":
        error: object = kafka_python_refusal(config, group)
        assert isinstance(error, kafka.errors.GroupAuthorizationFailedError), repr(error)
        assert group in str(error)
    elif client == "aiokafka":
        error = aiokafka_refusal(config, group)
        assert isinstance(error, aiokafka.errors.GroupAuthorizationFailedError), repr(error)
        assert group in str(error)
    else:
        error = confluent_refusal(client, config, group)
        assert isinstance(error, KafkaError)
        if client == "confluent-consumer" and describable:
            # Refused by ConsumerGroupHeartbeat: librdkafka makes GROUP_AUTHORIZATION_FAILED
            # a fatal error there, the consumer's last.
            assert error.code() == KafkaError._FATAL, error
            assert "Group authorization failed" in error.str(), error
        else:
            # Refused by FindCoordinator, or JoinGroup: librdkafka reports it, not fatal.
            assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
            assert not error.fatal(), error
            step = "JoinGroup" if describable else "FindCoordinator"
            assert error.str().startswith(step), error


# -- 1. a group alice may Read, and one she may not -------------------------------------------


def test_kafka_python_member_joins_commits_and_fetches(secured: Secured) -> None:
    server, certs = secured
    group = "alice-orders-kafka-python"
    config = kafka_python_config(server, certs, ALICE)
    consumer = kafka_python_joined(config, group)
    try:
        assert describe_group(server, group).group_state == "Stable"
        commits = {
            TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in OFFSETS.items()
        }
        consumer.commit(commits)
        assert {p: consumer.committed(TopicPartition(TOPIC, p)) for p in ALL} == OFFSETS

        with pytest.raises(kafka.errors.TopicAuthorizationFailedError) as refused:
            consumer.commit(
                {
                    TopicPartition(TOPIC, 0): OffsetAndMetadata(MOVED, "", -1),
                    TopicPartition(SECRET, 0): OffsetAndMetadata(5, "", -1),
                }
            )
        assert SECRET in str(refused.value)
        assert consumer.committed(TopicPartition(SECRET, 0)) is None
    finally:
        consumer.close()
    assert_committed_as_kafka_does(server, group)


@pytest.mark.parametrize("client", ["confluent", "confluent-consumer"])
def test_confluent_member_joins_commits_and_fetches(secured: Secured, client: str) -> None:
    server, certs = secured
    group = f"alice-orders-{client}"
    config = confluent_config(server, certs, ALICE)
    reported: list[KafkaError] = []
    consumer = Consumer({**config, **consumer_settings(client, group), "error_cb": reported.append})
    try:
        consumer.subscribe([TOPIC])

        def joined() -> bool:
            message = consumer.poll(0.02)
            assert message is None or message.error() is None, message.error()
            return {tp.partition for tp in consumer.assignment()} == ALL

        wait_until(joined, lambda: f"confluent holds {consumer.assignment()}")
        assert group in listed_groups(server)
        commits = [ConfluentPartition(TOPIC, p, o) for p, o in OFFSETS.items()]
        done = consumer.commit(offsets=commits, asynchronous=False)
        assert [tp.error for tp in done] == [None] * PARTITIONS
        wanted = [ConfluentPartition(TOPIC, p) for p in ALL]
        found = consumer.committed(wanted, timeout=10)
        assert {tp.partition: tp.offset for tp in found} == OFFSETS

        with pytest.raises(KafkaException) as refused:
            consumer.commit(
                offsets=[ConfluentPartition(TOPIC, 0, MOVED), ConfluentPartition(SECRET, 0, 5)],
                asynchronous=False,
            )
        error = refused.value.args[0]
        assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
        (secret,) = consumer.committed([ConfluentPartition(SECRET, 0)], timeout=10)
        assert secret.error is None and secret.offset < 0  # nothing committed
        assert reported == []
    finally:
        consumer.close()
    assert_committed_as_kafka_does(server, group)


def test_aiokafka_member_joins_commits_and_fetches(secured: Secured) -> None:
    server, certs = secured
    group = "alice-orders-aiokafka"
    config = aiokafka_config(server, certs, ALICE)

    async def scenario() -> None:
        # aiokafka commits only partitions the member holds: it subscribes to the secret
        # topic too (alice may describe it). It never calls getmany, so its fetches of the
        # secret topic, which Kafka refuses, do not come up.
        consumer = AIOKafkaConsumer(TOPIC, SECRET, **config, **consumer_settings("aiokafka", group))
        await consumer.start()
        try:
            held = {AioPartition(TOPIC, p) for p in ALL} | {AioPartition(SECRET, 0)}
            deadline = time.monotonic() + DEADLINE_S
            while consumer.assignment() != held:
                assert time.monotonic() < deadline, f"aiokafka holds {consumer.assignment()}"
                await asyncio.sleep(0.02)
            assert describe_group(server, group).group_state == "Stable"
            await consumer.commit({AioPartition(TOPIC, p): o for p, o in OFFSETS.items()})
            committed = {p: await consumer.committed(AioPartition(TOPIC, p)) for p in ALL}
            assert committed == OFFSETS

            with pytest.raises(aiokafka.errors.TopicAuthorizationFailedError) as refused:
                await consumer.commit({AioPartition(TOPIC, 0): MOVED, AioPartition(SECRET, 0): 5})
            assert SECRET in str(refused.value)
            assert await consumer.committed(AioPartition(SECRET, 0)) is None
        finally:
            await consumer.stop()

    run(scenario())
    assert_committed_as_kafka_does(server, group)


@pytest.mark.parametrize("client", REFUSED_CLIENTS)
def test_a_group_alice_may_not_read_is_her_clients_authorization_error(
    secured: Secured, client: str
) -> None:
    server, certs = secured
    group = "bob-orders"
    assert_group_refused(client, client_config(client, server, certs, ALICE, "client"), group)
    assert_never_created(server, group)


# -- 2. ListGroups and DescribeGroups show what the user may describe --------------------------


def made_by_admin(server: ServerProcess, certs: Certificates, groups: list[str]) -> None:
    """The super user commits an offset in each group (no member): each exists, Empty."""
    for group in groups:
        config = as_admin("confluent", confluent_config(server, certs, ALICE))
        consumer = Consumer({**config, "group.id": group, "enable.auto.commit": False})
        try:
            done = consumer.commit(offsets=[ConfluentPartition(TOPIC, 0, 3)], asynchronous=False)
            assert [tp.error for tp in done] == [None]
        finally:
            consumer.close()


def listings(config: Mapping[str, Any], admin_config: Mapping[str, Any]) -> dict[str, set[str]]:
    """The groups each admin client's ListGroups names, logged in with these settings
    (kafka-python's names for kafka-python and aiokafka, librdkafka's for confluent)."""
    kafka_python = KafkaAdminClient(**config, request_timeout_ms=10_000)
    try:
        by_kafka_python = {g["group_id"] for g in kafka_python.list_groups()}
    finally:
        kafka_python.close()

    async def by_aiokafka() -> set[str]:
        aio_config = {k: v for k, v in config.items() if not k.startswith("ssl_")}
        aio_config["ssl_context"] = create_ssl_context(cafile=config["ssl_cafile"])
        client = AIOKafkaAdminClient(**aio_config)
        await client.start()
        try:
            return {group for group, _ in await client.list_consumer_groups()}
        finally:
            await client.close()

    confluent = AdminClient(dict(admin_config))  # kept: a dropped one ends its requests
    listed = confluent.list_consumer_groups().result(timeout=DEADLINE_S)
    assert listed.errors == []
    return {
        "kafka-python": by_kafka_python,
        "aiokafka": run(by_aiokafka()),
        "confluent": {g.group_id for g in listed.valid},
    }


def test_list_groups_names_only_the_groups_a_user_may_describe(secured: Secured) -> None:
    server, certs = secured
    made_by_admin(server, certs, ["alice-ledger", "bob-ledger"])
    kafka_python = kafka_python_config(server, certs, ALICE)
    confluent = confluent_config(server, certs, ALICE)
    admin = listings(as_admin("kafka-python", kafka_python), as_admin("confluent", confluent))
    alice = listings(kafka_python, confluent)
    bob = listings(kafka_python_config(server, certs, BOB), confluent_config(server, certs, BOB))

    everything = listed_groups(server)  # ANONYMOUS, a super user too
    assert {"alice-ledger", "bob-ledger"} <= everything
    for client in ("kafka-python", "aiokafka", "confluent"):
        assert admin[client] == everything, client
        # ALLOW Read implies Describe; a DENY of Read (alice-secret, alice-frozen...)
        # takes Describe away from no one, so alice sees all of alice-*.
        assert alice[client] == {g for g in everything if g.startswith("alice-")}, client
        assert bob[client] == set(), client  # bob may describe no group


def test_describe_groups_refuses_a_group_in_its_entry(secured: Secured) -> None:
    server, certs = secured
    made_by_admin(server, certs, ["alice-ledger", "bob-ledger"])

    # The request itself: the refused group's entry is GROUP_AUTHORIZATION_FAILED (30)
    # with nothing else filled in; the other entry is answered.
    conn, _ = logged_in(server, certs, "SASL_SSL", "SCRAM-SHA-512", "alice")
    with conn:
        response = conn.request(DescribeGroupsRequest(groups=["bob-ledger", "alice-ledger"]), 5)
    assert isinstance(response, DescribeGroupsResponse)
    bob_entry, alice_entry = response.groups
    assert (bob_entry.group_id, bob_entry.error_code) == ("bob-ledger", 30)
    assert (bob_entry.group_state, bob_entry.members) == ("", [])
    assert (alice_entry.group_id, alice_entry.error_code) == ("alice-ledger", 0)
    assert alice_entry.group_state == "Empty"

    kafka_python = kafka_python_config(server, certs, ALICE)
    confluent = AdminClient(confluent_config(server, certs, ALICE))
    (node,) = confluent.list_topics(timeout=DEADLINE_S).brokers

    # The admin clients: without the coordinator's id each asks FindCoordinator first,
    # which Describe Group also guards; given it, the DescribeGroups entry tells.
    future = confluent.describe_consumer_groups(["bob-ledger"])["bob-ledger"]
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=DEADLINE_S)
    assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    described = confluent.describe_consumer_groups(["alice-ledger"])["alice-ledger"]
    assert described.result(timeout=DEADLINE_S).group_id == "alice-ledger"

    client = KafkaAdminClient(**kafka_python, request_timeout_ms=10_000)
    try:
        with pytest.raises(kafka.errors.GroupAuthorizationFailedError):
            client.describe_groups(["bob-ledger"])
        entry = client.describe_groups(["bob-ledger"], group_coordinator_id=node)["bob-ledger"]
        assert "GroupAuthorizationFailedError" in str(entry["error"]), entry
        entry = client.describe_groups(["alice-ledger"])["alice-ledger"]
        assert (entry["error"], entry["group_state"]) == (None, "Empty")
    finally:
        client.close()

    async def by_aiokafka() -> None:
        config = {k: v for k, v in kafka_python.items() if not k.startswith("ssl_")}
        config["ssl_context"] = create_ssl_context(cafile=str(certs.ca))
        admin = AIOKafkaAdminClient(**config)
        await admin.start()
        try:
            with pytest.raises(aiokafka.errors.GroupAuthorizationFailedError):
                await admin.describe_consumer_groups(["bob-ledger"])
            (answer,) = await admin.describe_consumer_groups(
                ["bob-ledger"], group_coordinator_id=node
            )
            ((error_code, group_id, *_),) = answer.groups
            assert (error_code, group_id) == (30, "bob-ledger")
        finally:
            await admin.close()

    run(by_aiokafka())


# -- 3. DENY wins over ALLOW ---------------------------------------------------------------------


@pytest.mark.parametrize("group", ["alice-secret", "alice-frozen"])
@pytest.mark.parametrize("client", REFUSED_CLIENTS)
def test_a_deny_wins_over_an_allow(secured: Secured, client: str, group: str) -> None:
    """alice may Read every alice-* group, but alice-secret is denied to her (LITERAL) and
    alice-frozen* to everyone (PREFIXED, User:*)."""
    server, certs = secured
    config = client_config(client, server, certs, ALICE, "client")
    assert_group_refused(client, config, group, describable=True)
    assert_never_created(server, group)


def test_a_deny_leaves_other_names_and_super_users_alone(secured: Secured) -> None:
    """The LITERAL DENY of alice-secret is not one of alice-secretary; a super user is
    allowed what a DENY of User:* refuses."""
    server, certs = secured
    alice = kafka_python_config(server, certs, ALICE)
    for config, group in [
        (alice, "alice-secretary"),
        (as_admin("kafka-python", alice), "alice-frozen-by-admin"),
    ]:
        consumer = kafka_python_joined(config, group)
        try:
            assert describe_group(server, group).group_state == "Stable"
        finally:
            consumer.close()


def test_a_deny_of_read_takes_nothing_else_away(secured: Secured) -> None:
    """alice may not Read alice-frozen-ledger (everyone is denied it) but may Describe it:
    her ALLOW of Read implies Describe, and a DENY of Read refuses Read alone. So she
    describes the group and fetches its offsets (OffsetFetch needs Describe), and may
    not commit to it."""
    server, certs = secured
    group = "alice-frozen-ledger"
    made_by_admin(server, certs, [group])
    alice = kafka_python_config(server, certs, ALICE)
    admin = KafkaAdminClient(**alice, request_timeout_ms=10_000)
    try:
        entry = admin.describe_groups([group])[group]
        assert (entry["error"], entry["group_state"]) == (None, "Empty"), entry
        offsets = admin.list_group_offsets({group: None})[group]
        assert {(tp.topic, tp.partition): m.offset for tp, m in offsets.items()} == {(TOPIC, 0): 3}
    finally:
        admin.close()

    consumer = KafkaConsumer(**alice, **consumer_settings("kafka-python", group))
    try:
        with pytest.raises(kafka.errors.GroupAuthorizationFailedError):
            consumer.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(9, "", -1)})
    finally:
        consumer.close()
    assert offsets_on_server(server, group) == {(TOPIC, 0): 3}


# -- 4. the principal of a client certificate ----------------------------------------------------


@pytest.mark.parametrize("client", PYTHON_CLIENTS)
def test_a_certificates_principal_is_given_its_acls(secured: Secured, client: str) -> None:
    server, certs = secured
    group = f"mtls-orders-{client}"
    config = client_config(client, server, certs, MTLS, "client")
    if client == "kafka-python":
        consumer = kafka_python_joined(config, group)
        try:
            consumer.commit({TopicPartition(TOPIC, 1): OffsetAndMetadata(11, "", -1)})
        finally:
            consumer.close()
    elif client == "confluent":
        member = Consumer({**config, **consumer_settings(client, group)})
        try:
            member.subscribe([TOPIC])

            def joined_confluent() -> bool:
                message = member.poll(0.02)
                assert message is None or message.error() is None, message.error()
                return {tp.partition for tp in member.assignment()} == ALL

            wait_until(joined_confluent, lambda: f"confluent holds {member.assignment()}")
            member.commit(offsets=[ConfluentPartition(TOPIC, 1, 11)], asynchronous=False)
        finally:
            member.close()
    else:

        async def scenario() -> None:
            consumer = AIOKafkaConsumer(TOPIC, **config, **consumer_settings(client, group))
            await consumer.start()
            try:
                deadline = time.monotonic() + DEADLINE_S
                while len(consumer.assignment()) < PARTITIONS:
                    assert time.monotonic() < deadline, f"aiokafka holds {consumer.assignment()}"
                    await consumer.getmany(timeout_ms=20)
                await consumer.commit({AioPartition(TOPIC, 1): 11})
            finally:
                await consumer.stop()

        run(scenario())
    assert offsets_on_server(server, group) == {(TOPIC, 1): 11}

    # The same group, to a certificate whose principal has no ACL.
    stranger = client_config(client, server, certs, MTLS, "stranger")
    assert_group_refused(client, stranger, f"mtls-orders-{client}-stranger")
    assert_never_created(server, f"mtls-orders-{client}-stranger")


def test_a_name_is_written_as_java_writes_it() -> None:
    """java_name, which the ACLs of the certificates' principals are made with, against
    what Java 17's X500Principal.getName() wrote for this name."""
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fastcoord tests"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "Testing cert #abc"),
            x509.NameAttribute(NameOID.COMMON_NAME, 'a,b+c;d<e>f=g"h\\i #j'),
        ]
    )
    java = r"CN=a\,b\+c\;d\<e\>f\=g\"h\\i \#j,OU=Testing cert \#abc,O=fastcoord tests"
    assert java_name(name) == java


# -- 5. ACLs made and taken away at runtime -----------------------------------------------------


def bob_may(resource_type: ResourceType, name: str) -> AclBinding:
    return AclBinding(
        resource_type,
        name,
        ResourcePatternType.LITERAL,
        "User:bob",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )


def bobs_acls(resource_type: ResourceType = ResourceType.ANY) -> AclBindingFilter:
    return AclBindingFilter(
        resource_type,
        None,
        ResourcePatternType.ANY,
        "User:bob",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )


def test_runtime_acls_open_and_close_a_group(secured: Secured) -> None:
    """confluent-kafka's AdminClient, as the super user, gives bob Read on a group (and on
    the topic, which his fetches and commits need); he joins it and commits. When the
    group's ACL is deleted his live member is cut off (its heartbeats are refused, so its
    session lapses, and its rejoin is refused), and a fresh member is refused too."""
    server, certs = secured
    group = "bob-runtime"
    bob = confluent_config(server, certs, BOB)
    admin = AdminClient(as_admin("confluent", confluent_config(server, certs, ALICE)))
    on_group, on_topic = bob_may(ResourceType.GROUP, group), bob_may(ResourceType.TOPIC, TOPIC)
    assert_group_refused("confluent", bob, group)

    created = admin.create_acls([on_group, on_topic])
    try:
        assert [created[b].result(timeout=DEADLINE_S) for b in (on_group, on_topic)] == [None] * 2
        listed = admin.describe_acls(bobs_acls()).result(timeout=DEADLINE_S)
        assert sorted(map(str, listed)) == sorted(map(str, [on_group, on_topic]))

        reported: list[KafkaError] = []
        consumer = Consumer(
            {**bob, **consumer_settings("confluent", group), "error_cb": reported.append}
        )
        try:
            consumer.subscribe([TOPIC])

            def joined() -> bool:
                message = consumer.poll(0.02)
                assert message is None or message.error() is None, message.error()
                return {tp.partition for tp in consumer.assignment()} == ALL

            wait_until(joined, lambda: f"bob holds {consumer.assignment()}")
            assert describe_group(server, group).group_state == "Stable"
            done = consumer.commit(offsets=[ConfluentPartition(TOPIC, 2, 22)], asynchronous=False)
            assert [tp.error for tp in done] == [None]

            groups = bobs_acls(ResourceType.GROUP)
            deleted = admin.delete_acls([groups])[groups].result(timeout=DEADLINE_S)
            assert [str(b) for b in deleted] == [str(on_group)]

            errors: list[KafkaError] = []

            def cut_off() -> bool:
                message = consumer.poll(0.02)
                if message is not None and message.error() is not None:
                    errors.append(message.error())
                return bool(errors)

            wait_until(cut_off, lambda: f"bob's member was not cut off; it holds {ALL}")
            assert errors[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED, errors
            assert reported == []
            # The coordinator keeps the member until its session lapses: nothing of bob's
            # reaches it now.
            wait_until(
                lambda: describe_group(server, group).group_state == "Empty",
                lambda: f"{group} is {describe_group(server, group)}",
            )
        finally:
            consumer.close()
    finally:
        every = bobs_acls()
        admin.delete_acls([every])[every].result(timeout=DEADLINE_S)
    assert admin.describe_acls(bobs_acls()).result(timeout=DEADLINE_S) == []
    assert offsets_on_server(server, group) == {(TOPIC, 2): 22}
    assert_group_refused("confluent", bob, group)  # a fresh member: refused again


# -- 6. only a super user changes ACLs ---------------------------------------------------------


# Every ACL: ANY (1) of each code, no name, principal or host.
ANY_ACL = DescribeAclsRequest(
    resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
)


def test_a_user_without_alter_on_the_cluster_cannot_change_acls(secured: Secured) -> None:
    server, certs = secured
    wanted = ("User:alice", "bob-orders")  # what alice would give herself
    every = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )

    kafka_python = KafkaAdminClient(**kafka_python_config(server, certs, ALICE))
    kp_every = ACLFilter(
        None,
        None,
        ACLOperation.ANY,
        ACLPermissionType.ANY,
        KafkaPatternFilter(KafkaResourceType.ANY, None, KafkaPatternType.ANY),
    )
    try:
        result = kafka_python.create_acls(
            [
                ACL(
                    wanted[0],
                    "*",
                    ACLOperation.READ,
                    ACLPermissionType.ALLOW,
                    KafkaPattern(KafkaResourceType.GROUP, wanted[1]),
                )
            ]
        )
        assert result == {
            "succeeded": [],
            "failed": [kafka.errors.ClusterAuthorizationFailedError],
        }
        [(_, matched, error)] = kafka_python.delete_acls([kp_every])
        assert (matched, error) == ([], kafka.errors.ClusterAuthorizationFailedError)
        with pytest.raises(kafka.errors.ClusterAuthorizationFailedError):
            kafka_python.describe_acls(kp_every)
    finally:
        kafka_python.close()

    confluent = AdminClient(confluent_config(server, certs, ALICE))
    binding = AclBinding(
        ResourceType.GROUP,
        wanted[1],
        ResourcePatternType.LITERAL,
        wanted[0],
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    futures = {
        "CreateAcls": confluent.create_acls([binding])[binding],
        "DeleteAcls": confluent.delete_acls([every])[every],
    }
    for what, future in futures.items():
        try:
            answer = future.result(timeout=DEADLINE_S)
        except KafkaException as exc:
            error = exc.args[0]
            assert error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, (what, error)
        else:
            pytest.fail(f"alice's {what} through confluent-kafka was answered {answer!r}")
    # librdkafka drops DescribeAcls' top-level error code (rd_kafka_DescribeAclsResponse_parse
    # returns no error whatever the code): a refusal reaches it as an empty listing. The
    # answer itself is CLUSTER_AUTHORIZATION_FAILED, without ACLs.
    assert confluent.describe_acls(every).result(timeout=DEADLINE_S) == []
    conn, _ = logged_in(server, certs, "SASL_SSL", "SCRAM-SHA-512", "alice")
    with conn:
        for version in range(4):  # each version DescribeAcls has
            answer = conn.request(ANY_ACL, version)
            assert isinstance(answer, DescribeAclsResponse)
            assert (answer.error_code, answer.resources) == (31, []), (version, answer)

    # Nothing changed: the configuration's ACLs, and still no ACL for bob-orders.
    admin = AdminClient(as_admin("confluent", confluent_config(server, certs, ALICE)))
    acls = admin.describe_acls(every).result(timeout=DEADLINE_S)
    assert len(acls) == len(configured_acls("User:client"))
    assert not [b for b in acls if b.name == wanted[1]]
    assert_group_refused("confluent", confluent_config(server, certs, ALICE), wanted[1])


# -- the Java client ------------------------------------------------------------------------------


@contextmanager
def java_members(
    specs: Mapping[str, tuple[str, dict[str, str | int]]],
) -> Iterator[dict[str, JavaMember]]:
    """Java members started together (a JVM takes a while to start, several hardly longer):
    name -> (group, properties with bootstrap.servers); closed together at the end."""
    members: dict[str, JavaMember] = {}
    try:
        for name, (group, properties) in specs.items():
            props = dict(properties)
            bootstrap = str(props.pop("bootstrap.servers"))
            members[name] = testing_java.start_member(
                bootstrap, [TOPIC], group, name=name, properties=props
            )
        yield members
    finally:
        for member in members.values():
            if member.process.poll() is None:
                with suppress(BrokenPipeError):
                    member.send("close")
        codes = {name: member.close() for name, member in members.items()}
    assert codes == dict.fromkeys(members, 0), {n: members[n].log() for n in codes}


def java_refusal(member: JavaMember, group: str) -> None:
    member.wait_for(lambda: bool(member.errors))
    wrong = [e for e in member.errors if "GroupAuthorizationException" not in e]
    assert not wrong, wrong
    assert f"Not authorized to access group: {group}" in member.errors[0]
    assert not member.assignment


@JAVA
def test_java_client(secured: Secured) -> None:
    server, certs = secured
    classic = {"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS}
    alice = {**java_properties(server, certs, ALICE), **classic}
    mtls = {**java_properties(server, certs, MTLS), **classic}
    chain, key = certs.clients["stranger"]
    stranger = {
        **mtls,
        "ssl.keystore.location": str(
            _pem_keystore(chain, key, certs.directory / "stranger-keystore.pem")
        ),
    }
    consumer_protocol = {**java_properties(server, certs, ALICE), "group.protocol": "consumer"}
    refused = {
        "bob-orders": ("bob-orders", alice),
        "alice-secret": ("alice-secret", alice),
        "alice-frozen": ("alice-frozen", alice),
        "alice-secret-consumer": ("alice-secret", consumer_protocol),
        "stranger": ("mtls-orders-java-stranger", stranger),
    }
    specs = {
        "alice": ("alice-orders-java", alice),
        "mtls": ("mtls-orders-java", mtls),
        **refused,
    }
    with java_members(specs) as members:
        member = members["alice"]
        member.wait_for(lambda: member.partitions(TOPIC) == ALL)
        for partition, offset in OFFSETS.items():
            member.commit(TOPIC, partition, offset)
        assert {p: member.fetch(TOPIC, p) for p in ALL} == OFFSETS
        with pytest.raises(RuntimeError, match="TopicAuthorizationException"):
            member.commit(SECRET, 0, 5)
        member.commit(TOPIC, 0, MOVED)
        assert member.fetch(SECRET, 0) is None

        by_certificate = members["mtls"]
        by_certificate.wait_for(lambda: by_certificate.partitions(TOPIC) == ALL)
        by_certificate.commit(TOPIC, 1, 11)

        for name, (group, _) in refused.items():
            java_refusal(members[name], group)
    assert_committed_as_kafka_does(server, "alice-orders-java")
    assert offsets_on_server(server, "mtls-orders-java") == {(TOPIC, 1): 11}
    for group, _ in refused.values():
        assert_never_created(server, group)
