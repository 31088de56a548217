"""Issue 3: tokensvc proven against Kafka clients we did not write.

One local cluster of three real broker processes (SASL_PLAINTEXT and SASL_SSL
listeners, dev certificates) is shared by the module. confluent-kafka
(librdkafka) and kafka-python log in with SCRAM-SHA-256 and SCRAM-SHA-512 on
both listeners, read metadata and the cluster description, and manage SCRAM
users (KIP-554) whose logins are then tried with the *other* client.

Delegation tokens: librdkafka's SCRAM client-first message is always
``n,,n=<user>,r=<nonce>`` (no extensions, so no ``tokenauth=true``); it logs in
with a token through implicit token login (the token id as user name). The other
token logins across the cluster use the project's own wire client and
kafka-python with :mod:`tokensvc.kafka_python_token`; every client's token login
is in test_client_matrix.py.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from confluent_kafka import KafkaError as ConfluentError
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from confluent_kafka.admin import ScramMechanism as ConfluentScram
from kafka import KafkaAdminClient
from kafka.admin import ScramMechanism as KafkaPythonScram
from kafka.admin import UserScramCredentialDeletion as KpDeletion
from kafka.admin import UserScramCredentialUpsertion as KpUpsertion
from kafka.errors import KafkaTimeoutError

from tests.support.client import WireClient
from tests.support.local_cluster import user_config, wait_refused_everywhere
from tests.support.wait import raising, retry
from tokensvc.broker.network.decoding import decode_client_request
from tokensvc.cluster import LocalCluster
from tokensvc.kafka_python_token import token_login_config
from tokensvc.protocol.api import ApiKey

LISTENERS = ("SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
BROKER_IDS = [1, 2, 3]
# A correctness bound, not a speed target: propagation speed is benchmark B3.
PROPAGATION_S = 15.0

T = TypeVar("T")


pytestmark = pytest.mark.cluster(brokers=3, tls=True)


# -- clients ---------------------------------------------------------------------------


def _addresses(cluster: LocalCluster, listener: str) -> list[str]:
    return [b["listeners"][listener] for b in cluster.info["brokers"]]


def _port_by_id(cluster: LocalCluster, listener: str) -> dict[int, int]:
    return {
        b["id"]: int(b["listeners"][listener].rpartition(":")[2]) for b in cluster.info["brokers"]
    }


def confluent_admin(
    cluster: LocalCluster,
    listener: str,
    mechanism: str,
    username: str,
    password: str,
    errors: list[ConfluentError] | None = None,
    bootstrap: str | None = None,
) -> AdminClient:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap or ",".join(_addresses(cluster, listener)),
        "security.protocol": listener,
        "sasl.mechanism": mechanism,
        "sasl.username": username,
        "sasl.password": password,
        # Failures are asserted through error_cb; keep librdkafka's own log quiet.
        "log_level": 0,
        "error_cb": (errors.append if errors is not None else lambda _err: None),
    }
    if listener == "SASL_SSL":
        conf["ssl.ca.location"] = cluster.info["tls"]["ca"]
    return AdminClient(conf)


def kafka_python_admin(
    cluster: LocalCluster,
    listener: str,
    mechanism: str | None = None,
    username: str | None = None,
    password: str | None = None,
    *,
    bootstrap: list[str] | None = None,
    bootstrap_timeout_ms: int = 15_000,
    **login: Any,
) -> KafkaAdminClient:
    kwargs: dict[str, Any] = {
        "bootstrap_servers": bootstrap or _addresses(cluster, listener),
        "security_protocol": listener,
        "request_timeout_ms": 10_000,
        "bootstrap_timeout_ms": bootstrap_timeout_ms,
    }
    if mechanism is not None:
        kwargs.update(
            sasl_mechanism=mechanism, sasl_plain_username=username, sasl_plain_password=password
        )
    kwargs.update(login)
    if listener == "SASL_SSL":
        kwargs["ssl_cafile"] = cluster.info["tls"]["ca"]
    return KafkaAdminClient(**kwargs)


def admin_password(cluster: LocalCluster) -> str:
    return cluster.info["admin"]["password"]


def eventually(check: Callable[[], T], timeout: float = 5.0) -> T:
    """``check()``'s value once it stops raising; its last error after ``timeout``."""
    return retry(check, timeout, errors=(Exception,), interval=0.02)


