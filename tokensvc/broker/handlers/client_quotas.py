"""DescribeClientQuotas (KIP-546): the quotas Kafka keeps in ZooKeeper, described.

Needs DESCRIBE_CONFIGS on the cluster, as in Kafka. The answer is Kafka 3.9's
(:mod:`tokensvc.core.quotas`) over the config znodes, read from ZooKeeper when asked --
quotas are Kafka's, so no cache follows them -- in a worker thread: listing every user's
znode must not hold the event loop. tokensvc serves no AlterClientQuotas: quotas are set
on a Kafka broker.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tokensvc.authz.acl import CLUSTER_NAME, AclOperation, ResourceType
from tokensvc.broker.handlers.base import ApiHandler
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.core.quotas import describe, quota_filter

if TYPE_CHECKING:
    from tokensvc.broker.context import RequestContext
    from tokensvc.broker.services import Services



def _error(version: int, error: Errors, message: str | None = None) -> dict:
    # Kafka's error response: no entries (null), the message when there is one.
    return {"ThrottleTimeMs": 0, "ErrorCode": int(error), "ErrorMessage": message,
            "Entries": None}


async def handle_describe(services: Services, ctx: RequestContext, body: dict) -> dict:
    if not services.authz.authorize(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER,
                                    CLUSTER_NAME):
        return _error(ctx.api_version, Errors.CLUSTER_AUTHORIZATION_FAILED)
    configs = services.quotas
    if configs is None:
        return _error(ctx.api_version, Errors.UNSUPPORTED_VERSION,
                      "this broker has no quota store")
    try:
        flt = quota_filter(body.get("Components") or [], bool(body.get("Strict")))
        found = await asyncio.get_running_loop().run_in_executor(None, describe, flt, configs)
    except KafkaError as exc:  # a filter Kafka refuses, a znode unreadable, ZooKeeper away
        return _error(ctx.api_version, exc.error, exc.message)
    entries = [
        {
            "Entity": [{"EntityType": kind, "EntityName": name} for kind, name in entity],
            "Values": [{"Key": key, "Value": value} for key, value in sorted(values.items())],
        }
        for entity, values in sorted(found.items(), key=lambda kv: _order(kv[0]))
    ]
    return {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "Entries": entries}


def _order(entity: tuple[tuple[str, str | None], ...]) -> tuple:
    # Stable answers: by entity types, then names (the default first).
    return tuple((kind, name is not None, name or "") for kind, name in entity)


DESCRIBE_CLIENT_QUOTAS = ApiHandler("DescribeClientQuotas", handle_describe, _error)
