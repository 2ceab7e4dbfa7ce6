"""What of each run the report looks at: phases from the summary, --window, the steady
seconds outside the faults, the server events of the run (no Spark: plain Python)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from fastcoord.pipeline.scope import (
    Band,
    Window,
    WindowError,
    calm,
    event_bounds,
    headline,
    parse_window,
    scope_of,
    seconds_within,
)

SUMMARY = {
    "config": {"group_prefix": "lt", "members": 10},
    "started": "2026-11-26T10:00:00.000+00:00",
    "ended": "2026-11-26T10:01:40.000+00:00",
    "phases": {
        "joining": {"first_s": 1, "last_s": 12},
        "steady": {"first_s": 13, "last_s": 95},
        "leaving": {"first_s": 96, "last_s": 100},
    },
    "steady_by": "warmup",
    "faults": [
        {
            "description": "Heartbeat: latency 20 ms",
            "window": {"start_ms": 30_000, "end_ms": 40_500},
        },
        {"description": "not added", "window": None},
    ],
}


def test_a_window_holds_the_seconds_wholly_inside_it() -> None:
    assert parse_window("30:290") == (30.0, 290.0)
    assert parse_window("30.5:") == (30.5, None)
    assert parse_window(":60") == (0.0, 60.0)
    # Second s covers (s - 1, s]: 30:290 holds 31..290; 30.5 starts inside 31, so 32.
    assert seconds_within(30, 290, 400) == (31, 290)
    assert seconds_within(30.5, 290.9, 400) == (32, 290)
    assert seconds_within(30, None, 100) == (31, 100)
    assert seconds_within(30, 290, 100) == (31, 100)
    for bad in ("30", "a:b", "40:30", "-1:5", "5:5", ""):
        with pytest.raises(WindowError, match="expected FROM:TO"):
            parse_window(bad)


def test_the_phases_come_from_the_summary() -> None:
    scope = scope_of("r", SUMMARY, 100, None)
    assert scope.windows["steady"] == Window("steady", 13, 95, "warmup")
    assert scope.windows["joining"] == Window("joining", 1, 12, "members")
    assert scope.windows["run"] == Window("run", 1, 100, "run")
    assert headline(scope) == scope.windows["steady"]
    assert [(b.label, b.kind, b.start_s, b.end_s) for b in scope.bands()] == [
        ("joining", "phase", 0, 12),
        ("leaving", "phase", 95, 100),
        ("Heartbeat: latency 20 ms", "fault", 30.0, 40.5),
    ]
    assert scope.notes == []


def test_a_window_replaces_the_steady_phase() -> None:
    scope = scope_of("r", SUMMARY, 100, (50, 80))
    assert headline(scope) == Window("steady", 51, 80, "window")
    empty = scope_of("r", SUMMARY, 100, (200, 300))
    assert "steady" not in empty.windows and headline(empty).phase == "run"
    assert empty.notes == ["--window holds no whole second of r (it has 100)"]


def test_without_a_steady_phase_the_headline_is_the_whole_run() -> None:
    summary = {**SUMMARY, "phases": {"joining": {"first_s": 1, "last_s": 95}, "steady": None}}
    scope = scope_of("r", summary, 100, None)
    assert headline(scope) == Window("run", 1, 100, "run")
    assert "no steady phase" in scope.notes[0]
    assert scope_of("r", None, 7, None).windows == {"run": Window("run", 1, 7, "run")}


def test_the_steady_seconds_outside_the_faults() -> None:
    scope = scope_of("r", SUMMARY, 100, None)
    # The fault's window 30.0-40.5 s touches seconds 31..41: the rest of 13..95 is calm.
    assert scope.calm == [Window("calm", 13, 30, "warmup"), Window("calm", 42, 95, "warmup")]
    steady = Window("steady", 1, 10, "members")
    faults = [Band(0, 2, "a", "fault"), Band(4.5, 5, "b", "fault"), Band(9, 9, "c", "fault")]
    assert calm(steady, faults) == [
        Window("calm", 3, 4, "members"),
        Window("calm", 6, 10, "members"),
    ]
    assert scope_of("r", {**SUMMARY, "faults": None}, 100, None).calm == []


def test_the_server_events_of_a_run() -> None:
    pattern, start, end = event_bounds(SUMMARY)
    assert pattern is not None
    assert re.match(pattern, "lt-0001") and re.match(pattern, "lt-12345")
    assert not re.match(pattern, "lt-0001x") and not re.match(pattern, "other-0001")
    assert not re.match(pattern, "ltx-0001")
    began = datetime(2026, 11, 26, 10, tzinfo=UTC).timestamp() * 1000
    assert (start, end) == (began, began + 100_000)
    assert event_bounds(None) == (None, None, None)
    dotted = event_bounds({"config": {"group_prefix": "a.b"}})[0]
    assert dotted is not None and not re.match(dotted, "axb-1")
