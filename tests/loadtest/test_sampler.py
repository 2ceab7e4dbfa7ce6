"""The server's CPU and memory from its admin port: the metrics read from Prometheus text,
one sample a second per node from a thread that never holds up the parent, failures
counted and skipped, and the summary's figures (CPU over the steady phase when there is
one)."""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from fastcoord.loadtest.sampler import (
    Sample,
    ServerFigures,
    ServerSampler,
    elapsed_second,
    parse_metrics,
    unreachable,
)

from .test_faults import Stub, free_port, stub, stubs  # noqa: F401 (fixtures)

METRICS = """\
# HELP fastcoord_process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE fastcoord_process_cpu_seconds_total counter
fastcoord_process_cpu_seconds_total 1.15
# HELP fastcoord_process_resident_memory_bytes Resident memory size in bytes.
# TYPE fastcoord_process_resident_memory_bytes gauge
fastcoord_process_resident_memory_bytes 9.2667904e+07
fastcoord_process_virtual_memory_bytes 5.0e+08
"""


def test_the_metrics_are_read_from_prometheus_text() -> None:
    assert parse_metrics(METRICS) == (1.15, 92_667_904)
    labelled = METRICS.replace("total 1.15", 'total{node="0"} 2.5 1700000000000')
    assert parse_metrics(labelled) == (2.5, 92_667_904)
    assert parse_metrics("fastcoord_up 1\n") is None
    assert parse_metrics(METRICS.replace("1.15", "lots")) is None
    # A longer name that begins as one of ours is another metric.
    assert parse_metrics(METRICS.replace("bytes 9", "bytes_max 9")) is None


def test_a_sample_falls_in_the_second_that_holds_it() -> None:
    assert elapsed_second(100.2, 100.0) == 1
    assert elapsed_second(101.0, 100.0) == 1  # second s covers (s - 1, s]
    assert elapsed_second(101.01, 100.0) == 2
    assert elapsed_second(99.0, 100.0) == 1


@pytest.fixture
def counting(stubs: list[Stub]) -> Iterator[list[Stub]]:  # noqa: F811
    """Two admin ports whose CPU grows at each sample."""
    for n, s in enumerate(stubs):
        s.answer("GET", "/metrics", 200, METRICS.replace("1.15", str(1.15 + n)).encode())
    yield stubs


def test_every_node_is_sampled_and_a_failing_one_counted(counting: list[Stub]) -> None:
    gone = f"127.0.0.1:{free_port()}"
    addresses = [counting[0].address, counting[1].address, gone]
    sampler = ServerSampler(addresses, every_s=0.05, timeout_s=0.5)
    started = time.time()
    sampler.start(started)
    samples: list[Sample] = []
    failed: Counter[str] = Counter()

    def sampled(address: str) -> int:
        return sum(s[2] == address for s in samples)

    # Three rounds at least, however slowly a busy machine gets through them.
    deadline = time.monotonic() + 30
    while min(sampled(counting[0].address), sampled(counting[1].address), failed[gone]) < 3:
        assert time.monotonic() < deadline, (samples, failed)
        time.sleep(0.05)
        taken, failures = sampler.take()
        samples += taken
        failed.update(failures)
    sampler.stop()
    taken, failures = sampler.take()
    samples += taken
    failed.update(failures)
    by_node = {a: [s for s in samples if s[2] == a] for a in addresses}
    assert by_node[gone] == []
    assert failed[counting[0].address] == failed[counting[1].address] == 0
    wall_ms, elapsed_s, node, cpu_s, rss = by_node[counting[1].address][0]
    assert (elapsed_s, node, cpu_s, rss) == (1, counting[1].address, 2.15, 92_667_904)
    assert started * 1000 < wall_ms < time.time() * 1000
    assert sampler.take() == ([], dict.fromkeys(addresses, 0))  # taken once


def test_a_server_that_does_not_answer_never_holds_up_the_parent() -> None:
    timeout_s = 2.0  # long beside a take or a stop that does not wait for the request
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(30)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        sampler = ServerSampler([address], every_s=0.05, timeout_s=timeout_s)
        sampler.start(time.time())
        request, _ = listener.accept()  # the thread's first request, never answered
        with request:
            began = time.monotonic()
            assert sampler.take() == ([], {address: 0})  # the thread waits; take does not
            assert time.monotonic() - began < timeout_s / 2
            # The request times out and counts as a failure.
            failed = 0
            deadline = time.monotonic() + 30
            while not failed:
                assert time.monotonic() < deadline, "the request never timed out"
                time.sleep(0.05)
                samples, failures = sampler.take()
                assert samples == []
                failed += failures[address]
            # Stopped at once, or after the request under way at most (the next one, the
            # backlog accepts and nothing answers).
            stopping = time.monotonic()
            sampler.stop()
            assert time.monotonic() - stopping < timeout_s * 2
        assert unreachable(address, 0.2) == "no answer within the timeout"


def test_an_unreachable_admin_port_says_why(stub: Stub) -> None:  # noqa: F811
    assert unreachable(f"127.0.0.1:{free_port()}") == "connection refused"
    assert unreachable(stub.address) == "404: no such route"
    stub.answer("GET", "/metrics", 200, METRICS.encode())
    assert unreachable(stub.address) is None


def samples_of(node: str, cpu: list[float]) -> list[tuple[int, int, str, float, int]]:
    """One sample a second (in its middle) with these cumulative CPU seconds."""
    return [(s * 1000 - 500, s, node, c, 1000 * s) for s, c in enumerate(cpu, 1)]


def test_the_summary_figures_of_each_node() -> None:
    figures = ServerFigures(["a:1", "b:2"])
    # 0.1 of a core while members join (seconds 1-3), 0.5 in steady state (3-6).
    figures.add(samples_of("a:1", [0.1, 0.2, 0.3, 0.8, 1.3, 1.8, 1.9]), {"a:1": 0, "b:2": 2})
    figures.add([], {"b:2": 1})
    section = figures.section(range(3, 7))
    assert section["a:1"] == {
        "samples": 7,
        "failed": 0,
        "cpu_s": 1.8,
        "cores": pytest.approx(0.5),
        "peak_rss_bytes": 7000,
        "rss_bytes_at_end": 7000,
    }
    assert section["b:2"] == {
        "samples": 0,
        "failed": 3,
        "cpu_s": None,
        "cores": None,
        "peak_rss_bytes": None,
        "rss_bytes_at_end": None,
    }
    # No steady phase: over the whole run.
    assert figures.section(None)["a:1"]["cores"] == pytest.approx(1.8 / 6)
