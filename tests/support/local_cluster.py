"""Reading a ``tokensvc.cluster.LocalCluster`` (broker processes) from tests.

Owns how a test finds a broker process's client address, reads one of its exported
metrics and opens the cluster admin's client, and the type of the fixtures' cluster
factories. It must not start, stop or
change the cluster: the fixtures of tests/integration/conftest.py do.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

from tokensvc.admin import AdminClient, AdminError
from tokensvc.admin.connection import BrokerConnection
from tokensvc.client_config import ClientConfig, client_config_from_properties, load_client_config
from tokensvc.cluster import LocalCluster
from tokensvc.core.errors import Errors

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


def user_config(user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> ClientConfig:
    """The client settings of ``user`` logging in with her password."""
    return client_config_from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                            f'username="{user}" password="{password}";'})


def addresses(cluster: LocalCluster) -> list[str]:
    """Every broker's SASL_PLAINTEXT listener ("host:port")."""
    return [b["listeners"]["SASL_PLAINTEXT"] for b in cluster.info["brokers"]]


def logs_in(address: str, config: ClientConfig, deadline: float) -> bool:
    """One login on a fresh connection: True when let in, False when refused with
    SASL_AUTHENTICATION_FAILED; any other failure is raised."""
    conn = BrokerConnection(address, config, client_id="served-everywhere")
    try:
        conn.open(min(deadline, time.monotonic() + 10))
        return True
    except AdminError as exc:
        if exc.error != Errors.SASL_AUTHENTICATION_FAILED:
            raise
        return False
    finally:
        conn.close()


def _wait_everywhere(cluster: LocalCluster, config: ClientConfig, served: bool,
                     timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for address in addresses(cluster):
        while logs_in(address, config, deadline) != served:
            if time.monotonic() > deadline:
                raise AssertionError(f"{address} {'still refuses' if served else 'still lets in'}"
                                     f" the login after {timeout_s}s")
            time.sleep(0.05)


def wait_served_everywhere(cluster: LocalCluster, config: ClientConfig,
                           timeout_s: float = 20.0) -> None:
    """Wait, bounded, until every broker lets ``config`` log in.

    A credential or token written through one broker is read-your-writes there only; the
    others serve it once their view has it (the consistency contract: within
    zookeeper.max.staleness.ms). A test that goes on to another broker waits here first.
    """
    _wait_everywhere(cluster, config, True, timeout_s)


def wait_refused_everywhere(cluster: LocalCluster, config: ClientConfig,
                            timeout_s: float = 20.0) -> None:
    """Wait, bounded, until every broker refuses ``config``'s login
    (SASL_AUTHENTICATION_FAILED): a deleted credential or an ended token has reached
    every broker's view. AssertionError naming the broker after ``timeout_s``."""
    _wait_everywhere(cluster, config, False, timeout_s)


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
