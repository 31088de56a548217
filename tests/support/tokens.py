"""A token's client settings and one blocking token login, as a job configures them.

Owns the ``sasl.jaas.config`` a worker writes for a delegation token (SCRAM-SHA-512,
``tokenauth=true``) turned into the admin client's settings, and one login with them on
a fresh connection: True when the broker lets it in, False when it refuses it with
SASL_AUTHENTICATION_FAILED; any other failure fails the test.
"""

from __future__ import annotations

import time

from tokensvc.admin.connection import BrokerConnection
from tokensvc.admin.results import AdminError, TokenDescription
from tokensvc.client_config import ClientConfig, client_config_from_properties
from tokensvc.core.errors import Errors


def token_client_config(token: TokenDescription) -> ClientConfig:
    """The client settings of a job that logs in with ``token``."""
    return client_config_from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                            f'username="{token.token_id}" password="{token.hmac_b64}" '
                            "tokenauth=true;"})


def token_logs_in(address: str, token: TokenDescription, client_id: str) -> bool:
    """One login with ``token`` on ``address`` ("host:port"), within 10 s."""
    conn = BrokerConnection(address, token_client_config(token), client_id=client_id)
    try:
        conn.open(time.monotonic() + 10)
        return True
    except AdminError as exc:
        assert exc.error == Errors.SASL_AUTHENTICATION_FAILED, exc
        return False
    finally:
        conn.close()
