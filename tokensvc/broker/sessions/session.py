"""A connection's authentication state, without I/O (h11 style).

Owns: which requests a connection may send in each state and how each is routed, the
transitions between states, and the session's identity (principal, mechanism, token)
and lifetime. Both tables live here: ``_RULES`` (state -> what may be sent and where it
goes) and ``_TRANSITIONS`` (state, event -> next state). The connection asks
:meth:`Session.route` for every request it decoded (and :attr:`Session.raw_sasl`
before decoding a frame at all) and does what the answer says; the SASL handler calls
the ``on_*`` methods after each step.

States:
    EXPECT_HANDSHAKE     new SASL connection: ApiVersions, SaslHandshake
    EXPECT_AUTHENTICATE  after SaslHandshake v1: SaslAuthenticate (ApiVersions too)
    EXPECT_RAW_SASL      after SaslHandshake v0: the next frames are raw SASL tokens
    AUTHENTICATED        every API; SaslHandshake starts a re-authentication (KIP-368);
                         once the session's lifetime is over, any other request ends it
    REAUTHENTICATING     re-authentication in progress: SaslAuthenticate only
    CLOSED               nothing more is read
It must not touch sockets, clocks or ZooKeeper: time comes in as an argument (a
function the session calls only when its lifetime decides the answer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum, auto

from tokensvc.core.principal import ANONYMOUS, KafkaPrincipal
from tokensvc.protocol.api import ApiKey

_API_VERSIONS = int(ApiKey.API_VERSIONS)
_SASL_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)
_SASL_AUTHENTICATE = int(ApiKey.SASL_AUTHENTICATE)


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


class Route(Enum):
    """What the connection does with one request, as the session's state decides."""

    REFUSE = auto()  # not allowed in this state: the session ends, the connection closes
    EXPIRED = auto()  # the session's lifetime is over (KIP-368): it ends, audited
    API_VERSIONS = auto()  # answered from the precomputed responses
    HANDSHAKE = auto()  # SaslHandshake: the mechanism step, answered from the precomputed
    AUTHENTICATE = auto()  # SaslAuthenticate: dispatched on the spot; its bytes not kept
    REQUEST = auto()  # any other API: dispatched; its bytes kept (it may be forwarded)

    __hash__ = object.__hash__


@dataclass(frozen=True)
class _Rules:
    """One state's row: the route of each API key (``otherwise`` for the rest), the
    routes refused once the session's lifetime is over, and whether frames are raw SASL
    tokens (not Kafka requests: nothing is decoded)."""

    routes: Mapping[int, Route]
    otherwise: Route = Route.REFUSE
    expiring: frozenset[Route] = frozenset()
    raw_frames: bool = False


_RULES: dict[State, _Rules] = {
    State.EXPECT_HANDSHAKE: _Rules({_API_VERSIONS: Route.API_VERSIONS,
                                    _SASL_HANDSHAKE: Route.HANDSHAKE}),
    State.EXPECT_AUTHENTICATE: _Rules({_API_VERSIONS: Route.API_VERSIONS,
                                       _SASL_AUTHENTICATE: Route.AUTHENTICATE}),
    State.EXPECT_RAW_SASL: _Rules({}, raw_frames=True),
    State.AUTHENTICATED: _Rules(
        {_API_VERSIONS: Route.API_VERSIONS, _SASL_HANDSHAKE: Route.HANDSHAKE,
         _SASL_AUTHENTICATE: Route.AUTHENTICATE},
        otherwise=Route.REQUEST,
        # A re-authentication may begin after the lifetime; nothing else may.
        expiring=frozenset({Route.API_VERSIONS, Route.AUTHENTICATE, Route.REQUEST}),
    ),
    State.REAUTHENTICATING: _Rules({_SASL_AUTHENTICATE: Route.AUTHENTICATE}),
    State.CLOSED: _Rules({}),
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
    # An OAUTHBEARER login's mapped identity (tokensvc.oauth.mappings.Identity): its
    # token policy applies to the tokens this session creates.
    identity: object | None = field(default=None, repr=False)

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
        """The next frames are raw SASL tokens (after SaslHandshake v0), not requests."""
        return _RULES[self.state].raw_frames

    def route(self, api_key: int, now_ms: Callable[[], int]) -> Route:
        """How a request for ``api_key`` is handled now: its route in this state, or
        EXPIRED when the session's lifetime is over and the route needs a live session
        (``now_ms`` is called only then)."""
        rules = _RULES[self.state]
        route = rules.routes.get(api_key, rules.otherwise)
        if route in rules.expiring and self.expired(now_ms()):
            return Route.EXPIRED
        return route

    def allowed(self, api_key: int) -> bool:
        """Whether ``api_key`` may be sent in this state (the lifetime aside)."""
        rules = _RULES[self.state]
        return rules.routes.get(api_key, rules.otherwise) is not Route.REFUSE

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
