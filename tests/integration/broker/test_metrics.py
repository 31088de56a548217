"""Broker metrics over real HTTP: every documented metric is served and moves with its traffic.

Two in-process brokers share a ZooKeeper chroot; each serves Prometheus text on
``metrics.listener`` (loopback, port chosen by the OS). Tests read the endpoint
with a real HTTP GET before and after the traffic a metric counts and compare.
"""

from __future__ import annotations

import base64
import re
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.client import WireClient
from tests.support.inproc import InProcessBroker, bootstrap_user, broker_properties
from tests.support.wait import retry as eventually
from tokensvc.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tokensvc.broker.writes.channel import ChannelAuthError
from tokensvc.core.config import BrokerConfig
from tokensvc.core.errors import Errors
from tokensvc.protocol.api import ApiKey
from zk.acl_store import AclStore
from zk.client import ZkSettings, open_client

OPERATIONS_DOC = Path(__file__).resolve().parents[3] / "docs" / "operations.md"

# Every metric family a broker exposes (exposition names; counters add ``_total``).
FAMILIES = {
    "tokensvc_requests", "tokensvc_request_latency_seconds", "tokensvc_scram_logins",
    "tokensvc_reauthentications", "tokensvc_token_requests", "tokensvc_active_connections",
    "tokensvc_sessions", "tokensvc_token_sessions", "tokensvc_connections_refused", "tokensvc_forwarded_requests",
    "tokensvc_sessions_revoked", "tokensvc_sessions_expired", "tokensvc_expiry_swept_tokens",
    "tokensvc_token_cache_size", "tokensvc_derived_credentials", "tokensvc_cache_resyncs",
    "tokensvc_cache_caught_up_resyncs",
    "tokensvc_cache_last_resync_seconds", "tokensvc_controller", "tokensvc_expiry_sweeps",
    "tokensvc_audit_queue_depth", "tokensvc_audit_dropped", "tokensvc_acl_count",
    "tokensvc_zookeeper_view_age_seconds", "tokensvc_stale_view_catch_ups",
    "tokensvc_stale_view_refusals",
    "tokensvc_group_commit_batches", "tokensvc_group_commit_writes",
}


@pytest.fixture(scope="module")
def brokers(zookeeper, tmp_path_factory) -> Iterator[list[InProcessBroker]]:
    connect = f"{zookeeper.connect}/metrics-{time.monotonic_ns()}"
    for user, password in [("admin", "admin-secret"), ("broker", "broker-secret"),
                           ("alice", "alice-secret")]:
        bootstrap_user(connect, user, password)
    audit = tmp_path_factory.mktemp("audit")
    started = [
        InProcessBroker(BrokerConfig.from_properties(broker_properties(
            broker_id, connect, **{
                "metrics.listener": "127.0.0.1:0",
                "audit.log.dir": str(audit),
                "delegation.token.expiry.check.interval.ms": "200",
            },
        ))).start()
        for broker_id in (1, 2)
    ]
    eventually(lambda: _true(any(b.broker.is_controller for b in started)), 15)
    yield started
    for broker in started:
        broker.stop()


def _true(value: bool) -> bool:
    assert value
    return value


def controller(brokers: list[InProcessBroker]) -> InProcessBroker:
    return next(b for b in brokers if b.broker.is_controller)


def follower(brokers: list[InProcessBroker]) -> InProcessBroker:
    return next(b for b in brokers if not b.broker.is_controller)


def get(broker: InProcessBroker) -> tuple[str, str]:
    host, port = broker.broker.metrics_address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
        return response.headers["Content-Type"], response.read().decode()


class Scrape(dict):
    """Sample values keyed by (sample name, sorted labels); absent samples read as 0."""

    def __call__(self, name: str, **labels: str) -> float:
        return self.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(broker: InProcessBroker) -> Scrape:
    _, text = get(broker)
    return Scrape({
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    })


def login(broker: InProcessBroker, user: str = "alice", password: str = "alice-secret",
          **kw) -> WireClient:
    return WireClient(broker.address(), user, password, **kw)


def create_token(broker: InProcessBroker, **kw) -> dict:
    with login(broker, **kw) as client:
        created = client.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                 {"Renewers": [], "MaxLifetimeMs": -1})
    assert created["ErrorCode"] == 0
    return created


