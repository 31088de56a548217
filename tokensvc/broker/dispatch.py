"""Where a decoded request goes: the one callable the socket server hands every request to.

Owns :class:`Dispatcher`: it routes through the ApiKey -> handler table
(:data:`tokensvc.broker.handlers.HANDLERS`); a write goes to the controller's
exactly-once ledger (:mod:`tokensvc.broker.writes.ledger`) on the controller, or to the
forwarder (:mod:`tokensvc.broker.writes.forwarding`) on a non-controller, once the
broker forwards (before that, NOT_CONTROLLER: the client retries).

Bounded staleness (issue #20): every request of an authenticated connection (a token's
or a user's), except on the inter-broker listener, is held until the
:class:`~tokensvc.broker.gates.freshness.FreshnessGate` confirms the view of ZooKeeper
current; a request whose connection was revoked meanwhile is not served.

One clock (issue #36): while the :class:`~tokensvc.broker.gates.clockskew.ClockGate`
does not trust the clock, token writes are refused here on a non-controller and in the
ledger on the controller (:func:`clock_refusal`), audited with reason ``clock_skew``.
Beside Kafka, once a KRaft migration has started, token writes are refused the same way
(POLICY_VIOLATION, reason ``kraft_migration``).

Must not: read ZooKeeper or touch sockets; it knows the parts it was built with, never
the broker object.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tokensvc.broker.context import RequestContext, WriteTicket, client_request_key
from tokensvc.broker.gates.clockskew import ClockGate
from tokensvc.broker.gates.freshness import FreshnessGate, StaleView
from tokensvc.broker.handlers import HANDLERS
from tokensvc.broker.handlers import tokens as token_handlers
from tokensvc.broker.handlers.base import ApiHandler
from tokensvc.broker.loop.offloop import encode_response_segments_async
from tokensvc.broker.services import Services
from tokensvc.broker.sessions.events import audit_session
from tokensvc.broker.sessions.session import Session, State
from tokensvc.broker.writes.forwarding import EnvelopeForwarder
from tokensvc.broker.writes.ledger import WriteLedger, new_request_key
from tokensvc.core.config import BrokerConfig
from tokensvc.core.errors import Errors, KafkaError
from tokensvc.protocol import encode_response

log = logging.getLogger("tokensvc.broker")


KRAFT_MIGRATION = "kraft_migration"


def clock_refusal(gate: ClockGate | None, services: Services, ctx: RequestContext,
                  handler: Any, body: dict,
                  migrating: Callable[[], bool] | None = None) -> dict | None:
    """The answer to a token write while a Kafka KRaft migration has started
    (``migrating()``: POLICY_VIOLATION, audit reason ``kraft_migration``) or while the
    clock is not trusted (audited, reason ``clock_skew``), or None: serve it."""
    if ctx.api_key not in token_handlers.TOKEN_WRITE_ACTIONS:
        return None
    if migrating is not None and migrating():
        token_handlers.audit_refused_write(services, ctx, Errors.POLICY_VIOLATION,
                                           KRAFT_MIGRATION)
        return handler.error_for(ctx.api_version, Errors.POLICY_VIOLATION, body)
    if gate is None:
        return None
    refused = gate.refusal()
    if refused is None:
        return None
    token_handlers.audit_refused_write(services, ctx, refused.error, refused.reason)
    return handler.error_for(ctx.api_version, refused.error, body)


class Dispatcher:
    """Handles one decoded request of a connection; see the module docstring."""

    def __init__(
        self,
        config: BrokerConfig,
        services: Services,
        *,
        ledger: WriteLedger,
        forwarder: EnvelopeForwarder,
        freshness: FreshnessGate,
        clock_gate: ClockGate | None,
        is_controller: Callable[[], bool],
        forwarding: Callable[[], bool],
        migrating: Callable[[], bool] | None = None,
    ) -> None:
        self._config = config
        self._migrating = migrating
        self._services = services
        self._audit = services.audit
        self._ledger = ledger
        self._forwarder = forwarder
        self._freshness = freshness
        self._clock_gate = clock_gate
        self._is_controller = is_controller
        self._forwarding = forwarding

    @staticmethod
    def api_name(api_key: int) -> str:
        handler = HANDLERS.get(api_key)
        return handler.name if handler else str(api_key)

    async def dispatch(self, ctx: RequestContext, body: dict) -> tuple[bytes | list[bytes], int]:
        """Handle one request; returns the encoded response and its top-level error code.

        A response with pre-encoded parts (a large describe) comes as the list of its
        bytes objects, in order, for the connection to write without joining them.

        Writes (KIP-590): on a non-controller, the handler's ``precheck`` then the
        forwarder; on the controller, the exactly-once ledger with a fresh request key.
        """
        handler = HANDLERS.get(ctx.api_key)
        if handler is None:
            raise KafkaError(Errors.UNSUPPORTED_VERSION, f"api {ctx.api_key} is not served")
        services = self._services
        version = ctx.api_version
        try:
            session = ctx.session
            if session is not None and session.principal is not None \
                    and ctx.listener != self._config.inter_broker_listener_name \
                    and not self._freshness.fresh():
                await self._catch_up_for(ctx, session)
            if handler.write and not ctx.forwarded:
                if not self._is_controller():
                    refused = handler.precheck(services, ctx, body) if handler.precheck else None
                    if refused is None:
                        refused = clock_refusal(self._clock_gate, services, ctx, handler, body,
                                                self._migrating)
                    if refused is not None:
                        return encode_response(ctx.header, refused), refused.get("ErrorCode", 0)
                    if not self._forwarding():  # still starting: the client retries
                        raise KafkaError(Errors.NOT_CONTROLLER, "the broker is still starting")
                    if not self._audit.required:
                        return await self._forwarder.forward(ctx, handler)
                    return await self._forward_audited(ctx, handler)
                own = client_request_key(ctx)
                ctx.write = WriteTicket(own or new_request_key(), first_attempt=own is None)
                return await self._ledger.apply(services, ctx, body)
            response = await handler.handle(services, ctx, body)
        except KafkaError as exc:
            response = handler.error_for(version, exc.error, body)
        except Exception:
            log.exception("%s failed", handler.name)
            response = handler.error_for(version, Errors.UNKNOWN_SERVER_ERROR, body)
        segments = await encode_response_segments_async(ctx.header, response)
        encoded = segments[0] if len(segments) == 1 else segments
        return encoded, int(response.get("ErrorCode", 0) or 0)

    async def _forward_audited(self, ctx: RequestContext,
                               handler: ApiHandler) -> tuple[bytes | list[bytes], int]:
        """audit.required on a forwarding broker: refuse while its audit log cannot be
        written (nothing forwarded). The write's own event (``token``, ``acl``,
        ``credential``) is the controller's, fsynced before the controller answers; this
        broker's ``forward`` event is queued, not waited for (a second fsync in series
        halved B2)."""
        refused = self._audit.refusal()
        if refused is not None:
            raise refused
        return await self._forwarder.forward(ctx, handler)

    async def _catch_up_for(self, ctx: RequestContext, session: Session) -> None:
        """Hold an authenticated connection's request -- a token's or a user's -- until
        the view is fresh. Raises StaleView (audited, reason ``stale_view``) past
        ``request.timeout.ms``, and a KafkaError when the catch-up revoked the connection
        meanwhile (its token removed, or its user deleted or given a new password). The
        inter-broker listener is not held: envelopes go to the controller, whose writes
        are fenced by the controller epoch in ZooKeeper itself."""
        try:
            await self._freshness.catch_up(self._config.request_timeout_ms / 1000.0)
        except StaleView as exc:
            audit_session(self._audit, "refused", session, exc.reason)
            raise
        if session.state is State.CLOSED:
            raise KafkaError(Errors.SASL_AUTHENTICATION_FAILED,
                             f"this connection's token or user credential was revoked "
                             f"({self.api_name(ctx.api_key)} not served)")
