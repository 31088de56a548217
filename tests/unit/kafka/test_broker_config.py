"""What a Kafka broker of tokensvc's is told: its server.properties and JAAS file for a
secured ZooKeeper (TLS with a client certificate, SASL, ACLs) and for an open one, and
the main classes of Kafka's tools. Pure: nothing is started or written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokensvc.core.zk_security import ZkSaslLogin, ZkSecurity, ZkTlsFiles
from tokensvc.kafka import TOOL_CLASSES, KafkaBroker, KafkaStartError
from zk.client import ZkSettings

SECURED = ZkSettings(
    "127.0.0.1:2182/kafka",
    security=ZkSecurity(
        set_acl=True,
        tls=ZkTlsFiles(keystore="/tls/client.pem", truststore="/tls/ca.pem"),
        sasl=ZkSaslLogin(username="tokensvc", password='p"w\\d'),
    ),
)


def _broker(zookeeper: ZkSettings = SECURED, **kwargs: object) -> KafkaBroker:
    return KafkaBroker(Path("/k/kafka-101"), 101, zookeeper, admin=("admin", "admin-pw"),
                       secret_key="master", port=19092, **kwargs)


def test_a_secured_zookeeper_gives_kafka_its_tls_and_acl_keys() -> None:
    props = _broker().properties()
    assert props["zookeeper.connect"] == "127.0.0.1:2182/kafka"
    assert props["zookeeper.set.acl"] == "true"
    assert props["zookeeper.ssl.client.enable"] == "true"
    assert props["zookeeper.clientCnxnSocket"] == "org.apache.zookeeper.ClientCnxnSocketNetty"
    assert props["zookeeper.ssl.keystore.type"] == "PEM"
    assert props["zookeeper.ssl.keystore.location"] == "/tls/client.pem"
    assert props["zookeeper.ssl.truststore.type"] == "PEM"
    assert props["zookeeper.ssl.truststore.location"] == "/tls/ca.pem"
    assert props["zookeeper.ssl.endpoint.identification.algorithm"] == "HTTPS"
    assert "zookeeper.ssl.keystore.password" not in props


def test_the_listener_authorizer_and_token_key_are_kafkas() -> None:
    props = _broker(super_users=["User:broker"], reauth_ms=5000).properties()
    assert props["broker.id"] == "101"
    assert props["listeners"] == props["advertised.listeners"] == "SASL_PLAINTEXT://127.0.0.1:19092"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-256,SCRAM-SHA-512"
    assert props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    assert props["authorizer.class.name"] == "kafka.security.authorizer.AclAuthorizer"
    assert props["super.users"] == "User:admin;User:broker"
    assert props["delegation.token.secret.key"] == "master"
    assert props["connections.max.reauth.ms"] == "5000"
    assert props["log.dirs"] == "/k/kafka-101/data"
    assert "connections.max.reauth.ms" not in _broker().properties()


def test_internal_topics_fit_the_cluster_and_overrides_come_last() -> None:
    props = _broker(replication_factor=2, overrides={"num.partitions": "3"}).properties()
    assert props["offsets.topic.replication.factor"] == "2"
    assert props["transaction.state.log.replication.factor"] == "2"
    assert props["num.partitions"] == "3"


def test_the_jaas_file_holds_the_admin_login_and_the_zookeeper_login_escaped() -> None:
    jaas = _broker().jaas()
    assert "KafkaServer {\n    org.apache.kafka.common.security.scram.ScramLoginModule required" in jaas
    assert 'username="admin"\n    password="admin-pw";' in jaas
    assert "Client {\n    org.apache.zookeeper.server.auth.DigestLoginModule required" in jaas
    assert 'username="tokensvc"\n    password="p\\"w\\\\d";' in jaas


def test_an_open_zookeeper_gets_no_tls_no_client_login_and_no_acls() -> None:
    broker = _broker(ZkSettings("127.0.0.1:2181"))
    props = broker.properties()
    assert props["zookeeper.set.acl"] == "false"
    assert not [key for key in props if key.startswith("zookeeper.ssl")]
    assert "Client {" not in broker.jaas()


def test_a_digest_login_is_refused_with_a_reason() -> None:
    with pytest.raises(KafkaStartError, match="digest"):
        _broker(ZkSettings("127.0.0.1:2181", digest="u:p")).properties()


def test_the_tools_are_the_classes_kafka_39_scripts_run() -> None:
    assert TOOL_CLASSES["kafka-delegation-tokens.sh"] == "org.apache.kafka.tools.DelegationTokenCommand"
    assert TOOL_CLASSES["kafka-acls.sh"] == "kafka.admin.AclCommand"
    assert TOOL_CLASSES["kafka-configs.sh"] == "kafka.admin.ConfigCommand"
    assert TOOL_CLASSES["kafka-topics.sh"] == "org.apache.kafka.tools.TopicCommand"
    assert TOOL_CLASSES["kafka-console-producer.sh"] == "kafka.tools.ConsoleProducer"
    assert (TOOL_CLASSES["kafka-console-consumer.sh"]
            == "org.apache.kafka.tools.consumer.ConsoleConsumer")