def test_endpoint_serves_every_metric_in_prometheus_text_format(brokers):
    content_type, text = get(brokers[0])
    assert content_type.startswith("text/plain")
    families = {f.name for f in text_string_to_metric_families(text)}
    assert families >= FAMILIES, sorted(FAMILIES - families)


def test_every_served_metric_is_documented_for_operators(brokers):
    documented = set(re.findall(r"`(tokensvc_[a-z_]+)", OPERATIONS_DOC.read_text()))
    _, text = get(brokers[0])
    served = set(re.findall(r"^# TYPE (tokensvc_\w+)", text, re.MULTILINE))
    served = {name for name in served if not name.endswith("_created")}  # documented as a rule
    assert served <= documented, sorted(served - documented)


def test_requests_and_latency_count_each_request_by_api_and_error(brokers):
    broker = controller(brokers)
    before = scrape(broker)
    with login(broker) as alice:
        for _ in range(3):
            alice.request(ApiKey.DESCRIBE_CLUSTER, 0, {"IncludeClusterAuthorizedOperations": False})
        missing = alice.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                {"Hmac": b"\x01" * 64, "RenewPeriodMs": -1})
    assert missing["ErrorCode"] != 0
    after = scrape(broker)
    ok = {"api": "DescribeCluster", "error": "NONE"}
    assert after("tokensvc_requests_total", **ok) == before("tokensvc_requests_total", **ok) + 3
    assert (after("tokensvc_request_latency_seconds_count", api="DescribeCluster")
            == before("tokensvc_request_latency_seconds_count", api="DescribeCluster") + 3)
    not_found = {"api": "RenewDelegationToken", "error": "DELEGATION_TOKEN_NOT_FOUND"}
    assert (after("tokensvc_requests_total", **not_found)
            == before("tokensvc_requests_total", **not_found) + 1)
    renew = {"action": "renew", "error": "DELEGATION_TOKEN_NOT_FOUND"}
    assert (after("tokensvc_token_requests_total", **renew)
            == before("tokensvc_token_requests_total", **renew) + 1)


def test_scram_logins_count_by_mechanism_result_and_kind(brokers):
    broker = brokers[0]
    created = create_token(broker)
    before = scrape(broker)
    login(broker, mechanism="SCRAM-SHA-256").close()
    with pytest.raises(ChannelAuthError):
        login(broker, password="wrong", mechanism="SCRAM-SHA-512")
    hmac = base64.b64encode(created["Hmac"]).decode()
    eventually(lambda: WireClient(broker.address(), created["TokenId"], hmac,
                                  mechanism="SCRAM-SHA-512", token=True)).close()
    after = scrape(broker)
    for labels in [
        {"mechanism": "SCRAM-SHA-256", "result": "success", "kind": "user"},
        {"mechanism": "SCRAM-SHA-512", "result": "failure", "kind": "user"},
        {"mechanism": "SCRAM-SHA-512", "result": "success", "kind": "token"},
    ]:
        assert (after("tokensvc_scram_logins_total", **labels)
                == before("tokensvc_scram_logins_total", **labels) + 1), labels
    assert (after("tokensvc_derived_credentials")
            == before("tokensvc_derived_credentials") + 1)


def test_connections_and_sessions_follow_open_connections(brokers):
    broker = brokers[1]
    before = eventually(lambda: _quiet(broker))
    raw = socket.create_connection(broker.address())
    client = login(broker)
    try:
        during = eventually(lambda: _moved(broker, before, +2, +1))
    finally:
        client.close()
        raw.close()
    after = eventually(lambda: _moved(broker, before, 0, 0))
    assert during("tokensvc_active_connections") > after("tokensvc_active_connections")


def _quiet(broker: InProcessBroker) -> Scrape:
    """A scrape taken once connections closed by earlier tests have left the gauges."""
    first = scrape(broker)
    time.sleep(0.05)
    second = scrape(broker)
    for name in ("tokensvc_active_connections", "tokensvc_sessions"):
        assert first(name) == second(name)
    return second


def _moved(broker: InProcessBroker, before: Scrape, connections: int, sessions: int) -> Scrape:
    now = scrape(broker)
    assert now("tokensvc_active_connections") == before("tokensvc_active_connections") + connections
    assert now("tokensvc_sessions") == before("tokensvc_sessions") + sessions
    return now


