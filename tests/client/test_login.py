"""The client's TLS and SASL (fastcoord.client.login) against a real `fastcoord serve` with a
listener of each security protocol: each mechanism logs in on SASL_PLAINTEXT and SASL_SSL,
every round trip reported; a wrong password, an unknown user and a mechanism the listener
does not enable are refused with the error's name and the server's message; the server's
certificate is checked (its chain, and its name unless told not to); mutual TLS; and a TLS
connection's requests go through its TLS stream only, while a SASL_PLAINTEXT connection
keeps the descriptor paths of a plaintext one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scramp
import trio
import trustme

from fastcoord.client.connection import (
    MAX_RESPONSE_BYTES,
    Connection,
    LaneAnswer,
    TlsConnection,
    connection_type,
)
from fastcoord.client.lane import ROW
from fastcoord.client.login import ClientSecurity, LoginFailed, TlsFailed, scram_final
from fastcoord.client.native import heartbeat_template, make_lane, make_poller
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import MetadataRequest, MetadataResponse
from fastcoord.testing import Certificates, ServerProcess, certificates, fastcoord_server

HANDSHAKE, AUTHENTICATE = ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE
Round = tuple[int, int, int]  # (api key, latency in ns, error code)


@dataclass
class Secured:
    server: ServerProcess
    certs: Certificates

    def address(self, listener: str) -> tuple[str, int]:
        host, port = self.server.listener(listener).rsplit(":", 1)
        return host, int(port)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    """One server with a listener of each kind: SASL_SSL, SASL_PLAINTEXT, SSL, MTLS (SSL
    with client certificates required), PLAINONLY (SASL_PLAINTEXT with PLAIN alone)."""
    base = tmp_path_factory.mktemp("login")
    certs = certificates(base / "certs")
    listeners = ("PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT", "SSL", "MTLS", "PLAINONLY")
    with fastcoord_server(
        base,
        *(a for name in listeners for a in ("--listener", f"{name}://127.0.0.1:0")),
        "--listener-security-protocol-map",
        "MTLS:SSL,PLAINONLY:SASL_PLAINTEXT",
        "--listener-name",
        "MTLS.ssl.client.auth=required",
        "--listener-name",
        "PLAINONLY.sasl.enabled.mechanisms=PLAIN",
        *certs.server_args(),
        "--user",
        "alice:secret",
    ) as server:
        yield Secured(server, certs)


def sasl(protocol: str, mechanism: str, password: str = "secret", **tls: Any) -> ClientSecurity:
    return ClientSecurity(protocol, mechanism, "alice", password, **tls)


async def login(
    address: tuple[str, int], security: ClientSecurity, rounds: list[Round] | None = None
) -> MetadataResponse:
    """Open a connection as `security` says, ask for Metadata on it, close it."""
    connection = connection_type(security)(
        address,
        security=security,
        on_login=lambda *r: rounds.append(r) if rounds is not None else None,
    )
    await connection.open(5)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        response, _ = await connection.ask(MetadataRequest(topics=[]), 5)
        connection.close()
    assert isinstance(response, MetadataResponse)
    return response


# -- SCRAM's arithmetic ----------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_the_client_final_is_what_scramp_computes(mechanism: str) -> None:
    # RFC 7677's exchange (its salt and nonces) for both hashes: the cached keys must give
    # scramp's very message and server signature.
    server_first = (
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    ours, theirs = (
        scramp.ScramClient([mechanism], "user", "pencil", c_nonce="rOprNGfwEbeRWgbNEkqO")
        for _ in range(2)
    )
    for client in (ours, theirs):
        client.get_client_first()
        client.set_server_first(server_first)
    final, signature = scram_final(ours)
    assert final == theirs.get_client_final()
    theirs.set_server_final(f"v={signature}")  # raises if it is not the server's signature
    if mechanism == "SCRAM-SHA-256":
        assert final.endswith(",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")  # RFC 7677
    assert scram_final(ours) == (final, signature)  # again, from the cache


def test_users_are_numbered_into_the_name_and_the_password_is_never_described() -> None:
    many = ClientSecurity("sasl_ssl", None, "user-{n}", "pw", sasl_users=5)
    assert [many.username(n) for n in (0, 4)] == ["user-0", "user-4"]
    assert many.users == 5 and many.mechanism == "PLAIN" and many.tls and many.sasl
    assert ClientSecurity("ssl", sasl_users=5).users == 1  # no SASL: no users
    described = many.described()
    assert described["sasl_password"] == "(set)" and "pw" not in described.values()


# -- SASL -----------------------------------------------------------------------------------


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_each_mechanism_logs_in_and_reports_each_round_trip(
    secured: Secured, listener: str, mechanism: str
) -> None:
    address = secured.address(listener)
    tls = {"ssl_ca_location": str(secured.certs.ca)} if listener == "SASL_SSL" else {}
    rounds: list[Round] = []
    response = trio.run(login, address, sasl(listener.lower(), mechanism, **tls), rounds)
    # The listener names itself to its own clients.
    assert [(b.host, b.port) for b in response.brokers] == [address]
    tokens = 1 if mechanism == "PLAIN" else 2  # SCRAM: client-first, then client-final
    expected = [(HANDSHAKE, 0), *[(AUTHENTICATE, 0)] * tokens]
    assert [(api, code) for api, _, code in rounds] == expected
    assert all(0 < latency < 5e9 for _, latency, _ in rounds)


@pytest.mark.parametrize(
    ("user", "password"), [("alice", "wrong"), ("mallory", "secret")], ids=["password", "user"]
)
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_a_refused_login_says_the_error_and_the_servers_message(
    secured: Secured, mechanism: str, user: str, password: str
) -> None:
    rounds: list[Round] = []
    security = ClientSecurity("sasl_plaintext", mechanism, user, password)
    with pytest.raises(LoginFailed) as caught:
        trio.run(login, secured.address("SASL_PLAINTEXT"), security, rounds)
    assert (caught.value.api, caught.value.code) == (
        AUTHENTICATE,
        ErrorCode.SASL_AUTHENTICATION_FAILED,
    )
    assert str(caught.value) == (
        "SaslAuthenticate SASL_AUTHENTICATION_FAILED: Authentication failed during "
        f"authentication due to invalid credentials with SASL mechanism {mechanism}"
    )
    # The refusal is the last round, counted with its code like any answer.
    assert rounds[-1][0::2] == (AUTHENTICATE, ErrorCode.SASL_AUTHENTICATION_FAILED)
    assert rounds[0][0::2] == (HANDSHAKE, 0)


def test_a_mechanism_the_listener_does_not_enable_is_refused_at_the_handshake(
    secured: Secured,
) -> None:
    rounds: list[Round] = []
    with pytest.raises(LoginFailed) as caught:
        trio.run(
            login, secured.address("PLAINONLY"), sasl("sasl_plaintext", "SCRAM-SHA-512"), rounds
        )
    assert (caught.value.api, caught.value.code) == (
        HANDSHAKE,
        ErrorCode.UNSUPPORTED_SASL_MECHANISM,
    )
    assert str(caught.value) == "SaslHandshake UNSUPPORTED_SASL_MECHANISM: the server enables PLAIN"
    assert [(api, code) for api, _, code in rounds] == [
        (HANDSHAKE, ErrorCode.UNSUPPORTED_SASL_MECHANISM)
    ]
    trio.run(login, secured.address("PLAINONLY"), sasl("sasl_plaintext", "PLAIN"))


# -- TLS ------------------------------------------------------------------------------------


def test_the_servers_certificate_chain_is_checked(secured: Secured) -> None:
    with pytest.raises(TlsFailed, match="the server's certificate failed verification"):
        trio.run(login, secured.address("SSL"), ClientSecurity("ssl"))  # the system's CAs
    # TLS to a listener that speaks plaintext Kafka: it closes the connection.
    with pytest.raises(TlsFailed, match="the server closed the connection"):
        trio.run(
            login,
            secured.address("PLAINTEXT"),
            ClientSecurity("ssl", ssl_ca_location=str(secured.certs.ca)),
        )


def test_the_servers_name_is_checked_unless_endpoint_identification_is_none(
    tmp_path: Path,
) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("elsewhere.invalid").private_key_and_cert_chain_pem.write_to_path(
        str(tmp_path / "server.pem")
    )
    with fastcoord_server(
        tmp_path,
        "--listener",
        "SSL://127.0.0.1:0",
        "--ssl-keystore-location",
        str(tmp_path / "server.pem"),
    ) as server:
        address = (server.host, server.port)
        named = ClientSecurity("ssl", ssl_ca_location=str(tmp_path / "ca.pem"))
        with pytest.raises(TlsFailed, match="IP address mismatch, certificate is not valid"):
            trio.run(login, address, named)
        unnamed = ClientSecurity(
            "ssl",
            ssl_ca_location=str(tmp_path / "ca.pem"),
            ssl_endpoint_identification_algorithm="none",
        )
        assert trio.run(login, address, unnamed).brokers


def test_mutual_tls_needs_the_client_certificate(secured: Secured) -> None:
    address = secured.address("MTLS")
    ca = str(secured.certs.ca)
    with pytest.raises(TlsFailed, match="the server sent the TLS alert: certificate required"):
        trio.run(login, address, ClientSecurity("ssl", ssl_ca_location=ca))
    chain, key = secured.certs.clients["client"]
    mutual = ClientSecurity(
        "ssl",
        ssl_ca_location=ca,
        ssl_certificate_location=str(chain),
        ssl_key_location=str(key),
    )
    assert trio.run(login, address, mutual).brokers


# -- the connection's paths -----------------------------------------------------------------

HEARTBEATS = 3_000  # ~150 kB of requests: many TLS records, more than one read


def lane_heartbeats(connection: Connection, lane: Any) -> None:
    template = heartbeat_template(connection.heartbeat_version, "c", "no-such-group", 1, "m", None)
    for i in range(HEARTBEATS):
        lane.start(i, i, template, 0, 3_600_000)


def test_a_tls_connection_reads_and_writes_through_its_stream_only(
    secured: Secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    answered: list[LaneAnswer] = []
    raw_writes: list[int] = []
    write = os.write

    def watched(fd: int, data: Any) -> int:
        raw_writes.append(fd)
        return write(fd, data)

    monkeypatch.setattr(os, "write", watched)  # the module the connection writes with
    security = sasl("sasl_ssl", "SCRAM-SHA-512", ssl_ca_location=str(secured.certs.ca))
    poller = make_poller(MAX_RESPONSE_BYTES)

    async def main() -> None:
        lane = make_lane(HEARTBEATS, np.zeros((2, ROW), np.int64), np.zeros(2, np.int64))
        connection = connection_type(security)(
            secured.address("SASL_SSL"),
            lane,
            lambda answers, _now: answered.extend(answers),
            poller=poller,
            security=security,
        )
        assert isinstance(connection, TlsConnection)
        assert connection.poller is None  # the poller reads descriptors: never TLS's
        await connection.open(5)
        stream = connection.stream
        assert isinstance(stream, trio.SSLStream)
        fd = stream.transport_stream.socket.fileno()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(connection.run)
            lane_heartbeats(connection, lane)
            connection.flush(0)
            response, _ = await connection.ask(MetadataRequest(topics=[]), 5)
            assert isinstance(response, MetadataResponse)
            with trio.fail_after(30):
                while len(answered) < HEARTBEATS:
                    await trio.sleep(0.01)
            for i in range(HEARTBEATS):
                lane.stop(i)
            connection.close()
        assert fd not in raw_writes

    try:
        trio.run(main)
    finally:
        poller.close()
    # Each heartbeat answered once, in order: the group does not exist, so each is an error.
    assert [token for token, *_ in answered] == list(range(HEARTBEATS))
    assert {(api, error) for _, api, _, _, error, _ in answered} == {
        (ApiKey.HEARTBEAT, answered[0][4])
    } and answered[0][4] != 0


def test_a_sasl_plaintext_connection_keeps_the_descriptor_paths(secured: Secured) -> None:
    answered: list[LaneAnswer] = []
    security = sasl("sasl_plaintext", "SCRAM-SHA-256")
    poller = make_poller(MAX_RESPONSE_BYTES)
    polled: list[int] = []

    async def poll() -> None:
        while True:
            await trio.lowlevel.wait_readable(poller.fileno())
            for owner, now, unusual, others, end in poller.poll():
                assert isinstance(owner, Connection)
                polled.append(len(unusual))
                owner.heard(now, unusual, others, end)

    async def main() -> None:
        lane = make_lane(HEARTBEATS, np.zeros((2, ROW), np.int64), np.zeros(2, np.int64))
        connection = connection_type(security)(
            secured.address("SASL_PLAINTEXT"),
            lane,
            lambda answers, _now: answered.extend(answers),
            poller=poller,
            security=security,
        )
        assert type(connection) is Connection and connection.poller is poller
        await connection.open(5)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            nursery.start_soon(connection.run)
            lane_heartbeats(connection, lane)
            connection.flush(0)
            with trio.fail_after(30):
                while len(answered) < HEARTBEATS:
                    await trio.sleep(0.01)
            for i in range(HEARTBEATS):
                lane.stop(i)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        poller.close()
    assert [token for token, *_ in answered] == list(range(HEARTBEATS))
    assert sum(polled) == HEARTBEATS  # every answer came through the poller
