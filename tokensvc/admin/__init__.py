"""tokensvc's blocking Kafka-protocol admin client (used by the CLI and by tests).

``client`` (:class:`AdminClient`: bootstrap failover, retries, one method per admin
operation), ``connection`` (one logged-in broker connection: TLS, ApiVersions, SCRAM),
``results`` (typed results, :class:`AdminError`, wire-body translation), ``propagation``
("done on every broker": wait until every live broker serves a token change). It speaks only
standard Kafka protocol and must not import click.
"""

from tokensvc.admin.client import AdminClient
from tokensvc.admin.propagation import (
    Propagation,
    PropagationTimeout,
    expiry_visible,
    token_logs_in,
    token_refused,
    tokens_absent,
)
from tokensvc.admin.results import (
    AdminError,
    BrokerNode,
    BrokerUnreachableError,
    ClusterDescription,
    Revocation,
    ScramCredentialInfo,
    TokenDescription,
)

__all__ = [
    "AdminClient",
    "AdminError",
    "BrokerNode",
    "BrokerUnreachableError",
    "ClusterDescription",
    "Propagation",
    "PropagationTimeout",
    "Revocation",
    "ScramCredentialInfo",
    "TokenDescription",
    "expiry_visible",
    "token_logs_in",
    "token_refused",
    "tokens_absent",
]