def confluent_login_refused(
    cluster: LocalCluster, listener: str, mechanism: str, username: str, password: str
) -> list[ConfluentError]:
    """The authentication errors librdkafka reports for this login (empty: it succeeded)."""
    errors: list[ConfluentError] = []
    admin = confluent_admin(cluster, listener, mechanism, username, password, errors)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1)
            return []
        except Exception:  # noqa: BLE001 - the reason comes through error_cb
            admin.poll(0.1)
        auth = [e for e in errors if e.code() == ConfluentError._AUTHENTICATION]
        if auth:
            return auth
    raise AssertionError(f"neither a login nor an authentication error: {errors}")


# -- logins, metadata and cluster description ----------------------------------------------


def test_librdkafka_all_topics_metadata_request_is_read_as_kafka_reads_it() -> None:
    # Captured from confluent-kafka 2.16 (list_topics): at v9+ librdkafka leaves the 4-byte
    # placeholder of the topics count in place, so 3 bytes follow a complete body. Kafka
    # ignores them; a broker that refused them would close every librdkafka connection.
    payload = bytes.fromhex("0003000c00000006000772646b61666b610000000000010000")
    header, body = decode_client_request(payload)
    assert (header.api_key, header.api_version, header.client_id) == (ApiKey.METADATA, 12,
                                                                      "rdkafka")
    assert body["Topics"] is None
    assert body["AllowAutoTopicCreation"] is False


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("listener", LISTENERS)
def test_confluent_kafka_logs_in_lists_topics_and_describes_the_cluster(
    cluster: LocalCluster, listener: str, mechanism: str
) -> None:
    admin = confluent_admin(cluster, listener, mechanism, "admin", admin_password(cluster))
    ports = _port_by_id(cluster, listener)

    def every_broker_listed():
        # A broker that met a slow machine may be re-registering: listed again within
        # seconds, as Kafka's metadata would.
        listed = admin.list_topics(timeout=15)
        assert {b.id: b.port for b in listed.brokers.values()} == ports
        return listed

    metadata = eventually(every_broker_listed, timeout=30)
    described = admin.describe_cluster(
        request_timeout=15, include_authorized_operations=True
    ).result(timeout=20)

    assert metadata.topics == {}
    assert metadata.controller_id in BROKER_IDS
    assert {n.id: n.port for n in described.nodes} == ports
    assert described.cluster_id == metadata.cluster_id and described.cluster_id
    assert described.controller.id == metadata.controller_id
    assert described.authorized_operations  # the super user may do everything


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("listener", LISTENERS)
def test_kafka_python_logs_in_lists_topics_and_describes_the_cluster(
    cluster: LocalCluster, listener: str, mechanism: str
) -> None:
    admin = kafka_python_admin(cluster, listener, mechanism, "admin", admin_password(cluster))
    try:
        topics = admin.list_topics()
        described = admin.describe_cluster()
    finally:
        admin.close()
    assert topics == []
    assert {b["broker_id"]: b["port"] for b in described["brokers"]} == _port_by_id(
        cluster, listener
    )
    assert described["controller_id"] in BROKER_IDS
    assert described["cluster_id"]
    assert "ALTER" in described["authorized_operations"]


@pytest.mark.parametrize("listener", LISTENERS)
def test_wrong_password_reaches_confluent_kafka_as_an_authentication_error(
    cluster: LocalCluster, listener: str
) -> None:
    refused = confluent_login_refused(cluster, listener, "SCRAM-SHA-512", "admin", "wrong")
    assert refused
    assert "Authentication failed" in refused[0].str()


@pytest.mark.parametrize("listener", LISTENERS)
def test_wrong_password_reaches_kafka_python_as_sasl_authentication_failed(
    cluster: LocalCluster, listener: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="kafka")
    with pytest.raises(KafkaTimeoutError):
        kafka_python_admin(
            cluster, listener, "SCRAM-SHA-256", "admin", "wrong", bootstrap_timeout_ms=1500
        )
    assert "SaslAuthenticationFailedError" in caplog.text


# -- SCRAM users (KIP-554), created by one client and used by the other --------------------


