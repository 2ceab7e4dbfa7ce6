"""Listeners: where the server accepts connections, and with which security protocol.

Kafka's settings: `listeners` names each listener and its address (NAME://HOST:PORT), and
`listener.security.protocol.map` gives each name its protocol, PLAINTEXT, SSL,
SASL_PLAINTEXT or SASL_SSL; the four protocol names map to themselves unless mapped
otherwise. A SASL listener takes `sasl.enabled.mechanisms`, or its own
`listener.name.<name>.sasl.enabled.mechanisms`; a TLS listener `ssl.client.auth`, or its own
`listener.name.<name>.ssl.client.auth`. With no `listeners`, the server has one PLAINTEXT
listener at host:port, exactly as before security existed.
"""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
CLIENT_AUTH = ("none", "requested", "required")
PER_LISTENER = ("sasl.enabled.mechanisms", "ssl.client.auth")


@dataclass(frozen=True)
class Listener:
    name: str  # upper case, as Kafka compares them
    protocol: str  # one of PROTOCOLS
    host: str
    port: int
    mechanisms: tuple[str, ...] = ()  # SASL listeners only
    client_auth: str = "none"  # TLS listeners only

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def with_port(self, port: int) -> Listener:
        return Listener(
            self.name, self.protocol, self.host, port, self.mechanisms, self.client_auth
        )

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def parse_address(text: str) -> tuple[str, str, int]:
    """NAME://HOST:PORT -> (NAME, HOST, PORT); ValueError names what is wrong."""
    name, sep, rest = text.partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not name or not colon or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listeners: {text!r} is not NAME://HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return name.upper(), host or "0.0.0.0", int(port)


def protocol_map(entries: list[str]) -> dict[str, str]:
    mapping = {p: p for p in PROTOCOLS}
    for entry in entries:
        name, sep, protocol = entry.partition(":")
        if not sep or protocol.upper() not in PROTOCOLS:
            raise ValueError(
                f"listener.security.protocol.map: {entry!r} is not NAME:PROTOCOL with "
                f"PROTOCOL one of {', '.join(PROTOCOLS)}"
            )
        mapping[name.upper()] = protocol.upper()
    return mapping


def parse_listeners(
    listeners: list[str],
    security_map: list[str],
    mechanisms: list[str],
    client_auth: str,
    per_listener: dict[str, dict[str, str]],
    default_host: str,
    default_port: int,
) -> tuple[Listener, ...]:
    """The listeners configured; ValueError names the setting at fault."""
    from fastcoord.security.entries import MECHANISMS

    if not listeners:
        return (Listener("PLAINTEXT", "PLAINTEXT", default_host, default_port),)
    mapping = protocol_map(security_map)
    out: list[Listener] = []
    for text in listeners:
        name, host, port = parse_address(text)
        if any(other.name == name for other in out):
            raise ValueError(f"listeners: {name} is named twice")
        if port and any(other.port == port and other.host == host for other in out):
            raise ValueError(f"listeners: {host}:{port} is given twice")
        protocol = mapping.get(name)
        if protocol is None:
            raise ValueError(
                f"listeners: {name} has no security protocol; name it PLAINTEXT, SSL, "
                "SASL_PLAINTEXT or SASL_SSL, or map it in listener.security.protocol.map"
            )
        own = {k.upper(): v for k, v in per_listener.items()}.get(name, {})
        unknown = sorted(set(own) - set(PER_LISTENER))
        if unknown:
            raise ValueError(
                f"listener.name.{name.lower()}.{unknown[0]}: not a per-listener setting "
                f"(those are {', '.join(PER_LISTENER)})"
            )
        mechs = mechanisms
        if "sasl.enabled.mechanisms" in own:
            mechs = [m.strip() for m in own["sasl.enabled.mechanisms"].split(",") if m.strip()]
        auth = own.get("ssl.client.auth", client_auth)
        if auth not in CLIENT_AUTH:
            raise ValueError(
                f"listener.name.{name.lower()}.ssl.client.auth: {auth!r} is not one of "
                f"{', '.join(CLIENT_AUTH)}"
            )
        listener = Listener(name, protocol, host, port)
        if listener.sasl:
            bad = [m for m in mechs if m not in MECHANISMS]
            if bad or not mechs:
                raise ValueError(
                    f"sasl.enabled.mechanisms of {name}: {bad or 'none given'}; fastcoord "
                    f"serves {', '.join(MECHANISMS)}"
                )
            listener = Listener(name, protocol, host, port, tuple(mechs))
        if listener.tls:
            listener = Listener(name, protocol, host, port, listener.mechanisms, auth)
        out.append(listener)
    return tuple(out)
