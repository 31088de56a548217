"""The SCRAM server state machine (tokensvc.scram.server), driven from each state, and
the four message parsers (tokensvc.scram.messages).

The first byte picks where the fuzzed message goes:

0. a fresh server; the message, split at ``\\xff\\xff``, is up to three client messages;
1. client-final after a user's client-first;
2. client-final after a token's client-first (``tokenauth=true``);
3. client-final after an implicit token login's client-first (no extension);
4. client-final after the client-first of a name that is neither;
5. a message after a complete exchange; 6. after a failed one;
7. the message parsers: each of the four messages parsed, written and parsed again.

The second byte picks SHA-256 or SHA-512, whether the repeated client nonce of old
librdkafka is accepted, and whether the token has expired. Properties: only
ScramAuthenticationError escapes and leaves the server FAILED; a name that is no user
or token, an expired token, or a message after the end never log in; a success names
the right principal; the round trip of every message parser.
"""

from __future__ import annotations

import functools

from tokensvc.core.clock import FakeClock
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.scram import (
    ScramAuthenticationError,
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    ScramServerState,
    TokenSalt,
    derive_credential,
)
from tokensvc.scram.messages import (
    ClientFinalMessage,
    ClientFirstMessage,
    ServerFinalMessage,
    ServerFirstMessage,
)

ERRORS = (ScramAuthenticationError,)

NOW = 1_700_000_000_000
USER, USER_PASSWORD = "alice", "alice-secret"
TOKEN_ID, TOKEN_PASSWORD = "Ab3dEf-hIjKlMnOpQrStUv", "dG9rZW4taG1hYy1ub3QtYS1yZWFsLW9uZQ=="
OWNER = KafkaPrincipal.user("bob")
CLIENT_NONCE = "fyko+d2lbbFgONRv9qkxdawL"
SERVER_NONCE = "3rfcNHYJY1ZVvWVs7j"
SALT = b"fuzz-salt-0123456789"
TOKEN = TokenInformation(TOKEN_ID, OWNER, OWNER, (), NOW - 1000, NOW + 60_000, NOW + 600_000)


def _credentials() -> dict[tuple[str, ScramMechanism], ScramCredential]:
    out = {}
    for mechanism in ScramMechanism:
        out[(USER, mechanism)] = derive_credential(USER_PASSWORD, mechanism, 4096, SALT)
        out[(TOKEN_ID, mechanism)] = derive_credential(TOKEN_PASSWORD, mechanism, 4096, SALT)
    return out


_CREDENTIALS = _credentials()


