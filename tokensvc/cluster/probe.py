"""Does a broker answer: the readiness probe of the local cluster.

It opens the admin client's connection (:class:`tokensvc.admin.connection.BrokerConnection`)
without a login: an ApiVersions exchange that succeeds means the broker serves. Must not
log in or send anything but ApiVersions.
"""

from __future__ import annotations

import time

from tokensvc.admin.connection import BrokerConnection
from tokensvc.client_config import ClientConfig
from tokensvc.core.errors import KafkaError


def answers_api_versions(address: str, timeout: float = 2.0) -> bool:
    """True if the broker at ``host:port`` answers ApiVersions without error."""
    connection = BrokerConnection(address, ClientConfig(), client_id="cluster-up")
    try:
        connection.open(time.monotonic() + timeout)
    except (OSError, KafkaError, ValueError):
        return False
    connection.close()
    return True
