"""SaslAuthenticate for OAUTHBEARER (KIP-768): the link between a connection's
:class:`Session`, its :class:`~tokensvc.oauth.exchange.OAuthBearerServer` and the
broker's :class:`~tokensvc.oauth.authenticator.OAuthAuthenticator`.

One step per SaslAuthenticate, as Kafka's ``OAuthBearerSaslServer`` runs it:

- the client's first message: the JWT is checked and mapped. Accepted: the session
  is authenticated as the mapped principal, with a lifetime (KIP-368) that ends at
  the JWT's ``exp`` (capped by ``connections.max.reauth.ms`` when set), and keeps the
  identity for the token policy. Refused: audited at once, and the answer is the error
  challenge ``{"status":"invalid_token"}`` (no error code yet);
- the client's ``%x01`` acknowledgement: SASL_AUTHENTICATION_FAILED with the reason
  (after ``connection.failed.authentication.delay.ms``), the connection closes.

A malformed first message fails at once. A login is refused (REQUEST_TIMED_OUT,
retriable) while the broker's clock is not trusted, since ``exp`` is read on it, and
while ``audit.required`` cannot be met. A re-authentication must keep the principal.
Every outcome is an ``authentication`` event (``kind`` ``oauth``) with the JWT's
issuer, subject, ``jti`` and expiry and the mapping; never the JWT.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tokensvc.audit.writer import AuditUnavailable
from tokensvc.broker.sessions.session import IllegalSaslState, session_deadline
from tokensvc.oauth.exchange import OAuthAuthenticationFailed, OAuthBearerServer, State
from tokensvc.oauth.refusals import OAuthRefusal, TokenFacts

if TYPE_CHECKING:
    from tokensvc.broker.services import Services
    from tokensvc.broker.sessions.session import Session
    from tokensvc.oauth.mappings import Identity

KIND = "oauth"


class OAuthReauthenticationRefused(IllegalSaslState):
    """A re-authentication that proved another principal."""


async def evaluate_oauth(services: Services, session: Session, server: OAuthBearerServer,
                         auth_bytes: bytes) -> tuple[bytes, int]:
    """One OAUTHBEARER step; (challenge, session lifetime ms). Raises
    OAuthAuthenticationFailed, OAuthReauthenticationRefused, AuditUnavailable or ClockSkewed."""
    if server.state is State.ERROR_SENT:
        try:
            server.acknowledge(auth_bytes)
        except OAuthAuthenticationFailed:
            await _fail(services, session)
            raise
    refused = services.audit.refusal()
    if refused is not None:  # audit.required and the audit cannot be written
        _audit_failure(services, session, refused.reason, TokenFacts())
        session.close()
        raise refused
    try:
        first = server.first(auth_bytes)
    except OAuthRefusal as exc:
        _audit_failure(services, session, exc.reason, exc.facts)
        await _fail(services, session)
        raise OAuthAuthenticationFailed(f"Authentication failed: {exc.message}") from None
    except OAuthAuthenticationFailed:
        await _fail(services, session)
        raise
    gate = services.auth.clock_gate
    skewed = gate.refusal() if gate is not None else None
    if skewed is not None:
        _audit_failure(services, session, skewed.reason, TokenFacts())
        session.close()
        raise skewed
    try:
        identity = await services.auth.oauth.authenticate(first.token)
        server.accept(first, identity.principal.name)
    except OAuthRefusal as refusal:
        _audit_failure(services, session, refusal.reason, refusal.facts)
        if services.audit.required:
            await _durable(services, required=False)
        challenge = server.refuse(refusal)
        session.on_sasl_continue()
        return challenge, 0
    return await _succeed(services, session, identity)


async def _succeed(services: Services, session: Session, identity: Identity) -> tuple[bytes, int]:
    now = services.clock.now_ms()
    deadline = session_deadline(identity.token.expiry_ms, now, services.config.connections_max_reauth_ms)
    reauth = session.authenticated_once
    previous = session.principal
    try:
        session.on_sasl_success(identity.principal, server_mechanism(), None, deadline, now)
    except IllegalSaslState:
        _audit_failure(services, session, "principal_changed", identity.token.facts,
                       principal=str(previous))
        services.metrics.reauthentication(server_mechanism(), "failure")
        session.close()
        raise OAuthReauthenticationRefused(
            f"Cannot change principals during re-authentication from {previous}: "
            f"{identity.principal}") from None
    session.identity = identity
    services.metrics.login(server_mechanism(), "success", KIND)
    if reauth:
        services.metrics.reauthentication(server_mechanism(), "success")
    services.audit.emit(
        "authentication",
        outcome="success",
        mechanism=server_mechanism(),
        kind=KIND,
        principal=str(identity.principal),
        client_host=session.client_host,
        client_port=session.client_port,
        client_id=session.client_id,
        listener=session.listener,
        reason="reauthenticated" if reauth else None,
        oauth={**identity.token.facts.audit_fields(), "mapping": identity.mapping},
    )
    if services.audit.required:
        try:
            await _durable(services, required=True)
        except AuditUnavailable:
            session.close()
            raise
    services.auth.sessions.bind(session)
    return b"", max(1, deadline - now)


def server_mechanism() -> str:
    return OAuthBearerServer.mechanism


def _audit_failure(services: Services, session: Session, reason: str, facts: TokenFacts,
                   principal: str | None = None) -> None:
    services.metrics.login(server_mechanism(), "failure", KIND)
    if session.authenticated_once:
        services.metrics.reauthentication(server_mechanism(), "failure")
    services.audit.emit(
        "authentication",
        outcome="failure",
        mechanism=server_mechanism(),
        kind=KIND,
        principal=principal,
        client_host=session.client_host,
        client_port=session.client_port,
        client_id=session.client_id,
        listener=session.listener,
        reason=reason,
        oauth=facts.audit_fields(),
    )


async def _fail(services: Services, session: Session) -> None:
    """The end of a refused exchange: the connection closes after the configured delay."""
    session.close()
    if services.audit.required:
        await _durable(services, required=False)
    delay = services.config.connection_failed_authentication_delay_ms
    if delay > 0:
        await asyncio.sleep(delay / 1000.0)


async def _durable(services: Services, *, required: bool) -> None:
    try:
        await services.audit.durable(services.config.request_timeout_ms / 1000.0)
    except AuditUnavailable:
        if required:
            raise