class _Lookup:
    """One user and one token, both derived once at import."""

    def user_credential(self, username: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return _CREDENTIALS.get((username, mechanism)) if username == USER else None

    def token_salt(self, token_id: str, mechanism: ScramMechanism) -> TokenSalt | None:
        if token_id != TOKEN_ID:
            return None
        credential = _CREDENTIALS[(token_id, mechanism)]
        return TokenSalt(credential.salt, credential.iterations, TOKEN)

    def token_credential(self, token_id: str, mechanism: ScramMechanism):
        if token_id != TOKEN_ID:
            return None
        return _CREDENTIALS[(token_id, mechanism)], TOKEN

    def derived_count(self) -> int:
        return 0


def _client(mode: int, mechanism: ScramMechanism) -> ScramClient:
    if mode == 1:
        return ScramClient(mechanism, USER, USER_PASSWORD, nonce=CLIENT_NONCE)
    if mode == 2:
        return ScramClient(mechanism, TOKEN_ID, TOKEN_PASSWORD, nonce=CLIENT_NONCE,
                           extensions={"tokenauth": "true"})
    if mode == 3:
        return ScramClient(mechanism, TOKEN_ID, TOKEN_PASSWORD, nonce=CLIENT_NONCE)
    return ScramClient(mechanism, "mallory", "guess", nonce=CLIENT_NONCE)


def _server(mechanism: ScramMechanism, flags: int) -> ScramServer:
    clock = FakeClock(NOW + (120_000 if flags & 4 else 0))
    return ScramServer(mechanism, _Lookup(), clock, nonce_factory=lambda: SERVER_NONCE,
                       implicit_token_login=True, accept_repeated_client_nonce=bool(flags & 2),
                       defer_derivations=True)


def _evaluate(server: ScramServer, message: bytes) -> bytes:
    if server.needs_derivation:
        server.prepare()
    try:
        return server.evaluate(message)
    except ScramAuthenticationError:
        assert server.state is ScramServerState.FAILED, "a failure left the server running"
        raise


def _check_success(server: ScramServer, mode: int, flags: int) -> None:
    if not server.complete:
        return
    assert mode in (0, 1, 2, 3), "logged in as a name that is no user or token"
    if server.token_authenticated:
        assert not flags & 4, "an expired token logged in"
        assert server.principal == KafkaPrincipal(OWNER.principal_type, OWNER.name, True)
    else:
        assert server.principal == KafkaPrincipal.user(USER)


def _parsers(message: bytes) -> None:
    text = message.decode("utf-8", "replace")
    for kind in (ClientFirstMessage, ServerFirstMessage, ClientFinalMessage, ServerFinalMessage):
        try:
            parsed = kind.parse(text)
        except ScramAuthenticationError:
            continue
        assert kind.parse(parsed.to_text()) == parsed, f"{kind.__name__} round trip differs"


def fuzz_one(data: bytes) -> None:
    if len(data) < 2:
        return
    mode, flags, message = data[0] % 8, data[1], data[2:]
    mechanism = ScramMechanism.SCRAM_SHA_512 if flags & 1 else ScramMechanism.SCRAM_SHA_256
    if mode == 7:
        _parsers(message)
        return
    server = _server(mechanism, flags)
    if mode == 0:
        for part in message.split(b"\xff\xff")[:3]:
            _evaluate(server, part)
            _check_success(server, mode, flags)
        return
    if mode >= 5:
        if mode == 5:
            first, final = _user_exchange(mechanism)
            _evaluate(server, first)
            _evaluate(server, final)
            assert server.complete
        else:
            try:
                _evaluate(server, b"\x80")
            except ScramAuthenticationError:
                pass
        try:
            _evaluate(server, message)
        except ScramAuthenticationError:
            return
        raise AssertionError("a message after the end of the exchange was answered")
    _evaluate(server, _client(mode, mechanism).first_message())
    _evaluate(server, message)
    _check_success(server, mode, flags)


@functools.cache
def _user_exchange(mechanism: ScramMechanism) -> tuple[bytes, bytes]:
    """A user's valid client-first and client-final (the nonces are fixed)."""
    client = _client(1, mechanism)
    first = client.first_message()
    return first, client.final_message(_server(mechanism, 0).evaluate(first))


def seeds() -> dict[str, bytes]:
    """Valid exchanges, made by tokensvc's own SCRAM client, for each mode."""
    out: dict[str, bytes] = {}
    for mechanism in ScramMechanism:
        bit = 1 if mechanism is ScramMechanism.SCRAM_SHA_512 else 0
        tag = mechanism.mechanism_name.lower()
        for mode in (1, 2, 3, 4):
            server = _server(mechanism, 0)
            client = _client(mode, mechanism)
            first = client.first_message()
            final = client.final_message(server.evaluate(first))
            out[f"mode{mode}-{tag}-client-final"] = bytes([mode, bit]) + final
            out[f"mode0-{tag}-exchange-{mode}"] = bytes([0, bit]) + first + b"\xff\xff" + final
            out[f"mode7-{tag}-client-first-{mode}"] = bytes([7, bit]) + first
            out[f"mode7-{tag}-server-first-{mode}"] = bytes([7, bit]) + server._server_first.to_text().encode()
        out[f"mode5-{tag}"] = bytes([5, bit]) + b"n,,n=alice,r=" + CLIENT_NONCE.encode()
        out[f"mode6-{tag}"] = bytes([6, bit]) + b"n,,n=alice,r=" + CLIENT_NONCE.encode()
    out["mode7-server-final"] = bytes([7, 0]) + b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ="
    out["mode7-server-error"] = bytes([7, 0]) + b"e=invalid-proof"
    return out
