"""ApiVersions: request and response, served versions 0-4.

Fields and version ranges follow Kafka's ApiVersionsRequest.json and ApiVersionsResponse.json
(clients/src/main/resources/common/message/); fields of versions fastcoord does not serve
are left out.
"""

from __future__ import annotations

from typing import Annotated

from fastcoord.protocol.api_keys import ApiKey
from fastcoord.protocol.schema import (
    Bool,
    Int16,
    Int32,
    Int64,
    Request,
    Response,
    String,
    Struct,
    V,
)


class ApiVersionsRequest(Request):
    API_KEY = ApiKey.API_VERSIONS
    FLEXIBLE = 3

    client_software_name: Annotated[String, V("3+")] = ""
    client_software_version: Annotated[String, V("3+")] = ""


class ApiVersion(Struct):
    api_key: Int16 = 0
    min_version: Int16 = 0
    max_version: Int16 = 0


class SupportedFeatureKey(Struct):
    name: Annotated[String, V("3+")] = ""
    min_version: Annotated[Int16, V("3+")] = 0
    max_version: Annotated[Int16, V("3+")] = 0


class FinalizedFeatureKey(Struct):
    name: Annotated[String, V("3+")] = ""
    max_version_level: Annotated[Int16, V("3+")] = 0
    min_version_level: Annotated[Int16, V("3+")] = 0


class ApiVersionsResponse(Response):
    API_KEY = ApiKey.API_VERSIONS
    FLEXIBLE = 3

    error_code: Int16 = 0
    api_keys: list[ApiVersion] = []
    throttle_time_ms: Annotated[Int32, V("1+")] = 0
    supported_features: Annotated[list[SupportedFeatureKey], V("3+", tag=0, tagged="3+")] = []
    finalized_features_epoch: Annotated[Int64, V("3+", tag=1, tagged="3+")] = -1
    finalized_features: Annotated[list[FinalizedFeatureKey], V("3+", tag=2, tagged="3+")] = []
    zk_migration_ready: Annotated[Bool, V("3+", tag=3, tagged="3+")] = False
