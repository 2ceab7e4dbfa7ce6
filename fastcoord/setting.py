"""How a setting is declared: its Kafka name, its range, and what --help says of it.

Settings are msgspec Struct fields annotated with a range (msgspec.Meta) and a Doc. The
coordinator core declares its own (core/config.py's GroupConfig) and the server's
configuration (config.py) extends them with the rest, so each setting is declared once,
where it is used, and the flags, the TOML file and --help all come from the declarations.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import msgspec

INT32_MAX = 2**31 - 1  # Java's Integer.MAX_VALUE: "no bound" in Kafka's settings

LISTENER = "listener"
TOPICS = "topics"
GROUPS = "groups"
OFFSETS_LOG = "offsets log"
LIMITS = "limits"
LOGGING = "logging"
ADMIN = "admin"
SECURITY = "security"
SECTIONS = (LISTENER, TOPICS, GROUPS, OFFSETS_LOG, LIMITS, LOGGING, ADMIN, SECURITY)

UNBOUNDED = {"unbounded": INT32_MAX}


class Doc(NamedTuple):
    """What --help says of a setting. `words` are values a user may write as a word (and
    that --help and --print-config show as that word); `default` replaces the default's
    rendering where the stored value would mislead (an empty string meaning "the host")."""

    section: str
    meaning: str
    unit: str = ""
    words: Mapping[str, Any] = {}
    default: str | None = None


def bounded(lo: int, hi: int = INT32_MAX) -> msgspec.Meta:
    return msgspec.Meta(ge=lo, le=hi)


def kafka_name(field: str) -> str:
    """A setting's Kafka name: its field name with dots (group_max_size: group.max.size)."""
    return field.replace("_", ".")
