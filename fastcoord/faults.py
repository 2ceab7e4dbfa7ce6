"""Fault rules: what a load test asks the coordinator to get wrong, and when.

A rule names an API (or `*`), optionally a group pattern, and one action: answer an error
instead of handling the request, add latency, drop the connection, or pause the API (its
requests wait, and are all handled when the pause ends). It applies with a probability,
from `start_after_ms` after it was added, for `duration_ms`, at most `count` times.

One action is no request's: `move_coordinator` moves the offsets partition of the group
`group` names (a group id, taken as it is) to another node, once, at `start_after_ms`, in
a cluster kept in ZooKeeper; `duration_ms` is then the window a load test's summary sets
against the rest of the run.

This module is sans-IO: rules are parsed and validated here, and `FaultSet.match` decides,
given the time and a random draw, which rule (if any) a request meets. Carrying the
action out is the server's (server/fault_injection.py). The same rule shape comes from the
admin API's JSON, the TOML configuration's `[[fault]]` tables and a load test's schedule.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from fastcoord.protocol.api_keys import ApiKey, api_name
from fastcoord.protocol.errors import ErrorCode, error_name

Kind = Literal["error", "latency", "drop_connection", "pause", "move_coordinator"]
KINDS: tuple[Kind, ...] = ("error", "latency", "drop_connection", "pause", "move_coordinator")
ANY_API = "*"
MAX_PATTERN = 1000  # characters of a group pattern
MAX_LATENCY_MS = 600_000
Z99 = 2.3263478740408408  # the standard normal's 99th percentile


# Kafka's names (JoinGroup), the enum's (JOIN_GROUP), any case, with or without underscores.
_API_BY_NAME = {api_name(k).lower(): int(k) for k in ApiKey}


class LatencyDistribution(msgspec.Struct, forbid_unknown_fields=True):
    """A log-normal latency, given by its median and 99th percentile (ms)."""

    p50: float
    p99: float


class FaultRule(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """A rule as written: JSON from the admin API, or a `[[fault]]` table."""

    api: str
    group: str | None = None
    error: str | int | None = None
    latency_ms: float | LatencyDistribution | None = None
    drop_connection: bool = False
    pause: bool = False
    move_coordinator: bool = False
    probability: float = 1.0
    start_after_ms: int = 0
    duration_ms: int | None = None
    count: int | None = None


class FaultError(ValueError):
    """A rule that cannot be used; the message says why."""


@dataclass(eq=False)
class Fault:
    """A validated rule, as the server holds it."""

    id: int
    rule: FaultRule
    api: int | None  # None: every API
    group: re.Pattern[str] | None
    kind: Kind
    error: int  # for "error"
    latency: tuple[float, float]  # for "latency": (mu, sigma) of ln(ms); sigma 0 is fixed
    added_ms: int
    starts_ms: int
    ends_ms: int | None  # None: until deleted (or spent)
    injected: int = 0
    deleted: bool = False
    held: list[Any] = field(default_factory=list)  # a pause's requests, the server's to keep

    @property
    def api_label(self) -> str:
        return ANY_API if self.api is None else api_name(self.api)

    def spent(self) -> bool:
        count = self.rule.count
        return count is not None and self.injected >= count

    def state(self, now_ms: int) -> str:
        """waiting (not started), active, or ended (its time is up, spent or deleted)."""
        if self.deleted or (self.ends_ms is not None and now_ms >= self.ends_ms):
            return "ended"
        if now_ms < self.starts_ms:
            return "waiting"
        return "ended" if self.spent() and self.kind != "pause" else "active"

    def pausing(self, now_ms: int) -> bool:
        """A pause holds its requests until its time is up or it is deleted, even once spent."""
        return self.kind == "pause" and self.state(now_ms) == "active"

    def latency_draw(self, gauss: Callable[[float, float], float]) -> float:
        """One latency in ms: the fixed one, or a draw from the log-normal."""
        mu, sigma = self.latency
        if sigma == 0.0:
            return math.exp(mu)
        return min(float(MAX_LATENCY_MS), math.exp(gauss(mu, sigma)))

    def describe(self) -> str:
        """A line for logs and summaries: `Heartbeat group=~load-.*: error REBALANCE_...`."""
        if self.kind == "move_coordinator":
            return f"#{self.id} move the coordinator of group {self.rule.group}"
        if self.kind == "error":
            what = f"error {error_name(self.error)}"
        elif self.kind == "latency":
            what = "latency " + _latency_text(self.rule.latency_ms)
        else:
            what = self.kind.replace("_", " ")
        group = f" group~{self.group.pattern}" if self.group is not None else ""
        chance = f" p={self.rule.probability:g}" if self.rule.probability < 1 else ""
        return f"#{self.id} {self.api_label}{group}: {what}{chance}"


def _latency_text(value: float | LatencyDistribution | None) -> str:
    if isinstance(value, LatencyDistribution):
        return f"p50 {value.p50:g} ms, p99 {value.p99:g} ms"
    return f"{value:g} ms"


def parse_rule(obj: Any) -> FaultRule:
    """A FaultRule from decoded JSON or TOML; FaultError saying what is wrong."""
    try:
        rule = msgspec.convert(obj, FaultRule)
    except msgspec.ValidationError as exc:
        raise FaultError(_explain(str(exc))) from None
    compile_rule(rule, 0, 0)  # every check, once
    return rule


def decode_rule(data: bytes) -> FaultRule:
    """A FaultRule from JSON bytes; FaultError saying what is wrong."""
    try:
        obj = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise FaultError(f"not JSON: {exc}") from None
    return parse_rule(obj)


def _explain(message: str) -> str:
    # msgspec says "Expected `int`, got `str` - at `$.count`": the field first.
    if " - at `$." in message:
        reason, _, where = message.partition(" - at `$.")
        return f"{where.rstrip('`')}: {reason[0].lower()}{reason[1:]}"
    if message.startswith("Object contains unknown field"):
        return f"unknown field {message.split('`')[1]}"
    if message.startswith("Object missing required field"):
        return f"missing field {message.split('`')[1]}"
    return f"a rule is a JSON object: {message[0].lower()}{message[1:]}"


def parse_api(text: str) -> int | None:
    if text == ANY_API:
        return None
    key = _API_BY_NAME.get(text.replace("_", "").lower())
    if key is None:
        raise FaultError(f"api: unknown API {text!r}; a Kafka API name (JoinGroup) or *")
    return key


def parse_error(value: str | int) -> int:
    try:
        code = ErrorCode[value.upper()] if isinstance(value, str) else ErrorCode(value)
    except (KeyError, ValueError):
        raise FaultError(f"error: unknown Kafka error {value!r}") from None
    if code == ErrorCode.NONE:
        raise FaultError("error: NONE is not an error")
    return int(code)


def compile_rule(rule: FaultRule, fault_id: int, now_ms: int) -> Fault:
    """The Fault a rule becomes when added at now_ms; FaultError if it cannot be used."""
    api = parse_api(rule.api)
    group = None
    if rule.group is not None:
        if len(rule.group) > MAX_PATTERN:
            raise FaultError(f"group: a pattern of at most {MAX_PATTERN} characters")
        try:
            group = re.compile(rule.group)
        except re.error as exc:
            raise FaultError(f"group: not a regular expression: {exc}") from None
    actions: list[Kind] = []
    if rule.error is not None:
        actions.append("error")
    if rule.latency_ms is not None:
        actions.append("latency")
    if rule.drop_connection:
        actions.append("drop_connection")
    if rule.pause:
        actions.append("pause")
    if rule.move_coordinator:
        actions.append("move_coordinator")
    if len(actions) != 1:
        raise FaultError(
            "one action: error, latency_ms, drop_connection, pause or move_coordinator"
            + (f" (this rule has {', '.join(actions)})" if actions else "")
        )
    kind = actions[0]
    if kind == "move_coordinator":
        if rule.group is None:
            raise FaultError("move_coordinator: give the group whose coordinator moves")
        if api is not None or rule.probability != 1.0 or rule.count is not None:
            raise FaultError(
                "move_coordinator: a move is no request's: api *, no probability or count"
            )
    error = parse_error(rule.error) if rule.error is not None else 0
    latency = _latency(rule.latency_ms) if rule.latency_ms is not None else (0.0, 0.0)
    if not 0.0 < rule.probability <= 1.0:
        raise FaultError("probability: from 0 (excluded) to 1")
    if rule.start_after_ms < 0:
        raise FaultError("start_after_ms: at least 0")
    if rule.duration_ms is not None and rule.duration_ms <= 0:
        raise FaultError("duration_ms: more than 0")
    if rule.count is not None and rule.count <= 0:
        raise FaultError("count: at least 1")
    starts = now_ms + rule.start_after_ms
    ends = None if rule.duration_ms is None else starts + rule.duration_ms
    return Fault(fault_id, rule, api, group, kind, error, latency, now_ms, starts, ends)


def _latency(value: float | LatencyDistribution) -> tuple[float, float]:
    if isinstance(value, LatencyDistribution):
        if not 0 < value.p50 <= value.p99 <= MAX_LATENCY_MS:
            raise FaultError(f"latency_ms: 0 < p50 <= p99 <= {MAX_LATENCY_MS}")
        return math.log(value.p50), math.log(value.p99 / value.p50) / Z99
    if not 0 < value <= MAX_LATENCY_MS:
        raise FaultError(f"latency_ms: more than 0, at most {MAX_LATENCY_MS}")
    return math.log(value), 0.0


class FaultSet:
    """The rules in force, in the order they were added; the first that applies wins."""

    def __init__(self) -> None:
        self._faults: dict[int, Fault] = {}
        self._next_id = 1
        # Whether any rule is not yet over: the one check a request pays when none is.
        self.live = False
        self._apis: set[int | None] = set()  # the APIs of the rules not yet over

    def __iter__(self) -> Iterator[Fault]:
        return iter(self._faults.values())

    def __len__(self) -> int:
        return len(self._faults)

    def get(self, fault_id: int) -> Fault | None:
        return self._faults.get(fault_id)

    def add(self, rule: FaultRule, now_ms: int) -> Fault:
        fault = compile_rule(rule, self._next_id, now_ms)
        self._next_id += 1
        self._faults[fault.id] = fault
        self.refresh(now_ms)
        return fault

    def remove(self, fault_id: int, now_ms: int) -> Fault | None:
        fault = self._faults.pop(fault_id, None)
        if fault is not None:
            fault.deleted = True
            self.refresh(now_ms)
        return fault

    def clear(self, now_ms: int) -> list[Fault]:
        faults = list(self._faults.values())
        for fault in faults:
            fault.deleted = True
        self._faults.clear()
        self.refresh(now_ms)
        return faults

    def refresh(self, now_ms: int) -> None:
        """Recompute which APIs have rules not yet over (after a change, or a rule's end)."""
        apis = {
            f.api
            for f in self._faults.values()
            if f.state(now_ms) != "ended" and f.kind != "move_coordinator"  # no request's
        }
        self._apis = apis
        self.live = bool(apis)

    def touches(self, api: int) -> bool:
        """Whether a rule not yet over may apply to `api` (its fast paths must then yield)."""
        return self.live and (api in self._apis or None in self._apis)

    def next_change_ms(self, now_ms: int) -> int | None:
        """When a rule next starts or ends, after now_ms."""
        times = [
            t
            for f in self._faults.values()
            for t in (f.starts_ms, f.ends_ms)
            if t is not None and t > now_ms
        ]
        return min(times, default=None)

    def ended(self, now_ms: int) -> list[Fault]:
        """Pauses whose time is up and that still hold requests: theirs to release."""
        return [
            f
            for f in self._faults.values()
            if f.kind == "pause" and f.held and not f.pausing(now_ms)
        ]

    def match(
        self, api: int, groups: Iterable[str], now_ms: int, draw: Callable[[], float]
    ) -> Fault | None:
        """The rule this request meets, counted as injected; None when it meets none."""
        if not self.touches(api):
            return None
        group_list: list[str] | None = None
        for fault in self._faults.values():
            if (fault.api is not None and fault.api != api) or fault.kind == "move_coordinator":
                continue
            if fault.state(now_ms) != "active" or fault.spent():
                continue
            if fault.group is not None:
                if group_list is None:
                    group_list = list(groups)
                if not any(fault.group.fullmatch(g) for g in group_list):
                    continue
            if fault.rule.probability < 1.0 and draw() >= fault.rule.probability:
                continue
            fault.injected += 1
            if fault.spent() and fault.kind != "pause":
                self.refresh(now_ms)
            return fault
        return None
