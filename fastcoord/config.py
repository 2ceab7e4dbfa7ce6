"""The server's configuration: one Struct, Kafka's setting names and defaults.

Each setting has a Kafka name ("group.initial.rebalance.delay.ms"), which is its TOML key
and, with dashes, its flag (`--group-initial-rebalance-delay-ms 0`). Values come from the
defaults, then the TOML file, then flags; the result is validated once, and a value out of
range is refused at start with the setting's name and the allowed range.
"""

from __future__ import annotations

import tomllib
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from fastcoord.core.config import GroupConfig

INT32_MAX = 2**31 - 1
_GROUP = GroupConfig()  # the coordinator's settings: their defaults are defined there, once
Ms = Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)]
Positive = Annotated[int, msgspec.Meta(ge=1, le=INT32_MAX)]
Partitions = Annotated[int, msgspec.Meta(ge=1, le=10_000)]


def kafka_name(field: str) -> str:
    return field.replace("_", ".")


class ServerConfig(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, rename=kafka_name
):
    # Where to listen, and what to tell clients (Metadata and FindCoordinator).
    host: str = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 9092
    advertised_host: str = ""  # empty: the listening host
    data_dir: str = "./fastcoord-data"
    node_id: Annotated[int, msgspec.Meta(ge=0, le=INT32_MAX)] = 0
    # Topics: declared as NAME:PARTITIONS, or created on first request.
    topics: list[str] = []
    default_partitions: Positive = 12
    # Group coordinator (Kafka's broker settings).
    offsets_topic_num_partitions: Partitions = _GROUP.offsets_topic_num_partitions
    group_min_session_timeout_ms: Ms = _GROUP.group_min_session_timeout_ms
    group_max_session_timeout_ms: Ms = _GROUP.group_max_session_timeout_ms
    group_initial_rebalance_delay_ms: Ms = _GROUP.group_initial_rebalance_delay_ms
    group_max_size: Positive = _GROUP.group_max_size
    offsets_retention_minutes: Positive = _GROUP.offsets_retention_minutes
    offsets_retention_check_interval_ms: Positive = _GROUP.offsets_retention_check_interval_ms
    offset_metadata_max_bytes: Ms = _GROUP.offset_metadata_max_bytes
    # Limits on what a client may grow.
    socket_request_max_bytes: Annotated[int, msgspec.Meta(ge=1024, le=INT32_MAX)] = 104_857_600
    max_connections: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 10_000
    connections_max_idle_ms: Positive = 600_000
    connection_max_inflight_requests: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 4096
    # The offsets log (storage): fsync always, batch (appends within the linger share one
    # fsync) or never; segments roll at offsets.topic.segment.bytes.
    fsync: Literal["always", "batch", "never"] = "batch"
    group_coordinator_append_linger_ms: Ms = 5
    offsets_topic_segment_bytes: Annotated[int, msgspec.Meta(ge=1024, le=INT32_MAX)] = 104_857_600
    log_truncate_damaged: bool = False  # cut a log at damage in its middle (loses data)
    # Compaction (Kafka's log cleaner): keep the latest record per key in closed segments.
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: Positive = 15_000  # how often partitions are checked
    log_cleaner_min_cleanable_ratio: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.5
    log_cleaner_delete_retention_ms: Ms = 86_400_000  # how long tombstones are kept
    # Logging and the event log.
    log_level: str = "INFO"
    event_log: bool = True  # Parquet files of coordinator events under DATA_DIR/events
    event_log_flush_ms: Positive = 5000
    shutdown_grace_ms: Ms = 5000  # on SIGTERM: time to deliver answers before closing

    def __post_init__(self) -> None:
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(
                "group.min.session.timeout.ms must not exceed group.max.session.timeout.ms"
            )
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError("log.level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        for topic in self.topics:
            parse_topic(topic)

    def group_config(self) -> GroupConfig:
        return GroupConfig(**{name: getattr(self, name) for name in GroupConfig.__struct_fields__})

    def declared_topics(self) -> dict[str, int]:
        return dict(parse_topic(t) for t in self.topics)


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it and what is allowed."""


def parse_topic(text: str) -> tuple[str, int]:
    name, sep, count = text.rpartition(":")
    if not sep or not name or not count.isdigit() or int(count) < 1:
        raise ValueError(f"topics: {text!r} is not NAME:PARTITIONS with PARTITIONS >= 1")
    return name, int(count)


def fields() -> list[tuple[str, str, Any, Any]]:
    """(attribute, Kafka name, type, default) of every setting."""
    return [
        (f.name, f.encode_name, f.type, f.default) for f in msgspec.structs.fields(ServerConfig)
    ]


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    # TOML reads `group.max.size = 5` as nested tables; Kafka's names are flat.
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def load(toml_path: str | None = None, overrides: dict[str, Any] | None = None) -> ServerConfig:
    """Defaults, then the TOML file, then `overrides` (Kafka names); validated once."""
    values: dict[str, Any] = {}
    if toml_path is not None:
        try:
            values.update(_flatten(tomllib.loads(Path(toml_path).read_text())))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read the configuration file {toml_path}: {exc}") from exc
    values.update(overrides or {})
    try:
        return msgspec.convert(values, ServerConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(_explain(str(exc))) from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def allowed(setting: str) -> str:
    """The allowed values of a setting, from its type and constraints."""
    hints = typing.get_type_hints(ServerConfig, include_extras=True)
    for attr, name, _, _ in fields():
        if name == setting:
            tp = hints[attr]
            metas = [m for m in getattr(tp, "__metadata__", ()) if isinstance(m, msgspec.Meta)]
            base = typing.get_args(tp)[0] if metas else tp
            if metas:
                kind = "a number" if base is float else "an integer"
                return f"{kind} from {metas[0].ge} to {metas[0].le}"
            if typing.get_origin(base) is Literal:
                return "one of " + ", ".join(typing.get_args(base))
            return f"a {getattr(base, '__name__', str(base))}"
    return "see fastcoord serve --print-config"


def _explain(message: str) -> str:
    # msgspec says "Expected `int` >= 0 - at `$.group.max.size`": name the setting first.
    if " - at `$." in message:
        reason, _, where = message.partition(" - at `$.")
        setting = where.rstrip("`").split("[")[0]
        return f"{setting}: {reason.replace('Expected', 'expected')}; allowed: {allowed(setting)}"
    if message.startswith("Object contains unknown field"):
        return f"unknown setting: {message.split('`')[1]}"
    return message


def to_toml(config: ServerConfig) -> str:
    """The effective configuration, as a TOML file would give it."""
    lines = []
    for name, value in msgspec.to_builtins(config).items():
        if isinstance(value, str):
            rendered = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        elif isinstance(value, bool):
            rendered = "true" if value else "false"
        elif isinstance(value, list):
            rendered = "[" + ", ".join(f'"{v}"' for v in value) + "]"
        else:
            rendered = str(value)
        lines.append(f'"{name}" = {rendered}')
    return "\n".join(lines) + "\n"
