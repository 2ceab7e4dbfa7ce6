"""The server's configuration: one Struct, Kafka's setting names and defaults.

Each setting has a Kafka name ("group.initial.rebalance.delay.ms"), which is its TOML key
and, with dashes, its flag (`--group-initial-rebalance-delay-ms 0`). Values come from the
defaults, then the TOML file, then flags; the result is validated once, and a value out of
range is refused at start with the setting's name and the allowed values.

Each field also carries its documentation (a `Doc`: section, one line of meaning, unit,
words a user may write for a value), from which `fastcoord serve --help` and the refusals
are written, so that the help cannot drift from what is accepted.
"""

from __future__ import annotations

import tomllib
import typing
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, NamedTuple

import msgspec

from fastcoord.cluster.routing import Cluster, Node, parse_nodes
from fastcoord.core.config import GroupConfig
from fastcoord.faults import FaultError, FaultRule, compile_rule
from fastcoord.security import credentials
from fastcoord.security.entries import AclEntry, User
from fastcoord.security.listeners import Listener, parse_listeners
from fastcoord.setting import (
    ADMIN,
    INT32_MAX,
    LIMITS,
    LISTENER,
    LOGGING,
    OFFSETS_LOG,
    SECURITY,
    TOPICS,
    Doc,
    kafka_name,
)
from fastcoord.setting import bounded as _int

