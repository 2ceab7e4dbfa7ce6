"""What /metrics shows: the families the collector builds from what a scrape reads (over a
source of the test's own), in the text format prometheus-client's own writer would give."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.process_collector import ProcessCollector

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.server.metrics import Metrics, MetricsCollector, exposition
from fastcoord.timings import DISK_BUCKETS_S, Timings

HB = int(ApiKey.HEARTBEAT)
JOIN = int(ApiKey.JOIN_GROUP)


class Families:
    def collect(self) -> list[Metric]:
        counter = CounterMetricFamily("c", "a counter\nwith a \\ in its help", labels=["api"])
        counter.add_metric(["Heartbeat"], 12)
        counter.add_metric(['odd "value"\\\nhere'], 1)
        gauge = GaugeMetricFamily("g", "a gauge", value=3.5)
        empty = GaugeMetricFamily("e", "a gauge without samples", labels=["state"])
        histogram = HistogramMetricFamily("h_seconds", "a histogram", labels=["api"])
        histogram.add_metric(["JoinGroup"], [("0.001", 2.0), ("0.01", 5.0), ("+Inf", 6.0)], 0.25)
        big = GaugeMetricFamily("big", "large and odd values", labels=["k"])
        big.add_metric(["large"], 1795663101161.0)
        big.add_metric(["small"], 1e-9)
        big.add_metric(["inf"], float("inf"))
        big.add_metric(["neg"], float("-inf"))
        return [counter, gauge, empty, histogram, big]


def parsed(text: bytes) -> list[tuple[str, str, str, list[tuple[str, dict[str, str], float]]]]:
    return [
        (
            f.name,
            f.type,
            f.documentation,
            [(s.name, s.labels, s.value) for s in f.samples],
        )
        for f in text_string_to_metric_families(text.decode())
    ]


def test_the_same_families_as_generate_latest() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families())
    ours = exposition(registry)
    assert parsed(ours) == parsed(generate_latest(registry))
    assert ours == generate_latest(registry).replace(b"1.795663101161e+12", b"1795663101161.0")


def test_the_process_collector_too() -> None:
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(namespace="fastcoord", registry=registry)
    names = [(name, kind) for name, kind, _, _ in parsed(exposition(registry))]
    assert names == [(name, kind) for name, kind, _, _ in parsed(generate_latest(registry))]
    assert ("fastcoord_process_cpu_seconds", "counter") in names


class Source:
    """A MetricsSource with fixed readings: two connections, three Stable groups and one
    Empty, seven members, and a log that took one 2 ms append and one 30 ms fsync."""

    def __init__(self, disk: bool = True) -> None:
        self.metrics = Metrics()
        self.append = Timings(DISK_BUCKETS_S)
        self.fsync = Timings(DISK_BUCKETS_S)
        self.append.observe_ns(2_000_000)
        self.fsync.observe_ns(30_000_000)
        self.disk = disk

    def connection_count(self) -> int:
        return 2

    def group_states(self) -> list[int]:
        return [1, 0, 0, 3, 0]

    def member_count(self) -> int:
        return 7

    def heartbeat_answers(self) -> dict[int, int]:
        return {0: 40, int(ErrorCode.REBALANCE_IN_PROGRESS): 2}

    def fast_path_answers(self) -> tuple[int, int]:
        return 35, 4

    def disk_timings(self) -> tuple[Timings, Timings] | None:
        return (self.append, self.fsync) if self.disk else None


def scrape(source: Source) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MetricsCollector(source))
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(exposition(registry).decode())
        for sample in family.samples
    }


def test_the_collector_reads_its_source() -> None:
    source = Source()
    source.metrics.requests[JOIN] = 5
    source.metrics.requests[HB] = 1  # answered by a fault: added to the coordinator's
    source.metrics.error(JOIN, int(ErrorCode.MEMBER_ID_REQUIRED))
    source.metrics.handled(JOIN, 300_000, 5)
    samples = scrape(source)
    assert samples[("fastcoord_connections", ())] == 2
    assert samples[("fastcoord_groups", (("state", "Stable"),))] == 3
    assert samples[("fastcoord_groups", (("state", "Empty"),))] == 1
    assert samples[("fastcoord_groups", (("state", "Dead"),))] == 0
    assert samples[("fastcoord_members", ())] == 7
    assert samples[("fastcoord_requests_total", (("api", "Heartbeat"),))] == 43
    assert samples[("fastcoord_requests_total", (("api", "JoinGroup"),))] == 5
    errors = {
        (dict(labels)["api"], dict(labels)["error"]): value
        for (name, labels), value in samples.items()
        if name == "fastcoord_request_errors_total"
    }
    assert errors == {
        ("Heartbeat", "REBALANCE_IN_PROGRESS"): 2,
        ("JoinGroup", "MEMBER_ID_REQUIRED"): 1,
    }
    fast = (("api", "Heartbeat"),), (("api", "ConsumerGroupHeartbeat"),)
    assert [samples[("fastcoord_fast_path_answers_total", labels)] for labels in fast] == [35, 4]
    assert samples[("fastcoord_request_handling_seconds_count", (("api", "JoinGroup"),))] == 5
    assert samples[("fastcoord_log_append_seconds_bucket", (("le", "0.001"),))] == 0
    assert samples[("fastcoord_log_append_seconds_bucket", (("le", "0.0025"),))] == 1
    assert samples[("fastcoord_log_fsync_seconds_count", ())] == 1
    assert samples[("fastcoord_log_fsync_seconds_sum", ())] == 0.03


def test_nothing_kept_shows_empty_disk_histograms() -> None:
    samples = scrape(Source(disk=False))
    assert not [name for name, _ in samples if name.startswith("fastcoord_log_")]
    assert samples[("fastcoord_members", ())] == 7
