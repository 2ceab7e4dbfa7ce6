"""`fastcoord loadtest --faults`: a schedule is checked whole before a run (every refusal a
clear line and exit status 2), a fault's window is set against the rest of the run from the
workers' seconds, and the admin client says what it sends and what the server refused."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from fastcoord import cli
from fastcoord.client.admin import AdminClient, AdminError, parse_address
from fastcoord.loadtest.aggregate import Aggregator
from fastcoord.loadtest.display import faults_report, print_summary
from fastcoord.loadtest.faults import (
    Applied,
    FaultRun,
    ScheduleError,
    admin_addresses,
    effects,
    load_schedule,
    parse_schedule,
    prepare,
    seconds_of,
    touched,
)
from fastcoord.loadtest.seconds import PerSecond
from fastcoord.loadtest.stats import Recorder, Second
from fastcoord.loadtest.summary import Thresholds
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode

from .workers import START_MS

MS = 1_000_000

SCHEDULE = """\
[[fault]]
at_ms = 20000
api = "OffsetCommit"
group = "loadtest-00.."
latency_ms = { p50 = 20, p99 = 200 }
start_after_ms = 1000
duration_ms = 10000

[[fault]]
at_ms = 10000
api = "Heartbeat"
error = "REBALANCE_IN_PROGRESS"
duration_ms = 5000

[[fault]]
at_ms = 0
api = "*"
drop_connection = true
probability = 0.1
count = 50
"""


def free_port() -> int:
    """A port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# The schedule


def test_a_schedule_is_its_rules_in_time_order_with_defaults_left_out() -> None:
    schedule = parse_schedule(SCHEDULE)
    assert [s.at_ms for s in schedule] == [0, 10000, 20000]
    assert [s.rule_json() for s in schedule] == [
        {"api": "*", "drop_connection": True, "probability": 0.1, "count": 50},
        {"api": "Heartbeat", "error": "REBALANCE_IN_PROGRESS", "duration_ms": 5000},
        {
            "api": "OffsetCommit",
            "group": "loadtest-00..",
            "latency_ms": {"p50": 20.0, "p99": 200.0},
            "start_after_ms": 1000,
            "duration_ms": 10000,
        },
    ]
    assert [s.api_key() for s in schedule] == [None, ApiKey.HEARTBEAT, ApiKey.OFFSET_COMMIT]
    assert schedule[1].description() == "Heartbeat: error REBALANCE_IN_PROGRESS"
    assert schedule[0].description() == "*: drop connection p=0.1"


