"""A broker with a wrong clock (issue #36), under Debian's libfaketime, in a 3-broker
LocalCluster of real processes.

Broker 1 runs with ``LD_PRELOAD=libfaketimeMT`` and ``FAKETIME=-10m`` or ``+10m``
(``DONT_FAKE_MONOTONIC=1``: its monotonic clocks, asyncio's and the clock samples'
timeline, stay true; ``FAKETIME_FORCE_MONOTONIC_FIX=0``, see :func:`_faketime_env`); brokers 2 and 3 and ZooKeeper run on the host's clock, which is
also this test's. One cluster, three phases, broker 1 restarted between them:

1. 10 minutes behind, ``max.clock.skew.ms`` above 10 minutes (it serves): a token with a
   10 s lifetime logs in there until its expiry and never after it, by the cluster's time,
   while the token is still in ZooKeeper (no sweep runs: the default hour-long interval).
2. 10 minutes ahead, the default bound (30 s): broker 1 refuses token logins and token
   writes with the retriable skew error, audits ``clock_skew``, logs it once, and its
   gauges show the offset; brokers 2 and 3 log the same token in and create tokens.
3. 10 minutes ahead and the controller, with a 1 s sweep interval and a bound above 10
   minutes: a token with 3 minutes left is issued at the cluster's time, survives sweeps,
   and logs in on every broker.

A token login from another project's client is kafka-python's (plain settings: the token
id and HMAC as user name and password, the implicit token login); the error codes and
messages are read with the project's own wire client.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.errors import KafkaTimeoutError

from tests.support.client import WireClient
from tests.support.faketime import faketime_env
from tests.support.local_cluster import ClusterFactory, broker_address, broker_metric
from tests.support.wait import poll_until
from tokensvc.broker.writes.channel import ChannelAuthError
from tokensvc.cluster import LocalCluster
from tokensvc.core.errors import Errors
from tokensvc.properties import properties_text, read_properties
from zk import layout
from zk.client import open_client

pytestmark = pytest.mark.slow

CREATE = 38
SKEWED = 1
MINUTES_10_S = 600.0
BOUND_ABOVE_10_MIN = "900000"
SKEW_LOG_LINE = "refusing token logins and token writes (clock_skew)"


@pytest.fixture(scope="module")
def cluster(module_cluster_factory: ClusterFactory) -> LocalCluster:
    return module_cluster_factory(brokers=3, overrides={"max.clock.skew.ms": BOUND_ABOVE_10_MIN},
                                  broker_env={SKEWED: faketime_env("-10m")})


def _admin(cluster: LocalCluster, broker_id: int) -> WireClient:
    admin = cluster.info["admin"]
    return WireClient(broker_address(cluster, broker_id), admin["username"], admin["password"])


def _create(cluster: LocalCluster, broker_id: int, max_lifetime_ms: int) -> dict:
    with _admin(cluster, broker_id) as client:
        return client.request(CREATE, 3, {"Renewers": [], "MaxLifetimeMs": max_lifetime_ms})


def _hmac_b64(created: dict) -> str:
    return base64.b64encode(created["Hmac"]).decode("ascii")


def _wire_login_error(cluster: LocalCluster, broker_id: int, created: dict) -> str | None:
    """None when a token login (SCRAM-SHA-256, ``tokenauth=true``) succeeds, else the
    broker's message."""
    try:
        WireClient(broker_address(cluster, broker_id), created["TokenId"], _hmac_b64(created),
                   token=True, timeout=10.0).close()
    except ChannelAuthError as exc:
        return str(exc)
    return None


def _kafka_python_logs_in(cluster: LocalCluster, broker_id: int, created: dict) -> bool:
    """Whether kafka-python, bootstrapped from ``broker_id`` alone, logs in with the token
    (implicit token login: the token id and HMAC as SCRAM user name and password)."""
    host, port = broker_address(cluster, broker_id)
    try:
        client = KafkaAdminClient(
            bootstrap_servers=[f"{host}:{port}"], security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=created["TokenId"],
            sasl_plain_password=_hmac_b64(created), bootstrap_timeout_ms=1_500,
        )
    except KafkaTimeoutError:
        return False
    client.close()
    return True


def _set_properties(cluster: LocalCluster, broker_id: int, **changes: str | None) -> None:
    """Rewrite keys of the broker's server.properties (``None`` removes the key); the
    broker reads them at its next start."""
    path = Path(cluster.broker_info(broker_id)["config"])
    props = read_properties(path)
    for key, value in changes.items():
        name = key.replace("_", ".")
        if value is None:
            props.pop(name, None)
        else:
            props[name] = value
    path.write_text(properties_text(props), encoding="utf-8")


