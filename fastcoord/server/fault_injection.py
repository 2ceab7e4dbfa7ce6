"""Fault rules carried out on live requests: errors, latency, dropped connections, pauses;
and the one rule that is no request's, a coordinator's move, handed to the server when due.

Every request on the server's Python path passes `intercept` first; with no rule in force
that is one attribute check. While a rule may apply to heartbeats, the member table stops
answering them on its own (Server.heartbeat_table), so that every heartbeat comes here.

A request that meets a rule keeps its place in its connection's answer order (its slot),
whatever the action: an error fills the slot at once; latency and a pause hand the request
to the server later, to be handled as if it had just arrived, and unseen by the rules
again; a dropped connection takes its unanswered slots with it, as a broker that went away
would. A pause holds its requests until its time is up or it is deleted: none is lost,
and all are handled then, in the order they came.

Each injection is counted (fastcoord_faults_injected_total), written to the event log, and
logged at most once a second per rule, with how many it met since the last line.

The injector sees the server only as its `FaultHost`: the clock, a timer, the counters, the
event log and the two ways to handle a request, so that this module does not import the
server and a test can run the rules over a host of its own, in virtual time.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from fastcoord.core.result import Event
from fastcoord.faults import Fault, FaultRule, FaultSet
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.commit_batch import OffsetCommitBatch
from fastcoord.protocol.error_responses import error_response
from fastcoord.protocol.headers import RequestHeader

if TYPE_CHECKING:
    from fastcoord.server.connection import Served, Slot
    from fastcoord.server.event_log import EventLog
    from fastcoord.server.metrics import Metrics

log = logging.getLogger("fastcoord.faults")

LOG_EVERY_MS = 1000
HEARTBEAT = int(ApiKey.HEARTBEAT)


def groups_of(request: Any) -> Iterator[str]:
    """The group ids a request names (none for Metadata, say)."""
    group_id = getattr(request, "group_id", "")
    if group_id:
        yield group_id
    for group in getattr(request, "groups", ()):
        yield group if isinstance(group, str) else group.group_id
    yield from getattr(request, "groups_names", ())
    if getattr(request, "key_type", -1) == 0 and getattr(request, "key", ""):
        yield request.key
    yield from getattr(request, "coordinator_keys", ())


class FaultHost(Protocol):
    """What the injector needs of the server."""

    metrics: Metrics
    event_log: EventLog | None

    def now_ms(self) -> int: ...

    def later(self, at_ms: int, fn: Callable[[], object]) -> None:
        """Call fn at at_ms (or at shutdown, whichever comes first)."""

    def handle(self, slot: Slot, header: RequestHeader, request: Served) -> None:
        """Handle a request, past the rules: a delayed or paused one, now due."""

    def commit_offsets_now(self, commits: list[tuple[Slot, OffsetCommitBatch]]) -> None:
        """Handle OffsetCommits, past the rules."""

    def move_coordinator(self, fault: Fault) -> None:
        """Carry out a move_coordinator rule, now due (counting it injected once done)."""


class FaultInjector:
    def __init__(self, host: FaultHost, seed: int | None = None) -> None:
        self.host = host
        self.faults = FaultSet()
        self._random = random.Random(seed)
        self._logged: dict[int, tuple[int, int]] = {}  # fault id -> (last line at, met since)
        # Called when the rules in force change (the server's reactor thread must know at
        # once whether heartbeats may skip dispatch).
        self.changed: Callable[[], None] = lambda: None

    # -- the rules ----------------------------------------------------------------------

    def add(self, rule: FaultRule) -> Fault:
        now = self.host.now_ms()
        fault = self.faults.add(rule, now)
        self.changed()
        log.warning("fault rule added: %s", self._span(fault))
        self._watch(now)
        if fault.kind == "move_coordinator":
            self.host.later(fault.starts_ms, partial(self._move, fault))
        return fault

    def _move(self, fault: Fault) -> None:
        if not fault.deleted:
            self.host.move_coordinator(fault)

    def remove(self, fault_id: int) -> Fault | None:
        now = self.host.now_ms()
        fault = self.faults.get(fault_id)
        over = fault is not None and fault.state(now) == "ended"
        self.faults.remove(fault_id, now)
        self.changed()
        if fault is not None:
            self._ended(fault, "deleted", quiet=over)
        return fault

    def clear(self) -> list[Fault]:
        now = self.host.now_ms()
        over = {f.id for f in self.faults if f.state(now) == "ended"}
        faults = self.faults.clear(now)
        self.changed()
        for fault in faults:
            self._ended(fault, "deleted", quiet=fault.id in over)
        return faults

    def _span(self, fault: Fault) -> str:
        rule = fault.rule
        parts = [fault.describe()]
        if rule.start_after_ms:
            parts.append(f"from {rule.start_after_ms} ms")
        if rule.duration_ms is not None:
            parts.append(f"for {rule.duration_ms} ms")
        if rule.count is not None:
            parts.append(f"at most {rule.count} times")
        return ", ".join(parts)

    def _watch(self, now: int) -> None:
        """Be woken when a rule next starts or ends."""
        at = self.faults.next_change_ms(now)
        if at is not None:
            self.host.later(at, self._changed)

    def _changed(self) -> None:
        now = self.host.now_ms()
        self.faults.refresh(now)
        self.changed()
        for fault in self.faults:
            if fault.ends_ms is not None and fault.ends_ms <= now and fault.id in self._logged:
                self._ended(fault, "its time is up")
        for fault in self.faults.ended(now):
            self._release(fault)
        self._watch(now)

    def _ended(self, fault: Fault, why: str, quiet: bool = False) -> None:
        """The rule is over: release what it holds, and say so unless it was over already
        (a rule deleted after its time was up, or at shutdown)."""
        self._release(fault)
        self._logged.pop(fault.id, None)
        if not quiet:
            log.warning(
                "fault rule #%d ended (%s): %d requests met it", fault.id, why, fault.injected
            )

    def _release(self, fault: Fault) -> None:
        held, fault.held = fault.held, []
        if held:
            log.warning("fault #%d: the pause is over, handling %d requests", fault.id, len(held))
        for slot, header, request in held:
            self._handle(slot, header, request)

    # -- requests -----------------------------------------------------------------------

    def intercept(self, slot: Slot, header: RequestHeader | None, request: Served) -> bool:
        """Carry out the rule this request meets; False when it meets none (handle it)."""
        now = self.host.now_ms()
        api = slot.api_key
        fault = self.faults.match(api, groups_of(request), now, self._random.random)
        if fault is None:
            return False
        self._count(fault, api, request, now)
        kind = fault.kind
        if kind != "pause" and fault.spent():
            self._ended(fault, "its count is reached")
        if kind == "error":
            metrics = self.host.metrics
            metrics.requests[api] += 1  # delayed and paused requests count when handled
            if api == HEARTBEAT:  # other APIs' answers are counted as they are filled
                metrics.error(api, fault.error)
            slot.answer(error_response(request, slot.version, fault.error))
        elif kind == "latency":
            delay = math.ceil(fault.latency_draw(self._random.gauss))
            self.host.later(now + delay, partial(self._handle, slot, header, request))
        elif kind == "pause":
            fault.held.append((slot, header, request))
        else:
            slot.conn.drop(f"fault #{fault.id}: drop_connection")
        return True

    def _handle(self, slot: Slot, header: RequestHeader | None, request: Served) -> None:
        if slot.conn.closed:
            return  # the client went meanwhile: nobody to answer
        if header is None:
            assert isinstance(request, OffsetCommitBatch)
            self.host.commit_offsets_now([(slot, request)])
        else:
            self.host.handle(slot, header, request)

    def _count(self, fault: Fault, api: int, request: Served, now: int) -> None:
        host = self.host
        host.metrics.fault(api, fault.kind)
        if host.event_log is not None:
            host.event_log.add(
                [
                    Event(
                        at_ms=now,
                        kind="fault_injected",
                        group_id=next(groups_of(request), ""),
                        member_id=getattr(request, "member_id", None),
                        reason=fault.describe(),
                    )
                ]
            )
        last, met = self._logged.get(fault.id, (-LOG_EVERY_MS, 0))
        met += 1
        if now - last >= LOG_EVERY_MS:
            log.warning("fault %s: met by %d requests since the last line", fault.describe(), met)
            self._logged[fault.id] = (now, 0)
        else:
            self._logged[fault.id] = (last, met)