def test_user_created_by_confluent_kafka_logs_in_with_kafka_python_until_deleted(
    cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    admin = confluent_admin(cluster, "SASL_SSL", "SCRAM-SHA-512", "admin", admin_password(cluster))
    info = ScramCredentialInfo(ConfluentScram.SCRAM_SHA_256, 8192)
    created = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("carol", info, b"carol-secret", b"carol-salt")]
    )
    assert created["carol"].result(timeout=20) is None

    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(timeout=20)
    assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == [
        (ConfluentScram.SCRAM_SHA_256, 8192)
    ]
    everyone = admin.describe_user_scram_credentials().result(timeout=20)
    assert {"admin", "broker", "carol"} <= set(everyone)

    # Every broker must know carol before kafka-python's first connection lands anywhere.
    for address in _addresses(cluster, "SASL_PLAINTEXT"):
        client = eventually(
            lambda a=address: kafka_python_admin(
                cluster, "SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "carol-secret",
                bootstrap=[a], bootstrap_timeout_ms=2000,
            )
        )
        try:
            assert client.list_topics() == []
        finally:
            client.close()

    deleted = admin.alter_user_scram_credentials(
        [UserScramCredentialDeletion("carol", ConfluentScram.SCRAM_SHA_256)]
    )
    assert deleted["carol"].result(timeout=20) is None
    with pytest.raises(Exception) as gone:
        admin.describe_user_scram_credentials(["carol"])["carol"].result(timeout=20)
    assert "RESOURCE_NOT_FOUND" in str(gone.value) or "does not exist" in str(gone.value)

    caplog.set_level(logging.ERROR, logger="kafka")
    # The deletion reaches every broker's cache (bounded), then kafka-python is refused.
    wait_refused_everywhere(cluster, user_config("carol", "carol-secret", "SCRAM-SHA-256"),
                            timeout_s=PROPAGATION_S)
    with pytest.raises(KafkaTimeoutError):
        kafka_python_admin(
            cluster, "SASL_PLAINTEXT", "SCRAM-SHA-256", "carol", "carol-secret",
            bootstrap_timeout_ms=1500,
        )
    assert "SaslAuthenticationFailedError" in caplog.text


def test_user_created_by_kafka_python_logs_in_with_confluent_kafka_until_deleted(
    cluster: LocalCluster,
) -> None:
    admin = kafka_python_admin(
        cluster, "SASL_SSL", "SCRAM-SHA-256", "admin", admin_password(cluster)
    )
    try:
        created = admin.alter_user_scram_credentials(
            [KpUpsertion("dave", KafkaPythonScram.SCRAM_SHA_512, "dave-secret", iterations=4096)]
        )
        described = admin.describe_user_scram_credentials(["dave"])
        everyone = admin.describe_user_scram_credentials()

        assert created == {"dave": None}
        assert described["dave"] == {
            "error": None,
            "credential_infos": [
                {"mechanism": KafkaPythonScram.SCRAM_SHA_512, "iterations": 4096}
            ],
        }
        assert {"admin", "broker", "dave"} <= set(everyone)

        def logs_in_everywhere() -> None:
            for listener in LISTENERS:
                assert confluent_login_refused(
                    cluster, listener, "SCRAM-SHA-512", "dave", "dave-secret"
                ) == []

        eventually(logs_in_everywhere)
        deleted = admin.alter_user_scram_credentials(
            [KpDeletion("dave", KafkaPythonScram.SCRAM_SHA_512)]
        )
        missing = admin.describe_user_scram_credentials(["dave"])
    finally:
        admin.close()
    assert deleted == {"dave": None}
    assert missing["dave"]["error"] and missing["dave"]["credential_infos"] == []

    def refused() -> None:
        assert confluent_login_refused(cluster, "SASL_SSL", "SCRAM-SHA-512", "dave", "dave-secret")

    eventually(refused)


def test_kafka_python_deleting_an_unknown_user_reports_resource_not_found(
    cluster: LocalCluster,
) -> None:
    admin = kafka_python_admin(
        cluster, "SASL_PLAINTEXT", "SCRAM-SHA-512", "admin", admin_password(cluster)
    )
    try:
        result = admin.alter_user_scram_credentials(
            [KpDeletion("nobody", KafkaPythonScram.SCRAM_SHA_256)]
        )
    finally:
        admin.close()
    assert result["nobody"] is not None and "does not exist" in result["nobody"]


# -- delegation tokens across the three broker processes ------------------------------------


def _wire(cluster: LocalCluster, broker_id: int, username: str, password: str, **kw) -> WireClient:
    host, _, port = cluster.broker_info(broker_id)["listeners"]["SASL_PLAINTEXT"].rpartition(":")
    return WireClient((host, int(port)), username, password, **kw)


def _token_login(cluster: LocalCluster, broker_id: int, token: dict, mechanism: str) -> WireClient:
    hmac = base64.b64encode(token["Hmac"]).decode()
    return _wire(cluster, broker_id, token["TokenId"], hmac, mechanism=mechanism, token=True)


