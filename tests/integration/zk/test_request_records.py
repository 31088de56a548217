"""Request records of the exactly-once writes in a real ZooKeeper (zk.requests): written in
the change's own transaction for tokens, credentials and ACLs, refused as a whole when
repeated, purged by age; and the notification versions every write returns."""

from __future__ import annotations

import pytest

from tokensvc.authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from tokensvc.scram.changes import CredentialChange
from tokensvc.scram.formatter import ScramMechanism, derive_credential
from zk import layout
from zk.acl_store import LITERAL_CHANGES, AclStore
from zk.client import ZkSettings, open_client
from zk.credential_store import CHANGES_PATH, CredentialStore
from zk.errors import NotControllerError
from zk.requests import (
    REQUESTS,
    RequestKeyExistsError,
    RequestRecords,
    record_op,
    request_key_path,
)
from zk.token_store import TokenExistsError, TokenStore


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


@pytest.fixture
def records(client) -> RequestRecords:
    r = RequestRecords(client)
    r.ensure_paths()
    return r


def test_a_create_records_its_key_and_returns_its_notification_sequence(client, store, records):
    sequence = store.create(_info("t1"), record=record_op("k1", 38, {"token_id": "t1"}))
    assert records.get("k1").outcome == {"token_id": "t1"}
    assert records.get("k1").api == 38
    assert layout.token_change_name(sequence) in client.get_children(layout.TOKEN_CHANGES)
    assert records.get("never-seen") is None


def test_a_recorded_key_fails_the_whole_transaction(client, store, records):
    store.create(_info("t1"), record=record_op("k1", 38, {"token_id": "t1"}))
    changes = len(client.get_children(layout.TOKEN_CHANGES))
    with pytest.raises(RequestKeyExistsError):
        store.create(_info("t2"), record=record_op("k1", 38, {"token_id": "t2"}))
    with pytest.raises(RequestKeyExistsError):
        store.update(_info("t1"), record=record_op("k1", 39, {"ExpiryTimestampMs": 1}))
    assert store.get("t2") is None
    assert store.token_ids() == ["t1"]
    assert len(client.get_children(layout.TOKEN_CHANGES)) == changes
    assert records.get("k1").outcome == {"token_id": "t1"}


def test_update_and_delete_record_their_outcome_and_return_growing_sequences(store, records):
    created = store.create(_info("t1"))
    renewed = store.update(_info("t1"), record=record_op("r1", 39, {"ExpiryTimestampMs": 5}))
    deleted = store.delete("t1", record=record_op("e1", 40, {"ExpiryTimestampMs": 6}))
    assert created < renewed < deleted
    assert records.get("r1").outcome == {"ExpiryTimestampMs": 5}
    assert records.get("e1").api == 40


def test_a_taken_token_id_is_still_token_exists_and_records_no_key(store, records):
    store.create(_info("t1"))
    with pytest.raises(TokenExistsError) as refused:
        store.create(_info("t1"), record=record_op("k2", 38, {"token_id": "t1"}))
    assert not isinstance(refused.value, RequestKeyExistsError)
    assert records.get("k2") is None


def test_a_failed_guard_records_no_request_key(client, store, records):
    client.create(layout.CONTROLLER_EPOCH, b"0")
    stale_guard = (layout.CONTROLLER_EPOCH, 99)
    with pytest.raises(NotControllerError):
        store.create(_info("t1"), guard=stale_guard, record=record_op("k1", 38, {"token_id": "t1"}))
    assert records.get("k1") is None
    assert store.get("t1") is None


def test_a_credential_alter_is_one_transaction_with_its_record(client, records):
    creds = CredentialStore(client)
    creds.ensure_paths()
    cred = derive_credential("pw", ScramMechanism.SCRAM_SHA_256, 4096)
    before = len(client.get_children(CHANGES_PATH))
    effects, sequences = creds.alter(
        [CredentialChange("u1", ScramMechanism.SCRAM_SHA_256, cred),
         CredentialChange("u2", ScramMechanism.SCRAM_SHA_256, None)],
        record=lambda eff: record_op("c1", 51, {"effects": eff}),
    )
    assert effects == {"u1": True, "u2": False}
    assert len(sequences) == 1  # u2 had nothing to delete: no notification
    assert len(client.get_children(CHANGES_PATH)) == before + 1
    assert records.get("c1").outcome == {"effects": {"u1": True, "u2": False}}
    with pytest.raises(RequestKeyExistsError):
        creds.alter([CredentialChange("u3", ScramMechanism.SCRAM_SHA_256, cred)],
                    record=lambda eff: record_op("c1", 51, {}))
    assert creds.get("u3") == {}


def test_an_acl_create_is_one_transaction_with_its_record(client, records):
    acls = AclStore(client)
    acls.ensure_paths()
    entry = AccessControlEntry("User:bob", "*", AclOperation.READ, AclPermissionType.ALLOW)
    bindings = [AclBinding(ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL), entry)
                for name in ("a", "b")]
    before = len(client.get_children(LITERAL_CHANGES))
    results, versions = acls.add(bindings, record=lambda rs: record_op("a1", 30, len(rs)))
    assert [r.error for r in results] == [0, 0]
    assert [root for root, _ in versions] == ["acls", "acls"]
    assert len(client.get_children(LITERAL_CHANGES)) == before + 2
    assert records.get("a1").outcome == 2
    with pytest.raises(RequestKeyExistsError):
        acls.add([AclBinding(ResourcePattern(ResourceType.TOPIC, "c", PatternType.LITERAL), entry)],
                 record=lambda rs: record_op("a1", 30, 0))
    assert acls.load_resource(ResourcePattern(ResourceType.TOPIC, "c", PatternType.LITERAL)) == set()


@pytest.mark.parametrize("key", ["", "a/b", "..", "x" * 65, "sp ace"])
def test_request_keys_that_are_not_one_short_znode_name_are_refused(key):
    with pytest.raises(ValueError):
        request_key_path(key)


def test_purge_removes_records_older_than_the_retention_and_keeps_younger(client, store, records):
    store.create(_info("t1"), record=record_op("k1", 38, {"token_id": "t1"}))
    store.create(_info("t2"), record=record_op("k2", 38, {"token_id": "t2"}))
    ctime = client.exists(f"{REQUESTS}/k2").ctime
    assert records.purge(ctime + 14 * 60 * 1000) == 0
    assert records.purge(ctime + 16 * 60 * 1000) == 2
    assert client.get_children(REQUESTS) == []
    assert sorted(store.token_ids()) == ["t1", "t2"]
