"""The topics a consumer group's subscriptions resolve against: Kafka's TopicsImage, small.

The consumer group protocol names topics by name in subscriptions and by id in
assignments; the coordinator resolves one to the other, and needs each topic's partition
count to assign it. The core reads topics only through this interface (the server's
broker implements it); topics are only ever added, so `version()` (which grows when one
is) tells a group whether what it resolved may have changed.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Protocol


class TopicImage(Protocol):
    def topic_by_name(self, name: str) -> tuple[uuid.UUID, int] | None:
        """(topic id, partitions) of a topic, or None if there is none by that name."""

    def topic_by_id(self, topic_id: uuid.UUID) -> tuple[str, int] | None:
        """(name, partitions) of a topic, or None."""

    def topic_names(self) -> list[str]:
        """Every topic's name (what a regular expression subscription is matched against)."""

    def version(self) -> int:
        """Grows whenever a topic is added."""


def topic_id_for(name: str) -> uuid.UUID:
    """The id fastcoord gives a topic: derived from its name, so it is the same on every
    start and in every process (the broker's Metadata answers and the coordinator agree)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"fastcoord-topic:{name}")


class StaticTopics:
    """A TopicImage of fixed topics (name -> partitions): for tests and tools."""

    def __init__(self, topics: Mapping[str, int] | None = None) -> None:
        self._by_name: dict[str, tuple[uuid.UUID, int]] = {}
        self._by_id: dict[uuid.UUID, tuple[str, int]] = {}
        for name, partitions in (topics or {}).items():
            self.add(name, partitions)

    def add(self, name: str, partitions: int) -> None:
        topic_id = topic_id_for(name)
        self._by_name[name] = (topic_id, partitions)
        self._by_id[topic_id] = (name, partitions)

    def topic_by_name(self, name: str) -> tuple[uuid.UUID, int] | None:
        return self._by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> tuple[str, int] | None:
        return self._by_id.get(topic_id)

    def topic_names(self) -> list[str]:
        return list(self._by_name)

    def version(self) -> int:
        return len(self._by_name)
