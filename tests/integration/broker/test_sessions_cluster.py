"""Live token sessions follow their token across a real three-broker LocalCluster.

Every broker is its own process. A client logs in with a token on broker 3;
the token is expired, moved or renewed through broker 1 (which forwards to the
controller when it is not the controller itself); broker 3 learns of it through
ZooKeeper and applies it to the live connection. Each broker's metrics address
comes from ``cluster.json``, as ``tokensvc cluster up`` prints it.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cli.cluster_cmd import usage_text
from tests.support.client import WireClient
from tokensvc.cluster import LocalCluster
from tokensvc.protocol.api import ApiKey

# A correctness bound that tolerates a loaded CI machine; the one-second revocation
# target is measured by the benchmark suite (B3 details), not asserted here.
REVOCATION_BOUND_S = 10.0
# The expiry a token is moved to before its renewal through broker 1: the login on broker 3
# (once broker 3 has followed the move), the renewal and broker 3 following the renewal
# all happen before it passes, with room for a loaded machine.
MOVED_EXPIRY_MS = 5_000

T = TypeVar("T")


pytestmark = pytest.mark.cluster(brokers=3)


def eventually(fn: Callable[[], T], timeout: float = 10.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (AssertionError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def address(cluster: LocalCluster, broker_id: int) -> tuple[str, int]:
    host, port = cluster.broker_info(broker_id)["listeners"]["SASL_PLAINTEXT"].rsplit(":", 1)
    return host, int(port)


def admin(cluster: LocalCluster, broker_id: int) -> WireClient:
    info = cluster.info["admin"]
    return WireClient(address(cluster, broker_id), info["username"], info["password"],
                      mechanism="SCRAM-SHA-512", client_id="sessions-test")


def create_token(cluster: LocalCluster) -> dict:
    with admin(cluster, 1) as client:
        created = client.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                 {"Renewers": [], "MaxLifetimeMs": -1})
    assert created["ErrorCode"] == 0
    return created


def token_login(cluster: LocalCluster, broker_id: int, created: dict) -> WireClient:
    password = base64.b64encode(created["Hmac"]).decode()
    return eventually(lambda: WireClient(
        address(cluster, broker_id), created["TokenId"], password,
        mechanism="SCRAM-SHA-512", token=True,
    ))


def works(client: WireClient) -> bool:
    response = client.request(ApiKey.DESCRIBE_CLUSTER, 0,
                              {"IncludeClusterAuthorizedOperations": False})
    return response["ErrorCode"] == 0


def wait_closed(client: WireClient, timeout: float) -> float:
    """Monotonic time at which the broker closed ``client``'s connection."""
    deadline = time.monotonic() + timeout
    while not client.channel.closed:
        assert time.monotonic() < deadline, "the broker did not close the token session"
        time.sleep(0.005)
    return time.monotonic()


def scrape(cluster: LocalCluster, broker_id: int) -> dict[tuple[str, tuple], float]:
    url = f"http://{cluster.broker_info(broker_id)['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def audit_events(cluster: LocalCluster, broker_id: int, **match: Any) -> list[dict]:
    events = []
    for path in sorted(Path(cluster.info["audit_dir"]).glob(f"audit-{broker_id}-*.jsonl")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if all(event.get(k) == v for k, v in match.items()):
                events.append(event)
    return events


def test_token_expired_on_broker_1_closes_its_session_on_broker_3(cluster):
    revoked_before = scrape(cluster, 3)[("tokensvc_sessions_revoked_total", ())]
    latencies = []
    for _ in range(3):
        created = create_token(cluster)
        session = token_login(cluster, 3, created)
        try:
            assert works(session)
            with admin(cluster, 1) as client:
                requested = time.monotonic()
                expired = client.request(
                    ApiKey.EXPIRE_DELEGATION_TOKEN, 2, {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": -1}
                )
                assert expired["ErrorCode"] == 0
                latencies.append(wait_closed(session, REVOCATION_BOUND_S) - requested)
        finally:
            session.close()
        revocations = eventually(lambda tid=created["TokenId"]: _nonempty(audit_events(
            cluster, 3, type="session", action="revoked", token_id=tid)))
        assert revocations[0]["reason"] == "token removed"
        assert revocations[0]["principal"] == "User:admin"
    assert max(latencies) < REVOCATION_BOUND_S, latencies
    metrics = scrape(cluster, 3)
    assert metrics[("tokensvc_sessions_revoked_total", ())] == revoked_before + 3


def test_expiry_moved_closer_closes_the_session_when_the_new_expiry_passes(cluster):
    created = create_token(cluster)
    session = token_login(cluster, 3, created)
    try:
        with admin(cluster, 1) as client:
            moved = client.request(
                ApiKey.EXPIRE_DELEGATION_TOKEN, 2, {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": 1_500}
            )
        assert moved["ErrorCode"] == 0
        assert works(session)  # the token is still valid until its new expiry
        closed = wait_closed(session, 1.5 + REVOCATION_BOUND_S)
        closed_at_ms = time.time() * 1000 - (time.monotonic() - closed) * 1000
    finally:
        session.close()
    expiry = moved["ExpiryTimestampMs"]
    assert expiry <= closed_at_ms < expiry + REVOCATION_BOUND_S * 1000
    (event,) = eventually(lambda: _nonempty(audit_events(
        cluster, 3, type="session", action="revoked", token_id=created["TokenId"])))
    assert event["reason"] == "token expired"


def test_renewed_token_session_keeps_working_past_the_old_expiry(cluster):
    created = create_token(cluster)
    with admin(cluster, 1) as client:
        moved = client.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                               {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": MOVED_EXPIRY_MS})
        assert moved["ErrorCode"] == 0
        session = eventually(lambda: _short_lived(token_login(cluster, 3, created)))
        try:
            renewed = client.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                     {"Hmac": created["Hmac"], "RenewPeriodMs": 60_000})
            assert renewed["ErrorCode"] == 0
            old_expiry_s = moved["ExpiryTimestampMs"] / 1000
            time.sleep(max(0.0, old_expiry_s - time.time()) + 0.5)
            # This client never re-authenticates: only the extended lifetime keeps it open.
            assert works(session)
            assert not session.channel.closed
        finally:
            session.close()


def test_every_broker_serves_metrics_at_the_address_cluster_up_prints(cluster):
    printed = usage_text(cluster.info, cluster.directory)
    for broker_id in cluster.broker_ids():
        assert f"metrics http://{cluster.broker_info(broker_id)['metrics']}/metrics" in printed
        metrics = scrape(cluster, broker_id)
        assert metrics[("tokensvc_token_cache_size", ())] >= 0
    controllers = [scrape(cluster, b)[("tokensvc_controller", ())] for b in cluster.broker_ids()]
    assert sorted(controllers) == [0.0, 0.0, 1.0]


def _nonempty(events: list[dict]) -> list[dict]:
    assert events
    return events


def _short_lived(session: WireClient) -> WireClient:
    """The login saw the moved expiry (the broker's cache has caught up)."""
    if session.session_lifetime_ms > MOVED_EXPIRY_MS:
        session.close()
        raise AssertionError(f"lifetime {session.session_lifetime_ms} ms: old expiry still cached")
    return session