def _audit(cluster: LocalCluster, broker_id: int) -> list[dict]:
    events = []
    for path in sorted(Path(cluster.info["audit_dir"]).rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event.get("broker_id") == broker_id:
                events.append(event)
    return events


def _log_since(cluster: LocalCluster, broker_id: int, offset: int) -> str:
    return Path(cluster.broker_info(broker_id)["log"]).read_text(encoding="utf-8")[offset:]


def _log_size(cluster: LocalCluster, broker_id: int) -> int:
    return Path(cluster.broker_info(broker_id)["log"]).stat().st_size


def _controller(cluster: LocalCluster) -> int | None:
    leaders = [b for b in cluster.broker_ids() if broker_metric(cluster, b, "tokensvc_controller")]
    return leaders[0] if len(leaders) == 1 else None


def _token_in_zookeeper(cluster: LocalCluster, token_id: str) -> dict | None:
    client = open_client(cluster.zk_settings())
    try:
        if client.exists(layout.token_path(token_id)) is None:
            return None
        data, _ = client.get(layout.token_path(token_id))
        return json.loads(data)
    finally:
        client.stop()
        client.close()


def _restart_skewed(cluster: LocalCluster, offset: str, **props: str | None) -> int:
    """Stop broker 1, rewrite its properties, start it under ``FAKETIME=offset``; returns
    where its log continues."""
    cluster.stop_broker(SKEWED)
    _set_properties(cluster, SKEWED, **props)
    size = _log_size(cluster, SKEWED)
    cluster.start_broker(SKEWED, env=faketime_env(offset))
    return size


def test_a_broker_ten_minutes_off_never_accepts_an_expired_token_and_refuses_beyond_the_bound(
        cluster: LocalCluster) -> None:
    # -- 1. Ten minutes behind, bound above ten minutes: it serves, by the cluster's time.
    offset = broker_metric(cluster, SKEWED, "tokensvc_clock_offset_seconds")
    assert offset == pytest.approx(MINUTES_10_S, abs=2.0)  # the cluster is ahead of it
    assert broker_metric(cluster, SKEWED, "tokensvc_clock_skew_refusing") == 0
    for other in (2, 3):
        assert abs(broker_metric(cluster, other, "tokensvc_clock_offset_seconds")) < 2.0

    created = _create(cluster, 2, max_lifetime_ms=10_000)
    assert created["ErrorCode"] == 0
    expiry_ms = created["ExpiryTimestampMs"]
    assert abs(created["IssueTimestampMs"] - time.time() * 1000) < 5_000
    assert poll_until(lambda: _kafka_python_logs_in(cluster, SKEWED, created), timeout=6)
    assert time.time() * 1000 < expiry_ms  # it logged in before the expiry

    # Log in on the skewed broker again and again, across the expiry: no login that
    # began after the expiry (by this host's clock, which is ZooKeeper's) succeeds.
    accepted_after, refused_after = [], 0
    deadline_ms = expiry_ms + 20_000
    while True:
        began_ms = time.time() * 1000
        if began_ms >= deadline_ms or (began_ms >= expiry_ms + 2_500 and refused_after >= 3):
            break
        error = _wire_login_error(cluster, SKEWED, created)
        if error is None and began_ms > expiry_ms + 100:  # 100 ms: the clock's uncertainty
            accepted_after.append(began_ms - expiry_ms)
        if error is not None and began_ms > expiry_ms:
            refused_after += 1
        time.sleep(0.2)
    assert accepted_after == [], f"accepted {accepted_after} ms after the token's expiry"
    assert refused_after >= 3
    assert not _kafka_python_logs_in(cluster, SKEWED, created)
    # Refused by the expiry check itself: the token is still in ZooKeeper (nothing swept
    # it), and the audit says why.
    assert _token_in_zookeeper(cluster, created["TokenId"]) is not None
    reasons = {e["reason"] for e in _audit(cluster, SKEWED)
               if e["type"] == "authentication" and e.get("token_id") == created["TokenId"]
               and e["outcome"] == "failure"}
    assert reasons == {"expired_token"}

    # -- 2. Ten minutes ahead, the default bound (30 s): refused there, served elsewhere.
    log_from = _restart_skewed(cluster, "+10m", max_clock_skew_ms=None)
    assert broker_metric(cluster, SKEWED, "tokensvc_clock_offset_seconds") == pytest.approx(
        -MINUTES_10_S, abs=2.0)
    assert broker_metric(cluster, SKEWED, "tokensvc_clock_skew_refusing") == 1
    assert broker_metric(cluster, SKEWED, "tokensvc_clock_max_skew_seconds") == 30.0
    assert _controller(cluster) != SKEWED  # restarted last: the others hold the election

    live = _create(cluster, 3, max_lifetime_ms=-1)
    assert live["ErrorCode"] == 0

    def refused_for_the_clock() -> bool:
        message = _wire_login_error(cluster, SKEWED, live)
        return message is not None and "clock" in message and "max.clock.skew.ms" in message

    # First the token's notification reaches broker 1 (until then: unknown there).
    assert poll_until(refused_for_the_clock, timeout=10)
    for _ in range(2):
        assert refused_for_the_clock()
    assert not _kafka_python_logs_in(cluster, SKEWED, live)
    refused_create = _create(cluster, SKEWED, max_lifetime_ms=-1)
    assert refused_create["ErrorCode"] == int(Errors.REQUEST_TIMED_OUT)
    assert Errors.REQUEST_TIMED_OUT.retriable
    for other in (2, 3):
        # Broker 3 answered the create; broker 2 serves the token once it has followed it.
        assert poll_until(lambda o=other: _wire_login_error(cluster, o, live) is None,
                          timeout=10, interval=0.1), other
        assert _kafka_python_logs_in(cluster, other, live)
        assert _create(cluster, other, max_lifetime_ms=-1)["ErrorCode"] == 0
    # A user's login does not depend on the clock: served.
    with _admin(cluster, SKEWED) as admin:
        assert admin.session_lifetime_ms >= 0
    assert broker_metric(cluster, SKEWED, "tokensvc_clock_skew_refusals") >= 5

    def audited() -> bool:
        events = _audit(cluster, SKEWED)
        logins = [e for e in events if e["type"] == "authentication"
                  and e.get("reason") == "clock_skew"]
        writes = [e for e in events if e["type"] == "token" and e.get("reason") == "clock_skew"]
        return (len(logins) >= 3 and all(e["outcome"] == "failure" and e["kind"] == "token"
                                         for e in logins)
                and [(e["action"], e["error_code"]) for e in writes]
                == [("create", int(Errors.REQUEST_TIMED_OUT))])

    assert poll_until(audited, timeout=10)
    assert _log_since(cluster, SKEWED, log_from).count(SKEW_LOG_LINE) == 1  # once, not per request

    # -- 3. Ten minutes ahead, the controller, sweeping every second: nothing early.
    cluster.stop_broker(2)
    cluster.stop_broker(3)
    _restart_skewed(cluster, "+10m", max_clock_skew_ms=BOUND_ABOVE_10_MIN,
                    delegation_token_expiry_check_interval_ms="1000")
    assert poll_until(lambda: broker_metric(cluster, SKEWED, "tokensvc_controller") == 1,
                      timeout=30)
    cluster.start_broker(2)
    cluster.start_broker(3)
    assert broker_metric(cluster, SKEWED, "tokensvc_clock_skew_refusing") == 0

    three_minutes = _create(cluster, 2, max_lifetime_ms=180_000)  # forwarded to broker 1
    assert three_minutes["ErrorCode"] == 0
    now_ms = time.time() * 1000
    assert abs(three_minutes["IssueTimestampMs"] - now_ms) < 5_000  # not ten minutes ahead
    assert abs(three_minutes["ExpiryTimestampMs"] - (now_ms + 180_000)) < 5_000
    stored = _token_in_zookeeper(cluster, three_minutes["TokenId"])
    assert stored is not None and stored["expiryTimestamp"] == three_minutes["ExpiryTimestampMs"]

    sweeps = broker_metric(cluster, SKEWED, "tokensvc_expiry_sweeps")
    assert poll_until(
        lambda: broker_metric(cluster, SKEWED, "tokensvc_expiry_sweeps") >= sweeps + 3,
        timeout=15)
    assert _token_in_zookeeper(cluster, three_minutes["TokenId"]) is not None
    for broker_id in cluster.broker_ids():
        assert poll_until(lambda b=broker_id: _kafka_python_logs_in(cluster, b, three_minutes),
                          timeout=10), broker_id
    assert not any(e["type"] == "sweep" and e.get("token_id") == three_minutes["TokenId"]
                   for e in _audit(cluster, SKEWED))
