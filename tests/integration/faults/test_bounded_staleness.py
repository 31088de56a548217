"""Bounded staleness (issue #20, item 1) on a real broker over a real ZooKeeper that stops
answering (SIGSTOP of the ZooKeeper process).

- Default (``zookeeper.max.staleness.ms=3000``): once the broker's view is older than the
  bound, token logins, user logins and requests on a token-authenticated connection fail
  closed with REQUEST_TIMED_OUT (retriable), audited with reason ``stale_view``; when
  ZooKeeper answers again, they succeed again.
- ``-1``: Kafka's behaviour, logins and requests answered from the cache all along.
- A healthy broker never trips the gate (no ``stale_view`` in its audit).

The pause-revocation property (a paused broker refuses tokens revoked meanwhile) runs in
``tests/integration/faults/test_chaos_short.py`` against separate broker processes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.client import WireClient
from tests.support.inproc import InProcessBroker, bootstrap_user, broker_properties
from tests.support.wait import poll_until
from tokensvc.broker.writes.channel import ChannelAuthError
from tokensvc.core.config import BrokerConfig
from tokensvc.core.errors import Errors
from tokensvc.protocol.api import ApiKey
from zk.server import ManagedZooKeeper

pytestmark = pytest.mark.slow

ANY_ACL = {"ResourceTypeFilter": 1, "ResourceNameFilter": None, "PatternTypeFilter": 1,
           "PrincipalFilter": None, "HostFilter": None, "Operation": 1, "PermissionType": 1}
REQUEST_TIMEOUT_MS = 2000
ADMIN = ("admin", "admin-secret")


@pytest.fixture
def zookeeper_node(tmp_path: Path) -> Iterator[ManagedZooKeeper]:
    with ManagedZooKeeper(tmp_path / "zk") as node:
        yield node
        node.resume()


def _start(zk: ManagedZooKeeper, audit: Path, **extra: str) -> InProcessBroker:
    bootstrap_user(zk.connect, *ADMIN)
    props = broker_properties(1, zk.connect, audit_log_dir=str(audit),
                              request_timeout_ms=str(REQUEST_TIMEOUT_MS), **extra)
    return InProcessBroker(BrokerConfig.from_properties(props)).start()


def _audit(audit: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(audit.glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def _stale(audit: Path) -> list[dict]:
    return [e for e in _audit(audit) if e.get("reason") == "stale_view"]


def _token(address: tuple[str, int]) -> tuple[str, str]:
    with WireClient(address, *ADMIN) as admin:
        created = admin.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                {"Renewers": [], "MaxLifetimeMs": -1})
    assert created["ErrorCode"] == 0
    return created["TokenId"], base64.b64encode(created["Hmac"]).decode("ascii")


def _login_error(address: tuple[str, int], username: str, password: str,
                 token: bool = False) -> str | None:
    """None when the login succeeds, else the broker's message."""
    try:
        WireClient(address, username, password, token=token, timeout=15.0).close()
    except ChannelAuthError as exc:
        return str(exc)
    return None


def _zookeeper_lost(broker: InProcessBroker) -> bool:
    return broker.broker._zk.state != "CONNECTED"


def test_default_fails_closed_while_zookeeper_is_unreachable(
        zookeeper_node: ManagedZooKeeper, tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    broker = _start(zookeeper_node, audit)
    try:
        address = broker.address()
        token_id, hmac = _token(address)
        assert _login_error(address, token_id, hmac, token=True) is None
        session = WireClient(address, token_id, hmac, token=True, timeout=15.0)
        assert session.request(ApiKey.DESCRIBE_ACLS, 3, ANY_ACL)["ErrorCode"] == 0
        # A healthy broker never trips the gate.
        assert _stale(audit) == []

        zookeeper_node.pause()
        gate = broker.broker.parts.freshness
        assert poll_until(lambda: _zookeeper_lost(broker) and not gate.fresh(), timeout=30)

        for name, secret, token in ((token_id, hmac, True), (*ADMIN, False)):
            message = _login_error(address, name, secret, token)
            assert message is not None and "view of ZooKeeper not confirmed" in message
        described = session.request(ApiKey.DESCRIBE_ACLS, 3, ANY_ACL)
        assert described["ErrorCode"] == int(Errors.REQUEST_TIMED_OUT)
        assert Errors.REQUEST_TIMED_OUT.retriable
        session.close()

        assert poll_until(lambda: len(_stale(audit)) >= 3, timeout=10), _stale(audit)
        events = _stale(audit)
        logins = [e for e in events if e["type"] == "authentication"]
        assert {e["kind"] for e in logins} == {"token", "user"}
        assert all(e["outcome"] == "failure" for e in logins)
        refused = [e for e in events if e["type"] == "session"]
        assert [(e["action"], e["token_id"]) for e in refused] == [("refused", token_id)]
        assert gate.refusals >= 3

        zookeeper_node.resume()
        assert poll_until(lambda: _login_error(address, token_id, hmac, True) is None,
                          timeout=30)
        assert _login_error(address, *ADMIN) is None
    finally:
        zookeeper_node.resume()
        broker.stop()


def test_minus_one_answers_from_the_cache_while_zookeeper_is_unreachable(
        zookeeper_node: ManagedZooKeeper, tmp_path: Path) -> None:
    audit = tmp_path / "audit"
    broker = _start(zookeeper_node, audit, zookeeper_max_staleness_ms="-1")
    try:
        address = broker.address()
        token_id, hmac = _token(address)
        session = WireClient(address, token_id, hmac, token=True, timeout=15.0)
        zookeeper_node.pause()
        assert poll_until(lambda: _zookeeper_lost(broker), timeout=30)
        assert broker.broker.parts.freshness.fresh()  # disabled: always answers from the cache
        assert _login_error(address, token_id, hmac, token=True) is None
        assert _login_error(address, *ADMIN) is None
        assert session.request(ApiKey.DESCRIBE_ACLS, 3, ANY_ACL)["ErrorCode"] == 0
        session.close()
        assert _stale(audit) == []
        assert broker.broker.parts.freshness.rounds == 0
    finally:
        zookeeper_node.resume()
        broker.stop()
