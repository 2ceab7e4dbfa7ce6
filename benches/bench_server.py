"""Heartbeat round trips over loopback: `fastcoord serve` against the librdkafka mock cluster.

The aims, for one member on one connection with the server on one core:
- pipelined (256 heartbeats in flight): at or over 500k heartbeats/s, and 5x the mock's rate;
- one request in flight: p50 round trip within 1.5x the mock's.

Both peers run in the same run, as subprocesses pinned to the same core (the client to
another; fastcoord.testing starts and stops them), and are measured by the same
plain-Python client (fastcoord.client.blocking, benches/loopback.py): a member joins
(FindCoordinator, JoinGroup twice for MEMBER_ID_REQUIRED, SyncGroup as leader), then sends
Heartbeat v3. Every answer is checked (size, correlation id in order) and its
error code counted; an error answer from fastcoord fails the benchmark.

fastcoord runs twice: as it is, and with its admin port on and scraped (`GET /metrics`)
once a second by a thread of this process through the measurements, so that the admin
port's cost to the heartbeat path shows as a ratio of the two (aim: none measurable).

A further process, the reference responder, answers each heartbeat without doing anything: the
most this client can measure on this machine at that moment (on a busy 2-core host, this
pure-Python client's own ceiling is not far above 500k/s). Each measurement also records
the CPU time the peer used per heartbeat, and how long the processes waited for a core
(the host's contention), from /proc's schedstat.

asv: `setup_cache` starts the peers, takes every measurement (each round rotates the peers'
order; each figure is the median over rounds), stops the peers by PID (also at exit) and
returns the figures, which the `track_*` methods report:

    .venv/bin/asv run --python=same --bench bench_server --show-stderr

Directly, with a table of both peers and the ratios:

    .venv/bin/python -m benches.bench_server [--rounds N]

To profile the server under the pipelined load (it prints the server's PID, then loads it;
add --one-in-flight for the other mode):

    .venv/bin/python -m benches.bench_server --load 30 &
    .venv/bin/py-spy record --pid <PID> --duration 20 --nonblocking --format raw -o /tmp/s.raw
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastcoord import testing
from fastcoord.client.admin import AdminClient, AdminError
from fastcoord.client.blocking import Connection, Member, PeerError
from fastcoord.testing import ServerProcess
from fastcoord.testing_cpu import cores, pinned

from . import loopback
from .common import SMOKE, scaled

GROUP_ID = "bench-heartbeat-group"
WINDOW = 256
ROUNDS = 1 if SMOKE else 3
# Each measurement stops at a count or a time, whichever comes first.
ONE_IN_FLIGHT_COUNT = scaled(50_000)
ONE_IN_FLIGHT_SECONDS = 0.05 if SMOKE else 1.5
PIPELINED_COUNT = scaled(2_000_000)
PIPELINED_SECONDS = 0.1 if SMOKE else 2.0
WARMUP_SECONDS = 0.02 if SMOKE else 0.5
# The reference responder is not a peer: it answers without doing anything, which shows the
# most this client can measure on this machine (is 500k/s measurable at all right now?).
PEERS = ("fastcoord", "fastcoord_admin", "mock", "responder")
LABELS = {
    "fastcoord": "fastcoord",
    "fastcoord_admin": "fastcoord, admin port scraped every second",
    "mock": "librdkafka mock",
    "responder": "reference responder (client ceiling)",
}
AIM_PIPELINED_RATE = 500_000
AIM_PIPELINED_OVER_MOCK = 5.0
AIM_P50_OVER_MOCK = 1.5
SCRAPE_EVERY_S = 1.0


class Scraper:
    """GET /metrics every SCRAPE_EVERY_S from a thread, as Prometheus would (more often
    than its default 15 s); counts the scrapes and their failures."""

    def __init__(self, address: str) -> None:
        self.client = AdminClient(address, timeout_s=5.0)
        self.scrapes = 0
        self.failures = 0
        self.seconds: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)

    def _run(self) -> None:
        while True:  # one at once: a smoke run's measurements are over within a second
            started = time.perf_counter()
            try:
                self.client.metrics_text()
            except (OSError, AdminError):
                self.failures += 1
            else:
                self.seconds.append(time.perf_counter() - started)
                self.scrapes += 1
            if self._stop.wait(SCRAPE_EVERY_S):
                return

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _start(name: str, core: int | None) -> ServerProcess:
    if name == "mock":
        return testing.start_mock(core)
    if name == "responder":
        return testing.start_responder(core)
    admin = ("--admin-port", "0") if name == "fastcoord_admin" else ()
    return testing.start_fastcoord(None, *loopback.SERVE_ARGS, *admin, core=core, wait_loaded=False)


Session = tuple[ServerProcess, Connection, Member, loopback.HeartbeatRing, int | None]


def _open(name: str, core: int | None) -> Session:
    """Start a peer and join its group: the session that the measurements use."""
    peer = _start(name, core)
    try:
        if name == "responder":
            client = peer.connect()
            member = loopback.responder_member()
            stale = None
        else:
            client, member = loopback.join_group(peer.host, peer.port, GROUP_ID)
            stale = loopback.wrong_generation_answer(client, member)
    except BaseException:
        peer.stop()
        raise
    return peer, client, member, loopback.HeartbeatRing(member), stale


def _float(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def measure(rounds: int = ROUNDS) -> dict[str, Any]:
    """Start the peers, measure both modes `rounds` times, stop the peers: the figures."""
    client_core, server_core = cores()
    sessions: dict[str, Session] = {}
    samples: dict[str, dict[str, list[Any]]] = {
        name: {"one": [], "pipelined": []} for name in PEERS
    }
    try:
        # Side by side: the mock holds its first JoinGroup for 3 s.
        with ThreadPoolExecutor(len(PEERS)) as pool:
            opening = {name: pool.submit(_open, name, server_core) for name in PEERS}
        sessions = {name: f.result() for name, f in opening.items() if f.exception() is None}
        failed = [e for f in opening.values() if (e := f.exception()) is not None]
        if failed:
            raise failed[0]
        scraper = Scraper(sessions["fastcoord_admin"][0].admin)
        with pinned(client_core), scraper:
            for name in PEERS:  # warm-up, not counted
                _, client, _, ring, _ = sessions[name]
                loopback.pipelined(client, ring, PIPELINED_COUNT, WARMUP_SECONDS, WINDOW)
            for r in range(rounds):
                for name in PEERS[r % len(PEERS) :] + PEERS[: r % len(PEERS)]:
                    peer, client, _, ring, _ = sessions[name]
                    samples[name]["one"].append(
                        loopback.with_cpu(
                            peer.pid,
                            loopback.one_in_flight,
                            client,
                            ring,
                            ONE_IN_FLIGHT_COUNT,
                            ONE_IN_FLIGHT_SECONDS,
                        )
                    )
                    samples[name]["pipelined"].append(
                        loopback.with_cpu(
                            peer.pid,
                            loopback.pipelined,
                            client,
                            ring,
                            PIPELINED_COUNT,
                            PIPELINED_SECONDS,
                            WINDOW,
                        )
                    )
    finally:
        for peer, client, _, _, _ in sessions.values():
            client.close()
            peer.terminate()  # all at once: each takes a moment to shut down
        for peer, _, _, _, _ in sessions.values():
            peer.stop()

    figures: dict[str, Any] = {
        "rounds": rounds,
        "window": WINDOW,
        "client_core": client_core,
        "server_core": server_core,
    }
    for name in PEERS:
        one, piped = samples[name]["one"], samples[name]["pipelined"]
        errors: dict[int, int] = {}
        for m in one + piped:
            for code, n in m.errors.items():
                errors[code] = errors.get(code, 0) + n
        member, stale = sessions[name][2], sessions[name][4]
        figures[name] = {
            "p50_us": statistics.median(m.p50_us for m in one),
            "p99_us": statistics.median(m.percentile_us(0.99) for m in one),
            "one_in_flight_rate": statistics.median(m.rate for m in one),
            "pipelined_rate": statistics.median(m.rate for m in piped),
            # Server CPU per heartbeat drifts less with a busy host than rates do.
            "pipelined_cpu_us": loopback.median([m.cpu_us_per() for m in piped]),
            # In cores: on a CPU, and runnable but waiting for one (the host's contention).
            **loopback.cpu_shares(piped),
            "one_in_flight_cpu_us": loopback.median([m.cpu_us_per() for m in one]),
            "rounds_p50_us": [m.p50_us for m in one],
            "rounds_pipelined_rate": [m.rate for m in piped],
            "heartbeats": sum(m.requests for m in one + piped),
            "errors": errors,
            "join_attempts": member.join_attempts,
            "join_ms": member.join_ms,
            "generation_id": member.generation_id,
            "stale_generation_error": stale,
        }
    for name in ("fastcoord", "fastcoord_admin", "mock"):
        if figures[name]["stale_generation_error"] != 22:
            raise PeerError(
                f"{name} answered a stale-generation heartbeat with "
                f"{figures[name]['stale_generation_error']}, not 22 (ILLEGAL_GENERATION): "
                "it does not check heartbeats, and its answers of 0 prove nothing"
            )
    for name in ("fastcoord", "fastcoord_admin"):
        if figures[name]["errors"]:
            raise PeerError(
                f"{name} answered heartbeats with errors {figures[name]['errors']}: "
                "timing error answers proves nothing"
            )
    fc = figures["fastcoord"]
    if not scraper.scrapes or scraper.failures:
        raise PeerError(
            f"the admin port was scraped {scraper.scrapes} times with {scraper.failures} "
            "failures: its cost is not measured"
        )
    figures["scrapes"] = scraper.scrapes
    figures["scrape_ms_p50"] = statistics.median(scraper.seconds) * 1000
    admin = figures["fastcoord_admin"]
    figures["admin_pipelined_ratio"] = admin["pipelined_rate"] / fc["pipelined_rate"]
    figures["admin_p50_ratio"] = admin["p50_us"] / fc["p50_us"]
    figures["admin_cpu_ratio"] = _float(admin["pipelined_cpu_us"]) / _float(fc["pipelined_cpu_us"])
    figures["pipelined_over_mock"] = (
        figures["fastcoord"]["pipelined_rate"] / figures["mock"]["pipelined_rate"]
    )
    figures["p50_over_mock"] = figures["fastcoord"]["p50_us"] / figures["mock"]["p50_us"]
    return figures


class HeartbeatLoopback:
    """Heartbeat v3 round trips, one member, one connection, server pinned to one core."""

    timeout = 300

    def setup_cache(self) -> dict[str, Any]:
        return measure()

    setup_cache.timeout = 300  # type: ignore[attr-defined]

    def track_fastcoord_pipelined_rate(self, figures: dict[str, Any]) -> float:
        return float(figures["fastcoord"]["pipelined_rate"])

    track_fastcoord_pipelined_rate.unit = "heartbeats/s"  # type: ignore[attr-defined]

    def track_fastcoord_one_in_flight_p50(self, figures: dict[str, Any]) -> float:
        return float(figures["fastcoord"]["p50_us"])

    track_fastcoord_one_in_flight_p50.unit = "us"  # type: ignore[attr-defined]

    def track_fastcoord_one_in_flight_rate(self, figures: dict[str, Any]) -> float:
        return float(figures["fastcoord"]["one_in_flight_rate"])

    track_fastcoord_one_in_flight_rate.unit = "heartbeats/s"  # type: ignore[attr-defined]

    def track_fastcoord_pipelined_cpu_per_heartbeat(self, figures: dict[str, Any]) -> float:
        """Server CPU time per heartbeat under the pipelined load (1e6 / this: the rate the
        server would reach with its core to itself and a client that keeps up)."""
        return _float(figures["fastcoord"]["pipelined_cpu_us"])

    track_fastcoord_pipelined_cpu_per_heartbeat.unit = "us"  # type: ignore[attr-defined]

    def track_mock_pipelined_cpu_per_heartbeat(self, figures: dict[str, Any]) -> float:
        """The mock process's CPU time per heartbeat under the pipelined load."""
        return _float(figures["mock"]["pipelined_cpu_us"])

    track_mock_pipelined_cpu_per_heartbeat.unit = "us"  # type: ignore[attr-defined]

    def track_mock_pipelined_rate(self, figures: dict[str, Any]) -> float:
        return float(figures["mock"]["pipelined_rate"])

    track_mock_pipelined_rate.unit = "heartbeats/s"  # type: ignore[attr-defined]

    def track_mock_one_in_flight_p50(self, figures: dict[str, Any]) -> float:
        return float(figures["mock"]["p50_us"])

    track_mock_one_in_flight_p50.unit = "us"  # type: ignore[attr-defined]

    def track_mock_one_in_flight_rate(self, figures: dict[str, Any]) -> float:
        return float(figures["mock"]["one_in_flight_rate"])

    track_mock_one_in_flight_rate.unit = "heartbeats/s"  # type: ignore[attr-defined]

    def track_mock_error_answers(self, figures: dict[str, Any]) -> int:
        """Heartbeats the mock answered with an error code (0: all were answered NONE)."""
        return sum(figures["mock"]["errors"].values())

    track_mock_error_answers.unit = "heartbeats"  # type: ignore[attr-defined]

    def track_reference_pipelined_rate(self, figures: dict[str, Any]) -> float:
        """The client's ceiling: a responder that does nothing per heartbeat."""
        return float(figures["responder"]["pipelined_rate"])

    track_reference_pipelined_rate.unit = "heartbeats/s"  # type: ignore[attr-defined]

    def track_reference_one_in_flight_p50(self, figures: dict[str, Any]) -> float:
        """A Python responder's round trip: the loopback and wake-up cost on this host, but
        not a floor (the mock, in C, answers faster)."""
        return float(figures["responder"]["p50_us"])

    track_reference_one_in_flight_p50.unit = "us"  # type: ignore[attr-defined]

    def track_ratio_pipelined_fastcoord_over_mock(self, figures: dict[str, Any]) -> float:
        """Aim: at or over 5."""
        return float(figures["pipelined_over_mock"])

    track_ratio_pipelined_fastcoord_over_mock.unit = "ratio"  # type: ignore[attr-defined]

    def track_ratio_p50_fastcoord_over_mock(self, figures: dict[str, Any]) -> float:
        """Aim: at or under 1.5."""
        return float(figures["p50_over_mock"])

    track_ratio_p50_fastcoord_over_mock.unit = "ratio"  # type: ignore[attr-defined]

    def track_ratio_pipelined_admin_port_over_none(self, figures: dict[str, Any]) -> float:
        """Pipelined rate with the admin port on and scraped, over without. Aim: 1."""
        return float(figures["admin_pipelined_ratio"])

    track_ratio_pipelined_admin_port_over_none.unit = "ratio"  # type: ignore[attr-defined]

    def track_ratio_p50_admin_port_over_none(self, figures: dict[str, Any]) -> float:
        """One-in-flight p50 with the admin port on and scraped, over without. Aim: 1."""
        return float(figures["admin_p50_ratio"])

    track_ratio_p50_admin_port_over_none.unit = "ratio"  # type: ignore[attr-defined]

    def track_ratio_cpu_admin_port_over_none(self, figures: dict[str, Any]) -> float:
        """Server CPU per pipelined heartbeat with the admin port on and scraped, over
        without. Aim: 1."""
        return float(figures["admin_cpu_ratio"])

    track_ratio_cpu_admin_port_over_none.unit = "ratio"  # type: ignore[attr-defined]


