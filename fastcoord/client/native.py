"""The client's heartbeat path: compiled, or its twin with FASTCOORD_NO_EXTENSIONS=1.

A member's Heartbeat request never changes between rebalances but for its correlation id,
so the client encodes it once, as a template, with the schema-driven codec; the hot path
then only copies templates and reads answers (_ext/client_frames.pyx, or its twin
fastcoord/client/frames.py). Both give the same answers; only speed differs.
"""

from __future__ import annotations

from typing import Protocol

from fastcoord import _accel
from fastcoord.protocol import framing
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import HeartbeatRequest

__all__ = ["ClientFrames", "client_frames", "heartbeat_template"]

# Heartbeat v3 (KIP-345) added group.instance.id; an older request cannot carry it.
FIRST_STATIC_MEMBERSHIP = 3


class ClientFrames(Protocol):
    """The interface that _ext/client_frames.pyx and client/frames.py share."""

    def heartbeat_frames(self, templates: list[bytes], first_correlation: int) -> bytes: ...

    def read_answers(
        self,
        buf: bytearray,
        pos: int,
        max_size: int,
        heartbeats: dict[int, object],
        heartbeat_version: int,
        answered: list[tuple[object, int]],
        others: list[tuple[int, bytes]],
    ) -> int: ...


client_frames: ClientFrames = _accel.load("client_frames", "fastcoord.client.frames")


def heartbeat_template(
    version: int,
    client_id: str,
    group_id: str,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
) -> bytes:
    """A member's Heartbeat request frame, size prefix included, with correlation id 0: the
    template that heartbeat_frames copies with a fresh id. ValueError for a static member's
    request below v3, which would silently drop its group instance id."""
    if group_instance_id is not None and version < FIRST_STATIC_MEMBERSHIP:
        raise ValueError(
            f"Heartbeat v{version} cannot carry group_instance_id "
            f"(static members need v{FIRST_STATIC_MEMBERSHIP}+)"
        )
    header = RequestHeader(ApiKey.HEARTBEAT, version, 0, client_id)
    request = HeartbeatRequest(group_id, generation_id, member_id, group_instance_id)
    return framing.encode_request(header, request)
