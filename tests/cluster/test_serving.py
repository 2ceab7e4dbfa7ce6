"""What a node serves, from the ownership map and its ZooKeeper session: loading before
serving, dropping at once, and never serving past the moment ZooKeeper may have expired
its session."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fastcoord.cluster.serving import Changes, Serving

TIMEOUT_MS = 6_000


def test_a_partition_is_loaded_then_served_and_dropped_at_once() -> None:
    node = Serving(1, TIMEOUT_MS)
    node.connected()
    assert node.map_read({0: 1, 1: 2, 2: 1}) == Changes(load=[0, 2])
    assert node.owned() == {0: False, 2: False}  # loading: not served yet
    assert node.loaded(0)
    assert node.owned() == {0: True, 2: False}
    assert node.map_read({0: 1, 1: 2, 2: 1}) == Changes()  # the same map: nothing to do
    assert node.map_read({0: 2, 1: 2, 2: 1}) == Changes(drop=[0])
    assert not node.loaded(0)  # a load that ends after the partition moved away
    assert node.owned() == {2: False}


def test_a_suspended_session_serves_a_third_of_its_timeout_then_nothing() -> None:
    node = Serving(1, TIMEOUT_MS)
    node.connected()
    node.map_read({0: 1})
    node.loaded(0)
    node.suspended(10_000)
    node.suspended(11_000)  # the first loss counts
    assert node.serving_until_ms() == 12_000
    node.connected()  # the session resumed: what it owned and loaded is served again
    assert node.owned() == {0: True} and node.serving_until_ms() is None


def test_a_lost_session_drops_everything_until_the_map_says_again() -> None:
    node = Serving(1, TIMEOUT_MS)
    node.connected()
    node.map_read({0: 1, 3: 1})
    node.loaded(0)
    assert node.lost() == Changes(drop=[0, 3])
    assert node.owned() == {}
    node.connected()
    assert node.map_read({0: 1}) == Changes(load=[0])
    assert node.owned() == {0: False}


@given(
    st.integers(0, 10**9),  # when ZooKeeper last heard from the node
    st.integers(1_000, 60_000),  # the session timeout
    st.floats(0, 1),  # how far into kazoo's read timeout the loss was noticed
)
def test_the_node_stops_before_zookeeper_can_expire_its_session(
    last_heard_ms: int, timeout_ms: int, into: float
) -> None:
    """ZooKeeper expires the session at last_heard + timeout, and only then can the map
    give the node's partitions to another; kazoo notices the loss within its read timeout,
    two thirds of the session timeout. The node has stopped serving by then."""
    node = Serving(1, timeout_ms)
    node.connected()
    node.map_read({0: 1})
    node.loaded(0)
    noticed = last_heard_ms + int(into * timeout_ms * 2 / 3)
    node.suspended(noticed)
    expiry = last_heard_ms + timeout_ms
    until = node.serving_until_ms()
    assert until is not None and until <= expiry
