"""The znodes tokensvc shares with Kafka brokers, against a real ZooKeeper: written as
Kafka 3.9 writes them (versioned read-modify-write of user configs and ACLs, Kafka's
notification children only), purged only when Kafka would, what Kafka writes followed
(its tokens, renewals and expiries), and a token's labels and key id surviving a Kafka
renewal (``/tokensvc/token_labels/<id>``).

"A Kafka broker" here is a plain ZooKeeper client writing what Kafka 3.9's
``KafkaZkClient`` writes, in its steps (the token znode, then its notification); the
bytes are the samples of ``tests/unit/zk/test_kafka_written_bytes.py``.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.wait import poll_until as eventually
from tests.support.zkclient import client_factory
from tests.unit.zk.test_kafka_written_bytes import KAFKA_TOKEN
from tokensvc.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tokensvc.core.cache import TokenCache
from tokensvc.core.keys import MasterKeys
from tokensvc.core.labels import validate
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.scram.changes import CredentialChange
from tokensvc.scram.formatter import ScramMechanism, derive_credential
from zk import layout, notifications, znode_acls
from zk.acl_store import EXTENDED_CHANGES, LITERAL_CHANGES, AclStore, decode_acls, encode_acls
from zk.credential_store import (
    CHANGE_PREFIX as CONFIG_CHANGE_PREFIX,
)
from zk.credential_store import (
    CHANGES_PATH,
    CredentialStore,
    decode_user_config,
    user_path,
)
from zk.notifications import ChangeNotifications, Purge
from zk.reads import ZnodeReads
from zk.requests import RequestRecords, record_op
from zk.token_store import TokenStore
from zk.token_sync import TOKENS_ROOT, TokenSync
from zk.writes import delete_all

KEYS = MasterKeys("beside-kafka-master-key")
SHA256 = ScramMechanism.SCRAM_SHA_256
CREDENTIAL = derive_credential("pw", SHA256, 4096)
KAFKA_TOKEN_ID = "Zl0YT9kvSLaHtdxp5pMVbA"
# Kafka's listener parses every child's suffix after its prefix as a number
# (ZkNodeChangeNotificationListener.changeNumber): anything else fails it, every time.
NOTIFICATION_ROOTS = {
    layout.TOKEN_CHANGES: layout.TOKEN_CHANGE_PREFIX,
    CHANGES_PATH: CONFIG_CHANGE_PREFIX,
    LITERAL_CHANGES: "acl_changes_",
    EXTENDED_CHANGES: "acl_changes_",
}


@pytest.fixture
def zk(zk_connect):
    with client_factory(zk_connect) as make:
        yield make


def _info(token_id: str, **overrides: object) -> TokenInformation:
    fields: dict[str, object] = {
        "token_id": token_id,
        "owner": KafkaPrincipal.user("alice"),
        "token_requester": KafkaPrincipal.user("alice"),
        "renewers": (),
        "issue_timestamp": 1_700_000_000_000,
        "expiry_timestamp": 4_000_000_000_000,
        "max_timestamp": 4_100_000_000_000,
        "key_id": KEYS.current_id,
    }
    return TokenInformation(**{**fields, **overrides})


def _kafka_token_bytes(info: TokenInformation) -> bytes:
    """What a Kafka broker writes for ``info``: its seven fields and version only."""
    return layout.encode_token(TokenInformation(
        info.token_id, info.owner, info.token_requester, info.renewers,
        info.issue_timestamp, info.expiry_timestamp, info.max_timestamp))


def _kafka_notify(client, token_id: str) -> None:
    """Kafka's createTokenChangeNotification: a step of its own, after the token write."""
    client.create(layout.token_change_create_path(), token_id.encode(), sequence=True)


def _sync(client, *, beside_kafka: bool = True) -> tuple[TokenStore, TokenCache, TokenSync]:
    store = TokenStore(client, beside_kafka=beside_kafka)
    cache = TokenCache(KEYS)
    sync = TokenSync(store, cache)
    sync.start()
    return store, cache, sync


# --- what Kafka writes, followed ---------------------------------------------------------


