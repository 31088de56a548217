"""ApiVersions, Metadata and DescribeCluster: what the cluster looks like.

tokensvc has brokers and a controller but no topics: Metadata answers every
requested topic with UNKNOWN_TOPIC_OR_PARTITION. KIP-430's authorized
operations are computed only when the request asks for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokensvc.broker.handlers.base import ApiHandler
from tokensvc.core.errors import Errors
from tokensvc.protocol import SUPPORTED

if TYPE_CHECKING:
    from tokensvc.broker.context import RequestContext
    from tokensvc.broker.services import Services

UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_REQUESTED = -(2**31)  # Kafka's "authorized operations not requested"


def api_versions_body(error: Errors = Errors.NONE) -> dict:
    return {
        "ErrorCode": int(error),
        "ApiKeys": [
            {"ApiKey": int(key), "MinVersion": lo, "MaxVersion": hi}
            for key, (lo, hi) in sorted(SUPPORTED.items())
        ],
        "ThrottleTimeMs": 0,
    }


async def handle_api_versions(services: Services, ctx: RequestContext, body: dict) -> dict:
    return api_versions_body()


async def handle_metadata(services: Services, ctx: RequestContext, body: dict) -> dict:
    brokers = [
        {"NodeId": bid, "Host": host, "Port": port, "Rack": None}
        for bid, (host, port) in sorted(services.cluster.broker_endpoints(ctx.listener).items())
    ]
    topics = body.get("Topics")
    topic_results = [
        {
            "ErrorCode": UNKNOWN_TOPIC_OR_PARTITION,
            "Name": t.get("Name") if t.get("Name") is not None or ctx.api_version >= 12 else "",
            "TopicId": t.get("TopicId") or bytes(16),
            "IsInternal": False,
            "Partitions": [],
            "TopicAuthorizedOperations": NOT_REQUESTED,
        }
        for t in (topics or [])
    ]
    ops = NOT_REQUESTED
    if body.get("IncludeClusterAuthorizedOperations"):
        ops = services.authz.cluster_operations(ctx)
    return {
        "ThrottleTimeMs": 0,
        "Brokers": brokers,
        "ClusterId": services.cluster.cluster_id,
        "ControllerId": _controller(services),
        "Topics": topic_results,
        "ClusterAuthorizedOperations": ops,
    }


async def handle_describe_cluster(services: Services, ctx: RequestContext, body: dict) -> dict:
    brokers = [
        {"BrokerId": bid, "Host": host, "Port": port, "Rack": None}
        for bid, (host, port) in sorted(services.cluster.broker_endpoints(ctx.listener).items())
    ]
    ops = NOT_REQUESTED
    if body.get("IncludeClusterAuthorizedOperations"):
        ops = services.authz.cluster_operations(ctx)
    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": 0,
        "ErrorMessage": None,
        "EndpointType": 1,
        "ClusterId": services.cluster.cluster_id,
        "ControllerId": _controller(services),
        "Brokers": brokers,
        "ClusterAuthorizedOperations": ops,
    }


def _controller(services: Services) -> int:
    controller = services.cluster.controller_id()
    return controller if controller is not None else -1


def _metadata_error(version: int, error: Errors) -> dict:
    return {"ThrottleTimeMs": 0, "Brokers": [], "ClusterId": None, "ControllerId": -1, "Topics": []}


def _describe_cluster_error(version: int, error: Errors) -> dict:
    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": int(error),
        "ErrorMessage": None,
        "ClusterId": "",
        "ControllerId": -1,
        "Brokers": [],
        "ClusterAuthorizedOperations": NOT_REQUESTED,
    }


API_VERSIONS = ApiHandler("ApiVersions", handle_api_versions, lambda v, e: api_versions_body(e))
METADATA = ApiHandler("Metadata", handle_metadata, _metadata_error)
DESCRIBE_CLUSTER = ApiHandler("DescribeCluster", handle_describe_cluster, _describe_cluster_error)
