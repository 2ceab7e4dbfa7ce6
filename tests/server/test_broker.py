"""The broker's every-topic Metadata cache answers exactly what building the answer would,
and topics named by id are answered, refused and looked up as Kafka does."""

from __future__ import annotations

import uuid

import pytest

from fastcoord.config import ServerConfig
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.framing import decode_response, encode_response
from fastcoord.protocol.messages import MetadataRequest, MetadataRequestTopic, MetadataResponse
from fastcoord.protocol.versions import SERVED
from fastcoord.server.broker import FIRST_METADATA_BY_ID, Broker, topic_id

METADATA = SERVED[ApiKey.METADATA]


def _broker(config: ServerConfig, port: int) -> Broker:
    """A lone server's broker, listening on `port`."""
    return Broker(config, config.cluster_for(port))


def every_topic(version: int) -> MetadataRequest:
    return MetadataRequest(topics=[] if version == 0 else None)


def test_cached_every_topic_answers_are_what_building_them_gives() -> None:
    broker = _broker(ServerConfig(topics=["orders:3", "payments:50"]), 9092)
    for round_ in range(2):  # built, then from the cache
        for version in range(METADATA.min_version, METADATA.max_version + 1):
            request = every_topic(version)
            want = encode_response(7 + round_, version, broker.metadata(request, version))
            assert broker.metadata_frame(request, version, 7 + round_) == want, version


def test_a_topic_created_by_a_request_is_in_the_next_every_topic_answer() -> None:
    broker = _broker(ServerConfig(topics=["orders:3"]), 9092)
    version = METADATA.max_version
    before = broker.metadata_frame(every_topic(version), version, 1)
    named = MetadataRequest(topics=[MetadataRequestTopic(name="fresh")])
    broker.metadata_frame(named, version, 2)  # auto.create.topics: created
    after = broker.metadata_frame(every_topic(version), version, 3)
    assert b"fresh" not in before and b"fresh" in after
    assert after == encode_response(3, version, broker.metadata(every_topic(version), version))


def test_cached_answers_follow_the_cluster() -> None:
    config = ServerConfig(topics=["orders:3"])
    broker = _broker(config, 0)
    version = METADATA.max_version
    broker.metadata_frame(every_topic(version), version, 1)
    broker.cluster = config.cluster_for(19092)
    frame = broker.metadata_frame(every_topic(version), version, 2)
    assert frame == encode_response(2, version, broker.metadata(every_topic(version), version))


# -- topics named by id ---------------------------------------------------------------------
# Kafka answers a topic id from Metadata v12 on, and refuses ids and null names in v10-11
# (KafkaApis.handleTopicMetadataRequest; MetadataRequest.json).


def by_id(*ids: uuid.UUID, allow_auto_topic_creation: bool = True) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequestTopic(topic_id=tid, name=None) for tid in ids],
        allow_auto_topic_creation=allow_auto_topic_creation,
    )


def answered(broker: Broker, request: MetadataRequest, version: int) -> MetadataResponse:
    """The answer as a client reads it: encoded by the server's path, then decoded."""
    frame = broker.metadata_frame(request, version, 5)
    correlation_id, response = decode_response(ApiKey.METADATA, version, frame[4:])
    assert correlation_id == 5
    assert isinstance(response, MetadataResponse)
    return response


def test_a_topic_named_by_id_is_answered_with_its_name_id_and_partitions() -> None:
    broker = _broker(ServerConfig(topics=["orders:3", "payments:50"]), 9092)
    for version in range(FIRST_METADATA_BY_ID, METADATA.max_version + 1):
        response = answered(broker, by_id(topic_id("orders")), version)
        [topic] = response.topics
        assert topic.error_code == ErrorCode.NONE
        assert (topic.name, topic.topic_id) == ("orders", topic_id("orders"))
        assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
        assert all(p.error_code == ErrorCode.NONE for p in topic.partitions)
        assert [b.node_id for b in response.brokers] == [broker.cluster.node_id]


def test_a_topic_named_by_id_is_answered_as_when_named_by_name() -> None:
    broker = _broker(ServerConfig(topics=["orders:3"]), 9092)
    version = FIRST_METADATA_BY_ID
    by_name = MetadataRequest(topics=[MetadataRequestTopic(name="orders")])
    assert broker.metadata(by_id(topic_id("orders")), version) == broker.metadata(by_name, version)


def test_an_unknown_id_is_unknown_topic_id_with_no_name_and_the_id_echoed() -> None:
    broker = _broker(ServerConfig(topics=["orders:3"]), 9092)
    unknown = uuid.uuid4()
    response = answered(broker, by_id(unknown, topic_id("orders")), FIRST_METADATA_BY_ID)
    assert [(t.error_code, t.name, t.topic_id, len(t.partitions)) for t in response.topics] == [
        (ErrorCode.UNKNOWN_TOPIC_ID, None, unknown, 0),
        (ErrorCode.NONE, "orders", topic_id("orders"), 3),
    ]
    assert ErrorCode.UNKNOWN_TOPIC_ID == 100


