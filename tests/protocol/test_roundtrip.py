"""Every served request and response, every version: encode then decode gives the same object.

Values come from the schema itself (strategies.py): random ones from hypothesis, and three
edge instances per version (smallest numbers with empty strings and arrays; null wherever
the version allows it; largest numbers with long multi-byte strings).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastcoord.protocol.codec import decode, encode
from fastcoord.protocol.schema import Message
from tests.protocol.strategies import (
    ALL_MESSAGE_VERSIONS,
    edge_instance,
    message_id,
    struct_strategy,
)


@pytest.mark.parametrize("case", ALL_MESSAGE_VERSIONS, ids=message_id)
@pytest.mark.parametrize("mode", ["min", "null", "max"])
def test_edge_values_round_trip(case: tuple[type[Message], int], mode: str) -> None:
    cls, version = case
    msg = edge_instance(cls, version, mode)
    assert decode(cls, version, encode(msg, version)) == msg


@pytest.mark.parametrize("case", ALL_MESSAGE_VERSIONS, ids=message_id)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_values_round_trip(case: tuple[type[Message], int], data: st.DataObject) -> None:
    cls, version = case
    msg = data.draw(struct_strategy(cls, version))
    encoded = encode(msg, version)
    assert decode(cls, version, encoded) == msg
    # Encoding is a function of the object: a second encode gives the same bytes.
    assert encode(decode(cls, version, encoded), version) == encoded
