"""The local cluster's Apache Kafka brokers (``tokensvc cluster up --kafka-brokers N``,
``./dev run --kafka-brokers N``): started after tokensvc's brokers, on the same managed
ZooKeeper, with the same ZooKeeper identity and ``delegation.token.secret.key``, the
cluster's admin as their super user and inter-broker login; recorded in ``cluster.json``
under ``"kafka"``; stopped by ``down``.

Broker ids: tokensvc's brokers are 1..N; the Kafka brokers are
:data:`KAFKA_BROKER_ID_BASE` + 1.. (101, 102, ...), so the two never share an id in a log,
a metric or ``/brokers/ids``.

Also what a person needs to try them (``kafka-bin/``: Kafka's tools as scripts, and
``kafka-token.properties``: a client login with a delegation token, ``tokenauth=true``).
Must not write ZooKeeper itself (the Kafka brokers do, as Kafka).
"""

from __future__ import annotations

import os
import secrets
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokensvc.cluster.errors import ClusterError
from tokensvc.cluster.files import _previous_master_key, _write_private
from tokensvc.cluster.layout import _SCRAM_LOGIN
from tokensvc.config_loader import read_key_file
from tokensvc.core.config import MASTER_KEY_ALIAS, SECRET_KEY, SECRET_KEY_ENV, SECRET_KEY_FILE
from tokensvc.jvm import JvmError
from tokensvc.kafka import TOOL_CLASSES, KafkaBroker, tool_command
from tokensvc.properties import properties_text
from zk.client import ZkSettings

KAFKA_BROKER_ID_BASE = 100
KAFKA_HEAP_MB = 512
KAFKA_BIN = "kafka-bin"
TOKEN_PROPERTIES = "kafka-token.properties"


def kafka_secret_key(directory: Path, overrides: Mapping[str, str]) -> str:
    """The ``delegation.token.secret.key`` tokensvc's brokers use (the Kafka brokers
    must have the same): from ``--set`` (the key, its file or its variable), else the one
    the cluster wrote for its brokers, else a new one (a cluster of Kafka brokers only)."""
    for key in (SECRET_KEY, MASTER_KEY_ALIAS):
        if overrides.get(key):
            return overrides[key]
    if overrides.get(SECRET_KEY_FILE):
        return read_key_file(overrides[SECRET_KEY_FILE])
    if overrides.get(SECRET_KEY_ENV):
        return os.environ.get(overrides[SECRET_KEY_ENV], "")
    return _previous_master_key(directory) or secrets.token_urlsafe(32)


def make_kafka_brokers(directory: Path, count: int, zookeeper: ZkSettings,
                       admin: tuple[str, str], secret_key: str, *,
                       die_with_parent: bool, reauth_ms: int | None = None,
                       overrides: Mapping[str, str] | None = None) -> list[KafkaBroker]:
    """``count`` Kafka brokers in ``DIR/kafka-<id>/`` (not started)."""
    return [
        KafkaBroker(directory / f"kafka-{KAFKA_BROKER_ID_BASE + n}", KAFKA_BROKER_ID_BASE + n,
                    zookeeper, admin=admin, secret_key=secret_key, reauth_ms=reauth_ms,
                    replication_factor=min(count, 3), heap_mb=KAFKA_HEAP_MB,
                    overrides=overrides, die_with_parent=die_with_parent)
        for n in range(1, count + 1)
    ]


def start_kafka_brokers(brokers: list[KafkaBroker], timeout: float) -> None:
    """Start every broker at once and wait until each is ready."""
    try:
        for broker in brokers:
            broker.spawn()
        for broker in brokers:
            broker.wait_ready(timeout)
    except JvmError as exc:
        raise ClusterError(f"a Kafka broker did not start: {exc}") from None


def kafka_info(brokers: list[KafkaBroker]) -> dict[str, Any]:
    """cluster.json's ``"kafka"``."""
    return {
        "bootstrap_servers": ",".join(b.bootstrap for b in brokers),
        "brokers": [
            {"id": b.broker_id, "listener": b.bootstrap, "config": str(b.config_path),
             "log": str(b.log_path), "pid": b.pid}
            for b in brokers
        ],
    }


def write_tool_scripts(directory: Path) -> Path:
    """``DIR/kafka-bin/<script>``: each of Kafka's tools of :data:`TOOL_CLASSES` as a
    shell script, as Kafka's ``bin/`` has them."""
    bin_dir = directory / KAFKA_BIN
    bin_dir.mkdir(exist_ok=True)
    for script in TOOL_CLASSES:
        command = " ".join(shlex.quote(arg) for arg in tool_command(script, []))
        path = bin_dir / script
        path.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        path.chmod(0o755)
    return bin_dir


def write_token_properties(directory: Path, token_id: str, hmac_b64: str) -> Path:
    """A client properties file (0600) that logs in with a delegation token."""
    path = directory / TOKEN_PROPERTIES
    _write_private(path, properties_text({
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": (f'{_SCRAM_LOGIN} required username="{token_id}" '
                             f'password="{hmac_b64}" tokenauth="true";'),
    }))
    return path
