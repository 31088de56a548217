"""Configuration on real brokers: a short max lifetime with the default expiry time
starts a 3-broker local cluster whose tokens expire at max (KIP-48); a Kafka
server.properties key is only warned about, once; an empty secret disables tokens
and says so once in the broker's log."""

from __future__ import annotations

from pathlib import Path

from tests.support.client import WireClient
from tests.support.local_cluster import broker_address
from tests.support.wait import retry
from tokensvc.cluster import LocalCluster
from tokensvc.config_loader import TOKENS_DISABLED
from tokensvc.core.errors import Errors
from tokensvc.protocol.api import ApiKey

MAX_LIFETIME_MS = 600_000


def _admin(cluster: LocalCluster, broker_id: int) -> WireClient:
    return retry(lambda: WireClient(broker_address(cluster, broker_id), cluster.info["admin"]["username"],
                                    cluster.info["admin"]["password"]), timeout=15)


def test_short_max_lifetime_starts_three_brokers_and_tokens_expire_at_max(
    tmp_path: Path, zk_connect: str
) -> None:
    overrides = {
        "delegation.token.max.lifetime.ms": str(MAX_LIFETIME_MS),
        "log.dirs": "/tmp/kafka-logs",
        "num.partitions": "1",
    }
    with LocalCluster.up(tmp_path / "cluster", brokers=3, zookeeper=zk_connect,
                         overrides=overrides, die_with_parent=True) as cluster:
        created = {}
        for broker_id in cluster.broker_ids():
            with _admin(cluster, broker_id) as admin:
                for asked in (-1, 0, MAX_LIFETIME_MS * 10, 300_000):
                    token = admin.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                          {"Renewers": [], "MaxLifetimeMs": asked})
                    assert token["ErrorCode"] == Errors.NONE
                    lifetime = 300_000 if asked == 300_000 else MAX_LIFETIME_MS
                    assert token["MaxTimestampMs"] == token["IssueTimestampMs"] + lifetime
                    assert token["ExpiryTimestampMs"] == token["MaxTimestampMs"]
                    created[token["TokenId"]] = token

        def every_broker_describes_them() -> None:
            for broker_id in cluster.broker_ids():
                with _admin(cluster, broker_id) as admin:
                    described = admin.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"Owners": None})
                seen = {t["TokenId"]: t for t in described["Tokens"]}
                assert seen.keys() >= created.keys()
                for token_id, token in created.items():
                    assert seen[token_id]["ExpiryTimestamp"] == token["ExpiryTimestampMs"]
                    assert seen[token_id]["MaxTimestamp"] == token["MaxTimestampMs"]

        retry(every_broker_describes_them, timeout=15)
        for broker_id in cluster.broker_ids():
            log = Path(cluster.broker_info(broker_id)["log"]).read_text()
            warnings = [line for line in log.splitlines() if "tokensvc does not use" in line]
            assert len(warnings) == 1
            assert warnings[0].endswith("ignoring 2 key(s) tokensvc does not use: "
                                        "log.dirs, num.partitions")
            assert "/tmp/kafka-logs" not in log


def test_empty_secret_starts_with_tokens_disabled_said_once(tmp_path: Path, zk_connect: str) -> None:
    with LocalCluster.up(tmp_path / "cluster", brokers=1, zookeeper=zk_connect,
                         overrides={"delegation.token.secret.key": ""},
                         die_with_parent=True) as cluster:
        with _admin(cluster, 1) as admin:
            answer = admin.request(ApiKey.CREATE_DELEGATION_TOKEN, 3,
                                   {"Renewers": [], "MaxLifetimeMs": -1})
        assert answer["ErrorCode"] == Errors.DELEGATION_TOKEN_AUTH_DISABLED
        log = Path(cluster.broker_info(1)["log"]).read_text()
    assert log.count(TOKENS_DISABLED) == 1
