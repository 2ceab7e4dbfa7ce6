"""Blocking connections (fastcoord.client.blocking) that a test left open are closed after
it, not by the garbage collector at some later test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fastcoord.client import blocking


@pytest.fixture(autouse=True)
def close_connections() -> Iterator[None]:
    yield
    blocking.close_all()