def test_a_kafka_created_token_its_renewal_and_its_expiry_reach_the_followers_cache(zk):
    kafka = zk()
    _, cache, sync = _sync(zk())
    try:
        # A Kafka broker creates a token: seven fields and version, no key id, no labels.
        kafka.create(layout.token_path(KAFKA_TOKEN_ID), KAFKA_TOKEN)
        _kafka_notify(kafka, KAFKA_TOKEN_ID)
        assert eventually(lambda: cache.info(KAFKA_TOKEN_ID) is not None, timeout=10)
        info = cache.info(KAFKA_TOKEN_ID)
        assert (str(info.owner), info.key_id, info.labels) == ("User:alice", "", ())
        assert [str(r) for r in info.renewers] == ["User:bob", "User:carol smith"]
        # Its renewal: setData at any version with a newer expiry, then the notification.
        renewed = json.loads(KAFKA_TOKEN)
        renewed["expiryTimestamp"] += 3_600_000
        kafka.set(layout.token_path(KAFKA_TOKEN_ID), json.dumps(renewed).encode())
        _kafka_notify(kafka, KAFKA_TOKEN_ID)
        assert eventually(lambda: cache.info(KAFKA_TOKEN_ID).expiry_timestamp
                          == renewed["expiryTimestamp"], timeout=10)
        # Its expiry: the znode deleted (recursively), then the notification.
        kafka.delete(layout.token_path(KAFKA_TOKEN_ID), recursive=True)
        _kafka_notify(kafka, KAFKA_TOKEN_ID)
        assert eventually(lambda: cache.info(KAFKA_TOKEN_ID) is None, timeout=10)
        assert sync.resync_count == 1  # followed, never reloaded
    finally:
        sync.close()


# --- labels and key id survive a Kafka renewal --------------------------------------------


def test_labels_and_key_id_survive_a_kafka_renewal(zk):
    client = zk()
    store, cache, sync = _sync(client)
    labels = validate({"team": "payments", "job": "etl"}.items())
    token = _info("labelled-token-0000001", labels=labels)
    try:
        sequence = store.create(token)
        assert sync.wait_for([(TOKENS_ROOT.name, sequence)]).result(10) is None
        side, _ = client.get(layout.token_side_path(token.token_id))
        assert layout.decode_token_side(side) == (KEYS.current_id, labels)
        # A Kafka broker renews it: its znode rewritten with Kafka's seven fields only.
        kafka = zk()
        longer = TokenInformation(**{**_fields(token), "expiry_timestamp": 4_050_000_000_000})
        kafka.set(layout.token_path(token.token_id), _kafka_token_bytes(longer))
        assert b"labels" not in kafka.get(layout.token_path(token.token_id))[0]
        _kafka_notify(kafka, token.token_id)
        assert eventually(lambda: cache.info(token.token_id).expiry_timestamp
                          == 4_050_000_000_000, timeout=10)
        held = cache.info(token.token_id)
        assert (held.key_id, held.labels) == (KEYS.current_id, labels)
        # Revocation by label finds it (the cache's label index), as does a fresh load.
        assert token.token_id in cache.ids_labelled(validate({"team": "payments"}.items()))
        _, fresh, other = _sync(zk())
        other.close()
        assert fresh.info(token.token_id) == held
        # The sweep's and the follower's reads give it back too.
        assert store.get_many_versioned([token.token_id])[token.token_id][0] == held
        assert store.get(token.token_id) == held
    finally:
        sync.close()


def _fields(info: TokenInformation) -> dict[str, object]:
    return {name: getattr(info, name) for name in TokenInformation.__dataclass_fields__}


def test_the_labels_apart_are_deleted_with_the_token_and_an_orphan_by_the_sweep(zk):
    client = zk()
    store = TokenStore(client, beside_kafka=True)
    store.ensure_paths()
    labels = validate({"team": "ops"}.items())
    mine, kafkas, many = (_info(f"side-token-{n:012d}", labels=labels) for n in range(3))
    for info in (mine, kafkas, many):
        store.create(info)
    assert sorted(client.get_children(layout.TOKEN_LABELS)) == sorted(
        i.token_id for i in (mine, kafkas, many))
    store.delete(mine.token_id)
    assert store.delete_many([(many.token_id, -1)]) != []
    assert client.get_children(layout.TOKEN_LABELS) == [kafkas.token_id]
    # A Kafka broker's expiry deletes the token znode only: its side znode is an orphan,
    # which the controller's sweep removes (and nothing else).
    client.delete(layout.token_path(kafkas.token_id))
    assert store.remove_orphan_sides(held=lambda token_id: False) == 1
    assert client.get_children(layout.TOKEN_LABELS) == []
    assert znode_acls.is_sensitive(layout.token_side_path(mine.token_id))


