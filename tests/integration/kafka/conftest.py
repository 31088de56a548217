"""A real Apache Kafka 3.9 broker (ZooKeeper mode) for the tests of this room.

``kafka_broker`` is one broker for the room (per test worker), on a chroot of its own on
the session ZooKeeper, started by :mod:`tests.support.kafka_zk_broker`; ``kafka_admin`` is
tokensvc's AdminClient logged in on it as the broker's admin user (SCRAM-SHA-512).
SCRAM-SHA-256 sessions re-authenticate every :data:`SCRAM_256_REAUTH_MS` (Kafka's
listener- and mechanism-prefixed ``connections.max.reauth.ms``, KIP-368), so a test can
watch a session end at its re-authentication while the other tests' SCRAM-SHA-512
sessions are left alone.

It must not judge anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.kafka_zk_broker import KafkaBroker, reauth_key, start_kafka_broker
from tokensvc.admin.client import AdminClient
from tokensvc.client_config import ClientConfig
from tokensvc.scram.formatter import ScramMechanism

SCRAM_256_REAUTH_MS = 3000


@pytest.fixture(scope="package")
def kafka_broker(zk_chroot_factory: Callable[[], str],
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = start_kafka_broker(zk_chroot_factory(), tmp_path_factory.mktemp("kafka"),
                                overrides={reauth_key("SCRAM-SHA-256"): str(SCRAM_256_REAUTH_MS)})
    yield broker
    broker.stop()


def admin_config(broker: KafkaBroker) -> ClientConfig:
    return ClientConfig(security_protocol="SASL_PLAINTEXT",
                        sasl_mechanism=ScramMechanism.SCRAM_SHA_512,
                        username=broker.admin_user, password=broker.admin_password)


@pytest.fixture(scope="package")
def kafka_admin(kafka_broker: KafkaBroker) -> Iterator[AdminClient]:
    with AdminClient(kafka_broker.bootstrap, admin_config(kafka_broker), timeout_s=30) as admin:
        yield admin
