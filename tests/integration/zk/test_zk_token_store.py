"""TokenStore against a real ZooKeeper: Kafka's znodes byte for byte, one transaction per
write with its notification, guards, pipelined loads, purge, and no HMAC anywhere."""

from __future__ import annotations

import base64
import time

import pytest

from tests.support.zkclient import client_factory
from tokensvc.core.keys import MasterKeys, token_hmac
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from zk import layout
from zk.client import ZkSettings, open_client
from zk.errors import NotControllerError, StoreUnavailable
from zk.requests import RequestKeyExistsError, record_op
from zk.server import ManagedZooKeeper
from zk.token_store import (
    TokenExistsError,
    TokenNotFoundError,
    TokenStore,
    create_write,
    delete_write,
    update_write,
)

MASTER_KEY = "store-test-master-key"
ALICE = KafkaPrincipal.user("alice")


def _info(token_id: str, **overrides: object) -> TokenInformation:
    fields: dict[str, object] = {
        "token_id": token_id,
        "owner": ALICE,
        "token_requester": KafkaPrincipal.user("admin"),
        "renewers": (KafkaPrincipal.user("bob"),),
        "issue_timestamp": 1_700_000_000_000,
        "expiry_timestamp": 1_700_086_400_000,
        "max_timestamp": 1_700_604_800_000,
        "key_id": MasterKeys(MASTER_KEY).current_id,
    }
    return TokenInformation(**{**fields, **overrides})


@pytest.fixture
def client(zk_connect):
    with client_factory(zk_connect) as make:
        yield make()


@pytest.fixture
def store(client) -> TokenStore:
    s = TokenStore(client)
    s.ensure_paths()
    return s


def _changes(client) -> list[tuple[str, bytes]]:
    names = sorted(client.get_children(layout.TOKEN_CHANGES))
    return [(n, client.get(f"{layout.TOKEN_CHANGES}/{n}")[0]) for n in names]


def test_created_token_znode_is_kafkas_json_byte_for_byte(client, store):
    store.create(_info("Zl0YT9kvSLaHtdxp5pMVbA"))
    data, _ = client.get("/delegation_token/tokens/Zl0YT9kvSLaHtdxp5pMVbA")
    key_id = MasterKeys(MASTER_KEY).current_id
    assert data == (
        b'{"issueTimestamp":1700000000000,"renewers":["User%3Abob"],'
        b'"tokenRequester":"User%3Aadmin","tokenId":"Zl0YT9kvSLaHtdxp5pMVbA",'
        b'"owner":"User%3Aalice","expiryTimestamp":1700086400000,'
        b'"maxTimestamp":1700604800000,"version":3,"keyId":"' + key_id.encode() + b'"}'
    )


def test_create_writes_exactly_one_notification_with_the_token_id(client, store):
    store.create(_info("t1"))
    changes = _changes(client)
    assert len(changes) == 1
    name, payload = changes[0]
    assert layout.token_change_sequence(name) is not None
    assert len(name) == len("token_change_") + 10
    assert payload == b"t1"


def test_every_write_adds_one_notification_in_order(client, store):
    created = store.create(_info("t1"))
    updated = store.update(_info("t1", expiry_timestamp=1_700_100_000_000))
    deleted = store.delete("t1")
    assert [p for _, p in _changes(client)] == [b"t1", b"t1", b"t1"]
    # Each write returns the sequence number of the notification it committed.
    assert [layout.token_change_name(s) for s in (created, updated, deleted)] == [
        n for n, _ in _changes(client)
    ]


def test_notifications_after_a_sequence_lists_only_newer_ones_in_order(client, store):
    for i in range(12):
        store.create(_info(f"t{i}"))
    client.create("/delegation_token/token_changes/not_a_change", b"")
    names = store.notifications()
    assert len(names) == 12 and names == sorted(names)
    sequences = [layout.token_change_sequence(n) for n in names]
    assert store.notifications_after(-1) == names
    assert store.notifications_after(sequences[4]) == names[5:]
    assert store.notifications_after(sequences[-1]) == []
    assert store.notifications_after(sequences[4] + 1) == names[6:]


def test_create_of_existing_token_fails_and_writes_no_notification(client, store):
    store.create(_info("t1"))
    with pytest.raises(TokenExistsError):
        store.create(_info("t1"))
    assert len(_changes(client)) == 1


def test_update_of_missing_token_is_not_found_and_writes_nothing(client, store):
    with pytest.raises(TokenNotFoundError) as caught:
        store.update(_info("missing"))
    assert caught.value.error.name == "DELEGATION_TOKEN_NOT_FOUND"
    assert _changes(client) == []
    assert client.exists(layout.token_path("missing")) is None


def test_delete_of_missing_token_returns_false_without_notification(client, store):
    assert store.delete("missing") is None
    assert _changes(client) == []