def test_a_cold_load_reads_the_labels_apart_only_for_tokens_that_lost_them(zk, monkeypatch):
    client = zk()
    store = TokenStore(client, beside_kafka=True)
    store.ensure_paths()
    labels = validate({"team": "ops"}.items())
    tokens = [_info(f"cold-token-{n:012d}", labels=labels) for n in range(50)]
    for info in tokens:
        store.create(info)
    kafka = zk()
    kafka.set(layout.token_path(tokens[7].token_id), _kafka_token_bytes(tokens[7]))
    kafka.create(layout.token_path(KAFKA_TOKEN_ID), KAFKA_TOKEN)
    read: list[str] = []
    original = ZnodeReads.get_many

    def counting(self, paths, what, *, with_stat=True):
        read.extend(paths)
        return original(self, paths, what, with_stat=with_stat)

    monkeypatch.setattr(ZnodeReads, "get_many", counting)
    loaded = {info.token_id: info for info in TokenStore(client, beside_kafka=True).load_all()}
    assert loaded[tokens[7].token_id] == tokens[7]
    assert loaded[KAFKA_TOKEN_ID].labels == ()
    sides = sorted(p for p in read if p.startswith(layout.TOKEN_LABELS))
    assert sides == sorted(layout.token_side_path(t) for t in (tokens[7].token_id, KAFKA_TOKEN_ID))


# --- credentials: read-modify-write at the version read -----------------------------------


def test_a_scram_change_keeps_the_quotas_kafka_wrote_in_the_same_znode(zk):
    client = zk()
    kafka = zk()
    store = CredentialStore(client)
    store.ensure_paths()
    # kafka-configs.sh --alter --add-config producer_byte_rate=1024 --entity-type users
    kafka.create(user_path("alice"), b'{"version":1,"config":{"producer_byte_rate":"1024"}}',
                 makepath=True)
    store.upsert("alice", SHA256, CREDENTIAL)
    config = decode_user_config(client.get(user_path("alice"))[0])
    assert config["producer_byte_rate"] == "1024" and "SCRAM-SHA-256" in config
    store.delete("alice", SHA256)
    assert decode_user_config(client.get(user_path("alice"))[0]) == {"producer_byte_rate": "1024"}
    # Each change notified as Kafka notifies it.
    payloads = [client.get(f"{CHANGES_PATH}/{c}")[0] for c in sorted(client.get_children(CHANGES_PATH))]
    assert payloads == [b'{"version":2,"entity_path":"users/alice"}'] * 2


def test_a_quota_written_between_our_read_and_our_write_survives(zk, monkeypatch):
    """The write is setData at the version read: a Kafka write in between makes it fail
    with BadVersion, and the store reads again and writes both."""
    client = zk()
    kafka = zk()
    store = CredentialStore(client)
    store.ensure_paths()
    kafka.create(user_path("bob"), b'{"version":1,"config":{}}', makepath=True)
    reads = store._reads
    original = reads.pipelined
    raced = []

    def read_then_kafka_writes(start, paths, what):
        found = original(start, paths, what)
        if not raced and what == "read users":
            raced.append(True)
            kafka.set(user_path("bob"), b'{"version":1,"config":{"consumer_byte_rate":"2048"}}')
        return found

    monkeypatch.setattr(reads, "pipelined", read_then_kafka_writes)
    store.alter([CredentialChange("bob", SHA256, CREDENTIAL)])
    assert raced
    config = decode_user_config(client.get(user_path("bob"))[0])
    assert config["consumer_byte_rate"] == "2048" and "SCRAM-SHA-256" in config


# --- ACLs: conditional updates --------------------------------------------------------------


