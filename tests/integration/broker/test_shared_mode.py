"""``kafka.zookeeper.shared=true`` on a 2-broker LocalCluster of real processes, on its
own secured ZooKeeper (issue #50): the brokers coordinate under ``/tokensvc`` and leave
Kafka's coordination znodes alone; when a Kafka ZooKeeper-to-KRaft migration starts
(``/migration`` appears) token writes are refused with POLICY_VIOLATION, audited,
logged once and shown by a gauge, while existing tokens still log in.

The same mode with real Kafka brokers on the ensemble is tests/integration/kafka/.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.delegation_token import delegation_token
from tests.support.local_cluster import admin_client, broker_metric
from tests.support.wait import poll_until
from tokensvc.admin import AdminError
from tokensvc.admin.connection import BrokerConnection
from tokensvc.client_config import ClientConfig
from tokensvc.cluster import LocalCluster
from tokensvc.core.errors import Errors
from tokensvc.scram.formatter import ScramMechanism
from zk import layout
from zk.client import open_client

pytestmark = pytest.mark.cluster(brokers=2, overrides={"kafka.zookeeper.shared": "true"})

MIGRATION_LOG_LINE = "a Kafka ZooKeeper-to-KRaft migration has started"


def _zk(cluster: LocalCluster):
    return open_client(cluster.zk_settings())


def _cli(cluster: LocalCluster, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(delegation_token, [
        "--bootstrap-server", cluster.info["bootstrap_servers"], "--command-config",
        cluster.info["admin"]["properties"], "--timeout", "10", *args])
    return result.exit_code, result.output


def _audit(cluster: LocalCluster) -> list[dict]:
    events = []
    for path in sorted(Path(cluster.info["audit_dir"]).rglob("*.jsonl")):
        events += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return events


def test_the_brokers_coordinate_under_their_own_root_and_create_none_of_kafkas(
        cluster: LocalCluster) -> None:
    client = _zk(cluster)
    try:
        for path in layout.KAFKA_COORDINATION_ROOTS:
            assert client.exists(path) is None, path
        assert sorted(client.get_children(layout.BESIDE_KAFKA.broker_ids)) == ["1", "2"]
        controller = layout.decode_controller(client.get(layout.BESIDE_KAFKA.controller)[0])
        assert controller in (1, 2)
        # No Kafka broker has written /cluster/id: the brokers report tokensvc's own.
        own = layout.decode_cluster_id(client.get(layout.OWN_CLUSTER_ID)[0])
    finally:
        client.stop()
        client.close()
    with admin_client(cluster) as admin:
        assert admin.describe_cluster().cluster_id == own


def test_a_kafka_renewal_keeps_the_labels_and_revocation_by_label_finds_the_token(
        cluster: LocalCluster) -> None:
    """A Kafka broker that renews a token rewrites its znode with Kafka's seven fields:
    tokensvc keeps the labels and key id apart (/tokensvc/token_labels/<id>), so every
    broker still describes them, with the new expiry, and revokes the token by label."""
    with admin_client(cluster) as admin:
        token = admin.create_token(labels={"job": "kafka-renewed"})
    client = _zk(cluster)
    try:
        path = layout.token_path(token.token_id)
        assert client.exists(layout.token_side_path(token.token_id)) is not None
        znode = json.loads(client.get(path)[0])
        kafkas = {k: v for k, v in znode.items() if k not in ("keyId", "labels")}
        kafkas["expiryTimestamp"] += 60_000
        # What Kafka's renewal writes: setData at any version, then the notification.
        client.set(path, json.dumps(kafkas, separators=(",", ":")).encode())
        client.create(layout.token_change_create_path(), token.token_id.encode(), sequence=True)

        def described(broker_id: int) -> bool:
            address = cluster.broker_info(broker_id)["listeners"]["SASL_PLAINTEXT"]
            with admin_client(cluster, address=address) as admin:
                found = admin.describe_tokens(labels={"job": "kafka-renewed"})
            return [(t.token_id, t.labels, t.expiry_ms) for t in found] == [
                (token.token_id, token.labels, kafkas["expiryTimestamp"])]

        for broker_id in cluster.broker_ids():
            assert poll_until(lambda b=broker_id: described(b), timeout=15), broker_id
        code, output = _cli(cluster, "--expire", "--label", "job=kafka-renewed",
                            "--output", "json")
        assert code == 0, output
        assert [r["token_id"] for r in json.loads(output)["revoked"]] == [token.token_id]
        assert client.exists(path) is None
        assert poll_until(lambda: client.exists(layout.token_side_path(token.token_id))
                          is None, timeout=10)
    finally:
        client.stop()
        client.close()


def test_a_kraft_migration_stops_token_writes_with_a_clear_error(
        cluster: LocalCluster) -> None:
    code, output = _cli(cluster, "--create", "--output", "json")
    assert code == 0, output
    before = json.loads(output)
    client = _zk(cluster)
    try:
        client.create(layout.MIGRATION, b'{"version":0,"kraft_controller_id":3000}')
    finally:
        client.stop()
        client.close()
    for broker_id in cluster.broker_ids():
        assert poll_until(
            lambda b=broker_id: broker_metric(cluster, b, "tokensvc_kafka_kraft_migration") == 1,
            timeout=10), broker_id

    code, output = _cli(cluster, "--create")
    assert code != 0
    assert "KRaft migration has started" in output, output
    with admin_client(cluster) as admin:
        with pytest.raises(AdminError) as refused:
            admin.renew_token(base64.b64decode(before["hmac"]), -1)
        assert refused.value.error == Errors.POLICY_VIOLATION
        with pytest.raises(AdminError) as refused:
            admin.expire_token(base64.b64decode(before["hmac"]), -1)
        assert refused.value.error == Errors.POLICY_VIOLATION
        # Nothing was written: the token is still there, with its expiry.
        (token,) = [t for t in admin.describe_tokens() if t.token_id == before["token_id"]]
        assert token.expiry_ms == before["expiry_timestamp_ms"]

    # Logins with the tokens that exist go on.
    config = ClientConfig(security_protocol="SASL_PLAINTEXT",
                          sasl_mechanism=ScramMechanism.SCRAM_SHA_512,
                          username=before["token_id"], password=before["hmac"], token_auth=True)
    for address in cluster.info["bootstrap_servers"].split(","):
        conn = BrokerConnection(address, config, client_id="after-migration")
        try:
            conn.open(time.monotonic() + 10)
        finally:
            conn.close()

    refusals = [e for e in _audit(cluster)
                if e["type"] == "token" and e.get("reason") == "kraft_migration"]
    assert {e["action"] for e in refusals} == {"create", "renew", "expire"}
    for broker_id in cluster.broker_ids():
        log = Path(cluster.broker_info(broker_id)["log"]).read_text(encoding="utf-8")
        assert log.count(MIGRATION_LOG_LINE) == 1, broker_id
