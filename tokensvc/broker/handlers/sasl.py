"""SaslHandshake and SaslAuthenticate: SCRAM logins for users and tokens.

OAUTHBEARER (KIP-768) shares the handshake and the response; its steps are
:mod:`tokensvc.broker.handlers.oauthbearer`'s (a JWT, mapped to a principal).

Owns the link between a connection's :class:`Session` and a
:class:`ScramServer`: mechanism selection, session lifetime (KIP-368), the
failed-authentication delay, and the authentication audit events. Every SCRAM
failure reaches the client as SASL_AUTHENTICATION_FAILED with one message that
does not say whether the user or token exists; the reason class goes to the
audit log only.

Re-authentication (KIP-368) is a new SaslHandshake (v1+) and SaslAuthenticate
on an authenticated connection. As in Kafka it must keep the mechanism of the
first login (else UNSUPPORTED_SASL_MECHANISM and the connection closes) and
end with the same principal (else SASL_AUTHENTICATION_FAILED, "Cannot change
principals during re-authentication", and the connection closes). Both
refusals are audited as failed authentications; a successful one as a
``session`` event ``reauthenticated``. After every successful login the
session is bound to its token in the :class:`SessionRegistry`, which then
applies the token's renewals, expiries and removal to it.

Implicit token logins (``delegation.token.implicit.login.enable``: a user name
that is a live token id) are audited as ``kind=token`` with ``implicit=true``
and counted apart. A name that is neither a user nor a token is audited as a
keyed fingerprint, never verbatim: it may be a password typed in the wrong
field. A login refused for librdkafka's repeated client nonce is logged once
per client host per ten minutes (:class:`HostNoticeLimiter`), naming the
host and ``sasl.scram.accept.repeated.client.nonce``.

PBKDF2 never runs on the event loop: the SCRAM server defers its derivations (a
token's first on this broker, and the equal-cost one a failed exchange spends) and
the handler runs them in the broker's :class:`~tokensvc.broker.sessions.derivations.DerivationPool`
before client-final and before answering a failure.

Bounded staleness (issue #20): before every SCRAM step the handler asks the
broker's :class:`~tokensvc.broker.gates.freshness.FreshnessGate` whether its view of
ZooKeeper is fresh (one clock read). When it is not, the step waits until the
view is confirmed current, up to ``request.timeout.ms``; past that the login is
answered REQUEST_TIMED_OUT (retriable; on a raw SASL connection, closed),
audited as a failed authentication with reason ``stale_view``, and the
connection ends. Both steps are gated: a user's credential is read at
client-first, a token's again at client-final.

Clock skew (issue #36): a token login that has proved its HMAC is refused while the
broker's clock is not trusted (beyond ``max.clock.skew.ms``, or not yet measured:
:class:`~tokensvc.broker.gates.clockskew.ClockGate`) -- answered REQUEST_TIMED_OUT (retriable),
audited as a failed authentication with reason ``clock_skew``, and the connection ends.
The check comes after the proof so that it tells nothing to whoever does not hold the
token; user logins do not depend on the clock and are not refused.

``audit.required`` (see :mod:`tokensvc.audit.writer`): every step is refused the
same way (REQUEST_TIMED_OUT, reason ``audit_unavailable``) while the audit log
cannot be written, and a login's answer -- success or failure -- waits until its
event is fsynced; a success whose event is not on disk by ``request.timeout.ms``
is answered REQUEST_TIMED_OUT and its connection ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from tokensvc.audit.events import name_fingerprint
from tokensvc.audit.writer import AuditUnavailable
from tokensvc.broker.gates.clockskew import ClockSkewed
from tokensvc.broker.gates.freshness import StaleView
from tokensvc.broker.handlers.base import ApiHandler
from tokensvc.broker.handlers.oauthbearer import OAuthReauthenticationRefused, evaluate_oauth
from tokensvc.broker.sessions.session import IllegalSaslState
from tokensvc.core.errors import Errors
from tokensvc.oauth.exchange import OAuthAuthenticationFailed, OAuthBearerServer
from tokensvc.scram.formatter import ScramMechanism
from tokensvc.scram.messages import ClientFirstMessage, FailureReason
from tokensvc.scram.server import ScramAuthenticationError, ScramServer

if TYPE_CHECKING:
    from tokensvc.broker.context import RequestContext
    from tokensvc.broker.services import Services
    from tokensvc.broker.sessions.session import Session


log = logging.getLogger("tokensvc.broker.sasl")

REPEATED_NONCE_NOTICE_INTERVAL_MS = 600_000
REPEATED_NONCE_SETTING = "sasl.scram.accept.repeated.client.nonce"


class HostNoticeLimiter:
    """Allows one notice per client host per ``interval_ms`` (pure: the caller passes now).

    Holds at most ``max_hosts`` hosts: the oldest notice is forgotten first, so a
    flood of hosts costs bounded memory and at worst an early repeat.
    """

    def __init__(
        self, interval_ms: int = REPEATED_NONCE_NOTICE_INTERVAL_MS, max_hosts: int = 4096
    ) -> None:
        if interval_ms < 0 or max_hosts < 1:
            raise ValueError("interval_ms >= 0 and max_hosts >= 1")
        self._interval_ms = interval_ms
        self._max_hosts = max_hosts
        self._last: OrderedDict[str, int] = OrderedDict()

    def allow(self, host: str, now_ms: int) -> bool:
        """True (and remember ``now_ms``) when ``host`` had no notice in the interval."""
        last = self._last.get(host)
        if last is not None and now_ms - last < self._interval_ms:
            return False
        self._last.pop(host, None)
        self._last[host] = now_ms
        while len(self._last) > self._max_hosts:
            self._last.popitem(last=False)
        return True


class ReauthenticationRefused(IllegalSaslState):
    """A re-authentication proved a different principal; answered as an auth failure."""


def failure_message(mechanism: str | None) -> str:
    return (
        "Authentication failed during authentication due to invalid credentials "
        f"with SASL mechanism {mechanism or 'SCRAM'}"
    )


def begin_handshake(services: Services, session: Session | None, mechanism: str, version: int) -> Errors:
    """Apply a SaslHandshake to ``session``; the response's error code. The response body is
    otherwise fixed (the enabled mechanisms), so the server may send it precomputed."""
    enabled = services.config.sasl_enabled_mechanisms
    if session is None or not session.security_protocol.startswith("SASL_"):
        return Errors.ILLEGAL_SASL_STATE
    if mechanism not in enabled:
        session.close()
        return Errors.UNSUPPORTED_SASL_MECHANISM
    if not session.reauth_mechanism_allowed(mechanism):
        _refuse_reauth(services, session, mechanism, "mechanism_changed")
        return Errors.UNSUPPORTED_SASL_MECHANISM
    try:
        session.on_handshake(version)
    except IllegalSaslState:
        return Errors.ILLEGAL_SASL_STATE
    session.mechanism = mechanism
    if mechanism == OAuthBearerServer.mechanism:
        session.sasl = OAuthBearerServer(services.config.sasl_max_message_bytes)
        return Errors.NONE
    session.sasl = ScramServer(
        ScramMechanism.from_name(mechanism),
        services.auth.credentials,
        services.clock,
        max_message_bytes=services.config.sasl_max_message_bytes,
        fake_salt_secret=services.auth.fake_salt_secret,
        implicit_token_login=services.config.delegation_token_implicit_login_enable,
        accept_repeated_client_nonce=services.config.sasl_scram_accept_repeated_client_nonce,
        defer_derivations=True,
    )
    return Errors.NONE


async def handle_handshake(services: Services, ctx: RequestContext, body: dict) -> dict:
    error = begin_handshake(services, ctx.session, body.get("Mechanism") or "", ctx.api_version)
    return {"ErrorCode": int(error), "Mechanisms": list(services.config.sasl_enabled_mechanisms)}


async def evaluate(services: Services, session: Session, auth_bytes: bytes) -> tuple[bytes, int]:
    """Run one SCRAM step. Returns (challenge, session lifetime ms).

    Raises ScramAuthenticationError (after the configured delay), ReauthenticationRefused,
    IllegalSaslState, StaleView (the view of ZooKeeper could not be confirmed current) or
    ClockSkewed (a token login while the broker's clock is not trusted).
    """
    server = session.sasl
    if isinstance(server, OAuthBearerServer):
        return await evaluate_oauth(services, session, server, auth_bytes)
    if not isinstance(server, ScramServer):
        session.close()
        raise IllegalSaslState("SaslAuthenticate before SaslHandshake")
    refused = services.audit.refusal()
    if refused is not None:  # audit.required and the audit cannot be written
        _refuse_stale(services, session, server, auth_bytes, refused)
        raise refused
    gate = services.auth.freshness
    if not gate.fresh():
        try:
            await gate.catch_up(services.config.request_timeout_ms / 1000.0)
        except StaleView as exc:
            _refuse_stale(services, session, server, auth_bytes, exc)
            raise
    if server.needs_derivation:
        await services.auth.derivations.run(server.prepare)
    try:
        challenge = server.evaluate(auth_bytes)
    except ScramAuthenticationError as exc:
        session.close()
        services.metrics.login(session.mechanism, "failure", _kind(server))
        if server.implicit:
            services.metrics.implicit_login(session.mechanism, "failure")
        if session.authenticated_once:
            services.metrics.reauthentication(session.mechanism, "failure")
        reason = server.failure_reason or exc.reason
        name = audited_name(server, services.auth.fingerprint_key)
        services.audit.emit(
            "authentication",
            outcome="failure",
            mechanism=session.mechanism,
            kind=_kind(server),
            implicit=server.implicit,
            username=name,
            token_id=name if server.token_login else None,
            principal=None,
            client_host=session.client_host,
            client_port=session.client_port,
            listener=session.listener,
            reason=reason,
        )
        if services.audit.required:
            await _audited(services)
        if reason == FailureReason.REPEATED_CLIENT_NONCE:
            note_repeated_nonce(services.auth.repeated_nonce_notices, session.client_host,
                                services.clock.now_ms())
        if server.owed_derivation:
            await services.auth.derivations.run(server.spend_one_derivation)
        delay = services.config.connection_failed_authentication_delay_ms
        if delay > 0:
            await asyncio.sleep(delay / 1000.0)
        raise
    if not server.complete:
        session.on_sasl_continue()
        return challenge, 0
    if server.token_id is not None:
        gate = services.auth.clock_gate
        refused = gate.refusal() if gate is not None else None
        if refused is not None:
            _refuse_clock(services, session, server, refused)
            await _audited(services)  # audit.required: as for any failed login
            raise refused
    lifetime = services.auth.session_lifetime_ms(server)
    now = services.clock.now_ms()
    reauth = session.authenticated_once
    previous = session.principal
    try:
        session.on_sasl_success(
            server.principal,
            session.mechanism or "",
            server.token_id,
            now + lifetime if lifetime > 0 else 0,
            now,
        )
    except IllegalSaslState:
        _refuse_reauth(services, session, session.mechanism, "principal_changed", server)
        raise ReauthenticationRefused(
            f"Cannot change principals during re-authentication from {previous}: "
            f"{server.principal}"
        ) from None
    services.metrics.login(session.mechanism, "success", _kind(server))
    if server.implicit:
        services.metrics.implicit_login(session.mechanism, "success")
    if reauth:
        services.metrics.reauthentication(session.mechanism, "success")
    services.audit.emit(
        "session" if reauth else "authentication",
        **(
            {
                "action": "reauthenticated",
                "principal": str(server.principal),
                "token_id": server.token_id,
                "client_host": session.client_host,
                "listener": session.listener,
                "reason": None,
            }
            if reauth
            else {
                "outcome": "success",
                "mechanism": session.mechanism,
                "kind": _kind(server),
                "implicit": server.implicit,
                "username": server.username,
                "token_id": server.token_id,
                "principal": str(server.principal),
                "client_host": session.client_host,
                "client_port": session.client_port,
                "client_id": session.client_id,
                "listener": session.listener,
                "reason": None,
            }
        ),
    )
    if services.audit.required:
        try:
            await _audited(services, required=True)
        except AuditUnavailable:
            session.close()
            raise
    services.auth.sessions.bind(session)
    if server.token_id is not None:
        # Read the cache after binding: a removal racing with this login is then
        # seen either here or by the registry (see SessionRegistry.follow).
        services.auth.sessions.follow(session, services.tokens.info(server.token_id))
    return challenge, lifetime


async def _audited(services: Services, *, required: bool = False) -> None:
    """audit.required: wait until the login's event is fsynced (grouped with others).
    ``required``: raise AuditUnavailable if it is not by the request timeout (a success
    is then not answered as one); otherwise the answer, a failure, goes out anyway."""
    if not services.audit.required:
        return
    try:
        await services.audit.durable(services.config.request_timeout_ms / 1000.0)
    except AuditUnavailable:
        if required:
            raise


def _refuse_stale(services: Services, session: Session, server: ScramServer,
                  auth_bytes: bytes, exc: StaleView | AuditUnavailable) -> None:
    """A login step the broker cannot answer from a view confirmed current: audit, end.

    At client-final the exchange knows the name and its kind. At client-first nothing was
    looked up yet: the kind is read from the ``tokenauth`` extension (an implicit token
    login shows as ``user``) and the name is audited as its fingerprint only."""
    kind, implicit = _kind(server), server.implicit
    if server.username is not None:
        name = audited_name(server, services.auth.fingerprint_key)
        token_id = name if server.token_login else None
    else:
        try:
            first = ClientFirstMessage.parse(bytes(auth_bytes).decode("utf-8"))
        except (ValueError, UnicodeDecodeError, ScramAuthenticationError):
            first = None
        name = (name_fingerprint(services.auth.fingerprint_key, first.username)
                if first is not None else None)
        kind = "token" if first is not None and first.token_authentication else "user"
        token_id = None
    services.audit.emit(
        "authentication",
        outcome="failure",
        mechanism=session.mechanism,
        kind=kind,
        implicit=implicit,
        username=name,
        token_id=token_id,
        principal=None,
        client_host=session.client_host,
        client_port=session.client_port,
        listener=session.listener,
        reason=exc.reason,
    )
    session.close()


def _refuse_clock(services: Services, session: Session, server: ScramServer,
                  exc: ClockSkewed) -> None:
    """A token login that proved its HMAC, on a broker whose clock is not trusted:
    count, audit (reason ``clock_skew``), end the connection."""
    services.metrics.login(session.mechanism, "failure", "token")
    if server.implicit:
        services.metrics.implicit_login(session.mechanism, "failure")
    services.audit.emit(
        "authentication",
        outcome="failure",
        mechanism=session.mechanism,
        kind="token",
        implicit=server.implicit,
        username=server.username,
        token_id=server.token_id,
        principal=None,
        client_host=session.client_host,
        client_port=session.client_port,
        listener=session.listener,
        reason=exc.reason,
    )
    session.close()


def _kind(server: ScramServer) -> str:
    return "token" if server.token_login else "user"


def audited_name(server: ScramServer, fingerprint_key: bytes) -> str | None:
    """The client-first name as the audit log may show it: verbatim when it is a user
    or a token id, else its keyed fingerprint (it may be a misplaced password)."""
    if server.username is None or server.name_known:
        return server.username
    return name_fingerprint(fingerprint_key, server.username)


def note_repeated_nonce(limiter: HostNoticeLimiter, client_host: str, now_ms: int) -> bool:
    """Log (rate-limited per host) that a login was refused for librdkafka's repeated
    client nonce, naming the host and the setting. True when it logged."""
    if not limiter.allow(client_host, now_ms):
        return False
    log.warning(
        "SCRAM login from %s refused: its client-final nonce repeats the client nonce, "
        "as librdkafka before 2.6.1 sends it. Upgrade the client, or set %s=true to "
        "accept exactly that form (logged once per host per %d minutes)",
        client_host, REPEATED_NONCE_SETTING, REPEATED_NONCE_NOTICE_INTERVAL_MS // 60_000,
    )
    return True


def _refuse_reauth(
    services: Services,
    session: Session,
    mechanism: str | None,
    reason: str,
    server: ScramServer | None = None,
) -> None:
    """A re-authentication that changes mechanism or principal: audit, count, close."""
    kind = _kind(server) if server is not None else ("token" if session.token_id else "user")
    services.metrics.login(mechanism, "failure", kind)
    services.metrics.reauthentication(mechanism, "failure")
    services.audit.emit(
        "authentication",
        outcome="failure",
        mechanism=mechanism,
        kind=kind,
        implicit=server.implicit if server is not None else False,
        username=server.username if server is not None else None,
        token_id=server.token_id if server is not None else session.token_id,
        principal=str(session.principal),
        client_host=session.client_host,
        client_port=session.client_port,
        listener=session.listener,
        reason=reason,
    )
    session.close()


async def handle_authenticate(services: Services, ctx: RequestContext, body: dict) -> dict:
    session = ctx.session
    assert session is not None
    session.client_id = ctx.client_id or None
    try:
        challenge, lifetime = await evaluate(services, session, body.get("AuthBytes") or b"")
    except ScramAuthenticationError:
        return {
            "ErrorCode": int(Errors.SASL_AUTHENTICATION_FAILED),
            "ErrorMessage": failure_message(session.mechanism),
            "AuthBytes": b"",
            "SessionLifetimeMs": 0,
        }
    except (ReauthenticationRefused, OAuthReauthenticationRefused,
            OAuthAuthenticationFailed) as exc:
        return {
            "ErrorCode": int(Errors.SASL_AUTHENTICATION_FAILED),
            "ErrorMessage": str(exc),
            "AuthBytes": b"",
            "SessionLifetimeMs": 0,
        }
    except (StaleView, ClockSkewed, AuditUnavailable) as exc:
        return {
            "ErrorCode": int(exc.error),
            "ErrorMessage": exc.message,
            "AuthBytes": b"",
            "SessionLifetimeMs": 0,
        }
    except IllegalSaslState as exc:
        return {
            "ErrorCode": int(Errors.ILLEGAL_SASL_STATE),
            "ErrorMessage": str(exc),
            "AuthBytes": b"",
            "SessionLifetimeMs": 0,
        }
    return {
        "ErrorCode": 0,
        "ErrorMessage": None,
        "AuthBytes": challenge,
        "SessionLifetimeMs": lifetime,
    }


def _handshake_error(version: int, error: Errors) -> dict:
    return {"ErrorCode": int(error), "Mechanisms": []}


def _authenticate_error(version: int, error: Errors) -> dict:
    return {"ErrorCode": int(error), "ErrorMessage": None, "AuthBytes": b"", "SessionLifetimeMs": 0}


SASL_HANDSHAKE = ApiHandler("SaslHandshake", handle_handshake, _handshake_error)
SASL_AUTHENTICATE = ApiHandler("SaslAuthenticate", handle_authenticate, _authenticate_error)

__all__ = ["begin_handshake", "evaluate", "failure_message"]
