"""The declared path -> ACL table, held against Kafka's own rules."""

from __future__ import annotations

from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions

from zk import acl_check, acl_store, credential_store, layout, requests, znode_acls

CREATOR_ALL = ACL(Permissions.ALL, Id("auth", ""))
READ_WORLD = ACL(Permissions.READ, Id("world", "anyone"))
# Kafka's ZkData.SensitiveRootPaths (ConfigType.User, ConfigType.Broker, DelegationTokensZNode).
KAFKA_SENSITIVE = {"/config/users", "/config/brokers", "/delegation_token/tokens"}


def kafka_default_acls(path: str) -> list[ACL]:
    """Kafka's ZkData.defaultAcls(isSecure=true, path) for a path that is not the old
    consumers' path: CREATOR_ALL_ACL, plus READ_ACL_UNSAFE unless sensitive (prefix test)."""
    acls = [CREATOR_ALL]
    if not any(path.startswith(root) for root in KAFKA_SENSITIVE):
        acls.append(READ_WORLD)
    return acls


KAFKA_PATHS = [
    "/config/users", "/config/users/alice", "/config/brokers", "/config/brokers/1",
    "/config/changes", "/config/changes/config_change_0000000001",
    "/delegation_token", "/delegation_token/tokens", "/delegation_token/tokens/abc",
    "/controller", "/controller_epoch", "/brokers", "/brokers/ids", "/brokers/ids/1",
    "/cluster", "/cluster/id", "/kafka-acl", "/kafka-acl/Topic/t", "/kafka-acl-changes",
    "/kafka-acl-changes/acl_changes_0000000001", "/kafka-acl-extended/prefixed/Topic/t",
    "/kafka-acl-extended-changes",
]


def test_kafka_paths_get_exactly_kafkas_acls() -> None:
    for path in KAFKA_PATHS:
        assert znode_acls.acl_for(path, secure=True) == kafka_default_acls(path), path


def test_our_sensitive_paths_are_only_stricter_than_kafka() -> None:
    for root in znode_acls.OUR_SENSITIVE_ROOTS:
        for path in (root.path, root.path + "/child"):
            assert znode_acls.acl_for(path, secure=True) == [CREATOR_ALL]
            # The brokers' identity keeps ALL, so a Kafka broker sharing it still writes.
            assert CREATOR_ALL in kafka_default_acls(path)


def test_kafkas_sensitive_roots_are_declared() -> None:
    assert {r.path for r in znode_acls.KAFKA_SENSITIVE_ROOTS} == KAFKA_SENSITIVE


def test_a_sibling_with_a_common_prefix_is_not_sensitive() -> None:
    assert not znode_acls.is_sensitive("/config/usersX")
    assert znode_acls.is_sensitive("/delegation_token/requests/k1")


def test_acls_off_is_the_open_acl() -> None:
    assert znode_acls.acl_for("/config/users/admin", secure=False) == list(OPEN_ACL_UNSAFE)


def test_spelled_paths_match_the_stores() -> None:
    assert znode_acls.CONFIG_USERS == credential_store.USERS_PATH
    assert znode_acls.REQUESTS == requests.REQUESTS
    assert set(znode_acls.ACL_ROOTS) == {acl_store.LITERAL_ACLS, acl_store.EXTENDED_ACLS,
                                         acl_store.LITERAL_CHANGES, acl_store.EXTENDED_CHANGES}
    assert credential_store.CHANGES_PATH.startswith(znode_acls.CONFIG + "/")
    assert layout.TOKEN_CHANGES in {r.path for r in znode_acls.OUR_SENSITIVE_ROOTS}


def test_matches_declared_reads_auth_back_as_the_creators_identity() -> None:
    stored = [ACL(Permissions.ALL, Id("sasl", "tokensvc")), READ_WORLD]
    assert znode_acls.matches_declared("/brokers", stored, secure=True)
    assert not znode_acls.matches_declared("/config/users", stored, secure=True)
    assert znode_acls.matches_declared("/config/users", stored[:1], secure=True)
    assert not znode_acls.matches_declared("/brokers", list(OPEN_ACL_UNSAFE), secure=True)
    assert znode_acls.matches_declared("/brokers", list(OPEN_ACL_UNSAFE), secure=False)


def test_open_paths_names_readable_secrets_and_writable_roots() -> None:
    owner = ACL(Permissions.ALL, Id("sasl", "tokensvc"))
    acls = {path: [owner, READ_WORLD] for path in znode_acls.TOKENSVC_ROOTS}
    for root in znode_acls.SENSITIVE_ROOTS:
        acls[root.path] = [owner]
    acls["/config/users/admin"] = [owner, READ_WORLD]
    acls["/kafka-acl"] = list(OPEN_ACL_UNSAFE)
    found = acl_check.open_paths(acls.get, lambda path: ["admin"] if path == "/config/users" else [])
    assert found == ["/kafka-acl (world-writable)", "/config/users/admin (world-readable)"]
    acls["/config/users/admin"] = [owner]
    acls["/kafka-acl"] = [owner, READ_WORLD]
    assert acl_check.open_paths(acls.get, lambda path: ["admin"]) == []
