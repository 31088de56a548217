"""One real Apache Kafka 3.9 broker (ZooKeeper mode) for the tests of this room that need
no tokensvc broker beside it.

``kafka_broker`` is a :class:`tokensvc.cluster.LocalCluster` of one Kafka broker and no
tokensvc broker (its own secured managed ZooKeeper, the admin user written by tokensvc's
code), started once per test worker, SCRAM-SHA-256 sessions re-authenticated every
``SCRAM_256_REAUTH_MS``; ``kafka_admin`` is tokensvc's AdminClient logged in on it as the
admin user. The modules that run tokensvc beside Kafka start their own cluster.

It must not judge anything.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.kafka_under_test import KafkaUnderTest
from tokensvc.admin.client import AdminClient
from tokensvc.client_config import ClientConfig
from tokensvc.cluster import LocalCluster
from tokensvc.kafka import reauth_key
from tokensvc.scram.formatter import ScramMechanism
from zk.client import open_client

SCRAM_256_REAUTH_MS = 3000




@pytest.fixture(scope="package")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory,
                 kafka_jvm: None) -> Iterator[KafkaUnderTest]:
    overrides = {reauth_key("SCRAM-SHA-256"): str(SCRAM_256_REAUTH_MS)}
    with LocalCluster.up(tmp_path_factory.mktemp("kafka"), brokers=0, kafka_brokers=1,
                         die_with_parent=True, timeout=180,
                         kafka_overrides=overrides) as cluster:
        (broker,) = cluster.kafka_brokers()
        admin = cluster.info["admin"]
        yield KafkaUnderTest(broker.bootstrap, admin["username"], admin["password"],
                             broker.properties())


def admin_config(broker: KafkaUnderTest) -> ClientConfig:
    return ClientConfig(security_protocol="SASL_PLAINTEXT",
                        sasl_mechanism=ScramMechanism.SCRAM_SHA_512,
                        username=broker.admin_user, password=broker.admin_password)


@pytest.fixture(scope="package")
def kafka_admin(kafka_broker: KafkaUnderTest) -> Iterator[AdminClient]:
    with AdminClient(kafka_broker.bootstrap, admin_config(kafka_broker), timeout_s=30) as admin:
        yield admin


@pytest.fixture(scope="module")
def zk(cluster: LocalCluster) -> Iterator:
    """A ZooKeeper client with the brokers' credentials on the ``cluster`` of the module
    that asks for it (each Kafka module starts its own)."""
    client = open_client(cluster.zk_settings())
    yield client
    client.stop()
    client.close()
