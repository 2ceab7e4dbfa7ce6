"""Records with real clients: fastcoord keeps none, and says so in the protocol's own terms.

A consumer's Fetch reaches the server and is answered with no records (librdkafka builds
its Fetch only for a broker that also serves Produce v3, so Produce is served to refuse
it); a producer hears that its Produce is refused; an acks=0 Produce, which Kafka never
answers, closes its connection and nothing else.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from fastcoord.client.admin import AdminClient
from fastcoord.client.blocking import Connection
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from fastcoord.testing import ServerProcess, wait_for
from tests.interop.confluent_members import confluent
from tests.interop.groups import TOPIC, group_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with group_server(tmp_path, "--admin-port", "0") as running:
        yield running


def requests_of(server: ServerProcess, api: str) -> float:
    text = AdminClient(server.admin).metrics_text()
    match = re.search(rf'^fastcoord_requests_total{{api="{api}"}} (\S+)$', text, re.M)
    return float(match.group(1)) if match else 0.0


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_librdkafka_fetches_its_assigned_partitions(server: ServerProcess, protocol: str) -> None:
    # Without Produce in ApiVersions, librdkafka fails each Fetch before sending it (and
    # retries at once, a core's worth): the server would count none.
    consumer = confluent(server.bootstrap, f"fetching-{protocol}", "fetcher", protocol, 6000)
    try:

        def fetched() -> bool:
            consumer.poll(0.1)
            return bool(consumer.assignment()) and requests_of(server, "Fetch") > 0

        wait_for("a Fetch from the assigned consumer", fetched, 30)
        message = consumer.poll(0.5)
        assert message is None or message.error() is not None  # no records, ever
    finally:
        consumer.close()


def test_a_producer_hears_that_its_produce_is_refused(server: ServerProcess) -> None:
    reports: list[Any] = []
    producer = Producer({"bootstrap.servers": server.bootstrap, "message.timeout.ms": 20_000})
    producer.produce(TOPIC, b"value", partition=0, on_delivery=lambda err, _: reports.append(err))
    assert producer.flush(30) == 0
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == KafkaError.INVALID_REQUEST, reports[0]
    assert requests_of(server, "Produce") >= 1


def test_a_produce_names_why_on_every_partition(server: ServerProcess) -> None:
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            TopicProduceData(TOPIC, [PartitionProduceData(0, b""), PartitionProduceData(5)]),
            TopicProduceData("not-a-topic", [PartitionProduceData(1, b"")]),
        ],
    )
    with Connection(server.host, server.port) as c:
        c.api_versions()
        answer = c.request(request, c.version(ApiKey.PRODUCE, 8))
    assert isinstance(answer, ProduceResponse)
    got = [
        (t.name, p.index, p.error_code, p.base_offset, p.error_message)
        for t in answer.responses
        for p in t.partition_responses
    ]
    why = "fastcoord is a group coordinator and keeps no records"
    refused = ErrorCode.INVALID_REQUEST
    assert got == [
        (TOPIC, 0, refused, -1, why),
        (TOPIC, 5, refused, -1, why),
        ("not-a-topic", 1, refused, -1, why),
    ]


def test_an_acks_0_produce_closes_its_connection_alone(server: ServerProcess) -> None:
    request = ProduceRequest(
        acks=0, timeout_ms=1000, topic_data=[TopicProduceData(TOPIC, [PartitionProduceData(0)])]
    )
    with Connection(server.host, server.port) as other, Connection(server.host, server.port) as c:
        c.api_versions()
        c.send(request, 8)
        c.sock.settimeout(10)
        assert c.sock.recv(1) == b""  # closed, with no answer
        assert other.api_versions()[ApiKey.PRODUCE] == (3, 8)  # the server carries on
    deadline = time.monotonic() + 10
    while "a Produce with acks=0" not in server.log():
        assert time.monotonic() < deadline, server.log()[-2000:]
        time.sleep(0.02)
    server.expect("closing connection from .*: a Produce with acks=0")
