"""Kafka clients that others wrote log in with a delegation token on a real Apache Kafka
3.9 broker (ZooKeeper mode), write a topic and read it back; once the token is expired
through that broker, their next login is refused.

A Kafka broker accepts a token login only with SCRAM's ``tokenauth=true`` extension, so
these are the clients that can send it: kafka-clients (Java, ``tokenauth=true`` in the
JAAS line), franz-go (``scram.Auth{IsToken: true}``), kafka-python with
``tokensvc.kafka_python_token`` and aiokafka with ``tokensvc.aiokafka_token``
(docs/clients.md, "Against Apache Kafka brokers"). The tokens are created and expired
with tokensvc's AdminClient through the Kafka broker, as its admin user.

A Java consumer holds a session through re-authentication: with
``connections.max.reauth.ms`` set (the room's broker sets it for SCRAM-SHA-256 sessions
only, conftest.py), it lives on while its token does and is ended by the broker at its
next re-authentication once the token is expired.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka import KafkaException as ConfluentException
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from kafka import KafkaProducer
from kafka.errors import KafkaError

from tests.support.kafka_clients import (
    CLIENTS,
    LoginRefused,
    ProduceConsumeResult,
    java_produce_consume,
    java_session,
)
from tests.support.kafka_under_test import KafkaUnderTest as KafkaBroker
from tests.support.wait import wait_for
from tokensvc.admin.client import AdminClient
from tokensvc.kafka import reauth_key

# A fresh clone builds the Java and Go programs in the first tests that run them: minutes
# for franz-go's cold `go build` on a loaded machine.
pytestmark = pytest.mark.heavy(minutes=3)
BUILD_TIMEOUT = pytest.mark.timeout(900)
COUNT = 20


def _round(client: str, broker: KafkaBroker, token_id: str, hmac_b64: str, topic: str,
           **options: object) -> ProduceConsumeResult:
    produce_consume: Callable[..., ProduceConsumeResult] = CLIENTS[client]
    return produce_consume(broker.bootstrap, token_id, hmac_b64, topic, COUNT, **options)


@BUILD_TIMEOUT
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_client_writes_and_reads_a_topic_with_a_token_and_is_refused_once_it_is_expired(
    kafka_broker: KafkaBroker, kafka_admin: AdminClient, client: str
) -> None:
    token = kafka_admin.create_token()
    topic = f"token-{client}"

    result = _round(client, kafka_broker, token.token_id, token.hmac_b64, topic)

    assert len(result.sent) == COUNT and len(set(result.sent)) == COUNT
    assert result.received == result.sent

    kafka_admin.expire_token(token.hmac, -1)
    assert kafka_admin.find_token(token.hmac) is None

    with pytest.raises(LoginRefused) as refused:
        _round(client, kafka_broker, token.token_id, token.hmac_b64, topic, timeout_s=10)
    assert refused.value.client == client
    assert "authentication" in refused.value.message.lower(), refused.value.message


def test_java_client_logs_in_with_scram_sha_256_token(
    kafka_broker: KafkaBroker, kafka_admin: AdminClient
) -> None:
    token = kafka_admin.create_token()

    result = java_produce_consume(kafka_broker.bootstrap, token.token_id, token.hmac_b64,
                                  "token-java-256", COUNT, mechanism="SCRAM-SHA-256")

    assert result.received == result.sent and len(set(result.sent)) == COUNT


def test_a_token_that_is_not_the_brokers_is_refused(kafka_broker: KafkaBroker,
                                                    kafka_admin: AdminClient) -> None:
    token = kafka_admin.create_token()
    wrong_hmac = token.hmac_b64[:-4] + ("AAA=" if not token.hmac_b64.endswith("AAA=") else "BBB=")

    with pytest.raises(LoginRefused):
        java_produce_consume(kafka_broker.bootstrap, token.token_id, wrong_hmac,
                             "token-wrong", 1, timeout_s=30)


def test_expired_token_ends_an_open_session_at_its_reauthentication(
    kafka_broker: KafkaBroker, kafka_admin: AdminClient
) -> None:
    reauth_s = int(kafka_broker.properties[reauth_key("SCRAM-SHA-256")]) / 1000
    kept, expired = kafka_admin.create_token(), kafka_admin.create_token()
    topic = "token-session"
    java_produce_consume(kafka_broker.bootstrap, kept.token_id, kept.hmac_b64, topic, 1,
                         mechanism="SCRAM-SHA-256")
    hold_s = 3 * reauth_s
    sessions = [java_session(kafka_broker.bootstrap, t.token_id, t.hmac_b64, topic,
                             mechanism="SCRAM-SHA-256", max_s=hold_s + 30 if t is expired
                             else hold_s) for t in (kept, expired)]
    try:
        for session in sessions:
            session.wait_open()
        kafka_admin.expire_token(expired.hmac, -1)
        expired_at = time.time()

        kept_end = sessions[0].wait_end(hold_s + 60)
        expired_end = sessions[1].wait_end(reauth_s + 60)
    finally:
        for session in sessions:
            session.close()

    # The live token's session outlived several re-authentications.
    assert not kept_end.refused
    assert expired_end.refused, expired_end
    # Within a re-authentication period (and slack for a loaded machine), long before the
    # session's own end (hold_s + 30 s after it opened).
    assert expired_end.at - expired_at < reauth_s + 15, expired_end
    assert "authentication" in expired_end.message.lower(), expired_end.message


def _confluent_refusal(bootstrap: str, token_id: str, hmac_b64: str) -> str:
    """librdkafka's authentication error for a token login (AssertionError if it logs in)."""
    errors: list[ConfluentError] = []
    client = ConfluentAdmin({
        "bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": token_id,
        "sasl.password": hmac_b64, "log_level": 0, "error_cb": errors.append,
    })

    def refused() -> str | None:
        try:
            client.list_topics(timeout=0.5)
        except ConfluentException:
            client.poll(0.1)
        else:
            raise AssertionError("librdkafka logged in with a token on a Kafka broker")
        found = [e.str() for e in errors if e.code() == ConfluentError._AUTHENTICATION]
        return found[0] if found else None

    try:
        return wait_for(refused, 30, "librdkafka authentication error")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {[e.str() for e in errors]}") from None


def test_a_live_token_without_the_extension_is_refused_by_kafka(
    kafka_broker: KafkaBroker, kafka_admin: AdminClient
) -> None:
    """What the matrix of docs/clients.md rests on: Kafka has no implicit token login, so
    librdkafka (no SCRAM extensions) and kafka-python without the plug-in are refused a
    token that the plug-in logs in with."""
    token = kafka_admin.create_token()

    librdkafka = _confluent_refusal(kafka_broker.bootstrap, token.token_id, token.hmac_b64)
    with pytest.raises(KafkaError):
        KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=token.token_id,
                      sasl_plain_password=token.hmac_b64, max_block_ms=5000,
                      bootstrap_timeout_ms=5000)
    with_plugin = CLIENTS["kafka-python"](kafka_broker.bootstrap, token.token_id,
                                          token.hmac_b64, "token-live", 1)

    assert "invalid credentials" in librdkafka, librdkafka
    assert with_plugin.received == with_plugin.sent
