"""kafka-python clients log in with a delegation token through tokensvc.kafka_python_token.

Against a real two-broker LocalCluster. The principal of a token session is checked
through KIP-430: DescribeCluster's authorized operations are those of the token's
owner (all cluster operations for the super user ``admin``, none for ``alice``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.errors import KafkaTimeoutError
from kafka.net.sasl import get_sasl_mechanism

from tests.support.local_cluster import wait_served_everywhere
from tests.support.tokens import token_client_config
from tokensvc.admin import AdminClient, TokenDescription
from tokensvc.client_config import load_client_config
from tokensvc.cluster import LocalCluster
from tokensvc.kafka_python_token import (
    TokenAwareScram,
    TokenHmac,
    install,
    token_login_config,
)

ALL_CLUSTER_OPERATIONS = {"CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
                          "ALTER_CONFIGS", "IDEMPOTENT_WRITE"}


pytestmark = pytest.mark.cluster(brokers=2)


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> Iterator[AdminClient]:
    config = load_client_config(cluster.info["admin"]["properties"])
    with AdminClient(cluster.info["bootstrap_servers"], config, timeout_s=15) as client:
        yield client


def served_token(cluster: LocalCluster, admin: AdminClient, **create: Any) -> TokenDescription:
    """A new token, once every broker serves it: it was created through the broker the
    admin client reached, and kafka-python logs in on whichever broker it picks (the
    others serve the token only once they have followed the create)."""
    token = admin.create_token(**create)
    wait_served_everywhere(cluster, token_client_config(token))
    return token


def kafka_python_admin(cluster: LocalCluster, **login: object) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=cluster.info["bootstrap_servers"].split(","),
        security_protocol="SASL_PLAINTEXT",
        bootstrap_timeout_ms=10_000,
        **login,
    )


def cluster_operations(cluster: LocalCluster, token: TokenDescription, mechanism: str) -> set:
    client = kafka_python_admin(cluster, **token_login_config(token.token_id, token.hmac_b64,
                                                               mechanism))
    try:
        description = client.describe_cluster()
    finally:
        client.close()
    assert len(description["brokers"]) == 2
    return set(description["authorized_operations"])


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_token_session_acts_as_the_super_user_owner(
    cluster: LocalCluster, admin: AdminClient, mechanism: str
) -> None:
    token = served_token(cluster, admin)
    assert cluster_operations(cluster, token, mechanism) == ALL_CLUSTER_OPERATIONS


def test_token_session_of_another_owner_has_only_that_owners_rights(
    cluster: LocalCluster, admin: AdminClient
) -> None:
    token = served_token(cluster, admin, owner="User:alice")
    assert cluster_operations(cluster, token, "SCRAM-SHA-512") == set()


def test_raw_hmac_bytes_are_accepted_too(cluster: LocalCluster, admin: AdminClient) -> None:
    token = served_token(cluster, admin)
    client = kafka_python_admin(cluster, **token_login_config(token.token_id, token.hmac))
    try:
        assert client.describe_cluster()["cluster_id"]
    finally:
        client.close()


def test_consumer_logs_in_with_a_token(cluster: LocalCluster, admin: AdminClient) -> None:
    token = served_token(cluster, admin)
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.info["bootstrap_servers"].split(","),
        security_protocol="SASL_PLAINTEXT",
        **token_login_config(token.token_id, token.hmac_b64, "SCRAM-SHA-256"),
    )
    try:
        assert consumer.topics() == set()
    finally:
        consumer.close()


def test_password_logins_still_use_kafka_pythons_own_scram(cluster: LocalCluster) -> None:
    install()
    assert get_sasl_mechanism("SCRAM-SHA-512") is TokenAwareScram
    client = kafka_python_admin(
        cluster, sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="admin",
        sasl_plain_password=cluster.info["admin"]["password"],
    )
    try:
        operations = set(client.describe_cluster()["authorized_operations"])
    finally:
        client.close()
    assert operations == ALL_CLUSTER_OPERATIONS


def test_wrong_hmac_cannot_log_in(cluster: LocalCluster, admin: AdminClient) -> None:
    token = admin.create_token()
    login = token_login_config(token.token_id, b"\x00" * 64)
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaAdminClient(
            bootstrap_servers=cluster.info["bootstrap_servers"].split(","),
            security_protocol="SASL_PLAINTEXT", bootstrap_timeout_ms=1_500, **login,
        )


def test_token_hmac_is_hidden_from_repr_and_config_dumps() -> None:
    login = token_login_config("tokenid", "c2VjcmV0LWhtYWM=")
    assert login["sasl_plain_password"] == "c2VjcmV0LWhtYWM="
    assert isinstance(login["sasl_plain_password"], TokenHmac)
    assert "c2VjcmV0" not in repr(login)
