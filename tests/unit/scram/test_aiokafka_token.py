"""tokensvc.aiokafka_token: aiokafka's SCRAM made token-aware, exchanged with tokensvc's
own ScramServer (no network): the extension is sent, the exchange completes, a bad
server answer is aiokafka's SaslAuthenticationFailed, and user logins stay aiokafka's."""

from __future__ import annotations

import asyncio
import base64
from types import SimpleNamespace

import pytest
from aiokafka.conn import AIOKafkaConnection, ScramAuthenticator
from aiokafka.errors import SaslAuthenticationFailed

from tokensvc.aiokafka_token import (
    TokenHmac,
    TokenScramAuthenticator,
    install,
    token_login_config,
)
from tokensvc.core.clock import FakeClock
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.scram import (
    ScramCredential,
    ScramMechanism,
    ScramServer,
    TokenSalt,
    derive_credential,
)

NOW = 1_700_000_000_000
TOKEN_ID = "Ab3dEf-hIjKlMnOpQrStUv"
HMAC_B64 = base64.b64encode(bytes(range(64))).decode()
OWNER = KafkaPrincipal.user("alice")


class OneToken:
    """A CredentialLookup that knows one token and no users."""

    def __init__(self, mechanism: ScramMechanism) -> None:
        self.credential = derive_credential(HMAC_B64, mechanism, 4096, b"salt-of-the-token")
        self.info = TokenInformation(TOKEN_ID, OWNER, OWNER, (), NOW, NOW + 60_000, NOW + 600_000)

    def user_credential(self, username: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return None

    def token_salt(self, token_id: str, mechanism: ScramMechanism) -> TokenSalt | None:
        if token_id != TOKEN_ID:
            return None
        return TokenSalt(self.credential.salt, self.credential.iterations, self.info)

    def token_credential(self, token_id: str, mechanism: ScramMechanism
                         ) -> tuple[ScramCredential, TokenInformation] | None:
        return (self.credential, self.info) if token_id == TOKEN_ID else None

    def derived_count(self) -> int:
        return 0


async def run_exchange(authenticator: TokenScramAuthenticator, server: ScramServer,
                       tamper_final: bool = False) -> list[bytes]:
    """Drive the authenticator as aiokafka's connection does; the client's messages."""
    sent: list[bytes] = []
    payload = None
    while (step := await authenticator.step(payload)) is not None:
        message, expect_response = step
        assert expect_response
        sent.append(message)
        payload = server.evaluate(message)
        if tamper_final and server.complete:
            payload = b"v=" + base64.b64encode(b"\0" * 64)
    return sent


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_token_login_sends_tokenauth_and_authenticates_as_the_owner(
    mechanism: ScramMechanism
) -> None:
    server = ScramServer(mechanism, OneToken(mechanism), FakeClock(NOW))
    authenticator = TokenScramAuthenticator(mechanism.mechanism_name, TOKEN_ID, HMAC_B64)

    sent = asyncio.run(run_exchange(authenticator, server))

    assert len(sent) == 2
    assert sent[0].startswith(f"n,,n={TOKEN_ID},r=".encode())
    assert sent[0].endswith(b",tokenauth=true")
    assert server.extensions == {"tokenauth": "true"}
    assert server.token_authenticated and server.principal == KafkaPrincipal(
        "User", "alice", True)


def test_a_server_final_with_a_wrong_signature_is_saslauthenticationfailed() -> None:
    mechanism = ScramMechanism.SCRAM_SHA_512
    server = ScramServer(mechanism, OneToken(mechanism), FakeClock(NOW))
    authenticator = TokenScramAuthenticator(mechanism.mechanism_name, TOKEN_ID, HMAC_B64)

    with pytest.raises(SaslAuthenticationFailed) as failed:
        asyncio.run(run_exchange(authenticator, server, tamper_final=True))

    assert TOKEN_ID in str(failed.value)
    assert HMAC_B64 not in str(failed.value)


def connection(password: str) -> SimpleNamespace:
    """What AIOKafkaConnection.authenticator_scram reads of its connection."""
    return SimpleNamespace(_loop=None, _sasl_mechanism="SCRAM-SHA-256",
                           _sasl_plain_username=TOKEN_ID, _sasl_plain_password=password)


def test_install_is_idempotent_and_leaves_user_logins_to_aiokafka() -> None:
    install()
    wrapped = AIOKafkaConnection.authenticator_scram
    install()

    assert AIOKafkaConnection.authenticator_scram is wrapped
    assert isinstance(wrapped(connection("a user's password")), ScramAuthenticator)
    token_login = wrapped(connection(TokenHmac(HMAC_B64)))
    assert isinstance(token_login, TokenScramAuthenticator)
    assert token_login.token_id == TOKEN_ID


def test_token_login_config_takes_raw_or_base64_hmac_and_hides_it() -> None:
    raw = base64.b64decode(HMAC_B64)

    config = token_login_config(TOKEN_ID, raw, "SCRAM-SHA-256")

    assert config == {"sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": TOKEN_ID,
                      "sasl_plain_password": HMAC_B64}
    assert isinstance(config["sasl_plain_password"], TokenHmac)
    assert HMAC_B64 not in repr(config)
    assert token_login_config(TOKEN_ID, HMAC_B64) == {**config, "sasl_mechanism": "SCRAM-SHA-512"}
    with pytest.raises(ValueError, match="SCRAM-SHA-256, SCRAM-SHA-512"):
        token_login_config(TOKEN_ID, HMAC_B64, "PLAIN")
