"""`fastcoord loadtest --faults FILE --admin HOST:PORT,...`: faults on a schedule, and their effect.

A schedule is TOML: `[[fault]]` tables, each a fault rule (fastcoord/faults.py) and the
`at_ms` after the run's start when the rule is added through the server's admin API. The
whole schedule is checked before the run starts, so that a typo costs seconds rather than a
run. During the run a thread adds each rule when it is due: the parent's loop must keep
reading the workers' pipes, and a slow admin port must not stall them. At the end each
fault's injected count and state are read, the faults this run added (and no others) are
deleted, and each fault's window is set against the rest of the run: the workers'
per-second figures (seconds.py) for the APIs it touches, inside the window beside outside
every window.

A cluster's nodes each hold their own rules and answer only for their own groups, so
against a cluster --admin lists every node's admin port and each rule is added to every
node at once (a thread per node: one slow admin port must not delay the rule elsewhere);
its injected count is the nodes' sum, and what became of it on each node is kept beside.
"""

from __future__ import annotations

import threading
import time
import tomllib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from fastcoord.client.admin import AdminClient, AdminError, parse_address
from fastcoord.faults import FaultError, FaultRule, compile_rule, parse_api, parse_rule
from fastcoord.loadtest.seconds import PerSecond
from fastcoord.loadtest.summary import ms, split
from fastcoord.protocol.api_keys import api_name

ADMIN_TIMEOUT_S = 5.0  # each admin request of the checks and the schedule thread
# The end's requests: a server whose 100k members are leaving took longer than 5 s to answer.
END_TIMEOUT_S = 30.0
MAX_FAULTS = 1000  # a schedule's rules: each is a request during the run


class ScheduleError(Exception):
    """The schedule or the admin port cannot be used: the run does not start. The message
    is one line that says why."""


@dataclass(frozen=True)
class Scheduled:
    """One `[[fault]]` table: a rule, and when the run adds it."""

    at_ms: int
    rule: FaultRule

    def rule_json(self) -> dict[str, Any]:
        """The rule as the admin API takes it (defaults left out)."""
        body: dict[str, Any] = msgspec.to_builtins(self.rule)
        return body

    def description(self) -> str:
        """The rule in a line, as the server describes it, without the id it has not got."""
        text = compile_rule(self.rule, 0, 0).describe()
        return text.removeprefix("#0 ")

    def api_key(self) -> int | None:
        """The API it touches; None: every API."""
        return parse_api(self.rule.api)


