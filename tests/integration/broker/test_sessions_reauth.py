"""KIP-368 on real sockets: session lifetimes, their enforcement, and re-authentication.

Two single-broker clusters (each its own ZooKeeper chroot, so a client that
follows Metadata stays on its broker): broker 1 caps every session with
``connections.max.reauth.ms`` (short, so lifetimes end during the test), broker
2 has no cap (a token session lives until the token's expiry). Clients:
the tests' own WireClient (it never re-authenticates by itself, so the tests
drive re-authentication explicitly) and kafka-python 3.0.12, which implements
KIP-368 re-authentication in ``kafka/net/connection.py`` (SaslReauthenticator).
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient

from tests.support.client import WireClient
from tests.support.inproc import InProcessBroker, bootstrap_user, broker_properties
from tests.support.wait import retry as eventually
from tokensvc.broker.writes.channel import ChannelClosed
from tokensvc.core.config import BrokerConfig
from tokensvc.core.errors import Errors
from tokensvc.kafka_python_token import token_login_config
from tokensvc.protocol.api import ApiKey
from tokensvc.scram.client import ScramClient
from tokensvc.scram.formatter import ScramMechanism

REAUTH_MS = 1_500
DAY_MS = 86_400_000


@pytest.fixture(scope="module")
def brokers(zookeeper, tmp_path_factory) -> Iterator[dict[int, InProcessBroker]]:
    audit = tmp_path_factory.mktemp("audit")
    started = {}
    for broker_id, extra in [(1, {"connections.max.reauth.ms": str(REAUTH_MS)}), (2, {})]:
        connect = f"{zookeeper.connect}/sessions-reauth-{broker_id}-{time.monotonic_ns()}"
        for user, password in [("admin", "admin-secret"), ("broker", "broker-secret"),
                               ("alice", "alice-secret"), ("bob", "bob-secret")]:
            bootstrap_user(connect, user, password)
        props = broker_properties(broker_id, connect, **{"audit.log.dir": str(audit)})
        props.update(extra)
        started[broker_id] = InProcessBroker(BrokerConfig.from_properties(props)).start()
    for broker in started.values():
        eventually(lambda b=broker: _assert(b.broker.is_controller), 15)
    yield started
    for broker in started.values():
        broker.stop()


def _assert(condition: bool) -> None:
    assert condition


def audit_events(broker: InProcessBroker, **match: Any) -> list[dict]:
    directory = Path(broker.config.audit_log_dir)
    events = []
    for path in sorted(directory.glob(f"audit-{broker.config.broker_id}-*.jsonl")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if all(event.get(k) == v for k, v in match.items()):
                events.append(event)
    return events


def audited(broker: InProcessBroker, timeout: float = 5.0, count: int = 1,
            **match: Any) -> list[dict]:
    """The broker's audit events matching ``match``, waiting for the writer to flush
    ``count`` of them."""

    def found() -> list[dict]:
        events = audit_events(broker, **match)
        assert len(events) >= count, \
            f"{len(events)} audit events {match} from broker {broker.config.broker_id}"
        return events

    return eventually(found, timeout)


def create_token(broker: InProcessBroker) -> dict:
    with WireClient(broker.address(), "alice", "alice-secret") as alice:
        created = alice.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                {"Renewers": [], "MaxLifetimeMs": -1})
    assert created["ErrorCode"] == 0
    return created


def token_login(broker: InProcessBroker, created: dict, mechanism: str = "SCRAM-SHA-256"):
    password = base64.b64encode(created["Hmac"]).decode()
    return eventually(lambda: WireClient(
        broker.address(), created["TokenId"], password, mechanism=mechanism, token=True
    ))


def reauthenticate(
    client: WireClient, username: str, password: str, *, mechanism: str = "SCRAM-SHA-256",
    token: bool = False,
) -> dict:
    """KIP-368 over the live connection: SaslHandshake v1, then SaslAuthenticate v2 twice."""
    handshake = client.request(ApiKey.SASL_HANDSHAKE, 1, {"Mechanism": mechanism})
    if handshake["ErrorCode"]:
        return handshake
    scram = ScramClient(
        ScramMechanism.from_name(mechanism), username, password,
        extensions={"tokenauth": "true"} if token else {},
    )
    first = client.request(ApiKey.SASL_AUTHENTICATE, 2, {"AuthBytes": scram.first_message()})
    if first["ErrorCode"]:
        return first
    final = client.request(ApiKey.SASL_AUTHENTICATE, 2,
                           {"AuthBytes": scram.final_message(first["AuthBytes"])})
    if final["ErrorCode"] == 0:
        scram.verify_server_final(final["AuthBytes"])
    return final


def describe_cluster(client: WireClient) -> dict:
    return client.request(ApiKey.DESCRIBE_CLUSTER, 0, {"IncludeClusterAuthorizedOperations": False})


def test_token_login_lifetime_is_the_time_left_until_the_token_expiry(brokers):
    created = create_token(brokers[2])
    session = token_login(brokers[2], created)
    try:
        assert DAY_MS - 10_000 < session.session_lifetime_ms <= DAY_MS
    finally:
        session.close()
    with WireClient(brokers[2].address(), "alice", "alice-secret") as alice:
        moved = alice.request(ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                              {"Hmac": created["Hmac"], "ExpiryTimePeriodMs": 5_000})
    assert moved["ErrorCode"] == 0
    session = token_login(brokers[2], created)
    try:
        assert 2_000 < session.session_lifetime_ms <= 5_000
    finally:
        session.close()


def test_lifetime_is_capped_by_max_reauth_for_tokens_and_users(brokers):
    created = create_token(brokers[1])
    session = token_login(brokers[1], created)
    try:
        assert session.session_lifetime_ms == REAUTH_MS
    finally:
        session.close()
    with WireClient(brokers[1].address(), "alice", "alice-secret") as alice:
        assert alice.session_lifetime_ms == REAUTH_MS
    with WireClient(brokers[2].address(), "alice", "alice-secret") as alice:
        assert alice.session_lifetime_ms == 0  # no credential expiry, no cap: no lifetime


def test_request_after_the_lifetime_without_reauthentication_closes_the_connection(brokers):
    broker = brokers[1]
    before = broker.broker.local.metrics.sessions_expired._value.get()
    with WireClient(broker.address(), "bob", "bob-secret") as bob:
        assert describe_cluster(bob)["ErrorCode"] == 0
        time.sleep(REAUTH_MS / 1000 + 0.2)
        with pytest.raises(ChannelClosed):
            describe_cluster(bob)
    assert broker.broker.local.metrics.sessions_expired._value.get() == before + 1
    audited(broker, type="session", action="expired", principal="User:bob")


def test_reauthentication_over_the_live_connection_keeps_it_open(brokers):
    broker = brokers[1]
    with WireClient(broker.address(), "alice", "alice-secret") as alice:
        for _ in range(2):
            time.sleep(REAUTH_MS / 1000 * 0.6)
            answer = reauthenticate(alice, "alice", "alice-secret")
            assert answer["ErrorCode"] == 0
            assert answer["SessionLifetimeMs"] == REAUTH_MS
        # Now past the first lifetime (1.8 s > 1.5 s): still open thanks to the re-auths.
        assert describe_cluster(alice)["ErrorCode"] == 0
    events = audited(broker, count=2, type="session", action="reauthenticated",
                     principal="User:alice")
    assert len(events) >= 2


def test_token_session_reauthenticates_with_its_token(brokers):
    broker = brokers[1]
    created = create_token(broker)
    session = token_login(broker, created)
    try:
        answer = reauthenticate(session, created["TokenId"],
                                base64.b64encode(created["Hmac"]).decode(), token=True)
        assert answer["ErrorCode"] == 0
        assert describe_cluster(session)["ErrorCode"] == 0
        assert broker.broker.parts.sessions.token_sessions(created["TokenId"]) == 1
    finally:
        session.close()


def test_reauthentication_as_another_principal_is_refused_and_closes(brokers):
    broker = brokers[2]
    with WireClient(broker.address(), "alice", "alice-secret") as alice:
        answer = reauthenticate(alice, "bob", "bob-secret")
        assert answer["ErrorCode"] == Errors.SASL_AUTHENTICATION_FAILED
        assert "Cannot change principals" in answer["ErrorMessage"]
        with pytest.raises(ChannelClosed):
            describe_cluster(alice)
    (refused,) = audited(broker, type="authentication", outcome="failure",
                         reason="principal_changed")
    assert refused["principal"] == "User:alice" and refused["username"] == "bob"


def test_reauthentication_with_another_mechanism_is_refused_and_closes(brokers):
    broker = brokers[2]
    with WireClient(broker.address(), "alice", "alice-secret") as alice:
        answer = reauthenticate(alice, "alice", "alice-secret", mechanism="SCRAM-SHA-512")
        assert answer["ErrorCode"] == Errors.UNSUPPORTED_SASL_MECHANISM
        with pytest.raises(ChannelClosed):
            describe_cluster(alice)
    (refused,) = audited(broker, type="authentication", outcome="failure",
                         reason="mechanism_changed")
    assert refused["principal"] == "User:alice" and refused["mechanism"] == "SCRAM-SHA-512"


def test_kafka_python_reauthenticates_when_its_lifetime_ends(brokers):
    broker = brokers[1]
    created = create_token(broker)
    reauths = broker.broker.local.metrics.reauthentications

    def count() -> float:
        return reauths.labels("SCRAM-SHA-512", "success")._value.get()

    before = count()
    client = eventually(lambda: KafkaAdminClient(
        bootstrap_servers=[f"{broker.address()[0]}:{broker.address()[1]}"],
        security_protocol="SASL_PLAINTEXT",
        bootstrap_timeout_ms=10_000,
        **token_login_config(created["TokenId"], created["Hmac"]),
    ))
    try:
        ends = time.monotonic() + 2.2 * REAUTH_MS / 1000
        calls = 0
        while time.monotonic() < ends:
            assert client.describe_cluster()["cluster_id"]
            calls += 1
            time.sleep(0.1)
    finally:
        client.close()
    # Every call succeeded for more than two lifetimes: the broker would have closed a
    # connection that did not re-authenticate (see the test above), so kafka-python did.
    assert calls > 10
    assert count() - before >= 2
    events = audited(broker, type="session", action="reauthenticated",
                     token_id=created["TokenId"])
    assert all(e["principal"] == "User:alice" for e in events)
