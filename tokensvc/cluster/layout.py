"""Names of the local cluster: the ``DIR`` layout's files, its users, its timeouts and
the keys ``--set`` may not change, and where a broker runs (:class:`Placement`). Nothing
here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

HOST = "127.0.0.1"
ADMIN_USER = "admin"
INTER_BROKER_USER = "broker"
SCRAM_ITERATIONS = 4096
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
CLUSTER_FILE = "cluster.json"
ADMIN_PROPERTIES = "admin.properties"
ZK_CLIENT_PROPERTIES = "zookeeper-client.properties"
ZK_CLIENT_JAAS = "zookeeper-client.jaas"
ZK_TLS_DIR = "zookeeper-tls"
# The brokers' (and tools') SASL user on the managed ZooKeeper.
ZK_SASL_USER = "tokensvc"

# Keys the cluster sets per broker; --set may not change them (the cluster would lose
# track of its brokers).
MANAGED_KEYS = frozenset({"broker.id", "listeners", "zookeeper.connect", "metrics.listener"})
# Any of these names the master key: when --set gives one, no key is generated.
MASTER_KEY_SOURCES = (
    "delegation.token.secret.key",
    "delegation.token.master.key",
    "delegation.token.secret.key.file",
    "delegation.token.secret.key.env",
)
_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass(frozen=True)
class Placement:
    """Where a broker runs when not on loopback: the address its listeners bind (with
    Kafka's usual ports, see :data:`PLACED_PORTS`) and the command prefix that starts it
    there (``ip netns exec NAME``: the partition harness, ``bench.netns``)."""

    host: str
    prefix: tuple[str, ...] = ()


# plain, inter-broker, metrics, TLS: the ports of a broker that has an address of its own.
PLACED_PORTS = (9092, 9093, 9404, 9094)