TRUE_WORDS = ("true", "yes", "on", "1")
SECRETS = ("ssl.key.password",)  # never printed: --print-config says only that it is set
# authorizer.class.name: off, or ACLs as Kafka's standard authorizers check them
AUTHORIZERS = (
    "",
    "StandardAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)
FALSE_WORDS = ("false", "no", "off", "0")

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


class ServerConfig(
    GroupConfig, frozen=True, kw_only=True, forbid_unknown_fields=True, rename=kafka_name
):
    """The coordinator's settings (GroupConfig, declared in the core) and the server's."""

    # -- listener
    host: Annotated[
        str, Doc(LISTENER, "address to listen on: a name or IP address of this machine")
    ] = "127.0.0.1"
    port: Annotated[
        int, _int(0, 65535), Doc(LISTENER, "TCP port to listen on; 0 picks a free one")
    ] = 9092
    advertised_host: Annotated[
        str,
        Doc(LISTENER, "the host that Metadata and FindCoordinator name", default="host's value"),
    ] = ""
    node_id: Annotated[int, _int(0), Doc(LISTENER, "this node's broker id")] = 0
    cluster: Annotated[
        str,
        Doc(
            LISTENER,
            "the nodes of a cluster, ID@HOST:PORT,... (this node's id among them): each "
            "node listens on its own address from the list (host and port are then not "
            "used) and owns the offsets partitions p with ids[p mod N]; see docs/cluster.md",
            default="none",
        ),
    ] = ""
    zookeeper: Annotated[
        str,
        Doc(
            LISTENER,
            "HOST:PORT[,HOST:PORT...][/chroot] of a ZooKeeper that keeps the cluster: nodes "
            "register there, one of them keeps the map of offsets partitions to live nodes, "
            "and partitions move when nodes come and go or on request; every node shares "
            "one data.dir (chroot /fastcoord by default); see docs/cluster.md",
            default="none",
        ),
    ] = ""
    zookeeper_session_timeout_ms: Annotated[
        int,
        _int(1000),
        Doc(
            LISTENER,
            "ZooKeeper session timeout: a node not heard from for this long is gone, and "
            "its partitions move; a node cut off stops serving a third of it before",
            "ms",
        ),
    ] = 18000
    shutdown_grace_ms: Annotated[
        int,
        _int(0),
        Doc(LISTENER, "on SIGINT or SIGTERM, time given to deliver the answers owed", "ms"),
    ] = 5000
    # -- topics: the broker side that a consumer needs (topics are always empty)
    topics: Annotated[list[str], Doc(TOPICS, "declare a topic (repeatable)")] = []
    auto_create_topics: Annotated[
        Literal["always", "client", "never"],
        Doc(
            TOPICS,
            "which undeclared topics exist: always (any topic a Metadata request names), "
            "client (only when the request allows auto-creation, as Kafka), never",
        ),
    ] = "always"
    num_partitions: Annotated[
        int, _int(1, 10_000), Doc(TOPICS, "partitions of a topic created on request")
    ] = 1
    # -- groups: GroupConfig's (the core declares its own settings)
    # -- the offsets log (storage)
    data_dir: Annotated[
        str, Doc(OFFSETS_LOG, "directory of the offsets log, its lock and the event log")
    ] = "./fastcoord-data"
    in_memory: Annotated[
        bool, Doc(OFFSETS_LOG, "keep nothing: no data directory, no event log (throwaway tests)")
    ] = False
    fsync: Annotated[
        Literal["always", "batch", "never"],
        Doc(
            OFFSETS_LOG,
            "when a write is synced before it is acknowledged: always (at once), batch (group "
            "commit: what comes during a sync is synced together once the event loop is "
            "idle), never (acknowledged once the OS has it)",
        ),
    ] = "batch"
    group_coordinator_append_linger_ms: Annotated[
        int,
        _int(0),
        Doc(
            OFFSETS_LOG,
            "fsync batch: the longest writes are held while the event loop is busy",
            "ms",
        ),
    ] = 5
    offsets_topic_segment_bytes: Annotated[
        int, _int(1024), Doc(OFFSETS_LOG, "log segments roll at this size", "bytes")
    ] = 104_857_600
    log_truncate_damaged: Annotated[
        bool,
        Doc(OFFSETS_LOG, "cut a log at damage in its middle (loses what follows) to start"),
    ] = False
    log_cleaner_enable: Annotated[
        bool, Doc(OFFSETS_LOG, "compact the logs: keep the latest record of each key")
    ] = True
    log_cleaner_backoff_ms: Annotated[
        int, _int(1), Doc(OFFSETS_LOG, "how often the cleaner looks for work", "ms")
    ] = 15_000
    log_cleaner_min_cleanable_ratio: Annotated[
        float,
        msgspec.Meta(ge=0.0, le=1.0),
        Doc(OFFSETS_LOG, "compact a log once this share of its closed segments is new"),
    ] = 0.5
    log_cleaner_delete_retention_ms: Annotated[
        int, _int(0), Doc(OFFSETS_LOG, "how long tombstones are kept", "ms")
    ] = 86_400_000
    # -- limits on what a client may grow
    socket_request_max_bytes: Annotated[
        int, _int(1024), Doc(LIMITS, "a larger request frame closes its connection", "bytes")
    ] = 104_857_600
    max_connections: Annotated[
        Annotated[int, _int(1, 1_000_000)] | Literal["auto"],
        Doc(
            LIMITS,
            "connections beyond this are refused; auto: as many as the open-file limit allows",
        ),
    ] = "auto"
    connections_max_idle_ms: Annotated[
        int,
        _int(1),
        Doc(LIMITS, "a connection that moves no bytes either way is closed after", "ms"),
    ] = 600_000
    connection_max_inflight_requests: Annotated[
        int,
        _int(1, 1_000_000),
        Doc(LIMITS, "unanswered requests per connection before it is no longer read"),
    ] = 4096
    connection_queued_max_response_bytes: Annotated[
        int,
        _int(1024),
        Doc(LIMITS, "answers a connection may owe before it is no longer read", "bytes"),
    ] = 67_108_864
    queued_max_response_bytes: Annotated[
        int,
        _int(1024),
        Doc(
            LIMITS,
            "answers all connections may owe together; past it, a connection that owes "
            "answers is not read",
            "bytes",
        ),
    ] = 536_870_912
    # -- logging and the event log
    log_level: Annotated[
        LogLevel,
        Doc(LOGGING, "INFO: a line per group event; DEBUG adds a line per group request"),
    ] = "INFO"
    event_log: Annotated[
        bool, Doc(LOGGING, "write coordinator events as Parquet under DATA_DIR/events")
    ] = True
    event_log_flush_ms: Annotated[
        int, _int(1), Doc(LOGGING, "how often waiting events are written", "ms")
    ] = 5000
    event_log_roll_bytes: Annotated[
        int, _int(1024), Doc(LOGGING, "small event files are merged into files this big", "bytes")
    ] = 134_217_728
    event_log_roll_ms: Annotated[
        int, _int(1), Doc(LOGGING, "...or of this span of time, whichever comes first", "ms")
    ] = 3_600_000
    event_log_retention_ms: Annotated[
        int,
        _int(1),
        Doc(LOGGING, "event files whose newest event is older than this are deleted", "ms"),
    ] = 604_800_000
    # -- the admin port: metrics, groups, fault rules
    admin_port: Annotated[
        Annotated[int, _int(0, 65535)] | Literal["off"],
        Doc(
            ADMIN,
            "HTTP port of /metrics (Prometheus), /v1/groups and /v1/faults; 0 picks a free "
            "one; off: no admin port",
        ),
    ] = "off"
    admin_host: Annotated[str, Doc(ADMIN, "address the admin port listens on")] = "127.0.0.1"
    fault: Annotated[
        list[FaultRule],
        Doc(
            ADMIN,
            "a fault rule in force from the start, as JSON (repeatable; [[fault]] tables in "
            "the file): see docs/operations.md",
        ),
    ] = []

    # -- security: listeners, TLS, SASL, ACLs (docs/security.md)
    listeners: Annotated[
        list[str],
        Doc(
            SECURITY,
            "listeners NAME://HOST:PORT, each on its own port (PLAINTEXT, SSL, "
            "SASL_PLAINTEXT, SASL_SSL, or names mapped in listener.security.protocol.map); "
            "the first is the one Metadata and FindCoordinator name to a client of another",
            default="PLAINTEXT://host:port",
        ),
    ] = []
    listener_security_protocol_map: Annotated[
        list[str],
        Doc(SECURITY, "NAME:PROTOCOL for listeners not named after their protocol"),
    ] = []
    listener_name: Annotated[
        dict[str, dict[str, str]],
        Doc(
            SECURITY,
            "a listener's own sasl.enabled.mechanisms or ssl.client.auth: "
            "listener.name.NAME.SETTING = VALUE in the file, --listener-name "
            "NAME.SETTING=VALUE as a flag",
            default="none",
        ),
    ] = {}
    sasl_enabled_mechanisms: Annotated[
        list[str],
        Doc(
            SECURITY,
            "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512",
            default="all three",
        ),
    ] = msgspec.field(default_factory=lambda: ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
    user: Annotated[
        list[User],
        Doc(
            SECURITY,
            "a SASL user: NAME:PASSWORD, or JSON with name, password or credentials, "
            "mechanisms (repeatable; [[user]] tables in the file); passwords are kept only "
            "as credentials",
        ),
    ] = []
    sasl_server_max_receive_size: Annotated[
        int, _int(64, 1 << 24), Doc(SECURITY, "largest SASL message before login", "bytes")
    ] = 524_288
    sasl_authentication_timeout_ms: Annotated[
        int, _int(1), Doc(SECURITY, "a SASL login not done in this time is closed", "ms")
    ] = 10_000
    connection_failed_authentication_delay_ms: Annotated[
        int,
        _int(0),
        Doc(SECURITY, "a failed login's connection is closed this long after its answer", "ms"),
    ] = 100
    connections_max_reauth_ms: Annotated[
        int,
        _int(0),
        Doc(
            SECURITY,
            "a SASL session's lifetime; the client re-authenticates on its connection "
            "before it ends, else the connection is closed at its next request; 0: no limit",
            "ms",
        ),
    ] = 0
    ssl_keystore_location: Annotated[
        str,
        Doc(
            SECURITY,
            "PEM file of the server's certificate chain (and key, unless ssl.key.location)",
            default="none",
        ),
    ] = ""
    ssl_key_location: Annotated[
        str, Doc(SECURITY, "PEM file of the server's private key", default="in the keystore")
    ] = ""
    ssl_key_password: Annotated[
        str, Doc(SECURITY, "the private key's password", default="none")
    ] = ""
    ssl_truststore_location: Annotated[
        str,
        Doc(
            SECURITY,
            "PEM file of the CAs that client certificates are checked against",
            default="none",
        ),
    ] = ""
    ssl_client_auth: Annotated[
        Literal["none", "requested", "required"],
        Doc(SECURITY, "TLS client certificates: none, requested, required"),
    ] = "none"
    ssl_handshake_timeout_ms: Annotated[
        int, _int(1), Doc(SECURITY, "a TLS handshake not done in this time is closed", "ms")
    ] = 10_000
    authorizer_class_name: Annotated[
        str,
        Doc(
            SECURITY,
            "ACLs are checked when set (StandardAuthorizer, or Kafka's class names of it "
            "or AclAuthorizer); empty: every request is allowed",
            default="none",
        ),
    ] = ""
    super_users: Annotated[
        list[str], Doc(SECURITY, "principals allowed everything: User:NAME;User:NAME")
    ] = []
    allow_everyone_if_no_acl_found: Annotated[
        bool, Doc(SECURITY, "a resource no ACL names is open to all (Kafka's default: no)")
    ] = False
    acl: Annotated[
        list[AclEntry],
        Doc(
            SECURITY,
            "an ACL from the start, as JSON (repeatable; [[acl]] tables in the file): "
            "principal, resource_type, resource_name, operation, permission, pattern_type",
        ),
    ] = []

    def __post_init__(self) -> None:
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(
                "group.min.session.timeout.ms must not exceed group.max.session.timeout.ms"
            )
        for name in ("heartbeat.interval", "session.timeout"):
            attr = f"group_consumer_{name.replace('.', '_')}_ms"
            value = getattr(self, attr)
            lo = getattr(self, attr.replace("consumer_", "consumer_min_"))
            hi = getattr(self, attr.replace("consumer_", "consumer_max_"))
            if not lo <= value <= hi:
                raise ValueError(
                    f"group.consumer.{name}.ms ({value}) must be between "
                    f"group.consumer.min.{name}.ms ({lo}) and group.consumer.max.{name}.ms ({hi})"
                )
        if self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms:
            raise ValueError(
                "group.consumer.heartbeat.interval.ms must be less than "
                "group.consumer.session.timeout.ms"
            )
        if not self.group_consumer_assignors or len(set(self.group_consumer_assignors)) != len(
            self.group_consumer_assignors
        ):
            raise ValueError("group.consumer.assignors: name each assignor once, at least one")
        for topic in self.topics:
            parse_topic(topic)
        if self.cluster:
            nodes = parse_nodes(self.cluster)  # ClusterListError is a ValueError
            if self.node_id not in {n.node_id for n in nodes}:
                raise ValueError(
                    f"node.id {self.node_id} is not in the cluster list {self.cluster}"
                )
        if self.zookeeper:
            from fastcoord.cluster.zookeeper import split_hosts

            split_hosts(self.zookeeper)  # a ValueError says what is wrong
            if self.cluster:
                raise ValueError(
                    "zookeeper: ZooKeeper keeps the cluster's nodes; give no cluster list"
                )
            if self.in_memory:
                raise ValueError(
                    "zookeeper: partitions move between nodes through their logs in the "
                    "shared data.dir; --in-memory keeps none"
                )
            if self.listeners:
                raise ValueError(
                    "listeners: several listeners per node are not supported with zookeeper"
                )
        for rule in self.fault:
            try:
                compile_rule(rule, 0, 0)
            except FaultError as exc:
                raise ValueError(f"fault: {exc}") from None
        parsed = self.listener_list()
        if self.cluster and self.listeners:
            raise ValueError(
                "listeners: a cluster's nodes listen at their cluster list address; "
                "several listeners per node are not supported in a cluster"
            )
        if any(listener.tls for listener in parsed) and not self.ssl_keystore_location:
            raise ValueError("ssl.keystore.location: a TLS listener needs a certificate")
        if self.authorizer_class_name not in AUTHORIZERS:
            raise ValueError(
                f"authorizer.class.name: {self.authorizer_class_name!r} is not one of "
                f"{', '.join(a for a in AUTHORIZERS if a)}"
            )
        names = [user.name for user in self.user]
        if len(set(names)) != len(names):
            raise ValueError("user: a user is given twice")
        from fastcoord.security.acl import binding_from_entry

        for entry in self.acl:
            try:
                binding_from_entry(entry)
            except ValueError as exc:
                raise ValueError(f"acl: {exc}") from None
        for principal in self.super_users:
            if not principal.startswith("User:"):
                raise ValueError(f"super.users: {principal!r} is not User:NAME")

    def listener_list(self) -> tuple[Listener, ...]:
        """The listeners, parsed and checked (one PLAINTEXT at host:port when none are
        given)."""
        host, port = self.listen_address()
        return parse_listeners(
            self.listeners,
            self.listener_security_protocol_map,
            self.sasl_enabled_mechanisms,
            self.ssl_client_auth,
            self.listener_name,
            host,
            port,
        )

    def group_config(self) -> GroupConfig:
        """The core's part alone, as a GroupConfig."""
        return GroupConfig(**{name: getattr(self, name) for name in GroupConfig.__struct_fields__})

    def cluster_nodes(self) -> tuple[Node, ...]:
        """The cluster's nodes, sorted by id; () for a lone server."""
        return parse_nodes(self.cluster) if self.cluster else ()

    def listen_address(self) -> tuple[str, int]:
        """Where this node listens: its own address in the cluster list, else host:port."""
        for node in self.cluster_nodes():
            if node.node_id == self.node_id:
                return node.host, node.port
        return self.host, self.port

    def cluster_for(self, port: int) -> Cluster:
        """The cluster this node belongs to; a lone server (no cluster list) is a cluster of
        one, named at its advertised host and `port`, the port it listens on."""
        from fastcoord.core.native import partition

        partitions = self.offsets_topic_num_partitions
        nodes = self.cluster_nodes()
        if nodes:
            return Cluster(nodes, self.node_id, partitions, partition.partition_for)
        me = Node(self.node_id, self.advertised_host or self.host, port)
        return Cluster.alone(me, partitions, partition.partition_for)

    def declared_topics(self) -> dict[str, int]:
        return dict(parse_topic(t) for t in self.topics)


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it and what is allowed."""


def parse_topic(text: str) -> tuple[str, int]:
    name, sep, count = text.rpartition(":")
    if not sep or not name or not count.isdigit() or int(count) < 1:
        raise ValueError(f"topics: {text!r} is not NAME:PARTITIONS with PARTITIONS >= 1")
    return name, int(count)


class Setting(NamedTuple):
    attr: str
    name: str  # Kafka's
    type: Any  # as declared, Annotated metadata included
    default: Any
    doc: Doc

    @property
    def flag(self) -> str:
        return "--" + self.name.replace(".", "-")

    def kinds(self) -> list[tuple[Any, msgspec.Meta | None]]:
        """The types a value may have (one, or each of a union's), with their range."""
        tp, extras = _unwrap(self.type)
        outer = next((m for m in extras if isinstance(m, msgspec.Meta)), None)
        arms = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, UnionType) else (tp,)
        out = []
        for arm in arms:
            base, inner = _unwrap(arm)
            meta = next((m for m in inner if isinstance(m, msgspec.Meta)), outer)
            out.append((base, meta))
        return out


def _unwrap(tp: Any) -> tuple[Any, list[Any]]:
    """A type without Annotated, and the metadata it had."""
    extras: list[Any] = []
    while typing.get_origin(tp) is Annotated:
        extras.extend(tp.__metadata__)
        tp = typing.get_args(tp)[0]
    return tp, extras


def _settings() -> tuple[Setting, ...]:
    hints = typing.get_type_hints(ServerConfig, include_extras=True)
    out = []
    for f in msgspec.structs.fields(ServerConfig):
        (doc,) = (m for m in _unwrap(hints[f.name])[1] if isinstance(m, Doc))
        default = f.default_factory() if f.default is msgspec.NODEFAULT else f.default
        out.append(Setting(f.name, f.encode_name, hints[f.name], default, doc))
    return tuple(out)


SETTINGS: tuple[Setting, ...] = _settings()
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


def fields() -> list[tuple[str, str, Any, Any]]:
    """(attribute, Kafka name, type, default) of every setting."""
    return [(s.attr, s.name, _unwrap(s.type)[0], s.default) for s in SETTINGS]


def render(setting: Setting, value: Any) -> str:
    """A value as a user writes it: `unbounded`, not 2147483647."""
    for word, meant in setting.doc.words.items():
        if value == meant:
            return word
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value)) or "none"
    return str(value)


