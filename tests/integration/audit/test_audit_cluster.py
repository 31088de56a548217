"""A real cluster's audit files, read by the Spark report, give the expected per-token counts.

Two in-process brokers on real sockets and ZooKeeper write audit events while a
token is created, used (good and bad logins, on both brokers), renewed and
expired; then the Spark job reads the broker's own files.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path

import pytest

from tests.spark_support import shared_spark
from tests.support.client import WireClient
from tests.support.inproc import InProcessBroker, bootstrap_user, broker_properties
from tokensvc.audit.reporting.job import run_report
from tokensvc.audit.reporting.options import build_options
from tokensvc.core.config import BrokerConfig
from tokensvc.protocol.api import ApiKey

pytestmark = pytest.mark.spark


@pytest.fixture(scope="session")
def spark():
    return shared_spark()


def _wait(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def _token_login(broker: InProcessBroker, token_id: str, password: str) -> bool:
    try:
        WireClient(broker.address(), token_id, password, token=True).close()
    except ConnectionError:
        return False
    return True


def test_cluster_audit_report_counts_logins_and_lifecycle_per_token(zookeeper, tmp_path, spark):
    connect = f"{zookeeper.connect}/audit-cluster-{time.monotonic_ns()}"
    for user in ("admin", "broker", "alice"):
        bootstrap_user(connect, user, f"{user}-secret")
    audit_dir = tmp_path / "audit"
    brokers = [
        InProcessBroker(BrokerConfig.from_properties(broker_properties(
            i, connect, **{"audit.log.dir": str(audit_dir / f"broker-{i}")}
        ))).start()
        for i in (1, 2)
    ]
    try:
        _wait(lambda: any(b.broker.is_controller for b in brokers))
        with WireClient(brokers[0].address(), "alice", "alice-secret") as alice:
            created = alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                    {"Renewers": [], "MaxLifetimeMs": -1})
        token_id = created["TokenId"]
        password = base64.b64encode(created["Hmac"]).decode()
        _wait(lambda: all(b.broker.local.cache.by_id(token_id) for b in brokers))
        good = [_token_login(brokers[i % 2], token_id, password) for i in range(5)]
        bad = [_token_login(brokers[0], token_id, "not-the-hmac") for _ in range(2)]
        with WireClient(brokers[1].address(), "alice", "alice-secret") as alice:
            renewed = alice.request(ApiKey.RENEW_DELEGATION_TOKEN, 2,
                                    {"Hmac": created["Hmac"], "RenewPeriodMs": 60_000})
            expired = alice.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                                    {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": -1})
    finally:
        for b in brokers:
            b.stop()  # a clean stop flushes every queued audit event
    assert good == [True] * 5 and bad == [False, False]
    assert renewed["ErrorCode"] == 0 and expired["ErrorCode"] == 0

    out = tmp_path / "report"
    summary = run_report(spark, build_options(str(audit_dir), str(out)))
    assert summary["malformed"] == 0
    assert summary["events"] > 0

    rows = {r["token_id"]: r.asDict() for r in
            spark.read.parquet(str(out / "token_usage" / "parquet")).collect()}
    usage = rows[token_id]
    assert usage["owner"] == "User:alice"
    assert usage["logins_ok"] == 5
    assert usage["logins_failed"] == 2
    assert usage["distinct_hosts"] == 1
    brokers_used = usage["brokers"]
    assert (sorted(brokers_used) if isinstance(brokers_used, list) else brokers_used) in ([1, 2], 2)

    lifecycle = spark.read.parquet(str(out / "lifecycle" / "parquet")).collect()
    assert sum(r["creates"] for r in lifecycle) == 1
    assert sum(r["renews"] for r in lifecycle) == 1
    assert sum(r["expiries"] for r in lifecycle) == 1
    assert (Path(out) / "report.html").exists()
