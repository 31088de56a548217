"""Only the controller writes token and credential znodes: proven from ZooKeeper's own
audit log.

Each broker logs in to ZooKeeper with its own digest identity (``zookeeper.digest =
broker-<id>:<password>``), so the audit log's ``user=`` field names the broker behind
every write. A workload sent only to the non-controllers (token create, renew,
expire, an expiry sweep, SCRAM credential upsert and delete) must leave writes under
``/delegation_token/tokens``, ``/delegation_token/requests`` and ``/config/users`` from
the controller's identity alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.client import WireClient
from tests.support.inproc import InProcessBroker, broker_properties
from tokensvc.admin import AdminClient
from tokensvc.client_config import client_config_from_properties
from tokensvc.core.config import BrokerConfig
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.formatter import ScramMechanism, derive_credential
from zk.client import ZkSettings, open_client
from zk.credential_store import CredentialStore
from zk.server import ManagedZooKeeper
from zk.token_store import TokenStore

CHROOT = "/only-controller-writes"
WATCHED = ("/delegation_token/tokens", "/delegation_token/requests", "/config/users")
WRITES = {"create", "delete", "setData", "setAcl"}
SETUP_DIGEST = "setup:setup-password"
BOOTSTRAPPED = {"admin": "admin-secret", "broker": "broker-secret", "alice": "alice-secret"}


@pytest.fixture(scope="module")
def audited_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedZooKeeper]:
    server = ManagedZooKeeper(tmp_path_factory.mktemp("zk-audit"), audit=True)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def brokers(audited_zookeeper: ManagedZooKeeper) -> Iterator[list[InProcessBroker]]:
    connect = audited_zookeeper.connect + CHROOT
    setup = open_client(ZkSettings(connect, digest=SETUP_DIGEST))
    try:
        credentials = CredentialStore(setup)
        for user, password in BOOTSTRAPPED.items():
            for mechanism in ScramMechanism:
                credentials.upsert(user, mechanism, derive_credential(password, mechanism, 4096))
    finally:
        setup.stop()
        setup.close()
    started = []
    try:
        for broker_id in (1, 2, 3):
            props = broker_properties(
                broker_id,
                connect,
                zookeeper_digest=f"broker-{broker_id}:zk-password-{broker_id}",
                delegation_token_expiry_check_interval_ms="300",
            )
            started.append(InProcessBroker(BrokerConfig.from_properties(props)).start())
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not any(b.broker.is_controller for b in started):
            time.sleep(0.05)
        yield started
    finally:
        for b in started:
            b.stop()


def audit_writes(path: Path) -> list[dict[str, str]]:
    """Successful writes from ZooKeeper's audit log, as dicts of its key=value fields."""
    writes = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = dict(part.split("=", 1) for part in line.split("\t") if "=" in part)
        if fields.get("operation") in WRITES and fields.get("result") == "success":
            writes.append(fields)
    return writes


def under_watched(znode: str) -> bool:
    return any(znode.startswith(CHROOT + prefix + "/") for prefix in WATCHED)


def wait_until(predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def test_writes_sent_to_non_controllers_are_done_by_the_controller_identity_alone(
    audited_zookeeper: ManagedZooKeeper, brokers: list[InProcessBroker]
) -> None:
    controller = next(b for b in brokers if b.broker.is_controller)
    others = [b for b in brokers if b is not controller]
    assert len(others) == 2
    client = open_client(ZkSettings(audited_zookeeper.connect + CHROOT))
    store = TokenStore(client)
    try:
        swept_ids = []
        for follower in others:
            with WireClient(follower.address(), "alice", "alice-secret") as alice:
                created = alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                        {"Renewers": [], "MaxLifetimeMs": -1})
                renewed = alice.request(ApiKey.RENEW_DELEGATION_TOKEN, 2, {"Hmac": created["Hmac"],
                                                   "RenewPeriodMs": 60_000})
                kept = alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                     {"Renewers": [], "MaxLifetimeMs": -1})
                expired = alice.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2, {"Hmac": created["Hmac"],
                                                    "ExpiryTimePeriodMs": -1})
                short = alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                      {"Renewers": [], "MaxLifetimeMs": 1})
            assert [r["ErrorCode"] for r in (created, renewed, kept, expired, short)] == [0] * 5
            swept_ids.append(short["TokenId"])
            config = client_config_from_properties({
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                    'required username="admin" password="admin-secret";',
            })
            host, port = follower.address()
            user = f"user-of-{follower.config.broker_id}"
            with AdminClient(f"{host}:{port}", config, timeout_s=15) as admin:
                admin.upsert_user_scram_credential(user, ScramMechanism.SCRAM_SHA_512, "pw-1")
                admin.upsert_user_scram_credential(user, ScramMechanism.SCRAM_SHA_256, "pw-2")
                admin.delete_user_scram_credential(user, ScramMechanism.SCRAM_SHA_512)
        # the expiry sweep (controller only) removes the 1 ms tokens
        wait_until(lambda: all(store.get(t) is None for t in swept_ids))
    finally:
        client.stop()
        client.close()

    def watched_writes() -> list[dict[str, str]]:
        return [w for w in audit_writes(audited_zookeeper.audit_log_path)
                if under_watched(w.get("znode", ""))]

    # ZooKeeper writes its audit log asynchronously: wait for the last sweep's deletes.
    wait_until(lambda: sum(w["operation"] == "delete"
                           and w["znode"].startswith(f"{CHROOT}/delegation_token/tokens/")
                           for w in watched_writes()) >= 4)
    by_identity: dict[str, list[dict[str, str]]] = {}
    for write in watched_writes():
        by_identity.setdefault(write["user"].split(",")[0], []).append(write)
    # Before the brokers started, the test itself wrote the bootstrap users' credentials.
    setup_writes = by_identity.pop("setup", [])
    assert {w["znode"].split("/")[4] for w in setup_writes if "/config/users/" in w["znode"]} \
        <= set(BOOTSTRAPPED)
    assert set(by_identity) == {f"broker-{controller.config.broker_id}"}, by_identity.keys()
    writes = by_identity[f"broker-{controller.config.broker_id}"]
    operations = {(w["operation"], w["znode"].split("/")[2]) for w in writes}
    assert {("create", "delegation_token"), ("setData", "delegation_token"),
            ("delete", "delegation_token"), ("create", "config")} <= operations
