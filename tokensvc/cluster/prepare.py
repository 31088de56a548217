"""What ``up`` writes before any broker starts: the two SCRAM users in ZooKeeper, the
brokers' TLS material, every broker's ``server.properties``, ``admin.properties``, and the
``cluster.json`` dict. Must not start a process.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokensvc import devcerts
from tokensvc.cluster.errors import ClusterError
from tokensvc.cluster.files import _previous_master_key, _write_private
from tokensvc.cluster.layout import (
    _SCRAM_LOGIN,
    ADMIN_PROPERTIES,
    ADMIN_USER,
    HOST,
    INTER_BROKER_USER,
    MASTER_KEY_SOURCES,
    PLACED_PORTS,
    SCRAM_ITERATIONS,
    Placement,
)
from tokensvc.cluster.zookeeper import _protect_root, _zookeeper_info
from tokensvc.core.configdef import ConfigError
from tokensvc.jvm import free_port
from tokensvc.properties import properties_text
from zk.client import ZooKeeperUnavailable, settings_from_file
from zk.credential_store import bootstrap_user
from zk.errors import StoreError
from zk.server import ManagedZooKeeper


def _free_ports(count: int, taken: set[int]) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(HOST)
        if port not in taken:
            taken.add(port)
            ports.append(port)
    return ports


def _prepare(
    directory: Path,
    brokers: int,
    zookeeper: str,
    zk_server: ManagedZooKeeper | None,
    overrides: dict[str, str],
    tls: bool,
    placements: Mapping[int, Placement] | None = None,
    zk_props: Mapping[str, str] | None = None,
    client_config: Path | None = None,
) -> dict[str, Any]:
    """Users in ZooKeeper, TLS material, every broker's server.properties, admin.properties;
    returns the cluster.json dict (pids not yet known)."""
    admin_password = secrets.token_urlsafe(24)
    broker_password = secrets.token_urlsafe(24)
    try:
        settings = settings_from_file(zookeeper, str(client_config) if client_config else None)
    except ConfigError as exc:
        raise ClusterError(f"--set: {exc}") from None
    if zk_server is not None and settings.security.set_acl:
        _protect_root(settings)
    for user, password in ((ADMIN_USER, admin_password), (INTER_BROKER_USER, broker_password)):
        try:
            bootstrap_user(settings, user, password, iterations=SCRAM_ITERATIONS)
        except (ZooKeeperUnavailable, StoreError) as exc:
            raise ClusterError(f"could not write the {user} user to ZooKeeper: {exc}") from exc

    certs = devcerts.generate(directory / "tls") if tls else None
    audit_dir = directory / "audit"
    audit_dir.mkdir(exist_ok=True)
    master_key: str | None = None
    if not any(key in overrides for key in MASTER_KEY_SOURCES):
        master_key = _previous_master_key(directory) or secrets.token_urlsafe(32)

    taken: set[int] = set()
    entries = []
    for broker_id in range(1, brokers + 1):
        broker_dir = directory / f"broker-{broker_id}"
        broker_dir.mkdir(exist_ok=True)
        placement = (placements or {}).get(broker_id)
        host = placement.host if placement else HOST
        plain, inter, metrics, ssl_port = PLACED_PORTS if placement else _free_ports(4, taken)
        listeners = {
            "SASL_PLAINTEXT": f"{host}:{plain}",
            "BROKER": f"{host}:{inter}",
        }
        if tls:
            listeners["SASL_SSL"] = f"{host}:{ssl_port}"
        props = {
            "broker.id": str(broker_id),
            "listeners": ",".join(f"{name}://{addr}" for name, addr in listeners.items()),
            "listener.security.protocol.map": (
                "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,BROKER:SASL_PLAINTEXT"
            ),
            "inter.broker.listener.name": "BROKER",
            "inter.broker.sasl.mechanism": "SCRAM-SHA-512",
            "inter.broker.sasl.username": INTER_BROKER_USER,
            "inter.broker.sasl.password": broker_password,
            "zookeeper.connect": zookeeper,
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "super.users": f"User:{ADMIN_USER};User:{INTER_BROKER_USER}",
            "authorizer.class.name": "tokensvc.authz.AclAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "audit.log.dir": str(audit_dir),
            "metrics.listener": f"{host}:{metrics}",
            # A restart loads the token cache from this snapshot, caught up from ZooKeeper.
            "token.cache.snapshot.dir": str(broker_dir / "snapshot"),
        }
        props.update(zk_props or {})
        if master_key is not None:
            props["delegation.token.secret.key"] = master_key
        if certs is not None:
            props.update(
                {
                    "ssl.keystore.type": "PEM",
                    "ssl.keystore.location": str(certs.broker),
                    "ssl.truststore.type": "PEM",
                    "ssl.truststore.location": str(certs.ca),
                }
            )
        props.update(overrides)
        config = broker_dir / "server.properties"
        _write_private(config, properties_text(props))
        log = broker_dir / "broker.log"
        entries.append(
            {
                "id": broker_id,
                "listeners": listeners,
                "config": str(config),
                "log": str(log),
                "pid": None,
                "metrics": f"{host}:{metrics}",
                "prefix": list(placement.prefix) if placement else [],
            }
        )

    admin_properties = directory / ADMIN_PROPERTIES
    _write_private(admin_properties, properties_text(_admin_client_properties(admin_password, certs)))
    tls_info = None
    if certs is not None:
        tls_info = {
            "ca": str(certs.ca),
            "bootstrap_servers": ",".join(e["listeners"]["SASL_SSL"] for e in entries),
        }
    return {
        "bootstrap_servers": ",".join(e["listeners"]["SASL_PLAINTEXT"] for e in entries),
        "zookeeper": _zookeeper_info(zookeeper, zk_server, client_config, zk_props or {}),
        "brokers": entries,
        "audit_dir": str(audit_dir),
        "admin": {
            "principal": f"User:{ADMIN_USER}",
            "username": ADMIN_USER,
            "password": admin_password,
            "properties": str(admin_properties),
        },
        "tls": tls_info,
        "inter_broker": {"username": INTER_BROKER_USER},
    }


def _admin_client_properties(
    password: str, certs: devcerts.DevCertificates | None
) -> dict[str, str]:
    props = {
        "security.protocol": "SASL_SSL" if certs is not None else "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": (
            f'{_SCRAM_LOGIN} required username="{ADMIN_USER}" password="{password}";'
        ),
    }
    if certs is not None:
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = str(certs.ca)
    return props
