"""The request keys of the exactly-once create in a real ZooKeeper (zk.token_store): recorded in
the token's own transaction, refused as a whole when repeated, purged after 15 minutes."""

from __future__ import annotations

import pytest

from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from zk import layout
from zk.client import ZkSettings, open_client
from zk.token_store import (
    REQUESTS,
    NotControllerError,
    RequestKeyExistsError,
    TokenExistsError,
    TokenStore,
    request_key_path,
)


def _info(token_id: str) -> TokenInformation:
    return TokenInformation(
        token_id=token_id,
        owner=KafkaPrincipal.user("alice"),
        token_requester=KafkaPrincipal.user("alice"),
        renewers=(),
        issue_timestamp=1_700_000_000_000,
        expiry_timestamp=1_700_086_400_000,
        max_timestamp=1_700_604_800_000,
        key_id="",
    )


@pytest.fixture
def client(zk_connect):
    c = open_client(ZkSettings(zk_connect, session_timeout_ms=4000))
    yield c
    c.stop()
    c.close()


@pytest.fixture
def store(client) -> TokenStore:
    s = TokenStore(client)
    s.ensure_paths()
    return s


def test_create_with_a_request_key_records_the_token_id(client, store):
    store.create(_info("t1"), request_key="k1")
    assert store.request_token_id("k1") == "t1"
    assert client.get(f"{REQUESTS}/k1")[0] == b"t1"
    assert store.request_token_id("never-seen") is None


def test_create_with_a_recorded_request_key_writes_nothing(client, store):
    store.create(_info("t1"), request_key="k1")
    changes = len(client.get_children(layout.TOKEN_CHANGES))
    with pytest.raises(RequestKeyExistsError) as refused:
        store.create(_info("t2"), request_key="k1")
    assert refused.value.token_id == "t1"
    assert store.get("t2") is None
    assert store.token_ids() == ["t1"]
    assert len(client.get_children(layout.TOKEN_CHANGES)) == changes


def test_a_taken_token_id_is_still_token_exists_and_records_no_key(store):
    store.create(_info("t1"))
    with pytest.raises(TokenExistsError) as refused:
        store.create(_info("t1"), request_key="k2")
    assert not isinstance(refused.value, RequestKeyExistsError)
    assert store.request_token_id("k2") is None


def test_a_failed_guard_records_no_request_key(client, store):
    client.create(layout.CONTROLLER_EPOCH, b"0")
    stale_guard = (layout.CONTROLLER_EPOCH, 99)
    with pytest.raises(NotControllerError):
        store.create(_info("t1"), guard=stale_guard, request_key="k1")
    assert store.request_token_id("k1") is None
    assert store.get("t1") is None


@pytest.mark.parametrize("key", ["", "a/b", "..", "x" * 65, "sp ace"])
def test_request_keys_that_are_not_one_short_znode_name_are_refused(key):
    with pytest.raises(ValueError):
        request_key_path(key)


def test_purge_removes_request_keys_older_than_the_retention_with_the_notifications(
    client, store
):
    store.create(_info("t1"), request_key="k1")
    store.create(_info("t2"), request_key="k2")
    ctime = client.exists(f"{REQUESTS}/k2").ctime
    assert store.purge_request_keys(ctime) == 0
    assert store.purge_notifications(ctime + 16 * 60 * 1000) == 2
    assert client.get_children(REQUESTS) == []
    assert store.request_token_id("k1") is None
    assert sorted(store.token_ids()) == ["t1", "t2"]


def test_purge_keeps_request_keys_younger_than_the_retention(client, store):
    store.create(_info("t1"), request_key="k1")
    ctime = client.exists(f"{REQUESTS}/k1").ctime
    assert store.purge_request_keys(ctime + 14 * 60 * 1000) == 0
    assert store.request_token_id("k1") == "t1"
