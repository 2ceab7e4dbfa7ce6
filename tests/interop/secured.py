"""What the security interop tests share: a server with every kind of listener, its users,
and each client's settings for each listener.

One `fastcoord serve` has five listeners: PLAINTEXT (where the tests look at groups from
outside), SASL_PLAINTEXT, SASL_SSL, SSL with client certificates requested, and MTLS, an SSL
listener that requires one. Its certificate names 127.0.0.1 and localhost, so every client
keeps hostname verification on. The passwords are made here and must never reach the
server's log.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastcoord.client.blocking import Connection, TlsConnection, sasl_login
from fastcoord.protocol.messages import (
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from fastcoord.testing import Certificates, ServerProcess, certificates, fastcoord_server

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
# Listener names: each protocol's own, and MTLS, an SSL listener that requires certificates.
LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL", "MTLS")
# Made of characters no log line holds by chance, so that finding one in the log means it
# was written there.
PASSWORDS = {"alice": "alice-Pw-7Qx!9zK", "bob": "bob-Pw-3Lm#8vR"}
USER = "alice"


def user_args(passwords: dict[str, str] = PASSWORDS) -> list[str]:
    return [arg for name, pw in passwords.items() for arg in ("--user", f"{name}:{pw}")]


def listener_args(certs: Certificates) -> list[str]:
    """The five listeners, on free ports, with the server's certificate and the CA that
    client certificates are checked against."""
    args = ["--listener-security-protocol-map", "MTLS:SSL"]
    for name in LISTENERS:
        args += ["--listener", f"{name}://127.0.0.1:0"]
    return [
        *args,
        *certs.server_args(),
        "--ssl-client-auth",
        "requested",
        "--listener-name",
        "mtls.ssl.client.auth=required",
    ]


@contextmanager
def secured_server(
    directory: Path, *args: str, passwords: dict[str, str] = PASSWORDS
) -> Iterator[tuple[ServerProcess, Certificates]]:
    """A server with the five listeners and these users (`args` win), in memory, its
    certificates in `directory / "certs"`; stopped by PID when the block ends."""
    certs = certificates(directory / "certs")
    with fastcoord_server(
        directory,
        "--in-memory",
        "--group-initial-rebalance-delay-ms",
        "0",
        *listener_args(certs),
        *user_args(passwords),
        *args,
    ) as server:
        yield server, certs


def address(server: ServerProcess, listener: str) -> tuple[str, int]:
    host, port = server.listener(listener).rsplit(":", 1)
    return host, int(port)


def connect(
    server: ServerProcess,
    certs: Certificates,
    listener: str,
    *,
    client_cert: bool = False,
    timeout: float | None = 15.0,
) -> Connection:
    """A raw connection to the listener: over TLS (hostname checked) where it has TLS."""
    host, port = address(server, listener)
    if listener in ("SASL_SSL", "SSL", "MTLS"):
        chain, key = certs.clients["client"] if client_cert else (None, None)
        return TlsConnection(
            host,
            port,
            str(certs.ca),
            certfile=None if chain is None else str(chain),
            keyfile=None if key is None else str(key),
            timeout=timeout,
        )
    return Connection(host, port, timeout)


def logged_in(
    server: ServerProcess,
    certs: Certificates,
    listener: str,
    mechanism: str,
    user: str = USER,
    *,
    handshake_version: int = 1,
) -> tuple[Connection, int]:
    """A connection to a SASL listener, logged in (ApiVersions first, as clients do): it
    and the session lifetime the server gave."""
    conn = connect(server, certs, listener)
    conn.api_versions()
    lifetime = sasl_login(
        conn, mechanism, user, PASSWORDS[user], handshake_version=handshake_version
    )
    return conn, lifetime


def describe_group(server: ServerProcess, group: str) -> DescribedGroup:
    """The group as DescribeGroups through the PLAINTEXT listener describes it."""
    with server.connect() as conn:
        response = conn.request(DescribeGroupsRequest(groups=[group]), 0)
    assert isinstance(response, DescribeGroupsResponse)
    (described,) = response.groups
    return described


def listed_groups(server: ServerProcess) -> set[str]:
    """The groups ListGroups through the PLAINTEXT listener names."""
    with server.connect() as conn:
        response = conn.request(ListGroupsRequest(), 0)
    assert isinstance(response, ListGroupsResponse)
    assert response.error_code == 0
    return {g.group_id for g in response.groups}


def group_exists(server: ServerProcess, group: str) -> bool:
    """Whether the coordinator holds the group: listed, or described as anything but Dead."""
    return group in listed_groups(server) or describe_group(server, group).group_state != "Dead"


def admin_group(server: ServerProcess, group: str) -> dict[str, Any]:
    """The group as the admin port's /v1/groups/{id} shows it (the server started with
    --admin-port): its generation, and each member's session deadline, which each heartbeat
    the coordinator receives moves on."""
    url = f"http://{server.admin}/v1/groups/{quote(group, safe='')}"
    with urllib.request.urlopen(url, timeout=10) as reply:
        found: dict[str, Any] = json.loads(reply.read())
    return found


def rebalances(log: str, group: str) -> list[str]:
    """The group's rebalance-started lines in a server log."""
    return re.findall(rf"group {re.escape(group)}: rebalance started[^\n]*", log)


