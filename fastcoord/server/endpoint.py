"""A listener as the server serves it: its security, made once, for every connection.

Each listener has its own port and security protocol. Connections accepted on it share
its TLS context (SSL, SASL_SSL), its SASL settings (SASL_PLAINTEXT, SASL_SSL) and its view
of the cluster: Metadata and FindCoordinator name this node at the address of the listener
the client came in on, as Kafka names the broker's endpoint of the request's listener, so
a client that bootstrapped over SASL_SSL is sent on over SASL_SSL.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from fastcoord.config import ServerConfig
from fastcoord.security.listeners import Listener
from fastcoord.security.sasl import Users
from fastcoord.server.broker import Broker


@dataclass(frozen=True)
class SaslSettings:
    users: Users
    mechanisms: tuple[str, ...]
    reauth_ms: int
    max_receive: int
    timeout_ms: int
    failure_delay_s: float


@dataclass(frozen=True)
class Endpoint:
    listener: Listener
    broker: Broker  # answers Metadata and FindCoordinator with this listener's address
    tls: ssl.SSLContext | None = None
    tls_timeout_s: float = 10.0
    sasl: SaslSettings | None = None

    @property
    def name(self) -> str:
        return self.listener.name

    @property
    def plain(self) -> bool:
        """Neither TLS nor SASL: the connection works exactly as it always has."""
        return self.tls is None and self.sasl is None


def endpoints(
    config: ServerConfig, listeners: list[Listener], broker: Broker, users: Users
) -> list[Endpoint]:
    """An Endpoint per listener (their ports known); ValueError says what cannot work."""
    from fastcoord.cluster.routing import Node
    from fastcoord.security import tls

    out = []
    for i, listener in enumerate(listeners):
        view = broker
        if i:
            host = config.advertised_host or listener.host
            cluster = broker.cluster
            node = Node(cluster.node_id, host, listener.port)
            view = broker.view(type(cluster).alone(node, cluster.partitions, cluster.partition_for))
        context = None
        if listener.tls:
            context = tls.server_context(
                config.ssl_keystore_location,
                config.ssl_key_location or None,
                config.ssl_key_password or None,
                config.ssl_truststore_location or None,
                listener.client_auth,
            )
        sasl = None
        if listener.sasl:
            sasl = SaslSettings(
                users,
                listener.mechanisms,
                config.connections_max_reauth_ms,
                config.sasl_server_max_receive_size,
                config.sasl_authentication_timeout_ms,
                config.connection_failed_authentication_delay_ms / 1000,
            )
        out.append(Endpoint(listener, view, context, config.ssl_handshake_timeout_ms / 1000, sasl))
    return out
