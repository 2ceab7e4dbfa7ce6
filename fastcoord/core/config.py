"""The coordinator's settings, with Kafka's broker names and defaults
(docs/kafka-compatibility.md).

The server's configuration (flags, TOML) fills this Struct; the core reads nothing else.
"""

from __future__ import annotations

import msgspec

INT32_MAX = 2**31 - 1


class GroupConfig(msgspec.Struct, frozen=True, kw_only=True):
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = INT32_MAX
    offsets_retention_minutes: int = 10080
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    offsets_topic_num_partitions: int = 50
    # The consumer group protocol's (KIP-848) settings.
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_min_heartbeat_interval_ms: int = 5000
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_max_size: int = INT32_MAX
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000
