"""The broker's every-topic Metadata cache answers exactly what building the answer would."""

from __future__ import annotations

from fastcoord.config import ServerConfig
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.framing import encode_response
from fastcoord.protocol.messages import MetadataRequest, MetadataRequestTopic
from fastcoord.protocol.versions import SERVED
from fastcoord.server.broker import Broker

METADATA = SERVED[ApiKey.METADATA]


def every_topic(version: int) -> MetadataRequest:
    return MetadataRequest(topics=[] if version == 0 else None)


def test_cached_every_topic_answers_are_what_building_them_gives() -> None:
    broker = Broker(ServerConfig(topics=["orders:3", "payments:50"]), 9092)
    for round_ in range(2):  # built, then from the cache
        for version in range(METADATA.min_version, METADATA.max_version + 1):
            request = every_topic(version)
            want = encode_response(7 + round_, version, broker.metadata(request, version))
            assert broker.metadata_frame(request, version, 7 + round_) == want, version


def test_a_topic_created_by_a_request_is_in_the_next_every_topic_answer() -> None:
    broker = Broker(ServerConfig(topics=["orders:3"]), 9092)
    version = METADATA.max_version
    before = broker.metadata_frame(every_topic(version), version, 1)
    named = MetadataRequest(topics=[MetadataRequestTopic(name="fresh")])
    broker.metadata_frame(named, version, 2)  # auto.create.topics: created
    after = broker.metadata_frame(every_topic(version), version, 3)
    assert b"fresh" not in before and b"fresh" in after
    assert after == encode_response(3, version, broker.metadata(every_topic(version), version))


def test_the_port_in_cached_answers_follows_the_listener() -> None:
    broker = Broker(ServerConfig(topics=["orders:3"]), 0)
    version = METADATA.max_version
    broker.metadata_frame(every_topic(version), version, 1)
    broker.port = 19092  # learnt once the listener is bound
    frame = broker.metadata_frame(every_topic(version), version, 2)
    assert frame == encode_response(2, version, broker.metadata(every_topic(version), version))
