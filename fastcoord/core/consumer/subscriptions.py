"""What a consumer group's members subscribe to, resolved against the topics there are.

A member subscribes by topic names, by a regular expression (matched against every topic
name, whole), or both. The group's subscribed topics, with their ids and partition counts,
are hashed into its metadata hash: a change of it (a topic created, one given partitions)
starts a new group epoch, as a change of subscription does.
"""

from __future__ import annotations

import re
import uuid
import zlib
from collections.abc import Iterable, Mapping

from fastcoord.core.consumer.group import ConsumerMember
from fastcoord.core.consumer.writes import HeartbeatError
from fastcoord.core.group_manager import GroupManager
from fastcoord.protocol.errors import ErrorCode


def check_regex(regex: str) -> None:
    try:
        re.compile(regex)
    except re.error as exc:
        raise HeartbeatError(
            ErrorCode.INVALID_REGULAR_EXPRESSION,
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.",
        ) from None


def _matches(regex: str, names: list[str]) -> list[str]:
    try:
        pattern = re.compile(regex)
    except re.error:
        return []
    return [name for name in names if pattern.fullmatch(name)]


def member_topics(gm: GroupManager, member: ConsumerMember) -> set[str]:
    """The topic names a member subscribes to, its regular expression resolved against the
    topics there are now."""
    topics = set(member.subscribed_topic_names)
    if member.subscribed_topic_regex:
        topics.update(_matches(member.subscribed_topic_regex, gm.topics.topic_names()))
    return topics


def subscribed_topics(
    gm: GroupManager, members: Iterable[ConsumerMember]
) -> dict[str, tuple[uuid.UUID, int]]:
    """Every topic some member subscribes to that exists: name -> (id, partitions)."""
    names: set[str] = set()
    for member in members:
        names |= member_topics(gm, member)
    out: dict[str, tuple[uuid.UUID, int]] = {}
    for name in sorted(names):
        found = gm.topics.topic_by_name(name)
        if found is not None:
            out[name] = found
    return out


def metadata_hash_of(topics: Mapping[str, tuple[uuid.UUID, int]]) -> int:
    """A hash of the subscribed topics that is the same in every process (a restart must
    not see a change where there is none)."""
    text = ";".join(f"{name}:{tid}:{n}" for name, (tid, n) in sorted(topics.items()))
    return zlib.crc32(text.encode())
