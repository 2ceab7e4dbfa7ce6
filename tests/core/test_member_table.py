"""The compiled member table against its twin: same slots, answers and errors, any sequence."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord._ext import member_table as compiled  # type: ignore[attr-defined]
from fastcoord.core import member_table as twin

CONSTANTS = [
    "STATE_EMPTY",
    "STATE_PREPARING_REBALANCE",
    "STATE_COMPLETING_REBALANCE",
    "STATE_STABLE",
    "STATE_DEAD",
    "FALLBACK",
    "NONE",
    "ILLEGAL_GENERATION",
    "REBALANCE_IN_PROGRESS",
]


def test_constants_agree() -> None:
    assert [getattr(compiled, c) for c in CONSTANTS] == [getattr(twin, c) for c in CONSTANTS]


slots = st.integers(-2, 40)
ids = st.sampled_from(["a", "b", "c"])
ints = st.integers(0, 2**31 - 1)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add_group"), st.integers(0, 4), ints),
        st.tuples(st.just("remove_group"), slots),
        st.tuples(st.just("set_group"), slots, st.integers(0, 4), ints),
        st.tuples(st.just("group_state"), slots),
        st.tuples(st.just("group_generation"), slots),
        st.tuples(st.just("add_member"), slots, ints, ints),
        st.tuples(st.just("remove_member"), slots),
        st.tuples(st.just("deadline"), slots),
        st.tuples(st.just("set_deadline"), slots, st.integers(0, 2**62)),
        st.tuples(st.just("timeouts"), slots),
        st.tuples(st.just("set_timeouts"), slots, ints, ints),
        st.tuples(st.just("group_of"), slots),
        st.tuples(st.just("heartbeat"), slots, st.integers(-1, 3), st.integers(0, 2**40)),
        st.tuples(st.just("bind"), ids, ids, slots),
        st.tuples(st.just("flags"), slots),
        st.tuples(st.just("set_flag"), slots, st.sampled_from([1, 2, 4]), st.booleans()),
        st.tuples(st.just("satisfied"), slots),
        st.tuples(st.just("unbind"), ids, ids),
        st.tuples(st.just("heartbeat_id"), ids, ids, st.integers(-1, 3), st.integers(0, 2**40)),
        st.tuples(st.just("heartbeat_answers")),
        st.tuples(st.just("group_states")),
    ),
    max_size=120,
)


def run(table: Any, op: tuple[Any, ...]) -> Any:
    try:
        return ("ok", getattr(table, op[0])(*op[1:]), len(table))
    except KeyError as exc:
        return ("KeyError", str(exc))


@settings(max_examples=400)
@given(operations)
def test_random_operations_agree(ops: list[tuple[Any, ...]]) -> None:
    a, b = compiled.MemberTable(), twin.MemberTable()
    for op in ops:
        assert run(a, op) == run(b, op), op


def test_heartbeat_answers() -> None:
    for module in (compiled, twin):
        table = module.MemberTable()
        group = table.add_group(module.STATE_STABLE, 3)
        member = table.add_member(group, 10_000, 60_000)
        assert table.heartbeat(member, 3, 5) == module.NONE
        assert table.deadline(member) == 10_005
        assert table.heartbeat(member, 2, 6) == module.ILLEGAL_GENERATION
        assert table.deadline(member) == 10_005
        table.set_group(group, module.STATE_PREPARING_REBALANCE, 3)
        assert table.heartbeat(member, 2, 7) == module.REBALANCE_IN_PROGRESS
        assert table.deadline(member) == 10_005  # an old generation does not keep it alive
        assert table.heartbeat(member, 3, 8) == module.REBALANCE_IN_PROGRESS
        assert table.deadline(member) == 10_008
        table.set_group(group, module.STATE_EMPTY, 4)
        assert table.heartbeat(member, 4, 9) == module.FALLBACK


def test_heartbeat_id_counts_its_answers_by_code() -> None:
    for module in (compiled, twin):
        table = module.MemberTable()
        group = table.add_group(module.STATE_STABLE, 3)
        member = table.add_member(group, 10_000, 60_000)
        table.bind("g", "m", member)
        assert table.heartbeat_id("g", "m", 3, 1) == module.NONE
        assert table.heartbeat_id("g", "m", 3, 2) == module.NONE
        assert table.heartbeat_id("g", "m", 2, 3) == module.ILLEGAL_GENERATION
        assert table.heartbeat_id("g", "nobody", 3, 4) == module.FALLBACK  # not counted
        assert table.heartbeat(member, 3, 5) == module.NONE  # by slot: not counted either
        table.set_group(group, module.STATE_PREPARING_REBALANCE, 3)
        assert table.heartbeat_id("g", "m", 3, 6) == module.REBALANCE_IN_PROGRESS
        assert table.heartbeat_answers() == {
            module.NONE: 2,
            module.ILLEGAL_GENERATION: 1,
            module.REBALANCE_IN_PROGRESS: 1,
        }


def test_slots_are_reused_and_the_table_grows() -> None:
    for module in (compiled, twin):
        table = module.MemberTable()
        group = table.add_group(module.STATE_STABLE, 1)
        members = [table.add_member(group, 1, 1) for _ in range(1000)]
        assert members == list(range(1000)) and len(table) == 1000
        table.remove_member(17)
        assert table.add_member(group, 2, 2) == 17
        assert table.timeouts(17) == (2, 2)