def render_default(setting: Setting) -> str:
    """The default as --help shows it: as written, then in larger units where that helps."""
    if setting.doc.default:
        return setting.doc.default
    text = render(setting, setting.default)
    value = setting.default
    if type(value) is int and text == str(value):
        if setting.doc.unit == "ms" and value >= 60_000:
            text += f" = {_span(value)}"
        elif setting.doc.unit == "minutes" and value >= 60:
            text += f" = {_span(value * 60_000)}"
        elif setting.doc.unit == "bytes" and value >= 1 << 20:
            text += f" = {value / (1 << 20):g} MiB"
    return text


def _span(ms: int) -> str:
    for unit, size in (("days", 86_400_000), ("hours", 3_600_000), ("minutes", 60_000)):
        if ms % size == 0 or ms >= 10 * size:
            count = ms / size
            return f"{count:g} {unit[:-1] if count == 1 else unit}"
    return f"{ms} ms"


def allowed(name: str) -> str:
    """The values a setting takes, from its type, constraints and words."""
    setting = BY_NAME.get(name)
    if setting is None:
        return "see fastcoord serve --help"
    parts: list[str] = []
    for base, meta in setting.kinds():
        if typing.get_origin(base) is Literal:
            parts.extend(map(str, typing.get_args(base)))
        elif typing.get_origin(base) in (list, tuple) and (
            typing.get_origin(typing.get_args(base)[0]) is Literal
        ):
            names = ", ".join(typing.get_args(typing.get_args(base)[0]))
            parts.append(f"a comma-separated list of {names}")
        elif base is bool:
            parts.append("true or false")
        elif base in (int, float) and meta is not None:
            kind = "a number" if base is float else "an integer"
            if meta.le == INT32_MAX:  # Java's Int.MaxValue: no bound a user would meet
                parts.append(f"{kind} of at least {meta.ge}")
            else:
                parts.append(f"{kind} from {meta.ge} to {meta.le}")
        elif setting.attr == "topics":
            parts.append("NAME:PARTITIONS")
        elif setting.attr == "fault":
            parts.append("a JSON object")
    parts.extend(setting.doc.words)
    if not parts:
        return "any text"
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def _words(values: dict[str, Any]) -> dict[str, Any]:
    # Words a user writes for a value ("unbounded"), and log levels in any case.
    out = dict(values)
    for name, value in values.items():
        setting = BY_NAME.get(name)
        if setting is not None and setting.attr == "fault" and isinstance(value, list):
            out[name] = [_json_rule(v) if isinstance(v, str) else v for v in value]
            continue
        if setting is not None and setting.attr == "acl" and isinstance(value, list):
            out[name] = [_json("acl", v) if isinstance(v, str) else v for v in value]
            continue
        if setting is not None and setting.attr == "user":
            out[name] = [_user(v) for v in (value if isinstance(value, list) else [value])]
            continue
        if setting is not None and setting.attr == "super_users" and isinstance(value, str):
            out[name] = [v.strip() for v in value.replace(";", ",").split(",") if v.strip()]
            continue
        if setting is not None and setting.attr == "listeners" and isinstance(value, list):
            out[name] = [v.strip() for text in value for v in str(text).split(",") if v.strip()]
            continue
        if setting is not None and setting.attr == "listener_name" and isinstance(value, list):
            out[name] = _per_listener(value)
            continue
        if setting is None or not isinstance(value, str):
            continue
        if typing.get_origin(_unwrap(setting.type)[0]) in (list, tuple):
            out[name] = [v.strip() for v in value.split(",") if v.strip()]  # a flag's list
            continue
        if value in setting.doc.words:
            out[name] = setting.doc.words[value]
        elif setting.attr == "log_level":
            out[name] = value.upper()
        elif _unwrap(setting.type)[0] is bool and value.lower() in TRUE_WORDS + FALSE_WORDS:
            out[name] = value.lower() in TRUE_WORDS
    return out


