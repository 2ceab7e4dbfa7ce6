"""The coordinator core: heartbeats of 100k members, and a 10k-member rebalance.

Both run the compiled modules (timing wheel, member table) or their twins, chosen per
benchmark by passing them to the Coordinator. Members are loaded by replaying group
metadata records, the path a restart takes.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from fastcoord._ext import member_table as compiled_table  # type: ignore[attr-defined]
from fastcoord._ext import timing_wheel as compiled_wheel  # type: ignore[attr-defined]
from fastcoord.core import member_table as twin_table
from fastcoord.core import timing_wheel as twin_wheel
from fastcoord.core.config import GroupConfig
from fastcoord.core.coordinator import Coordinator
from fastcoord.core.records import GroupMetadataKey, GroupMetadataValue, MemberMetadataValue, Record
from fastcoord.protocol.messages import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)

from .common import member_id, scaled

MODULES: dict[str, tuple[ModuleType, ModuleType]] = {
    "compiled": (compiled_wheel, compiled_table),
    "twin": (twin_wheel, twin_table),
}
NOW = 1_000_000
CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0)
SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x05topic\xff\xff\xff\xff"


def coordinator(impl: str) -> Coordinator:
    wheel, table = MODULES[impl]
    return Coordinator(CONFIG, NOW, wheel=wheel.TimingWheel(NOW), table=table.MemberTable())


def load_group(co: Coordinator, group_id: str, members: list[str]) -> None:
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=1,
        protocol="range",
        leader=members[0],
        current_state_timestamp=NOW,
        members=tuple(
            MemberMetadataValue(
                m, None, "client", "/127.0.0.1", 300_000, 45_000, SUBSCRIPTION, b"assignment"
            )
            for m in members
        ),
    )
    co.replay(Record(GroupMetadataKey(group_id), value), NOW, loading=True)


def loaded(impl: str, groups: int, per_group: int) -> tuple[Coordinator, list[tuple[str, str]]]:
    co = coordinator(impl)
    ids = []
    for g in range(groups):
        members = [member_id(g * per_group + i) for i in range(per_group)]
        load_group(co, f"group-{g}", members)
        ids.extend((f"group-{g}", m) for m in members)
    return co, ids


HEARTBEAT_BATCH = 10_000
_HEARTBEATS: dict[str, tuple[Coordinator, list[tuple[str, str]]]] = {}


def heartbeat_setup(impl: str) -> tuple[Coordinator, list[tuple[str, str]]]:
    # Built once per process on first use: 100k members take a few seconds to load.
    if impl not in _HEARTBEATS:
        co, ids = loaded(impl, scaled(1_000), 100)
        _HEARTBEATS[impl] = (co, ids[:: max(1, len(ids) // HEARTBEAT_BATCH)][:HEARTBEAT_BATCH])
    return _HEARTBEATS[impl]


class CoreHeartbeat:
    """10,000 heartbeats (per call) among 100,000 members in 1,000 Stable groups.

    The figure is per 10,000 heartbeats: divide by 10,000 for one. This is the call the
    server makes for every Heartbeat request (Coordinator.heartbeat).
    """

    params = (["compiled", "twin"],)
    param_names = ["impl"]
    timeout = 300

    def time_heartbeats(self, impl: str) -> None:
        co, ids = heartbeat_setup(impl)
        beat = co.heartbeat
        for group_id, mid in ids:
            beat(group_id, mid, 1, None, 4, NOW + 1000)


class Rebalance:
    """A rebalance of one big group, from the last JoinGroup to every SyncGroup answered.

    Every member but one has already rejoined; the timed part is the last JoinGroup (which
    completes the join: one answer per member, the member list to the leader), the leader's
    SyncGroup with an assignment for everyone, the followers' SyncGroups, and the store of
    the assignment (acknowledged at once).
    """

    params = ([1_000, 10_000], ["compiled", "twin"])
    param_names = ["members", "impl"]
    timeout = 300

    def setup(self, members: int, impl: str) -> None:
        n = scaled(members) if members > 1_000 else min(members, scaled(members * 10))
        self.co = co = coordinator(impl)
        self.members = [member_id(i) for i in range(n)]
        load_group(co, "big", self.members)
        self.handle = 0
        for m in self.members[:-1]:
            self._join(m)
        self.last = self.members[-1]

    def _join(self, m: str) -> Any:
        self.handle += 1
        return self.co.handle(
            self.handle,
            JoinGroupRequest(
                group_id="big",
                session_timeout_ms=45_000,
                rebalance_timeout_ms=300_000,
                member_id=m,
                protocol_type="consumer",
                protocols=[JoinGroupRequestProtocol("range", SUBSCRIPTION + b"x")],
            ),
            7,
            NOW,
        )

    def time_last_join_to_all_syncs(self, members: int, impl: str) -> None:
        co = self.co
        answered = len(self._join(self.last).responses)
        assignments = [SyncGroupRequestAssignment(m, b"partitions") for m in self.members]
        for i, m in enumerate(self.members):
            self.handle += 1
            result = co.handle(
                self.handle,
                SyncGroupRequest(
                    group_id="big",
                    generation_id=2,
                    member_id=m,
                    assignments=assignments if i == 0 else [],
                ),
                5,
                NOW,
            )
            answered += len(result.responses)
            if result.append is not None:
                answered += len(co.complete_append(result.append, 0, NOW).responses)
        assert answered == 2 * len(self.members), answered
