"""KIP-590 on real sockets and a real ZooKeeper: what a non-controller forwards, what the
controller accepts in an envelope, and the exactly-once create by request key.

Hand-made envelopes are sent with WireClient logged in on the inter-broker (BROKER)
listener, as the super user ``broker`` a forwarding broker uses, or as a user without
CLUSTER_ACTION.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.support.client import WireClient
from tests.support.inproc import (
    InProcessBroker,
    broker_properties,
    chroot_with_users,
    controller,
    follower,
    running_brokers,
    zk_client,
)
from tokensvc.admin import AdminClient, AdminError
from tokensvc.client_config import client_config_from_properties
from tokensvc.core.config import BrokerConfig
from tokensvc.core.errors import Errors
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.protocol import RequestHeader, decode_response, encode_request
from tokensvc.protocol.api import ApiKey
from tokensvc.protocol.principal_serde import serialize_principal
from tokensvc.scram.formatter import ScramMechanism
from zk.requests import RequestRecords
from zk.token_store import TokenStore

LOCALHOST = bytes([127, 0, 0, 1])
USERS = [("admin", "admin-secret"), ("broker", "broker-secret"), ("alice", "alice-secret"),
         ("bob", "bob-secret")]


@pytest.fixture(scope="module")
def zk_chroot(zookeeper):
    return chroot_with_users(zookeeper.connect, "forwarding", USERS)


@pytest.fixture(scope="module")
def cluster(zk_chroot):
    with running_brokers(zk_chroot, (1, 2)) as brokers:
        yield brokers


@pytest.fixture(scope="module")
def zk(zk_chroot):
    with zk_client(zk_chroot) as client:
        yield client


@pytest.fixture(scope="module")
def store(zk):
    return TokenStore(zk)


def recorded_token_id(zk, key: str) -> str | None:
    record = RequestRecords(zk).get(key)
    return None if record is None else record.outcome["token_id"]


def forwarded_count(broker: InProcessBroker, client_id: str) -> float:
    value = broker.broker.local.metrics.registry.get_sample_value(
        "tokensvc_forwarded_requests_total", {"client_id": client_id}
    )
    return value or 0.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def envelope(
    inner_api: int,
    inner_version: int,
    inner_body: dict,
    principal: KafkaPrincipal,
    *,
    correlation_id: int = 4242,
    principal_bytes: bytes | None = None,
    request_key: str | None = None,
    first: bool = False,
) -> dict:
    data = encode_request(
        RequestHeader(inner_api, inner_version, correlation_id, "original-client"), inner_body
    )
    return {
        "RequestData": data,
        "RequestPrincipal": principal_bytes if principal_bytes is not None
        else serialize_principal(principal),
        "ClientHostAddress": LOCALHOST,
        "RequestKey": request_key,
        "FirstAttempt": first,
    }


def create_body(**extra) -> dict:
    return {"Renewers": [], "MaxLifetimeMs": -1, **extra}


def as_broker(broker: InProcessBroker) -> WireClient:
    return WireClient(broker.address("BROKER"), "broker", "broker-secret",
                      mechanism="SCRAM-SHA-512", client_id="broker-9")


def inner_create(response: dict, correlation_id: int = 4242) -> dict:
    assert response["ErrorCode"] == 0, response
    got_id, body = decode_response(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                   bytes(response["ResponseData"]))
    assert got_id == correlation_id
    return body


ALICE = KafkaPrincipal.user("alice")


def send_create_envelope(broker, request_key, principal: KafkaPrincipal = ALICE, *,
                         first: bool = False) -> dict:
    body = envelope(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                    create_body(), principal, request_key=request_key, first=first)
    with as_broker(broker) as peer:
        return inner_create(peer.request(ApiKey.ENVELOPE, 0, body))


# --- the forwarding broker ------------------------------------------------------------------


def test_create_on_a_non_controller_is_forwarded_and_counted_per_client_id(cluster, store):
    client_id = unique("fwd-create")
    with WireClient(follower(cluster).address(), "alice", "alice-secret",
                    client_id=client_id) as alice:
        created = alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, create_body())
    assert created["ErrorCode"] == 0
    assert forwarded_count(follower(cluster), client_id) == 1
    assert forwarded_count(controller(cluster), client_id) == 0
    stored = store.get(created["TokenId"])
    assert stored is not None and stored.owner == KafkaPrincipal.user("alice")


def test_token_and_credential_writes_are_forwarded_by_a_non_controller(cluster, store):
    client_id = unique("fwd-all")
    with WireClient(follower(cluster).address(), "alice", "alice-secret",
                    client_id=client_id) as alice:
        created = alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, create_body())
        renewed = alice.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                {"Hmac": created["Hmac"], "RenewPeriodMs": 60_000})
        expired = alice.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": -1})
    assert [created["ErrorCode"], renewed["ErrorCode"], expired["ErrorCode"]] == [0, 0, 0]
    assert store.get(created["TokenId"]) is None

    config = client_config_from_properties({
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="admin" password="admin-secret";',
        "client.id": client_id,
    })
    host, port = follower(cluster).address()
    user = unique("carol")
    with AdminClient(f"{host}:{port}", config, timeout_s=15) as admin:
        admin.upsert_user_scram_credential(user, ScramMechanism.SCRAM_SHA_256, "carol-secret")
        admin.delete_user_scram_credential(user, ScramMechanism.SCRAM_SHA_256)
    assert forwarded_count(follower(cluster), client_id) == 5


def test_a_request_refused_by_the_local_checks_is_not_forwarded(cluster):
    client_id = unique("fwd-plain")
    with WireClient(follower(cluster).address("PLAINTEXT"), security_protocol="PLAINTEXT",
                    client_id=client_id) as anonymous:
        refused = anonymous.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, create_body())
    assert refused["ErrorCode"] == Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert forwarded_count(follower(cluster), client_id) == 0


def test_forwarded_response_reaches_the_client_unchanged(cluster):
    with WireClient(controller(cluster).address(), "bob", "bob-secret") as direct, \
            WireClient(follower(cluster).address(), "bob", "bob-secret") as forwarded:
        a = direct.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, create_body(MaxLifetimeMs=3_600_000))
        b = forwarded.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                              create_body(MaxLifetimeMs=3_600_000))
    assert a.keys() == b.keys()
    for field in ("ErrorCode", "PrincipalType", "PrincipalName", "TokenRequesterPrincipalName"):
        assert a[field] == b[field]
    assert b["MaxTimestampMs"] - b["IssueTimestampMs"] == 3_600_000
    assert len(b["Hmac"]) == 64


# --- the controller's envelope checks -------------------------------------------------------


def test_envelope_is_handled_as_the_original_principal(cluster):
    created = send_create_envelope(controller(cluster), None, KafkaPrincipal.user("bob"))
    assert created["ErrorCode"] == 0
    assert (created["PrincipalName"], created["TokenRequesterPrincipalName"]) == ("bob", "bob")


def test_envelope_carrying_a_token_authenticated_principal_may_not_create_tokens(cluster):
    principal = KafkaPrincipal("User", "alice", token_authenticated=True)
    with as_broker(controller(cluster)) as peer:
        response = peer.request(ApiKey.ENVELOPE, 0, envelope(ApiKey.CREATE_DELEGATION_TOKEN, 3, create_body(), principal))
    assert inner_create(response)["ErrorCode"] == Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


def test_envelope_from_a_user_without_cluster_action_is_cluster_authorization_failed(cluster):
    with WireClient(controller(cluster).address("BROKER"), "alice", "alice-secret") as alice:
        response = alice.request(
            ApiKey.ENVELOPE, 0, envelope(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                         create_body(), KafkaPrincipal.user("alice"))
        )
    assert response["ErrorCode"] == Errors.CLUSTER_AUTHORIZATION_FAILED
    assert response["ResponseData"] is None


def test_envelope_on_a_client_listener_is_refused_and_the_connection_closed(cluster):
    with WireClient(controller(cluster).address(), "broker", "broker-secret",
                    mechanism="SCRAM-SHA-512") as peer:
        response = peer.request(
            ApiKey.ENVELOPE, 0, envelope(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                         create_body(), KafkaPrincipal.user("alice"))
        )
        assert response["ErrorCode"] == Errors.CLUSTER_AUTHORIZATION_FAILED
        with pytest.raises(ConnectionError):
            peer.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})


def test_envelope_to_a_broker_that_is_not_the_controller_is_not_controller(cluster):
    with as_broker(follower(cluster)) as peer:
        response = peer.request(
            ApiKey.ENVELOPE, 0, envelope(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                         create_body(), KafkaPrincipal.user("alice"))
        )
    assert response["ErrorCode"] == Errors.NOT_CONTROLLER


def test_unreadable_principal_is_principal_deserialization_failure(cluster):
    body = envelope(ApiKey.CREATE_DELEGATION_TOKEN, 3, create_body(), KafkaPrincipal.user("alice"),
                    principal_bytes=b"\x00\x00\xff\xfe garbage")
    with as_broker(controller(cluster)) as peer:
        response = peer.request(ApiKey.ENVELOPE, 0, body)
    assert response["ErrorCode"] == Errors.PRINCIPAL_DESERIALIZATION_FAILURE


def test_envelope_around_a_read_request_is_invalid_request(cluster):
    body = envelope(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3,
                    {"Owners": None}, KafkaPrincipal.user("alice"))
    with as_broker(controller(cluster)) as peer:
        response = peer.request(ApiKey.ENVELOPE, 0, body)
    assert response["ErrorCode"] == Errors.INVALID_REQUEST


def test_malformed_request_key_is_invalid_request(cluster):
    body = envelope(ApiKey.CREATE_DELEGATION_TOKEN, 3, create_body(), KafkaPrincipal.user("alice"),
                    request_key="../../controller")
    with as_broker(controller(cluster)) as peer:
        response = peer.request(ApiKey.ENVELOPE, 0, body)
    assert response["ErrorCode"] == Errors.INVALID_REQUEST


# --- exactly-once create ----------------------------------------------------------------------


def test_same_request_key_twice_creates_one_token(cluster, store, zk):
    key = uuid.uuid4().hex
    before = set(store.token_ids())
    first = send_create_envelope(controller(cluster), key)
    second = send_create_envelope(controller(cluster), key)
    assert first["ErrorCode"] == 0
    assert second == first
    assert set(store.token_ids()) - before == {first["TokenId"]}
    assert recorded_token_id(zk, key) == first["TokenId"]
    assert controller(cluster).broker.parts.ledger.replayed >= 1


def test_first_attempt_creates_and_a_retry_is_answered_with_its_token(cluster, store, zk):
    key = uuid.uuid4().hex
    replayed = controller(cluster).broker.parts.ledger.replayed
    first = send_create_envelope(controller(cluster), key, first=True)
    assert first["ErrorCode"] == 0
    assert recorded_token_id(zk, key) == first["TokenId"]
    retry = send_create_envelope(controller(cluster), key)
    assert retry == first
    assert controller(cluster).broker.parts.ledger.replayed == replayed + 1


def test_a_key_wrongly_marked_first_twice_still_creates_one_token(cluster, store):
    """The first-attempt mark only skips a read: the transaction still refuses a
    recorded key, and the answer is the token the key names."""
    key = uuid.uuid4().hex
    before = set(store.token_ids())
    first = send_create_envelope(controller(cluster), key, first=True)
    again = send_create_envelope(controller(cluster), key, first=True)
    assert (again["TokenId"], again["Hmac"]) == (first["TokenId"], first["Hmac"])
    assert set(store.token_ids()) - before == {first["TokenId"]}


def test_concurrent_attempts_with_one_request_key_create_one_token(cluster, store):
    key = uuid.uuid4().hex
    before = set(store.token_ids())
    clients = [as_broker(controller(cluster)) for _ in range(4)]
    body = envelope(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                    create_body(), KafkaPrincipal.user("alice"), request_key=key)
    results: list[dict] = []
    barrier = threading.Barrier(len(clients))

    def attempt(client: WireClient) -> None:
        barrier.wait()
        results.append(inner_create(client.request(ApiKey.ENVELOPE, 0, body)))

    threads = [threading.Thread(target=attempt, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for c in clients:
        c.close()
    assert len(results) == 4
    assert {r["TokenId"] for r in results} == {results[0]["TokenId"]}
    assert set(store.token_ids()) - before == {results[0]["TokenId"]}


def test_retry_of_a_create_the_cache_does_not_hold_is_answered_from_zookeeper(cluster, store):
    key = uuid.uuid4().hex
    first = send_create_envelope(controller(cluster), key)
    controller(cluster).broker.local.cache.remove(first["TokenId"])  # as if the watch lagged
    second = send_create_envelope(controller(cluster), key)
    assert (second["TokenId"], second["Hmac"]) == (first["TokenId"], first["Hmac"])
    assert controller(cluster).broker.local.cache.by_id(first["TokenId"]) is not None


def test_request_key_replayed_for_another_requester_is_invalid_request(cluster, store):
    key = uuid.uuid4().hex
    send_create_envelope(controller(cluster), key, KafkaPrincipal.user("alice"))
    stolen = send_create_envelope(controller(cluster), key, KafkaPrincipal.user("bob"))
    assert stolen["ErrorCode"] == Errors.INVALID_REQUEST
    assert stolen["TokenId"] == "" and stolen["Hmac"] == b""


def test_forwarder_that_cannot_reach_the_controller_answers_request_timed_out(zk_chroot, cluster):
    props = broker_properties(3, zk_chroot, request_timeout_ms="1000")
    props["inter.broker.sasl.password"] = "not-the-broker-password"
    lost = InProcessBroker(BrokerConfig.from_properties(props)).start()
    try:
        assert not lost.broker.is_controller
        client_id = unique("fwd-timeout")
        with WireClient(lost.address(), "alice", "alice-secret", client_id=client_id) as alice:
            started = time.monotonic()
            response = alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, create_body())
            elapsed = time.monotonic() - started
        assert response["ErrorCode"] == Errors.REQUEST_TIMED_OUT
        assert response["TokenId"] == ""
        assert elapsed >= 1.0
        assert forwarded_count(lost, client_id) == 1
    finally:
        lost.stop()


def test_forwarded_writes_with_per_item_results_that_time_out_fail_every_item(zk_chroot, cluster):
    """AlterUserScramCredentials, CreateAcls and DeleteAcls have no top-level error code:
    a forwarding that timed out must fail each user, creation and filter sent. An
    answer with no items reads as success to every client (found by ./dev chaos --net: a
    user deletion "acknowledged" while the controller was cut off, and never applied)."""
    props = broker_properties(4, zk_chroot, request_timeout_ms="1000")
    props["inter.broker.sasl.password"] = "not-the-broker-password"
    lost = InProcessBroker(BrokerConfig.from_properties(props)).start()
    user = unique("kept")
    topic = unique("topic")
    rule = {"ResourceType": 2, "ResourceName": topic, "ResourcePatternType": 3,
            "Principal": "User:alice", "Host": "*", "Operation": 3, "PermissionType": 3}
    rule_filter = {"ResourceTypeFilter": 2, "ResourceNameFilter": topic, "PatternTypeFilter": 3,
                   "PrincipalFilter": None, "HostFilter": None, "Operation": 1,
                   "PermissionType": 1}
    try:
        assert not lost.broker.is_controller
        config = client_config_from_properties({
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                'required username="admin" password="admin-secret";',
        })
        with AdminClient("{}:{}".format(*cluster[0].address()), config, timeout_s=15) as admin:
            admin.upsert_user_scram_credential(user, ScramMechanism.SCRAM_SHA_256, "pw-1")
        with WireClient(lost.address(), "admin", "admin-secret") as wire:
            deleted = wire.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                                   {"Deletions": [{"Name": user, "Mechanism": 1}],
                                           "Upsertions": []})
            created = wire.request(ApiKey.CREATE_ACLS, 3, {"Creations": [rule, rule]})
            removed = wire.request(ApiKey.DELETE_ACLS, 3, {"Filters": [rule_filter]})
        assert [(r["User"], r["ErrorCode"]) for r in deleted["Results"]] == \
            [(user, Errors.REQUEST_TIMED_OUT)]
        assert [r["ErrorCode"] for r in created["Results"]] == [Errors.REQUEST_TIMED_OUT] * 2
        assert [(r["ErrorCode"], r["MatchingAcls"]) for r in removed["FilterResults"]] == \
            [(Errors.REQUEST_TIMED_OUT, [])]
        # The project's AdminClient raises rather than reporting the deletion done ...
        with AdminClient("{}:{}".format(*lost.address()), config, timeout_s=3) as admin, \
                pytest.raises(AdminError, match="REQUEST_TIMED_OUT|timed out"):
            admin.delete_user_scram_credential(user, ScramMechanism.SCRAM_SHA_256)
        # ... and nothing changed: the user still logs in.
        with WireClient(cluster[0].address(), user, "pw-1"):
            pass
    finally:
        lost.stop()
