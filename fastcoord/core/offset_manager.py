"""The OffsetManager: Kafka's OffsetMetadataManager, the owner of committed offsets.

It holds each group's offsets (an OffsetTable per group id) and replays their records. It
sees groups only through a GroupView: whether a commit is admitted (and by whom), whether
a group's offsets are visible, which may be deleted, and when they expire. The
handlers of OffsetCommit, OffsetFetch and OffsetDelete (offsets.py) take it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, Protocol

from fastcoord.core.context import Context
from fastcoord.core.native import offset_table
from fastcoord.core.records import OffsetCommitKey, OffsetCommits, OffsetCommitValue, Record
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from fastcoord.core.offset_table import OffsetTable

TopicPartition = tuple[str, int]


class Expiration(NamedTuple):
    """Which of a group's offsets may expire, and counting from when."""

    since_ms: int | None  # None: from each offset's commit timestamp
    topic_expires: Callable[[str], bool]


# Why a commit is refused, or None (a commit may create a simple group, and counts as a
# sign of life of its member): (batch, now_ms) -> error.
CommitCheck = Callable[[OffsetCommitBatch, int], "ErrorCode | None"]


class GroupView(Protocol):
    """What the offset manager may know of groups (Kafka's Group.validateOffset*)."""

    def offset_commit_check(self, group_id: str) -> CommitCheck:
        """The CommitCheck of commits to the group: the validateOffsetCommit of the kind
        of group the id names. It holds for a run of commits to the group, asked once:
        checking a commit never changes which kind the id names (a classic check may
        create a classic group where there was none of either kind), and a commit changes
        nothing until it is durable."""

    def validate_offset_fetch(
        self, group_id: str, member_id: str | None, member_epoch: int
    ) -> ErrorCode | None:
        """Why a fetch naming a member (OffsetFetch v9+) is refused, or None."""

    def offsets_visible(self, group_id: str) -> bool:
        """Whether OffsetFetch sees the group's offsets (it exists and is not Dead)."""

    def validate_offset_delete(self, group_id: str) -> ErrorCode | Callable[[str], bool]:
        """Why offsets of the group cannot be deleted, or which topics' can not."""

    def ensure_group(self, group_id: str, now_ms: int) -> None:
        """A group exists for offsets replayed into it."""

    def offset_expiration(self, group_id: str) -> Expiration | None:
        """Which of the group's offsets may expire; None: none."""


_NO_OFFSETS = offset_table.OffsetTable()  # of a group with none: never written


class OffsetManager:
    def __init__(self, ctx: Context, groups: GroupView) -> None:
        self.ctx = ctx
        self.config = ctx.config
        self.groups = groups
        self._offsets: dict[str, OffsetTable] = {}

    def offsets(self, group_id: str) -> OffsetTable:
        """The group's offsets (an empty table, not to be written, if it has none)."""
        table: OffsetTable = self._offsets.get(group_id, _NO_OFFSETS)
        return table

    def has_offsets(self, group_id: str) -> bool:
        return len(self._offsets.get(group_id, _NO_OFFSETS)) > 0

    def count(self) -> int:
        return sum(len(t) for t in self._offsets.values())

    def group_ids(self) -> list[str]:
        """The groups with offsets in memory."""
        return list(self._offsets)

    def drop(self, group_id: str) -> None:
        """The group is gone: its offsets go with it from memory (the log keeps what it has)."""
        self._offsets.pop(group_id, None)

    def _table(self, group_id: str) -> OffsetTable:
        table = self._offsets.get(group_id)
        if table is None:
            table = self._offsets[group_id] = offset_table.OffsetTable()
        return table

    # -- replay ---------------------------------------------------------------------------

    def replay_offset(
        self, key: OffsetCommitKey, value: OffsetCommitValue | None, now_ms: int
    ) -> None:
        if value is None:
            table = self._offsets.get(key.group)
            if table is not None:
                table.pop(key.topic, key.partition)
                if not len(table):
                    del self._offsets[key.group]
            return
        self.groups.ensure_group(key.group, now_ms)
        self._table(key.group).put(key.topic, key.partition, value)

    def replay_commits(self, commits: OffsetCommits, now_ms: int) -> None:
        group_id = commits.group_id
        self.groups.ensure_group(group_id, now_ms)
        table = self._offsets.get(group_id)  # _table's, without its call: once a commit
        if table is None:
            table = self._offsets[group_id] = offset_table.OffsetTable()
        table.replay_commits(commits.batch, commits.commit_timestamp)

    # -- retention ------------------------------------------------------------------------

    def expired(self, group_id: str, now_ms: int) -> list[Record]:
        """Tombstones of the group's offsets that have outlived offsets.retention.minutes."""
        table = self._offsets.get(group_id)
        if table is None:
            return []
        expiration = self.groups.offset_expiration(group_id)
        if expiration is None:
            return []
        retention = self.config.offsets_retention_ms
        since, topic_expires = expiration
        return [
            Record(OffsetCommitKey(group_id, topic, partition), None)
            for (topic, partition), v in table.items()
            if topic_expires(topic)
            and (v.commit_timestamp if since is None else since) + retention <= now_ms
        ]

    def tombstones(self, group_id: str) -> list[Record]:
        """Tombstones of every offset of the group, in (topic, partition) order."""
        return [Record(OffsetCommitKey(group_id, t, p), None) for t, p in self.offsets(group_id)]