# -- command line -------------------------------------------------------------------------


def _verdict(ok: bool) -> str:
    return "met" if ok else "missed"


def report(figures: dict[str, Any]) -> str:
    fc, mock = figures["fastcoord"], figures["mock"]
    lines = [
        f"Heartbeat v3 over loopback, one member, one connection; server core "
        f"{figures['server_core']}, client core {figures['client_core']}; "
        f"median of {figures['rounds']} round(s)",
        "",
        f"| peer | one in flight p50 | p99 | one in flight rate | "
        f"pipelined ({figures['window']}) rate | server CPU per heartbeat, pipelined "
        "(cores used) | error answers |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in PEERS:
        f, label = figures[name], LABELS[name]
        errors = ", ".join(f"{n} x error {c}" for c, n in sorted(f["errors"].items())) or "none"
        cpu = (
            f"{f['pipelined_cpu_us']:.2f} us ({f['pipelined_server_run']:.2f})"
            if f["pipelined_cpu_us"] is not None
            else "n/a"
        )
        lines.append(
            f"| {label} | {f['p50_us']:.1f} us | {f['p99_us']:.1f} us | "
            f"{f['one_in_flight_rate']:,.0f}/s | {f['pipelined_rate']:,.0f}/s | {cpu} | "
            f"{errors} of {f['heartbeats']:,} |"
        )
    lines += [
        "",
        "| ratio | measured | aim | verdict |",
        "|---|---|---|---|",
        f"| fastcoord pipelined rate | {fc['pipelined_rate']:,.0f}/s | "
        f">= {AIM_PIPELINED_RATE:,}/s | {_verdict(fc['pipelined_rate'] >= AIM_PIPELINED_RATE)} |",
        f"| pipelined rate, fastcoord / mock | {figures['pipelined_over_mock']:.2f}x | "
        f">= {AIM_PIPELINED_OVER_MOCK}x | "
        f"{_verdict(figures['pipelined_over_mock'] >= AIM_PIPELINED_OVER_MOCK)} |",
        f"| one in flight p50, fastcoord / mock | {figures['p50_over_mock']:.2f}x | "
        f"<= {AIM_P50_OVER_MOCK}x | {_verdict(figures['p50_over_mock'] <= AIM_P50_OVER_MOCK)} |",
        "",
        f"admin port on and scraped every {SCRAPE_EVERY_S:g} s ({figures['scrapes']} scrapes, "
        f"p50 {figures['scrape_ms_p50']:.1f} ms each), over off: pipelined rate "
        f"{figures['admin_pipelined_ratio']:.3f}x, one in flight p50 "
        f"{figures['admin_p50_ratio']:.3f}x, server CPU per pipelined heartbeat "
        f"{figures['admin_cpu_ratio']:.3f}x",
        "",
        *(
            f"rounds, {LABELS[name]}: p50 "
            + ", ".join(f"{v:.1f}" for v in figures[name]["rounds_p50_us"])
            + " us; pipelined "
            + ", ".join(f"{v:,.0f}" for v in figures[name]["rounds_pipelined_rate"])
            + "/s"
            for name in PEERS
        ),
        f"joins: fastcoord {fc['join_attempts']} JoinGroup(s), generation "
        f"{fc['generation_id']}, {fc['join_ms']:.0f} ms; mock {mock['join_attempts']} "
        f"JoinGroup(s), generation {mock['generation_id']}, {mock['join_ms']:.0f} ms",
        loopback.cores_line(figures, PEERS, LABELS),
        "server CPU per heartbeat, one in flight: "
        + "; ".join(
            f"{LABELS[name]} {figures[name]['one_in_flight_cpu_us']:.1f} us"
            for name in PEERS
            if figures[name]["one_in_flight_cpu_us"] is not None
        ),
        f"a stale-generation heartbeat is answered {fc['stale_generation_error']} by fastcoord "
        f"and {mock['stale_generation_error']} by the mock (22: ILLEGAL_GENERATION)",
    ]
    return "\n".join(lines)


def load(seconds: float, one: bool = False) -> None:
    """Heartbeats against fastcoord for `seconds` (pipelined, or one in flight), for a
    profiler to watch."""
    client_core, server_core = cores()
    peer = _start("fastcoord", server_core)
    client = None
    try:
        client, member = loopback.join_group(peer.host, peer.port, GROUP_ID)
        ring = loopback.HeartbeatRing(member)
        print(f"fastcoord serve pid {peer.pid} on {peer.host}:{peer.port}", flush=True)
        done, errors = 0, 0
        started = time.monotonic()
        with pinned(client_core):
            while time.monotonic() - started < seconds:
                if one:
                    m = loopback.one_in_flight(client, ring, 10**9, 1.0)
                else:
                    m = loopback.pipelined(client, ring, 10**9, 1.0, WINDOW)
                done += m.requests
                errors += sum(m.errors.values())
        elapsed = time.monotonic() - started
        print(f"{done:,} heartbeats in {elapsed:.1f} s: {done / elapsed:,.0f}/s, {errors} errors")
    finally:
        if client is not None:
            client.close()
        peer.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benches.bench_server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds per peer and mode")
    parser.add_argument(
        "--load",
        type=float,
        metavar="SECONDS",
        help="only load fastcoord with heartbeats (print its PID) for a profiler",
    )
    parser.add_argument(
        "--one-in-flight", action="store_true", help="with --load: one request in flight"
    )
    args = parser.parse_args(argv)
    if args.load is not None:
        load(args.load, args.one_in_flight)
        return 0
    print(report(measure(args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
