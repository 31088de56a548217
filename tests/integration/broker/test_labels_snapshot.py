"""A broker restarted from its token cache snapshot keeps the tokens' labels, on the real
ZooKeeper: tokens labelled before the stop come back from the snapshot (format version 2)
with their labels, one labelled while it was down is read again from ZooKeeper with its
labels, and a describe by label on the restarted broker returns exactly them."""

from __future__ import annotations

from tests.integration.broker.test_cache_snapshot import (
    _cache,
    _config,
    _started,
    _users,
    _zookeeper_tokens,
)
from tests.support.client import WireClient
from tests.support.inproc import InProcessBroker, wait_for_controller
from tests.support.wait import poll_until
from tokensvc.snapshot.files import SNAPSHOT_FILE
from tokensvc.snapshot.format import decode

CREATE, DESCRIBE = 38, 41


def _create(broker: InProcessBroker, labels: dict[str, str]) -> dict:
    with WireClient(broker.address(), "alice", "alice-secret") as alice:
        answer = alice.request(CREATE, 3, {
            "Renewers": [], "MaxLifetimeMs": -1,
            "Labels": [{"Key": k, "Value": v} for k, v in labels.items()]})
    assert answer["ErrorCode"] == 0, answer
    return answer


def test_a_restart_from_the_snapshot_keeps_every_tokens_labels(zk_connect, tmp_path) -> None:
    _users(zk_connect)
    other = InProcessBroker(_config(2, zk_connect)).start()
    try:
        wait_for_controller([other])
        config = _config(1, zk_connect, tmp_path / "snapshots")
        first = _started(config)
        before = [_create(other, {"job": "etl-nightly", "team": "payments"}) for _ in range(3)]
        plain = _create(other, {})
        assert poll_until(lambda: {t["TokenId"] for t in [*before, plain]} <= set(_cache(first)),
                          10)
        first.stop()
        snapshot = decode((tmp_path / "snapshots" / SNAPSHOT_FILE).read_bytes())
        assert {t.token_id: t.labels for t in snapshot.tokens if t.labels} == {
            t["TokenId"]: (("job", "etl-nightly"), ("team", "payments")) for t in before}
        during = _create(other, {"job": "etl-nightly", "run": "2"})

        restarted = _started(config)
        try:
            assert restarted.broker.parts.token_sync.snapshot_result == "loaded"
            cache = _cache(restarted)
            assert cache == _zookeeper_tokens(zk_connect)
            assert all(cache[t["TokenId"]].labels == (("job", "etl-nightly"),
                                                      ("team", "payments")) for t in before)
            assert cache[during["TokenId"]].labels == (("job", "etl-nightly"), ("run", "2"))
            assert cache[plain["TokenId"]].labels == ()
            with WireClient(restarted.address(), "alice", "alice-secret") as alice:
                shown = alice.request(DESCRIBE, 3, {
                    "Owners": None, "IncludeLabels": True,
                    "LabelSelector": [{"Key": "job", "Value": "etl-nightly"}]})
            assert shown["ErrorCode"] == 0
            assert {t["TokenId"] for t in shown["Tokens"]} == {
                t["TokenId"] for t in [*before, during]}
            assert all({lb["Key"] for lb in t["Labels"]} >= {"job"} for t in shown["Tokens"])
        finally:
            restarted.stop()
    finally:
        other.stop()
