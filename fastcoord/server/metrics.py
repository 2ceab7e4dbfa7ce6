"""What `GET /metrics` shows: counters kept as plain integers, read when scraped.

A request pays an integer addition and a bucket count here, never a lock: the server's
thread alone writes these (the appender thread writes its own two histograms), and
`MetricsCollector.collect` turns them into Prometheus families when a scrape asks, on the
same thread, together with what is read from the coordinator then (groups by state,
members, connections). Heartbeats answered from the member table, on any path, are counted
by the table; the coordinator counts those it answers itself; the rest is counted here.

The collector sees the server only as a `MetricsSource`: what a scrape reads, each part
named for what it is, so that this module does not import the server and a test can stand
anything with those parts in its place.

Labels carry API names, error names, group states and fault kinds: never a group or member
id, whose number a client controls.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from fastcoord.core.group import STATE_NUMBERS
from fastcoord.core.result import Event
from fastcoord.protocol.api_keys import ApiKey, api_name
from fastcoord.protocol.errors import error_name
from fastcoord.timings import REBALANCE_BUCKETS_S, REQUEST_BUCKETS_S, Timings

API_KEYS = 128  # above every API key the codec decodes
HEARTBEAT = int(ApiKey.HEARTBEAT)
CONSUMER_GROUP_HEARTBEAT = int(ApiKey.CONSUMER_GROUP_HEARTBEAT)


class Metrics:
    """The server's counters. `requests` and `handling` are by API key."""

    def __init__(self) -> None:
        # Requests handled by the server's Python path, or answered by a fault; heartbeats
        # that reach the coordinator are counted by it (and the member table) instead.
        self.requests = [0] * API_KEYS
        self.errors: dict[tuple[int, int], int] = {}  # (api, code) -> answers
        self.handling: list[Timings | None] = [None] * API_KEYS
        self.rebalances = 0
        self.rebalance_timings = Timings(REBALANCE_BUCKETS_S)
        self.expirations = 0
        self.offsets_committed = 0
        self.faults: dict[tuple[str, str], int] = {}  # (api, kind) -> injected
        self.admin_timings = Timings(REQUEST_BUCKETS_S)  # the admin port's requests

    def handled(self, api: int, ns: int, times: int = 1) -> None:
        """`times` requests of `api`, `ns` nanoseconds of handling each."""
        timings = self.handling[api]
        if timings is None:
            timings = self.handling[api] = Timings(REQUEST_BUCKETS_S)
        timings.observe_ns(ns, times)

    def table_answered(self, answered: int, consumer: int, ns: int) -> None:
        """A run the member table answered alone: `answered` heartbeats in `ns`, `consumer`
        of them ConsumerGroupHeartbeats (counted here; the table counts the Heartbeats by
        answer, which the scrape reads)."""
        if answered <= 0:
            return
        each = ns // answered
        if answered > consumer:
            self.handled(HEARTBEAT, each, answered - consumer)
        if consumer:
            self.requests[CONSUMER_GROUP_HEARTBEAT] += consumer
            self.handled(CONSUMER_GROUP_HEARTBEAT, each, consumer)

    def error(self, api: int, code: int) -> None:
        key = (api, code)
        self.errors[key] = self.errors.get(key, 0) + 1

    def events(self, events: Iterable[Event]) -> None:
        for event in events:
            kind = event.kind
            if kind == "offsets_committed":
                self.offsets_committed += event.members
            elif kind == "rebalance_completed":
                self.rebalances += 1
                self.rebalance_timings.observe_ns(event.duration_ms * 1_000_000)
            elif kind == "member_expired":
                self.expirations += 1

    def fault(self, api: int, kind: str) -> None:
        key = (api_name(api), kind)
        self.faults[key] = self.faults.get(key, 0) + 1


class MetricsSource(Protocol):
    """What a scrape reads of the server: its counters, and what the coordinator, the
    connections and the offsets log hold at that moment. Read once a scrape, never on a
    request's path."""

    metrics: Metrics

    def connection_count(self) -> int:
        """Open client connections."""

    def group_states(self) -> list[int]:
        """Classic groups in use, by state number (STATE_NUMBERS). Counted from the member
        table, which keeps every group's state and every member in compiled arrays: a walk
        over 100k groups in Python would stall the loop."""

    def member_count(self) -> int:
        """Members of every group."""

    def heartbeat_answers(self) -> dict[int, int]:
        """{error code: heartbeats answered with it}, every path counted once."""

    def fast_path_answers(self) -> tuple[int, int]:
        """Heartbeats and ConsumerGroupHeartbeats the member table answered alone."""

    def disk_timings(self) -> tuple[Timings, Timings] | None:
        """The offsets log's append and fsync histograms; None when nothing is kept."""


