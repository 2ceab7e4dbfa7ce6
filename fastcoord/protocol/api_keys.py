"""Kafka API keys (org.apache.kafka.common.protocol.ApiKeys) that fastcoord knows by name."""

from __future__ import annotations

import enum


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    SASL_AUTHENTICATE = 36
    DELETE_GROUPS = 42
    OFFSET_DELETE = 47
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


def api_name(api_key: int) -> str:
    """Kafka's name of a request (ApiKeys' `name`): 12 -> "Heartbeat", 18 -> "ApiVersions"."""
    try:
        words = ApiKey(api_key).name.split("_")
    except ValueError:
        return f"ApiKey{api_key}"
    return "".join(w.capitalize() for w in words)
