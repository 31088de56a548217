"""Request handlers, one module per API family, and the table that routes to them.

A handler is ``async def handle(broker, ctx, body) -> dict``; it raises
``KafkaError`` only where its module documents it, and otherwise answers
errors in the response body. ``error_body(version, error)`` builds the
response a request of that API gets when the broker fails it as a whole.
``write`` marks the APIs that only the controller applies (KIP-590): a
non-controller runs ``precheck`` locally, then forwards the request.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tokensvc.core.errors import Errors

if TYPE_CHECKING:
    from tokensvc.broker.broker import Broker
    from tokensvc.broker.context import RequestContext

Handle = Callable[["Broker", "RequestContext", dict], Awaitable[dict]]
ErrorBody = Callable[[int, Errors], dict]
Precheck = Callable[["Broker", "RequestContext", dict], "dict | None"]


@dataclass(frozen=True)
class ApiHandler:
    name: str
    handle: Handle
    error_body: ErrorBody
    write: bool = False
    precheck: Precheck | None = None


HANDLERS: dict[int, ApiHandler] = {}


def register(api_key: int, handler: ApiHandler) -> None:
    HANDLERS[api_key] = handler


def simple_error(error: Errors, **extra: Any) -> dict:
    return {"ErrorCode": int(error), "ThrottleTimeMs": 0, **extra}


def _load() -> None:
    # Importing the modules registers their handlers.
    from tokensvc.broker.handlers import (  # noqa: F401
        acls,
        cluster,
        envelope,
        sasl,
        scram_users,
        tokens,
    )


_load()
