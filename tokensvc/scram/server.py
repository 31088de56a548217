"""The SCRAM server state machine (RFC 5802, RFC 7677) with Kafka's token extension.

Owns one SCRAM exchange on the server side: bytes in, bytes out, an explicit
:class:`ScramServerState` and one transition table (``_NEXT_STATE``). It picks
user or token credentials through a :class:`CredentialLookup`, checks token
expiry against an injected :class:`~tokensvc.core.clock.Clock`, and decides who
the client is.

Which credential: Kafka's ``tokenauth=true`` extension selects tokens. Without
it the name is a user; with ``implicit_token_login`` a name that is no user but
a token id known to the lookup logs in as that token, exactly as with the
extension (principal = owner, token-authenticated). A user always wins.

Anti-enumeration, at client-first: every name takes the same path (the user
lookup, the token lookup and the fake salt are all computed, whatever the
name), no PBKDF2 runs, and a token and an unknown name get a salt from the same
keyed derivation (:func:`~tokensvc.scram.formatter.derived_salt`), so the
server-first message tells nothing. An unknown name fails at client-final
exactly as a wrong password does; the real reason is kept in
``failure_reason`` for audit. At client-final, a token's credential may be
derived (PBKDF2, once per token and mechanism); so that this first derivation
is no signal, every failure that reached the proof check and derived nothing
spends one derivation of the same cost (``spend_one_derivation``).

With ``defer_derivations`` (the broker's setting) no PBKDF2 runs inside
:meth:`ScramServer.evaluate`: when ``needs_derivation`` is true the caller runs
:meth:`ScramServer.prepare` (the token's first derivation) before passing
client-final, and after a failure with ``owed_derivation`` set it runs
:meth:`ScramServer.spend_one_derivation`; both may run in another thread, so the
caller's event loop never holds a derivation. Without it (tests, tools) both run
inline, as before.

Old librdkafka (< 2.6.1) repeats the client nonce in client-final (client
nonce + the whole server-first nonce). With ``accept_repeated_client_nonce``
exactly that form is accepted, the proof being checked over the message as
sent; otherwise it fails with its own reason, ``repeated_client_nonce``.

It must not touch sockets, threads or the wall clock, know about ZooKeeper, or
log anything: no password, key or proof ever leaves this object.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from enum import Enum
from typing import ClassVar, Protocol

from tokensvc.core.clock import Clock
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.scram.formatter import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    TokenSalt,
    derive_credential,
    derived_salt,
    server_signature,
    verify_client_proof,
)
from tokensvc.scram.messages import (
    PRINTABLE,
    ClientFinalMessage,
    ClientFirstMessage,
    FailureReason,
    ScramAuthenticationError,
    ServerFinalMessage,
    ServerFirstMessage,
    auth_message,
    b64_encode,
)

DEFAULT_MAX_MESSAGE_BYTES = 8192

# One secret per process: every ScramServer (every connection) answers the same
# fake salt for the same unknown name, as a stored credential would.
_PROCESS_FAKE_SALT_SECRET = secrets.token_bytes(32)


class CredentialLookup(Protocol):
    """Where the server finds credentials; implemented by the broker.

    ``token_salt`` must answer without deriving anything, with the salt and
    iterations the credential ``token_credential`` returns will have.
    ``derived_count`` counts the PBKDF2 derivations ``token_credential`` ran.
    """

    def user_credential(
        self, username: str, mechanism: ScramMechanism
    ) -> ScramCredential | None: ...

    def token_salt(self, token_id: str, mechanism: ScramMechanism) -> TokenSalt | None: ...

    def token_credential(
        self, token_id: str, mechanism: ScramMechanism
    ) -> tuple[ScramCredential, TokenInformation] | None: ...

    def derived_count(self) -> int: ...


class ScramServerState(Enum):
    RECEIVE_CLIENT_FIRST = "receive_client_first"
    RECEIVE_CLIENT_FINAL = "receive_client_final"
    COMPLETE = "complete"
    FAILED = "failed"


# Successful steps; any failure moves to FAILED. COMPLETE and FAILED are final.
_NEXT_STATE = {
    ScramServerState.RECEIVE_CLIENT_FIRST: ScramServerState.RECEIVE_CLIENT_FINAL,
    ScramServerState.RECEIVE_CLIENT_FINAL: ScramServerState.COMPLETE,
}


class _Kind(Enum):
    """What the client-first name turned out to be."""

    USER = "user"
    TOKEN = "token"
    UNKNOWN = "unknown"


def default_server_nonce() -> str:
    """32 URL-safe characters from the OS CSPRNG (never contains ',')."""
    return secrets.token_urlsafe(24)


class ScramServer:
    """One server-side SCRAM exchange: call :meth:`evaluate` once per client message.

    After client-first: ``username``, ``extensions``, ``token_requested``,
    ``implicit`` (a token login without the extension) and ``name_known`` (the
    name is a user or a token id the lookup knows; False means it may be
    anything a client typed, a password included). After success
    (``complete``): ``principal`` and, for a token, ``token_id``, ``token_info``
    and ``token_authenticated``. After a failure: ``failure_reason`` (the real
    reason class, for audit only).
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: CredentialLookup,
        clock: Clock,
        *,
        nonce_factory: Callable[[], str] | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        min_iterations: int = MIN_ITERATIONS,
        fake_salt_secret: bytes | None = None,
        implicit_token_login: bool = False,
        accept_repeated_client_nonce: bool = False,
        defer_derivations: bool = False,
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._clock = clock
        self._nonce_factory = nonce_factory or default_server_nonce
        self._max_message_bytes = max_message_bytes
        self._min_iterations = min_iterations
        self._fake_salt_secret = fake_salt_secret or _PROCESS_FAKE_SALT_SECRET
        self._implicit_token_login = implicit_token_login
        self._accept_repeated_client_nonce = accept_repeated_client_nonce
        self.state = ScramServerState.RECEIVE_CLIENT_FIRST
        self.failure_reason: str | None = None
        self.username: str | None = None
        self.token_requested = False
        self.implicit = False
        self.name_known = False
        self.repeated_client_nonce = False
        self.extensions: dict[str, str] = {}
        self.token_info: TokenInformation | None = None
        self.principal: KafkaPrincipal | None = None
        self.token_id: str | None = None
        self._kind = _Kind.UNKNOWN
        self._client_first: ClientFirstMessage | None = None
        self._server_first: ServerFirstMessage | None = None
        self._user_credential: ScramCredential | None = None
        self._deferred_failure: FailureReason | None = None
        self._defer_derivations = defer_derivations
        self._token_derived = True
        self._prepared = False
        self._prepared_credential: tuple[ScramCredential, TokenInformation] | None = None
        self._derived_before = 0
        self.owed_derivation = False

    @property
    def complete(self) -> bool:
        return self.state is ScramServerState.COMPLETE

    @property
    def token_authenticated(self) -> bool:
        return self.complete and self.token_id is not None

    @property
    def token_login(self) -> bool:
        """True when this exchange runs against a token (extension or implicit)."""
        return self.token_requested or self.implicit

    @property
    def needs_derivation(self) -> bool:
        """True when client-final would derive the token's credential (its first login on
        this broker) and :meth:`prepare` has not run: with ``defer_derivations``, the
        caller runs :meth:`prepare` (in any thread) before passing client-final."""
        return (
            self.state is ScramServerState.RECEIVE_CLIENT_FINAL
            and self._kind is _Kind.TOKEN
            and not self._token_derived
            and not self._prepared
        )

    def prepare(self) -> None:
        """Derive the token's credential now (PBKDF2; safe to run in another thread while
        nothing else calls this server); client-final then uses it."""
        assert self.username is not None
        self._derived_before = self._lookup.derived_count()
        self._prepared_credential = self._lookup.token_credential(self.username, self.mechanism)
        self._prepared = True

    def spend_one_derivation(self) -> None:
        """Pay what ``owed_derivation`` says this failed exchange owes (see the module
        docstring); safe to run in another thread."""
        self.owed_derivation = False
        self._spend_one_derivation(self.username or "")

    def evaluate(self, client_message: bytes) -> bytes:
        """Take the next client message, return the server's answer.

        Raises :class:`ScramAuthenticationError`; the state is then FAILED.
        """
        step = self._STEPS.get(self.state)
        try:
            if step is None:
                raise ScramAuthenticationError(FailureReason.BAD_STATE)
            reply = step(self, self._decode(client_message))
        except ScramAuthenticationError as exc:
            if self.state is not ScramServerState.FAILED:
                self.failure_reason = exc.reason
            self.state = ScramServerState.FAILED
            raise
        self.state = _NEXT_STATE[self.state]
        return reply.encode("utf-8")

    def _decode(self, message: bytes) -> str:
        if len(message) > self._max_message_bytes:
            raise ScramAuthenticationError(FailureReason.MALFORMED)
        try:
            return bytes(message).decode("utf-8")
        except UnicodeDecodeError:
            raise ScramAuthenticationError(FailureReason.MALFORMED) from None

    # -- steps ---------------------------------------------------------------

    def _receive_client_first(self, text: str) -> str:
        first = ClientFirstMessage.parse(text)
        self.username = first.username
        self.extensions = dict(first.extensions)
        self.token_requested = first.token_authentication
        if first.authzid is not None and first.authzid != first.username:
            raise ScramAuthenticationError(FailureReason.AUTHZID_MISMATCH)
        salt, iterations = self._choose(first.username)
        if not self._min_iterations <= iterations <= MAX_ITERATIONS:
            raise ScramAuthenticationError(FailureReason.ITERATIONS)
        server_nonce = self._nonce_factory()
        if not PRINTABLE.fullmatch(server_nonce):
            raise ValueError("server nonce must be printable ASCII without ','")
        self._client_first = first
        self._server_first = ServerFirstMessage(first.nonce + server_nonce, salt, iterations)
        return self._server_first.to_text()

    def _receive_client_final(self, text: str) -> str:
        first, server_first = self._client_first, self._server_first
        assert first is not None and server_first is not None
        final = ClientFinalMessage.parse(text)
        if final.channel_binding != first.gs2_header.encode("utf-8"):
            raise ScramAuthenticationError(FailureReason.CHANNEL_BINDING)
        self._check_nonce(first, server_first, final)
        auth = auth_message(first, server_first, final)
        derived_before = self._derived_before if self._prepared else self._lookup.derived_count()
        try:
            credential = self._final_credential(first.username)
            proof_ok = verify_client_proof(self.mechanism, credential.stored_key, auth, final.proof)
            if self._deferred_failure is not None:
                raise ScramAuthenticationError(self._deferred_failure)
            if not proof_ok:
                raise ScramAuthenticationError(FailureReason.BAD_PROOF)
            if self.token_info is not None and self.token_info.expired_at(self._clock.now_ms()):
                raise ScramAuthenticationError(FailureReason.EXPIRED_TOKEN)
        except ScramAuthenticationError:
            if self._lookup.derived_count() == derived_before:
                if self._defer_derivations:
                    self.owed_derivation = True
                else:
                    self._spend_one_derivation(first.username)
            raise
        if self.token_info is not None:
            owner = self.token_info.owner
            self.principal = KafkaPrincipal(owner.principal_type, owner.name, True)
            self.token_id = self.token_info.token_id
        else:
            self.principal = KafkaPrincipal.user(first.username)
        verifier = server_signature(self.mechanism, credential.server_key, auth)
        return ServerFinalMessage(verifier=verifier).to_text()

    _STEPS: ClassVar[dict[ScramServerState, Callable[[ScramServer, str], str]]] = {
        ScramServerState.RECEIVE_CLIENT_FIRST: _receive_client_first,
        ScramServerState.RECEIVE_CLIENT_FINAL: _receive_client_final,
    }

    # -- nonce -------------------------------------------------------------------

    def _check_nonce(
        self, first: ClientFirstMessage, server_first: ServerFirstMessage, final: ClientFinalMessage
    ) -> None:
        """RFC 5802: client-final repeats the server-first nonce. librdkafka < 2.6.1
        sends its client nonce before it; accepted only when configured."""
        sent = final.nonce.encode("ascii")
        if hmac.compare_digest(sent, server_first.nonce.encode("ascii")):
            return
        repeated = (first.nonce + server_first.nonce).encode("ascii")
        if not hmac.compare_digest(sent, repeated):
            raise ScramAuthenticationError(FailureReason.NONCE_MISMATCH)
        self.repeated_client_nonce = True
        if not self._accept_repeated_client_nonce:
            raise ScramAuthenticationError(FailureReason.REPEATED_CLIENT_NONCE)

    # -- credentials ----------------------------------------------------------

    def _choose(self, name: str) -> tuple[bytes, int]:
        """Decide what ``name`` is and return the salt and iterations to announce.

        Every name costs the same here: both lookups and the fake salt are always
        computed. A token and an unknown name announce a derived salt.
        """
        user = self._lookup.user_credential(name, self.mechanism)
        token = self._lookup.token_salt(name, self.mechanism)
        fake = TokenSalt(derived_salt(self._fake_salt_secret, self.mechanism, name),
                         max(self._min_iterations, MIN_ITERATIONS), None, True)  # type: ignore[arg-type]
        requested = self.token_requested
        # tokenauth=true selects tokens only; without it a user wins, then (implicit
        # login) a token. A token and an unknown name then take the same steps, with
        # ``offered`` the token's salt or the fake one: no branch of its own to time.
        as_user = user is not None and not requested
        as_token = (token is not None and not as_user
                    and (requested or self._implicit_token_login))
        offered = token if as_token else fake
        assert offered is not None
        self._kind = _Kind.USER if as_user else _Kind.TOKEN if as_token else _Kind.UNKNOWN
        self.implicit = as_token and not requested
        self.name_known = user is not None or token is not None
        self.token_info = offered.info  # the token's, None for a fake; expiry: client-final
        self._token_derived = offered.derived or not self._defer_derivations
        self._deferred_failure = (
            None if as_user or as_token
            else FailureReason.UNKNOWN_TOKEN if requested else FailureReason.UNKNOWN_USER
        )
        if as_user:
            assert user is not None
            self._user_credential = user
            return user.salt, user.iterations
        return offered.salt, offered.iterations

    def _final_credential(self, name: str) -> ScramCredential:
        """The credential the proof is checked against; a fake one (and a deferred
        failure) when the name is unknown or the token went away since client-first."""
        if self._kind is _Kind.USER:
            assert self._user_credential is not None
            return self._user_credential
        if self._kind is _Kind.TOKEN:
            found = (self._prepared_credential if self._prepared
                     else self._lookup.token_credential(name, self.mechanism))
            if found is not None:
                credential, self.token_info = found
                return credential
            self.token_info = None
            self._deferred_failure = FailureReason.UNKNOWN_TOKEN
        return self._fake_credential(name)

    def _fake_credential(self, name: str) -> ScramCredential:
        def derive(label: str, size: int) -> bytes:
            data = f"{label}\x00{self.mechanism.mechanism_name}\x00{name}".encode()
            return self.mechanism.hmac(self._fake_salt_secret, data)[:size]

        size = len(self.mechanism.hash(b""))
        return ScramCredential(
            salt=derived_salt(self._fake_salt_secret, self.mechanism, name),
            stored_key=derive("stored_key", size),
            server_key=derive("server_key", size),
            iterations=max(self._min_iterations, MIN_ITERATIONS),
        )

    def _spend_one_derivation(self, name: str) -> None:
        """Run one PBKDF2 derivation like a token's first (same cost, result unused).

        A failed exchange that derived nothing pays this, so a token's first
        login on a broker cannot be told from any other failure by its duration.
        The password has the length of a token's (base64 of 64 bytes).
        """
        fake_password = b64_encode(
            self.mechanism.hmac(self._fake_salt_secret, f"password\x00{name}".encode())
            + bytes(64 - len(self.mechanism.hash(b"")))
        )
        derive_credential(
            fake_password,
            self.mechanism,
            max(self._min_iterations, MIN_ITERATIONS),
            derived_salt(self._fake_salt_secret, self.mechanism, name),
        )