def test_the_documented_schedule_is_a_schedule() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "loadtest.md").read_text()
    example = docs.split("```toml\n", 1)[1].split("```", 1)[0]
    assert [s.at_ms for s in parse_schedule(example)] == [10000, 20000, 40000]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('[[fault]]\napi = "Heartbeat"\nerror = 27\n', "fault 1: at_ms missing"),
        (
            '[[fault]]\nat_ms = -1\napi = "Heartbeat"\npause = true\n',
            "fault 1: at_ms: a whole number of ms, at least 0, not -1",
        ),
        (
            '[[fault]]\nat_ms = 1.5\napi = "Heartbeat"\npause = true\n',
            "fault 1: at_ms: a whole number of ms, at least 0, not 1.5",
        ),
        (
            '[[fault]]\nat_ms = "soon"\napi = "Heartbeat"\npause = true\n',
            "fault 1: at_ms: a whole number of ms, at least 0, not 'soon'",
        ),
        (
            '[[fault]]\nat_ms = true\napi = "Heartbeat"\npause = true\n',
            "fault 1: at_ms: a whole number of ms, at least 0, not True",
        ),
        (
            '[[fault]]\nat_ms = 0\napi = "Heartbeat"\npause = true\n'
            '[[fault]]\nat_ms = 5\napi = "Hartbeat"\npause = true\n',
            "fault 2: api: unknown API 'Hartbeat'",
        ),
        (
            '[[fault]]\nat_ms = 0\napi = "Heartbeat"\nerror = "NONE"\n',
            "fault 1: error: NONE is not an error",
        ),
        (
            '[[fault]]\nat_ms = 0\napi = "Heartbeat"\npause = true\nlatency_ms = 5\n',
            "fault 1: one action: error, latency_ms, drop_connection, pause or move_coordinator",
        ),
        (
            '[[fault]]\nat_ms = 0\napi = "Heartbeat"\npause = true\nwhen = 3\n',
            "fault 1: unknown field when",
        ),
        ('[[fault]]\nat_ms = 0\napi = "Heartbeat"\n', "fault 1: one action"),
        ("[[fault]\nat_ms = 0\n", "not TOML: "),
        ("", "no [[fault]] tables"),
        ("fault = [1, 2]\n", "fault 1: expected a [[fault]] table"),
        ('[[faults]]\nat_ms = 0\napi = "Heartbeat"\n', "unknown key 'faults'"),
    ],
)
def test_every_fault_in_a_schedule_is_checked(text: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(text, "--faults f.toml")
    message = str(caught.value)
    assert message.startswith(f"--faults f.toml: {reason}"), message
    assert "\n" not in message


def test_a_schedule_file_must_be_readable_and_within_the_run(tmp_path: Path) -> None:
    with pytest.raises(ScheduleError, match=r"cannot read it: No such file or directory"):
        load_schedule(tmp_path / "missing.toml")
    path = tmp_path / "late.toml"
    path.write_text('[[fault]]\nat_ms = 60000\napi = "Heartbeat"\npause = true\n')
    with pytest.raises(ScheduleError, match=r"at_ms 60000 is not within the run \(--duration 60"):
        load_schedule(path, 60.0)
    assert [s.at_ms for s in load_schedule(path, 61.0)] == [60000]


def loadtest(tmp_path: Path, *args: str) -> list[str]:
    """`fastcoord loadtest` with a bootstrap nobody listens on: the fault checks come
    before the bootstrap is asked, so a refusal of theirs is the one reported."""
    return [
        "loadtest",
        "--bootstrap",
        f"127.0.0.1:{free_port()}",
        "--out",
        str(tmp_path / "run"),
        "--duration",
        "30",
        *args,
    ]


def refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_the_command_refuses_a_schedule_it_cannot_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.toml"
    good.write_text(SCHEDULE)
    assert refusal(capsys, loadtest(tmp_path, "--faults", str(good))) == (
        "fastcoord loadtest: --faults needs --admin HOST:PORT, the server's admin port "
        "(fastcoord serve --admin-port; a cluster's: HOST:PORT,HOST:PORT,..., every node's)"
    )
    admin = f"127.0.0.1:{free_port()}"
    bad = tmp_path / "bad.toml"
    bad.write_text('[[fault]]\nat_ms = 0\napi = "Heartbeat"\nerror = "NO_SUCH_ERROR"\n')
    assert refusal(capsys, loadtest(tmp_path, "--faults", str(bad), "--admin", admin)) == (
        f"fastcoord loadtest: --faults {bad}: fault 1: error: unknown Kafka error 'NO_SUCH_ERROR'"
    )
    assert "expected HOST:PORT" in refusal(
        capsys, loadtest(tmp_path, "--faults", str(good), "--admin", "nowhere")
    )
    assert refusal(capsys, loadtest(tmp_path, "--faults", str(good), "--admin", admin)) == (
        f"fastcoord loadtest: cannot reach the admin port {admin} (connection refused): is "
        "the server running with --admin-port, and is --admin its address?"
    )
    assert not (tmp_path / "run").exists()  # refused before anything was written


# The effect of a fault, from the workers' seconds


def synthetic_seconds() -> list[Second]:
    """Ten seconds of two workers, 50 Heartbeats (1 ms) and 5 OffsetCommits (4 ms) each a
    second; in seconds 4 to 6, 5 of each worker's Heartbeats took 50 ms and were answered
    COORDINATOR_LOAD_IN_PROGRESS, and one REBALANCE_IN_PROGRESS (a signal)."""
    seconds = []
    for elapsed_s in range(1, 11):
        for worker in (0, 1):
            r = Recorder(worker, cpu_s=0.0)
            for i in range(50):
                slow = 4 <= elapsed_s <= 6 and i < 5
                code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if slow else 0
                if 4 <= elapsed_s <= 6 and i == 5:
                    code = ErrorCode.REBALANCE_IN_PROGRESS
                r.record(ApiKey.HEARTBEAT, 50 * MS if slow else MS, code)
            for _ in range(5):
                r.record(ApiKey.OFFSET_COMMIT, 4 * MS, 0)
            wall_ms = START_MS + elapsed_s * 1000
            seconds.append(r.take(elapsed_s, wall_ms, {"stable": 10}, 1, 0.0))
    return seconds


def applied_faults() -> list[Applied]:
    heartbeat, everything, late = parse_schedule(
        '[[fault]]\nat_ms = 3000\napi = "Heartbeat"\nerror = 14\nduration_ms = 3000\n'
        '[[fault]]\nat_ms = 8000\napi = "*"\nlatency_ms = 5\nstart_after_ms = 500\n'
        '[[fault]]\nat_ms = 9000\napi = "JoinGroup"\npause = true\n'
    )
    return [
        Applied(heartbeat, fault_id=3, applied_ms=3000, injected=30, state="ended"),
        Applied(everything, fault_id=4, applied_ms=8000, injected=7, state="active"),
        Applied(late, apply_error="not added: 400: a reason"),
    ]


def per_second(seconds: list[Second]) -> PerSecond:
    kept = PerSecond()
    for second in seconds:
        kept.add(second)
    return kept


def test_the_seconds_of_a_window() -> None:
    # Second s covers [s - 1, s) s; it is the window's when its middle is inside.
    assert list(seconds_of(3000, 6000, 10)) == [4, 5, 6]
    assert list(seconds_of(3003, 6003, 10)) == [4, 5, 6]  # 7, barely touched, is not
    assert list(seconds_of(3600, 6600, 10)) == [5, 6, 7]
    assert list(seconds_of(8500, 20000, 10)) == [9, 10]  # the run ended at 10 s
    # A window that holds no second's middle has the seconds it touches.
    assert list(seconds_of(3100, 3300, 10)) == [4]
    assert list(seconds_of(3700, 4300, 10)) == [4, 5]
    assert list(seconds_of(12000, 15000, 10)) == []
    assert list(seconds_of(5000, 5000, 10)) == []
    assert list(touched(3003, 6003, 10)) == [4, 5, 6, 7]


def test_a_faults_window_beside_the_run_outside_every_window() -> None:
    section = effects(applied_faults(), per_second(synthetic_seconds()))
    heartbeat, everything, late = section
    assert heartbeat["id"] == 3 and heartbeat["injected"] == 30 and heartbeat["state"] == "ended"
    assert heartbeat["description"] == "Heartbeat: error COORDINATOR_LOAD_IN_PROGRESS"
    assert heartbeat["window"] == {"start_ms": 3000, "end_ms": 6000, "first_s": 4, "last_s": 6}
    # Outside every window: seconds 1-3, 7 and 8 (9 and 10 are the second fault's).
    assert heartbeat["effect"] == {
        "Heartbeat": {
            "window": {
                "seconds": 3,
                "requests": 300,
                "requests_per_s": 100.0,
                "errors": {"COORDINATOR_LOAD_IN_PROGRESS": 30},
                "signals": {"REBALANCE_IN_PROGRESS": 6},
                "p50_ms": 1.024,  # the bucket's upper bound, below the window's max
                "p99_ms": 50.0,
            },
            "outside": {
                "seconds": 5,
                "requests": 500,
                "requests_per_s": 100.0,
                "errors": {},
                "signals": {},
                "p50_ms": 1.0,  # every one 1 ms: the max, below the bucket's bound
                "p99_ms": 1.0,
            },
        }
    }
    # No duration: to the run's end; "*": every API the run used.
    assert everything["window"] == {"start_ms": 8500, "end_ms": 10000, "first_s": 9, "last_s": 10}
    assert list(everything["effect"]) == ["OffsetCommit", "Heartbeat"]  # by API key
    commits = everything["effect"]["OffsetCommit"]
    assert commits["window"]["requests"] == 20 and commits["window"]["p99_ms"] == 4.0
    assert commits["outside"]["requests"] == 50 and commits["outside"]["seconds"] == 5
    assert everything["effect"]["Heartbeat"]["window"]["errors"] == {}
    assert late["id"] is None and late["apply_error"] == "not added: 400: a reason"
    assert late["window"] is None and late["effect"] is None
    assert late["rule"] == {"api": "JoinGroup", "pause": True} and late["at_ms"] == 9000


def test_an_api_the_run_never_used_has_empty_figures() -> None:
    (rule,) = parse_schedule('[[fault]]\nat_ms = 0\napi = "LeaveGroup"\npause = true\n')
    (entry,) = effects([Applied(rule, fault_id=1, applied_ms=0)], per_second(synthetic_seconds()))
    window = entry["effect"]["LeaveGroup"]["window"]
    assert window["seconds"] == 10 and window["requests"] == 0
    assert window["p50_ms"] is None and window["p99_ms"] is None
    assert entry["effect"]["LeaveGroup"]["outside"]["seconds"] == 0


def test_the_end_table_shows_each_fault_and_its_effect() -> None:
    agg = Aggregator(None, {"members": 20}, workers=2, thresholds=Thresholds())
    seconds = synthetic_seconds()
    for second in seconds:
        agg.add(second)
    summary = agg.finish("completed", None)
    assert summary["faults"] is None  # without --faults
    summary["faults"] = effects(applied_faults(), per_second(seconds))
    console = Console(record=True, width=160)
    print_summary(summary, console)
    text = console.export_text()
    lines = text.splitlines()
    heartbeat = (
        "fault #3 at 3 s: Heartbeat: error COORDINATOR_LOAD_IN_PROGRESS; in force 3.0-6.0 s, "
        "injected 30 (ended)"
    )
    assert heartbeat in lines
    assert "fault #4 at 8 s: *: latency 5 ms; in force 8.5-10.0 s, injected 7 (active)" in lines
    assert "fault at 9 s: JoinGroup: pause; not added: 400: a reason" in lines

    def cells(line: str) -> list[str]:
        return [cell.strip() for cell in line.split("│")[1:-1]]

    first = lines.index(heartbeat)
    rows = [cells(line) for line in lines[first + 1 : first + 8] if "│" in line]
    assert rows == [
        [
            "Heartbeat",
            "window 3",
            "300",
            "100",
            "1.02",
            "50.00",
            "COORDINATOR_LOAD_IN_PROGRESS 30",
            "REBALANCE_IN_PROGRESS 6",
        ],
        ["Heartbeat", "outside 5", "500", "100", "1.00", "1.00", "-", "-"],
    ]
    assert text.index("fault #4") < text.index("verdict: passed")


# Applying during a run, when the admin port is gone


def test_faults_the_server_cannot_take_are_reported_and_the_run_goes_on() -> None:
    schedule = parse_schedule(
        '[[fault]]\nat_ms = 0\napi = "Heartbeat"\npause = true\n'
        '[[fault]]\nat_ms = 60000\napi = "Heartbeat"\nerror = 27\n'
    )
    run = FaultRun(schedule, AdminClient(f"127.0.0.1:{free_port()}", timeout_s=1.0))
    run.start(time.time())
    deadline = time.monotonic() + 5
    while run.applied[0].apply_error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    refused, late = run.finish(per_second(synthetic_seconds()))
    assert refused["apply_error"] == "not added: connection refused"
    assert late["apply_error"] == "not added: the run ended first"
    assert refused["effect"] is None and late["window"] is None
    assert refused["end_error"] is None  # nothing was added, so nothing to read or delete


# The admin client, against a throwaway HTTP server


class Stub(http.server.ThreadingHTTPServer):
    """Answers each (method, path) as told, 404 otherwise; keeps what it was sent."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers: dict[tuple[str, str], tuple[int, bytes]] = {}
        self.received: list[tuple[str, str, bytes, str | None]] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"

    def answer(self, method: str, path: str, status: int, body: Any) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.answers[method, path] = (status, data)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Stub

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        self.server.received.append(
            (self.command, self.path, body, self.headers.get("Content-Type"))
        )
        status, data = self.server.answers.get(
            (self.command, self.path), (404, b'{"error": "no such route"}')
        )
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _any

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test's output stays the test's


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


VIEW = {
    "id": 7,
    "rule": {"api": "Heartbeat", "pause": True},
    "description": "#7 Heartbeat: pause",
    "state": "active",
    "injected": 0,
    "added_ms": 1,
    "starts_ms": 1,
    "ends_ms": None,
}


def test_each_method_sends_its_request_and_reads_the_answer(stub: Stub) -> None:
    client = AdminClient(stub.address, timeout_s=2.0)
    stub.answer("POST", "/v1/faults", 201, VIEW)
    stub.answer("GET", "/v1/faults", 200, [VIEW])
    stub.answer("DELETE", "/v1/faults/7", 200, VIEW)
    stub.answer("DELETE", "/v1/faults", 200, {"deleted": 3})
    stub.answer("GET", "/v1/groups", 200, [{"group_id": "g", "members": 2}])
    stub.answer("GET", "/v1/groups/a%20b%2Fc", 200, {"group_id": "a b/c", "members": []})
    stub.answer("GET", "/metrics", 200, b"fastcoord_up 1\n")
    assert client.add_fault({"api": "Heartbeat", "pause": True}) == VIEW
    assert client.faults() == [VIEW]
    assert client.delete_fault(7) == VIEW
    assert client.clear_faults() == 3
    assert client.groups() == [{"group_id": "g", "members": 2}]
    assert client.group("a b/c") == {"group_id": "a b/c", "members": []}
    assert client.metrics_text() == "fastcoord_up 1\n"
    assert client.request("POST", "/v1/faults", b"{") == (201, json.dumps(VIEW).encode())
    assert [(m, p) for m, p, _, _ in stub.received] == [
        ("POST", "/v1/faults"),
        ("GET", "/v1/faults"),
        ("DELETE", "/v1/faults/7"),
        ("DELETE", "/v1/faults"),
        ("GET", "/v1/groups"),
        ("GET", "/v1/groups/a%20b%2Fc"),
        ("GET", "/metrics"),
        ("POST", "/v1/faults"),
    ]
    _, _, body, content_type = stub.received[0]
    assert json.loads(body) == {"api": "Heartbeat", "pause": True}
    assert content_type == "application/json"
    assert stub.received[1][2] == b"" and stub.received[-1][2] == b"{"


def test_refusals_raise_with_the_servers_reason(stub: Stub) -> None:
    client = AdminClient(stub.address, timeout_s=2.0)
    stub.answer("POST", "/v1/faults", 400, {"error": "api: unknown API 'Hartbeat'"})
    with pytest.raises(AdminError) as caught:
        client.add_fault({"api": "Hartbeat", "pause": True})
    assert caught.value.status == 400 and caught.value.message == "api: unknown API 'Hartbeat'"
    stub.answer("DELETE", "/v1/faults/9", 404, {"error": "no fault 9"})
    with pytest.raises(AdminError) as caught:
        client.delete_fault(9)
    assert (caught.value.status, caught.value.message) == (404, "no fault 9")
    with pytest.raises(AdminError) as caught:
        client.group("nobody")
    assert (caught.value.status, caught.value.message) == (404, "no such route")
    stub.answer("GET", "/v1/groups", 500, b"Internal Server Error")
    with pytest.raises(AdminError, match="500: 'Internal Server Error'"):
        client.groups()
    stub.answer("GET", "/v1/faults", 200, b"<html>")
    with pytest.raises(AdminError, match="not JSON"):
        client.faults()
    stub.answer("GET", "/v1/faults", 200, {"not": "a list"})
    with pytest.raises(AdminError, match="expected a list of faults"):
        client.faults()
    assert client.request("GET", "/nowhere") == (404, b'{"error": "no such route"}')


def test_an_admin_port_that_is_not_fastcoords_is_refused_at_start(
    stub: Stub, tmp_path: Path
) -> None:
    path = tmp_path / "faults.toml"
    path.write_text(SCHEDULE)
    with pytest.raises(ScheduleError) as caught:
        prepare(path, stub.address, 60.0)
    assert str(caught.value) == (
        f"the admin port {stub.address} answered GET /v1/faults with 404 (no such route): "
        "is --admin the address of fastcoord serve --admin-port?"
    )
    stub.answer("GET", "/v1/faults", 200, [])
    run = prepare(path, stub.address, 60.0)
    assert run is not None and [a.scheduled.at_ms for a in run.applied] == [0, 10000, 20000]
    assert prepare(None, None, 60.0) is None


def test_a_server_that_does_not_answer_times_out() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()  # connections complete in the backlog; nothing is ever read
        client = AdminClient(f"127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.2)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            client.faults()
        assert time.monotonic() - started < 2


def test_addresses() -> None:
    assert parse_address("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_address("[::1]:8080") == ("::1", 8080)
    for bad in ("nowhere", ":80", "host:", "host:http", "host:70000"):
        with pytest.raises(ValueError):
            parse_address(bad)


# A cluster's admin ports: every rule to every node


@pytest.fixture
def stubs() -> Iterator[list[Stub]]:
    """Two admin ports, as two nodes of a cluster have."""
    servers = [Stub(), Stub()]
    threads = [
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.01}) for s in servers
    ]
    for thread in threads:
        thread.start()
    try:
        yield servers
    finally:
        for server, thread in zip(servers, threads, strict=True):
            server.shutdown()
            server.server_close()
            thread.join()


def test_admin_takes_one_address_per_node() -> None:
    assert admin_addresses("127.0.0.1:1") == ["127.0.0.1:1"]
    assert admin_addresses("127.0.0.1:1, 127.0.0.1:2,[::1]:3") == [
        "127.0.0.1:1",
        "127.0.0.1:2",
        "[::1]:3",
    ]
    with pytest.raises(ScheduleError, match="--admin 'nowhere': expected HOST:PORT"):
        admin_addresses("127.0.0.1:1,nowhere")
    with pytest.raises(ScheduleError, match=r"--admin: 127\.0\.0\.1:1 is given twice"):
        admin_addresses("127.0.0.1:1,127.0.0.1:2, 127.0.0.1:1")


def test_every_admin_port_is_checked_before_the_run(stubs: list[Stub], tmp_path: Path) -> None:
    path = tmp_path / "faults.toml"
    path.write_text(SCHEDULE)
    for s in stubs:
        s.answer("GET", "/v1/faults", 200, [])
    gone = f"127.0.0.1:{free_port()}"
    with pytest.raises(ScheduleError, match=f"cannot reach the admin port {gone} "):
        prepare(path, f"{stubs[0].address},{gone},{stubs[1].address}", 60.0)
    run = prepare(path, ",".join(s.address for s in stubs), 60.0)
    assert run is not None and [c.address for c in run.clients] == [s.address for s in stubs]
    assert [[n.admin for n in a.nodes] for a in run.applied] == [[s.address for s in stubs]] * 3


def node_view(fault_id: int, injected: int, state: str = "ended") -> dict[str, Any]:
    return {**VIEW, "id": fault_id, "injected": injected, "state": state}


def test_a_fault_is_added_to_every_node_and_counted_over_them(stubs: list[Stub]) -> None:
    (rule,) = parse_schedule('[[fault]]\nat_ms = 0\napi = "Heartbeat"\npause = true\n')
    for s, injected in zip(stubs, (3, 4), strict=True):
        s.answer("POST", "/v1/faults", 201, node_view(7, 0, "active"))
        s.answer("GET", "/v1/faults", 200, [node_view(7, injected)])
        s.answer("DELETE", "/v1/faults/7", 200, node_view(7, injected))
    run = FaultRun([rule], [AdminClient(s.address, timeout_s=2.0) for s in stubs])
    started = time.time()
    run.start(started)
    deadline = time.monotonic() + 5
    while run.applied[0].fault_id is None and time.monotonic() < deadline:
        time.sleep(0.01)
    (fault,) = run.finish(per_second(synthetic_seconds()))
    assert fault["id"] == 7 and fault["injected"] == 7 and fault["state"] == "ended"
    assert fault["apply_error"] is None and fault["end_error"] is None
    assert fault["window"] is not None and fault["effect"] is not None
    assert [(n["admin"], n["id"], n["injected"]) for n in fault["nodes"]] == [
        (stubs[0].address, 7, 3),
        (stubs[1].address, 7, 4),
    ]
    for s in stubs:  # added, read and deleted on each
        assert [(m, p) for m, p, _, _ in s.received] == [
            ("POST", "/v1/faults"),
            ("GET", "/v1/faults"),
            ("DELETE", "/v1/faults/7"),
        ]
    console = Console(record=True, width=160)
    console.print(faults_report([fault]))
    text = console.export_text()
    assert "in force on 2 nodes" in text and "injected 7 (ended)" in text
    assert f"per node: {stubs[0].address} #7 injected 3, {stubs[1].address} #7 injected 4" in text


def test_a_node_that_refuses_a_fault_is_named_and_the_others_keep_it(stubs: list[Stub]) -> None:
    (rule,) = parse_schedule('[[fault]]\nat_ms = 0\napi = "Heartbeat"\npause = true\n')
    stubs[0].answer("POST", "/v1/faults", 201, node_view(2, 0, "active"))
    stubs[0].answer("GET", "/v1/faults", 200, [node_view(2, 5, "active")])
    stubs[0].answer("DELETE", "/v1/faults/2", 200, node_view(2, 5))
    stubs[1].answer("POST", "/v1/faults", 400, {"error": "no room"})
    run = FaultRun([rule], [AdminClient(s.address, timeout_s=2.0) for s in stubs])
    run.start(time.time())
    deadline = time.monotonic() + 5
    while run.applied[0].apply_error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    (fault,) = run.finish(PerSecond())
    assert fault["apply_error"] == f"{stubs[1].address}: not added: 400: no room"
    assert fault["id"] is None  # not every node has it
    assert fault["injected"] == 5 and fault["state"] == "active"
    assert fault["window"] is not None  # in force where it was added
    assert [n["id"] for n in fault["nodes"]] == [2, None]
    assert [(m, p) for m, p, _, _ in stubs[1].received] == [("POST", "/v1/faults")]
    console = Console(record=True, width=200)
    console.print(faults_report([fault]))
    text = console.export_text()
    assert f"injected 5 (active); {stubs[1].address}: not added: 400: no room" in text
    assert f"{stubs[1].address} not added" in text
