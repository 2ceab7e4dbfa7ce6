"""The durable log of coordinator records: Kafka's __consumer_offsets, in fastcoord's own framing."""  # noqa: E501
