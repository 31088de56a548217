"""Broker crashes: restarts with many tokens, and kill -9 in the middle of writes.

Real broker processes (``LocalCluster``) on the suite's ZooKeeper.

* 10,000 tokens written straight into ZooKeeper (``zk.token_store.TokenStore``, under
  the cluster's master key) survive a kill -9 and restart of the broker: its token
  cache holds every one of them again (the cache size gauge and a super user's
  describe), a sample of 300 spread over the range logs in, and the restart derived
  no SCRAM credential up front.
* A token write and its change notification are one ZooKeeper transaction: the
  controller is killed with SIGKILL, twice, at seeded-random moments of a stream of
  creates (direct and forwarded), and afterwards every token znode has its
  notification and every notification names an existing token; every recorded
  request key names an existing token; nothing acknowledged is missing; the restarted
  broker's cache equals ZooKeeper.
"""

from __future__ import annotations

import base64
import random
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Self

import pytest

from bench import zkraw
from tests.support.client import WireClient
from tests.support.local_cluster import ClusterFactory, broker_address, broker_metric
from tests.support.wait import wait_for
from tokensvc.cluster import LocalCluster
from tokensvc.core.errors import Errors
from tokensvc.core.keys import key_id, token_hmac
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.protocol.api import ApiKey
from zk.client import ZkSettings, open_client
from zk.requests import REQUESTS, RequestRecords
from zk.token_store import TokenStore

pytestmark = pytest.mark.slow  # real processes and faults: tens of seconds

SESSION_TIMEOUT_MS = 3000
TOKENS = 10_000
LOGIN_SAMPLE = 300
DAY_MS = 86_400_000
RETRIABLE = {int(Errors.REQUEST_TIMED_OUT), int(Errors.NOT_CONTROLLER)}


def _logs_in(address: tuple[str, int], token_id: str, password: str) -> bool:
    try:
        client = WireClient(address, token_id, password, token=True)
    except OSError:
        return False
    client.close()
    return True


def _described_ids(address: tuple[str, int], username: str, password: str) -> set[str]:
    with WireClient(address, username, password, timeout=30.0) as admin:
        described = admin.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})
    assert described["ErrorCode"] == 0
    return {t["TokenId"] for t in described["Tokens"]}


@pytest.fixture
def zk(zk_connect: str):
    client = open_client(ZkSettings(zk_connect))
    yield client
    client.stop()
    client.close()


# -- restart with 10,000 tokens ---------------------------------------------------------------


def test_every_one_of_ten_thousand_tokens_authenticates_after_a_crash_restart(
    tmp_path, zk_connect: str, zk
) -> None:
    master_key = secrets.token_urlsafe(32)
    now = int(time.time() * 1000)
    owner = KafkaPrincipal.user("bulk-owner")
    infos = [
        TokenInformation(secrets.token_urlsafe(16), owner, owner, (), now, now + DAY_MS,
                         now + 7 * DAY_MS, key_id(master_key))
        for _ in range(TOKENS)
    ]
    store = TokenStore(zk)
    store.ensure_paths()
    started = time.monotonic()
    with ThreadPoolExecutor(64) as pool:
        list(pool.map(store.create, infos))
    written_s = time.monotonic() - started

    overrides = {"delegation.token.secret.key": master_key,
                 "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)}
    with LocalCluster.up(tmp_path / "cluster", brokers=1, zookeeper=zk_connect,
                         overrides=overrides, die_with_parent=True) as cluster:
        address = broker_address(cluster, 1)
        username, password = cluster.info["admin"]["username"], cluster.info["admin"]["password"]
        with WireClient(address, username, password) as admin:
            created = admin.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                    {"Renewers": [], "MaxLifetimeMs": -1})
        assert created["ErrorCode"] == 0
        assert broker_metric(cluster, 1, "tokensvc_token_cache_size") == TOKENS + 1

        killed = time.monotonic()
        cluster.kill_broker(1)
        cluster.start_broker(1)
        restart_s = time.monotonic() - killed

        assert broker_metric(cluster, 1, "tokensvc_token_cache_size") == TOKENS + 1
        assert broker_metric(cluster, 1, "tokensvc_derived_credentials") == 0
        described = _described_ids(address, username, password)
        assert described == {info.token_id for info in infos} | {created["TokenId"]}

        sample = infos[:: TOKENS // LOGIN_SAMPLE][:LOGIN_SAMPLE]
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(
                lambda info: _logs_in(address, info.token_id, base64.b64encode(
                    token_hmac(master_key, info.token_id)).decode("ascii")),
                sample,
            ))
        logins_s = time.monotonic() - started
        assert all(results), f"{results.count(False)} of {len(sample)} token logins failed"
        assert _logs_in(address, created["TokenId"],
                        base64.b64encode(created["Hmac"]).decode("ascii"))
        assert broker_metric(cluster, 1, "tokensvc_derived_credentials") >= LOGIN_SAMPLE
    print(f"\n{TOKENS} tokens written in {written_s:.1f}s; kill -9 to serving again "
          f"{restart_s:.1f}s (session timeout {SESSION_TIMEOUT_MS} ms included); "
          f"{LOGIN_SAMPLE} token logins in {logins_s:.1f}s")


