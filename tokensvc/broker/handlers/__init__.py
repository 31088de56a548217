"""Request handlers, one module per API family, and THE table that routes to them.

``HANDLERS`` maps every ApiKey the broker serves to its :class:`ApiHandler`; it is
the only place a handler is registered. See :mod:`tokensvc.broker.handlers.base` for
what a handler is.
"""

from __future__ import annotations

from tokensvc.broker.handlers import acls, cluster, envelope, sasl, scram_users, tokens
from tokensvc.broker.handlers.base import ApiHandler, simple_error

HANDLERS: dict[int, ApiHandler] = {
    3: cluster.METADATA,
    17: sasl.SASL_HANDSHAKE,
    18: cluster.API_VERSIONS,
    29: acls.DESCRIBE_ACLS,
    30: acls.CREATE_ACLS,
    31: acls.DELETE_ACLS,
    36: sasl.SASL_AUTHENTICATE,
    38: tokens.CREATE_DELEGATION_TOKEN,
    39: tokens.RENEW_DELEGATION_TOKEN,
    40: tokens.EXPIRE_DELEGATION_TOKEN,
    41: tokens.DESCRIBE_DELEGATION_TOKEN,
    50: scram_users.DESCRIBE_USER_SCRAM_CREDENTIALS,
    51: scram_users.ALTER_USER_SCRAM_CREDENTIALS,
    58: envelope.ENVELOPE,
    60: cluster.DESCRIBE_CLUSTER,
}

__all__ = ["HANDLERS", "ApiHandler", "simple_error"]
