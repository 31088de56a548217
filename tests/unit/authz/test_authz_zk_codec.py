"""The ACL znode layout and bytes, exactly as Kafka (ZooKeeper mode) writes them.

Pure: these call zk.acl_store's codec functions only and never connect.
"""

from __future__ import annotations

import pytest

from tokensvc.authz.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from zk.acl_store import (
    AclDataError,
    change_sequence,
    decode_acls,
    decode_change,
    encode_acls,
    encode_change,
    resource_path,
)

LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def test_resource_paths_use_kafkas_type_names():
    assert resource_path(ResourcePattern(ResourceType.TOPIC, "t1", LIT)) == "/kafka-acl/Topic/t1"
    assert resource_path(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", PRE)) == (
        "/kafka-acl-extended/prefixed/TransactionalId/tx"
    )
    assert resource_path(ResourcePattern(ResourceType.USER, "User:bob", LIT)) == (
        "/kafka-acl/User/User:bob"
    )
    assert resource_path(ResourcePattern(ResourceType.DELEGATION_TOKEN, "*", LIT)) == (
        "/kafka-acl/DelegationToken/*"
    )


@pytest.mark.parametrize("name", ["a/b", ".", "..", ""])
def test_names_that_cannot_be_znodes_are_refused(name):
    with pytest.raises(ValueError):
        resource_path(ResourcePattern(ResourceType.TOPIC, name, LIT))


def test_acl_json_is_kafkas_compact_form():
    entries = {
        AccessControlEntry("User:bob", "10.0.0.1", AclOperation.DESCRIBE_CONFIGS,
                           AclPermissionType.DENY),
        AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
    }
    assert encode_acls(entries) == (
        b'{"acls":['
        b'{"principal":"User:alice","permissionType":"Allow","host":"*","operation":"Read"},'
        b'{"principal":"User:bob","permissionType":"Deny","host":"10.0.0.1",'
        b'"operation":"DescribeConfigs"}],"version":1}'
    )
    assert decode_acls(encode_acls(entries)) == entries


def test_acl_json_written_by_kafka_decodes():
    data = (
        b'{"version":1,"acls":[{"host":"host1","permissionType":"Deny",'
        b'"operation":"Read","principal":"User:alice"},{"host":"*","permissionType":"Allow",'
        b'"operation":"IdempotentWrite","principal":"User:*"}]}'
    )
    assert decode_acls(data) == {
        AccessControlEntry("User:alice", "host1", AclOperation.READ, AclPermissionType.DENY),
        AccessControlEntry("User:*", "*", AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW),
    }


def test_unknown_operation_name_decodes_as_unknown_like_kafka():
    data = (
        b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Allow",'
        b'"operation":"Teleport","host":"*"}]}'
    )
    (entry,) = decode_acls(data)
    assert entry.operation is AclOperation.UNKNOWN


@pytest.mark.parametrize(
    "data", [b"not json", b'{"version":2,"acls":[]}', b'{"version":1}', b"[]",
             (b'{"version":1,"acls":[{"principal":1,"host":"*","operation":"Read",'
             b'"permissionType":"Allow"}]}')]
)
def test_malformed_acl_znodes_raise_acl_data_error_naming_the_path(data):
    with pytest.raises(AclDataError, match="/kafka-acl/Topic/x"):
        decode_acls(data, "/kafka-acl/Topic/x")


def test_empty_znode_has_no_entries():
    assert decode_acls(b"") == set() and decode_acls(None) == set()


def test_literal_change_payload_is_java_enum_name_colon_name():
    pattern = ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx:1", LIT)
    assert encode_change(pattern) == b"TRANSACTIONAL_ID:tx:1"
    assert decode_change(b"TRANSACTIONAL_ID:tx:1", LIT) == pattern


def test_literal_change_payload_of_older_kafka_decodes():
    # Kafka 1.x wrote the PascalCase name; the name itself may contain ':'.
    assert decode_change(b"Group:PREFIXED:odd:name", LIT) == ResourcePattern(
        ResourceType.GROUP, "PREFIXED:odd:name", LIT
    )


def test_extended_change_payload_is_kafkas_json():
    pattern = ResourcePattern(ResourceType.TOPIC, "pay", PRE)
    assert encode_change(pattern) == (
        b'{"version":1,"resourceType":"TOPIC","name":"pay","patternType":"PREFIXED"}'
    )
    assert decode_change(encode_change(pattern), PRE) == pattern


@pytest.mark.parametrize("data, ptype", [(b"no-separator", LIT), (b"Planet:x", LIT),
                                         (b"{}", PRE), (b"\xff", LIT)])
def test_malformed_change_payloads_raise_acl_data_error(data, ptype):
    with pytest.raises(AclDataError):
        decode_change(data, ptype)


def test_change_sequence_numbers():
    assert change_sequence("acl_changes_0000000042") == 42
    assert change_sequence("token_change_0000000001") is None
    assert change_sequence("acl_changes_") is None
