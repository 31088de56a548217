"""What tokensvc shares with Kafka, it writes as Kafka 3.9 does: byte for byte against
samples a Kafka broker's own encoders wrote, and every sample read back.

The samples are the output of Kafka 3.9.1's encoders (``kafka_2.13:3.9.1``) for the values
below: ``DelegationTokenInfoZNode.encode``, ``DelegationTokenChangeNotificationSequenceZNode
.encode``, ``ConfigEntityZNode.encode``, ``ConfigEntityChangeNotificationSequenceZNode.encode``,
``ResourceZNode.encode`` and the ``createChangeNode`` of ``LiteralAclChangeStore`` and
``ExtendedAclChangeStore``. Kafka builds the token's JSON from a Scala hash map and the
ACLs' from Java hash maps, so the key order is theirs, not the order of Kafka's source.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from tokensvc.authz.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from tokensvc.core.labels import validate
from tokensvc.core.principal import KafkaPrincipal
from tokensvc.core.token import TokenInformation
from zk import acl_store, credential_store, layout
from zk.layout import LayoutError

KAFKA_TOKEN = (
    b'{"issueTimestamp":1700000000000,"renewers":["User%3Abob","User%3Acarol%20smith"],'
    b'"tokenRequester":"User%3Aadmin","tokenId":"Zl0YT9kvSLaHtdxp5pMVbA",'
    b'"owner":"User%3Aalice","expiryTimestamp":1700086400000,"maxTimestamp":1700604800000,'
    b'"version":3}'
)
KAFKA_TOKEN_NO_RENEWERS = (
    b'{"issueTimestamp":1700000000000,"renewers":[],"tokenRequester":"User%3Aalice",'
    b'"tokenId":"AAAAAAAAAAAAAAAAAAAAAA","owner":"User%3Aalice",'
    b'"expiryTimestamp":1700086400000,"maxTimestamp":1700604800000,"version":3}'
)
KAFKA_TOKEN_CHANGE = b"Zl0YT9kvSLaHtdxp5pMVbA"
KAFKA_SCRAM = "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096"
KAFKA_USER_CONFIG = (
    b'{"version":1,"config":{"SCRAM-SHA-256":"' + KAFKA_SCRAM.encode()
    + b'","producer_byte_rate":"1024"}}'
)
KAFKA_CONFIG_CHANGE = b'{"version":2,"entity_path":"users/alice"}'
KAFKA_ACLS = (
    b'{"acls":[{"principal":"User:alice","permissionType":"Allow","host":"*",'
    b'"operation":"Read"}],"version":1}'
)
KAFKA_LITERAL_ACL_CHANGE = ("/kafka-acl-changes/acl_changes_", b"TOPIC:orders")
KAFKA_EXTENDED_ACL_CHANGE = (
    "/kafka-acl-extended-changes/acl_changes_",
    b'{"version":1,"resourceType":"TRANSACTIONAL_ID","name":"pay.","patternType":"PREFIXED"}',
)


def _token(**overrides: object) -> TokenInformation:
    fields: dict[str, object] = {
        "token_id": "Zl0YT9kvSLaHtdxp5pMVbA",
        "owner": KafkaPrincipal("User", "alice"),
        "token_requester": KafkaPrincipal("User", "admin"),
        "renewers": (KafkaPrincipal("User", "bob"), KafkaPrincipal("User", "carol smith")),
        "issue_timestamp": 1_700_000_000_000,
        "expiry_timestamp": 1_700_086_400_000,
        "max_timestamp": 1_700_604_800_000,
    }
    return TokenInformation(**{**fields, **overrides})


def test_a_token_without_key_id_or_labels_is_kafkas_bytes():
    assert layout.encode_token(_token()) == KAFKA_TOKEN
    alone = _token(token_id="AAAAAAAAAAAAAAAAAAAAAA", token_requester=KafkaPrincipal("User", "alice"),
                   renewers=())
    assert layout.encode_token(alone) == KAFKA_TOKEN_NO_RENEWERS


def test_our_two_fields_come_after_kafkas_bytes():
    labels = validate({"team": "payments", "job": "etl"}.items())
    data = layout.encode_token(_token(key_id="3f2a9c1d0b7e4a55", labels=labels))
    assert data == (KAFKA_TOKEN[:-1]
                    + b',"keyId":"3f2a9c1d0b7e4a55","labels":{"job":"etl","team":"payments"}}')


def test_a_kafka_written_token_decodes_with_its_seven_fields_and_nothing_of_ours():
    info = layout.decode_token(KAFKA_TOKEN)
    assert info == _token()
    assert (info.key_id, info.labels) == ("", ())
    tokens, failed = layout.decode_tokens([("Zl0YT9kvSLaHtdxp5pMVbA", KAFKA_TOKEN),
                                           ("AAAAAAAAAAAAAAAAAAAAAA", KAFKA_TOKEN_NO_RENEWERS)])
    assert failed == []
    assert [t.token_id for t in tokens] == ["Zl0YT9kvSLaHtdxp5pMVbA", "AAAAAAAAAAAAAAAAAAAAAA"]


def test_token_change_notification_is_kafkas():
    assert layout.encode_token_change("Zl0YT9kvSLaHtdxp5pMVbA") == KAFKA_TOKEN_CHANGE
    assert layout.token_change_create_path() == "/delegation_token/token_changes/token_change_"
    assert layout.decode_token_change(KAFKA_TOKEN_CHANGE) == "Zl0YT9kvSLaHtdxp5pMVbA"


def test_user_config_and_its_change_notification_are_kafkas():
    config = {"SCRAM-SHA-256": KAFKA_SCRAM, "producer_byte_rate": "1024"}
    assert credential_store.encode_user_config(config) == KAFKA_USER_CONFIG
    assert credential_store.decode_user_config(KAFKA_USER_CONFIG) == config
    assert credential_store.encode_change("alice") == KAFKA_CONFIG_CHANGE
    assert credential_store.decode_change_user(KAFKA_CONFIG_CHANGE) == "alice"
    assert f"{credential_store.CHANGES_PATH}/{credential_store.CHANGE_PREFIX}" == (
        "/config/changes/config_change_")


def test_a_user_with_only_quotas_has_no_scram_credential():
    assert credential_store.has_scram({"SCRAM-SHA-512": KAFKA_SCRAM})
    assert not credential_store.has_scram({"producer_byte_rate": "1024"})
    assert credential_store.credentials_from_config({"producer_byte_rate": "1024"}) == {}


def test_acl_znode_and_its_change_notifications_are_kafkas():
    entry = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
    assert acl_store.encode_acls({entry}) == KAFKA_ACLS
    assert acl_store.decode_acls(KAFKA_ACLS) == {entry}
    literal = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
    prefixed = ResourcePattern(ResourceType.TRANSACTIONAL_ID, "pay.", PatternType.PREFIXED)
    for pattern, (create_path, payload) in ((literal, KAFKA_LITERAL_ACL_CHANGE),
                                            (prefixed, KAFKA_EXTENDED_ACL_CHANGE)):
        root = acl_store.ACL_ROOTS[pattern.pattern_type]
        assert root.create_path() == create_path
        assert acl_store.encode_change(pattern) == payload
        assert acl_store.decode_change(payload, pattern.pattern_type) == pattern


def test_the_side_znode_keeps_key_id_and_labels_and_restores_them():
    labels = validate({"team": "payments"}.items())
    info = _token(key_id="3f2a9c1d0b7e4a55", labels=labels)
    side = layout.encode_token_side(info)
    assert json.loads(side) == {"version": 1, "keyId": "3f2a9c1d0b7e4a55",
                                "labels": {"team": "payments"}}
    renewed = dataclasses.replace(layout.decode_token(KAFKA_TOKEN), expiry_timestamp=1_700_090_000_000)
    restored = layout.restore_side_fields(renewed, side)
    assert (restored.key_id, restored.labels) == ("3f2a9c1d0b7e4a55", labels)
    assert restored.expiry_timestamp == 1_700_090_000_000
    # Nothing to restore: a token that kept its fields, or no side znode.
    assert layout.restore_side_fields(info, side) is info
    assert layout.restore_side_fields(renewed, None) is renewed
    assert layout.token_side_path(info.token_id) == "/tokensvc/token_labels/Zl0YT9kvSLaHtdxp5pMVbA"


@pytest.mark.parametrize("data", [b"{}", b'{"version":2,"keyId":"","labels":{}}',
                                  b'{"version":1,"keyId":3,"labels":{}}',
                                  b'{"version":1,"keyId":"k","labels":[]}', b"nope"])
def test_a_side_znode_that_does_not_decode_is_a_layout_error(data):
    with pytest.raises(LayoutError):
        layout.decode_token_side(data)
