"""Brokers on real sockets and a real ZooKeeper: SCRAM logins, token APIs, session rules."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from tests.support.client import WireClient
from tests.support.inproc import (
    InProcessBroker,
    bootstrap_user,
    broker_properties,
    chroot_with_users,
    controller,
    follower,
    running_brokers,
)
from tests.support.wait import raising, retry
from tokensvc.core.config import BrokerConfig
from tokensvc.core.errors import Errors
from tokensvc.protocol.api import ApiKey


@pytest.fixture(scope="module")
def cluster(zookeeper):
    users = [("admin", "admin-secret"), ("broker", "broker-secret"),
             ("alice", "alice-secret"), ("bob", "bob-secret")]
    with running_brokers(chroot_with_users(zookeeper.connect, "broker-tokens", users),
                         (1, 2)) as brokers:
        yield brokers


def login(broker: InProcessBroker, user: str, password: str, **kw) -> WireClient:
    return WireClient(broker.address(), user, password, **kw)


def create_token(client: WireClient, **body) -> dict:
    response = client.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                              {"Renewers": [], "MaxLifetimeMs": -1, **body})
    return response


def token_login(broker: InProcessBroker, created: dict, mechanism="SCRAM-SHA-256") -> WireClient:
    import base64

    return WireClient(
        broker.address(), created["TokenId"], base64.b64encode(created["Hmac"]).decode(),
        mechanism=mechanism, token=True,
    )


def eventually(fn, timeout=15.0):
    return retry(fn, timeout, errors=(Exception,), interval=0.02)


def test_user_creates_token_owned_by_itself(cluster):
    with login(cluster[0], "alice", "alice-secret") as alice:
        created = create_token(alice)
    assert created["ErrorCode"] == 0
    assert len(created["TokenId"]) == 22
    assert len(created["Hmac"]) == 64
    assert (created["PrincipalType"], created["PrincipalName"]) == ("User", "alice")
    assert created["TokenRequesterPrincipalName"] == "alice"
    assert created["ExpiryTimestampMs"] <= created["MaxTimestampMs"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_token_from_one_broker_logs_in_on_the_other(cluster, mechanism):
    with login(follower(cluster), "alice", "alice-secret") as alice:
        created = create_token(alice)
    assert created["ErrorCode"] == 0
    for broker in cluster:
        client = eventually(lambda b=broker: token_login(b, created, mechanism))
        client.close()


def test_token_session_may_not_request_tokens(cluster):
    with login(cluster[0], "alice", "alice-secret") as alice:
        created = create_token(alice)
    with eventually(lambda: token_login(cluster[0], created)) as session:
        refused = create_token(session)
        described = session.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})
    assert refused["ErrorCode"] == Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert described["ErrorCode"] == Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


def test_plaintext_listener_may_not_request_tokens(cluster):
    with WireClient(cluster[0].address("PLAINTEXT"), security_protocol="PLAINTEXT") as anon:
        refused = create_token(anon)
    assert refused["ErrorCode"] == Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED


def test_renewer_renews_and_non_renewer_is_owner_mismatch(cluster):
    with login(cluster[0], "alice", "alice-secret") as alice:
        created = create_token(
            alice, Renewers=[{"PrincipalType": "User", "PrincipalName": "bob"}]
        )
    time.sleep(0.01)
    with login(cluster[1], "bob", "bob-secret") as bob:
        renewed = eventually(lambda: _ok(bob.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                                     {"Hmac": created["Hmac"],
                                                             "RenewPeriodMs": 60_000})))
    assert renewed["ExpiryTimestampMs"] > 0
    with login(cluster[1], "admin", "admin-secret") as admin:
        refused = admin.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                {"Hmac": created["Hmac"], "RenewPeriodMs": 60_000})
    assert refused["ErrorCode"] == Errors.DELEGATION_TOKEN_OWNER_MISMATCH


def _ok(response: dict) -> dict:
    assert response["ErrorCode"] == 0, response
    return response


def test_unknown_hmac_is_token_not_found(cluster):
    with login(cluster[0], "alice", "alice-secret") as alice:
        response = alice.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                 {"Hmac": b"\x00" * 64, "RenewPeriodMs": -1})
    assert response["ErrorCode"] == Errors.DELEGATION_TOKEN_NOT_FOUND


def test_expire_now_refuses_login_everywhere(cluster):
    with login(cluster[0], "alice", "alice-secret") as alice:
        created = create_token(alice)
        eventually(lambda: [token_login(b, created).close() for b in cluster])
        expired = alice.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": -1})
    assert expired["ErrorCode"] == 0

    def refused_everywhere():
        for b in cluster:
            raising(lambda b=b: token_login(b, created))

    eventually(refused_everywhere)


def test_describe_shows_own_tokens_and_super_user_sees_all(cluster):
    with login(cluster[0], "alice", "alice-secret") as alice:
        mine = create_token(alice)
    with login(cluster[0], "bob", "bob-secret") as bob:
        bobs = create_token(bob)
        seen_by_bob = eventually(
            lambda: _has(bob.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3,
                                     {"Owners": None}), bobs["TokenId"])
        )
    assert mine["TokenId"] not in {t["TokenId"] for t in seen_by_bob["Tokens"]}
    with login(cluster[0], "admin", "admin-secret") as admin:
        everything = eventually(
            lambda: _has(admin.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3,
                                       {"Owners": None}), mine["TokenId"])
        )
        only_alice = admin.request(
            ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": [{"PrincipalType": "User", "PrincipalName": "alice"}]}
        )
        nobody = admin.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": []})
    ids = {t["TokenId"] for t in everything["Tokens"]}
    assert {mine["TokenId"], bobs["TokenId"]} <= ids
    assert {t["PrincipalName"] for t in only_alice["Tokens"]} == {"alice"}
    assert nobody["Tokens"] == []


def _has(response: dict, token_id: str) -> dict:
    assert response["ErrorCode"] == 0, response
    assert token_id in {t["TokenId"] for t in response["Tokens"]}
    return response


def test_create_for_another_owner_needs_create_tokens(cluster):
    with login(cluster[0], "alice", "alice-secret") as alice:
        refused = create_token(alice, OwnerPrincipalType="User", OwnerPrincipalName="bob")
    assert refused["ErrorCode"] == Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    with login(cluster[0], "admin", "admin-secret") as admin:
        created = create_token(admin, OwnerPrincipalType="User", OwnerPrincipalName="bob")
    assert created["ErrorCode"] == 0
    assert created["PrincipalName"] == "bob"
    assert created["TokenRequesterPrincipalName"] == "admin"


def test_non_user_renewer_is_invalid_principal_type(cluster):
    with login(cluster[0], "alice", "alice-secret") as alice:
        refused = create_token(alice, Renewers=[{"PrincipalType": "Group", "PrincipalName": "x"}])
    assert refused["ErrorCode"] == Errors.INVALID_PRINCIPAL_TYPE


def test_wrong_password_fails_generically_after_the_delay(cluster):
    started = time.monotonic()
    with pytest.raises(ConnectionError) as wrong:
        login(cluster[0], "alice", "not-her-password")
    elapsed = time.monotonic() - started
    with pytest.raises(ConnectionError) as unknown:
        login(cluster[0], "nobody", "whatever")
    assert "Authentication failed" in str(wrong.value)
    assert str(wrong.value) == str(unknown.value)
    assert elapsed >= 0.05


def _raw(address) -> socket.socket:
    s = socket.create_connection(address, timeout=5)
    return s


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except (TimeoutError, ConnectionResetError):
        return True


def test_request_before_authentication_closes_the_connection(cluster):
    s = _raw(cluster[0].address())
    metadata_v1 = struct.pack(">hhih", 3, 1, 7, 4) + b"test" + struct.pack(">i", -1)
    s.sendall(struct.pack(">i", len(metadata_v1)) + metadata_v1)
    assert _closed(s)
    s.close()


def test_oversized_frame_closes_only_that_connection(cluster):
    s = _raw(cluster[0].address())
    s.sendall(struct.pack(">i", 2**31 - 1) + b"\x00" * 16)
    assert _closed(s)
    s.close()
    with login(cluster[0], "alice", "alice-secret") as alice:
        assert create_token(alice)["ErrorCode"] == 0


def test_unknown_api_versions_version_gets_v0_unsupported_version(cluster):
    s = _raw(cluster[0].address())
    request = struct.pack(">hhih", 18, 99, 42, 1) + b"x"
    s.sendall(struct.pack(">i", len(request)) + request)
    size = struct.unpack(">i", s.recv(4))[0]
    payload = b""
    while len(payload) < size:
        payload += s.recv(size - len(payload))
    s.close()
    correlation, error = struct.unpack(">ih", payload[:6])
    assert correlation == 42
    assert error == Errors.UNSUPPORTED_VERSION


def test_envelope_on_a_client_listener_is_refused(cluster):
    with login(controller(cluster), "admin", "admin-secret") as admin:
        response = admin.request(ApiKey.ENVELOPE, 0, {"RequestData": b"", "RequestPrincipal": b"",
                                          "ClientHostAddress": b"\x7f\x00\x00\x01"})
    assert response["ErrorCode"] == Errors.CLUSTER_AUTHORIZATION_FAILED


def test_user_scram_credentials_can_be_created_described_and_deleted(cluster):
    import hashlib
    import os

    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", b"carol-secret", salt, 4096)
    with login(cluster[1], "admin", "admin-secret") as admin:
        altered = admin.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                                {"Deletions": [], "Upsertions": [
            {"Name": "carol", "Mechanism": 1, "Iterations": 4096, "Salt": salt,
             "SaltedPassword": salted}]})
        assert altered["Results"][0]["ErrorCode"] == 0
        described = eventually(lambda: _described(admin, "carol"))
        assert described["CredentialInfos"] == [{"Mechanism": 1, "Iterations": 4096}]
        eventually(lambda: login(cluster[0], "carol", "carol-secret").close())
        deleted = admin.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                                {"Upsertions": [], "Deletions": [
            {"Name": "carol", "Mechanism": 1}]})
        assert deleted["Results"][0]["ErrorCode"] == 0
        missing = eventually(lambda: _described(admin, "carol", Errors.RESOURCE_NOT_FOUND))
    assert missing["ErrorCode"] == Errors.RESOURCE_NOT_FOUND


def _described(admin: WireClient, user: str, error: int = 0) -> dict:
    response = admin.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"Users": [{"Name": user}]})
    result = response["Results"][0]
    assert result["ErrorCode"] == error, result
    return result


def test_low_iterations_are_unacceptable(cluster):
    with login(cluster[0], "admin", "admin-secret") as admin:
        altered = admin.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                                {"Deletions": [], "Upsertions": [
            {"Name": "dave", "Mechanism": 1, "Iterations": 1024, "Salt": b"s" * 16,
             "SaltedPassword": b"p" * 32}]})
    assert altered["Results"][0]["ErrorCode"] == Errors.UNACCEPTABLE_CREDENTIAL


def test_non_super_user_may_not_alter_credentials(cluster):
    with login(cluster[0], "alice", "alice-secret") as alice:
        altered = alice.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                                {"Deletions": [], "Upsertions": [
            {"Name": "eve", "Mechanism": 1, "Iterations": 4096, "Salt": b"s" * 16,
             "SaltedPassword": b"p" * 32}]})
    assert altered["Results"][0]["ErrorCode"] == Errors.CLUSTER_AUTHORIZATION_FAILED


def test_token_requests_fail_when_no_master_key_is_configured(zookeeper):
    connect = f"{zookeeper.connect}/no-key-{time.monotonic_ns()}"
    bootstrap_user(connect, "admin", "admin-secret")
    broker = InProcessBroker(
        BrokerConfig.from_properties(broker_properties(1, connect, master_key=None))
    ).start()
    try:
        with login(broker, "admin", "admin-secret") as admin:
            refused = create_token(admin)
    finally:
        broker.stop()
    assert refused["ErrorCode"] == Errors.DELEGATION_TOKEN_AUTH_DISABLED
