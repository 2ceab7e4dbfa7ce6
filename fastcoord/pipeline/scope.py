"""What of each run the report looks at, decided before Spark reads a row.

A load test records its phases in summary.json (joining, steady, leaving: seconds of the
run) and each fault's window; the report's headline figures are the steady phase's, or
those of the window `--window FROM:TO` gives instead. The server's event log may hold
other runs (other groups, other hours): a run's server-side figures are the events of its
own groups (the load test names them PREFIX-NNNN) within its own time, and the report
says how many it left out.

Seconds are the load test's: second s of a run covers (s - 1, s] seconds after its start,
and a window of seconds FROM:TO holds the seconds that lie wholly inside it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fastcoord.loadtest.faults import touched

PHASES = ("joining", "steady", "leaving")
WHOLE = "run"  # the whole run, as a phase
CALM = "calm"  # the steady phase outside every fault's window: spans of seconds
# Server events stamped this long before a run's start or after its end still count as
# its own: the server's clock stamps them, the load test's the run.
MARGIN_MS = 2_000


class WindowError(ValueError):
    """--window is not FROM:TO."""


@dataclass(frozen=True)
class Window:
    """A span of a run's seconds, first_s..last_s inclusive."""

    phase: str  # joining, steady, leaving or run
    first_s: int
    last_s: int
    source: str  # members, warmup, window (--window), run

    @property
    def seconds(self) -> int:
        return max(0, self.last_s - self.first_s + 1)


@dataclass(frozen=True)
class Band:
    """A shaded span of the time charts, in seconds since the run's start."""

    start_s: float
    end_s: float
    label: str
    kind: str  # phase or fault


@dataclass
class Scope:
    """One run as the report sees it."""

    run: str
    summary: dict[str, Any] | None
    windows: dict[str, Window] = field(default_factory=dict)  # phase -> its seconds
    calm: list[Window] = field(default_factory=list)  # with faults: steady outside them
    faults: list[Band] = field(default_factory=list)
    start_ms: int | None = None  # the run's wall clock, from its summary
    end_ms: int | None = None
    group_pattern: str | None = None  # a regular expression of its groups' ids
    notes: list[str] = field(default_factory=list)

    def bands(self) -> list[Band]:
        """The joining and leaving phases, then the faults, as the time charts shade them."""
        phases = [
            Band(w.first_s - 1, w.last_s, w.phase, "phase")
            for name in ("joining", "leaving")
            if (w := self.windows.get(name)) is not None
        ]
        return phases + self.faults

    @property
    def steady(self) -> Window | None:
        return self.windows.get("steady")

    def config(self, key: str) -> Any:
        return ((self.summary or {}).get("config") or {}).get(key)


def parse_window(text: str) -> tuple[float, float | None]:
    """FROM:TO in seconds of the run (TO may be left out: to the run's end)."""
    head, sep, tail = text.partition(":")
    try:
        start = float(head) if head.strip() else 0.0
        end = float(tail) if tail.strip() else None
    except ValueError:
        raise WindowError(f"--window {text!r}: expected FROM:TO in seconds, e.g. 30:290") from None
    if not sep or start < 0 or (end is not None and end <= start):
        raise WindowError(
            f"--window {text!r}: expected FROM:TO in seconds with 0 <= FROM < TO, e.g. 30:290"
        )
    return start, end


def seconds_within(start: float, end: float | None, last_s: int) -> tuple[int, int]:
    """The run's seconds that lie wholly inside [start, end]."""
    first = math.ceil(start) + 1
    last = last_s if end is None else min(last_s, math.floor(end))
    return first, last


def _epoch_ms(text: Any) -> int | None:
    if not isinstance(text, str):
        return None
    try:
        return round(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        return None


def group_pattern(prefix: str) -> str:
    """The ids the load test gives its groups: PREFIX-0000, PREFIX-0001, ..."""
    return f"^{re.escape(prefix)}-[0-9]+$"


def scope_of(
    run: str, summary: dict[str, Any] | None, last_s: int, window: tuple[float, float | None] | None
) -> Scope:
    """A run's scope, from its summary (None: the whole run only, every group and time) and
    its last second; `window` (--window) replaces the steady phase."""
    scope = Scope(run, summary)
    scope.windows[WHOLE] = Window(WHOLE, 1, max(1, last_s), "run")
    phases = (summary or {}).get("phases") or {}
    by = (summary or {}).get("steady_by")
    for name in PHASES:
        phase = phases.get(name)
        if isinstance(phase, dict) and isinstance(phase.get("first_s"), int):
            source = (by or "members") if name == "steady" else "members"
            scope.windows[name] = Window(name, phase["first_s"], phase["last_s"], source)
    if window is not None:
        first, last = seconds_within(window[0], window[1], last_s)
        if first <= last:
            scope.windows["steady"] = Window("steady", first, last, "window")
        else:
            scope.windows.pop("steady", None)
            scope.notes.append(f"--window holds no whole second of {run} (it has {last_s})")
    if "steady" not in scope.windows and window is None:
        scope.notes.append(
            f"{run}: no steady phase (its members never all stood stable, and no --warmup): "
            "the headline figures are the whole run's; --window FROM:TO chooses one"
        )
    for fault in (summary or {}).get("faults") or []:
        span = fault.get("window") if isinstance(fault, dict) else None
        if isinstance(span, dict) and isinstance(span.get("start_ms"), int | float):
            label = str(fault.get("description") or "fault")
            scope.faults.append(
                Band(span["start_ms"] / 1000, span["end_ms"] / 1000, label, "fault")
            )
    steady = scope.windows.get("steady")
    if steady is not None and scope.faults:
        scope.calm = calm(steady, scope.faults)
    scope.group_pattern, scope.start_ms, scope.end_ms = event_bounds(summary)
    return scope


def calm(steady: Window, faults: list[Band]) -> list[Window]:
    """The seconds of `steady` that no fault's window touches at all (an edge of a window
    would leak into the figures without it), as spans: the load test's rule for the
    seconds outside its faults."""
    hit = {
        s
        for f in faults
        for s in touched(round(f.start_s * 1000), round(f.end_s * 1000), steady.last_s)
    }
    spans: list[Window] = []
    for second in range(steady.first_s, steady.last_s + 1):
        if second in hit:
            continue
        if spans and spans[-1].last_s == second - 1:
            spans[-1] = Window(CALM, spans[-1].first_s, second, steady.source)
        else:
            spans.append(Window(CALM, second, second, steady.source))
    return spans


def event_bounds(summary: dict[str, Any] | None) -> tuple[str | None, int | None, int | None]:
    """The server events of a run: its groups' ids (a pattern) and its wall-clock span;
    None where its summary does not say (no bound)."""
    summary = summary or {}
    prefix = (summary.get("config") or {}).get("group_prefix")
    pattern = group_pattern(prefix) if isinstance(prefix, str) and prefix else None
    return pattern, _epoch_ms(summary.get("started")), _epoch_ms(summary.get("ended"))


def headline(scope: Scope) -> Window:
    """The window of the headline figures: the steady phase, else the whole run."""
    return scope.steady or scope.windows[WHOLE]