def test_get_returns_what_was_written_and_none_after_delete(store):
    info = _info("t1")
    store.create(info)
    assert store.get("t1") == info
    renewed = info.with_expiry(1_700_200_000_000)
    store.update(renewed)
    assert store.get("t1") == renewed
    store.delete("t1")
    assert store.get("t1") is None


def test_conditional_delete_leaves_a_token_rewritten_since_it_was_read(store):
    store.create(_info("t1"))
    _, version = store.get_versioned("t1")
    store.update(_info("t1", expiry_timestamp=1_700_200_000_000))
    assert store.delete("t1", version=version) is None
    assert store.get("t1") is not None


def test_delete_many_groups_tokens_and_retries_a_group_with_a_changed_token_one_by_one(
    client, store
):
    for i in range(250):  # three groups of up to 100
        client.create(layout.token_path(f"d{i:03d}"), layout.encode_token(_info(f"d{i:03d}")))
    client.create("/guard", b"0")
    versions = [(f"d{i:03d}", store.get_versioned(f"d{i:03d}")[1]) for i in range(250)]
    store.update(_info("d150", expiry_timestamp=1_700_200_000_000))  # renewed meanwhile
    client.delete(layout.token_path("d160"))  # deleted meanwhile
    before = len(_changes(client))
    deleted = dict(store.delete_many(versions, guard=("/guard", 0)))
    assert sorted(deleted) == [f"d{i:03d}" for i in range(250) if i not in (150, 160)]
    assert client.get_children(layout.TOKENS) == ["d150"]
    changes = _changes(client)[before:]
    assert sorted(data.decode() for _, data in changes) == sorted(deleted)
    # Each deletion's sequence is that of its own notification (the grouped ones and
    # the ones retried alone alike).
    assert {data.decode(): int(name[-10:]) for name, data in changes} == deleted


def test_delete_many_with_a_stale_guard_is_not_controller_and_deletes_nothing(client, store):
    for i in range(3):
        store.create(_info(f"g{i}"))
    client.create("/guard", b"0")
    client.set("/guard", b"1")
    before = _changes(client)
    with pytest.raises(NotControllerError):
        store.delete_many([(f"g{i}", 0) for i in range(3)], guard=("/guard", 0))
    assert sorted(client.get_children(layout.TOKENS)) == ["g0", "g1", "g2"]
    assert _changes(client) == before


def test_write_with_stale_guard_fails_as_not_controller_and_changes_nothing(client, store):
    client.create("/guard", b"0")
    client.set("/guard", b"1")  # version 1: a newer controller moved it on
    with pytest.raises(NotControllerError) as caught:
        store.create(_info("t1"), guard=("/guard", 0))
    assert caught.value.error.name == "NOT_CONTROLLER"
    assert client.exists(layout.token_path("t1")) is None
    assert _changes(client) == []
    store.create(_info("t1"), guard=("/guard", 1))
    assert store.get("t1") is not None


def test_guard_on_missing_path_fails_as_not_controller(store):
    with pytest.raises(NotControllerError):
        store.delete("t1", guard=("/no-such-guard", 0))


def test_no_znode_ever_contains_the_hmac(client, store):
    ids = [f"token-{i}" for i in range(5)]
    for token_id in ids:
        store.create(_info(token_id))
    store.update(_info(ids[0], expiry_timestamp=1_700_300_000_000))
    store.delete(ids[1])
    secrets = set()
    for token_id in ids:
        mac = token_hmac(MASTER_KEY, token_id)
        secrets |= {
            mac,
            base64.b64encode(mac),
            base64.urlsafe_b64encode(mac),
            mac.hex().encode(),
        }
    secrets.add(MASTER_KEY.encode())

    def walk(path: str) -> list[bytes]:
        data, _ = client.get(path)
        out = [data or b""]
        for child in client.get_children(path):
            out += walk(f"{path.rstrip('/')}/{child}")
        return out

    everything = walk("/")
    assert len(everything) > 8
    for data in everything:
        for secret in secrets:
            assert secret not in data


def test_load_all_reads_2000_tokens_in_one_pipelined_call(client, store):
    infos = [_info(f"tok-{i:05d}", expiry_timestamp=1_700_000_000_000 + i) for i in range(2000)]
    pending = []
    for info in infos:  # seed fast, pipelined, without notifications
        pending.append(
            client.create_async(layout.token_path(info.token_id), layout.encode_token(info))
        )
    for p in pending:
        p.get()
    started = time.perf_counter()
    loaded = store.load_all()
    elapsed_ms = (time.perf_counter() - started) * 1000
    print(f"load_all of 2000 tokens: {elapsed_ms:.0f} ms")
    assert sorted(loaded, key=lambda i: i.token_id) == infos


def test_load_all_skips_an_undecodable_token_znode(client, store):
    store.create(_info("good"))
    client.create(layout.token_path("bad"), b"{garbage")
    assert [i.token_id for i in store.load_all()] == ["good"]


