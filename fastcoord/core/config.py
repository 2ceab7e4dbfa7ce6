"""The coordinator's settings, with Kafka's broker names and defaults
(docs/kafka-compatibility.md).

Declared here, once, with their ranges and help; the server's configuration (config.py's
ServerConfig) is this Struct extended with the server's own settings, so that flags and
the TOML file fill it, and the core reads nothing else.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from fastcoord.setting import GROUPS, INT32_MAX, UNBOUNDED, Doc, bounded, kafka_name

__all__ = ["INT32_MAX", "GroupConfig"]


class GroupConfig(msgspec.Struct, frozen=True, kw_only=True, rename=kafka_name):
    # Kafka's broker settings for the group coordinator.
    group_min_session_timeout_ms: Annotated[
        int, bounded(0), Doc(GROUPS, "shortest session timeout a member may ask for", "ms")
    ] = 6000
    group_max_session_timeout_ms: Annotated[
        int, bounded(0), Doc(GROUPS, "longest session timeout a member may ask for", "ms")
    ] = 1_800_000
    group_initial_rebalance_delay_ms: Annotated[
        int,
        bounded(0),
        Doc(GROUPS, "how long an empty group's first rebalance waits for more members", "ms"),
    ] = 3000
    group_max_size: Annotated[
        int, bounded(1), Doc(GROUPS, "members per group", words=UNBOUNDED)
    ] = INT32_MAX
    offsets_retention_minutes: Annotated[
        int,
        bounded(1),
        Doc(GROUPS, "committed offsets of a group without members expire after", "minutes"),
    ] = 10_080
    offsets_retention_check_interval_ms: Annotated[
        int, bounded(1), Doc(GROUPS, "how often expired offsets are looked for", "ms")
    ] = 600_000
    offset_metadata_max_bytes: Annotated[
        int, bounded(0), Doc(GROUPS, "longest metadata string of a committed offset", "bytes")
    ] = 4096
    offsets_topic_num_partitions: Annotated[
        int,
        bounded(1, 10_000),
        Doc(GROUPS, "coordinator partitions: a group's is abs(hashCode(group id)) % this"),
    ] = 50
    # The consumer group protocol's (KIP-848).
    group_consumer_heartbeat_interval_ms: Annotated[
        int, bounded(1), Doc(GROUPS, "consumer group protocol: how often members heartbeat", "ms")
    ] = 5000
    group_consumer_min_heartbeat_interval_ms: Annotated[
        int, bounded(1), Doc(GROUPS, "consumer group protocol: shortest heartbeat interval", "ms")
    ] = 5000
    group_consumer_max_heartbeat_interval_ms: Annotated[
        int, bounded(1), Doc(GROUPS, "consumer group protocol: longest heartbeat interval", "ms")
    ] = 15_000
    group_consumer_session_timeout_ms: Annotated[
        int,
        bounded(1),
        Doc(GROUPS, "consumer group protocol: a silent member is fenced after", "ms"),
    ] = 45_000
    group_consumer_min_session_timeout_ms: Annotated[
        int, bounded(1), Doc(GROUPS, "consumer group protocol: shortest session timeout", "ms")
    ] = 45_000
    group_consumer_max_session_timeout_ms: Annotated[
        int, bounded(1), Doc(GROUPS, "consumer group protocol: longest session timeout", "ms")
    ] = 60_000
    group_consumer_max_size: Annotated[
        int,
        bounded(1),
        Doc(GROUPS, "consumer group protocol: members per group", words=UNBOUNDED),
    ] = INT32_MAX
    group_consumer_assignors: Annotated[
        tuple[Literal["uniform", "range"], ...],
        Doc(
            GROUPS,
            "consumer group protocol: server-side assignors a member may name, the first "
            "the default",
        ),
    ] = ("uniform", "range")

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000
