"""Raw-frame clients (test_raw_frames.Client) that a test left open are closed after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.interop.test_raw_frames import OPEN


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    yield
    while OPEN:
        OPEN.pop().close()
