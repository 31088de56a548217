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
``connections.max.reauth.ms`` set (here for SCRAM-SHA-256 sessions only, so that the
other tests' sessions are not re-authenticated), it lives on while its token does and is
ended by the broker at its next re-authentication once the token is expired.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.kafka_clients import (
    CLIENTS,
    LoginRefused,
    ProduceConsumeResult,
    java_produce_consume,
    java_session,
)
from tests.support.kafka_zk_broker import KafkaBroker
from tokensvc.admin.client import AdminClient

REAUTH_MS = 3000
# Kafka's listener- and mechanism-prefixed form of connections.max.reauth.ms (KIP-368).
KAFKA_OVERRIDES = {
    "listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": str(REAUTH_MS),
}
COUNT = 20


def _round(client: str, broker: KafkaBroker, token_id: str, hmac_b64: str, topic: str,
           **options: object) -> ProduceConsumeResult:
    produce_consume: Callable[..., ProduceConsumeResult] = CLIENTS[client]
    return produce_consume(broker.bootstrap, token_id, hmac_b64, topic, COUNT, **options)


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
        _round(client, kafka_broker, token.token_id, token.hmac_b64, topic, timeout_s=15)
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
    kept, expired = kafka_admin.create_token(), kafka_admin.create_token()
    topic = "token-session"
    java_produce_consume(kafka_broker.bootstrap, kept.token_id, kept.hmac_b64, topic, 1,
                         mechanism="SCRAM-SHA-256")
    hold_s = 3 * REAUTH_MS / 1000
    sessions = [java_session(kafka_broker.bootstrap, t.token_id, t.hmac_b64, topic,
                             mechanism="SCRAM-SHA-256", max_s=hold_s + 30 if t is expired
                             else hold_s) for t in (kept, expired)]
    try:
        for session in sessions:
            session.wait_open()
        kafka_admin.expire_token(expired.hmac, -1)

        kept_end = sessions[0].wait_end(hold_s + 60)
        expired_end = sessions[1].wait_end(REAUTH_MS / 1000 + 60)
    finally:
        for session in sessions:
            session.close()

    # The live token's session outlived several re-authentications.
    assert not kept_end.refused
    assert expired_end.refused, expired_end
    assert "authentication" in expired_end.message.lower(), expired_end.message
