"""Pure-Python twin of _ext/member_table.pyx: the hot columns of every member and group.

The heartbeat is by far the most frequent request, so what it reads and writes lives in
flat columns indexed by slot rather than on Python objects: per member its session deadline,
session and rebalance timeouts, flags (awaiting a join or a sync, new) and group slot; per
group its state and generation. Slots are reused after removal. The table also maps
(group id, member id) to a slot, so `heartbeat_id` is the whole common path: it answers
Stable, CompletingRebalance and PreparingRebalance, and returns FALLBACK for anything else,
which the caller answers on the full path (fastcoord.core.classic.session.heartbeat_error).

Consumer groups (the consumer group protocol) live in the same columns, in states of their
own that heartbeat_id never answers: a member's epoch, whether it is steady (reconciled to
its group's target assignment, nothing pending) and the client id and host it last
heartbeated from. `consumer_heartbeat_id` answers the ConsumerGroupHeartbeat that changes
nothing (a steady member at its epoch, from where it was, in a group whose target is its
epoch and that has nothing unsettled): it moves the session deadline and returns NONE, and
leaves every other heartbeat (FALLBACK) to fastcoord.core.consumer.heartbeat.
"""

from __future__ import annotations

# Group states as small integers, the same numbers in the compiled table.
STATE_EMPTY = 0
STATE_PREPARING_REBALANCE = 1
STATE_COMPLETING_REBALANCE = 2
STATE_STABLE = 3
STATE_DEAD = 4
# A consumer group whose steady members the table may answer, and one whose heartbeats all
# take the full path (a new target assignment is due, writes are not yet durable, or the
# topics changed since the group resolved its subscriptions).
STATE_CONSUMER_OPEN = 5
STATE_CONSUMER_HELD = 6

# Member flags.
AWAITING_JOIN = 1
AWAITING_SYNC = 2
NEW = 4
STEADY = 8  # a consumer member reconciled to its target, with nothing pending

FALLBACK = -1
NONE = 0
ILLEGAL_GENERATION = 22
REBALANCE_IN_PROGRESS = 27


