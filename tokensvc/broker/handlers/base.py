"""What every request handler is: :class:`ApiHandler`, and the helpers they share.

A handler is ``async def handle(services, ctx, body) -> dict``: it sees the narrow
:class:`tokensvc.broker.services.Services`, never the broker object or ZooKeeper. It
raises ``KafkaError`` only where its module documents it, and otherwise answers errors
in the response body. ``error_body(version, error)`` builds the response a request of
that API gets when the broker fails it as a whole; callers that hold the request use
:meth:`ApiHandler.error_for`, which for an API whose response has per-item results and no
top-level error code (CreateAcls, DeleteAcls, AlterUserScramCredentials) gives every item
of the request the error (``item_errors``): an empty result list reads as success to
every client. ``write`` marks the APIs only the
controller applies (KIP-590): a non-controller runs ``precheck`` locally, then forwards.
``replay(services, ctx, outcome)`` rebuilds the answer of a write from the outcome the
controller recorded with its request key (exactly-once: a retry gets the first answer).

Must not: import ``zk`` or the broker module.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tokensvc.core.errors import Errors

if TYPE_CHECKING:
    from tokensvc.broker.context import RequestContext
    from tokensvc.broker.services import Services

Handle = Callable[["Services", "RequestContext", dict], Awaitable[dict]]
ErrorBody = Callable[[int, Errors], dict]
ItemErrors = Callable[[int, Errors, dict], dict]
Precheck = Callable[["Services", "RequestContext", dict], "dict | None"]
Replay = Callable[["Services", "RequestContext", Any], Awaitable[dict]]


@dataclass(frozen=True)
class ApiHandler:
    name: str
    handle: Handle
    error_body: ErrorBody
    write: bool = False
    precheck: Precheck | None = None
    replay: Replay | None = None
    item_errors: ItemErrors | None = None

    def error_for(self, version: int, error: Errors, body: dict | None) -> dict:
        """The answer to a request (decoded ``body``, or None) failed as a whole."""
        if body is not None and self.item_errors is not None:
            return self.item_errors(version, error, body)
        return self.error_body(version, error)


def simple_error(error: Errors, **extra: Any) -> dict:
    return {"ErrorCode": int(error), "ThrottleTimeMs": 0, **extra}


async def replay_recorded(services: Services, ctx: RequestContext, outcome: Any) -> dict:
    """The replay of a write whose recorded outcome is its whole (JSON) response body."""
    return dict(outcome)
