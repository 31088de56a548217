"""The SCRAM client state machine (RFC 5802, RFC 7677) with Kafka's extensions.

Owns one client-side exchange: :meth:`ScramClient.first_message`, then
:meth:`ScramClient.final_message` with the server-first message, then
:meth:`ScramClient.verify_server_final`. Extensions (Kafka's
``tokenauth=true``) go after the nonce in the order given and are part of the
AuthMessage. An optional ``salted_password_cache`` lets a load generator reuse
PBKDF2 output across exchanges.

It must not touch sockets or clocks, and never logs or exposes the password,
the salted password or the proof.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from enum import Enum

from tokensvc.scram.formatter import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramMechanism,
    client_proof,
    credential_from_salted_password,
    server_signature,
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
    validate_extensions,
)

# (mechanism, password, salt, iterations) -> salted password.
SaltedPasswordCache = MutableMapping[tuple[ScramMechanism, str, bytes, int], bytes]


class ScramClientState(Enum):
    SEND_CLIENT_FIRST = "send_client_first"
    RECEIVE_SERVER_FIRST = "receive_server_first"
    RECEIVE_SERVER_FINAL = "receive_server_final"
    COMPLETE = "complete"
    FAILED = "failed"


# The one transition table: state -> state after a successful step. Any
# failure moves to FAILED; COMPLETE and FAILED are final.
_NEXT_STATE = {
    ScramClientState.SEND_CLIENT_FIRST: ScramClientState.RECEIVE_SERVER_FIRST,
    ScramClientState.RECEIVE_SERVER_FIRST: ScramClientState.RECEIVE_SERVER_FINAL,
    ScramClientState.RECEIVE_SERVER_FINAL: ScramClientState.COMPLETE,
}


def default_client_nonce() -> str:
    """32 URL-safe characters from the OS CSPRNG (never contains ',')."""
    return secrets.token_urlsafe(24)


class ScramClient:
    """One client-side SCRAM exchange for a user or (with tokenauth) a delegation token."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        username: str,
        password: str,
        *,
        extensions: Mapping[str, str] | None = None,
        nonce: str | None = None,
        salted_password_cache: SaltedPasswordCache | None = None,
    ) -> None:
        if not username:
            raise ValueError("SCRAM username must not be empty")
        nonce = nonce if nonce is not None else default_client_nonce()
        if not PRINTABLE.fullmatch(nonce):
            raise ValueError("SCRAM nonce must be printable ASCII without ','")
        self.mechanism = mechanism
        self.state = ScramClientState.SEND_CLIENT_FIRST
        self._password = password
        self._cache = salted_password_cache
        self._first = ClientFirstMessage(
            username, nonce, extensions=validate_extensions(extensions or {})
        )
        self._expected_server_signature: bytes | None = None

    def __repr__(self) -> str:
        return (
            f"ScramClient({self.mechanism.mechanism_name}, {self._first.username!r}, "
            f"state={self.state.name})"
        )

    @property
    def complete(self) -> bool:
        return self.state is ScramClientState.COMPLETE

    def first_message(self) -> bytes:
        """client-first-message: ``n,,n=<user>,r=<nonce>[,key=value...]``."""
        self._expect(ScramClientState.SEND_CLIENT_FIRST)
        self._advance()
        return self._first.to_text().encode("utf-8")

    def final_message(self, server_first: bytes) -> bytes:
        """Check the server-first message and answer with client-final (with proof)."""
        self._expect(ScramClientState.RECEIVE_SERVER_FIRST)
        with self._failing():
            first = self._first
            received = ServerFirstMessage.parse(self._decode(server_first))
            nonce = received.nonce
            if not nonce.startswith(first.nonce) or len(nonce) == len(first.nonce):
                raise ScramAuthenticationError(FailureReason.NONCE_MISMATCH)
            # Above the maximum a server may store, PBKDF2 would let a hostile server
            # keep this client (or a broker's event loop) busy for minutes.
            if not MIN_ITERATIONS <= received.iterations <= MAX_ITERATIONS:
                raise ScramAuthenticationError(FailureReason.ITERATIONS)
            salted = self._salted_password(received.salt, received.iterations)
            final = ClientFinalMessage(first.gs2_header.encode("utf-8"), nonce, b"")
            auth = auth_message(first, received, final)
            proof = client_proof(self.mechanism, salted, auth)
            server_key = credential_from_salted_password(
                self.mechanism, salted, received.salt, received.iterations
            ).server_key
            self._expected_server_signature = server_signature(self.mechanism, server_key, auth)
            message = ClientFinalMessage(final.channel_binding, nonce, proof).to_text()
        self._advance()
        return message.encode("utf-8")

    def verify_server_final(self, server_final: bytes) -> None:
        """Check the server's signature; raise ScramAuthenticationError on ``e=`` or mismatch."""
        self._expect(ScramClientState.RECEIVE_SERVER_FINAL)
        with self._failing():
            received = ServerFinalMessage.parse(self._decode(server_final))
            if received.error is not None:
                raise ScramAuthenticationError(FailureReason.SERVER_ERROR)
            assert received.verifier is not None and self._expected_server_signature is not None
            if not hmac.compare_digest(received.verifier, self._expected_server_signature):
                raise ScramAuthenticationError(FailureReason.BAD_SERVER_SIGNATURE)
        self._advance()

    # -- helpers ----------------------------------------------------------------

    def _salted_password(self, salt: bytes, iterations: int) -> bytes:
        if self._cache is None:
            return self.mechanism.salted_password(self._password, salt, iterations)
        key = (self.mechanism, self._password, salt, iterations)
        salted = self._cache.get(key)
        if salted is None:
            salted = self.mechanism.salted_password(self._password, salt, iterations)
            self._cache[key] = salted
        return salted

    @staticmethod
    def _decode(message: bytes) -> str:
        try:
            return bytes(message).decode("utf-8")
        except UnicodeDecodeError:
            raise ScramAuthenticationError(FailureReason.MALFORMED) from None

    def _expect(self, state: ScramClientState) -> None:
        if self.state is not state:
            self.state = ScramClientState.FAILED
            raise ScramAuthenticationError(FailureReason.BAD_STATE)

    def _advance(self) -> None:
        self.state = _NEXT_STATE[self.state]

    @contextmanager
    def _failing(self) -> Iterator[None]:
        """Any ScramAuthenticationError inside moves the client to FAILED."""
        try:
            yield
        except ScramAuthenticationError:
            self.state = ScramClientState.FAILED
            raise
