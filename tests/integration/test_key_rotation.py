"""Master-key rotation across a broker restart, on real sockets and ZooKeeper.

A token issued under the old key keeps authenticating, renewing and expiring
once the brokers run with a new current key and the old one listed as
previous; new tokens are issued under the new key; ZooKeeper records only key
identifiers.
"""

from __future__ import annotations

import base64
import time

from tests.support.client import WireClient
from tests.support.inproc import InProcessBroker, bootstrap_user, broker_properties
from tokensvc.core.config import BrokerConfig
from tokensvc.core.errors import Errors
from tokensvc.core.keys import key_id, token_hmac
from zk.client import ZkSettings, open_client
from zk.token_store import TokenStore

OLD, NEW = "rotation-old-key", "rotation-new-key"


def _broker(connect: str, **extra: str) -> InProcessBroker:
    props = broker_properties(1, connect, master_key=None, **extra)
    return InProcessBroker(BrokerConfig.from_properties(props)).start()


def _wait_controller(broker: InProcessBroker) -> None:
    deadline = time.monotonic() + 15
    while not broker.broker.is_controller and time.monotonic() < deadline:
        time.sleep(0.05)


def _token_login(broker: InProcessBroker, token_id: str, hmac: bytes) -> WireClient:
    return WireClient(broker.address(), token_id, base64.b64encode(hmac).decode(), token=True)


def test_tokens_from_the_previous_key_keep_working_after_rotation(zookeeper):
    connect = f"{zookeeper.connect}/rotation-{time.monotonic_ns()}"
    bootstrap_user(connect, "admin", "admin-secret")
    bootstrap_user(connect, "broker", "broker-secret")

    before = _broker(connect, delegation_token_secret_key=OLD)
    _wait_controller(before)
    with WireClient(before.address(), "admin", "admin-secret") as admin:
        old = admin.request(38, 3, {"Renewers": [], "MaxLifetimeMs": -1})
    before.stop()
    assert old["ErrorCode"] == 0
    assert old["Hmac"] == token_hmac(OLD, old["TokenId"])

    after = _broker(
        connect,
        delegation_token_secret_key=NEW, delegation_token_secret_key_previous=OLD,
    )
    try:
        _wait_controller(after)
        with _token_login(after, old["TokenId"], old["Hmac"]):
            pass
        with WireClient(after.address(), "admin", "admin-secret") as admin:
            new = admin.request(38, 3, {"Renewers": [], "MaxLifetimeMs": -1})
            renewed = admin.request(39, 2, {"Hmac": old["Hmac"], "RenewPeriodMs": 60_000})
            described = admin.request(41, 3, {"Owners": None})
            expired = admin.request(40, 2, {"Hmac": old["Hmac"], "ExpiryTimePeriodMs": -1})
        assert new["ErrorCode"] == 0
        assert new["Hmac"] == token_hmac(NEW, new["TokenId"])
        assert renewed["ErrorCode"] == 0
        hmacs = {t["TokenId"]: t["Hmac"] for t in described["Tokens"]}
        assert hmacs[old["TokenId"]] == old["Hmac"]
        assert hmacs[new["TokenId"]] == new["Hmac"]
        assert expired["ErrorCode"] == 0

        client = open_client(ZkSettings(connect))
        try:
            stored = TokenStore(client).get(new["TokenId"])
        finally:
            client.stop()
            client.close()
        assert stored is not None and stored.key_id == key_id(NEW)
    finally:
        after.stop()


def test_a_token_whose_key_was_dropped_no_longer_authenticates(zookeeper):
    connect = f"{zookeeper.connect}/rotation-drop-{time.monotonic_ns()}"
    bootstrap_user(connect, "admin", "admin-secret")
    bootstrap_user(connect, "broker", "broker-secret")
    before = _broker(connect, delegation_token_secret_key=OLD)
    _wait_controller(before)
    with WireClient(before.address(), "admin", "admin-secret") as admin:
        old = admin.request(38, 3, {"Renewers": [], "MaxLifetimeMs": -1})
    before.stop()

    after = _broker(connect, delegation_token_secret_key=NEW)
    try:
        _wait_controller(after)
        refused = False
        try:
            _token_login(after, old["TokenId"], old["Hmac"]).close()
        except ConnectionError:
            refused = True
        assert refused
        with WireClient(after.address(), "admin", "admin-secret") as admin:
            renew = admin.request(39, 2, {"Hmac": old["Hmac"], "RenewPeriodMs": 60_000})
        assert renew["ErrorCode"] == Errors.DELEGATION_TOKEN_NOT_FOUND
    finally:
        after.stop()
