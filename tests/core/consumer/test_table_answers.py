"""The member table answers a ConsumerGroupHeartbeat that changes nothing, and only then.

Each test puts a group in a state through the full path (heartbeat.py), then asks the
table what the server's fast path would ask it (`consumer_heartbeat_id`), and checks the
answer against what the full path does with the same heartbeat: the table answers exactly
when the full path would answer NONE at the same epoch, with no assignment and no record.
"""

from __future__ import annotations

from typing import Any

from fastcoord.core import member_table as columns
from fastcoord.core.config import GroupConfig
from fastcoord.core.consumer.group import ConsumerGroupState
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import ConsumerGroupHeartbeatRequest
from tests.core.consumer.harness import ConsumerHarness
from tests.core.consumer.test_heartbeat import stable_pair

SESSION_MS = GroupConfig().group_consumer_session_timeout_ms
HOST = "/127.0.0.1"  # what the harness's requests come from


def table_answers(h: ConsumerHarness, member_id: str, epoch: int, client_id: str = "client") -> int:
    code: int = h.co.table.consumer_heartbeat_id("g", member_id, epoch, client_id, HOST, h.now)
    return code


def full_path_changes_nothing(h: ConsumerHarness, member_id: str, epoch: int) -> bool:
    written = len(h.records)
    answer: Any = h.beat(member_id, epoch)
    return (
        answer.error_code == ErrorCode.NONE
        and answer.member_epoch == epoch
        and answer.assignment is None
        and len(h.records) == written
    )


def test_a_steady_member_of_a_stable_group_is_answered_by_the_table() -> None:
    h = ConsumerHarness()
    epoch, _, _ = stable_pair(h)
    for member in ("a", "b"):
        assert table_answers(h, member, epoch) == columns.NONE
        assert full_path_changes_nothing(h, member, epoch)
    assert h.co.table.consumer_heartbeat_answers() == 2
    assert h.co.table.consumer_heartbeat_interval_ms == 5000


def test_the_table_leaves_everything_else_to_the_full_path() -> None:
    h = ConsumerHarness()
    epoch, _, _ = stable_pair(h)
    assert table_answers(h, "a", epoch - 1) == columns.FALLBACK  # an old epoch: fenced
    assert table_answers(h, "a", epoch + 1) == columns.FALLBACK
    assert table_answers(h, "nobody", epoch) == columns.FALLBACK
    assert table_answers(h, "a", epoch, client_id="another") == columns.FALLBACK  # rewritten
    assert h.co.table.consumer_heartbeat_id("g", "a", epoch, "client", "/10.0.0.1", h.now) == (
        columns.FALLBACK
    )
    assert h.co.table.consumer_heartbeat_id("other", "a", epoch, "client", HOST, h.now) == (
        columns.FALLBACK
    )
    # A member joining moves the group epoch: the others take the full path until they
    # are at it (the full path gives them the new epoch, or partitions to revoke).
    h.enter("c")
    assert table_answers(h, "a", epoch) == columns.FALLBACK
    assert not full_path_changes_nothing(h, "a", epoch)
    assert h.co.table.consumer_heartbeat_answers() == 0


def test_a_member_revoking_partitions_is_not_steady() -> None:
    h = ConsumerHarness()
    a = h.enter("a")
    h.enter("b")
    told = h.beat("a", a.member_epoch)  # a is told to give half of its partitions up
    assert told.assignment is not None
    group = h.consumer_group()
    assert group.state is ConsumerGroupState.RECONCILING
    assert table_answers(h, "a", told.member_epoch) == columns.FALLBACK
    b = group.members["b"]
    assert table_answers(h, "b", b.member_epoch) == columns.FALLBACK  # waits for partitions


def join(h: ConsumerHarness, member_id: str) -> int:
    """A join whose answer may wait (while appends are held): its request handle."""
    request = ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=["t"],
        topic_partitions=[],
    )
    return h.send(request, 1)


