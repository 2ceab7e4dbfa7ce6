"""A run's phases: joining, steady, leaving, decided from its merged seconds.

A run's whole-run figures mix the join storm at its start and the members' leaving at its
end into the steady state between them, where a coordinator spends nearly all its life: a
heartbeat p99 of hundreds of milliseconds over a run whose steady seconds answer in a few.
The parent therefore splits the run's seconds (second s covers (s - 1, s] seconds after the
start) into phases, and the summary gives each phase's figures beside the whole run's:

- joining: seconds 1..J, J the first merged second whose members all are stable (its
  `stable` count reaches the run's target), or ceil(--warmup) when given;
- leaving: seconds L.., L = floor(stop_s) + 1, stop_s when the scenario ended (its planned
  duration, or earlier when the parent stopped the workers);
- steady: seconds J+1..L-1, when there are any.

The rule is a plain function of figures, so that a report reading the tables can apply it
to the states table and find the same seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

NAMES = ("joining", "steady", "leaving")


@dataclass(frozen=True)
class Phases:
    """Each phase's seconds (None: the run has none of it), and how the steady phase's
    first second was found: "members" (every member stable), "warmup" (--warmup), None
    when there is no steady phase."""

    joining: range | None
    steady: range | None
    leaving: range | None
    steady_by: str | None

    def named(self) -> dict[str, range | None]:
        return {"joining": self.joining, "steady": self.steady, "leaving": self.leaving}

    def of(self, elapsed_s: int) -> str | None:
        """The phase second `elapsed_s` belongs to."""
        for name, seconds in self.named().items():
            if seconds is not None and elapsed_s in seconds:
                return name
        return None


def _span(first: int, last: int) -> range | None:
    return range(first, last + 1) if last >= first else None


def find(
    stable: Mapping[int, int],
    last_s: int,
    target: int | None,
    warmup_s: float | None = None,
    stop_s: float | None = None,
) -> Phases:
    """The phases of a run whose newest written second is `last_s`, from `stable` (merged
    second -> stable members), the run's `target` members, --warmup's seconds and the
    scenario's end in run seconds (`stop_s`; None while it is still going)."""
    leave_s = math.floor(stop_s) + 1 if stop_s is not None else last_s + 1
    end_s = min(leave_s - 1, last_s)  # the scenario's last written second
    by: str | None
    if warmup_s is not None:
        joined_s, by = math.ceil(warmup_s), "warmup"
    else:
        reached = [
            s for s, n in stable.items() if target is not None and n >= target and s <= end_s
        ]
        joined_s, by = (min(reached), "members") if reached else (end_s, None)
    joined_s = max(0, min(joined_s, end_s))
    steady = _span(joined_s + 1, end_s)
    return Phases(
        joining=_span(1, joined_s),
        steady=steady,
        leaving=_span(leave_s, last_s),
        steady_by=by if steady is not None else None,
    )