def _controller(cluster: LocalCluster) -> int:
    admin = kafka_python_admin(
        cluster, "SASL_PLAINTEXT", "SCRAM-SHA-512", "admin", admin_password(cluster)
    )
    try:
        return admin.describe_cluster()["controller_id"]
    finally:
        admin.close()


def _create_token(cluster: LocalCluster, broker_id: int) -> dict:
    with _wire(cluster, broker_id, "admin", admin_password(cluster)) as admin:
        created = admin.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                {"Renewers": [], "MaxLifetimeMs": -1})
    assert created["ErrorCode"] == 0, created
    return created


def _logs_in_everywhere_within(cluster: LocalCluster, token: dict, mechanism: str) -> None:
    for broker_id in BROKER_IDS:
        client = eventually(
            lambda b=broker_id: _token_login(cluster, b, token, mechanism), timeout=PROPAGATION_S
        )
        client.close()


def _refused_everywhere(cluster: LocalCluster, token: dict) -> None:
    for broker_id in BROKER_IDS:
        raising(lambda b=broker_id: _token_login(cluster, b, token, "SCRAM-SHA-512"),
                match="Authentication failed")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_token_created_on_a_non_controller_logs_in_on_every_broker(
    cluster: LocalCluster, mechanism: str
) -> None:
    issuer = next(b for b in BROKER_IDS if b != _controller(cluster))
    token = _create_token(cluster, issuer)
    _logs_in_everywhere_within(cluster, token, mechanism)


def test_kafka_python_logs_in_with_a_token_on_every_broker(cluster: LocalCluster) -> None:
    token = _create_token(cluster, 1)
    login = token_login_config(token["TokenId"], token["Hmac"], "SCRAM-SHA-256")
    for broker_id in BROKER_IDS:
        address = cluster.broker_info(broker_id)["listeners"]["SASL_SSL"]
        client = eventually(
            lambda a=address: kafka_python_admin(
                cluster, "SASL_SSL", bootstrap=[a], bootstrap_timeout_ms=2000, **login
            ),
            timeout=30,  # a TLS connect and a login each try: seconds on a busy machine
        )
        try:
            assert client.list_topics() == []
        finally:
            client.close()


@pytest.mark.parametrize("listener", LISTENERS)
def test_librdkafka_logs_in_with_a_token_on_every_broker_without_an_extension(
    cluster: LocalCluster, listener: str
) -> None:
    token = _create_token(cluster, 1)
    _logs_in_everywhere_within(cluster, token, "SCRAM-SHA-256")
    hmac = base64.b64encode(token["Hmac"]).decode()
    for address in _addresses(cluster, listener):
        admin = confluent_admin(cluster, listener, "SCRAM-SHA-256", token["TokenId"], hmac,
                                bootstrap=address)
        assert set(admin.list_topics(timeout=15).brokers) == set(BROKER_IDS)


def test_expired_token_is_refused_on_every_broker(cluster: LocalCluster) -> None:
    token = _create_token(cluster, 2)
    _logs_in_everywhere_within(cluster, token, "SCRAM-SHA-512")
    with _wire(cluster, 3, "admin", admin_password(cluster)) as admin:
        expired = admin.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                {"Hmac": token["Hmac"], "ExpiryTimePeriodMs": 0})
    assert expired["ErrorCode"] == 0
    assert expired["ExpiryTimestampMs"] <= int(time.time() * 1000)
    eventually(lambda: _refused_everywhere(cluster, token), timeout=PROPAGATION_S)


def test_deleted_token_is_refused_on_every_broker_and_its_sessions_end(
    cluster: LocalCluster,
) -> None:
    token = _create_token(cluster, 3)
    _logs_in_everywhere_within(cluster, token, "SCRAM-SHA-256")
    sessions = [_token_login(cluster, b, token, "SCRAM-SHA-256") for b in BROKER_IDS]
    try:
        with _wire(cluster, 1, "admin", admin_password(cluster)) as admin:
            deleted = admin.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                    {"Hmac": token["Hmac"], "ExpiryTimePeriodMs": -1})
        assert deleted["ErrorCode"] == 0
        eventually(lambda: _refused_everywhere(cluster, token), timeout=PROPAGATION_S)
        for session in sessions:
            def closed(s: WireClient = session) -> None:
                raising(lambda: s.request(ApiKey.METADATA, 12,
                                          {"Topics": [], "AllowAutoTopicCreation": False,
                                                  "IncludeTopicAuthorizedOperations": False}))

            eventually(closed, timeout=PROPAGATION_S)
    finally:
        for session in sessions:
            session.close()

