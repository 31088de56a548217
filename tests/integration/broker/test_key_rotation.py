"""Master-key rotation across a broker restart, on real sockets and ZooKeeper.

A token issued under the old key keeps authenticating, renewing and expiring
once the brokers run with a new current key and the old one listed as
previous; new tokens are issued under the new key; ZooKeeper records only key
identifiers.
"""

from __future__ import annotations

import base64

from tests.support.client import WireClient
from tests.support.inproc import InProcessBroker, chroot_with_users, running_brokers, zk_client
from tokensvc.core.errors import Errors
from tokensvc.core.keys import key_id, token_hmac
from tokensvc.protocol.api import ApiKey
from zk.token_store import TokenStore

OLD, NEW = "rotation-old-key", "rotation-new-key"


def _token_under_the_old_key(zookeeper, name: str) -> tuple[str, dict]:
    """A fresh chroot with the admin and broker users, and the create answer of a token a
    broker running with key OLD issued there (that broker is stopped again)."""
    connect = chroot_with_users(zookeeper.connect, name,
                                [("admin", "admin-secret"), ("broker", "broker-secret")])
    with running_brokers(connect, (1,), delegation_token_secret_key=OLD) as (before,), \
            WireClient(before.address(), "admin", "admin-secret") as admin:
        old = admin.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                            {"Renewers": [], "MaxLifetimeMs": -1})
    return connect, old


def _token_login(broker: InProcessBroker, token_id: str, hmac: bytes) -> WireClient:
    return WireClient(broker.address(), token_id, base64.b64encode(hmac).decode(), token=True)


def test_tokens_from_the_previous_key_keep_working_after_rotation(zookeeper):
    connect, old = _token_under_the_old_key(zookeeper, "rotation")
    assert old["ErrorCode"] == 0
    assert old["Hmac"] == token_hmac(OLD, old["TokenId"])

    with running_brokers(connect, (1,), delegation_token_secret_key=NEW,
                         delegation_token_secret_key_previous=OLD) as (after,):
        with _token_login(after, old["TokenId"], old["Hmac"]):
            pass
        with WireClient(after.address(), "admin", "admin-secret") as admin:
            new = admin.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                {"Renewers": [], "MaxLifetimeMs": -1})
            renewed = admin.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                    {"Hmac": old["Hmac"], "RenewPeriodMs": 60_000})
            described = admin.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})
            expired = admin.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                    {"Hmac": old["Hmac"], "ExpiryTimePeriodMs": -1})
        assert new["ErrorCode"] == 0
        assert new["Hmac"] == token_hmac(NEW, new["TokenId"])
        assert renewed["ErrorCode"] == 0
        hmacs = {t["TokenId"]: t["Hmac"] for t in described["Tokens"]}
        assert hmacs[old["TokenId"]] == old["Hmac"]
        assert hmacs[new["TokenId"]] == new["Hmac"]
        assert expired["ErrorCode"] == 0

        with zk_client(connect) as client:
            stored = TokenStore(client).get(new["TokenId"])
        assert stored is not None and stored.key_id == key_id(NEW)


def test_a_token_whose_key_was_dropped_no_longer_authenticates(zookeeper):
    connect, old = _token_under_the_old_key(zookeeper, "rotation-drop")

    with running_brokers(connect, (1,), delegation_token_secret_key=NEW) as (after,):
        refused = False
        try:
            _token_login(after, old["TokenId"], old["Hmac"]).close()
        except ConnectionError:
            refused = True
        assert refused
        with WireClient(after.address(), "admin", "admin-secret") as admin:
            renew = admin.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                  {"Hmac": old["Hmac"], "RenewPeriodMs": 60_000})
        assert renew["ErrorCode"] == Errors.DELEGATION_TOKEN_NOT_FOUND
