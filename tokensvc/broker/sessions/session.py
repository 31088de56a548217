"""A connection's authentication state, without I/O (h11 style).

Owns: which requests a connection may send in each state, the transitions
between states, and the session's identity (principal, mechanism, token) and
lifetime. Every transition lives in ``_TRANSITIONS``; the server asks
``allowed(api_key)`` before dispatching and calls the ``on_*`` methods after.

States:
    EXPECT_HANDSHAKE     new SASL connection: ApiVersions, SaslHandshake
    EXPECT_AUTHENTICATE  after SaslHandshake v1: SaslAuthenticate (ApiVersions too)
    EXPECT_RAW_SASL      after SaslHandshake v0: the next frames are raw SASL tokens
    AUTHENTICATED        every API; SaslHandshake starts a re-authentication (KIP-368)
    REAUTHENTICATING     re-authentication in progress: SaslAuthenticate only
    CLOSED               nothing more is read
It must not touch sockets, clocks or ZooKeeper: time comes in as arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto

from tokensvc.core.principal import ANONYMOUS, KafkaPrincipal

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


class State(Enum):
    EXPECT_HANDSHAKE = auto()
    EXPECT_AUTHENTICATE = auto()
    EXPECT_RAW_SASL = auto()
    AUTHENTICATED = auto()
    REAUTHENTICATING = auto()
    CLOSED = auto()

    # Members are singletons: hash by identity in C, not Enum's hash of the name in Python
    # (every request looks its state up).
    __hash__ = object.__hash__


_ALLOWED: dict[State, frozenset[int] | None] = {
    State.EXPECT_HANDSHAKE: frozenset({API_VERSIONS, SASL_HANDSHAKE}),
    State.EXPECT_AUTHENTICATE: frozenset({API_VERSIONS, SASL_AUTHENTICATE}),
    State.EXPECT_RAW_SASL: frozenset(),
    State.AUTHENTICATED: None,  # everything
    State.REAUTHENTICATING: frozenset({SASL_AUTHENTICATE}),
    State.CLOSED: frozenset(),
}

# (state, event) -> next state
_TRANSITIONS: dict[tuple[State, str], State] = {
    (State.EXPECT_HANDSHAKE, "handshake_v0"): State.EXPECT_RAW_SASL,
    (State.EXPECT_HANDSHAKE, "handshake_v1"): State.EXPECT_AUTHENTICATE,
    (State.EXPECT_AUTHENTICATE, "sasl_continue"): State.EXPECT_AUTHENTICATE,
    (State.EXPECT_AUTHENTICATE, "sasl_success"): State.AUTHENTICATED,
    (State.EXPECT_RAW_SASL, "sasl_continue"): State.EXPECT_RAW_SASL,
    (State.EXPECT_RAW_SASL, "sasl_success"): State.AUTHENTICATED,
    (State.AUTHENTICATED, "handshake_v1"): State.REAUTHENTICATING,
    (State.REAUTHENTICATING, "sasl_continue"): State.REAUTHENTICATING,
    (State.REAUTHENTICATING, "sasl_success"): State.AUTHENTICATED,
}


def session_deadline(token_deadline_ms: int | None, authenticated_at_ms: int, reauth_ms: int) -> int:
    """Absolute ms after which a session needs re-authentication (0 = never).

    KIP-368: the credential's expiry (a token's min(expiry, max)), capped by
    ``connections.max.reauth.ms`` after the authentication when that is set.
    """
    capped = authenticated_at_ms + reauth_ms if reauth_ms > 0 else 0
    if token_deadline_ms is None:
        return capped
    return min(token_deadline_ms, capped) if capped else token_deadline_ms


class IllegalSaslState(Exception):
    """The client sent something its connection state does not allow."""


@dataclass
class Session:
    """Identity and state of one client connection."""

    listener: str
    security_protocol: str
    client_host: str
    client_port: int
    state: State = State.EXPECT_HANDSHAKE
    principal: KafkaPrincipal | None = None
    mechanism: str | None = None
    token_id: str | None = None
    # Absolute ms after which requests need a re-authentication first (0 = never).
    expires_at_ms: int = 0
    authenticated_at_ms: int = 0
    authenticated_once: bool = False
    sasl: object | None = field(default=None, repr=False)
    # The client id of the request that authenticated the connection (for the audit).
    client_id: str | None = None

    @classmethod
    def for_listener(
        cls,
        listener: str,
        security_protocol: str,
        client_host: str,
        client_port: int,
        *,
        ssl_principal: KafkaPrincipal | None = None,
    ) -> Session:
        session = cls(listener, security_protocol, client_host, client_port)
        if not security_protocol.startswith("SASL_"):
            # PLAINTEXT and SSL: no SASL; the principal is ANONYMOUS, or the
            # client certificate's subject on two-way SSL.
            session.state = State.AUTHENTICATED
            session.principal = ssl_principal or ANONYMOUS
            session.authenticated_once = True
        return session

    @property
    def token_authenticated(self) -> bool:
        return bool(self.principal and self.principal.token_authenticated)

    @property
    def raw_sasl(self) -> bool:
        return self.state is State.EXPECT_RAW_SASL

    def allowed(self, api_key: int) -> bool:
        allowed = _ALLOWED[self.state]
        return allowed is None or api_key in allowed

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms > 0 and now_ms >= self.expires_at_ms

    def reauth_mechanism_allowed(self, mechanism: str) -> bool:
        """A re-authentication must use the mechanism of the first login (as Kafka)."""
        return self.state is not State.AUTHENTICATED or self.mechanism in (None, mechanism)

    def follow_token(self, token_deadline_ms: int, reauth_ms: int) -> None:
        """The session's token changed its deadline (renewed, or expired with a period).

        The lifetime becomes the token's new deadline, still capped by
        ``connections.max.reauth.ms`` counted from the last (re-)authentication:
        a renewal extends it, an expiry moved closer shrinks it.
        """
        self.expires_at_ms = session_deadline(token_deadline_ms, self.authenticated_at_ms, reauth_ms)

    def _move(self, event: str) -> None:
        try:
            self.state = _TRANSITIONS[(self.state, event)]
        except KeyError:
            self.state = State.CLOSED
            raise IllegalSaslState(f"{event} is not allowed in state {self.state.name}") from None

    def on_handshake(self, version: int) -> None:
        if self.state is State.AUTHENTICATED and version == 0:
            self.state = State.CLOSED
            raise IllegalSaslState("re-authentication needs SaslHandshake v1 or later")
        self._move("handshake_v0" if version == 0 else "handshake_v1")

    def on_sasl_continue(self) -> None:
        self._move("sasl_continue")

    def on_sasl_success(
        self,
        principal: KafkaPrincipal,
        mechanism: str,
        token_id: str | None,
        expires_at_ms: int,
        now_ms: int = 0,
    ) -> None:
        if (
            self.state is State.REAUTHENTICATING
            and self.principal is not None
            and principal.without_token_flag() != self.principal.without_token_flag()
        ):
            self.state = State.CLOSED
            raise IllegalSaslState("re-authentication must be for the same principal")
        self._move("sasl_success")
        self.principal = principal
        self.mechanism = mechanism
        self.token_id = token_id
        self.expires_at_ms = expires_at_ms
        self.authenticated_at_ms = now_ms
        self.authenticated_once = True
        self.sasl = None

    def close(self) -> None:
        self.state = State.CLOSED