# -- kill -9 in a stream of creates ------------------------------------------------------------


@pytest.fixture
def cluster(cluster_factory: ClusterFactory, zk_connect: str) -> LocalCluster:
    """A cluster per test on the test's chroot: the faults stop and restart its brokers."""
    return cluster_factory(brokers=2, zookeeper=zk_connect,
                           overrides={"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)})


class CreateStream:
    """Threads creating tokens through every broker, as fast as answers come."""

    def __init__(self, cluster: LocalCluster, per_broker: int = 3) -> None:
        self.cluster = cluster
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acknowledged: list[str] = []
        self.results: list[int | str] = []
        self.threads = [
            threading.Thread(target=self._run, args=(b,), daemon=True)
            for b in cluster.broker_ids() for _ in range(per_broker)
        ]

    def __enter__(self) -> Self:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(40)

    def acked(self) -> int:
        with self.lock:
            return len(self.acknowledged)

    def _run(self, broker_id: int) -> None:
        info = self.cluster.info["admin"]
        client: WireClient | None = None
        while not self.stop.is_set():
            try:
                if client is None:
                    client = WireClient(broker_address(self.cluster, broker_id), info["username"],
                                        info["password"], client_id="kill-stream", timeout=30.0)
                created = client.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                         {"Renewers": [], "MaxLifetimeMs": -1})
            except OSError:
                with self.lock:
                    self.results.append("connection error")
                client = None
                time.sleep(0.1)
                continue
            with self.lock:
                self.results.append(created["ErrorCode"])
                if created["ErrorCode"] == 0:
                    self.acknowledged.append(created["TokenId"])
        if client is not None:
            client.close()


def test_kill_dash_nine_of_the_controller_never_splits_a_token_from_its_notification(
    cluster: LocalCluster, zk
) -> None:
    rng = random.Random(9)
    store = TokenStore(zk)
    kills = []
    with CreateStream(cluster) as stream:
        for _ in range(2):
            victim = wait_for(lambda: zkraw.controller_of(zk), 15, "a controller")
            floor = stream.acked()
            wait_for(lambda f=floor: stream.acked() >= f + 20, 20, "creates before the kill")
            time.sleep(rng.uniform(0.0, 0.5))
            acked_at_kill = stream.acked()
            cluster.kill_broker(victim)
            wait_for(lambda v=victim: zkraw.controller_of(zk) not in (None, v), 15, "a new controller")
            floor = stream.acked()
            wait_for(lambda f=floor: stream.acked() >= f + 20, 20, "creates after the election")
            cluster.start_broker(victim)
            kills.append((victim, acked_at_kill))
    assert not any(thread.is_alive() for thread in stream.threads)
    unexpected = [r for r in stream.results if r not in RETRIABLE | {0, "connection error"}]
    assert unexpected == []

    tokens = set(store.token_ids())
    notified = [token_id for _, token_id in store.read_notifications(store.notifications())]
    records = RequestRecords(zk)
    keyed = [records.get(key).outcome["token_id"] for key in zk.get_children(REQUESTS)]
    print(f"\nkill -9 stream: {len(stream.results)} creates, {len(stream.acknowledged)} "
          f"acknowledged, {len(tokens)} tokens in ZooKeeper, {len(keyed)} request keys; "
          f"kills (broker, acknowledged so far): {kills}")
    assert set(stream.acknowledged) - tokens == set()
    assert len(notified) == len(set(notified)), "a token with two create notifications"
    assert set(notified) == tokens
    assert set(keyed) <= tokens
    for broker_id in cluster.broker_ids():
        wait_for(lambda b=broker_id: _described_ids(
            broker_address(cluster, b), cluster.info["admin"]["username"],
            cluster.info["admin"]["password"]) == tokens, 15, "a cache equal to ZooKeeper")