def _json(setting: str, text: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{setting}: not JSON: {exc}") from None


def _user(value: Any) -> Any:
    """A user as written (NAME:PASSWORD, JSON, or a table), as the server keeps it: its
    password converted to credentials, here, once."""
    if isinstance(value, str):
        if value.lstrip().startswith("{"):
            value = _json("user", value)
        else:
            name, sep, password = value.partition(":")
            if not sep:
                raise ConfigError(f"user: {value.split(':')[0]!r} is not NAME:PASSWORD or JSON")
            value = {"name": name, "password": password}
    try:
        user = msgspec.convert(value, User)
        return msgspec.to_builtins(credentials.convert(user))
    except msgspec.ValidationError as exc:
        raise ConfigError(f"user: {exc}") from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _per_listener(entries: list[str]) -> dict[str, dict[str, str]]:
    """--listener-name NAME.SETTING=VALUE flags, as the file's listener.name tables."""
    out: dict[str, dict[str, str]] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        listener, dot, setting = key.partition(".")
        if not sep or not dot or not setting:
            raise ConfigError(f"listener.name: {entry!r} is not NAME.SETTING=VALUE")
        out.setdefault(listener, {})[setting] = value
    return out


def _json_rule(text: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"fault: not JSON: {exc}") from None


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    # TOML reads `group.max.size = 5` as nested tables; Kafka's names are flat. A listener's
    # own settings (listener.name.NAME.SETTING) stay a table of their own.
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if name == "listener.name" and isinstance(value, dict):
            out[name] = {
                listener: {
                    setting: ",".join(v) if isinstance(v, list) else str(v)
                    for setting, v in _flatten(settings).items()
                }
                for listener, settings in value.items()
                if isinstance(settings, dict)
            }
            continue
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def load(toml_path: str | None = None, overrides: dict[str, Any] | None = None) -> ServerConfig:
    """Defaults, then the TOML file, then `overrides` (Kafka names); validated once.

    Values may be strings, as flags give them ("3000", "true", "unbounded")."""
    values: dict[str, Any] = {}
    if toml_path is not None:
        try:
            values.update(_flatten(tomllib.loads(Path(toml_path).read_text())))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read the configuration file {toml_path}: {exc}") from exc
    values.update(overrides or {})
    try:
        return msgspec.convert(_words(values), ServerConfig, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(_explain(str(exc))) from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _explain(message: str) -> str:
    # msgspec says "Expected `int` >= 0 - at `$.group.max.size`": name the setting first.
    if " - at `$." in message:
        reason, _, where = message.partition(" - at `$.")
        setting = where.rstrip("`").split("[")[0]
        reason = reason.replace("Expected", "expected").replace("Invalid enum", "invalid")
        return f"{setting}: {reason}; allowed: {allowed(setting)}"
    if message.startswith("Object contains unknown field"):
        return f"unknown setting: {message.split('`')[1]}"
    return message


def to_toml(config: ServerConfig) -> str:
    """The effective configuration, as a TOML file would give it."""
    lines = []
    tables = []
    for name, value in msgspec.to_builtins(config).items():
        if name == "fault" and value:  # tables come after every key
            for rule in value:
                tables.append("\n[[fault]]")
                tables.extend(f"{k} = {_toml_value(v)}" for k, v in rule.items())
            continue
        if name in SECRETS and value:
            lines.append(f"# {name} is set (not shown)")
            continue
        words = BY_NAME[name].doc.words
        word = next((w for w, meant in words.items() if meant == value), None)
        if word is not None:
            value = word
        lines.append(f'"{name}" = {_toml_value(value)}')
    return "\n".join(lines + tables) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return str(value)
