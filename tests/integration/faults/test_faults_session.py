"""A broker's ZooKeeper session expires: it must come back equal to ZooKeeper.

Two broker processes (``LocalCluster``) on the suite's ZooKeeper with a 3 s session
timeout. The broker that is not the controller is frozen with SIGSTOP for longer than
its session timeout, so ZooKeeper expires its session (its registration and watches
go). Meanwhile the controller creates, renews, expires and sweeps tokens. After SIGCONT
the frozen broker finds its session gone, opens a new one and resynchronises: its
cache (described by the super user, and tried with token logins on it) must equal
ZooKeeper's tokens, including the ones created and removed while it was frozen.
"""

from __future__ import annotations

import base64
import os
import signal
import time
from pathlib import Path

import pytest

from bench import zkraw
from tests.support.client import WireClient
from tests.support.inproc import zk_client
from tests.support.local_cluster import ClusterFactory, broker_address, broker_metric
from tests.support.wait import wait_for
from tokensvc.cluster import LocalCluster
from tokensvc.protocol.api import ApiKey
from zk.brokers import BrokerRegistry
from zk.token_store import TokenStore

SESSION_TIMEOUT_MS = 3000
HOUR_MS = 3_600_000


@pytest.fixture
def cluster(cluster_factory: ClusterFactory, zk_connect: str) -> LocalCluster:
    """A cluster per test on the test's chroot: the faults expire its brokers' sessions."""
    return cluster_factory(brokers=2, zookeeper=zk_connect, overrides={
        "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "delegation.token.expiry.check.interval.ms": "500",
    })


@pytest.fixture
def zk(cluster: LocalCluster):
    with zk_client(cluster.info["zookeeper"]["connect"]) as client:
        yield client


def _token_logs_in(address: tuple[str, int], created: dict) -> bool:
    password = base64.b64encode(created["Hmac"]).decode("ascii")
    try:
        client = WireClient(address, created["TokenId"], password, token=True)
    except OSError:
        return False
    client.close()
    return True


def _described(address: tuple[str, int], username: str, password: str) -> dict[str, int]:
    """token id -> expiry timestamp, as the broker at ``address`` describes them."""
    with WireClient(address, username, password) as admin:
        described = admin.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})
    assert described["ErrorCode"] == 0
    return {t["TokenId"]: t["ExpiryTimestamp"] for t in described["Tokens"]}


def test_broker_whose_session_expired_resyncs_to_changes_made_meanwhile(
    cluster: LocalCluster, zk
) -> None:
    username, password = cluster.info["admin"]["username"], cluster.info["admin"]["password"]
    store, registry = TokenStore(zk), BrokerRegistry(zk)
    controller = wait_for(lambda: zkraw.controller_of(zk), 15, "controller")
    frozen = next(b for b in cluster.broker_ids() if b != controller)
    live, paused = broker_address(cluster, controller), broker_address(cluster, frozen)

    def create(client: WireClient, max_lifetime_ms: int = -1) -> dict:
        created = client.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                 {"Renewers": [], "MaxLifetimeMs": max_lifetime_ms})
        assert created["ErrorCode"] == 0
        return created

    with WireClient(live, username, password) as admin:
        expired_meanwhile, renewed_meanwhile, kept = create(admin), create(admin), create(admin)
    for created in (expired_meanwhile, renewed_meanwhile, kept):
        wait_for(lambda c=created: _token_logs_in(paused, c), 5, "token login on the broker")
    resyncs_before = broker_metric(cluster, frozen, "tokensvc_cache_resyncs")

    pid = cluster.broker_pid(frozen)
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        frozen_at = time.monotonic()
        with WireClient(live, username, password) as admin:
            assert admin.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                 {"Hmac": expired_meanwhile["Hmac"],
                                             "ExpiryTimePeriodMs": -1})["ErrorCode"] == 0
            renewed = admin.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                    {"Hmac": renewed_meanwhile["Hmac"],
                                               "RenewPeriodMs": 5 * HOUR_MS})
            assert renewed["ErrorCode"] == 0
            created_meanwhile = create(admin)
            short_lived = create(admin, max_lifetime_ms=1000)
            created_and_expired = create(admin)
            assert admin.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                 {"Hmac": created_and_expired["Hmac"],
                                             "ExpiryTimePeriodMs": -1})["ErrorCode"] == 0
        wait_for(lambda: store.get(short_lived["TokenId"]) is None, 10, "sweep of a short token")
        # Frozen past its session timeout: ZooKeeper drops its registration.
        wait_for(lambda: frozen not in registry.brokers(), SESSION_TIMEOUT_MS / 1000 + 10,
                 "session expiry of the frozen broker")
        time.sleep(max(0.0, SESSION_TIMEOUT_MS / 1000 + 1 - (time.monotonic() - frozen_at)))
    finally:
        os.kill(pid, signal.SIGCONT)
    resumed_at = time.monotonic()

    wait_for(lambda: frozen in registry.brokers(), 20, "re-registration after the new session")
    wait_for(lambda: broker_metric(cluster, frozen, "tokensvc_cache_resyncs") > resyncs_before, 20,
             "a full resync")
    in_zookeeper = {info.token_id: info.expiry_timestamp for info in store.load_all()}
    described = wait_for(
        lambda: (d := _described(paused, username, password)) == in_zookeeper and d, 20,
        "the resumed broker's cache to equal ZooKeeper")
    resync_s = time.monotonic() - resumed_at
    print(f"\nsession expiry: cache equal to ZooKeeper {resync_s:.2f}s after SIGCONT "
          f"({len(described)} tokens)")

    assert set(described) == {kept["TokenId"], renewed_meanwhile["TokenId"],
                              created_meanwhile["TokenId"]}
    assert described[renewed_meanwhile["TokenId"]] == renewed["ExpiryTimestampMs"]
    assert _token_logs_in(paused, created_meanwhile)
    assert _token_logs_in(paused, kept)
    for removed in (expired_meanwhile, short_lived, created_and_expired):
        assert not _token_logs_in(paused, removed)
    # The resumed broker caught up with a reachable ZooKeeper well within
    # request.timeout.ms: bounded staleness held its logins, it refused none.
    audit = Path(cluster.info["audit_dir"])
    assert any(audit.rglob("*.jsonl"))
    stale = [line for path in sorted(audit.rglob("*.jsonl"))
             for line in path.read_text().splitlines() if '"stale_view"' in line]
    assert stale == []