def assert_no_secrets(log: str, passwords: dict[str, str] = PASSWORDS) -> None:
    leaked = [user for user, password in passwords.items() if password in log]
    assert not leaked, f"the server log holds the password of {leaked}"


# -- each client's settings for a listener ----------------------------------------------------


@dataclass(frozen=True)
class Security:
    """How a client reaches one listener: its security.protocol (PLAINTEXT, SASL_PLAINTEXT,
    SASL_SSL, SSL), SASL mechanism and user, and whether it shows a certificate."""

    listener: str
    protocol: str
    mechanism: str | None = None
    user: str = USER
    client_cert: bool = False

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def password(self) -> str:
        return PASSWORDS[self.user]


def confluent_config(server: ServerProcess, certs: Certificates, sec: Security) -> dict[str, Any]:
    """librdkafka's settings: hostname verification (ssl.endpoint.identification.algorithm
    https) is its default and stays so."""
    config: dict[str, Any] = {
        "bootstrap.servers": server.listener(sec.listener),
        "security.protocol": sec.protocol.lower(),
    }
    if sec.tls:
        config["ssl.ca.location"] = str(certs.ca)
        config["ssl.endpoint.identification.algorithm"] = "https"
        if sec.client_cert:
            chain, key = certs.clients["client"]
            config["ssl.certificate.location"] = str(chain)
            config["ssl.key.location"] = str(key)
    if sec.mechanism is not None:
        config["sasl.mechanism"] = sec.mechanism
        config["sasl.username"] = sec.user
        config["sasl.password"] = sec.password
    return config


def kafka_python_config(
    server: ServerProcess, certs: Certificates, sec: Security
) -> dict[str, Any]:
    """kafka-python's settings (aiokafka takes the same names, but an ssl_context)."""
    config: dict[str, Any] = {
        "bootstrap_servers": server.listener(sec.listener),
        "security_protocol": sec.protocol,
    }
    if sec.tls:
        config["ssl_cafile"] = str(certs.ca)
        config["ssl_check_hostname"] = True
        if sec.client_cert:
            chain, key = certs.clients["client"]
            config["ssl_certfile"] = str(chain)
            config["ssl_keyfile"] = str(key)
    if sec.mechanism is not None:
        config["sasl_mechanism"] = sec.mechanism
        config["sasl_plain_username"] = sec.user
        config["sasl_plain_password"] = sec.password
    return config


def aiokafka_config(server: ServerProcess, certs: Certificates, sec: Security) -> dict[str, Any]:
    """aiokafka's settings: its create_ssl_context checks the hostname."""
    from aiokafka.helpers import create_ssl_context

    config: dict[str, Any] = {
        "bootstrap_servers": server.listener(sec.listener),
        "security_protocol": sec.protocol,
    }
    if sec.tls:
        chain, key = certs.clients["client"] if sec.client_cert else (None, None)
        context = create_ssl_context(
            cafile=str(certs.ca),
            certfile=None if chain is None else str(chain),
            keyfile=None if key is None else str(key),
        )
        assert context.check_hostname
        config["ssl_context"] = context
    if sec.mechanism is not None:
        config["sasl_mechanism"] = sec.mechanism
        config["sasl_plain_username"] = sec.user
        config["sasl_plain_password"] = sec.password
    return config


def java_properties(
    server: ServerProcess, certs: Certificates, sec: Security
) -> dict[str, str | int]:
    """The Java client's properties: SASL through sasl.jaas.config, the CA as a PEM
    truststore (KIP-651); ssl.endpoint.identification.algorithm is https by default."""
    props: dict[str, str | int] = {
        "bootstrap.servers": server.listener(sec.listener),
        "security.protocol": sec.protocol,
    }
    if sec.tls:
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = str(certs.ca)
        props["ssl.endpoint.identification.algorithm"] = "https"
        if sec.client_cert:
            chain, key = certs.clients["client"]
            props["ssl.keystore.type"] = "PEM"
            props["ssl.keystore.location"] = str(
                _pem_keystore(chain, key, certs.directory / "client-keystore.pem")
            )
    if sec.mechanism is not None:
        module = (
            "org.apache.kafka.common.security.plain.PlainLoginModule"
            if sec.mechanism == "PLAIN"
            else "org.apache.kafka.common.security.scram.ScramLoginModule"
        )
        props["sasl.mechanism"] = sec.mechanism
        props["sasl.jaas.config"] = (
            f'{module} required username="{sec.user}" password="{sec.password}";'
        )
    return props


def _pem_keystore(chain: Path, key: Path, target: Path) -> Path:
    """A PEM keystore for the Java client: the key in PKCS#8 (the only form it reads),
    then its certificate chain."""
    from cryptography.hazmat.primitives import serialization

    if not target.exists():
        private = serialization.load_pem_private_key(key.read_bytes(), password=None)
        pkcs8 = private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        target.write_bytes(pkcs8 + chain.read_bytes())
    return target


def combos(
    mechanisms: Sequence[str] = MECHANISMS, protocols: Sequence[str] = SASL_PROTOCOLS
) -> list[Security]:
    return [Security(p, p, m) for p in protocols for m in mechanisms]
