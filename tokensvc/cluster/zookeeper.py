"""The local cluster's managed ZooKeeper: secure by default (its certificates, SASL user,
client JAAS file and ``zookeeper-client.properties``, the root's ACL), one node or an
ensemble, and the ``zookeeper`` entry of ``cluster.json``. Never writes a ZooKeeper
credential anywhere but the 0600 JAAS files.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokensvc import devcerts
from tokensvc.cluster.errors import ClusterError
from tokensvc.cluster.files import _write_private
from tokensvc.cluster.layout import (
    ZK_CLIENT_JAAS,
    ZK_CLIENT_PROPERTIES,
    ZK_SASL_USER,
    ZK_TLS_DIR,
)
from tokensvc.core.zk_security import NETTY_SOCKET, jaas_client_section
from tokensvc.properties import properties_text
from zk.client import ZkSettings, ZooKeeperUnavailable, open_client
from zk.server import (
    DEFAULT_MAX_SESSION_TIMEOUT_MS,
    ManagedZooKeeper,
    ZkServerSecurity,
    ZooKeeperEnsemble,
)


def _secure_zookeeper_files(directory: Path) -> tuple[ZkServerSecurity, dict[str, str]]:
    """Certificates, the SASL user and the client JAAS file of a secure managed ZooKeeper;
    returns the server's security and the ZooKeeper keys brokers and tools use."""
    certs = devcerts.generate_zookeeper(directory / ZK_TLS_DIR)
    password = secrets.token_urlsafe(24)
    jaas = directory / ZK_CLIENT_JAAS
    _write_private(jaas, jaas_client_section(ZK_SASL_USER, password))
    security = ZkServerSecurity(
        key_store=certs.server,
        trust_store=certs.ca,
        sasl_users={ZK_SASL_USER: password},
        quorum_tls=True,
        probe_key_store=certs.client,
    )
    props = {
        "zookeeper.ssl.client.enable": "true",
        "zookeeper.clientCnxnSocket": NETTY_SOCKET,
        "zookeeper.ssl.keystore.type": "PEM",
        "zookeeper.ssl.keystore.location": str(certs.client),
        "zookeeper.ssl.truststore.type": "PEM",
        "zookeeper.ssl.truststore.location": str(certs.ca),
        "zookeeper.sasl.jaas.file": str(jaas),
        "zookeeper.set.acl": "true",
    }
    return security, props


def _managed_zookeeper(
    directory: Path, nodes: int, heap_mb: int, max_session_timeout_ms: int,
    die_with_parent: bool, security: ZkServerSecurity | None,
) -> ManagedZooKeeper | ZooKeeperEnsemble:
    if nodes == 1:
        return ManagedZooKeeper(directory / "zookeeper", heap_mb=heap_mb,
                                max_session_timeout_ms=max_session_timeout_ms,
                                die_with_parent=die_with_parent, security=security)
    if nodes < 3 or nodes % 2 == 0:
        raise ClusterError(f"a ZooKeeper ensemble needs an odd number of nodes >= 3, not {nodes}")
    return ZooKeeperEnsemble(directory / "zookeeper", nodes, die_with_parent=die_with_parent,
                             security=security)


def _write_zk_client_config(directory: Path, connect: str, zk_props: Mapping[str, str]) -> Path | None:
    """``zookeeper-client.properties``: the connect string and the brokers' ZooKeeper
    security keys, for tools (``--zk-tls-config-file``); None when there are none."""
    path = directory / ZK_CLIENT_PROPERTIES
    if not zk_props:
        path.unlink(missing_ok=True)
        return None
    _write_private(path, properties_text({"zookeeper.connect": connect, **zk_props}))
    return path


def _protect_root(settings: ZkSettings) -> None:
    """The managed ZooKeeper is ours: its root gets the declared ACL too (the brokers'
    identity ALL, the world READ), so no session but the brokers' creates a znode there."""
    try:
        client = open_client(settings)
    except ZooKeeperUnavailable as exc:
        raise ClusterError(f"could not reach the managed ZooKeeper: {exc}") from None
    try:
        client.set_acls("/", client.acl_for("/"))
    finally:
        client.stop()
        client.close()


def _max_session_timeout_ms(overrides: Mapping[str, str]) -> int:
    """The managed ZooKeeper's maxSessionTimeout: at least what the brokers will ask for."""
    asked = overrides.get("zookeeper.session.timeout.ms", "")
    wanted = int(asked) if asked.strip().isdigit() else 0
    return max(DEFAULT_MAX_SESSION_TIMEOUT_MS, wanted)


def _zookeeper_info(connect: str, server: ManagedZooKeeper | ZooKeeperEnsemble | None,
                    client_config: Path | None, zk_props: Mapping[str, str]) -> dict[str, Any]:
    """cluster.json's ``zookeeper``: where it is and where a tool finds what it needs to
    connect (never a credential)."""
    nodes = getattr(server, "nodes", [server] if server is not None else [])
    info: dict[str, Any] = {
        "connect": connect,
        "pid": nodes[0].pid if nodes else None,
        "heap_mb": nodes[0].heap_mb if nodes else None,
    }
    if len(nodes) > 1:
        info["pids"] = [node.pid for node in nodes]
    if client_config is not None:
        info["client_config"] = str(client_config)
        info["tls"] = zk_props.get("zookeeper.ssl.client.enable") == "true"
        info["sasl"] = "zookeeper.sasl.jaas.file" in zk_props
        info["set_acl"] = zk_props.get("zookeeper.set.acl") == "true"
    return info