def test_operations_on_a_stopped_client_raise_store_unavailable(zk_connect):
    c = open_client(ZkSettings(zk_connect, session_timeout_ms=4000))
    s = TokenStore(c)
    s.ensure_paths()
    c.stop()
    try:
        with pytest.raises(StoreUnavailable) as caught:
            s.load_all()
        assert caught.value.error.retriable
    finally:
        c.close()


def test_multi_read_and_pipelined_reads_agree_including_missing_tokens(client, store):
    for i in range(5):
        store.create(_info(f"t{i}"))
    store.delete("t2")
    ids = [f"t{i}" for i in range(5)] + ["never"]
    batched = store.get_many(ids)
    pipelined = TokenStore(client, multi_read=False).get_many(ids)
    assert batched == pipelined
    assert batched["t2"] is None and batched["never"] is None
    assert batched["t4"] == _info("t4")
    assert sorted(TokenStore(client, multi_read=False).load_all(), key=str) == sorted(
        store.load_all(), key=str
    )


def test_an_unresponsive_zookeeper_is_store_unavailable_after_the_timeout(tmp_path):
    server = ManagedZooKeeper(tmp_path / "zk")
    server.start()
    c = open_client(ZkSettings(f"{server.connect}/paused", session_timeout_ms=4000))
    try:
        s = TokenStore(c, request_timeout_s=0.5)
        s.ensure_paths()
        server.pause()  # alive but silent, as without a quorum
        with pytest.raises(StoreUnavailable) as caught:
            s.create(_info("t1"))
        assert caught.value.error.name == "REQUEST_TIMED_OUT"
        server.resume()
        assert eventually_connected(c)
        assert s.get("t1") in (None, _info("t1"))  # the queued write may land later
    finally:
        server.resume()
        c.stop()
        c.close()
        server.stop()


def eventually_connected(c, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not c.connected:
        time.sleep(0.02)
    return c.connected


# --- group commit: many writes, one transaction, each with its own outcome ---------------


def test_a_batch_commits_in_one_transaction_with_one_notification_per_write(client, store):
    client.create("/guard", b"0")
    writes = [create_write(_info(f"b{i}"), record_op(f"key{i}", 38, {"token_id": f"b{i}"}))
              for i in range(20)]
    zxid_before = client.exists(layout.TOKENS).pzxid
    outcomes = store.commit_many(writes, guard=("/guard", 0))
    assert outcomes == sorted(outcomes) and len(set(outcomes)) == 20
    assert [token_id for _, token_id in _changes(client)] == [f"b{i}".encode() for i in range(20)]
    # One transaction: every token znode has the same creation zxid.
    zxids = {client.exists(layout.token_path(f"b{i}")).czxid for i in range(20)}
    assert len(zxids) == 1 and zxids.pop() > zxid_before
    assert client.exists("/delegation_token/requests/key7") is not None
    names = [n for n, _ in _changes(client)]
    assert [int(n[-10:]) for n in names] == outcomes


def test_one_failing_write_in_a_batch_fails_alone_and_the_others_commit(client, store):
    store.create(_info("taken"))
    store.create(_info("renewed"))
    client.create("/delegation_token/requests/used", b"{}")
    writes = [
        create_write(_info("n1"), record_op("k1", 38, {})),
        create_write(_info("taken"), record_op("k2", 38, {})),       # token exists
        update_write(_info("renewed", expiry_timestamp=5), record_op("k3", 39, {})),
        create_write(_info("n4"), record_op("used", 38, {})),        # key recorded
        update_write(_info("missing"), record_op("k5", 39, {})),     # no such token
        delete_write("also-missing", record_op("k6", 40, {})),       # nothing to delete
        create_write(_info("n7"), record_op("k7", 38, {})),
    ]
    before = len(_changes(client))
    outcomes = store.commit_many(writes)
    assert isinstance(outcomes[1], TokenExistsError)
    assert isinstance(outcomes[3], RequestKeyExistsError)
    assert isinstance(outcomes[4], TokenNotFoundError)
    assert outcomes[5] is None
    committed = [outcomes[i] for i in (0, 2, 6)]
    assert all(isinstance(s, int) for s in committed) and committed == sorted(committed)
    # The failed writes left nothing: no token, no record, no notification.
    assert store.get("n4") is None and store.get("missing") is None
    for key in ("k2", "k4", "k5", "k6"):
        assert client.exists(f"/delegation_token/requests/{key}") is None
    assert client.get("/delegation_token/requests/used")[0] == b"{}"
    assert len(_changes(client)) == before + 3
    assert store.get("n1") is not None and store.get("n7") is not None
    assert store.get("renewed").expiry_timestamp == 5


def test_a_failed_guard_fails_the_whole_batch_as_not_controller(client, store):
    client.create("/guard", b"0")
    client.set("/guard", b"1")
    outcomes = store.commit_many([create_write(_info(f"g{i}")) for i in range(3)],
                                 guard=("/guard", 0))
    assert all(isinstance(o, NotControllerError) for o in outcomes)
    assert _changes(client) == [] and store.token_ids() == []
