"""Synthetic workers' seconds for the aggregator's tests, made by real Recorders."""

from __future__ import annotations

import numpy as np

from fastcoord.loadtest.sampler import Sample
from fastcoord.loadtest.stats import Recorder, Second
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode

START_MS = 1_763_700_000_000


def heartbeat_ns(worker: int, elapsed_s: int, n: int) -> list[int]:
    """Distinct, seeded latencies for one worker's second."""
    rng = np.random.default_rng(worker * 1000 + elapsed_s)
    return [int(v) for v in rng.lognormal(np.log(500_000), 1.0, n)]


def second(
    worker: int,
    elapsed_s: int,
    heartbeats: int = 100,
    states: dict[str, int] | None = None,
    cpu_s: float = 0.1,
) -> Second:
    """One worker's second: `heartbeats` Heartbeats (1 in 10 REBALANCE_IN_PROGRESS), one
    OffsetCommit answered NOT_COORDINATOR, one rebalance, one commit of 4 offsets."""
    r = Recorder(worker, cpu_s=0.0)
    for i, ns in enumerate(heartbeat_ns(worker, elapsed_s, heartbeats)):
        r.record(ApiKey.HEARTBEAT, ns, ErrorCode.REBALANCE_IN_PROGRESS if i % 10 == 0 else 0)
    r.latencies(ApiKey.OFFSET_COMMIT).append(3_000_000)  # its error counted by r.error
    wall_ms = START_MS + elapsed_s * 1000 + worker  # workers' clocks differ a little
    r.error(ApiKey.OFFSET_COMMIT, ErrorCode.NOT_COORDINATOR, "g", f"m{worker}", wall_ms - 500)
    r.rebalance("g", f"m{worker}", None, elapsed_s, wall_ms - 900, wall_ms - 400, "join", True)
    r.commit(4)
    return r.take(elapsed_s, wall_ms, states or {"stable": 10, "joining": 1}, 5, cpu_s)


def server_samples(
    elapsed_s: int, node: str = "127.0.0.1:9644"
) -> tuple[list[Sample], dict[str, int]]:
    """One sample of the server in second `elapsed_s`: 0.25 s of CPU a second, 100 MB and
    1 MB more each second; none failed."""
    wall_ms = START_MS + elapsed_s * 1000 - 500
    sample = (wall_ms, elapsed_s, node, 0.25 * elapsed_s, 100_000_000 + elapsed_s * 1_000_000)
    return [sample], {node: 0}