def test_an_acl_kafka_adds_between_our_read_and_our_write_survives(zk, monkeypatch):
    client = zk()
    kafka = zk()
    store = AclStore(client)
    store.ensure_paths()
    topic = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
    ours = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    kafkas = AccessControlEntry("User:kafka-acls", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    path = "/kafka-acl/Topic/orders"
    kafka.create(path, encode_acls(set()))
    original = store._read_many
    raced = []

    def read_then_kafka_writes(paths):
        found = original(paths)
        if not raced:
            raced.append(True)
            kafka.set(path, encode_acls({kafkas}))  # AclAuthorizer's conditional set
        return found

    monkeypatch.setattr(store, "_read_many", read_then_kafka_writes)
    store.add([AclBinding(topic, ours)])
    assert raced
    assert decode_acls(client.get(path)[0]) == {ours, kafkas}


# --- notification children: Kafka's prefixes only ----------------------------------------


def test_nothing_of_ours_creates_a_child_kafkas_listeners_cannot_parse(zk):
    client = zk()
    tokens = TokenStore(client, beside_kafka=True)
    tokens.ensure_paths()
    records = RequestRecords(client)
    records.ensure_paths()
    credentials = CredentialStore(client)
    acls = AclStore(client)
    labels = validate({"team": "ops"}.items())
    # Every kind of write: tokens (create with a record, renew, delete, many), users
    # (with the cascade of a deleted user's tokens), ACLs of both pattern types.
    tokens.create(_info("kid-token-00000000001", labels=labels),
                  record=record_op("req-1", 38, "kid-token-00000000001"))
    tokens.update(_info("kid-token-00000000001", labels=labels, expiry_timestamp=4_010_000_000_000))
    tokens.create(_info("kid-token-00000000002"))
    tokens.delete("kid-token-00000000001")
    tokens.delete_many([("kid-token-00000000002", -1)])
    credentials.upsert("alice", SHA256, CREDENTIAL)
    tokens.create(_info("kid-token-00000000003"))
    credentials.alter_with_tokens([CredentialChange("alice", SHA256, None)],
                                  cascade=lambda user: ["kid-token-00000000003"])
    entry = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
        binding = AclBinding(ResourcePattern(ResourceType.TOPIC, "t", pattern_type), entry)
        acls.add([binding])
        acls.remove([AclBindingFilter.of(name="t")])
    # The purges: by count and by age, with their purge mark (data of the root, not a child).
    for root_path, prefix in NOTIFICATION_ROOTS.items():
        root = notifications.NotificationRoot(root_path, root_path, prefix)
        purger = ChangeNotifications(client, "purger", [root], load=lambda: 0,
                                     apply=lambda r, n: None,
                                     purge=Purge(lambda: False, lambda: 0, max_pending=1,
                                                 count_min_age_ms=None))
        purger.purge(now_ms=0)
    seen = 0
    for root_path, prefix in NOTIFICATION_ROOTS.items():
        for child in client.get_children(root_path):
            seen += 1
            assert re.fullmatch(re.escape(prefix) + r"[0-9]{10}", child), (root_path, child)
    assert seen >= 4


# --- purging only when Kafka would -------------------------------------------------------


def test_a_kafka_purge_keeps_young_notifications_whatever_their_number(zk):
    client = zk()
    store = TokenStore(client)
    store.ensure_paths()
    for n in range(12):
        store.create(_info(f"young-token-{n:010d}"))
    names = sorted(client.get_children(layout.TOKEN_CHANGES))
    ctimes = [client.exists(f"{layout.TOKEN_CHANGES}/{c}").ctime for c in names]
    rules = Purge(lambda: True, lambda: 0, max_pending=5, count_min_age_ms=None).kafka_only()
    purger = ChangeNotifications(client, "purger", [TOKENS_ROOT], load=lambda: 0,
                                 apply=lambda r, n: None, purge=rules)
    # By ZooKeeper's time: exactly 15 minutes after the newest is not older than 15 minutes
    # (Kafka: now - ctime > 15 min), so only those created before that go.
    fifteen = 15 * 60 * 1000
    assert purger.purge(now_ms=min(ctimes) + fifteen) == 0
    assert purger.purge(now_ms=max(ctimes) + fifteen) == sum(c < max(ctimes) for c in ctimes)
    assert purger.purge(now_ms=max(ctimes) + fifteen + 1) >= 1
    assert client.get_children(layout.TOKEN_CHANGES) == []


def test_a_notification_a_kafka_broker_purged_first_is_no_error(zk, monkeypatch):
    client = zk()
    kafka = zk()
    store = TokenStore(client)
    store.ensure_paths()
    for n in range(3):
        store.create(_info(f"raced-token-{n:010d}"))
    purger = ChangeNotifications(client, "purger", [TOKENS_ROOT], load=lambda: 0,
                                 apply=lambda r, n: None,
                                 purge=Purge(lambda: True, lambda: 0).kafka_only())
    original = notifications.created_before

    def kafka_purges_first(*args, **kw):
        old, young = original(*args, **kw)
        kafka.delete(old[0])  # a Kafka broker's purge got there between our stat and delete
        return old, young

    monkeypatch.setattr(notifications, "created_before", kafka_purges_first)
    assert purger.purge(now_ms=10**15) == 2
    assert client.get_children(layout.TOKEN_CHANGES) == []
    assert delete_all(client, [f"{layout.TOKEN_CHANGES}/gone"], "delete") == 0
