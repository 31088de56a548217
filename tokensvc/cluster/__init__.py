"""A local tokensvc cluster on loopback: a managed ZooKeeper and N broker processes.

Owns the ``DIR`` layout of ``tokensvc cluster up/down`` and the processes behind it:

- ``DIR/zookeeper/``: the managed ZooKeeper (unless an external ``zookeeper`` is given):
  secure by default -- a TLS-only client port that requires client certificates, SASL
  enforced, TLS between ensemble nodes -- with its certificates in ``DIR/zookeeper-tls/``
  (:func:`tokensvc.devcerts.generate_zookeeper`); ``insecure_zookeeper`` keeps the plain
  port of earlier releases,
- ``DIR/zookeeper-client.properties`` and ``DIR/zookeeper-client.jaas`` (mode 0600): the
  ZooKeeper keys the brokers use (TLS files, the JAAS file of the SASL login,
  ``zookeeper.set.acl``), which every tool takes as ``--zk-tls-config-file``
  (:meth:`LocalCluster.zk_settings` reads them); ``cluster.json`` names the file and holds
  no ZooKeeper credential,
- ``DIR/broker-<id>/server.properties`` (mode 0600: it holds the master key and the
  inter-broker password), ``DIR/broker-<id>/broker.log`` (the broker's stdout and stderr)
  and ``DIR/broker-<id>/snapshot/`` (its token cache snapshot, ``token.cache.snapshot.dir``),
- ``DIR/tls/``: dev certificates (:mod:`tokensvc.devcerts`) when TLS is on,
- ``DIR/audit/``: the brokers' audit logs,
- ``DIR/admin.properties`` (mode 0600): Kafka client properties of the super user ``admin``,
- ``DIR/cluster.json`` (mode 0600): how to reach everything (see ``docs/cluster.md``).

Before any broker starts, the SCRAM credentials of ``admin`` and of the inter-broker user
``broker`` are written straight into ZooKeeper. Brokers run as their own sessions
(``tokensvc broker --config ...``); :meth:`LocalCluster.up` returns once every broker answers
an ApiVersions request on its SASL_PLAINTEXT listener, and fails with the tail of a broker's
log if one exits first. :meth:`LocalCluster.down` stops brokers (SIGTERM, then SIGKILL after
a grace period) and then the managed ZooKeeper; it works from ``cluster.json`` alone, so
another process can stop what ``up`` started.

Must not: write the master key anywhere but the brokers' ``server.properties``, print or log
passwords (they live only in the 0600 files above), or signal a process it cannot prove it
started (a pid is signalled only if its command line still names this cluster's files).

The package's modules: ``layout`` (names), ``files`` (cluster.json and private files),
``processes`` (supervision), ``probe`` (does a broker answer), ``zookeeper`` (the managed
ZooKeeper), ``prepare`` (what ``up`` writes), ``local`` (:class:`LocalCluster`).
"""

from __future__ import annotations

from tokensvc.cluster.errors import ClusterError
from tokensvc.cluster.files import check_overrides, load_info
from tokensvc.cluster.layout import (
    ADMIN_PROPERTIES,
    ADMIN_USER,
    CLUSTER_FILE,
    HOST,
    INTER_BROKER_USER,
    MANAGED_KEYS,
    PLACED_PORTS,
    READY_TIMEOUT_S,
    STOP_GRACE_S,
    ZK_CLIENT_PROPERTIES,
    Placement,
)
from tokensvc.cluster.local import LocalCluster, down
from tokensvc.cluster.probe import answers_api_versions
from tokensvc.cluster.processes import stop_process

__all__ = [
    "ADMIN_PROPERTIES",
    "ADMIN_USER",
    "CLUSTER_FILE",
    "HOST",
    "INTER_BROKER_USER",
    "MANAGED_KEYS",
    "PLACED_PORTS",
    "READY_TIMEOUT_S",
    "STOP_GRACE_S",
    "ZK_CLIENT_PROPERTIES",
    "ClusterError",
    "LocalCluster",
    "Placement",
    "answers_api_versions",
    "check_overrides",
    "down",
    "load_info",
    "stop_process",
]
