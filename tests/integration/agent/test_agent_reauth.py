"""KIP-368 and the agent's new token: with ``connections.max.reauth.ms`` a client that
re-authenticates does it with the token it was given last, on the same connection.

Measured per client library, on a real broker (``connections.max.reauth.ms=3000``): the
client logs in with token A; it is handed token B (as the agent's followers do); then A is
expired. librdkafka re-authenticates with B on its live connection, no request failed;
kafka-python 3.0 re-authenticates with the token its connection was opened with (A) and
moves to B on the reconnect after A is expired, no request failed; aiokafka does not
re-authenticate: the broker ends its session at the lifetime, the request that finds the
session over fails (Kafka behaves the same) and succeeds when sent again, on a new
connection that logs in with B. docs/agent.md has
the table.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from pathlib import Path

import pytest
from aiokafka.client import AIOKafkaClient
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from kafka import KafkaAdminClient

from tests.support.local_cluster import admin_client
from tests.support.wait import wait_for
from tokensvc.admin import AdminClient, TokenDescription
from tokensvc.agent.clients import aiokafka_applier, confluent_applier, kafka_python_applier
from tokensvc.agent.credentials import Credentials
from tokensvc.cluster import LocalCluster

REAUTH_MS = 3_000


pytestmark = pytest.mark.cluster(brokers=1,
                                 overrides={"connections.max.reauth.ms": str(REAUTH_MS)})


def _admin(cluster: LocalCluster) -> AdminClient:
    return admin_client(cluster, timeout_s=15)


def _creds(token: TokenDescription) -> Credentials:
    return Credentials(token.token_id, token.hmac_b64, str(token.owner), token.issue_ms,
                       token.expiry_ms, token.max_ms)


def _logins(cluster: LocalCluster, client_id: str) -> dict[str, list[str]]:
    """token id -> how it was used by ``client_id``: "login" or "reauth", in order."""
    seen: dict[str, list[str]] = defaultdict(list)
    events = [json.loads(line) for path in Path(cluster.info["audit_dir"]).rglob("*.jsonl")
              for line in path.read_text().splitlines()]
    # Every broker writes its own files: in order of time across them.
    for event in sorted(events, key=lambda e: str(e["ts"])):
        if event.get("type") == "authentication" and event.get("outcome") == "success" \
                and event.get("client_id") == client_id:
            seen[event["token_id"]].append("login")
        elif event.get("type") == "session" and event.get("action") == "reauthenticated":
            seen[event.get("token_id")].append("reauth")
    return seen


def _rotate(cluster: LocalCluster, apply, ask_once) -> tuple[str, str, list[str]]:
    """Token A in use; hand the client B; expire A; ask all along. (A, B, failures): a
    request that meets a closed session is sent again once (a reconnect); a second failure
    is a failure."""
    failures: list[str] = []

    def ask() -> None:
        try:
            ask_once()
        except Exception:  # noqa: BLE001 - the client reconnects; the second try counts
            ask_once()

    with _admin(cluster) as admin:
        a, b = admin.create_token(), admin.create_token()
        apply(_creds(a), first=True)
        ask()
        apply(_creds(b), first=False)
        deadline = time.monotonic() + REAUTH_MS / 1000 * 2 + 1
        while time.monotonic() < deadline:  # two session lifetimes: a re-auth happens
            try:
                ask()
            except Exception as exc:  # noqa: BLE001 - counted, not raised
                failures.append(repr(exc))
            time.sleep(0.2)
        admin.expire_token(a.hmac)
        for _ in range(10):
            try:
                ask()
            except Exception as exc:  # noqa: BLE001
                failures.append(repr(exc))
            time.sleep(0.2)
        admin.expire_token(b.hmac)
    return a.token_id, b.token_id, failures


def test_librdkafka_reauthenticates_with_the_new_token_on_the_same_connection(
    cluster: LocalCluster,
) -> None:
    client: dict = {}

    def apply(creds: Credentials, first: bool) -> None:
        if first:
            client["c"] = ConfluentAdmin({
                "bootstrap.servers": cluster.info["bootstrap_servers"],
                "client.id": "reauth-confluent", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": creds.token_id,
                "sasl.password": creds.hmac_b64})
        else:
            confluent_applier(client["c"])(creds)

    _, b, failures = _rotate(cluster, apply, lambda: client["c"].list_topics(timeout=10))
    assert failures == []
    # librdkafka re-authenticated a live connection with B, the token it was handed.
    assert "reauth" in wait_for(lambda: _logins(cluster, "reauth-confluent").get(b), 5,
                                "a re-authentication with B")


def test_kafka_python_does_not_reauthenticate_and_reconnects_with_the_new_token(
    cluster: LocalCluster,
) -> None:
    client: dict = {}

    def apply(creds: Credentials, first: bool) -> None:
        if first:
            client["c"] = KafkaAdminClient(
                bootstrap_servers=cluster.info["bootstrap_servers"].split(","),
                client_id="reauth-kafka-python", security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=creds.token_id,
                sasl_plain_password=creds.hmac_b64)
        else:
            kafka_python_applier(client["c"])(creds)

    a, b, failures = _rotate(cluster, apply, lambda: client["c"].describe_cluster())
    client["c"].close()
    used = _logins(cluster, "reauth-kafka-python")
    # kafka-python 3.0 re-authenticates (KIP-368), but with the credentials its connection
    # was opened with: it stays on A until A is expired, then a new connection logs in
    # with B. So B's first use is a login; a re-authentication with B can follow only on
    # that new connection (when the run is slow enough for its session to come due).
    # No request failed.
    assert "reauth" in used[a]
    assert used[b][0] == "login", used[b]
    assert failures == [], failures


def test_aiokafka_does_not_reauthenticate_and_reconnects_with_the_new_token(
    cluster: LocalCluster,
) -> None:
    loop = asyncio.new_event_loop()
    client: dict = {}

    def apply(creds: Credentials, first: bool) -> None:
        if first:
            async def start() -> AIOKafkaClient:
                c = AIOKafkaClient(
                    bootstrap_servers=cluster.info["bootstrap_servers"],
                    client_id="reauth-aiokafka", security_protocol="SASL_PLAINTEXT",
                    sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=creds.token_id,
                    sasl_plain_password=creds.hmac_b64)
                await c.bootstrap()
                return c
            client["c"] = loop.run_until_complete(start())
        else:
            aiokafka_applier(client["c"])(creds)

    a, b, failures = _rotate(
        cluster, apply, lambda: loop.run_until_complete(client["c"].fetch_all_metadata()))
    loop.run_until_complete(client["c"].close())
    loop.close()
    used = _logins(cluster, "reauth-aiokafka")
    # aiokafka does not re-authenticate: the broker ends its session at the lifetime (as
    # Kafka does, on the first request after it: that request fails), and the next
    # connection logs in with B.
    assert "reauth" not in used[a] + used[b]
    assert "login" in used[b] and len(used[a]) >= 2
    assert failures == [], failures
