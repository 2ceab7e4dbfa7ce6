"""Every client library through every kind of secured listener of one real `fastcoord serve`.

kafka-python, confluent-kafka (librdkafka), aiokafka and the Java client (under the java
marker), each logging in with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 over SASL_PLAINTEXT and
SASL_SSL, then over SSL alone, and with a client certificate over mutual TLS: each one
joins a group of its own, syncs, heartbeats (and outlives its session timeout: only
answered heartbeats keep it), commits offsets and reads them back. Over mutual TLS a client
without a certificate gets nowhere. Hostname verification stays on in every client (the
server's certificate names 127.0.0.1). One server serves the whole module, with short
sessions, so that the matrix takes seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import aiokafka.errors
import kafka.errors
import pytest

from fastcoord.testing import Certificates, ServerProcess
from tests.interop.secured import (
    MECHANISMS,
    SASL_PROTOCOLS,
    Security,
    admin_group,
    assert_no_secrets,
    describe_group,
    rebalances,
    secured_server,
)
from tests.interop.secured_members import (
    CLIENTS,
    JavaGroupMember,
    SecuredMember,
    start_member,
    wait_owned,
)

# Real clients and servers, many of them: CI runs these once, in a job of their own.
pytestmark = pytest.mark.security

TOPIC = "events"
PARTITIONS = 3
ALL = frozenset(range(PARTITIONS))
SESSION_MS = 1500
HEARTBEAT_MS = 100
HOLD_S = 4.5 * HEARTBEAT_MS / 1000  # a few heartbeats' time


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ServerProcess, Certificates]]:
    with secured_server(
        tmp_path_factory.mktemp("secured"),
        "--topic",
        f"{TOPIC}:{PARTITIONS}",
        "--group-min-session-timeout-ms",
        "500",
        "--admin-port",
        "0",
    ) as running:
        yield running


def sasl_cases(clients: tuple[str, ...]) -> list[Any]:
    return [
        pytest.param(client, Security(p, p, m), id=f"{client}-{p}-{m}")
        for client in clients
        for p in SASL_PROTOCOLS
        for m in MECHANISMS
    ]


def tls_cases(clients: tuple[str, ...]) -> list[Any]:
    return [
        *(pytest.param(c, Security("SSL", "SSL"), id=f"{c}-SSL") for c in clients),
        *(
            pytest.param(c, Security("MTLS", "SSL", client_cert=True), id=f"{c}-mTLS")
            for c in clients
        ),
    ]


JAVA = pytest.mark.java
CASES = [
    *sasl_cases(CLIENTS),
    *tls_cases(CLIENTS),
    *(pytest.param(*p.values, id=p.id, marks=JAVA) for p in sasl_cases(("java",))),
    *(pytest.param(*p.values, id=p.id, marks=JAVA) for p in tls_cases(("java",))),
]


def group_of(client: str, sec: Security) -> str:
    return f"{client}-{sec.listener}-{sec.mechanism or 'tls'}".lower()


def member_of(
    client: str, server: ServerProcess, certs: Certificates, sec: Security
) -> SecuredMember:
    return start_member(
        client,
        server,
        certs,
        sec,
        topic=TOPIC,
        group=group_of(client, sec),
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
    )


class JavaMembers:
    """The Java members of the cases selected in this module, by group, started together: a
    JVM takes seconds to start and to close, and several do so in the time of a few. A test
    takes its member, and hands it back closing; close_all() waits for them all."""

    def __init__(self) -> None:
        self.waiting: dict[str, JavaGroupMember] = {}
        self.closing: list[JavaGroupMember] = []

    def take(self, group: str) -> JavaGroupMember:
        return self.waiting.pop(group)

    def hand_back(self, member: JavaGroupMember) -> None:
        member.begin_close()
        self.closing.append(member)

    def close_all(self) -> None:
        for member in self.waiting.values():
            member.begin_close()
        members = [*self.closing, *self.waiting.values()]
        self.waiting, self.closing = {}, []
        for member in members:
            member.close()  # raises if it did not exit cleanly


@pytest.fixture(scope="module")
def java_members(
    request: pytest.FixtureRequest, secured: tuple[ServerProcess, Certificates]
) -> Iterator[JavaMembers]:
    server, certs = secured
    selected = [
        params["sec"]
        for item in request.session.items
        if getattr(item, "module", None) is request.module
        and (params := getattr(getattr(item, "callspec", None), "params", {})).get("client")
        == "java"
        and "sec" in params
    ]
    members = JavaMembers()
    try:
        for sec in selected:
            member = member_of("java", server, certs, sec)
            assert isinstance(member, JavaGroupMember)
            members.waiting[group_of("java", sec)] = member
        yield members
    finally:
        members.close_all()
    assert_no_secrets(server.log())


@pytest.mark.parametrize(("client", "sec"), CASES)
def test_a_member_joins_heartbeats_commits_and_fetches(
    request: pytest.FixtureRequest,
    secured: tuple[ServerProcess, Certificates],
    client: str,
    sec: Security,
) -> None:
    server, certs = secured
    group = group_of(client, sec)
    java: JavaMembers | None = None
    if client == "java":
        java = request.getfixturevalue("java_members")
        member: SecuredMember = java.take(group)
    else:
        member = member_of(client, server, certs, sec)
    try:
        wait_owned(member, ALL)  # joined and synced: the one member holds every partition
        formed = len(rebalances(server.log(), group))
        assert formed >= 1

        deadlines = heartbeats_received(server, group, HOLD_S)
        assert len(deadlines) >= 3, f"its session deadline moved {len(deadlines) - 1} times"
        log = server.log()
        assert member.owned == ALL
        assert len(rebalances(log, group)) == formed, rebalances(log, group)
        assert f"group {group}: member expired" not in log
        described = describe_group(server, group)
        assert (described.group_state, len(described.members)) == ("Stable", 1)

        offsets = {p: 100 + 7 * p for p in ALL}
        member.commit(offsets)
        assert member.committed(ALL) == offsets
    finally:
        if java is not None:
            assert isinstance(member, JavaGroupMember)
            java.hand_back(member)  # closed with the others: a JVM's close takes a while
        else:
            member.close()
    assert_no_secrets(server.log())


def heartbeats_received(server: ServerProcess, group: str, hold_s: float) -> list[int]:
    """Watch the group's one member through the admin port for `hold_s`, and until its
    session deadline has moved twice (each heartbeat the coordinator received moves it on)
    however slowly a busy machine gets there: the deadlines it had, in order. The
    generation and the member must not change meanwhile."""
    first = admin_group(server, group)
    (member,) = first["members"]
    deadlines = [member["session_deadline_ms"]]
    end = time.monotonic() + hold_s
    give_up = end + 20
    while time.monotonic() < end or len(deadlines) < 3:
        assert time.monotonic() < give_up, f"its session deadline moved {len(deadlines) - 1} times"
        time.sleep(HEARTBEAT_MS / 4000)
        now = admin_group(server, group)
        assert (now["state"], now["generation"]) == (first["state"], first["generation"])
        assert [m["member_id"] for m in now["members"]] == [member["member_id"]]
        deadline = now["members"][0]["session_deadline_ms"]
        if deadline != deadlines[-1]:
            deadlines.append(deadline)
    return deadlines


MTLS_CLIENTS = [*CLIENTS, pytest.param("java", marks=JAVA)]


@pytest.mark.parametrize("client", MTLS_CLIENTS)
def test_mutual_tls_refuses_a_client_without_a_certificate(
    secured: tuple[ServerProcess, Certificates], client: str
) -> None:
    server, certs = secured
    group = f"{client}-mtls-no-certificate"
    before = server.log().count("on listener MTLS failed")
    sec = Security("MTLS", "SSL", client_cert=False)
    refused = _refused_member(client, server, certs, sec, group)
    assert refused, f"{client} joined {group} over mutual TLS without a certificate"
    deadline = time.monotonic() + 5
    while server.log().count("on listener MTLS failed") == before:
        assert time.monotonic() < deadline, "no TLS handshake failure logged for MTLS"
        time.sleep(0.05)
    with server.connect() as conn:  # the server carries on
        assert conn.api_versions()
    assert describe_group(server, group).group_state == "Dead"


# What a client's constructor raises when it cannot reach any broker: nothing else counts.
CONNECTION_ERRORS = (
    kafka.errors.KafkaTimeoutError,
    kafka.errors.KafkaConnectionError,
    aiokafka.errors.KafkaConnectionError,
)


def _refused_member(
    client: str, server: ServerProcess, certs: Certificates, sec: Security, group: str
) -> bool:
    """Start a member where it cannot connect: True when it failed to, within a few
    seconds (its constructor raised, or it holds nothing and reported errors)."""
    # Each client's own bound on a connection that never becomes usable.
    extra: dict[str, Any] = {
        "kafka-python": {"bootstrap_timeout_ms": 1500, "request_timeout_ms": 3000},
        "confluent": {},
        "aiokafka": {"request_timeout_ms": 3000},
        "java": {},
    }[client]
    try:
        member = start_member(
            client,
            server,
            certs,
            sec,
            topic=TOPIC,
            group=group,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            extra=extra,
        )
    except CONNECTION_ERRORS:
        return True
    try:
        deadline = time.monotonic() + 8
        while not member.errors:
            if member.owned or time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        time.sleep(0.5)
        return not member.owned
    finally:
        member.close()