def test_each_id_is_answered_once() -> None:
    broker = _broker(ServerConfig(topics=["orders:3"]), 9092)
    unknown = uuid.uuid4()
    request = by_id(topic_id("orders"), unknown, topic_id("orders"), unknown)
    response = broker.metadata(request, FIRST_METADATA_BY_ID)
    assert [t.topic_id for t in response.topics] == [topic_id("orders"), unknown]


def test_a_request_by_id_creates_nothing_even_when_every_name_would_be_created() -> None:
    config = ServerConfig(topics=["orders:3"], auto_create_topics="always")
    broker = _broker(config, 9092)
    # The id of a topic a request by name would create: by id it is only unknown.
    fresh = topic_id("fresh")
    response = broker.metadata(by_id(fresh), FIRST_METADATA_BY_ID)
    assert [t.error_code for t in response.topics] == [ErrorCode.UNKNOWN_TOPIC_ID]
    assert broker.topics == {"orders": 3}
    assert broker.topic_by_id(fresh) is None and broker.topic_by_name("fresh") is None


def test_a_request_naming_topics_by_id_and_by_name_is_answered_by_id_alone() -> None:
    broker = _broker(ServerConfig(topics=["orders:3", "payments:5"]), 9092)
    request = MetadataRequest(
        topics=[
            MetadataRequestTopic(topic_id=topic_id("orders"), name=None),
            MetadataRequestTopic(name="payments"),
            MetadataRequestTopic(name="fresh"),  # would be created if the request were by name
            MetadataRequestTopic(topic_id=topic_id("payments"), name="ignored"),
        ]
    )
    response = broker.metadata(request, FIRST_METADATA_BY_ID)
    assert [(t.error_code, t.name) for t in response.topics] == [
        (ErrorCode.NONE, "orders"),
        (ErrorCode.NONE, "payments"),
    ]
    assert broker.topics == {"orders": 3, "payments": 5}


@pytest.mark.parametrize("version", range(10, FIRST_METADATA_BY_ID))
def test_versions_before_12_refuse_topic_ids_and_null_names(version: int) -> None:
    broker = _broker(ServerConfig(topics=["orders:3"], auto_create_topics="always"), 9092)
    tid = topic_id("orders")
    requests = [
        by_id(tid),
        MetadataRequest(topics=[MetadataRequestTopic(name=None)]),
        MetadataRequest(
            topics=[MetadataRequestTopic(name="fresh"), MetadataRequestTopic(topic_id=tid)]
        ),
    ]
    for request in requests:
        response = answered(broker, request, version)
        # Kafka's MetadataRequest.getErrorResponse: every topic named, null names as "",
        # ids echoed, no partitions and no brokers.
        assert response.brokers == []
        assert [(t.error_code, t.partitions) for t in response.topics] == [
            (ErrorCode.INVALID_REQUEST, [])
        ] * len(request.topics or [])
        assert [(t.name, t.topic_id) for t in response.topics] == [
            (t.name or "", t.topic_id) for t in request.topics or []
        ]
    assert broker.topics == {"orders": 3}


def test_requests_by_id_leave_the_every_topic_cache_as_it_was() -> None:
    broker = _broker(ServerConfig(topics=["orders:3", "payments:50"]), 9092)
    version = METADATA.max_version
    before = broker.metadata_frame(every_topic(version), version, 1)
    broker.metadata_frame(by_id(topic_id("orders"), uuid.uuid4()), version, 2)
    broker.metadata_frame(by_id(topic_id("fresh")), version, 3)
    after = broker.metadata_frame(every_topic(version), version, 1)
    assert after == before
    assert after == encode_response(1, version, broker.metadata(every_topic(version), version))


def test_topic_by_name_and_by_id_cover_declared_and_created_topics() -> None:
    broker = _broker(ServerConfig(topics=["orders:3"], num_partitions=4), 9092)
    assert broker.topic_by_name("orders") == (topic_id("orders"), 3)
    assert broker.topic_by_id(topic_id("orders")) == ("orders", 3)
    # Not there, and the lookups do not create it, whatever auto.create.topics says.
    assert broker.topic_by_name("fresh") is None
    assert broker.topic_by_id(topic_id("fresh")) is None
    assert "fresh" not in broker.topics
    named = MetadataRequest(topics=[MetadataRequestTopic(name="fresh")])
    broker.metadata(named, METADATA.max_version)  # auto.create.topics: created
    assert broker.topic_by_name("fresh") == (topic_id("fresh"), 4)
    assert broker.topic_by_id(topic_id("fresh")) == ("fresh", 4)
    assert broker.topic_by_id(uuid.uuid4()) is None


def test_a_topic_created_by_name_is_then_answered_by_id() -> None:
    broker = _broker(ServerConfig(topics=["orders:3"], num_partitions=2), 9092)
    fresh = topic_id("fresh")
    [before] = broker.metadata(by_id(fresh), FIRST_METADATA_BY_ID).topics
    assert before.error_code == ErrorCode.UNKNOWN_TOPIC_ID
    broker.topic_partitions("fresh", create=True)
    [topic] = broker.metadata(by_id(fresh), FIRST_METADATA_BY_ID).topics
    assert (topic.error_code, topic.name, len(topic.partitions)) == (ErrorCode.NONE, "fresh", 2)
