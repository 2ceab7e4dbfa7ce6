"""The text format written for /metrics: what prometheus-client's own writer would say."""

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

from fastcoord.server.metrics import exposition


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