class MetricsCollector(Collector):
    """The families of one server, built at scrape time."""

    def __init__(self, source: MetricsSource) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        source = self.source
        metrics = source.metrics
        yield _gauge("fastcoord_connections", "open client connections", source.connection_count())
        counts = source.group_states()
        groups = GaugeMetricFamily("fastcoord_groups", "groups by state", labels=["state"])
        for state, number in STATE_NUMBERS.items():
            groups.add_metric([str(state)], counts[number])
        yield groups
        yield _gauge("fastcoord_members", "members of every group", source.member_count())

        requests = list(metrics.requests)
        errors = dict(metrics.errors)
        for code, count in source.heartbeat_answers().items():
            requests[HEARTBEAT] += count
            if code and count:
                errors[(HEARTBEAT, code)] = errors.get((HEARTBEAT, code), 0) + count
        family = CounterMetricFamily(
            "fastcoord_requests", "requests answered, by API", labels=["api"]
        )
        for api, count in enumerate(requests):
            if count:
                family.add_metric([api_name(api)], count)
        yield family
        family = CounterMetricFamily(
            "fastcoord_fast_path_answers",
            "heartbeats the member table answered alone (the compiled fast path), by API",
            labels=["api"],
        )
        heartbeats, consumer_heartbeats = source.fast_path_answers()
        family.add_metric([api_name(HEARTBEAT)], heartbeats)
        family.add_metric([api_name(CONSUMER_GROUP_HEARTBEAT)], consumer_heartbeats)
        yield family
        family = CounterMetricFamily(
            "fastcoord_request_errors",
            "answers with an error code (the top-level one), by API and error",
            labels=["api", "error"],
        )
        for (api, code), count in sorted(errors.items()):
            family.add_metric([api_name(api), error_name(code)], count)
        yield family
        handling = HistogramMetricFamily(
            "fastcoord_request_handling_seconds",
            "the server's time handling a request (not its wait for a rebalance or the disk)",
            labels=["api"],
        )
        for api, timings in enumerate(metrics.handling):
            if timings is not None:
                _add_histogram(handling, [api_name(api)], timings)
        yield handling

        yield _counter("fastcoord_rebalances", "rebalances completed", metrics.rebalances)
        rebalance = HistogramMetricFamily(
            "fastcoord_rebalance_duration_seconds",
            "from PreparingRebalance to the rebalance's completion",
        )
        _add_histogram(rebalance, [], metrics.rebalance_timings)
        yield rebalance
        yield _counter(
            "fastcoord_member_expirations", "members whose session expired", metrics.expirations
        )
        yield _counter(
            "fastcoord_offset_commits", "offsets committed (partitions)", metrics.offsets_committed
        )
        append = HistogramMetricFamily(
            "fastcoord_log_append_seconds", "writing a batch to the offsets log"
        )
        fsync = HistogramMetricFamily(
            "fastcoord_log_fsync_seconds", "syncing a batch of the offsets log"
        )
        disk = source.disk_timings()
        if disk is not None:
            _add_histogram(append, [], disk[0])
            _add_histogram(fsync, [], disk[1])
        yield append
        yield fsync
        family = CounterMetricFamily(
            "fastcoord_faults_injected",
            "requests that met a fault rule, by API and kind",
            labels=["api", "kind"],
        )
        for (api_label, kind), count in sorted(metrics.faults.items()):
            family.add_metric([api_label, kind], count)
        yield family
        admin = HistogramMetricFamily(
            "fastcoord_admin_handling_seconds",
            "the server's time answering the admin port (scrapes included): taken from the "
            "Kafka clients",
        )
        _add_histogram(admin, [], metrics.admin_timings)
        yield admin


# -- the text format ---------------------------------------------------------------------------

_TYPES = {"counter": "counter", "gauge": "gauge", "histogram": "histogram", "summary": "summary"}


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry's families in Prometheus' text format (0.0.4), as prometheus-client's
    generate_latest writes them for the kinds used here, in a third of its time (0.5
    against 1.4 ms for the 330 samples of a busy server's scrape): a scrape runs on the
    server's loop, and every millisecond of it delays the Kafka requests that arrive
    meanwhile."""
    out: list[str] = []
    for family in registry.collect():
        name = family.name + "_total" if family.type == "counter" else family.name
        doc = family.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {_TYPES.get(family.type, 'untyped')}\n")
        for sample in family.samples:
            if sample.labels:
                labels = ",".join(f'{k}="{_label(v)}"' for k, v in sorted(sample.labels.items()))
                out.append(f"{sample.name}{{{labels}}} {_value(sample.value)}\n")
            else:
                out.append(f"{sample.name} {_value(sample.value)}\n")
    return "".join(out).encode()


def _label(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _value(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if value != value:
        return "NaN"
    return repr(float(value))


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def _add_histogram(family: HistogramMetricFamily, labels: list[str], timings: Timings) -> None:
    buckets = [(le, float(count)) for le, count in timings.cumulative()]
    family.add_metric(labels, buckets, timings.sum_ns / 1e9)