def parse_schedule(text: str, source: str = "--faults") -> list[Scheduled]:
    """The schedule in TOML `text`, in the order of at_ms; ScheduleError naming `source`
    and the table at fault."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScheduleError(f"{source}: not TOML: {exc}") from None
    unknown = sorted(set(document) - {"fault"})
    if unknown:
        raise ScheduleError(f"{source}: unknown key {unknown[0]!r}; a schedule is [[fault]] tables")
    tables = document.get("fault")
    if not isinstance(tables, list) or not tables:
        raise ScheduleError(f"{source}: no [[fault]] tables")
    if len(tables) > MAX_FAULTS:
        raise ScheduleError(f"{source}: {len(tables)} faults; at most {MAX_FAULTS}")
    schedule = []
    for n, table in enumerate(tables, 1):
        where = f"{source}: fault {n}"
        if not isinstance(table, dict):
            raise ScheduleError(f"{where}: expected a [[fault]] table")
        fields = dict(table)
        at_ms = fields.pop("at_ms", None)
        if at_ms is None:
            raise ScheduleError(f"{where}: at_ms missing (when to add it, ms after the start)")
        if isinstance(at_ms, bool) or not isinstance(at_ms, int) or at_ms < 0:
            raise ScheduleError(f"{where}: at_ms: a whole number of ms, at least 0, not {at_ms!r}")
        try:
            rule = parse_rule(fields)
        except FaultError as exc:
            raise ScheduleError(f"{where}: {exc}") from None
        schedule.append(Scheduled(at_ms, rule))
    return sorted(schedule, key=lambda s: s.at_ms)


def load_schedule(path: Path, duration_s: float | None = None) -> list[Scheduled]:
    """The schedule in the file at `path`; a fault due after a run of `duration_s` is
    refused, as it would never be added."""
    source = f"--faults {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ScheduleError(f"{source}: cannot read it: {reason}") from None
    schedule = parse_schedule(text, source)
    if duration_s is not None:
        for s in schedule:
            if s.at_ms >= duration_s * 1000:
                raise ScheduleError(
                    f"{source}: a fault at_ms {s.at_ms} is not within the run "
                    f"(--duration {duration_s:g} s)"
                )
    return schedule


def prepare(
    path: Path | None, admin: str | None, duration_s: float, timeout_s: float = ADMIN_TIMEOUT_S
) -> FaultRun | None:
    """The run's faults, checked: the schedule read and each admin port of `admin`
    (HOST:PORT, or a cluster's HOST:PORT,HOST:PORT,...) asked once. None without --faults;
    ScheduleError when the run must not start."""
    if path is None:
        return None
    if admin is None:
        raise ScheduleError(
            "--faults needs --admin HOST:PORT, the server's admin port (fastcoord serve "
            "--admin-port; a cluster's: HOST:PORT,HOST:PORT,..., every node's)"
        )
    schedule = load_schedule(path, duration_s)
    clients = [AdminClient(address, timeout_s) for address in admin_addresses(admin)]
    for client in clients:
        address = client.address
        try:
            client.faults()
        except AdminError as exc:
            raise ScheduleError(
                f"the admin port {address} answered GET /v1/faults with {exc.status} "
                f"({exc.message}): is --admin the address of fastcoord serve --admin-port?"
            ) from None
        except OSError as exc:
            raise ScheduleError(
                f"cannot reach the admin port {address} ({_reason(exc)}): is the server running "
                "with --admin-port, and is --admin its address?"
            ) from None
    return FaultRun(schedule, clients)


def admin_addresses(admin: str) -> list[str]:
    """--admin's addresses, one per node: HOST:PORT[,HOST:PORT...]. ScheduleError for one
    that is not HOST:PORT, or one given twice (its node would get every rule twice)."""
    addresses: list[str] = []
    seen: set[tuple[str, int]] = set()
    for text in admin.split(","):
        address = text.strip()
        try:
            parsed = parse_address(address)
        except ValueError:
            raise ScheduleError(f"--admin {address!r}: expected HOST:PORT") from None
        if parsed in seen:
            raise ScheduleError(f"--admin: {address} is given twice")
        seen.add(parsed)
        addresses.append(address)
    return addresses


def _reason(exc: BaseException) -> str:
    if isinstance(exc, AdminError):
        return f"{exc.status}: {exc.message}"
    if isinstance(exc, TimeoutError):
        return "no answer within the timeout"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


@dataclass
class OnNode:
    """What became of one scheduled fault on one node, through its admin port."""

    admin: str  # HOST:PORT
    fault_id: int | None = None
    description: str | None = None
    sent: float | None = None  # time.time() when the POST was sent, and when answered
    answered: float | None = None
    apply_error: str | None = None
    injected: int | None = None
    state: str | None = None
    end_error: str | None = None


@dataclass
class Applied:
    """What became of one scheduled fault, over every node (`nodes`, one per admin port;
    `combine` sets the rest from them). Times are ms since the run's start."""

    scheduled: Scheduled
    fault_id: int | None = None  # the id every node gave it (None: not added, or ids differ)
    description: str | None = None
    applied_ms: int | None = None  # our clock's estimate of when the servers added it
    apply_error: str | None = None  # why it was not added (on some node, with several)
    injected: int | None = None  # the nodes' sum
    state: str | None = None
    end_error: str | None = None  # what went wrong reading or deleting it at the end
    nodes: list[OnNode] = field(default_factory=list)

    def combine(self, started: float) -> None:
        """The fault's view over its nodes; `started` is the run's start (time.time())."""
        nodes = self.nodes
        added = [n for n in nodes if n.fault_id is not None]
        ids = {n.fault_id for n in added}
        self.fault_id = ids.pop() if len(ids) == 1 and len(added) == len(nodes) else None
        self.description = next((n.description for n in added if n.description), None)
        sent = [n.sent for n in added if n.sent is not None]
        answered = [n.answered for n in added if n.answered is not None]
        self.applied_ms = None
        if sent and answered:
            # The servers added it between our first request and the last answer: the
            # middle is our clock's best estimate, and the windows are set against our
            # seconds.
            self.applied_ms = round(((min(sent) + max(answered)) / 2 - started) * 1000)
        self.apply_error = _per_node(nodes, [n.apply_error for n in nodes])
        counts = [n.injected for n in added if n.injected is not None]
        self.injected = sum(counts) if counts else None
        states = [n.state for n in added]
        if len({s for s in states if s is not None}) > 1:
            self.state = ", ".join(f"{n.admin} {n.state or '?'}" for n in added)
        else:
            self.state = next((s for s in states if s is not None), None)
        self.end_error = _per_node(nodes, [n.end_error for n in nodes])


def _per_node(nodes: list[OnNode], errors: list[str | None]) -> str | None:
    """One node's error as it is; several nodes' each after its admin port."""
    if len(nodes) == 1:
        return errors[0]
    said = [f"{n.admin}: {e}" for n, e in zip(nodes, errors, strict=True) if e]
    return "; ".join(said) or None


def figures(per_second: PerSecond, api_key: int, seconds: Sequence[int]) -> dict[str, Any]:
    """One API over `seconds` (elapsed_s values): requests, errors and signals by name,
    p50/p99."""
    h, codes = per_second.over(api_key, seconds)
    errors, signals = split(codes)
    n = len(seconds)
    return {
        "seconds": n,
        "requests": h.count,
        "requests_per_s": h.count / n if n else None,
        "errors": errors,
        "signals": signals,
        "p50_ms": ms(h.percentile_ms(50)),
        "p99_ms": ms(h.percentile_ms(99)),
    }


def window_ms(applied: Applied, run_end_ms: int) -> tuple[int, int] | None:
    """When a fault was in force, ms since the run's start: from its adding plus
    start_after_ms, for duration_ms or to the run's end. None: it was never added."""
    if applied.applied_ms is None:
        return None
    rule = applied.scheduled.rule
    start = applied.applied_ms + rule.start_after_ms
    end = run_end_ms if rule.duration_ms is None else min(start + rule.duration_ms, run_end_ms)
    return start, max(start, end)


def seconds_of(start_ms: int, end_ms: int, last_s: int) -> range:
    """The run's seconds inside [start_ms, end_ms): second s covers [(s - 1) * 1000,
    s * 1000) ms after the start, and is inside when its middle is, so that a second the
    window barely touches does not dilute its figures; a window that holds no second's
    middle has the seconds it touches."""
    if end_ms <= start_ms:
        return range(0)
    first = max(1, -(-(start_ms + 500) // 1000))
    last = min(last_s, -(-(end_ms + 500) // 1000) - 1)
    if first > last:
        return touched(start_ms, end_ms, last_s)
    return range(first, last + 1)


def touched(start_ms: int, end_ms: int, last_s: int) -> range:
    """The run's seconds that overlap [start_ms, end_ms) at all."""
    if end_ms <= start_ms:
        return range(0)
    return range(max(1, start_ms // 1000 + 1), min(last_s, -(-end_ms // 1000)) + 1)


def effects(applied: list[Applied], per_second: PerSecond) -> list[dict[str, Any]]:
    """summary.json's `faults`: each scheduled fault, what became of it, and its effect."""
    last_s = per_second.last_s
    run_end_ms = last_s * 1000
    windows = [window_ms(a, run_end_ms) for a in applied]
    # Outside means untouched by every window: no fault's edge leaks into the baseline.
    touched_s = {s for w in windows if w is not None for s in touched(w[0], w[1], last_s)}
    outside = [s for s in range(1, last_s + 1) if s not in touched_s]
    seen = per_second.api_keys()
    baseline: dict[int, dict[str, Any]] = {}  # each API's figures outside, computed once
    section = []
    for a, window in zip(applied, windows, strict=True):
        s = a.scheduled
        entry: dict[str, Any] = {
            "at_ms": s.at_ms,
            "rule": s.rule_json(),
            "description": a.description or s.description(),
            "id": a.fault_id,
            "applied_ms": a.applied_ms,
            "apply_error": a.apply_error,
            "injected": a.injected,
            "state": a.state,
            "end_error": a.end_error,
            "nodes": [
                {
                    "admin": n.admin,
                    "id": n.fault_id,
                    "apply_error": n.apply_error,
                    "injected": n.injected,
                    "state": n.state,
                    "end_error": n.end_error,
                }
                for n in a.nodes
            ],
            "window": None,
            "effect": None,
        }
        if window is not None:
            seconds = seconds_of(window[0], window[1], last_s)
            entry["window"] = {
                "start_ms": window[0],
                "end_ms": window[1],
                "first_s": seconds[0] if seconds else None,
                "last_s": seconds[-1] if seconds else None,
            }
            api_key = s.api_key()
            keys = seen if api_key is None else [api_key]
            for k in keys:
                if k not in baseline:
                    baseline[k] = figures(per_second, k, outside)
            entry["effect"] = {
                api_name(k): {"window": figures(per_second, k, seconds), "outside": baseline[k]}
                for k in keys
            }
        section.append(entry)
    return section


class FaultRun:
    """A run's faults: `start` when the run starts, `stop` when the workers are done, then
    `finish` with the run's seconds for the summary's section. `clients`: the admin port of
    each node the faults are added to."""

    def __init__(
        self, schedule: list[Scheduled], clients: AdminClient | Sequence[AdminClient]
    ) -> None:
        self.clients = [clients] if isinstance(clients, AdminClient) else list(clients)
        self.applied = [
            Applied(s, nodes=[OnNode(c.address) for c in self.clients]) for s in schedule
        ]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._started = 0.0

    @property
    def client(self) -> AdminClient:
        """The first node's admin port (the only one against a lone server)."""
        return self.clients[0]

    def start(self, started: float) -> None:
        """Add each fault at `started` (time.time()) plus its at_ms, from a thread."""
        self._started = started
        if len(self.clients) > 1:
            self._pool = ThreadPoolExecutor(len(self.clients), thread_name_prefix="loadtest-fault")
        self._thread = threading.Thread(target=self._apply_all, name="loadtest-faults", daemon=True)
        self._thread.start()

    def _apply_all(self) -> None:
        for a in self.applied:
            due = self._started + a.scheduled.at_ms / 1000
            if self._stop.wait(max(0.0, due - time.time())):
                return
            self._apply(a)

    def _apply(self, a: Applied) -> None:
        """Add the fault on every node, all at once."""
        rule = a.scheduled.rule_json()
        if self._pool is None:
            self._apply_on(self.clients[0], a.nodes[0], rule)
        else:
            list(self._pool.map(self._apply_on, self.clients, a.nodes, [rule] * len(a.nodes)))
        with self._lock:
            a.combine(self._started)

    def _apply_on(self, client: AdminClient, node: OnNode, rule: dict[str, Any]) -> None:
        sent = time.time()
        try:
            view = client.add_fault(rule)
            fault_id = view.get("id")
            if not isinstance(fault_id, int):
                raise AdminError(201, f"an answer without the fault's id: {view!r}")
        except Exception as exc:  # whatever it was, the run goes on and the summary says so
            with self._lock:
                node.apply_error = f"not added: {_reason(exc)}"
            return
        answered = time.time()
        description = view.get("description")
        if isinstance(description, str):
            description = description.removeprefix(f"#{fault_id} ")  # the id has its key
        with self._lock:
            node.fault_id = fault_id
            node.sent, node.answered = sent, answered
            node.description = description if isinstance(description, str) else None

    def stop(self) -> None:
        """No more faults are added (a request under way is waited for, up to its timeout)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.client.timeout_s * 2 + 1)
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        with self._lock:
            for a in self.applied:
                for node in a.nodes:
                    if node.fault_id is None and node.apply_error is None:
                        node.apply_error = "not added: the run ended first"
                a.combine(self._started)

    def finish(self, per_second: PerSecond) -> list[dict[str, Any]]:
        """Read the faults' counts on every node, delete the ones this run added, and the
        summary's section, the faults' effect from `per_second` (the aggregator's: every
        worker's seconds). Never raises for the servers' sake: what failed is in it."""
        self.stop()
        for i, client in enumerate(self.clients):
            with self._lock:
                ours = [a.nodes[i] for a in self.applied if a.nodes[i].fault_id is not None]
            if ours:
                self._finish_on(client, ours)
        with self._lock:
            for a in self.applied:
                a.combine(self._started)
        return effects(self.applied, per_second)

    def _finish_on(self, client: AdminClient, ours: list[OnNode]) -> None:
        """One node's counts read, and the faults this run added there deleted."""
        client = AdminClient(client.address, max(client.timeout_s, END_TIMEOUT_S))
        reachable = True
        try:
            views = {v.get("id"): v for v in client.faults() if isinstance(v, dict)}
        except Exception as exc:  # a server that died ended the run: say so, and go on
            reachable = not isinstance(exc, OSError)
            views = {}
            for node in ours:
                node.end_error = f"could not read its count: {_reason(exc)}"
        for node in ours:
            view = views.get(node.fault_id)
            if view is not None:
                injected, state = view.get("injected"), view.get("state")
                node.injected = injected if isinstance(injected, int) else None
                node.state = state if isinstance(state, str) else None
            elif reachable and node.end_error is None:
                node.end_error = "gone from the server before the run's end"
                continue
            if not reachable:
                continue
            assert node.fault_id is not None
            try:
                client.delete_fault(node.fault_id)
            except AdminError as exc:
                if exc.status != 404:  # deleted by someone else meanwhile: nothing to do
                    node.end_error = f"could not delete it: {_reason(exc)}"
            except Exception as exc:
                node.end_error = f"could not delete it: {_reason(exc)}"
                reachable = not isinstance(exc, OSError)  # the rest would fail the same way
