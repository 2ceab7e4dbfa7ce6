"""SaslAuthenticate: request and response, served versions 0-2.

Fields and version ranges follow Kafka's SaslAuthenticateRequest.json and
SaslAuthenticateResponse.json (clients/src/main/resources/common/message/). Each carries one
SASL token of the exchange a SaslHandshake v1 began; v1 adds the session lifetime that tells
the client when to re-authenticate (KIP-368), v2 is the first flexible version.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import Bytes, Int16, Int64, Request, Response, String, V


class SaslAuthenticateRequest(Request):
    API_KEY = ApiKey.SASL_AUTHENTICATE
    FLEXIBLE = 2

    auth_bytes: Bytes = b""


class SaslAuthenticateResponse(Response):
    API_KEY = ApiKey.SASL_AUTHENTICATE
    FLEXIBLE = 2

    error_code: Int16 = 0
    error_message: Annotated[String | None, V("0+", nullable="0+")] = None
    auth_bytes: Bytes = b""
    session_lifetime_ms: Annotated[Int64, V("1+")] = 0
