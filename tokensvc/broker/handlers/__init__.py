"""Request handlers, one module per API family, and THE table that routes to them.

``HANDLERS`` maps every ApiKey the broker serves to its :class:`ApiHandler`; it is
the only place a handler is registered. See :mod:`tokensvc.broker.handlers.base` for
what a handler is.
"""

from __future__ import annotations

from tokensvc.broker.handlers import (
    acls,
    client_quotas,
    cluster,
    envelope,
    sasl,
    scram_users,
    tokens,
)
from tokensvc.broker.handlers.base import ApiHandler, simple_error
from tokensvc.protocol.api import ApiKey

HANDLERS: dict[int, ApiHandler] = {
    ApiKey.METADATA: cluster.METADATA,
    ApiKey.SASL_HANDSHAKE: sasl.SASL_HANDSHAKE,
    ApiKey.API_VERSIONS: cluster.API_VERSIONS,
    ApiKey.DESCRIBE_ACLS: acls.DESCRIBE_ACLS,
    ApiKey.CREATE_ACLS: acls.CREATE_ACLS,
    ApiKey.DELETE_ACLS: acls.DELETE_ACLS,
    ApiKey.SASL_AUTHENTICATE: sasl.SASL_AUTHENTICATE,
    ApiKey.CREATE_DELEGATION_TOKEN: tokens.CREATE_DELEGATION_TOKEN,
    ApiKey.RENEW_DELEGATION_TOKEN: tokens.RENEW_DELEGATION_TOKEN,
    ApiKey.EXPIRE_DELEGATION_TOKEN: tokens.EXPIRE_DELEGATION_TOKEN,
    ApiKey.DESCRIBE_DELEGATION_TOKEN: tokens.DESCRIBE_DELEGATION_TOKEN,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: client_quotas.DESCRIBE_CLIENT_QUOTAS,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: scram_users.DESCRIBE_USER_SCRAM_CREDENTIALS,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: scram_users.ALTER_USER_SCRAM_CREDENTIALS,
    ApiKey.ENVELOPE: envelope.ENVELOPE,
    ApiKey.DESCRIBE_CLUSTER: cluster.DESCRIBE_CLUSTER,
}

__all__ = ["HANDLERS", "ApiHandler", "simple_error"]