def test_a_group_with_writes_not_yet_durable_is_held() -> None:
    h = ConsumerHarness()
    epoch, _, _ = stable_pair(h)
    slot = h.co.group_manager.consumer_slots["g"]
    h.hold_appends = True
    handle = join(h, "c")
    assert h.answer(handle) is None and h.held  # c's records are written, not yet durable
    group = h.consumer_group()
    assert "g" in h.co.group_manager.unsettled_writes
    assert h.co.table.group_state(slot) == columns.STATE_CONSUMER_HELD
    assert h.co.table.group_generation(slot) == group.group_epoch > epoch
    h.hold_appends = False
    while h.held:
        h.ack()
    assert h.answer(handle).error_code == 0
    assert "g" not in h.co.group_manager.unsettled_writes
    # Durable now: everyone catches up through the full path, then the table answers again.
    for _ in range(3):
        for member in ("a", "b", "c"):
            m = group.members[member]
            h.beat(member, m.member_epoch, owned=owned_by(h, member))
    assert group.state is ConsumerGroupState.STABLE
    assert h.co.table.group_state(slot) == columns.STATE_CONSUMER_OPEN
    for member in ("a", "b", "c"):
        assert table_answers(h, member, group.group_epoch) == columns.NONE


def owned_by(h: ConsumerHarness, member_id: str) -> dict[str, list[int]]:
    """What the member holds, as its client would report it."""
    member = h.consumer_group().members[member_id]
    out: dict[str, list[int]] = {}
    for topic_id, parts in member.current.assigned.items():
        found = h.topics.topic_by_id(topic_id)
        assert found is not None
        out[found[0]] = sorted(parts)
    return out


def test_a_topic_added_holds_the_groups_until_they_resolve_it() -> None:
    h = ConsumerHarness()
    epoch, _, _ = stable_pair(h)
    h.topics.add("later", 2)
    h.co.topics_changed()
    assert table_answers(h, "a", epoch) == columns.FALLBACK
    h.beat("a", epoch)  # the full path resolves the subscriptions again (nothing new for t)
    assert table_answers(h, "b", epoch) == columns.NONE


def test_heartbeats_the_table_answers_keep_the_member_alive() -> None:
    h = ConsumerHarness()
    epoch, _, _ = stable_pair(h)
    for _ in range(4):  # 4 sessions long, b heartbeats only through the table
        h.sleep(SESSION_MS // 3)
        assert table_answers(h, "b", epoch) == columns.NONE
        assert h.beat("a", epoch).error_code == 0
    assert set(h.consumer_group().members) == {"a", "b"}
    h.sleep(SESSION_MS + 1)  # then b falls silent, and is fenced
    assert "b" not in h.consumer_group().members


def test_the_member_table_follows_members_out() -> None:
    h = ConsumerHarness()
    epoch, _, _ = stable_pair(h)
    members = len(h.co.table)
    h.exit("b")
    assert len(h.co.table) == members - 1
    assert h.co.table.slot_of("g", "b") == -1
    assert table_answers(h, "b", epoch) == columns.FALLBACK
    h.exit("a")
    h.sleep(h.co.config.offsets_retention_check_interval_ms + 1)  # the empty group goes
    assert h.consumer_group() is None
    assert "g" not in h.co.group_manager.consumer_slots


def test_a_loaded_member_that_never_returns_is_fenced_after_its_session() -> None:
    h = ConsumerHarness()
    epoch, _, _ = stable_pair(h)
    fresh = h.replayed()  # the coordinator after a restart: sessions start at the load
    for member in ("a", "b"):
        slot = fresh.table.slot_of("g", member)
        assert slot >= 0 and fresh.table.consumer(slot)[:2] == (epoch, True)
        assert fresh.table.deadline(slot) == h.now + SESSION_MS
    fresh.advance(h.now + SESSION_MS + 1)
    assert not fresh.consumer_groups["g"].members
