"""Failover of the controller under load, on a real 3-broker LocalCluster (one process per
broker, kill -9).

While client threads keep creating and renewing tokens through the two brokers that are
not the controller, the controller is killed. Checked: a new controller is elected
within the ZooKeeper session timeout (plus a margin); every request succeeds or fails
with a retriable error only; every acknowledged token is in ZooKeeper and logs in on a
surviving broker; the new controller runs the expiry sweep. The measured numbers are
printed (run with ``-s`` to see them).
"""

from __future__ import annotations

import base64
import threading
import time
from dataclasses import dataclass, field

import pytest

from bench import zkraw
from tests.support.client import WireClient
from tests.support.local_cluster import ClusterFactory
from tokensvc.cluster import LocalCluster
from tokensvc.core.errors import Errors
from tokensvc.protocol.api import ApiKey
from zk.client import open_client
from zk.token_store import TokenStore

SESSION_TIMEOUT_S = 4.0
ELECTION_MARGIN_S = 6.0
RETRIABLE = {int(Errors.REQUEST_TIMED_OUT), int(Errors.NOT_CONTROLLER)}
CONNECTION_ERROR = "connection error"


@pytest.fixture
def cluster(cluster_factory: ClusterFactory) -> LocalCluster:
    """A cluster per test: the tests stop its controller."""
    return cluster_factory(brokers=3, overrides={
        "zookeeper.session.timeout.ms": str(int(SESSION_TIMEOUT_S * 1000)),
        "delegation.token.expiry.check.interval.ms": "1000",
    })


@pytest.fixture
def zk(cluster):
    client = open_client(cluster.zk_settings())
    yield client
    client.stop()
    client.close()


def token_login(address: tuple[str, int], created: dict) -> int:
    """The session lifetime of a token login, 0 if the broker refused it."""
    try:
        with WireClient(address, created["TokenId"], base64.b64encode(created["Hmac"]).decode(),
                        token=True) as session:
            return session.session_lifetime_ms
    except ConnectionError:
        return 0


def wait_for(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"{what} within {timeout:.0f}s")


@dataclass
class Outcome:
    api: str
    result: int | str
    started: float
    latency: float


@dataclass
class Worker:
    """Creates a token, renews it, repeats; through one broker, logged in as admin."""

    address: tuple[str, int]
    username: str
    password: str
    stop: threading.Event
    outcomes: list[Outcome] = field(default_factory=list)
    # (monotonic time of the answer, CreateDelegationToken response)
    acknowledged: list[tuple[float, dict]] = field(default_factory=list)

    def run(self) -> None:
        client: WireClient | None = None
        while not self.stop.is_set():
            try:
                if client is None:
                    client = WireClient(self.address, self.username, self.password,
                                        client_id="failover-worker", timeout=40.0)
                created = self._call(client, "create", ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                     {"Renewers": [], "MaxLifetimeMs": -1})
                if created is not None and created["ErrorCode"] == 0:
                    self.acknowledged.append((time.monotonic(), created))
                    self._call(client, "renew", ApiKey.RENEW_DELEGATION_TOKEN, 2,
                               {"Hmac": created["Hmac"], "RenewPeriodMs": 3_600_000})
            except OSError:  # the login itself failed: the broker is unreachable
                self.outcomes.append(Outcome("login", CONNECTION_ERROR, time.monotonic(), 0.0))
                client = None
                time.sleep(0.1)
                continue
            if client is not None and client.channel.closed:
                client.close()
                client = None
        if client is not None:
            client.close()

    def _call(self, client: WireClient, api: str, key: int, version: int, body: dict):
        started = time.monotonic()
        try:
            response = client.request(key, version, body)
        except OSError:
            self.outcomes.append(Outcome(api, CONNECTION_ERROR, started,
                                         time.monotonic() - started))
            return None
        self.outcomes.append(Outcome(api, response["ErrorCode"], started,
                                     time.monotonic() - started))
        return response


def test_killing_the_controller_under_load_loses_no_acknowledged_token(cluster, zk):
    store = TokenStore(zk)
    username, password = cluster.info["admin"]["username"], cluster.info["admin"]["password"]
    old = wait_for(lambda: zkraw.controller_of(zk), 15, "a controller")
    survivors = [b for b in cluster.broker_ids() if b != old]

    def address(broker_id: int) -> tuple[str, int]:
        host, port = cluster.broker_info(broker_id)["listeners"]["SASL_PLAINTEXT"].split(":")
        return host, int(port)

    stop = threading.Event()
    workers = [Worker(address(b), username, password, stop) for b in survivors for _ in (0, 1)]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for t in threads:
        t.start()
    wait_for(lambda: all(len(w.acknowledged) >= 3 for w in workers), 20, "warm-up creates")

    killed_at = time.monotonic()
    cluster.kill_broker(old)
    new = wait_for(lambda: (c := zkraw.controller_of(zk)) not in (None, old) and c,
                   SESSION_TIMEOUT_S + ELECTION_MARGIN_S, "a new controller")
    election_s = time.monotonic() - killed_at
    elected_at = time.monotonic()
    assert new in survivors

    # Keep the load on until every worker has had successes after the election.
    def served_after_election() -> bool:
        return all(
            sum(1 for o in w.outcomes if o.started > elected_at and o.result == 0) >= 3
            for w in workers
        )

    wait_for(served_after_election, 20, "creates and renews after the election")
    stop.set()
    for t in threads:
        t.join(45)
    assert not any(t.is_alive() for t in threads)

    outcomes = [o for w in workers for o in w.outcomes]
    acknowledged = sorted((a for w in workers for a in w.acknowledged), key=lambda a: a[0])
    failures = [o for o in outcomes if o.result != 0]
    unexpected = [o for o in failures if o.result not in RETRIABLE | {CONNECTION_ERROR}]
    assert unexpected == []
    during = [o for o in outcomes if killed_at - 1 <= o.started <= elected_at]
    before = sorted(o.latency for o in outcomes if o.started + o.latency < killed_at)
    print(
        f"\nfailover: election {election_s:.2f}s after kill -9 (session timeout "
        f"{SESSION_TIMEOUT_S:.0f}s); {len(outcomes)} requests, "
        f"{len(outcomes) - len(failures)} ok, {len(failures)} failed "
        f"({sorted({str(o.result) for o in failures})}); "
        f"max latency {max(o.latency for o in outcomes):.2f}s overall, "
        f"{max((o.latency for o in during), default=0):.2f}s around the failover, "
        f"median {before[len(before) // 2] * 1000:.1f}ms before it; "
        f"{len(acknowledged)} tokens acknowledged"
    )

    # Every acknowledged token is in ZooKeeper ...
    missing = [c["TokenId"] for _, c in acknowledged if store.get(c["TokenId"]) is None]
    assert missing == []
    # ... and logs in on a surviving broker: a sample from the start, the end and the
    # tokens acknowledged closest to the kill.
    around_kill = sorted(acknowledged, key=lambda a: abs(a[0] - killed_at))[:10]
    sample = {c["TokenId"]: c for _, c in acknowledged[:5] + acknowledged[-5:] + around_kill}
    for created in sample.values():
        lifetime = wait_for(lambda c=created: token_login(address(new), c), 5, "token login")
        assert lifetime > 0

    # The new controller runs the expiry sweep.
    with WireClient(address(survivors[0]), username, password) as client:
        short = client.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                               {"Renewers": [], "MaxLifetimeMs": 3000})
    assert short["ErrorCode"] == 0
    assert store.get(short["TokenId"]) is not None
    wait_for(lambda: store.get(short["TokenId"]) is None, 15, "the sweep to remove the token")
