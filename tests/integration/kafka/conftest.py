"""A real Apache Kafka 3.9 broker (ZooKeeper mode) for the tests of this room.

``kafka_broker`` is one broker per module on a chroot of its own on the session
ZooKeeper, started by :mod:`tests.support.kafka_zk_broker`; ``kafka_admin`` is tokensvc's
AdminClient logged in on it as the broker's admin user (SCRAM-SHA-512). A module may set
more broker properties with ``KAFKA_OVERRIDES = {...}``.

It must not judge anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.kafka_zk_broker import KafkaBroker, start_kafka_broker
from tokensvc.admin.client import AdminClient
from tokensvc.client_config import ClientConfig
from tokensvc.scram.formatter import ScramMechanism


@pytest.fixture(scope="module")
def kafka_broker(zk_chroot_factory: Callable[[], str],
                 tmp_path_factory: pytest.TempPathFactory,
                 request: pytest.FixtureRequest) -> Iterator[KafkaBroker]:
    overrides = getattr(request.module, "KAFKA_OVERRIDES", None)
    broker = start_kafka_broker(zk_chroot_factory(), tmp_path_factory.mktemp("kafka"),
                                overrides=overrides)
    yield broker
    broker.stop()


def admin_config(broker: KafkaBroker) -> ClientConfig:
    return ClientConfig(security_protocol="SASL_PLAINTEXT",
                        sasl_mechanism=ScramMechanism.SCRAM_SHA_512,
                        username=broker.admin_user, password=broker.admin_password)


@pytest.fixture(scope="module")
def kafka_admin(kafka_broker: KafkaBroker) -> Iterator[AdminClient]:
    with AdminClient(kafka_broker.bootstrap, admin_config(kafka_broker), timeout_s=30) as admin:
        yield admin
