"""SaslHandshake: request and response, served versions 0-1.

Fields and version ranges follow Kafka's SaslHandshakeRequest.json and
SaslHandshakeResponse.json (clients/src/main/resources/common/message/). The message is never
flexible: Kafka cannot add a flexible version without breaking clients of 2.4 and older,
which negotiate it wrongly. Version 1 differs from version 0 only in what follows it: after
v1 each SASL token travels in a SaslAuthenticate request, after v0 as a bare size-prefixed
frame.
"""

from __future__ import annotations

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import Int16, Request, Response, String


class SaslHandshakeRequest(Request):
    API_KEY = ApiKey.SASL_HANDSHAKE
    FLEXIBLE = None

    mechanism: String = ""


class SaslHandshakeResponse(Response):
    API_KEY = ApiKey.SASL_HANDSHAKE
    FLEXIBLE = None

    error_code: Int16 = 0
    mechanisms: list[String] = []
