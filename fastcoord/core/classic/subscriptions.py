"""What a classic consumer group's members subscribe to, read from their JoinGroup metadata.

Kafka's ConsumerProtocolSubscription: the broker reads only the topic names, which decide
which offsets may be deleted (OffsetDelete) or expire while the group has members (KIP-496).
"""

from __future__ import annotations

import struct

from fastcoord.core.group import Group


def subscribed_topics(group: Group) -> set[str] | None:
    """Topics the members of a consumer group subscribe to; None if unknown."""
    if group.protocol_type != "consumer" or not group.protocol_name:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        parsed = parse_subscription_topics(member.metadata(group.protocol_name))
        if parsed is None:
            return None
        topics.update(parsed)
    return topics


def parse_subscription_topics(metadata: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription (version int16, then [string]); None if the
    bytes are not one. Versions 0-3 all start this way."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos = 6
        topics = []
        if count < 0 or count > len(metadata):
            return None
        for _ in range(count):
            (n,) = struct.unpack_from(">h", metadata, pos)
            if n < 0 or pos + 2 + n > len(metadata):
                return None
            topics.append(metadata[pos + 2 : pos + 2 + n].decode("utf-8"))
            pos += 2 + n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
