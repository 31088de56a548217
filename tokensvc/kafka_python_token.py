"""Delegation-token login for kafka-python clients (producer, consumer, KafkaAdminClient).

A delegation token logs in with SCRAM whose client-first message carries Kafka's
``tokenauth=true`` extension; kafka-python's own SCRAM cannot send extensions, and its
clients reject configuration keys they do not know. So the token travels in the keys
kafka-python already has: ``sasl_plain_username`` is the token id and
``sasl_plain_password`` is a :class:`TokenHmac` (a ``str``: the HMAC in base64) which
marks the login as a token login. :func:`install` registers :class:`TokenAwareScram` for
``SCRAM-SHA-256`` and ``SCRAM-SHA-512`` in kafka-python's mechanism registry: with a
``TokenHmac`` password it runs tokensvc's :class:`~tokensvc.scram.client.ScramClient`
with the extension; with any other password it hands the exchange to the mechanism that
was registered before, so ordinary user logins behave exactly as without it.

tokensvc brokers with ``delegation.token.implicit.login.enable=true`` (the default) also
accept a token login without the extension, so plain kafka-python settings (token id and
HMAC as user name and password) work there too (docs/clients.md); this plug-in is for
brokers that need the extension (Apache Kafka, or implicit login turned off).

Use :func:`token_login_config` to get the keyword arguments (it installs the mechanism)::

    KafkaAdminClient(bootstrap_servers=..., security_protocol="SASL_PLAINTEXT",
                     **token_login_config(token_id, hmac_b64))

This module owns only that glue. It never logs the HMAC (``TokenHmac``'s repr hides it).
"""

from __future__ import annotations

import base64
import threading
from typing import Any

from kafka.errors import KafkaConfigurationError, SaslAuthenticationFailedError
from kafka.net import sasl as kafka_sasl
from kafka.net.sasl.abc import SaslMechanism

from tokensvc.scram.client import ScramClient, ScramClientState
from tokensvc.scram.formatter import ScramMechanism
from tokensvc.scram.messages import ScramAuthenticationError

TOKEN_EXTENSIONS = {"tokenauth": "true"}
_MECHANISMS = tuple(m.mechanism_name for m in ScramMechanism)
_install_lock = threading.Lock()
# mechanism name -> the class that was registered before install() (used for user logins).
_previous: dict[str, type[SaslMechanism]] = {}


class TokenHmac(str):
    """A delegation token's HMAC (standard base64), marking a SCRAM password as a token."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "TokenHmac('***')"


class TokenAwareScram(SaslMechanism):
    """kafka-python SASL mechanism: SCRAM with ``tokenauth=true`` for :class:`TokenHmac`
    passwords; the previously registered SCRAM mechanism for anything else."""

    def __init__(self, **config: Any) -> None:
        name = config.get("sasl_mechanism")
        password = config.get("sasl_plain_password")
        self._inner: SaslMechanism | None = None
        if not isinstance(password, TokenHmac):
            self._inner = _previous[name](**config)
            return
        username = config.get("sasl_plain_username")
        if not username:
            raise KafkaConfigurationError("sasl_plain_username must be the delegation token id")
        self.token_id = username
        self.mechanism_name = name
        self._client = ScramClient(
            ScramMechanism.from_name(name), username, str(password), extensions=TOKEN_EXTENSIONS
        )
        self._next_message: bytes | None = self._client.first_message()

    def auth_bytes(self) -> bytes:
        if self._inner is not None:
            return self._inner.auth_bytes()
        if self._next_message is None:
            raise SaslAuthenticationFailedError("SCRAM token login has nothing more to send")
        message, self._next_message = self._next_message, None
        return message

    def receive(self, auth_bytes: bytes) -> bool:
        if self._inner is not None:
            return self._inner.receive(auth_bytes)
        try:
            if self._client.state is ScramClientState.RECEIVE_SERVER_FIRST:
                self._next_message = self._client.final_message(auth_bytes)
            else:
                self._client.verify_server_final(auth_bytes)
        except ScramAuthenticationError as exc:
            raise SaslAuthenticationFailedError(
                f"delegation token login as {self.token_id} failed ({exc.reason})"
            ) from None
        return self.is_done()

    def is_done(self) -> bool:
        if self._inner is not None:
            return self._inner.is_done()
        return self._client.state in (ScramClientState.COMPLETE, ScramClientState.FAILED)

    def is_authenticated(self) -> bool:
        if self._inner is not None:
            return self._inner.is_authenticated()
        return self._client.complete

    def auth_details(self) -> str:
        if self._inner is not None:
            return self._inner.auth_details()
        if not self._client.complete:
            raise RuntimeError("Not authenticated yet!")
        return f"Authenticated with delegation token {self.token_id} via SASL / {self.mechanism_name}"


def install() -> None:
    """Register :class:`TokenAwareScram` for SCRAM-SHA-256/512 in kafka-python (idempotent)."""
    with _install_lock:
        for name in _MECHANISMS:
            current = kafka_sasl.get_sasl_mechanism(name)
            if current is TokenAwareScram:
                continue
            _previous[name] = current
            kafka_sasl.register_sasl_mechanism(name, TokenAwareScram, overwrite=True)


def token_login_config(
    token_id: str, hmac: bytes | str, mechanism: str = "SCRAM-SHA-512"
) -> dict[str, Any]:
    """kafka-python keyword arguments that log in with a delegation token.

    ``hmac`` is the raw HMAC or its base64 text (what ``kafka-delegation-token`` prints).
    Add ``security_protocol`` (SASL_SSL or SASL_PLAINTEXT) and any TLS settings yourself.
    """
    keys = login_keys(token_id, hmac, mechanism)
    install()
    return keys


def login_keys(token_id: str, hmac: bytes | str, mechanism: str) -> dict[str, Any]:
    """The SASL keys kafka-python and aiokafka share (``sasl_mechanism``,
    ``sasl_plain_username``, ``sasl_plain_password``), the HMAC as a :class:`TokenHmac`."""
    if mechanism not in _MECHANISMS:
        raise ValueError(f"mechanism must be one of {', '.join(_MECHANISMS)}")
    if isinstance(hmac, bytes):
        hmac = base64.b64encode(hmac).decode("ascii")
    return {
        "sasl_mechanism": mechanism,
        "sasl_plain_username": token_id,
        "sasl_plain_password": TokenHmac(hmac),
    }
