"""`tokensvc tokens export` reads a real ZooKeeper and never writes an HMAC."""

from __future__ import annotations

import base64
import json

from click.testing import CliRunner

from cli.tokens_cmd import tokens
from tokensvc.audit.token_export import read_tokens
from tokensvc.core.clock import FakeClock
from tokensvc.core.keys import MasterKeys, token_hmac
from tokensvc.core.manager import TokenManager
from tokensvc.core.principal import KafkaPrincipal
from zk.client import ZkSettings, open_client
from zk.token_store import TokenStore


def test_export_writes_every_token_without_hmac(zk_connect, tmp_path):
    keys = MasterKeys("export-test-key")
    manager = TokenManager(keys, max_lifetime_ms=10_000, renew_period_ms=5_000, clock=FakeClock())
    client = open_client(ZkSettings(zk_connect))
    store = TokenStore(client)
    store.ensure_paths()
    alice, bob = KafkaPrincipal.user("alice"), KafkaPrincipal.user("bob")
    made = [manager.create(alice, alice, [bob], -1), manager.create(bob, alice, [], 3_000)]
    for token in made:
        store.create(token.info)
    client.stop()
    client.close()

    out = tmp_path / "tokens.jsonl"
    result = CliRunner().invoke(tokens, ["export", "--zookeeper", zk_connect, "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    by_id = {r["token_id"]: r for r in rows}
    assert set(by_id) == {t.info.token_id for t in made}
    first = by_id[made[0].info.token_id]
    assert first == {
        "token_id": made[0].info.token_id,
        "owner": "User:alice",
        "requester": "User:alice",
        "renewers": ["User:bob"],
        "issue_ms": made[0].info.issue_timestamp,
        "expiry_ms": made[0].info.expiry_timestamp,
        "max_ms": made[0].info.max_timestamp,
    }
    text = out.read_text()
    assert [t.token_id for t in read_tokens(text.splitlines())] == sorted(by_id)
    for token in made:
        assert base64.b64encode(token_hmac("export-test-key", token.info.token_id)).decode() not in text


def test_export_names_the_unreachable_zookeeper():
    result = CliRunner().invoke(
        tokens, ["export", "--zookeeper", "127.0.0.1:1", "--zookeeper-timeout-ms", "500"]
    )
    assert result.exit_code == 1
    assert "127.0.0.1:1" in result.output
