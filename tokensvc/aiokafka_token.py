"""Delegation-token login for aiokafka clients (AIOKafkaProducer, AIOKafkaConsumer, the
admin client).

A delegation token logs in with SCRAM whose client-first message carries Kafka's
``tokenauth=true`` extension. aiokafka's own SCRAM (``aiokafka.conn.ScramAuthenticator``)
cannot send extensions, it has no registry of SASL mechanisms as kafka-python has, and
its clients take only the configuration keys they know. What it has is one method that
makes the SCRAM authenticator of a connection, ``AIOKafkaConnection.authenticator_scram``,
and an authenticator interface (``step(payload)``, awaited until it returns None). So
the token travels in the keys aiokafka already has: ``sasl_plain_username`` is the token
id and ``sasl_plain_password`` is a :class:`~tokensvc.kafka_python_token.TokenHmac` (a
``str``: the HMAC in base64) which marks the login as a token login. :func:`install`
wraps ``authenticator_scram``: for a connection whose password is a ``TokenHmac`` it
returns a :class:`TokenScramAuthenticator`, which runs tokensvc's
:class:`~tokensvc.scram.client.ScramClient` with the extension; for any other password
it returns what aiokafka made before, so ordinary user logins behave exactly as without
it. The wrapped method is a name of aiokafka's connection class, not a documented hook
(tested with aiokafka 0.14); :func:`install` raises when it is missing rather than
leave token logins unsent.

tokensvc brokers with ``delegation.token.implicit.login.enable=true`` (the default) also
accept a token login without the extension, so plain aiokafka settings (token id and
HMAC as user name and password) work there too (docs/clients.md); this plug-in is for
brokers that need the extension (Apache Kafka, or implicit login turned off).

Use :func:`token_login_config` to get the keyword arguments (it installs the wrapper)::

    AIOKafkaConsumer(topic, bootstrap_servers=..., security_protocol="SASL_PLAINTEXT",
                     **token_login_config(token_id, hmac_b64))

This module owns only that glue. It never logs the HMAC (``TokenHmac``'s repr hides it).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from aiokafka.conn import AIOKafkaConnection
from aiokafka.errors import SaslAuthenticationFailed

from tokensvc.kafka_python_token import TOKEN_EXTENSIONS, TokenHmac, login_keys
from tokensvc.scram.client import ScramClient, ScramClientState
from tokensvc.scram.formatter import ScramMechanism
from tokensvc.scram.messages import ScramAuthenticationError

__all__ = ["TokenHmac", "TokenScramAuthenticator", "install", "token_login_config"]

_MECHANISMS = tuple(m.mechanism_name for m in ScramMechanism)
_install_lock = threading.Lock()
# aiokafka's own AIOKafkaConnection.authenticator_scram, kept by install().
_aiokafka_scram: list[Callable[[AIOKafkaConnection], Any]] = []


class TokenScramAuthenticator:
    """aiokafka SASL authenticator: SCRAM with ``tokenauth=true`` (tokensvc's client).

    aiokafka awaits :meth:`step` with the server's last message (None at first) until it
    returns None; each other answer is ``(message, expect_response)``."""

    def __init__(self, mechanism: str, token_id: str, hmac_b64: str) -> None:
        self.token_id = token_id
        self._client = ScramClient(ScramMechanism.from_name(mechanism), token_id, hmac_b64,
                                   extensions=TOKEN_EXTENSIONS)

    async def step(self, payload: bytes | None) -> tuple[bytes, bool] | None:
        state = self._client.state
        try:
            if state is ScramClientState.SEND_CLIENT_FIRST:
                return self._client.first_message(), True
            if state is ScramClientState.RECEIVE_SERVER_FIRST:
                # PBKDF2 off the event loop, as aiokafka's own SCRAM does.
                final = await asyncio.get_running_loop().run_in_executor(
                    None, self._client.final_message, payload or b"")
                return final, True
            if state is ScramClientState.RECEIVE_SERVER_FINAL:
                self._client.verify_server_final(payload or b"")
                return None
        except ScramAuthenticationError as exc:
            raise SaslAuthenticationFailed(
                f"delegation token login as {self.token_id} failed ({exc.reason})") from None
        raise SaslAuthenticationFailed(
            f"delegation token login as {self.token_id} has nothing more to send")


def _token_aware_scram(connection: AIOKafkaConnection) -> Any:
    password = connection._sasl_plain_password
    if not isinstance(password, TokenHmac):
        return _aiokafka_scram[0](connection)
    return TokenScramAuthenticator(connection._sasl_mechanism, connection._sasl_plain_username,
                                   str(password))


def install() -> None:
    """Wrap aiokafka's SCRAM authenticator factory so that ``TokenHmac`` passwords log in
    as delegation tokens (idempotent)."""
    with _install_lock:
        current = getattr(AIOKafkaConnection, "authenticator_scram", None)
        if current is _token_aware_scram:
            return
        if current is None:
            raise RuntimeError("this aiokafka has no AIOKafkaConnection.authenticator_scram, "
                               "which tokensvc.aiokafka_token wraps (tested with 0.14)")
        _aiokafka_scram[:] = [current]
        AIOKafkaConnection.authenticator_scram = _token_aware_scram


def token_login_config(
    token_id: str, hmac: bytes | str, mechanism: str = "SCRAM-SHA-512"
) -> dict[str, Any]:
    """aiokafka keyword arguments that log in with a delegation token.

    ``hmac`` is the raw HMAC or its base64 text (what ``kafka-delegation-token`` prints).
    Add ``security_protocol`` (SASL_SSL or SASL_PLAINTEXT) and any TLS settings yourself.
    """
    keys = login_keys(token_id, hmac, mechanism)
    install()
    return keys