class MemberTable:
    def __init__(self) -> None:
        self._deadline: list[int] = []
        self._session_timeout: list[int] = []
        self._rebalance_timeout: list[int] = []
        self._group: list[int] = []
        self._flags: list[int] = []
        self._epoch: list[int] = []
        self._client_id: list[str] = []
        self._client_host: list[str] = []
        self._in_use: list[bool] = []
        self._free: list[int] = []
        self._group_state: list[int] = []
        self._group_generation: list[int] = []
        self._group_in_use: list[bool] = []
        self._group_free: list[int] = []
        self._members = 0
        self._index: dict[str, dict[str, int]] = {}  # group id -> member id -> slot
        # Heartbeats heartbeat_id answered, by error code: every path that answers a
        # heartbeat from the table comes through it, so the metrics count them here.
        self._answered = {NONE: 0, REBALANCE_IN_PROGRESS: 0, ILLEGAL_GENERATION: 0}
        self._consumer_answered = 0
        # What consumer_heartbeat_id's answers carry (the group manager sets it).
        self.consumer_heartbeat_interval_ms = 0

    def __len__(self) -> int:
        return self._members

    # -- groups ----------------------------------------------------------------------

    def add_group(self, state: int, generation: int) -> int:
        if self._group_free:
            slot = self._group_free.pop()
            self._group_state[slot] = state
            self._group_generation[slot] = generation
            self._group_in_use[slot] = True
        else:
            slot = len(self._group_state)
            self._group_state.append(state)
            self._group_generation.append(generation)
            self._group_in_use.append(True)
        return slot

    def remove_group(self, slot: int) -> None:
        self._check_group(slot)
        self._group_in_use[slot] = False
        self._group_free.append(slot)

    def set_group(self, slot: int, state: int, generation: int) -> None:
        self._check_group(slot)
        self._group_state[slot] = state
        self._group_generation[slot] = generation

    def group_state(self, slot: int) -> int:
        self._check_group(slot)
        return self._group_state[slot]

    def group_generation(self, slot: int) -> int:
        self._check_group(slot)
        return self._group_generation[slot]

    def _check_group(self, slot: int) -> None:
        if not (0 <= slot < len(self._group_in_use) and self._group_in_use[slot]):
            raise KeyError(f"no group in slot {slot}")

    # -- members ---------------------------------------------------------------------

    def add_member(
        self, group_slot: int, session_timeout_ms: int, rebalance_timeout_ms: int
    ) -> int:
        self._check_group(group_slot)
        if self._free:
            slot = self._free.pop()
            self._deadline[slot] = 0
            self._session_timeout[slot] = session_timeout_ms
            self._rebalance_timeout[slot] = rebalance_timeout_ms
            self._group[slot] = group_slot
            self._flags[slot] = 0
            self._epoch[slot] = 0
            self._client_id[slot] = ""
            self._client_host[slot] = ""
            self._in_use[slot] = True
        else:
            slot = len(self._deadline)
            self._deadline.append(0)
            self._session_timeout.append(session_timeout_ms)
            self._rebalance_timeout.append(rebalance_timeout_ms)
            self._group.append(group_slot)
            self._flags.append(0)
            self._epoch.append(0)
            self._client_id.append("")
            self._client_host.append("")
            self._in_use.append(True)
        self._members += 1
        return slot

    def remove_member(self, slot: int) -> None:
        self._check_member(slot)
        self._in_use[slot] = False
        self._free.append(slot)
        self._members -= 1

    def _check_member(self, slot: int) -> None:
        if not (0 <= slot < len(self._in_use) and self._in_use[slot]):
            raise KeyError(f"no member in slot {slot}")

    def deadline(self, slot: int) -> int:
        self._check_member(slot)
        return self._deadline[slot]

    def set_deadline(self, slot: int, deadline_ms: int) -> None:
        self._check_member(slot)
        self._deadline[slot] = deadline_ms

    def timeouts(self, slot: int) -> tuple[int, int]:
        self._check_member(slot)
        return self._session_timeout[slot], self._rebalance_timeout[slot]

    def set_timeouts(self, slot: int, session_timeout_ms: int, rebalance_timeout_ms: int) -> None:
        self._check_member(slot)
        self._session_timeout[slot] = session_timeout_ms
        self._rebalance_timeout[slot] = rebalance_timeout_ms

    def flags(self, slot: int) -> int:
        self._check_member(slot)
        return self._flags[slot]

    def set_flag(self, slot: int, flag: int, on: bool) -> None:
        self._check_member(slot)
        if on:
            self._flags[slot] |= flag
        else:
            self._flags[slot] &= ~flag

    def satisfied(self, slot: int) -> bool:
        """Kafka's hasSatisfiedHeartbeat at session expiry: a member waiting in a rebalance
        is alive without heartbeats, unless it is new (it never finished a join)."""
        flags = self.flags(slot)
        return not flags & NEW and bool(flags & (AWAITING_JOIN | AWAITING_SYNC))

    def group_of(self, slot: int) -> int:
        self._check_member(slot)
        return self._group[slot]

    def bind(self, group_id: str, member_id: str, slot: int) -> None:
        """Make (group id, member id) find `slot` in heartbeat_id."""
        self._check_member(slot)
        self._index.setdefault(group_id, {})[member_id] = slot

    def unbind(self, group_id: str, member_id: str) -> None:
        members = self._index.get(group_id)
        if members is not None:
            members.pop(member_id, None)
            if not members:
                del self._index[group_id]

    def slot_of(self, group_id: str, member_id: str) -> int:
        """The slot bound to (group id, member id), or -1."""
        members = self._index.get(group_id)
        return -1 if members is None else members.get(member_id, -1)

    def heartbeat_id(self, group_id: str, member_id: str, generation: int, now_ms: int) -> int:
        """heartbeat() for a member found by its ids: the two id lookups, then the checks.
        FALLBACK if the ids are not bound."""
        slot = self.slot_of(group_id, member_id)
        if slot < 0:
            return FALLBACK
        code = self.heartbeat(slot, generation, now_ms)
        if code >= 0:
            self._answered[code] += 1
        return code

    def group_states(self) -> list[int]:
        """[classic groups in use in state 0, 1, ... 4]: what the metrics show, without a
        walk over the groups in Python."""
        counts = [0] * 5
        for state, in_use in zip(self._group_state, self._group_in_use, strict=True):
            if in_use and state < 5:
                counts[state] += 1
        return counts

    def heartbeat_answers(self) -> dict[int, int]:
        """{error code: heartbeats heartbeat_id answered with it}."""
        return dict(self._answered)

    def heartbeat(self, slot: int, generation: int, now_ms: int) -> int:
        """A heartbeat of a known dynamic member: an error code, or FALLBACK.

        The order is heartbeat_error's: PreparingRebalance answers REBALANCE_IN_PROGRESS
        (keeping a member of the current generation alive) before the generation check;
        Stable and CompletingRebalance check the generation, then move the deadline.
        """
        self._check_member(slot)
        group = self._group[slot]
        state = self._group_state[group]
        if state == STATE_PREPARING_REBALANCE:
            if generation == self._group_generation[group]:
                self._deadline[slot] = now_ms + self._session_timeout[slot]
            return REBALANCE_IN_PROGRESS
        if state in (STATE_STABLE, STATE_COMPLETING_REBALANCE):
            if generation != self._group_generation[group]:
                return ILLEGAL_GENERATION
            self._deadline[slot] = now_ms + self._session_timeout[slot]
            return NONE
        return FALLBACK

    # -- consumer group members ------------------------------------------------------

    def set_consumer(
        self, slot: int, epoch: int, steady: bool, client_id: str, client_host: str
    ) -> None:
        """A consumer member's epoch, whether it is steady, and where it heartbeats from."""
        self._check_member(slot)
        self._epoch[slot] = epoch
        self._client_id[slot] = client_id
        self._client_host[slot] = client_host
        self.set_flag(slot, STEADY, steady)

    def consumer(self, slot: int) -> tuple[int, bool, str, str]:
        """(epoch, steady, client id, client host) of a consumer member."""
        self._check_member(slot)
        steady = bool(self._flags[slot] & STEADY)
        return self._epoch[slot], steady, self._client_id[slot], self._client_host[slot]

    def consumer_heartbeat_id(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        client_id: str | None,
        client_host: str,
        now_ms: int,
    ) -> int:
        """A ConsumerGroupHeartbeat with every optional field null, from a member found by
        its ids: NONE if it changes nothing (the session deadline moves), else FALLBACK.

        Nothing changes when the member is steady at `epoch`, its group is open (its target
        assignment is at the group epoch, which is `epoch` too, and nothing is unsettled),
        and the client id and host are those the member has (the full path would write
        them). A null client id is the empty one, as the full path takes it.
        """
        slot = self.slot_of(group_id, member_id)
        if slot < 0:
            return FALLBACK
        self._check_member(slot)
        group = self._group[slot]
        if (
            self._group_state[group] != STATE_CONSUMER_OPEN
            or not self._flags[slot] & STEADY
            or epoch != self._epoch[slot]
            or epoch != self._group_generation[group]
            or (client_id or "") != self._client_id[slot]
            or client_host != self._client_host[slot]
        ):
            return FALLBACK
        self._deadline[slot] = now_ms + self._session_timeout[slot]
        self._consumer_answered += 1
        return NONE

    def consumer_heartbeat_answers(self) -> int:
        """ConsumerGroupHeartbeats consumer_heartbeat_id answered (all NONE)."""
        return self._consumer_answered
