"""The SCRAM server state machine (RFC 5802, RFC 7677) with Kafka's token extension.

Owns one SCRAM exchange on the server side: bytes in, bytes out, an explicit
:class:`ScramServerState` and one transition table (``_NEXT_STATE``). It picks
user or token credentials through a :class:`CredentialLookup` (Kafka's
``tokenauth=true`` extension selects tokens), checks token expiry against an
injected :class:`~tokensvc.core.clock.Clock`, and decides who the client is.

Anti-enumeration: an unknown user or token is not refused at client-first. The
exchange continues with a fake credential whose salt is an HMAC of the name
under a process-wide secret (stable, so it looks like a stored salt), and fails
at client-final exactly as a wrong password does. The real reason is kept in
``failure_reason`` for audit.

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
)

DEFAULT_MAX_MESSAGE_BYTES = 8192

# One secret per process: every ScramServer (every connection) answers the same
# fake salt for the same unknown name, as a stored credential would.
_PROCESS_FAKE_SALT_SECRET = secrets.token_bytes(32)


class CredentialLookup(Protocol):
    """Where the server finds credentials; implemented by the broker."""

    def user_credential(
        self, username: str, mechanism: ScramMechanism
    ) -> ScramCredential | None: ...

    def token_credential(
        self, token_id: str, mechanism: ScramMechanism
    ) -> tuple[ScramCredential, TokenInformation] | None: ...


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


def default_server_nonce() -> str:
    """32 URL-safe characters from the OS CSPRNG (never contains ',')."""
    return secrets.token_urlsafe(24)


class ScramServer:
    """One server-side SCRAM exchange: call :meth:`evaluate` once per client message.

    After client-first: ``username``, ``extensions``, ``token_requested``. After
    success (``complete``): ``principal`` and, for a token, ``token_id``,
    ``token_info`` and ``token_authenticated``. After a failure:
    ``failure_reason`` (the real reason class, for audit only).
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
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._clock = clock
        self._nonce_factory = nonce_factory or default_server_nonce
        self._max_message_bytes = max_message_bytes
        self._min_iterations = min_iterations
        self._fake_salt_secret = fake_salt_secret or _PROCESS_FAKE_SALT_SECRET
        self.state = ScramServerState.RECEIVE_CLIENT_FIRST
        self.failure_reason: str | None = None
        self.username: str | None = None
        self.token_requested = False
        self.extensions: dict[str, str] = {}
        self.token_info: TokenInformation | None = None
        self.principal: KafkaPrincipal | None = None
        self.token_id: str | None = None
        self._client_first: ClientFirstMessage | None = None
        self._server_first: ServerFirstMessage | None = None
        self._credential: ScramCredential | None = None
        self._deferred_failure: FailureReason | None = None

    @property
    def complete(self) -> bool:
        return self.state is ScramServerState.COMPLETE

    @property
    def token_authenticated(self) -> bool:
        return self.complete and self.token_id is not None

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
        credential = self._find_credential(first.username)
        if not self._min_iterations <= credential.iterations <= MAX_ITERATIONS:
            raise ScramAuthenticationError(FailureReason.ITERATIONS)
        server_nonce = self._nonce_factory()
        if not PRINTABLE.fullmatch(server_nonce):
            raise ValueError("server nonce must be printable ASCII without ','")
        self._client_first = first
        self._credential = credential
        self._server_first = ServerFirstMessage(
            first.nonce + server_nonce, credential.salt, credential.iterations
        )
        return self._server_first.to_text()

    def _receive_client_final(self, text: str) -> str:
        first, server_first, credential = self._client_first, self._server_first, self._credential
        assert first is not None and server_first is not None and credential is not None
        final = ClientFinalMessage.parse(text)
        if final.channel_binding != first.gs2_header.encode("utf-8"):
            raise ScramAuthenticationError(FailureReason.CHANNEL_BINDING)
        if not hmac.compare_digest(final.nonce.encode("ascii"), server_first.nonce.encode("ascii")):
            raise ScramAuthenticationError(FailureReason.NONCE_MISMATCH)
        auth = auth_message(first, server_first, final)
        proof_ok = verify_client_proof(self.mechanism, credential.stored_key, auth, final.proof)
        if self._deferred_failure is not None:
            raise ScramAuthenticationError(self._deferred_failure)
        if not proof_ok:
            raise ScramAuthenticationError(FailureReason.BAD_PROOF)
        if self.token_info is not None:
            if self.token_info.expired_at(self._clock.now_ms()):
                raise ScramAuthenticationError(FailureReason.EXPIRED_TOKEN)
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

    # -- credentials ----------------------------------------------------------

    def _find_credential(self, name: str) -> ScramCredential:
        """The credential to run the exchange with; a fake one (and a deferred
        failure) when the user or token is unknown or the token has expired."""
        if self.token_requested:
            found = self._lookup.token_credential(name, self.mechanism)
            if found is None:
                return self._defer(FailureReason.UNKNOWN_TOKEN, name)
            credential, info = found
            self.token_info = info
            if info.expired_at(self._clock.now_ms()):
                self._deferred_failure = FailureReason.EXPIRED_TOKEN
            return credential
        credential = self._lookup.user_credential(name, self.mechanism)
        if credential is None:
            return self._defer(FailureReason.UNKNOWN_USER, name)
        return credential

    def _defer(self, reason: FailureReason, name: str) -> ScramCredential:
        self._deferred_failure = reason
        return self._fake_credential(name)

    def _fake_credential(self, name: str) -> ScramCredential:
        def derive(label: str, size: int) -> bytes:
            data = f"{label}\x00{self.mechanism.mechanism_name}\x00{name}".encode()
            return self.mechanism.hmac(self._fake_salt_secret, data)[:size]

        size = len(self.mechanism.hash(b""))
        return ScramCredential(
            salt=derive("salt", 32),
            stored_key=derive("stored_key", size),
            server_key=derive("server_key", size),
            iterations=max(self._min_iterations, MIN_ITERATIONS),
        )
