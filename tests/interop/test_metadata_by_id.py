"""Metadata requests that name topics by id, against the real `fastcoord serve`.

The consumer group protocol hands consumers their assignments as topic ids, and a consumer
then asks Metadata for those ids. kafka-python 3.0's KafkaAdminClient.describe_topics()
takes ids and sends them the same way (Metadata v12, null names), so it checks the answer
as a real client reads it. Kafka's refusal of ids before v12 is beyond what any client
sends, so fastcoord's blocking connection frames those requests itself, over a socket.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import MetadataRequest, MetadataRequestTopic, MetadataResponse
from fastcoord.server.broker import FIRST_METADATA_BY_ID, topic_id
from fastcoord.testing import ServerProcess, fastcoord_server

DECLARED = {"orders": 3, "payments": 5}
TIMEOUT_S = 15


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    topics = [arg for name, count in DECLARED.items() for arg in ("--topic", f"{name}:{count}")]
    # always: any topic a request names by name is created; none named by id may be.
    with fastcoord_server(tmp_path, "--auto-create-topics", "always", *topics) as running:
        yield running
    assert "closing connection" not in running.log()


def by_id(*ids: uuid.UUID) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequestTopic(topic_id=tid, name=None) for tid in ids],
        allow_auto_topic_creation=True,
    )


def metadata(server: ServerProcess, request: MetadataRequest, version: int) -> MetadataResponse:
    with server.connect(TIMEOUT_S) as conn:
        response = conn.request(request, version)
    assert isinstance(response, MetadataResponse)
    return response


def listed(server: ServerProcess) -> dict[str, int]:
    response = metadata(server, MetadataRequest(topics=None), FIRST_METADATA_BY_ID)
    return {t.name or "": len(t.partitions) for t in response.topics}


def test_kafka_python_describes_topics_by_id(server: ServerProcess) -> None:
    unknown = uuid.uuid4()
    admin = KafkaAdminClient(
        bootstrap_servers=server.bootstrap, client_id="by-id", request_timeout_ms=TIMEOUT_S * 1000
    )
    try:
        described = admin.describe_topics([topic_id("payments"), unknown])
        names = admin.list_topics()
    finally:
        admin.close()
    found = {uuid.UUID(str(t["topic_id"])): t for t in described}
    assert set(found) == {topic_id("payments"), unknown}
    payments = found[topic_id("payments")]
    assert (payments["error_code"], payments["name"]) == (ErrorCode.NONE, "payments")
    assert [p["partition_index"] for p in payments["partitions"]] == list(range(5))
    missing = found[unknown]
    assert (missing["error_code"], missing["name"], missing["partitions"]) == (
        ErrorCode.UNKNOWN_TOPIC_ID,
        None,
        [],
    )
    assert sorted(names) == sorted(DECLARED)


def test_a_v12_request_by_id_answers_known_ids_and_creates_nothing(
    server: ServerProcess,
) -> None:
    with server.connect(TIMEOUT_S) as conn:
        conn.api_versions()
        assert conn.version(ApiKey.METADATA, FIRST_METADATA_BY_ID) == FIRST_METADATA_BY_ID
    unknown = topic_id("fresh")  # the id a request by name would create it under
    response = metadata(server, by_id(topic_id("orders"), unknown), FIRST_METADATA_BY_ID)
    assert [(t.error_code, t.name, t.topic_id, len(t.partitions)) for t in response.topics] == [
        (ErrorCode.NONE, "orders", topic_id("orders"), 3),
        (ErrorCode.UNKNOWN_TOPIC_ID, None, unknown, 0),
    ]
    assert [p.leader_id for p in response.topics[0].partitions] == [response.controller_id] * 3
    assert listed(server) == DECLARED


@pytest.mark.parametrize("version", range(10, FIRST_METADATA_BY_ID))
def test_versions_10_and_11_refuse_topic_ids(server: ServerProcess, version: int) -> None:
    request = by_id(topic_id("orders"))
    with server.connect(TIMEOUT_S) as conn:
        refused = conn.request(request, version)
        assert isinstance(refused, MetadataResponse)
        assert [(t.error_code, t.name, t.topic_id) for t in refused.topics] == [
            (ErrorCode.INVALID_REQUEST, "", topic_id("orders"))
        ]
        # An answer, not a closed connection: the same connection is served on.
        named = MetadataRequest(topics=[MetadataRequestTopic(name="orders")])
        again = conn.request(named, version)
        assert isinstance(again, MetadataResponse)
        assert [(t.error_code, t.name) for t in again.topics] == [(ErrorCode.NONE, "orders")]
    assert listed(server) == DECLARED