def test_token_cache_size_moves_on_every_broker(brokers):
    # Earlier tests' tokens were created through one broker and may still be reaching the
    # other: start from a converged state, or that arrival would count as this create.
    eventually(lambda: _true(
        len({scrape(b)("tokensvc_token_cache_size") for b in brokers}) == 1))
    before = [scrape(b)("tokensvc_token_cache_size") for b in brokers]
    create_token(brokers[0])
    for broker, size in zip(brokers, before, strict=True):
        eventually(lambda b=broker, s=size: _true(
            scrape(b)("tokensvc_token_cache_size") == s + 1))


def test_forwarded_requests_count_by_client_id(brokers):
    broker = follower(brokers)
    before = scrape(broker)("tokensvc_forwarded_requests_total", client_id="metrics-fwd")
    create_token(broker, client_id="metrics-fwd")
    after = scrape(broker)("tokensvc_forwarded_requests_total", client_id="metrics-fwd")
    assert after == before + 1
    assert scrape(controller(brokers))(
        "tokensvc_forwarded_requests_total", client_id="metrics-fwd") == 0


def test_exactly_one_broker_reports_itself_controller(brokers):
    flags = {b.config.broker_id: scrape(b)("tokensvc_controller") for b in brokers}
    assert sorted(flags.values()) == [0.0, 1.0]
    assert flags[controller(brokers).config.broker_id] == 1.0


def test_expiry_sweeps_run_on_the_controller_and_count_removed_tokens(brokers):
    ctrl = controller(brokers)
    before = scrape(ctrl)
    created = create_token(ctrl)
    with login(ctrl) as alice:
        moved = alice.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                              {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": 1})
    assert moved["ErrorCode"] == 0
    eventually(lambda: _swept(ctrl, before))
    assert scrape(follower(brokers))("tokensvc_expiry_sweeps") == 0


def _swept(broker: InProcessBroker, before: Scrape) -> None:
    now = scrape(broker)
    assert (now("tokensvc_expiry_swept_tokens_total")
            == before("tokensvc_expiry_swept_tokens_total") + 1)
    # A sweep is counted when it ends, a moment after it removed the token.
    assert now("tokensvc_expiry_sweeps") > before("tokensvc_expiry_sweeps")


def test_revoked_token_sessions_are_counted(brokers):
    broker = controller(brokers)
    created = create_token(broker)
    before = scrape(broker)("tokensvc_sessions_revoked_total")
    hmac = base64.b64encode(created["Hmac"]).decode()
    session = WireClient(broker.address(), created["TokenId"], hmac, token=True)
    try:
        with login(broker) as alice:
            expired = alice.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                    {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": -1})
        assert expired["ErrorCode"] == 0
        eventually(lambda: _true(
            scrape(broker)("tokensvc_sessions_revoked_total") == before + 1))
    finally:
        session.close()


def test_acl_count_moves_on_every_broker_when_an_acl_is_stored(brokers):
    # Written through the ZooKeeper ACL store, as the controller's CreateAcls does; each
    # broker's authorizer follows the change notification.
    before = [scrape(b)("tokensvc_acl_count") for b in brokers]
    binding = AclBinding(
        ResourcePattern(ResourceType.TOPIC, f"metrics-{time.monotonic_ns()}", PatternType.LITERAL),
        AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
    )
    client = open_client(ZkSettings(brokers[0].config.zookeeper_connect))
    try:
        assert [r.error for r in AclStore(client).add([binding])[0]] == [Errors.NONE]
    finally:
        client.stop()
        client.close()
    for broker, count in zip(brokers, before, strict=True):
        eventually(lambda b=broker, c=count: _true(scrape(b)("tokensvc_acl_count") == c + 1))


def test_cache_resync_and_audit_gauges_report_the_brokers_state(brokers):
    for broker in brokers:
        metrics = scrape(broker)
        assert metrics("tokensvc_cache_resyncs") == 1  # the load at start, no reconnect since
        assert metrics("tokensvc_cache_caught_up_resyncs") == 0
        assert metrics("tokensvc_cache_last_resync_seconds") >= 0
        assert metrics("tokensvc_audit_queue_depth") >= 0
        assert metrics("tokensvc_audit_dropped") == 0
