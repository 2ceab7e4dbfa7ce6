"""The server's CPU and resident memory during a load test, read from its admin port.

What a coordinator costs is half of what a load test is for, and the generator's own
figures say nothing of it. With --admin the parent asks each admin address for /metrics
once a second and keeps the server's cumulative CPU seconds and resident memory
(prometheus-client's process collector: `fastcoord_process_*`) in the `server` table and
the summary. Each address has a thread of its own, so that a slow node neither delays the
others' samples nor, ever, the parent's loop, which only picks up what the threads have
gathered. A sample that fails (refused, timed out, no such metric) is counted and
skipped: the run goes on.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastcoord.client.admin import AdminClient

CPU = "fastcoord_process_cpu_seconds_total"
RSS = "fastcoord_process_resident_memory_bytes"
EVERY_S = 1.0
# Short: a sample that takes longer says nothing of its second, and the thread must be
# back for the next one.
TIMEOUT_S = 2.0

# (wall_ms, elapsed_s, node, cpu_s, rss_bytes): a row of the server table
Sample = tuple[int, int, str, float, int]


def parse_metrics(text: str) -> tuple[float, int] | None:
    """(CPU seconds, resident bytes) from Prometheus text; None if either is missing."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith((CPU, RSS)):
            continue
        fields = line.split()
        name = fields[0].partition("{")[0]
        if name in (CPU, RSS) and len(fields) >= 2:
            try:
                found[name] = float(fields[1])
            except ValueError:
                continue
    if CPU not in found or RSS not in found or not math.isfinite(found[RSS]):
        return None
    return found[CPU], int(found[RSS])


def elapsed_second(wall_s: float, started: float) -> int:
    """The run second a moment falls in: second s covers (s - 1, s] after the start."""
    return max(1, math.ceil(wall_s - started))


def unreachable(address: str, timeout_s: float = TIMEOUT_S) -> str | None:
    """Why the admin port at `address` cannot be sampled, or None when it answers."""
    try:
        AdminClient(address, timeout_s).metrics_text()
    except TimeoutError:
        return "no answer within the timeout"
    except OSError as exc:
        return exc.strerror.lower() if exc.strerror else str(exc) or type(exc).__name__
    except Exception as exc:  # an AdminError: it answered, but not /metrics
        return str(exc) or type(exc).__name__
    return None


class ServerSampler:
    """`start` at the run's start, `take` what was sampled from the parent's loop, `stop`
    with the run. `addresses`: each node's admin port, HOST:PORT."""

    def __init__(
        self,
        addresses: Sequence[str],
        every_s: float = EVERY_S,
        timeout_s: float = TIMEOUT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.addresses = list(addresses)
        self.every_s = every_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._samples: list[Sample] = []
        self._failed = dict.fromkeys(self.addresses, 0)
        self._threads: list[threading.Thread] = []
        self._started = 0.0

    def start(self, started: float) -> None:
        """Sample every node once a second from `started` (time.time())."""
        self._started = started
        for address in self.addresses:
            thread = threading.Thread(
                target=self._poll, args=(address,), name=f"loadtest-server-{address}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _poll(self, address: str) -> None:
        client = AdminClient(address, self.timeout_s)
        tick = 1
        while not self._stop.wait(max(0.0, self._started + tick * self.every_s - self._clock())):
            sent = self._clock()
            try:
                figures = parse_metrics(client.metrics_text())
            except Exception:  # refused, timed out, not HTTP: counted, and the run goes on
                figures = None
            answered = self._clock()
            with self._lock:
                if figures is None:
                    self._failed[address] += 1
                else:
                    at = (sent + answered) / 2  # the server read its figures in between
                    self._samples.append(
                        (
                            round(at * 1000),
                            elapsed_second(at, self._started),
                            address,
                            figures[0],
                            figures[1],
                        )
                    )
            # A slow answer skips the ticks it overran rather than catching up on them.
            tick = max(tick + 1, math.floor((answered - self._started) / self.every_s) + 1)

    def take(self) -> tuple[list[Sample], dict[str, int]]:
        """The samples since the last take, and the failures since then by node."""
        with self._lock:
            samples, self._samples = self._samples, []
            failed = self._failed
            self._failed = dict.fromkeys(self.addresses, 0)
        return samples, failed

    def stop(self) -> None:
        """No more samples (one under way is waited for, up to its timeout)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout_s + 1)


@dataclass
class _Node:
    samples: list[Sample] = field(default_factory=list)
    failed: int = 0


class ServerFigures:
    """The samples a run has taken of each node, for summary.json's `server`."""

    def __init__(self, addresses: Sequence[str]) -> None:
        self._nodes = {address: _Node() for address in addresses}

    def add(self, samples: Sequence[Sample], failed: dict[str, int]) -> None:
        for sample in samples:
            self._nodes.setdefault(sample[2], _Node()).samples.append(sample)
        for address, n in failed.items():
            self._nodes.setdefault(address, _Node()).failed += n

    def section(self, steady: range | None) -> dict[str, Any]:
        """Each node's figures; `cores` over the steady phase's seconds when there is one,
        else over the whole run."""
        section = {}
        for address, node in self._nodes.items():
            samples = sorted(node.samples)
            within = [s for s in samples if steady is None or s[1] in steady]
            section[address] = {
                "samples": len(samples),
                "failed": node.failed,
                "cpu_s": round(samples[-1][3] - samples[0][3], 3) if samples else None,
                "cores": _cores(within),
                "peak_rss_bytes": max(s[4] for s in samples) if samples else None,
                "rss_bytes_at_end": samples[-1][4] if samples else None,
            }
        return section


def _cores(samples: list[Sample]) -> float | None:
    """CPU seconds per second between the first and the last of `samples`."""
    if len(samples) < 2 or samples[-1][0] <= samples[0][0]:
        return None
    return (samples[-1][3] - samples[0][3]) / ((samples[-1][0] - samples[0][0]) / 1000)
