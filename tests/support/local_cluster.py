"""Reading a ``tokensvc.cluster.LocalCluster`` (broker processes) from tests.

Owns how a test finds a broker process's client address, reads one of its exported
metrics and opens the cluster admin's client, and the type of the fixtures' cluster
factories. It must not start, stop or
change the cluster: the fixtures of tests/integration/conftest.py do.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable

from tokensvc.admin import AdminClient
from tokensvc.client_config import ClientConfig, load_client_config
from tokensvc.cluster import LocalCluster

#: What ``cluster_factory`` and ``module_cluster_factory`` (tests/integration/conftest.py)
#: hand a test: start a cluster (brokers, overrides, tls, zookeeper, users), get it running.
ClusterFactory = Callable[..., LocalCluster]


def admin_client(cluster: LocalCluster, *, address: str | None = None,
                 config: ClientConfig | None = None, timeout_s: float = 30.0) -> AdminClient:
    """An admin client of the cluster's admin user (its properties file) or of ``config``,
    on every broker of the cluster or only on ``address`` ("host:port")."""
    return AdminClient(address or cluster.info["bootstrap_servers"],
                       config or load_client_config(cluster.info["admin"]["properties"]),
                       timeout_s=timeout_s)


def broker_address(cluster: LocalCluster, broker_id: int) -> tuple[str, int]:
    """``broker_id``'s SASL_PLAINTEXT listener as (host, port)."""
    host, _, port = cluster.broker_info(broker_id)["listeners"]["SASL_PLAINTEXT"].rpartition(":")
    return host, int(port)


def broker_metric(cluster: LocalCluster, broker_id: int, name: str) -> float:
    """The value ``broker_id`` exports for metric ``name`` now (fails the test if none)."""
    url = f"http://{cluster.broker_info(broker_id)['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as page:
        for line in page.read().decode().splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
    raise AssertionError(f"{name} is not exported")
