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
    "STATE_CONSUMER_OPEN",
    "STATE_CONSUMER_HELD",
    "STEADY",
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
hosts = st.sampled_from(["", "x", "y"])
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add_group"), st.integers(0, 6), ints),
        st.tuples(st.just("remove_group"), slots),
        st.tuples(st.just("set_group"), slots, st.integers(0, 6), ints),
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
        st.tuples(st.just("set_flag"), slots, st.sampled_from([1, 2, 4, 8]), st.booleans()),
        st.tuples(st.just("satisfied"), slots),
        st.tuples(st.just("unbind"), ids, ids),
        st.tuples(st.just("heartbeat_id"), ids, ids, st.integers(-1, 3), st.integers(0, 2**40)),
        st.tuples(st.just("heartbeat_answers")),
        st.tuples(st.just("group_states")),
        st.tuples(st.just("slot_of"), ids, ids),
        st.tuples(st.just("set_consumer"), slots, st.integers(-2, 3), st.booleans(), hosts, hosts),
        st.tuples(st.just("consumer"), slots),
        st.tuples(
            st.just("consumer_heartbeat_id"),
            ids,
            ids,
            st.integers(-2, 3),
            st.one_of(st.none(), hosts),
            hosts,
            st.integers(0, 2**40),
        ),
        st.tuples(st.just("consumer_heartbeat_answers")),
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


def test_consumer_heartbeat_answers_a_steady_member_of_an_open_group() -> None:
    for module in (compiled, twin):
        table = module.MemberTable()
        group = table.add_group(module.STATE_CONSUMER_OPEN, 4)
        member = table.add_member(group, 45_000, 30_000)
        table.bind("g", "m", member)
        table.set_consumer(member, 4, True, "c", "/h")
        assert table.consumer(member) == (4, True, "c", "/h")
        assert table.consumer_heartbeat_id("g", "m", 4, "c", "/h", 10) == module.NONE
        assert table.deadline(member) == 45_010
        for args in (
            ("g", "m", 3, "c", "/h"),  # another epoch
            ("g", "m", 4, "d", "/h"),  # another client id
            ("g", "m", 4, None, "/h"),
            ("g", "m", 4, "c", "/i"),  # another host
            ("g", "n", 4, "c", "/h"),
        ):
            assert table.consumer_heartbeat_id(*args, 20) == module.FALLBACK, args
        table.set_consumer(member, 4, False, "c", "/h")  # not steady
        assert table.consumer_heartbeat_id("g", "m", 4, "c", "/h", 30) == module.FALLBACK
        table.set_consumer(member, 4, True, "c", "/h")
        table.set_group(group, module.STATE_CONSUMER_HELD, 4)
        assert table.consumer_heartbeat_id("g", "m", 4, "c", "/h", 40) == module.FALLBACK
        table.set_group(group, module.STATE_CONSUMER_OPEN, 5)  # a new group epoch
        assert table.consumer_heartbeat_id("g", "m", 4, "c", "/h", 50) == module.FALLBACK
        table.set_consumer(member, 5, True, "", "/h")
        assert table.consumer_heartbeat_id("g", "m", 5, None, "/h", 60) == module.NONE
        assert table.deadline(member) == 45_060
        assert table.consumer_heartbeat_answers() == 2
        # Neither protocol's heartbeat answers the other's members.
        assert table.heartbeat_id("g", "m", 5, 70) == module.FALLBACK
        assert table.group_states() == [0, 0, 0, 0, 0]
