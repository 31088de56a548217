"""A broker restarted on a token cache snapshot of another format version (an older one,
as after an upgrade that changed the format, and a newer one, as after a downgrade)
refuses it -- logged with the reason ``version`` and counted in
``tokensvc_cache_snapshot_loads_total{result="invalid"}`` -- and loads every token from
ZooKeeper: its cache is complete, including tokens created while it was down.

The file is the broker's own snapshot with only its version field changed (and its
checksum computed again), so nothing but the version can be the cause.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest

from tests.support.local_cluster import ClusterFactory, admin_client, broker_metric
from tests.support.wait import poll_until
from tokensvc.admin import AdminClient
from tokensvc.admin.propagation import token_logs_in, wait_all_brokers
from tokensvc.admin.results import BrokerNode
from tokensvc.client_config import load_client_config
from tokensvc.cluster import LocalCluster
from tokensvc.snapshot import format as snapshot_format
from tokensvc.snapshot.files import SNAPSHOT_FILE

BEFORE, WHILE_DOWN = 200, 20


@pytest.fixture(scope="module")
def cluster(module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(brokers=2)


def _admin(cluster: LocalCluster, address: str | None = None) -> AdminClient:
    return admin_client(cluster, address=address, timeout_s=30)


def _address(cluster: LocalCluster, broker_id: int) -> str:
    return cluster.broker_info(broker_id)["listeners"]["SASL_PLAINTEXT"]


def _with_version(data: bytes, version: int) -> bytes:
    """``data`` with its format version field set to ``version`` and a valid checksum."""
    assert data[:8] == snapshot_format.MAGIC
    body = data[:8] + struct.pack(">H", version) + data[10:-32]
    return body + hashlib.sha256(body).digest()


@pytest.mark.parametrize("version", [snapshot_format.VERSION - 1, snapshot_format.VERSION + 1],
                         ids=["older", "newer"])
def test_a_snapshot_of_another_format_version_is_refused_and_the_cache_loads_from_zookeeper(
        cluster: LocalCluster, version: int) -> None:
    restarted, other = cluster.broker_ids()
    with _admin(cluster, _address(cluster, other)) as admin:
        for _ in range(BEFORE):
            admin.create_token()
    cluster.stop_broker(restarted)  # a clean stop writes the snapshot
    path = Path(cluster.broker_info(restarted)["config"]).parent / "snapshot" / SNAPSHOT_FILE
    original = path.read_bytes()
    snapshot_format.decode(original)  # the broker's own snapshot is valid as written
    path.write_bytes(_with_version(original, version))
    with _admin(cluster, _address(cluster, other)) as admin:
        created_while_down = [admin.create_token() for _ in range(WHILE_DOWN)]
        expected = {t.token_id for t in admin.describe_tokens()}
    log = Path(cluster.broker_info(restarted)["log"])
    log_before = log.read_text()

    cluster.start_broker(restarted)

    assert poll_until(lambda: broker_metric(
        cluster, restarted, 'tokensvc_cache_snapshot_loads_total{result="invalid"}') == 1.0,
        timeout=30)
    new_lines = log.read_text()[len(log_before):]
    assert f"snapshot format version {version}, this broker reads version " \
           f"{snapshot_format.VERSION}" in new_lines
    assert "refused (version:" in new_lines
    assert broker_metric(cluster, restarted,
                         'tokensvc_cache_snapshot_loads_total{result="loaded"}') == 0.0
    # Complete: every token ZooKeeper holds, those created while it was down included.
    assert poll_until(lambda: broker_metric(cluster, restarted, "tokensvc_token_cache_size")
                      == len(expected), timeout=30)
    with _admin(cluster, _address(cluster, restarted)) as admin:
        assert {t.token_id for t in admin.describe_tokens()} == expected
    host, _, port = _address(cluster, restarted).rpartition(":")
    for token in created_while_down[:3]:
        wait_all_brokers([BrokerNode(restarted, host, int(port))],
                         load_client_config(cluster.info["admin"]["properties"]),
                         token_logs_in(token), 10)
